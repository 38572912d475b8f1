"""The generic micro-batcher, with fake batch functions and a fake clock (no Triton)."""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import autobatch.sdk
from autobatch.errors import (
    BatcherError,
    ConfigError,
    DeadlineExceededError,
    InvalidRequestError,
    QueueFullError,
    TritonError,
)
from autobatch.sdk import BatcherMetrics, MicroBatcher


class FakeClock:
    """Injected time: ``clock()`` reads it, ``sleep`` waits on it, ``advance`` moves it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + max(0.0, seconds), next(self._seq), fut))
        await fut

    async def advance(self, seconds: float) -> None:
        target = self.now + seconds
        await settle()
        # A hair of slack: 0.009 + 0.001 must reach a sleeper due at 0.010.
        while self._sleepers and self._sleepers[0][0] <= target + 1e-12:
            when, _, fut = heapq.heappop(self._sleepers)
            if fut.done():
                continue
            self.now = max(self.now, when)
            fut.set_result(None)
            await settle()
        self.now = target
        await settle()


async def settle(rounds: int = 30) -> None:
    """Let every ready task run (fake batch functions do no I/O)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeBatchFn:
    """Records each batch; holds it in flight until ``release()`` when ``gated``.

    ``outcome(batch_number, items)`` may return the results or raise; the
    default answers ``("r", item)`` for each item.
    """

    def __init__(self, *, gated: bool = False, outcome=None) -> None:
        self.batches: list[list] = []
        self.gated = gated
        self._gates: list[asyncio.Event] = []
        self.outcome = outcome or (lambda _n, items: [("r", x) for x in items])

    async def __call__(self, items: list) -> list:
        number = len(self.batches)
        self.batches.append(list(items))
        if self.gated:
            gate = asyncio.Event()
            self._gates.append(gate)
            await gate.wait()
        return self.outcome(number, items)

    async def release(self) -> None:
        gates, self._gates = self._gates, []
        for gate in gates:
            gate.set()
        await settle()


def make(fn, clock: FakeClock, **kwargs) -> MicroBatcher:
    return MicroBatcher(fn, clock=clock, sleep=clock.sleep, **kwargs)


def test_public_names_are_pinned():
    assert sorted(autobatch.sdk.__all__) == [
        "BACKPRESSURE_MODES",
        "BatcherMetrics",
        "BatcherStatistics",
        "FLUSH_REASONS",
        "MicroBatcher",
        "PROTOCOLS",
        "SessionBatcher",
        "SessionCounts",
        "SessionStatistics",
        "SyncTritonBatchClient",
        "TritonBatchClient",
    ]
    for name in autobatch.sdk.__all__:
        assert getattr(autobatch.sdk, name) is not None


async def _nothing(items):
    return items


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size = 0: max_batch_size must be an integer >= 1"),
        ({"max_batch_size": 2.5}, "max_batch_size = 2.5: max_batch_size must be an integer >= 1"),
        ({"max_batch_size": True}, "max_batch_size = True: max_batch_size must be an integer"),
        ({"max_in_flight": 0}, "max_in_flight = 0: max_in_flight must be an integer >= 1"),
        ({"max_queue_size": -1}, "max_queue_size = -1: max_queue_size must be an integer >= 1"),
        ({"max_delay_s": -0.001}, r"max_delay_s = -0.001: must be a finite number of seconds"),
        ({"max_delay_s": math.inf}, r"max_delay_s = inf: must be a finite number"),
        ({"max_delay_s": "1ms"}, r"max_delay_s = '1ms'"),
        ({"adaptive": False}, "a non-adaptive batcher needs max_delay_s"),
        ({"backpressure": "drop"}, "backpressure = 'drop': must be one of wait, raise"),
    ],
)
def test_arguments_are_checked_when_built(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        MicroBatcher(_nothing, **kwargs)


def test_batch_fn_must_be_callable():
    with pytest.raises(ConfigError, match="batch_fn"):
        MicroBatcher(42)  # type: ignore[arg-type]


async def test_a_lone_request_is_sent_at_once():
    clock = FakeClock()
    fn = FakeBatchFn()
    batcher = make(fn, clock, max_batch_size=8)
    assert await batcher.submit(1) == ("r", 1)
    assert fn.batches == [[1]]
    assert clock.now == 0.0  # nothing waited on a timer
    stats = batcher.statistics()
    assert (stats.batches, stats.flushed_idle, stats.succeeded) == (1, 1, 1)


async def test_the_next_batch_grows_while_one_is_in_flight():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=8, max_in_flight=1)
    first = asyncio.ensure_future(batcher.submit("a"))
    await settle()
    rest = [asyncio.ensure_future(batcher.submit(x)) for x in "bcd"]
    await settle()
    assert fn.batches == [["a"]]
    assert batcher.statistics().queued_requests == 3
    await fn.release()
    assert fn.batches == [["a"], ["b", "c", "d"]]
    await fn.release()
    assert await first == ("r", "a")
    assert [await t for t in rest] == [("r", x) for x in "bcd"]


