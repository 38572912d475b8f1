"""The open-loop engine: send each request at its scheduled time, whatever came before.

A closed-loop client waits for a response before it sends the next request, so
a slow server slows the client down and hides its own queueing. Here the
arrival times are drawn up front (:func:`autobatch.schedule.arrivals`) and one
dispatcher coroutine hands each request to the client when its time comes;
responses are collected by the tasks it starts. The run is bounded: after the
schedule ends, requests still in flight get ``drain_s`` to finish and are then
cancelled and counted as ``unfinished``.

The generator measures itself: every request records when it was scheduled
and when it was actually sent. If the send lag or the sent rate misses the
schedule (:class:`~autobatch.load.report.BehindLimits`), the report flags the
phase as ``behind`` and says by how much.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from autobatch.config import check_seed
from autobatch.errors import ConfigError, LoadError
from autobatch.load.report import (
    OK,
    BehindLimits,
    LoadReport,
    RequestRecord,
    summarize,
    write_jsonl,
)
from autobatch.load.transport import PROTOCOLS, classify_error, normalize_url, open_transport
from autobatch.schedule import Phase, Schedule, arrivals
from autobatch.traces import ArrivalTrace, write_trace

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Sender",
    "StopFlag",
    "drive",
    "run_load",
    "run_load_async",
    "sent_trace",
    "trace_schedule",
]

DEFAULT_TIMEOUT_S = 10.0
"""Per-request client timeout."""

_DRAIN_MARGIN_S = 1.0
"""Default drain beyond the request timeout, so that a request which times out at
the client is reported as ``timeout`` before the drain calls it ``unfinished``."""

_IDLE_SLICE_S = 0.05
"""Longest single sleep of the dispatcher, so a stop is noticed in an idle phase."""

_YIELD_AFTER = 32
"""After a catch-up burst this large the dispatcher yields before it reads the clock
again; smaller bursts go out when it next sleeps, saving a loop turn per send."""

_ERROR_CHARS = 300


class StopFlag(Protocol):
    """Anything with ``is_set()``: a ``threading.Event`` or an ``asyncio.Event``."""

    def is_set(self) -> bool: ...


OnRecord = Callable[[RequestRecord], Any]


class Sender(Protocol):
    """What :func:`drive` needs of a transport: ``await infer()`` sends one request and
    raises on failure (see :func:`~autobatch.load.transport.classify_error`)."""

    async def infer(self) -> Any: ...


def trace_schedule(trace: ArrivalTrace) -> Schedule:
    """The one-phase schedule a trace's report is summarised against (its mean rate)."""
    return Schedule((Phase("trace", len(trace) / trace.duration_s, trace.duration_s),))


def sent_trace(records: Sequence[RequestRecord], source: str = "autobatch load") -> ArrivalTrace:
    """What a run sent, as a trace: each request's actual send time, rows and priority."""
    sent = [r for r in records if r.sent_s is not None]
    if not sent:
        raise LoadError("no request was sent; there is no trace to record")
    return ArrivalTrace.of(
        [r.sent_s for r in sent], [r.rows for r in sent], [r.priority for r in sent], source=source
    )


