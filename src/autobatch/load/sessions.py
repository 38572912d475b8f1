"""``autobatch load --sessions``: K latest-only streams against a real Triton.

Each of K sessions produces a frame every ``1 / fps`` seconds from a random
phase: the very frame times ``autobatch simulate --sessions`` draws for the
same ``seed`` (:func:`autobatch.sessions.stream_frames`). Every frame is
offered to the SDK's :class:`~autobatch.sdk.SessionBatcher` when its time
comes; the batcher keeps one request in flight and each session's newest
frame waiting, and picks the next request by the session policy. So what is
measured here is what a user of the SDK gets, and the result is the
simulator's own type, :class:`~autobatch.sessions.SessionsResult`.

Latency is the caller's: from the moment a frame is offered to the moment its
result is back. The frame clock measures itself (how late each frame was
offered) and the result warns when it fell behind.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from autobatch.config import check_seed
from autobatch.errors import AutobatchError, ConfigError, LoadError
from autobatch.load.runner import DEFAULT_TIMEOUT_S, StopFlag
from autobatch.load.transport import (
    PROTOCOLS,
    classify_error,
    normalize_url,
    synthesize_inputs,
)
from autobatch.sdk import SessionBatcher, SessionStatistics, TritonBatchClient
from autobatch.sessions import SessionsResult, check_policy, stream_frames, summarize_sessions

__all__ = ["FrameRecord", "run_sessions", "run_sessions_async"]

_IDLE_SLICE_S = 0.05
"""Longest single sleep of the frame clock, so a stop is noticed between sparse frames."""

_MAX_LAG_P99_MS = 5.0
"""A frame clock whose p99 lag is above this is behind (as :class:`~autobatch.load.BehindLimits`)."""


@dataclass(frozen=True, slots=True)
class FrameRecord:
    """One frame of a sessions run. Offsets are seconds from the start of the streams."""

    index: int
    session: int
    scheduled_s: float
    """When its stream produced it."""
    offered_s: float | None
    """When the frame clock offered it to the session batcher; None if it never did."""
    latency_ms: float | None
    """Offered to result; None unless delivered."""
    outcome: str
    """``ok``, ``overwritten`` (a newer frame of its session replaced it before it
    was sent), a failure kind as in :attr:`autobatch.load.RequestRecord.outcome`
    (``timeout``, ``UNAVAILABLE``, ...), ``unfinished`` (still waiting or out when
    the drain ended) or ``unsent``."""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "session": self.session,
            "scheduled_s": round(self.scheduled_s, 6),
            "offered_s": None if self.offered_s is None else round(self.offered_s, 6),
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 3),
            "outcome": self.outcome,
            "error": self.error,
        }


def _check_args(protocol: str, timeout_s: float, drain_s: float | None, rows: int) -> float:
    if protocol not in PROTOCOLS:
        raise ConfigError(f"protocol = {protocol!r}: must be one of {', '.join(PROTOCOLS)}",
                          field="protocol", value=protocol)
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"timeout_ms = {timeout_s * 1000:g}: must be a number > 0")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ConfigError(f"batch_size = {rows!r}: must be an integer >= 1 (rows per frame)")
    if drain_s is None:
        return timeout_s + 1.0
    if not (isinstance(drain_s, (int, float)) and math.isfinite(drain_s) and drain_s >= 0):
        raise ConfigError(f"drain_s = {drain_s!r}: must be a number >= 0")
    return float(drain_s)


async def run_sessions_async(
    url: str,
    model: str,
    sessions: int,
    fps: float,
    *,
    policy: str = "batch-waiting",
    duration_s: float = 10.0,
    protocol: str = "grpc",
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    drain_s: float | None = None,
    rows: int = 1,
    max_batch_size: int | None = None,
    out: str | Path | IO[str] | None = None,
    stop: StopFlag | None = None,
    on_frame: Callable[[FrameRecord], Any] | None = None,
) -> SessionsResult:
    """Drive ``sessions`` streams at ``fps`` for ``duration_s``; see :func:`run_sessions`."""
    policy = check_policy(policy)
    check_seed(seed)
    t_arr, sid_arr = stream_frames(sessions, fps, duration_s, seed)  # checks the three
    drain_s = _check_args(protocol, timeout_s, drain_s, rows)
    host_port = normalize_url(url)
    file, owned = _open_out(out)
    try:
        client = TritonBatchClient(host_port, model, protocol=protocol,  # type: ignore[arg-type]
                                   client_timeout_s=timeout_s)
        try:
            await client.start()
            inputs = {d.name: d.data for d in synthesize_inputs(
                client.model_config, batch_size=rows, seed=seed, model=model)}
            try:
                # One request outside the clock: a model that refuses it is a set-up error.
                await client.infer(inputs)
            except AutobatchError as exc:
                raise LoadError(f"model {model!r} failed the first (warm-up) frame: {exc}; "
                                "nothing was measured") from exc
            batcher = SessionBatcher(client, policy=policy, max_batch_size=max_batch_size)
            records, ran_s = await _drive(batcher, inputs, t_arr.tolist(), sid_arr.tolist(),
                                          duration_s, drain_s, stop, on_frame)
            stats = batcher.statistics()
        finally:
            await client.close(drain=False)
        if file is not None:
            try:
                for r in records:
                    file.write(json.dumps(r.to_dict(), separators=(",", ":")) + "\n")
                file.flush()
            except OSError as exc:
                raise LoadError(f"writing the frame records failed: {exc}") from exc
    finally:
        if owned and file is not None:
            file.close()
    return _summarize(records, policy, sessions, fps, ran_s, stats)


async def _drive(
    batcher: SessionBatcher,
    inputs: dict[str, np.ndarray],
    t_s: list[float],
    sid: list[int],
    duration_s: float,
    drain_s: float,
    stop: StopFlag | None,
    on_frame: Callable[[FrameRecord], Any] | None,
) -> tuple[list[FrameRecord], float]:
    loop = asyncio.get_running_loop()
    n = len(t_s)
    records: list[FrameRecord | None] = [None] * n
    tasks: set[asyncio.Task[None]] = set()

    def finish(rec: FrameRecord) -> None:
        records[rec.index] = rec
        if on_frame is not None:
            on_frame(rec)

    async def offer(k: int, t0: float) -> None:
        offered = loop.time()
        offered_s = offered - t0
        try:
            result = await batcher.submit(sid[k], inputs)
        except asyncio.CancelledError:
            finish(FrameRecord(k, sid[k], t_s[k], offered_s, None, "unfinished",
                               "still waiting or out when the drain ended"))
            raise
        except AutobatchError as exc:
            kind, message = classify_error(exc.__cause__ or exc)
            finish(FrameRecord(k, sid[k], t_s[k], offered_s, None, kind, message[:300]))
            return
        if result is None:
            finish(FrameRecord(k, sid[k], t_s[k], offered_s, None, "overwritten"))
        else:
            finish(FrameRecord(k, sid[k], t_s[k], offered_s, (loop.time() - offered) * 1000.0, "ok"))

    t0 = loop.time()
    stopped_at: float | None = None
    i = 0
    try:
        while i < n:
            now = loop.time()
            if stop is not None and stop.is_set():
                stopped_at = now - t0
                break
            due = t0 + t_s[i]
            if due > now:
                await asyncio.sleep(min(due - now, _IDLE_SLICE_S))
                continue
            while i < n and t0 + t_s[i] <= now:
                task = loop.create_task(offer(i, t0))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                i += 1
            # Let the offered frames take their slots in order before the clock moves on.
            await asyncio.sleep(0)
        if stopped_at is None:
            left = t0 + duration_s - loop.time()
            if left > 0 and not (stop is not None and stop.is_set()):
                await asyncio.sleep(left)
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=drain_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    for k in range(n):
        if records[k] is None:
            records[k] = FrameRecord(k, sid[k], t_s[k], None, None, "unsent",
                                     "the run ended before its time came")
    ran_s = duration_s if stopped_at is None else max(stopped_at, 1e-9)
    return [r for r in records if r is not None and r.scheduled_s < ran_s], ran_s


def _summarize(
    records: list[FrameRecord],
    policy: str,
    sessions: int,
    fps: float,
    ran_s: float,
    stats: SessionStatistics,
) -> SessionsResult:
    frames = [0] * sessions
    overwritten = [0] * sessions
    failed = [0] * sessions
    latencies: list[list[float]] = [[] for _ in range(sessions)]
    lags = []
    kinds: dict[str, int] = {}
    for r in records:
        frames[r.session] += 1
        if r.offered_s is not None:
            lags.append((r.offered_s - r.scheduled_s) * 1000.0)
        if r.outcome == "ok":
            assert r.latency_ms is not None
            latencies[r.session].append(r.latency_ms)
        elif r.outcome == "overwritten":
            overwritten[r.session] += 1
        else:
            failed[r.session] += 1
            kinds[r.outcome] = kinds.get(r.outcome, 0) + 1
    warnings = []
    if lags:
        lag_p99 = float(np.percentile(lags, 99))
        if lag_p99 > _MAX_LAG_P99_MS:
            warnings.append(f"the frame clock fell behind: p99 lag {lag_p99:.1f} ms (limit "
                            f"{_MAX_LAG_P99_MS:g} ms); the machine is too busy for these figures")
    if kinds:
        listed = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        warnings.append(f"{sum(kinds.values())} frames failed ({listed})")
    return summarize_sessions(
        policy=policy,
        sessions=sessions,
        fps=fps,
        duration_s=ran_s,
        frames=frames,
        overwritten=overwritten,
        latencies_ms=latencies,
        batches=stats.batches,
        batch_frames=stats.frames_sent,
        utilisation=None,
        failed=failed,
        mean_request_ms=stats.mean_request_ms,
        measured=True,
        warnings=warnings,
    )


def _open_out(out: str | Path | IO[str] | None) -> tuple[IO[str] | None, bool]:
    """Open ``out`` before the run, so a bad path fails in a second, not after the load."""
    if out is None:
        return None, False
    if hasattr(out, "write"):
        return out, False  # type: ignore[return-value]
    path = Path(out)  # type: ignore[arg-type]
    try:
        return path.open("w", encoding="utf-8"), True
    except OSError as exc:
        raise ConfigError(f"out = {str(path)!r}: cannot write there: {exc.strerror or exc}",
                          field="out", value=str(path)) from exc


def run_sessions(
    url: str,
    model: str,
    sessions: int,
    fps: float,
    *,
    policy: str = "batch-waiting",
    duration_s: float = 10.0,
    protocol: str = "grpc",
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    drain_s: float | None = None,
    rows: int = 1,
    max_batch_size: int | None = None,
    out: str | Path | IO[str] | None = None,
    stop: StopFlag | None = None,
    on_frame: Callable[[FrameRecord], Any] | None = None,
) -> SessionsResult:
    """Drive ``sessions`` latest-only streams at ``fps`` against ``model`` at ``url``.

    Blocks for ``duration_s`` of streams plus the drain (frames still waiting
    are served, as the simulator serves them), plus the set-up (read the
    model's config, one warm-up frame). Runs its own event loop; from a
    coroutine, await :func:`run_sessions_async`.

    Args:
        policy: ``oldest-first``, ``batch-waiting`` or ``round-robin``.
        seed: the streams' phases (the simulator's for the same seed) and the inputs.
        timeout_s: per-request client timeout.
        drain_s: time after the streams end for the last frames; default
            ``timeout_s + 1``. Frames still waiting or out then are ``unfinished``.
        rows: rows (batch dimension) of every frame.
        max_batch_size: rows per request under ``batch-waiting`` (default the model's).
        out: a path or open text file; gets one JSON line per frame.
        stop: when set, no more frames are offered; fps then count over the time run.
        on_frame: called with each :class:`FrameRecord` as it completes.

    Raises:
        ConfigError: bad arguments, an unknown model, an unwritable ``out``.
        TritonError: the server cannot be reached or its config read.
        LoadError: the model fails the warm-up frame.
    """
    return asyncio.run(run_sessions_async(
        url, model, sessions, fps, policy=policy, duration_s=duration_s, protocol=protocol,
        seed=seed, timeout_s=timeout_s, drain_s=drain_s, rows=rows,
        max_batch_size=max_batch_size, out=out, stop=stop, on_frame=on_frame,
    ))
