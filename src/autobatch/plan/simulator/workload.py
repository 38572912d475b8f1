"""What arrives: arrival times, priorities and phases of a simulated run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autobatch.config import check_seed
from autobatch.errors import ConfigError
from autobatch.schedule import Schedule, arrivals, schedule_from_options
from autobatch.sessions import stream_frames  # the frames of `simulate --sessions` and `load --sessions`
from autobatch.traces import ArrivalTrace, RowsSpec, draw_rows, read_trace

__all__ = [
    "SEND_GAP_S",
    "Workload",
    "build_workload",
    "check_priority_share",
    "spread_same_times",
    "stream_frames",
]

SEND_GAP_S = 60e-6
"""How far apart requests that share a timestamp reach Triton when one client sends
them. Triton batches what is in its queue together, but a burst from one client
arrives a request at a time: ``autobatch load`` (gRPC) sends a burst of 8 in a
median 0.42 ms on the 2-core test machine, and the real server then batches it
as arriving requests, not as a queue that filled at once (``benchmarks/bursts.py``
measures both). Schedules and traces are spread by this much unless told
otherwise; 0 models requests that truly queue at one instant."""


def check_priority_share(level: object, share: object) -> None:
    """One ``priority_mix`` entry: a level (an integer >= 0) and its share (a finite number >= 0)."""
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or level < 0:
        raise ConfigError(f"priority_mix level {level!r}: must be an integer >= 0")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not (
        math.isfinite(share) and share >= 0
    ):
        raise ConfigError(f"priority_mix share of level {level} = {share!r}: must be a number >= 0")


def spread_same_times(t_s: np.ndarray, gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Times with the k-th of each group of equal times moved ``k * gap_s`` later,
    and the order that sorts them (apply it to every per-request array)."""
    t = np.asarray(t_s, dtype=np.float64)
    if not (math.isfinite(gap_s) and gap_s >= 0):
        raise ConfigError(f"burst_gap_s = {gap_s!r}: must be a number >= 0")
    n = t.shape[0]
    same = t[1:] == t[:-1] if n > 1 else np.zeros(0, dtype=bool)
    if gap_s == 0 or not same.any():
        return t, np.arange(n)
    idx = np.arange(n)
    first = np.maximum.accumulate(np.where(np.r_[True, ~same], idx, 0))
    spread = t + (idx - first) * gap_s
    order = np.argsort(spread, kind="stable")
    return spread[order], order


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
    rows: np.ndarray | None = None
    """Rows of each request (its batch dimension); None is one row each."""

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
        if self.rows is not None:
            rows = np.asarray(self.rows)
            if rows.shape != t.shape:
                raise ConfigError("workload rows must have one entry per arrival")
            if rows.shape[0] and (not np.issubdtype(rows.dtype, np.integer) or rows.min() < 1):
                bad = rows[0] if not np.issubdtype(rows.dtype, np.integer) else rows.min()
                raise ConfigError(f"workload rows = {bad!r}: every request must have an integer >= 1")
            object.__setattr__(self, "rows", rows.astype(np.int64))

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
        rows: RowsSpec | None = None,
        burst_gap_s: float = SEND_GAP_S,
        label: str | None = None,
    ) -> Workload:
        """The arrivals ``autobatch load`` would send for ``schedule`` and ``seed``.

        ``rows``: rows per request, a fixed number or a distribution
        ``{rows: share}`` (drawn with ``seed``); default one row each.
        ``burst_gap_s``: how far apart the requests of a burst reach the server
        (:data:`SEND_GAP_S`); 0 queues them at one instant.
        """
        check_seed(seed)
        drawn = arrivals(schedule, np.random.default_rng(seed))
        t, order = spread_same_times(np.array(drawn.t_s, dtype=np.float64), burst_gap_s)
        prio = _priorities(len(t), priority_mix, seed)
        return cls(
            rows=None if rows is None else draw_rows(len(t), rows, seed)[order],
            t_s=t,
            duration_s=schedule.duration_s,
            priority=None if prio is None else prio[order],
            phase=np.array(drawn.phase, dtype=np.int64)[order],
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
        rows: RowsSpec | None = None,
    ) -> Workload:
        schedule = Schedule.constant(rate_rps, duration_s, name="poisson")
        return cls.from_schedule(
            schedule, seed, priority_mix=priority_mix, rows=rows,
            label=f"Poisson at {rate_rps:g} rps",
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
        rows: RowsSpec | None = None,
        burst_gap_s: float = SEND_GAP_S,
    ) -> Workload:
        from autobatch.schedule import Phase

        schedule = Schedule((Phase("bursty", rate_rps, duration_s, "bursty", burst_size),))
        return cls.from_schedule(
            schedule,
            seed,
            priority_mix=priority_mix,
            rows=rows,
            burst_gap_s=burst_gap_s,
            label=f"bursts of {burst_size} at {rate_rps:g} rps",
        )

    @classmethod
    def from_trace(
        cls, trace: ArrivalTrace, *, burst_gap_s: float = SEND_GAP_S, label: str | None = None
    ) -> Workload:
        """The arrivals of a trace file (:func:`autobatch.traces.read_trace`).

        Requests that share a timestamp are spread by ``burst_gap_s``, as
        ``autobatch load --trace`` sends them (:data:`SEND_GAP_S`); 0 keeps them at
        one instant.
        """
        t, order = spread_same_times(trace.t_s, burst_gap_s)
        return cls(
            t_s=t,
            duration_s=max(trace.duration_s, float(t[-1])),
            priority=None if trace.priority is None else trace.priority[order],
            rows=trace.rows[order],
            label=label or f"trace {trace.source} ({len(trace.t_s)} requests)",
        )

    @classmethod
    def streams(cls, sessions: int, fps: float, duration_s: float, seed: int = 0) -> Workload:
        """``sessions`` periodic streams at ``fps``, each starting at a random phase.

        Every frame is a request (Triton queues them all; the sessions model in
        :mod:`autobatch.plan.sessions` is the one that overwrites stale frames).
        """
        check_seed(seed)
        t = stream_frames(sessions, fps, duration_s, seed)[0]
        return cls(t_s=t, duration_s=duration_s, label=f"{sessions} streams at {fps:g} fps")