async def test_a_full_batch_goes_out_beside_the_one_in_flight_up_to_the_bound():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=3, max_in_flight=2)
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(9)]
    await settle()
    # 0 alone (nothing in flight), then 1-3 (full); 4-8 wait: two batches are out.
    assert fn.batches == [[0], [1, 2, 3]]
    stats = batcher.statistics()
    assert (stats.in_flight_batches, stats.in_flight_requests, stats.queued_requests) == (2, 4, 5)
    assert (stats.flushed_idle, stats.flushed_full) == (1, 1)
    await fn.release()
    await fn.release()
    await fn.release()
    assert [await t for t in tasks] == [("r", i) for i in range(9)]
    assert all(len(b) <= 3 for b in fn.batches)


async def test_max_delay_flushes_a_partial_batch_on_time():
    clock = FakeClock()
    fn = FakeBatchFn()
    batcher = make(fn, clock, max_batch_size=4, max_delay_s=0.010, adaptive=False)
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(2)]
    await clock.advance(0.009)
    assert fn.batches == []
    await clock.advance(0.001)
    assert fn.batches == [[0, 1]]
    assert [await t for t in tasks] == [("r", 0), ("r", 1)]
    assert batcher.statistics().flushed_delay == 1


async def test_a_full_batch_does_not_wait_for_the_delay():
    clock = FakeClock()
    fn = FakeBatchFn()
    batcher = make(fn, clock, max_batch_size=3, max_delay_s=10.0, adaptive=False)
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(4)]
    await settle()
    assert fn.batches == [[0, 1, 2]]
    assert clock.now == 0.0
    await clock.advance(10.0)
    assert fn.batches == [[0, 1, 2], [3]]
    assert [await t for t in tasks] == [("r", i) for i in range(4)]


async def test_the_delay_of_a_waiting_batch_counts_from_its_oldest_request():
    clock = FakeClock()
    fn = FakeBatchFn()
    batcher = make(fn, clock, max_batch_size=10, max_delay_s=0.010, adaptive=False)
    first = asyncio.ensure_future(batcher.submit("old"))
    await clock.advance(0.006)
    second = asyncio.ensure_future(batcher.submit("new"))
    await clock.advance(0.004)
    assert fn.batches == [["old", "new"]]
    await asyncio.gather(first, second)


async def test_wrong_result_count_fails_the_batch_naming_both_numbers():
    fn = FakeBatchFn(gated=True, outcome=lambda n, items: items if n == 0 else items[:1])
    batcher = make(fn, FakeClock(), max_batch_size=8, max_in_flight=1)
    first = asyncio.ensure_future(batcher.submit(0))
    await settle()
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(1, 4)]
    await fn.release()
    await fn.release()
    assert await first == 0
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert fn.batches == [[0], [1, 2, 3]]
    assert all(isinstance(r, BatcherError) for r in results)
    assert "returned 1 results for a batch of 3 requests" in str(results[0])
    assert batcher.statistics().batches_failed == 1


