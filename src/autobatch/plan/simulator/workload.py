"""What arrives: arrival times, priorities and phases of a simulated run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from autobatch.errors import ConfigError
from autobatch.schedule import Schedule, arrivals
from autobatch.sessions import stream_frames  # the frames of `simulate --sessions` and `load --sessions`

__all__ = ["Workload", "stream_frames"]


@dataclass(frozen=True)
class Workload:
    """Arrival times (seconds from 0, sorted), optionally with priorities and phases."""

    t_s: np.ndarray
    duration_s: float
    """How long arrivals were drawn for (throughput is counted over at least this)."""
    priority: np.ndarray | None = None
    """Triton priority of each request (0 = the profile's default level)."""
    phase: np.ndarray | None = None
    """Phase index of each request, for per-phase results."""
    phase_names: tuple[str, ...] = ()
    phase_starts_s: tuple[float, ...] = ()
    phase_durations_s: tuple[float, ...] = ()
    label: str = "workload"

    def __post_init__(self) -> None:
        t = np.asarray(self.t_s, dtype=np.float64)
        if t.ndim != 1:
            raise ConfigError("workload arrival times must be a 1-d array")
        if t.shape[0] > 1 and np.any(np.diff(t) < 0):
            raise ConfigError("workload arrival times must be sorted")
        if t.shape[0] and t[0] < 0:
            raise ConfigError("workload arrival times must be >= 0")
        object.__setattr__(self, "t_s", t)
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ConfigError(f"workload duration_s = {self.duration_s!r}: must be > 0")
        for name in ("priority", "phase"):
            arr = getattr(self, name)
            if arr is not None:
                arr = np.asarray(arr, dtype=np.int64)
                if arr.shape != t.shape:
                    raise ConfigError(f"workload {name} must have one entry per arrival")
                object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    @property
    def offered_rps(self) -> float:
        return len(self) / self.duration_s

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    def from_schedule(
        cls,
        schedule: Schedule,
        seed: int = 0,
        *,
        priority_mix: Mapping[int, float] | None = None,
        label: str | None = None,
    ) -> Workload:
        """The arrivals ``autobatch load`` would send for ``schedule`` and ``seed``."""
        drawn = arrivals(schedule, np.random.default_rng(seed))
        t = np.array(drawn.t_s, dtype=np.float64)
        return cls(
            t_s=t,
            duration_s=schedule.duration_s,
            priority=_priorities(len(t), priority_mix, seed),
            phase=np.array(drawn.phase, dtype=np.int64),
            phase_names=tuple(p.name for p in schedule.phases),
            phase_starts_s=schedule.starts_s,
            phase_durations_s=tuple(p.duration_s for p in schedule.phases),
            label=label or f"schedule of {len(schedule.phases)} phase(s)",
        )

    @classmethod
    def poisson(
        cls,
        rate_rps: float,
        duration_s: float,
        seed: int = 0,
        *,
        priority_mix: Mapping[int, float] | None = None,
    ) -> Workload:
        schedule = Schedule.constant(rate_rps, duration_s, name="poisson")
        return cls.from_schedule(
            schedule, seed, priority_mix=priority_mix, label=f"Poisson at {rate_rps:g} rps"
        )

    @classmethod
    def bursty(
        cls,
        rate_rps: float,
        duration_s: float,
        burst_size: int,
        seed: int = 0,
        *,
        priority_mix: Mapping[int, float] | None = None,
    ) -> Workload:
        from autobatch.schedule import Phase

        schedule = Schedule((Phase("bursty", rate_rps, duration_s, "bursty", burst_size),))
        return cls.from_schedule(
            schedule,
            seed,
            priority_mix=priority_mix,
            label=f"bursts of {burst_size} at {rate_rps:g} rps",
        )

    @classmethod
    def streams(cls, sessions: int, fps: float, duration_s: float, seed: int = 0) -> Workload:
        """``sessions`` periodic streams at ``fps``, each starting at a random phase.

        Every frame is a request (Triton queues them all; the sessions model in
        :mod:`autobatch.plan.sessions` is the one that overwrites stale frames).
        """
        t = stream_frames(sessions, fps, duration_s, seed)[0]
        return cls(t_s=t, duration_s=duration_s, label=f"{sessions} streams at {fps:g} fps")


def _priorities(n: int, mix: Mapping[int, float] | None, seed: int) -> np.ndarray | None:
    if not mix:
        return None
    levels = sorted(mix)
    weights = np.array([mix[k] for k in levels], dtype=np.float64)
    if any(k < 0 for k in levels) or np.any(weights < 0) or weights.sum() <= 0:
        raise ConfigError(
            f"priority_mix = {dict(mix)!r}: levels must be >= 0 and shares >= 0, not all 0"
        )
    rng = np.random.default_rng([seed, 7])
    return np.array(levels, dtype=np.int64)[
        rng.choice(len(levels), size=n, p=weights / weights.sum())
    ]