class _Run:
    """State of one run; lives inside one event loop."""

    def __init__(
        self,
        sender: Sender,
        schedule: Schedule,
        seed: int,
        on_record: OnRecord | None,
        trace: ArrivalTrace | None = None,
    ) -> None:
        self.sender = sender
        self.schedule = schedule
        # Python lists: indexing numpy scalars in the hot loop costs more than it saves.
        self.rows: list[int] | None = None
        self.priority: list[int] | None = None
        if trace is None:
            drawn = arrivals(schedule, np.random.default_rng(seed))
            self.t_s: list[float] = drawn.t_s.tolist()
            self.phase: list[int] = drawn.phase.tolist()
        else:
            self.t_s = trace.t_s.tolist()
            self.phase = [0] * len(trace)
            if trace.multi_row:
                self.rows = trace.rows.tolist()
            if trace.priority is not None:
                self.priority = trace.priority.tolist()
        self.names = [p.name for p in schedule.phases]
        self.records: list[RequestRecord | None] = [None] * len(self.t_s)
        self.on_record = on_record
        self.callback_error: BaseException | None = None
        self.loop = asyncio.get_running_loop()
        self.t0 = 0.0

    def finish(
        self, k: int, sent_s: float | None, latency_ms: float | None, outcome: str, error: Any
    ) -> None:
        rec = RequestRecord(
            index=k,
            phase=self.names[self.phase[k]],
            phase_index=self.phase[k],
            scheduled_s=self.t_s[k],
            sent_s=sent_s,
            latency_ms=latency_ms,
            outcome=outcome,
            error=None if error is None else str(error)[:_ERROR_CHARS],
            rows=1 if self.rows is None else self.rows[k],
            priority=0 if self.priority is None else self.priority[k],
        )
        self.records[k] = rec
        if self.on_record is not None and self.callback_error is None:
            try:
                self.on_record(rec)
            except Exception as exc:
                # A broken callback ends the run (checked by the dispatcher) and is
                # re-raised once everything is cleaned up.
                self.callback_error = exc

    async def request(self, k: int) -> None:
        loop = self.loop
        sent = loop.time()
        sent_s = sent - self.t0
        try:
            if self.rows is None and self.priority is None:
                await self.sender.infer()
            else:
                # Only a trace's requests differ from one another (Sender.infer takes
                # these keywords when the transport is Triton's).
                await self.sender.infer(  # type: ignore[call-arg]
                    rows=None if self.rows is None else self.rows[k],
                    priority=0 if self.priority is None else self.priority[k],
                )
        except asyncio.CancelledError:
            self.finish(k, sent_s, None, "unfinished", "still running when the drain timeout ended")
            raise
        except Exception as exc:
            kind, message = classify_error(exc)
            self.finish(k, sent_s, (loop.time() - sent) * 1000.0, kind, message)
        else:
            self.finish(k, sent_s, (loop.time() - sent) * 1000.0, OK, None)

    async def run(self, drain_s: float, stop: StopFlag | None,
                  start_at: float | None = None) -> tuple[float | None, float]:
        """Dispatch and drain; returns (where in the schedule a stop ended it, elapsed s)."""
        loop = self.loop
        t_s = self.t_s
        n = len(t_s)
        tasks: set[asyncio.Task[None]] = set()
        if start_at is not None:
            while loop.time() < start_at and not (stop is not None and stop.is_set()):
                await asyncio.sleep(min(start_at - loop.time(), _IDLE_SLICE_S))
        # A given start is time 0 even when the set-up overran it: runs started together
        # stay aligned, and the lateness shows as send lag.
        self.t0 = t0 = loop.time() if start_at is None else start_at
        hard_end = t0 + self.schedule.duration_s + drain_s
        stopped_at: float | None = None
        i = 0
        try:
            while True:
                now = loop.time()
                if (stop is not None and stop.is_set()) or self.callback_error is not None:
                    stopped_at = now - t0
                    break
                if now >= hard_end:
                    break
                if i >= n:
                    # Idle tail of the schedule (or rate-0 phases at the end): keep the
                    # run as long as the schedule, so phase spans mean what they say.
                    if now >= t0 + self.schedule.duration_s:
                        break
                    await asyncio.sleep(min(t0 + self.schedule.duration_s - now, _IDLE_SLICE_S))
                    continue
                due = t0 + t_s[i]
                if due > now:
                    await asyncio.sleep(min(due - now, _IDLE_SLICE_S))
                    continue
                # Send everything that is due: after a late wake-up, catch up at once
                # rather than one request per loop turn.
                burst = 0
                while i < n and t0 + t_s[i] <= now:
                    task = loop.create_task(self.request(i))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    i += 1
                    burst += 1
                if burst >= _YIELD_AFTER:
                    # Let the started requests go out before looking at the clock again.
                    await asyncio.sleep(0)

            drain_end = hard_end if stopped_at is None else min(hard_end, loop.time() + drain_s)
            if tasks:
                timeout = max(0.0, drain_end - loop.time())
                _, pending = await asyncio.wait(set(tasks), timeout=timeout)
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
        except BaseException:
            # Cancelled from outside (or worse): take the in-flight requests down too,
            # so nothing outlives the run in an event loop that keeps going.
            for task in tasks:
                task.cancel()
            raise
        elapsed = loop.time() - t0

        # Dispatched but cancelled before they ever ran: never sent.
        for k in range(i):
            if self.records[k] is None:
                self.finish(k, None, None, "unfinished", "cancelled before it was sent")
        if stopped_at is None:
            for k in range(i, n):
                self.finish(k, None, None, "unsent", "the run ended before its time came")
        return stopped_at, elapsed

    def done_records(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if r is not None)