async def test_one_failure_fails_every_caller_of_that_batch_with_the_cause():
    def outcome(n, items):
        if n == 1:
            raise ValueError("boom")
        return items

    fn = FakeBatchFn(gated=True, outcome=outcome)
    batcher = make(fn, FakeClock(), max_batch_size=8, max_in_flight=1)
    first = asyncio.ensure_future(batcher.submit(0))
    await settle()
    doomed = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2, 3)]
    await fn.release()
    await fn.release()
    assert await first == 0
    errors = await asyncio.gather(*doomed, return_exceptions=True)
    assert fn.batches[1] == [1, 2, 3]
    assert all(e is errors[0] for e in errors)  # one exception for the whole batch
    assert isinstance(errors[0], BatcherError)
    assert isinstance(errors[0].__cause__, ValueError)
    assert "batch of 3 requests failed: ValueError: boom" in str(errors[0])
    # The next batch is not affected.
    fn.gated = False
    assert await batcher.submit(4) == 4
    stats = batcher.statistics()
    assert (stats.failed, stats.succeeded, stats.batches_failed) == (3, 2, 1)


async def test_an_autobatch_error_reaches_the_callers_as_it_is():
    cause = TritonError("the server said no")

    async def refuse(items):
        raise cause

    batcher = MicroBatcher(refuse)
    with pytest.raises(TritonError) as info:
        await batcher.submit(1)
    assert info.value is cause


async def test_a_cancelled_request_is_removed_and_not_sent():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=8, max_in_flight=1)
    a = asyncio.ensure_future(batcher.submit("a"))
    await settle()
    b = asyncio.ensure_future(batcher.submit("b"))
    c = asyncio.ensure_future(batcher.submit("c"))
    await settle()
    b.cancel()
    await settle()
    assert batcher.statistics().queued_requests == 1
    await fn.release()
    await fn.release()
    assert fn.batches == [["a"], ["c"]]
    assert await a == ("r", "a") and await c == ("r", "c")
    assert b.cancelled()
    assert batcher.statistics().cancelled == 1


async def test_a_request_cancelled_just_before_its_flush_is_not_sent():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=8, max_in_flight=1)
    a = asyncio.ensure_future(batcher.submit("a"))
    await settle()
    b = asyncio.ensure_future(batcher.submit("b"))
    c = asyncio.ensure_future(batcher.submit("c"))
    await settle()
    b.cancel()
    await fn.release()  # the flush may run before b's done-callback: still not sent
    await fn.release()
    assert fn.batches == [["a"], ["c"]]
    await asyncio.gather(a, c)


async def test_a_deadline_removes_a_queued_request_unsent():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=8, max_in_flight=1)
    a = asyncio.ensure_future(batcher.submit("a"))
    await settle()
    b = asyncio.ensure_future(batcher.submit("b", timeout_s=0.050))
    await clock.advance(0.049)
    assert not b.done()
    await clock.advance(0.001)
    with pytest.raises(DeadlineExceededError, match="timeout_s = 0.05 s; it was never sent"):
        await b
    assert isinstance(b.exception(), TimeoutError)
    await fn.release()
    assert fn.batches == [["a"]]
    await a
    assert batcher.statistics().expired == 1


async def test_a_deadline_in_flight_fails_only_that_caller():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=8, max_in_flight=1)
    x = asyncio.ensure_future(batcher.submit("x"))
    await settle()
    a = asyncio.ensure_future(batcher.submit("a", timeout_s=0.010))
    b = asyncio.ensure_future(batcher.submit("b"))
    await fn.release()
    assert fn.batches == [["x"], ["a", "b"]]
    await clock.advance(0.010)
    with pytest.raises(DeadlineExceededError, match="already sent; the result is discarded"):
        await a
    assert batcher.statistics().in_flight_requests == 2  # b, and a's discarded slot
    await fn.release()
    assert await b == ("r", "b") and await x == ("r", "x")
    stats = batcher.statistics()
    assert (stats.expired, stats.succeeded, stats.in_flight_requests) == (1, 2, 0)