def build_workload(
    *,
    rate_rps: float | None = None,
    duration_s: float | None = None,
    schedule: str | Path | None = None,
    requests: int | None = None,
    burst_size: int = 0,
    trace: str | Path | None = None,
    trace_model: str | None = None,
    rows: RowsSpec | None = None,
    priority_mix: Mapping[int, float] | None = None,
    burst_gap_s: float = SEND_GAP_S,
    seed: int = 0,
) -> Workload:
    """The workload of ``autobatch simulate``'s options: a rate, a schedule file or a trace file.

    ``rows`` (a number or shares) goes with a rate or a schedule; a trace brings
    its own rows and priorities. Errors name the option's field and value.
    """
    if trace is None:
        plan = schedule_from_options(
            rate_rps=rate_rps, duration_s=duration_s, path=schedule, requests=requests,
            burst_size=burst_size, allow_idle=False,
        )
        return Workload.from_schedule(
            plan, seed, priority_mix=priority_mix, rows=rows, burst_gap_s=burst_gap_s
        )
    for name, value in (("rate", rate_rps), ("schedule", schedule), ("rows", rows),
                        ("priority_mix", priority_mix), ("requests", requests)):
        if value is not None:
            raise ConfigError(
                f"{name} = {value!r}: a trace brings its own arrivals, rows and priorities",
                field=name, value=value,
            )
    return Workload.from_trace(read_trace(trace, model=trace_model), burst_gap_s=burst_gap_s)


def _priorities(n: int, mix: Mapping[int, float] | None, seed: int) -> np.ndarray | None:
    if not mix:
        return None
    for level, share in mix.items():
        check_priority_share(level, share)
    levels = sorted(mix)
    weights = np.array([mix[k] for k in levels], dtype=np.float64)
    if weights.sum() <= 0:
        raise ConfigError(
            f"priority_mix = {dict(mix)!r}: levels must be >= 0 and shares >= 0, not all 0"
        )
    rng = np.random.default_rng([seed, 7])
    return np.array(levels, dtype=np.int64)[
        rng.choice(len(levels), size=n, p=weights / weights.sum())
    ]