def _check_args(
    schedule: Schedule | ArrivalTrace,
    protocol: str,
    timeout_s: float,
    drain_s: float | None,
    batch_size: int,
) -> float:
    if not isinstance(schedule, (Schedule, ArrivalTrace)):
        raise ConfigError(
            f"schedule = {schedule!r}: must be an autobatch.schedule.Schedule or an "
            f"autobatch.traces.ArrivalTrace"
        )
    if isinstance(schedule, ArrivalTrace) and batch_size != 1:
        raise ConfigError(
            f"batch_size = {batch_size}: a trace gives each request's rows; leave batch_size 1",
            field="batch_size", value=batch_size,
        )
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"protocol = {protocol!r}: must be one of {', '.join(PROTOCOLS)}",
            field="protocol",
            value=protocol,
        )
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"timeout_ms = {timeout_s * 1000:g}: must be a number > 0")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size = {batch_size!r}: must be an integer >= 1")
    if drain_s is None:
        return timeout_s + _DRAIN_MARGIN_S
    if not (math.isfinite(drain_s) and drain_s >= 0):
        raise ConfigError(f"drain_s = {drain_s!r}: must be a number >= 0")
    return float(drain_s)


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
        raise ConfigError(
            f"out = {str(path)!r}: cannot write there: {exc.strerror or exc}",
            field="out",
            value=str(path),
        ) from exc


async def drive(
    sender: Sender,
    schedule: Schedule,
    *,
    seed: int = 0,
    drain_s: float = DEFAULT_TIMEOUT_S + _DRAIN_MARGIN_S,
    on_record: OnRecord | None = None,
    stop: StopFlag | None = None,
    trace: ArrivalTrace | None = None,
    start_at: float | None = None,
) -> tuple[tuple[RequestRecord, ...], float | None, float]:
    """The open-loop core, on any sender: ``(records, stopped_at_s, elapsed_s)``.

    ``stopped_at_s`` is the offset at which ``stop`` ended the run, None if it
    ran to the end. :func:`run_load_async` wraps this with a Triton transport;
    tests and embedders can hand it their own sender. With ``trace``, its
    arrivals are sent instead of ``schedule``'s (then :func:`trace_schedule`),
    and a multi-row or prioritised trace calls ``sender.infer(rows=, priority=)``.
    ``start_at`` (the event loop's clock, ``time.monotonic``): the instant the schedule's
    time 0 falls on, so runs in several processes send the same trace together.
    """
    run = _Run(sender, schedule, seed, on_record, trace)
    stopped_at, elapsed_s = await run.run(drain_s, stop, start_at)
    if run.callback_error is not None:
        raise run.callback_error
    return run.done_records(), stopped_at, elapsed_s


def _check_trace_fits(trace: ArrivalTrace, model: str, max_batch_size: int) -> None:
    """A request with more rows than the model takes would fail on the server: refuse first."""
    limit = max_batch_size or 1
    over = np.flatnonzero(trace.rows > limit)
    if over.shape[0]:
        k = int(over[0])
        raise ConfigError(
            f"{trace.source}: request {k}: rows = {int(trace.rows[k])}: must be <= the "
            f"max_batch_size of model {model!r} ({max_batch_size})",
            field="rows", value=int(trace.rows[k]),
        )


def _check_record_path(record_trace: str | Path | None) -> None:
    if record_trace is None:
        return
    p = Path(record_trace)
    if p.suffix.lower() not in (".csv", ".jsonl", ".ndjson", ".json"):
        raise ConfigError(
            f"record_trace = {str(p)!r}: suffix {p.suffix or '(none)'!r}: write a trace as .csv "
            f"or .jsonl", field="record_trace", value=str(p),
        )
    if not p.parent.is_dir():
        raise ConfigError(
            f"record_trace = {str(p)!r}: folder {str(p.parent)!r} does not exist",
            field="record_trace", value=str(p),
        )
    # Written after the run: what would fail then is refused now.
    if p.is_dir():
        raise ConfigError(f"record_trace = {str(p)!r}: is a directory: give a file name",
                          field="record_trace", value=str(p))
    if not os.access(p if p.exists() else p.parent, os.W_OK):
        raise ConfigError(f"record_trace = {str(p)!r}: cannot write there (permission denied)",
                          field="record_trace", value=str(p))