async def test_a_lone_caller_cancelling_stops_its_own_batch():
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, FakeClock())
    a = asyncio.ensure_future(batcher.submit("a"))
    await settle()
    assert batcher.statistics().in_flight_batches == 1
    a.cancel()
    await settle()
    assert a.cancelled()
    stats = batcher.statistics()
    assert (stats.cancelled, stats.in_flight_batches, stats.in_flight_requests) == (1, 0, 0)
    fn.gated = False
    assert await batcher.submit("b") == ("r", "b")


async def test_a_lone_callers_deadline_in_flight_releases_it():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock)
    a = asyncio.ensure_future(batcher.submit("a", timeout_s=0.010))
    await clock.advance(0.010)
    with pytest.raises(DeadlineExceededError, match="already sent"):
        await a
    stats = batcher.statistics()
    assert (stats.expired, stats.cancelled, stats.in_flight_batches) == (1, 0, 0)


async def test_a_batch_nobody_waits_for_is_cancelled():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_in_flight=1)
    x = asyncio.ensure_future(batcher.submit("x"))
    await settle()
    a = asyncio.ensure_future(batcher.submit("a", timeout_s=0.010))
    b = asyncio.ensure_future(batcher.submit("b"))
    await fn.release()
    assert fn.batches == [["x"], ["a", "b"]]
    b.cancel()
    await settle()
    assert batcher.statistics().in_flight_batches == 1  # a still waits
    await clock.advance(0.010)
    with pytest.raises(DeadlineExceededError):
        await a
    stats = batcher.statistics()
    assert (stats.in_flight_batches, stats.cancelled, stats.expired) == (0, 1, 1)
    assert await x == ("r", "x")


async def test_an_earlier_deadline_rearms_a_sleeping_timer():
    clock = FakeClock()
    fn = FakeBatchFn()
    batcher = make(fn, clock, max_batch_size=8, max_delay_s=1.0, adaptive=False)
    slow = asyncio.ensure_future(batcher.submit("slow"))
    await settle()
    fast = asyncio.ensure_future(batcher.submit("fast", timeout_s=0.1))
    await clock.advance(0.1)
    with pytest.raises(DeadlineExceededError):
        await fast
    assert not slow.done()
    await clock.advance(0.9)
    assert await slow == ("r", "slow")
    assert fn.batches == [["slow"]]


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), "1"])
async def test_a_bad_timeout_is_refused(timeout_s):
    batcher = MicroBatcher(_nothing)
    with pytest.raises(InvalidRequestError, match="timeout_s"):
        await batcher.submit(1, timeout_s=timeout_s)


async def test_backpressure_raise_turns_away_past_the_queue_bound():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_in_flight=1, max_queue_size=2, backpressure="raise")
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]  # 1 sent, 2 queued
    await settle()
    with pytest.raises(QueueFullError, match=r"queue is full \(2 requests waiting\)"):
        await batcher.submit(3)
    assert batcher.statistics().rejected == 1
    await fn.release()
    await fn.release()
    assert [await t for t in tasks] == [("r", i) for i in range(3)]


async def test_backpressure_wait_blocks_then_admits_in_order():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=2, max_in_flight=1, max_queue_size=2)
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(6)]
    await settle()
    stats = batcher.statistics()
    assert (stats.in_flight_requests, stats.queued_requests, stats.waiting_for_space) == (1, 2, 3)
    for _ in range(4):
        await fn.release()
    assert [await t for t in tasks] == [("r", i) for i in range(6)]
    assert [x for b in fn.batches for x in b] == list(range(6))  # FIFO, nobody overtook


