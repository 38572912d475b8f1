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
that batch gets the same exception. An :class:`~autobatch.errors.AutobatchError`
is passed on as it is; anything else is wrapped once in a
:class:`~autobatch.errors.BatcherError` whose ``__cause__`` is the original. A
batch function that returns the wrong number of results fails its batch with a
message naming both numbers.

Time is a dependency: ``clock`` and ``sleep`` are injected (trio style), so
tests drive max-delay flushes and deadlines with a fake clock, instantly.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from autobatch.errors import (
    AutobatchError,
    BatcherError,
    ConfigError,
    DeadlineExceededError,
    InvalidRequestError,
    QueueFullError,
)

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

_WAITING, _QUEUED, _SENT, _DONE = range(4)


@dataclass(frozen=True)
class BatcherStatistics:
    """A snapshot of one :class:`MicroBatcher`, taken by :meth:`MicroBatcher.statistics`.

    "Size" is the sum of ``size_of(item)``: the number of items unless the
    batcher was given ``size_of`` (the Triton client counts rows along the
    batch dimension). Counters are cumulative since the batcher was built.
    """

    queued_requests: int
    """Requests in the queue, not yet sent."""
    queued_size: int
    """Their total size."""
    waiting_for_space: int
    """Callers blocked in ``submit`` by a full queue (backpressure ``"wait"``)."""
    in_flight_batches: int
    """Batches sent whose batch function has not returned yet (<= ``max_in_flight``)."""
    in_flight_requests: int
    """Requests in those batches."""
    submitted: int
    """Requests accepted by ``submit`` (not counting those rejected or refused as invalid)."""
    succeeded: int
    """Requests answered with their result."""
    failed: int
    """Requests failed because their batch failed."""
    expired: int
    """Requests failed with :class:`~autobatch.errors.DeadlineExceededError`."""
    cancelled: int
    """Requests whose caller cancelled them; those cancelled while queued were never sent."""
    rejected: int
    """``submit`` calls turned away with :class:`~autobatch.errors.QueueFullError`."""
    batches: int
    """Batches sent."""
    batches_failed: int
    """Batches whose batch function raised or returned the wrong number of results."""
    requests_sent: int
    """Requests sent, over all batches."""
    size_sent: int
    """Their total size."""
    flushed_full: int
    """Batches sent because they were full."""
    flushed_idle: int
    """Batches sent at once because nothing was in flight (adaptive mode)."""
    flushed_delay: int
    """Batches sent because their oldest request had waited ``max_delay_s``."""
    flushed_drain: int
    """Batches sent while closing."""
    closed: bool
    """``close()`` has been called: ``submit`` refuses new requests."""

    @property
    def mean_batch_size(self) -> float:
        """Mean size of the batches sent (0.0 before the first)."""
        return self.size_sent / self.batches if self.batches else 0.0

    @property
    def mean_batch_requests(self) -> float:
        """Mean number of requests in the batches sent (0.0 before the first)."""
        return self.requests_sent / self.batches if self.batches else 0.0


class _Request:
    __slots__ = ("batch", "deadline", "enqueued_at", "future", "item", "key", "seq", "size",
                 "state", "timeout_s")

    def __init__(self, item: Any, size: int, key: Hashable, seq: int,
                 future: asyncio.Future[Any], timeout_s: float | None, deadline: float) -> None:
        self.item = item
        self.size = size
        self.key = key
        self.seq = seq
        self.future = future
        self.timeout_s = timeout_s
        self.deadline = deadline
        self.enqueued_at = 0.0
        self.state = _WAITING
        self.batch: _Batch | None = None


class _Batch:
    """A batch in flight: its requests and the task running it."""

    __slots__ = ("requests", "task")

    def __init__(self, requests: list[_Request], task: asyncio.Task[Any]) -> None:
        self.requests = requests
        self.task = task


