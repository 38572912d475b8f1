"""Latest-only sessions: K camera-like streams that only ever want their newest frame.

Each of K streams produces a frame every ``1 / fps`` seconds, starting at a
random phase. A stream keeps one slot: a frame that arrives while the
stream's previous frame is still waiting overwrites it (the stale frame is
lost, never served). One request is in flight at a time; when it comes back,
the next one is chosen by the session policy:

``oldest-first``
    the single waiting frame that arrived first (batch 1);
``batch-waiting``
    the latest frame of every session that has one waiting, as one batch
    (the oldest up to ``max_rows`` rows if more are waiting);
``round-robin``
    one frame at a time, taking the sessions in turn: the next session after
    the one served last that has a frame waiting.

This is the client-side choice a video pipeline makes before anything reaches
the server; Triton itself never drops a request. The pieces here are shared
by the simulator (:func:`autobatch.plan.sessions.simulate_sessions`), the
SDK's :class:`autobatch.sdk.SessionBatcher` and ``autobatch load --sessions``
(:func:`autobatch.load.sessions.run_sessions`), so that a simulated run and a
real one follow one policy and report in one result type.

Pure: values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autobatch.errors import ConfigError
from autobatch.stats import LatencyStats

__all__ = [
    "SESSION_POLICIES",
    "SessionStats",
    "SessionsResult",
    "check_policy",
    "choose",
    "stream_frames",
    "summarize_sessions",
]

SESSION_POLICIES = ("oldest-first", "batch-waiting", "round-robin")


def check_policy(policy: Any) -> str:
    if policy not in SESSION_POLICIES:
        raise ConfigError(
            f"session_policy = {policy!r}: must be one of {', '.join(SESSION_POLICIES)}"
        )
    return str(policy)


def choose(
    policy: str,
    waiting: Sequence[tuple[float, int, int]],
    *,
    max_rows: int,
    last: int = -1,
) -> list[int]:
    """The sessions whose waiting frames go out next, in the order they go.

    ``waiting`` holds ``(arrived_s, session, rows)`` for every session with a
    frame waiting (any order, at least one). ``max_rows`` caps a batch of
    ``batch-waiting`` (a frame is never split, and the first always goes);
    ``last`` is the session served last, where ``round-robin`` continues from.
    Ties in arrival time go to the lower session number.
    """
    if policy == "oldest-first":
        return [min(waiting)[1]]
    if policy == "round-robin":
        after = [s for _, s, _ in waiting if s > last]
        return [min(after) if after else min(s for _, s, _ in waiting)]
    if policy == "batch-waiting":
        ordered = sorted(waiting)
        chosen = [ordered[0][1]]
        rows = ordered[0][2]
        for _, s, r in ordered[1:]:
            if rows + r > max_rows:
                break  # the oldest frame that does not fit starts the next batch
            chosen.append(s)
            rows += r
        return chosen
    raise ConfigError(f"session_policy = {policy!r}: must be one of {', '.join(SESSION_POLICIES)}")


def stream_frames(
    sessions: int, fps: float, duration_s: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Frame times and session ids of periodic streams with random phases, sorted by time.

    The same ``seed`` gives the same frames to the simulator and to a real run.
    """
    if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
        raise ConfigError(f"sessions = {sessions!r}: must be an integer >= 1")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (
        math.isfinite(fps) and fps > 0
    ):
        raise ConfigError(f"fps = {fps!r}: must be a number > 0")
    if isinstance(duration_s, bool) or not isinstance(duration_s, (int, float)) or not (
        math.isfinite(duration_s) and duration_s > 0
    ):
        raise ConfigError(f"duration_s = {duration_s!r}: must be a number > 0")
    period = 1.0 / fps
    rng = np.random.default_rng(seed)
    offsets = rng.uniform(0.0, period, size=sessions)
    times, ids = [], []
    for s, off in enumerate(offsets):
        n = int(math.floor((duration_s - off) / period)) + 1 if off < duration_s else 0
        ts = off + np.arange(n, dtype=np.float64) * period
        ts = ts[ts < duration_s]
        times.append(ts)
        ids.append(np.full(ts.shape[0], s, dtype=np.int64))
    t = np.concatenate(times)
    sid = np.concatenate(ids)
    order = np.argsort(t, kind="stable")
    return t[order], sid[order]


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionStats:
    session: int
    frames: int
    """Frames the stream produced."""
    delivered: int
    """Frames served to completion."""
    overwritten: int
    """Frames replaced by a newer one before they were sent."""
    fps: float
    """Delivered frames per second of the run (``delivered / duration_s``)."""
    latency: LatencyStats | None
    """Frame arrival to its result (the caller's view), of delivered frames."""
    failed: int = 0
    """Frames sent whose request failed (a real run only: an error or a timeout)."""

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
            "failed": self.failed,
            "overwritten_frac": round(self.overwritten_frac, 4),
            "fps": round(self.fps, 3),
            "latency_ms": None
            if lat is None
            else {"p50": round(lat.p50_ms, 3), "p99": round(lat.p99_ms, 3)},
        }