async def test_a_caller_waiting_for_space_can_time_out():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_in_flight=1, max_queue_size=1)
    a = asyncio.ensure_future(batcher.submit("a"))
    b = asyncio.ensure_future(batcher.submit("b"))
    c = asyncio.ensure_future(batcher.submit("c", timeout_s=0.5))
    await clock.advance(0.5)
    with pytest.raises(DeadlineExceededError, match="never sent"):
        await c
    assert batcher.statistics().waiting_for_space == 0
    await fn.release()
    await fn.release()
    await asyncio.gather(a, b)
    assert fn.batches == [["a"], ["b"]]


async def test_statistics_is_a_frozen_snapshot():
    batcher = MicroBatcher(_nothing)
    before = batcher.statistics()
    await batcher.submit(1)
    after = batcher.statistics()
    assert before.submitted == 0 and after.submitted == 1
    assert (after.mean_batch_size, before.mean_batch_size) == (1.0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.submitted = 5  # type: ignore[misc]


async def test_close_drains_pending_requests_and_refuses_new_ones():
    clock = FakeClock()
    fn = FakeBatchFn()
    batcher = make(fn, clock, max_batch_size=8, max_delay_s=60.0, adaptive=False)
    tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
    await settle()
    assert fn.batches == []
    await batcher.close()
    assert fn.batches == [[0, 1, 2]]
    assert [t.result() for t in tasks] == [("r", i) for i in range(3)]
    assert batcher.statistics().flushed_drain == 1
    with pytest.raises(BatcherError, match="closed"):
        await batcher.submit(9)
    await batcher.close()  # twice is fine


async def test_close_without_drain_fails_queued_and_in_flight_requests():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(fn, clock, max_batch_size=8, max_in_flight=1)
    sent = asyncio.ensure_future(batcher.submit("sent"))
    await settle()
    queued = asyncio.ensure_future(batcher.submit("queued"))
    await settle()
    await batcher.close(drain=False)
    with pytest.raises(BatcherError, match="closed before this request was sent"):
        await queued
    with pytest.raises(BatcherError, match="closed while this request's batch was in flight"):
        await sent
    assert fn.batches == [["sent"]]
    assert batcher.statistics().in_flight_batches == 0


async def test_async_with_drains_on_a_clean_exit_and_fails_on_an_error():
    fn = FakeBatchFn()
    async with MicroBatcher(fn, max_delay_s=60.0, adaptive=False) as batcher:
        task = asyncio.ensure_future(batcher.submit(1))
        await asyncio.sleep(0)
    assert task.result() == ("r", 1)

    with pytest.raises(KeyError):
        async with MicroBatcher(fn, max_delay_s=60.0, adaptive=False) as batcher:
            task = asyncio.ensure_future(batcher.submit(2))
            await asyncio.sleep(0)
            raise KeyError("caller bug")
    assert isinstance(task.exception(), BatcherError)


async def test_groups_never_mix_and_size_counts_rows():
    clock = FakeClock()
    fn = FakeBatchFn(gated=True)
    batcher = make(
        fn, clock, max_batch_size=4, max_in_flight=1,
        size_of=lambda x: x[1], key_of=lambda x: x[0],
    )
    items = [("a", 1), ("b", 2), ("a", 3), ("b", 2), ("a", 1), ("a", 2)]
    tasks = [asyncio.ensure_future(batcher.submit(it)) for it in items]
    for _ in range(6):
        await settle()
        await fn.release()
    assert [await t for t in tasks] == [("r", it) for it in items]
    for batch in fn.batches:
        assert len({k for k, _ in batch}) == 1
        assert sum(n for _, n in batch) <= 4
    assert fn.batches[0] == [("a", 1)]
    assert fn.batches[1] == [("b", 2), ("b", 2)]  # oldest head first: b's came before a's 3


async def test_an_item_larger_than_a_batch_is_refused():
    batcher = MicroBatcher(_nothing, max_batch_size=4, size_of=len)
    with pytest.raises(InvalidRequestError, match="size 5 is larger than max_batch_size \\(4\\)"):
        await batcher.submit("abcde")
    with pytest.raises(InvalidRequestError, match="size_of"):
        await batcher.submit("")


async def test_metrics_go_to_the_injected_registry():
    registry = CollectorRegistry()
    fn = FakeBatchFn()
    batcher = MicroBatcher(
        fn, max_batch_size=8, name="m1", metrics=BatcherMetrics.for_registry(registry)
    )
    await asyncio.gather(*(batcher.submit(i) for i in range(5)))

    def value(name, **labels):
        return registry.get_sample_value(name, {"batcher": "m1", **labels})

    assert value("autobatch_sdk_requests_total", outcome="ok") == 5
    assert value("autobatch_sdk_batches_total", reason="idle") == batcher.statistics().flushed_idle
    assert value("autobatch_sdk_batch_size_count") == batcher.statistics().batches
    assert value("autobatch_sdk_batch_size_sum") == 5
    assert value("autobatch_sdk_queue_wait_seconds_count") == 5
    assert value("autobatch_sdk_queued_requests") == 0
    assert value("autobatch_sdk_in_flight_batches") == 0
    # A second batcher on the same registry shares the families.
    assert BatcherMetrics.for_registry(registry) is BatcherMetrics.for_registry(registry)


async def test_a_batcher_belongs_to_one_event_loop():
    batcher = MicroBatcher(_nothing)
    await batcher.submit(1)

    def elsewhere():
        return asyncio.run(batcher.submit(2))

    with pytest.raises(BatcherError, match="second event loop"):
        await asyncio.get_running_loop().run_in_executor(None, elsewhere)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.integers(1, 5), st.sampled_from("xyz")), min_size=1, max_size=60),
    max_batch=st.integers(5, 12),
    in_flight=st.integers(1, 3),
    adaptive=st.booleans(),
)
def test_every_caller_gets_its_own_result(sizes, max_batch, in_flight, adaptive):
    """Property: under any mix, results go to their own callers and batches obey the limits."""
    seen: list[list] = []

    async def echo(items):
        seen.append(list(items))
        await asyncio.sleep(0)
        return [("out", item) for item in items]

    async def main():
        batcher = MicroBatcher(
            echo, max_batch_size=max_batch, max_in_flight=in_flight,
            max_delay_s=None if adaptive else 0.0005, adaptive=adaptive,
            size_of=lambda it: it[1], key_of=lambda it: it[2], max_queue_size=16,
        )
        items = [(i, n, key) for i, (n, key) in enumerate(sizes)]
        results = await asyncio.gather(*(batcher.submit(it) for it in items))
        assert results == [("out", it) for it in items]
        await batcher.close()
        return batcher.statistics()

    stats = asyncio.run(main())
    assert stats.succeeded == len(sizes)
    assert sorted(it for b in seen for it in b) == sorted((i, n, k) for i, (n, k) in enumerate(sizes))
    for batch in seen:
        assert sum(n for _, n, _ in batch) <= max_batch
        assert len({k for _, _, k in batch}) == 1


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://triton:8001", "url = 'https://triton:8001': scheme https:// is not supported"),
        ("ftp://triton:8001", "url = 'ftp://triton:8001': scheme ftp:// is not supported"),
        ("", "url = '': must be host:port"),
    ],
)
def test_the_triton_client_refuses_a_scheme_it_cannot_speak(url: str, message: str) -> None:
    """https:// was dropped silently, and the client spoke clear text to a TLS port."""
    from autobatch.sdk.triton import TritonBatchClient

    with pytest.raises(ConfigError, match=re.escape(message)):
        TritonBatchClient(url, "m")


@pytest.mark.parametrize("url", ["grpc://triton:8001/", "http://triton:8001", "triton:8001"])
def test_the_triton_client_takes_host_port_with_or_without_its_schemes(url: str) -> None:
    from autobatch.sdk.triton import TritonBatchClient

    assert TritonBatchClient(url, "m").url == "triton:8001"
