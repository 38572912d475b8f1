"""A generic asyncio micro-batcher: many callers' items in, one batch function call out.

``await batcher.submit(item)`` queues ``item`` and returns its own result once
the batch it was sent in comes back. A batch is flushed when one of these holds
and fewer than ``max_in_flight`` batches are out:

``full``   the queued items reach ``max_batch_size``;
``idle``   (adaptive mode, the default) no batch is in flight at all, so a
           caller at low load waits for nothing; while a batch is in flight the
           next one grows instead;
``delay``  the oldest queued item has waited ``max_delay_s``;
``drain``  the batcher is closing.

Items can carry a size (``size_of``: rows along a batch dimension) and a group
key (``key_of``): items of different groups never share a batch, and a batch's
total size never exceeds ``max_batch_size``.

Cancellation and deadlines (``submit(item, timeout_s=...)``): a request whose
caller is cancelled, or whose timeout passes, while it is queued is taken out
and never sent; one already sent releases its caller at once and its result is
dropped; a batch none of whose callers still waits is cancelled.

Failure semantics, per batch: when the batch function raises, every caller of
that batch gets the same exception (an :class:`~autobatch.errors.AutobatchError`
as it is, anything else wrapped once in a :class:`~autobatch.errors.BatcherError`);
the wrong number of results fails the batch with a message naming both numbers.

``clock`` and ``sleep`` are injected, so tests drive flushes and deadlines with
a fake clock. The queue is :mod:`autobatch.sdk.queue`, the timer :mod:`autobatch.sdk.timer`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from autobatch.errors import (
    AutobatchError,
    BatcherError,
    ConfigError,
    DeadlineExceededError,
    InvalidRequestError,
    QueueFullError,
)
from autobatch.sdk.queue import DONE, QUEUED, SENT, WAITING, Batch, Group, Request, RequestQueue
from autobatch.sdk.statistics import BatcherStatistics
from autobatch.sdk.timer import WakeupTimer

if TYPE_CHECKING:
    from autobatch.sdk.metrics import BatcherMetrics

__all__ = ["BACKPRESSURE_MODES", "FLUSH_REASONS", "BatcherStatistics", "MicroBatcher"]

T = TypeVar("T")
R = TypeVar("R")

BACKPRESSURE_MODES = ("wait", "raise")
FLUSH_REASONS = ("full", "idle", "delay", "drain")

# Float slack when comparing elapsed times with a delay: a timer that fires a
# hair early must still flush, not re-arm for a few nanoseconds.
_EPSILON_S = 1e-9


def _one(_: Any) -> int:
    return 1


def _same_key(_: Any) -> Hashable:
    return None


class MicroBatcher(Generic[T, R]):
    """Collect concurrent ``submit(item)`` calls into batches for ``batch_fn``.

    >>> async def double(items):                         # doctest: +SKIP
    ...     return [2 * x for x in items]
    >>> async with MicroBatcher(double, max_batch_size=16) as batcher:
    ...     results = await asyncio.gather(*(batcher.submit(i) for i in range(100)))

    Args:
        batch_fn: ``async fn(items) -> results``, one result per item, in order.
        max_batch_size: the largest total size of a batch (>= 1).
        max_delay_s: the longest the oldest queued request waits for its batch
            to fill while a batch slot is free. ``None`` (the default, adaptive
            mode only): wait until the batch is full or nothing is in flight.
        adaptive: flush at once whenever no batch is in flight (default
            ``True``). With ``False``, batches go out only when full or when
            ``max_delay_s`` has passed: the classic size-or-time batcher, which
            then needs ``max_delay_s``.
        max_in_flight: how many batches may be out at once (>= 1). Two lets the
            next batch be sent while the previous one is still being answered.
        max_queue_size: how many requests may wait in the queue (>= 1).
        backpressure: what ``submit`` does when the queue is full: ``"wait"``
            (default) for space, or ``"raise"``
            :class:`~autobatch.errors.QueueFullError`.
        size_of: the size of an item (default 1 each); an item larger than
            ``max_batch_size`` is refused by ``submit``.
        key_of: a hashable group key; items of different groups never share a batch.
        name: used in error messages and as the metrics label.
        metrics: a :class:`~autobatch.sdk.metrics.BatcherMetrics` to record into.
        clock: seconds, monotonic (default :func:`time.monotonic`).
        sleep: ``async sleep(seconds)`` matching ``clock`` (default :func:`asyncio.sleep`).
    """

    def __init__(
        self,
        batch_fn: Callable[[list[T]], Awaitable[Sequence[R]]],
        *,
        max_batch_size: int = 32,
        max_delay_s: float | None = None,
        adaptive: bool = True,
        max_in_flight: int = 2,
        max_queue_size: int = 4096,
        backpressure: Literal["wait", "raise"] = "wait",
        size_of: Callable[[T], int] | None = None,
        key_of: Callable[[T], Hashable] | None = None,
        name: str = "batcher",
        metrics: BatcherMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if not callable(batch_fn):
            raise ConfigError(f"batch_fn = {batch_fn!r}: must be an async callable")
        _check_int("max_batch_size", max_batch_size)
        _check_int("max_in_flight", max_in_flight)
        _check_int("max_queue_size", max_queue_size)
        if max_delay_s is not None and (
            isinstance(max_delay_s, bool)
            or not isinstance(max_delay_s, (int, float))
            or not math.isfinite(max_delay_s)
            or max_delay_s < 0
        ):
            raise ConfigError(
                f"max_delay_s = {max_delay_s!r}: must be a finite number of seconds >= 0, or None"
            )
        if not adaptive and max_delay_s is None:
            raise ConfigError(
                "max_delay_s = None with adaptive = False: a non-adaptive batcher needs "
                "max_delay_s, or a partial batch would wait forever"
            )
        if backpressure not in BACKPRESSURE_MODES:
            raise ConfigError(
                f"backpressure = {backpressure!r}: must be one of {', '.join(BACKPRESSURE_MODES)}"
            )
        self._batch_fn = batch_fn
        self.max_batch_size = max_batch_size
        self.max_delay_s = None if max_delay_s is None else float(max_delay_s)
        self.adaptive = adaptive
        self.max_in_flight = max_in_flight
        self.max_queue_size = max_queue_size
        self.backpressure = backpressure
        self.name = name
        self._size_of = size_of or _one
        self._key_of = key_of or _same_key
        self._metrics = metrics.child(name) if metrics is not None else None
        self._clock = clock
        self._sleep = sleep

        self._queue = RequestQueue(max_queue_size, self._metrics)
        self._in_flight: set[Batch] = set()
        self._in_flight_requests = 0
        self._deadlines: list[tuple[float, int, Request]] = []
        self._seq = itertools.count()
        self._timer = WakeupTimer(clock, sleep, self._next_wakeup, self._on_timer)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._draining = False
        self._aborting = False
        self._idle: asyncio.Event | None = None
        self._counts = dict.fromkeys(
            ("submitted", "succeeded", "failed", "expired", "cancelled", "rejected", "batches",
             "batches_failed", "requests_sent", "size_sent"),
            0,
        )
        self._flushes = dict.fromkeys(FLUSH_REASONS, 0)

    # -- public -------------------------------------------------------------------------
    async def submit(self, item: T, *, timeout_s: float | None = None) -> R:
        """Queue ``item`` and return its result once its batch comes back.

        ``timeout_s`` bounds the whole wait (queue, backpressure and batch): past
        it the call raises :class:`~autobatch.errors.DeadlineExceededError`, and
        if the request was still queued it is removed, never sent. Cancelling
        the awaiting task removes a queued request the same way.
        """
        if self._closed:
            raise BatcherError(f"{self.name}: the batcher is closed; it takes no new requests")
        size = self._size_of(item)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidRequestError(f"{self.name}: size_of(item) = {size!r}: must be an integer >= 1")
        if size > self.max_batch_size:
            raise InvalidRequestError(
                f"{self.name}: an item of size {size} is larger than max_batch_size "
                f"({self.max_batch_size}); split it"
            )
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
            or math.isnan(timeout_s) or timeout_s <= 0
        ):
            raise InvalidRequestError(f"timeout_s = {timeout_s!r}: must be a number of seconds > 0")
        loop = self._bind_loop()
        queue = self._queue
        if queue.count + len(queue.waiters) >= self.max_queue_size and self.backpressure == "raise":
            self._counts["rejected"] += 1
            if self._metrics:
                self._metrics.request_done("rejected")
            raise QueueFullError(
                f"{self.name}: the queue is full ({self.max_queue_size} requests waiting); "
                "retry later, raise max_queue_size or use backpressure='wait'"
            )
        key = self._key_of(item)
        now = self._clock()
        deadline = math.inf if timeout_s is None else now + timeout_s
        req = Request(item, size, key, next(self._seq), loop.create_future(), timeout_s, deadline)
        req.enqueued_at = now
        self._counts["submitted"] += 1
        if deadline != math.inf:
            heapq.heappush(self._deadlines, (deadline, req.seq, req))
            self._timer.arm(deadline)
        if self.adaptive and not (self._in_flight or queue.groups or queue.waiters):
            return await self._run_inline(req, now)
        # Cancelling the caller cancels this future: take the request out of the queue then.
        req.future.add_done_callback(lambda _f, r=req: self._on_future_done(r))
        if not queue.has_room() or queue.waiters:
            queue.waiters.append(req)  # FIFO: nobody overtakes an earlier waiter
        else:
            self._enqueue(req)
            self._dispatch()
        return await req.future

    async def _run_inline(self, req: Request, now: float) -> R:
        """Nothing queued, nothing in flight: the caller sends its batch of one itself.

        The same batch as an "idle" flush, minus two trips through the event
        loop (starting a batch task, then waking the caller from its future):
        at low load that is most of what the batcher would add to a call.
        """
        task = asyncio.current_task()
        assert task is not None
        batch = self._start([req], req.size, "idle", now, task)
        try:
            await self._run_batch(batch, req.size)
        except asyncio.CancelledError:
            fut = req.future
            if not fut.done() or fut.cancelled():
                raise  # the caller's own cancellation
            # The batcher cancelled it (deadline, close): the caller gets the reason.
            if hasattr(task, "uncancel"):
                task.uncancel()
            return fut.result()
        return req.future.result()

    def statistics(self) -> BatcherStatistics:
        """A frozen snapshot of the queue, the batches in flight and the counters."""
        return BatcherStatistics(
            queued_requests=self._queue.count,
            queued_size=self._queue.size,
            waiting_for_space=len(self._queue.waiters),
            in_flight_batches=len(self._in_flight),
            in_flight_requests=self._in_flight_requests,
            **self._counts,
            flushed_full=self._flushes["full"],
            flushed_idle=self._flushes["idle"],
            flushed_delay=self._flushes["delay"],
            flushed_drain=self._flushes["drain"],
            closed=self._closed,
        )

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, *, drain: bool = True) -> None:
        """Stop taking requests; then send what is queued (``drain``) or fail it.

        With ``drain=True`` every queued and waiting request is sent at once,
        ignoring the delay, and ``close`` returns when all batches have come
        back. With ``drain=False`` queued and waiting requests fail with
        :class:`~autobatch.errors.BatcherError` and batches in flight are
        cancelled, failing their callers the same way. Safe to call twice.
        """
        self._closed = True
        if self._loop is None:
            return
        if drain:
            self._draining = True
            self._dispatch()
            while self._queue.count or self._queue.waiters or self._in_flight:
                assert self._idle is not None
                self._idle.clear()
                await self._idle.wait()
        else:
            err = BatcherError(f"{self.name}: the batcher was closed before this request was sent")
            for req in self._queue.everyone():
                self._queue.remove(req)
                self._fail(req, err, "failed")
            self._aborting = True
            for batch in list(self._in_flight):
                batch.task.cancel()
            while self._in_flight:
                assert self._idle is not None
                self._idle.clear()
                await self._idle.wait()
        await self._timer.close()

    async def __aenter__(self) -> MicroBatcher[T, R]:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # A clean exit waits for every answer; an exception leaves nothing behind.
        await self.close(drain=exc_type is None)

    # -- queue --------------------------------------------------------------------------
    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            self._idle = asyncio.Event()
            self._timer.bind(loop)
        elif self._loop is not loop:
            raise BatcherError(
                f"{self.name}: used from a second event loop; a batcher belongs to the loop "
                "that first used it (use SyncTritonBatchClient from threads)"
            )
        return loop

    def _enqueue(self, req: Request) -> None:
        if self._queue.add(req) and self.max_delay_s is not None:
            self._timer.arm(req.enqueued_at + self.max_delay_s)

    def _admit_waiters(self) -> None:
        queue = self._queue
        while queue.waiters and queue.has_room():
            req = queue.waiters.popleft()
            req.enqueued_at = self._clock()
            self._enqueue(req)

    def _on_future_done(self, req: Request) -> None:
        if not req.future.cancelled() or req.state == DONE:
            return
        was_queued = req.state in (WAITING, QUEUED)
        self._queue.remove(req)
        self._counts["cancelled"] += 1
        if self._metrics:
            self._metrics.request_done("cancelled")
        if was_queued:
            self._admit_waiters()
            self._dispatch()
            self._maybe_idle()
        else:
            self._abandon_if_unwanted(req)

    def _fail(self, req: Request, err: BaseException, outcome: str) -> None:
        req.state = DONE
        if not req.future.done():
            req.future.set_exception(err)
        self._counts[outcome] += 1
        if self._metrics:
            self._metrics.request_done(outcome)

    # -- flushing -----------------------------------------------------------------------
    def _ready(self, group: Group, now: float) -> str | None:
        """Why ``group`` should go out now, or None."""
        if group.size >= self.max_batch_size:
            return "full"
        if self._draining:
            return "drain"
        if self.adaptive and not self._in_flight:
            return "idle"
        if (
            self.max_delay_s is not None
            and now - group.queue[0].enqueued_at >= self.max_delay_s - _EPSILON_S
        ):
            return "delay"
        return None

    def _dispatch(self) -> None:
        """Send every batch that may go out now."""
        groups = self._queue.groups
        if not groups:
            return
        now = self._clock()
        while len(self._in_flight) < self.max_in_flight and groups:
            best: tuple[int, Hashable, str] | None = None
            for key, group in groups.items():
                head = group.queue[0].seq
                if best is not None and head > best[0]:
                    continue
                reason = self._ready(group, now)
                if reason is not None:
                    best = (head, key, reason)
            if best is None:
                break
            self._send(best[1], best[2], now)
        if self.max_delay_s is not None and groups and len(self._in_flight) < self.max_in_flight:
            self._timer.arm(self._queue.oldest_enqueued_at() + self.max_delay_s)

    def _send(self, key: Hashable, reason: str, now: float) -> None:
        batch, size, cancelled = self._queue.take(key, self.max_batch_size)
        for _ in range(cancelled):
            self._counts["cancelled"] += 1
            if self._metrics:
                self._metrics.request_done("cancelled")
        self._admit_waiters()
        if not batch:
            return
        assert self._loop is not None
        out = Batch(batch, None)  # type: ignore[arg-type]
        out.task = self._loop.create_task(self._run_batch(out, size))
        self._start(batch, size, reason, now, out.task, out)

    def _start(self, batch: list[Request], size: int, reason: str, now: float,
               task: asyncio.Task[Any], out: Batch | None = None) -> Batch:
        """Account for a batch going out, run by ``task``."""
        out = Batch(batch, task) if out is None else out
        for req in batch:
            req.state = SENT
            req.batch = out
        self._counts["batches"] += 1
        self._counts["requests_sent"] += len(batch)
        self._counts["size_sent"] += size
        self._flushes[reason] += 1
        self._in_flight_requests += len(batch)
        self._in_flight.add(out)
        if self._metrics:
            self._metrics.batch_sent(reason, size, [now - r.enqueued_at for r in batch])
            self._metrics.set_in_flight(len(self._in_flight))
        return out

    def _abandon_if_unwanted(self, req: Request) -> None:
        """Cancel ``req``'s batch once none of its callers waits for it any more."""
        out = req.batch
        if out is None or out not in self._in_flight:
            return
        if all(r.state == DONE for r in out.requests):
            out.task.cancel()

    async def _run_batch(self, out: Batch, size: int) -> None:
        batch = out.requests
        started = self._clock()
        try:
            try:
                results = await self._batch_fn([r.item for r in batch])
            except asyncio.CancelledError:
                if self._aborting:
                    self._fail_batch(batch, BatcherError(
                        f"{self.name}: the batcher was closed while this request's batch was "
                        "in flight"
                    ))
                else:
                    # Its callers left (cancelled, expired), or a lone caller running its
                    # own batch was cancelled: whoever still counts as sent is cancelled.
                    for req in batch:
                        if req.state == SENT:
                            req.state = DONE
                            req.future.cancel()
                            self._counts["cancelled"] += 1
                            if self._metrics:
                                self._metrics.request_done("cancelled")
                raise
            except Exception as exc:
                if isinstance(exc, AutobatchError):
                    err = exc
                else:
                    err = BatcherError(
                        f"{self.name}: the batch of {len(batch)} requests failed: "
                        f"{type(exc).__name__}: {exc}"
                    )
                    err.__cause__ = exc
                self._fail_batch(batch, err)
                return
            try:
                count = len(results)
            except TypeError:
                count = -1
            if count != len(batch):
                got = f"{count} results" if count >= 0 else f"a {type(results).__name__}"
                self._fail_batch(batch, BatcherError(
                    f"{self.name}: the batch function returned {got} for a batch of "
                    f"{len(batch)} requests; it must return one result per request, in order"
                ))
                return
            for req, result in zip(batch, results):
                if req.state == SENT:
                    req.state = DONE
                    if not req.future.done():
                        req.future.set_result(result)
                    self._counts["succeeded"] += 1
                    if self._metrics:
                        self._metrics.request_done("ok")
        finally:
            if self._metrics:
                self._metrics.batch_done(self._clock() - started)
            self._in_flight_requests -= len(batch)
            self._in_flight.discard(out)
            if self._metrics:
                self._metrics.set_in_flight(len(self._in_flight))
            self._dispatch()
            self._maybe_idle()

    def _fail_batch(self, batch: list[Request], err: BaseException) -> None:
        self._counts["batches_failed"] += 1
        for req in batch:
            if req.state == SENT:
                self._fail(req, err, "failed")

    def _maybe_idle(self) -> None:
        if self._idle is not None and not (self._queue.count or self._queue.waiters or self._in_flight):
            self._idle.set()

    # -- timers (max delay, deadlines) ----------------------------------------------------
    def _next_wakeup(self) -> float:
        while self._deadlines and self._deadlines[0][2].state == DONE:
            heapq.heappop(self._deadlines)
        when = self._deadlines[0][0] if self._deadlines else math.inf
        if self.max_delay_s is not None and self._queue.groups and len(self._in_flight) < self.max_in_flight:
            when = min(when, self._queue.oldest_enqueued_at() + self.max_delay_s)
        return when

    def _on_timer(self) -> None:
        now = self._clock()
        expired = False
        while self._deadlines and self._deadlines[0][0] <= now + _EPSILON_S:
            _, _, req = heapq.heappop(self._deadlines)
            if req.state == DONE:
                continue
            expired = True
            where = (
                "it was never sent" if req.state in (WAITING, QUEUED)
                else "its batch was already sent; the result is discarded"
            )
            if req.state == SENT:
                req.state = DONE  # the batch still counts it in flight until it returns
            else:
                self._queue.remove(req)
            self._fail(req, DeadlineExceededError(
                f"{self.name}: no result within timeout_s = {req.timeout_s:g} s; {where}"
            ), "expired")
            self._abandon_if_unwanted(req)
        if expired:
            self._admit_waiters()
        self._dispatch()
        self._maybe_idle()


def _check_int(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field} = {value!r}: {field} must be an integer >= 1")