@dataclass(frozen=True)
class SessionsResult:
    """One sessions run, simulated (``simulate --sessions``) or measured
    (``load --sessions``): the same fields either way."""

    policy: str
    sessions: int
    fps: float
    duration_s: float
    per_session: tuple[SessionStats, ...]
    throughput_rps: float
    """Delivered frames per second, all sessions together."""
    latency: LatencyStats | None
    """Over every delivered frame of every session."""
    batches: int
    """Requests sent (one batch each)."""
    mean_batch: float
    """Frames per request."""
    utilisation: float | None
    """Share of the run the device was busy: simulated; None for a real run
    unless the server's own timers were read."""
    mean_request_ms: float | None = None
    """Mean time one request was out, sent to answered: the cycle of the
    one-request-in-flight loop (the device's time plus the trip and the client)."""
    measured: bool = False
    """True for a run against a real server."""
    warnings: tuple[str, ...] = ()
    """A real run's caveats (a frame clock that fell behind, failed frames)."""

    @property
    def per_session_fps(self) -> list[float]:
        return [s.fps for s in self.per_session]

    @property
    def mean_session_fps(self) -> float:
        return sum(self.per_session_fps) / len(self.per_session) if self.per_session else 0.0

    @property
    def slowest_session_fps(self) -> float:
        return min(self.per_session_fps) if self.per_session else 0.0

    @property
    def frames(self) -> int:
        return sum(s.frames for s in self.per_session)

    @property
    def overwritten_frac(self) -> float:
        frames = self.frames
        return sum(s.overwritten for s in self.per_session) / frames if frames else 0.0

    @property
    def failed(self) -> int:
        return sum(s.failed for s in self.per_session)

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "sessions": self.sessions,
            "fps": self.fps,
            "duration_s": self.duration_s,
            "measured": self.measured,
            "throughput_rps": round(self.throughput_rps, 3),
            "latency_ms": None if self.latency is None else self.latency.to_dict(),
            "mean_batch": round(self.mean_batch, 3),
            "batches": self.batches,
            "utilisation": None if self.utilisation is None else round(self.utilisation, 4),
            "mean_request_ms": None if self.mean_request_ms is None else round(self.mean_request_ms, 3),
            "overwritten_frac": round(self.overwritten_frac, 4),
            "failed": self.failed,
            "mean_session_fps": round(self.mean_session_fps, 3),
            "slowest_session_fps": round(self.slowest_session_fps, 3),
            "per_session_fps": [round(f, 3) for f in self.per_session_fps],
            "per_session": [s.to_dict() for s in self.per_session],
            "warnings": list(self.warnings),
        }


def summarize_sessions(
    *,
    policy: str,
    sessions: int,
    fps: float,
    duration_s: float,
    frames: Sequence[int],
    overwritten: Sequence[int],
    latencies_ms: Sequence[Sequence[float] | np.ndarray],
    batches: int,
    batch_frames: int,
    utilisation: float | None,
    failed: Sequence[int] | None = None,
    mean_request_ms: float | None = None,
    measured: bool = False,
    warnings: Sequence[str] = (),
) -> SessionsResult:
    """Per-session and overall figures from what each session produced and got back.

    ``latencies_ms[s]`` are the delivered frames of session ``s``;
    ``batch_frames`` is the number of frames over all ``batches``.
    """
    per = []
    all_ms = []
    for s in range(sessions):
        ms = np.asarray(latencies_ms[s], dtype=np.float64)
        all_ms.append(ms)
        per.append(
            SessionStats(
                session=s,
                frames=int(frames[s]),
                delivered=int(ms.shape[0]),
                overwritten=int(overwritten[s]),
                fps=ms.shape[0] / duration_s,
                latency=LatencyStats.of(ms),
                failed=0 if failed is None else int(failed[s]),
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
        mean_batch=batch_frames / batches if batches else 0.0,
        utilisation=utilisation,
        mean_request_ms=mean_request_ms,
        measured=measured,
        warnings=tuple(warnings),
    )