class _Group:
    """The queue of one group key: FIFO, with its total size kept up to date."""

    __slots__ = ("queue", "size")

    def __init__(self) -> None:
        self.queue: deque[_Request] = deque()
        self.size = 0


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

        self._groups: dict[Hashable, _Group] = {}
        self._queued = 0
        self._queued_size = 0
        self._waiters: deque[_Request] = deque()
        self._in_flight: set[_Batch] = set()
        self._in_flight_requests = 0
        self._deadlines: list[tuple[float, int, _Request]] = []
        self._seq = itertools.count()
        self._timer: asyncio.Task[None] | None = None
        self._timer_changed: asyncio.Event | None = None
        self._timer_at = math.inf
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
        if self._queued + len(self._waiters) >= self.max_queue_size and self.backpressure == "raise":
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
        req = _Request(item, size, key, next(self._seq), loop.create_future(), timeout_s, deadline)
        req.enqueued_at = now
        self._counts["submitted"] += 1
        if deadline != math.inf:
            heapq.heappush(self._deadlines, (deadline, req.seq, req))
            self._arm_timer(deadline)
        if self.adaptive and not (self._in_flight or self._groups or self._waiters):
            return await self._run_inline(req, now)
        # Cancelling the caller cancels this future: take the request out of the queue then.
        req.future.add_done_callback(lambda _f, r=req: self._on_future_done(r))
        if self._queued >= self.max_queue_size or self._waiters:
            self._waiters.append(req)  # FIFO: nobody overtakes an earlier waiter
        else:
            self._enqueue(req)
            self._dispatch()
        return await req.future

    async def _run_inline(self, req: _Request, now: float) -> R:
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
            queued_requests=self._queued,
            queued_size=self._queued_size,
            waiting_for_space=len(self._waiters),
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
            while self._queued or self._waiters or self._in_flight:
                assert self._idle is not None
                self._idle.clear()
                await self._idle.wait()
        else:
            err = BatcherError(f"{self.name}: the batcher was closed before this request was sent")
            for req in [*self._waiters, *(r for g in self._groups.values() for r in g.queue)]:
                self._remove(req)
                self._fail(req, err, "failed")
            self._aborting = True
            for batch in list(self._in_flight):
                batch.task.cancel()
            while self._in_flight:
                assert self._idle is not None
                self._idle.clear()
                await self._idle.wait()
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
            self._timer = None

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
            self._timer_changed = asyncio.Event()
        elif self._loop is not loop:
            raise BatcherError(
                f"{self.name}: used from a second event loop; a batcher belongs to the loop "
                "that first used it (use SyncTritonBatchClient from threads)"
            )
        return loop

    def _enqueue(self, req: _Request) -> None:
        group = self._groups.get(req.key)
        if group is None:
            group = self._groups[req.key] = _Group()
        group.queue.append(req)
        group.size += req.size
        self._queued += 1
        self._queued_size += req.size
        req.state = _QUEUED
        if self.max_delay_s is not None and len(group.queue) == 1:
            self._arm_timer(req.enqueued_at + self.max_delay_s)
        if self._metrics:
            self._metrics.set_queued(self._queued)

    def _remove(self, req: _Request) -> None:
        """Take a request out of the waiters or the queue (not out of a sent batch)."""
        if req.state == _WAITING:
            self._waiters.remove(req)
        elif req.state == _QUEUED:
            group = self._groups[req.key]
            group.queue.remove(req)
            self._unqueue(group, req)
        req.state = _DONE

    def _unqueue(self, group: _Group, req: _Request) -> None:
        group.size -= req.size
        self._queued -= 1
        self._queued_size -= req.size
        if not group.queue:
            del self._groups[req.key]
        if self._metrics:
            self._metrics.set_queued(self._queued)

    def _admit_waiters(self) -> None:
        while self._waiters and self._queued < self.max_queue_size:
            req = self._waiters.popleft()
            req.enqueued_at = self._clock()
            self._enqueue(req)

    def _on_future_done(self, req: _Request) -> None:
        if not req.future.cancelled() or req.state == _DONE:
            return
        was_queued = req.state in (_WAITING, _QUEUED)
        self._remove(req)
        self._counts["cancelled"] += 1
        if self._metrics:
            self._metrics.request_done("cancelled")
        if was_queued:
            self._admit_waiters()
            self._dispatch()
            self._maybe_idle()
        else:
            self._abandon_if_unwanted(req)

    def _fail(self, req: _Request, err: BaseException, outcome: str) -> None:
        req.state = _DONE
        if not req.future.done():
            req.future.set_exception(err)
        self._counts[outcome] += 1
        if self._metrics:
            self._metrics.request_done(outcome)

    # -- flushing -----------------------------------------------------------------------
    def _ready(self, group: _Group, now: float) -> str | None:
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
        if not self._groups:
            return
        now = self._clock()
        while len(self._in_flight) < self.max_in_flight and self._groups:
            best: tuple[int, Hashable, str] | None = None
            for key, group in self._groups.items():
                head = group.queue[0].seq
                if best is not None and head > best[0]:
                    continue
                reason = self._ready(group, now)
                if reason is not None:
                    best = (head, key, reason)
            if best is None:
                break
            self._send(best[1], best[2], now)
        if (
            self.max_delay_s is not None
            and self._groups
            and len(self._in_flight) < self.max_in_flight
        ):
            oldest = min(g.queue[0].enqueued_at for g in self._groups.values())
            self._arm_timer(oldest + self.max_delay_s)

    def _send(self, key: Hashable, reason: str, now: float) -> None:
        group = self._groups[key]
        batch: list[_Request] = []
        size = 0
        while group.queue and size + group.queue[0].size <= self.max_batch_size:
            req = group.queue.popleft()
            self._unqueue(group, req)
            if req.future.done():
                # Cancelled a moment ago; its done-callback has not run yet.
                req.state = _DONE
                self._counts["cancelled"] += 1
                if self._metrics:
                    self._metrics.request_done("cancelled")
                continue
            batch.append(req)
            size += req.size
        self._admit_waiters()
        if not batch:
            return
        assert self._loop is not None
        out = _Batch(batch, None)  # type: ignore[arg-type]
        out.task = self._loop.create_task(self._run_batch(out, size))
        self._start(batch, size, reason, now, out.task, out)

    def _start(self, batch: list[_Request], size: int, reason: str, now: float,
               task: asyncio.Task[Any], out: _Batch | None = None) -> _Batch:
        """Account for a batch going out, run by ``task``."""
        out = _Batch(batch, task) if out is None else out
        for req in batch:
            req.state = _SENT
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

    def _abandon_if_unwanted(self, req: _Request) -> None:
        """Cancel ``req``'s batch once none of its callers waits for it any more."""
        out = req.batch
        if out is None or out not in self._in_flight:
            return
        if all(r.state == _DONE for r in out.requests):
            out.task.cancel()

    async def _run_batch(self, out: _Batch, size: int) -> None:
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
                        if req.state == _SENT:
                            req.state = _DONE
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
                if req.state == _SENT:
                    req.state = _DONE
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

    def _fail_batch(self, batch: list[_Request], err: BaseException) -> None:
        self._counts["batches_failed"] += 1
        for req in batch:
            if req.state == _SENT:
                self._fail(req, err, "failed")

    def _maybe_idle(self) -> None:
        if self._idle is not None and not (self._queued or self._waiters or self._in_flight):
            self._idle.set()

    # -- timers (max delay, deadlines) ----------------------------------------------------
    def _arm_timer(self, when: float) -> None:
        if when >= self._timer_at:
            return
        self._timer_at = when
        if self._timer is None:
            assert self._loop is not None
            self._timer = self._loop.create_task(self._timer_loop())
        else:
            assert self._timer_changed is not None
            self._timer_changed.set()

    def _next_wakeup(self) -> float:
        while self._deadlines and self._deadlines[0][2].state == _DONE:
            heapq.heappop(self._deadlines)
        when = self._deadlines[0][0] if self._deadlines else math.inf
        if self.max_delay_s is not None and self._groups and len(self._in_flight) < self.max_in_flight:
            oldest = min(g.queue[0].enqueued_at for g in self._groups.values())
            when = min(when, oldest + self.max_delay_s)
        return when

    async def _timer_loop(self) -> None:
        assert self._timer_changed is not None
        changed = self._timer_changed
        while True:
            changed.clear()
            when = self._next_wakeup()
            self._timer_at = when
            if when == math.inf:
                await changed.wait()
                continue
            delay = when - self._clock()
            if delay > 0:
                sleeper = asyncio.ensure_future(self._sleep(delay))
                waker = asyncio.ensure_future(changed.wait())
                try:
                    await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
                    waker.cancel()
                if waker.done() and not waker.cancelled():
                    continue  # an earlier timer was armed: recompute
            self._on_timer()

    def _on_timer(self) -> None:
        now = self._clock()
        expired = False
        while self._deadlines and self._deadlines[0][0] <= now + _EPSILON_S:
            _, _, req = heapq.heappop(self._deadlines)
            if req.state == _DONE:
                continue
            expired = True
            where = (
                "it was never sent" if req.state in (_WAITING, _QUEUED)
                else "its batch was already sent; the result is discarded"
            )
            if req.state == _SENT:
                req.state = _DONE  # the batch still counts it in flight until it returns
            else:
                self._remove(req)
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