async def run_load_async(
    url: str,
    model: str,
    schedule: Schedule | ArrivalTrace,
    *,
    protocol: str = "grpc",
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    drain_s: float | None = None,
    batch_size: int = 1,
    out: str | Path | IO[str] | None = None,
    on_record: OnRecord | None = None,
    stop: StopFlag | None = None,
    limits: BehindLimits = BehindLimits(),
    record_trace: str | Path | None = None,
    start_at: float | None = None,
) -> LoadReport:
    """Drive ``model`` at ``url`` open-loop through ``schedule``; see :func:`run_load`."""
    drain_s = _check_args(schedule, protocol, timeout_s, drain_s, batch_size)
    check_seed(seed)
    normalize_url(url)  # a bad scheme is refused before ``out`` is opened (and emptied)
    _check_record_path(record_trace)
    trace = schedule if isinstance(schedule, ArrivalTrace) else None
    plan = trace_schedule(trace) if trace is not None else schedule
    assert isinstance(plan, Schedule)
    file, owned = _open_out(out)
    try:
        transport = await open_transport(
            url, model, protocol=protocol, timeout_s=timeout_s, batch_size=batch_size, seed=seed
        )
        try:
            if trace is not None:
                _check_trace_fits(trace, model, transport.max_batch_size)
            records, stopped_at, elapsed_s = await drive(
                transport, plan, seed=seed, drain_s=drain_s, on_record=on_record, stop=stop,
                trace=trace, start_at=start_at,
            )
        finally:
            await transport.close()
        if file is not None:
            try:
                write_jsonl(records, file)
                file.flush()
            except OSError as exc:
                raise LoadError(f"writing the request records failed: {exc}") from exc
    finally:
        if owned and file is not None:
            file.close()
    if record_trace is not None:
        write_trace(sent_trace(records, f"autobatch load of {model}"), record_trace)
    phases, total = summarize(plan, records, ran_s=stopped_at, limits=limits)
    return LoadReport(
        url=transport.url,
        model=model,
        protocol=protocol,
        seed=seed,
        batch_size=batch_size,
        timeout_s=timeout_s,
        schedule=plan,
        phases=phases,
        total=total,
        records=records,
        elapsed_s=elapsed_s,
        stopped=stopped_at is not None,
    )


def run_load(
    url: str,
    model: str,
    schedule: Schedule | ArrivalTrace,
    *,
    protocol: str = "grpc",
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    drain_s: float | None = None,
    batch_size: int = 1,
    out: str | Path | IO[str] | None = None,
    on_record: OnRecord | None = None,
    stop: StopFlag | None = None,
    limits: BehindLimits = BehindLimits(),
    record_trace: str | Path | None = None,
    start_at: float | None = None,
) -> LoadReport:
    """Drive ``model`` at ``url`` (``host:port``) open-loop through ``schedule``.

    Blocks until the run is over: at most ``schedule.duration_s + drain_s``
    after the first send, plus the set-up (connect, read the model config,
    one warm-up request). Runs its own event loop, so it can be called from
    any thread that has none running (from a coroutine, await
    :func:`run_load_async` instead).

    Args:
        protocol: ``grpc`` (default) or ``http``; ``url`` must be that port.
        seed: draws the arrival times and the synthetic inputs.
        timeout_s: per-request client timeout.
        drain_s: time after the schedule for in-flight requests to finish;
            default ``timeout_s + 1``. Those still running then are cancelled
            and counted as ``unfinished``.
        batch_size: the batch dimension of every request.
        out: a path or open text file; gets one JSON line per request.
        on_record: called with each :class:`RequestRecord` as it completes, on
            the event loop's thread; keep it quick. If it raises, the run stops
            and the exception is re-raised.
        stop: when set, no more requests are sent; in-flight ones drain.
        limits: when the generator counts as behind.
        record_trace: write what was sent (each request's send time, rows and
            priority) as a trace file here (``.csv`` or ``.jsonl``), for
            ``autobatch simulate --trace`` or another ``load --trace``.
        start_at: the ``time.monotonic()`` instant of the schedule's time 0 (the set-up
            runs before it); several generators given one send one trace together.

    ``schedule`` may be an :class:`~autobatch.traces.ArrivalTrace` instead: its
    requests go out at its times with its rows and priorities (the report has
    one phase, ``trace``, at its mean rate).

    Raises:
        ConfigError: bad arguments, an unknown model, an unwritable ``out``.
        LoadError: the server cannot be reached or rejects the first request.
    """
    return asyncio.run(
        run_load_async(
            url,
            model,
            schedule,
            protocol=protocol,
            seed=seed,
            timeout_s=timeout_s,
            drain_s=drain_s,
            batch_size=batch_size,
            out=out,
            on_record=on_record,
            stop=stop,
            limits=limits,
            record_trace=record_trace,
            start_at=start_at,
        )
    )
