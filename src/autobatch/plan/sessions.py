"""Live sessions: K camera-like streams that only ever want their latest frame.

Each of ``sessions`` streams produces a frame every ``1 / fps`` seconds,
starting at a random phase. A stream keeps one slot: a new frame overwrites a
frame still waiting there (the stale one is lost, never served). When the
worker is free it takes, by ``policy``:

``oldest-first``
    the single waiting frame that arrived first (batch 1);
``batch-waiting``
    the latest frame of every session that has one waiting, as one batch
    (the oldest ``max_batch_size`` if more are waiting).

This is not Triton's batcher (Triton never drops a request); it is the
client-side choice a video pipeline makes before anything reaches the server,
and it answers "how many streams can this device keep at F fps, and which
policy shares it fairly".

Pure: values in, values out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from autobatch.errors import ConfigError
from autobatch.plan.simulator import LatencyStats, ServiceModel, stream_frames

__all__ = ["SESSION_POLICIES", "SessionStats", "SessionsResult", "simulate_sessions"]

SESSION_POLICIES = ("oldest-first", "batch-waiting")


@dataclass(frozen=True)
class SessionStats:
    session: int
    frames: int
    """Frames the stream produced."""
    delivered: int
    """Frames served to completion."""
    overwritten: int
    """Frames replaced by a newer one before they were served."""
    fps: float
    """Delivered frames per second of the run."""
    latency: LatencyStats | None
    """Frame arrival to completion (plus the fixed latency), of delivered frames."""

    @property
    def overwritten_frac(self) -> float:
        return self.overwritten / self.frames if self.frames else 0.0

    def to_dict(self) -> dict[str, Any]:
        lat = self.latency
        return {
            "session": self.session,
            "frames": self.frames,
            "delivered": self.delivered,
            "overwritten": self.overwritten,
            "overwritten_frac": round(self.overwritten_frac, 4),
            "fps": round(self.fps, 3),
            "latency_ms": None
            if lat is None
            else {"p50": round(lat.p50_ms, 3), "p99": round(lat.p99_ms, 3)},
        }


@dataclass(frozen=True)
class SessionsResult:
    policy: str
    sessions: int
    fps: float
    duration_s: float
    per_session: tuple[SessionStats, ...]
    throughput_rps: float
    """Delivered frames per second, all sessions together."""
    latency: LatencyStats | None
    batches: int
    mean_batch: float
    utilisation: float

    @property
    def per_session_fps(self) -> list[float]:
        return [s.fps for s in self.per_session]

    @property
    def overwritten_frac(self) -> float:
        frames = sum(s.frames for s in self.per_session)
        return sum(s.overwritten for s in self.per_session) / frames if frames else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "sessions": self.sessions,
            "fps": self.fps,
            "duration_s": self.duration_s,
            "throughput_rps": round(self.throughput_rps, 3),
            "latency_ms": None if self.latency is None else self.latency.to_dict(),
            "mean_batch": round(self.mean_batch, 3),
            "batches": self.batches,
            "utilisation": round(self.utilisation, 4),
            "overwritten_frac": round(self.overwritten_frac, 4),
            "per_session_fps": [round(f, 3) for f in self.per_session_fps],
            "per_session": [s.to_dict() for s in self.per_session],
        }


def simulate_sessions(
    service: ServiceModel,
    sessions: int,
    fps: float,
    *,
    policy: str = "oldest-first",
    duration_s: float = 60.0,
    max_batch_size: int | None = None,
    seed: int = 0,
) -> SessionsResult:
    """Serve ``sessions`` streams at ``fps`` on one worker for ``duration_s``."""
    if policy not in SESSION_POLICIES:
        raise ConfigError(
            f"session_policy = {policy!r}: must be one of {', '.join(SESSION_POLICIES)}"
        )
    t_arr, sid_arr = stream_frames(sessions, fps, duration_s, seed)  # checks the three
    if max_batch_size is None:
        max_batch_size = sessions
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or (
        max_batch_size < 1
    ):
        raise ConfigError(f"max_batch_size = {max_batch_size!r}: must be an integer >= 1")
    t = t_arr.tolist()
    sid = sid_arr.tolist()
    n = len(t)
    frames = np.bincount(sid_arr, minlength=sessions).tolist()
    cap = 1 if policy == "oldest-first" else max_batch_size
    busy_s = [0.0] + [service.busy_ms(b) / 1000.0 for b in range(1, cap + 1)]
    curve_s = [0.0] + [service.curve_ms(b) / 1000.0 for b in range(1, cap + 1)]
    noise = [1.0] * n
    if service.noise_cv > 0:
        sigma = math.sqrt(math.log(1.0 + service.noise_cv**2))
        noise = np.random.default_rng([seed, 13]).lognormal(-sigma * sigma / 2, sigma, n).tolist()
    fixed_s = service.fixed_latency_ms / 1000.0

    waiting: list[float | None] = [None] * sessions
    n_waiting = 0
    overwritten = [0] * sessions
    latencies: list[list[float]] = [[] for _ in range(sessions)]
    batches = 0
    batch_total = 0
    busy_total = 0.0
    free_at = 0.0
    i = 0
    while True:
        # Frames that arrived while the worker was busy wait in (or overwrite) their slot.
        while i < n and t[i] <= free_at:
            s = sid[i]
            if waiting[s] is not None:
                overwritten[s] += 1
            else:
                n_waiting += 1
            waiting[s] = t[i]
            i += 1
        if n_waiting == 0:
            if i >= n:
                break
            free_at = t[i]
            continue
        ready = sorted((a, s) for s, a in enumerate(waiting) if a is not None)
        chosen = ready[:cap]
        size = len(chosen)
        took = busy_s[size] + curve_s[size] * (noise[batches] - 1.0)
        end = free_at + took
        for a, s in chosen:
            latencies[s].append(end - a + fixed_s)
            waiting[s] = None
        n_waiting -= size
        batches += 1
        batch_total += size
        busy_total += took
        free_at = end

    span = max(duration_s, free_at)
    per = []
    all_ms = []
    for s in range(sessions):
        ms = np.array(latencies[s]) * 1000.0
        all_ms.append(ms)
        per.append(
            SessionStats(
                session=s,
                frames=int(frames[s]),
                delivered=len(latencies[s]),
                overwritten=overwritten[s],
                fps=len(latencies[s]) / duration_s,
                latency=LatencyStats.of(ms),
            )
        )
    delivered = sum(p.delivered for p in per)
    return SessionsResult(
        policy=policy,
        sessions=sessions,
        fps=float(fps),
        duration_s=float(duration_s),
        per_session=tuple(per),
        throughput_rps=delivered / duration_s,
        latency=LatencyStats.of(np.concatenate(all_ms) if all_ms else np.empty(0)),
        batches=batches,
        mean_batch=batch_total / batches if batches else 0.0,
        utilisation=busy_total / span,
    )
