"""Batch formation as Triton does it, rule by rule, for every engine that models it.

Each rule comes from Triton's source (core ``src/dynamic_batch_scheduler.cc``:
``Enqueue``, ``BatcherThread``, ``GetDynamicBatch``; ``src/scheduler_utils.cc``:
``PriorityQueue``; ``src/rate_limiter.cc``: ``PayloadSlotAvailable``), and each
expected row below is worked out by hand from the rule named in the case, with
every batch taking 10 ms (or the curve the case names). A row is a batch:
(start ms, rows, requests).

The engines: ``triton`` (the batcher thread with prefetch), ``rules`` (batches
formed only when an instance is free: Triton without prefetch) and ``general``
(the same with priority levels and queue policies). On an idle server all three
must form the same batches; where the instance is busy they differ on purpose
(tests/unit/test_simulator.py has those cases).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError
from autobatch.plan.simulator import ServiceModel, Workload, simulate, spread_same_times
from autobatch.plan.simulator.engines.common import Rules, Service, prefix_rows, walk, walk_single
from autobatch.plan.simulator.engines.rules import run_rules
from autobatch.plan.simulator.engines.triton import run_triton
from autobatch.profiles import Profile, QueuePolicy

ENGINES = ("triton", "rules", "general")
FLAT_10MS = BatchCurve({1: 10.0, 32: 10.0}, name="flat 10 ms")


def prof(preferred=(4,), mbs=8, delay_ms=100.0, **kw) -> Profile:
    return Profile(name="t", max_batch_size=mbs, preferred_batch_size=tuple(preferred),
                   max_queue_delay_us=int(delay_ms * 1000), **kw)


def arrivals(*items) -> Workload:
    """``(ms, rows)`` pairs, or plain ms for one-row requests; equal times queue together."""
    t = [i[0] if isinstance(i, tuple) else i for i in items]
    rows = [i[1] if isinstance(i, tuple) else 1 for i in items]
    return Workload(t_s=np.array(t, float) / 1000.0, duration_s=1.0, rows=np.array(rows))


def batches(profile: Profile, work: Workload, engine: str, curve=FLAT_10MS):
    """(start ms, rows, requests) of every batch, in start order."""
    res = simulate(profile, ServiceModel(curve), work, engine=engine, keep_latencies=True)
    assert res.completed == res.requests
    ends = work.t_s * 1000.0 + res.latencies_ms
    out: dict[float, list[int]] = {}
    for end, r in zip(np.round(ends, 6), work.rows):
        b = out.setdefault(float(end), [0, 0])
        b[0] += int(r)
        b[1] += 1
    batch_ms = {rows: curve.estimate(rows).ms for rows, _ in out.values()}
    return sorted((round(end - batch_ms[rows], 6), rows, n) for end, (rows, n) in out.items())


FORMATION = [
    # -- bursts of n at once: Enqueue only notifies the batcher; it walks what is queued.
    ("a burst completes the largest preferred size",
     prof(preferred=(2, 6)), arrivals(0, 0, 0, 0, 0, 0), [(0.0, 6, 6)]),
    ("a burst of 5 sends the largest preferred size it holds, 2",
     # walk: 1, 2 (preferred), 3, 4, 5: best 2. The rest: 2 again when the instance
     # frees at 10 ms, then the last one waits out its delay (100 ms from t=0).
     prof(preferred=(2, 6)), arrivals(0, 0, 0, 0, 0), [(0.0, 2, 2), (10.0, 2, 2), (100.0, 1, 1)]),
    ("a burst larger than max_batch_size is cut at it; the rest waits out its delay",
     prof(preferred=(), mbs=4), arrivals(0, 0, 0, 0, 0, 0), [(0.0, 4, 4), (100.0, 2, 2)]),
    ("a burst with no delay: the largest preferred size, then the rest",
     prof(preferred=(1, 2, 4), mbs=32, delay_ms=0), arrivals(*[0] * 8), [(0.0, 4, 4), (10.0, 4, 4)]),
    # -- multi-row requests count rows and are never split.
    ("rows complete a preferred size", prof(preferred=(4,)),
     arrivals((0, 2), (1, 2)), [(1.0, 4, 2)]),
    ("near max_batch_size the request that does not fit starts the next batch",
     # walk: 5 rows, then 5 + 4 > 8 (largest preferred and max): the batch is the 5.
     prof(preferred=(), mbs=8, delay_ms=0), arrivals((0, 5), (0, 4)), [(0.0, 5, 1), (10.0, 4, 1)]),
    ("past the largest preferred size with none formed, the batch so far goes at once",
     # 3 rows wait for preferred 4; the next 3 would make 6 > 4: the walk marks the
     # first request and sends it at the second's arrival, not at the delay.
     prof(preferred=(4,), mbs=8, delay_ms=50), arrivals((0, 3), (1, 3)), [(1.0, 3, 1), (51.0, 3, 1)]),
    ("a full max_batch_size of rows from three requests",
     prof(preferred=(8,), mbs=8), arrivals((0, 3), (0, 3), (0, 2)), [(0.0, 8, 3)]),
    ("a batch at or past the largest preferred size goes at once, delay or not",
     prof(preferred=(2,), mbs=8, delay_ms=50), arrivals((0, 6)), [(0.0, 6, 1)]),
    # -- preferred sizes that cannot be formed: the delay decides.
    ("three single rows never reach preferred 4: sent when the oldest's delay runs out",
     prof(preferred=(4,), delay_ms=20), arrivals(0, 5, 10), [(20.0, 3, 3)]),
    ("rows of 3 skip over preferred 4 and 2: the delay sends them",
     prof(preferred=(2, 4), mbs=8, delay_ms=20), arrivals((0, 3)), [(20.0, 3, 1)]),
    # -- the delay is measured from the oldest request of the batch being formed.
    ("delay from the oldest: the second request waits 4 ms, not 10",
     prof(preferred=(4,), delay_ms=10), arrivals(0, 6, 12), [(10.0, 2, 2), (22.0, 1, 1)]),
    ("delay 0 sends what is queued at once",
     prof(preferred=(4,), delay_ms=0), arrivals(0, 1, 2), [(0.0, 1, 1), (10.0, 2, 2)]),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("name", "profile", "work", "expected"), FORMATION,
                         ids=[c[0] for c in FORMATION])
def test_batch_formation(engine, name, profile, work, expected):
    assert batches(profile, work, engine) == expected


# -- timeouts with a bounded queue (general engine; the others refuse) -----------------------

SLOW_2S = BatchCurve({1: 2000.0}, name="2 s per batch")
BOUNDED = prof(preferred=(1,), mbs=1, delay_ms=0, default_queue_policy=QueuePolicy(
    timeout_action="REJECT", default_timeout_microseconds=100_000, max_queue_size=2))


def test_timeouts_with_a_bounded_queue():
    """One instance busy for 2 s with request 0. The batcher, with nothing queued
    after sending it, waits 500 ms at a time (its idle wait, from t=0); once requests
    queue and no instance is free it waits for one, rejecting expired requests
    each time its 500 ms run out (WaitForPayloadSlotAvailable, RejectTimeoutRequests).

    ms    request  what happens
    10    1        queued (expires at 110)
    20    2        queued (expires at 120): the queue holds max_queue_size = 2
    30    3        refused at the door: the expired 1 and 2 still hold the slots
    500            the idle wait ends with requests queued; the wait for an instance starts
    1000           1 and 2 rejected: the slots are free
    1200  4        queued (expires at 1300)
    1500           4 rejected
    1600  5        queued (expires at 1700)
    2000           the instance frees; the walk meets 5 expired: rejected
    2100  6        runs at once
    """
    work = arrivals(0, 10, 20, 30, 1200, 1600, 2100)
    res = simulate(BOUNDED, ServiceModel(SLOW_2S), work, keep_latencies=True)
    assert res.engine == "general"
    np.testing.assert_allclose(res.rejected_at_s * 1000,
                               [np.nan, 1000, 1000, 30, 1500, 2000, np.nan], equal_nan=True)
    assert (res.completed, res.rejected_full, res.rejected_timeout) == (2, 1, 4)
    assert res.rejection.max_ms == pytest.approx(990.0)  # request 1: 10 -> 1000
    # Waits before rejection: 990, 980, 300, 400 ms.
    assert res.to_dict()["rejection_ms"]["p50"] == pytest.approx(690.0)


def test_a_timeout_with_a_free_instance_is_prompt():
    """With an instance free the batcher waits for the batch's delay, cut short at
    the closest timeout of its requests: rejected right after 30 ms."""
    p = prof(preferred=(4,), mbs=4, delay_ms=100, default_queue_policy=QueuePolicy(
        timeout_action="REJECT", default_timeout_microseconds=30_000))
    res = simulate(p, ServiceModel(FLAT_10MS), arrivals(0), keep_latencies=True)
    assert res.rejected_timeout == 1
    assert res.rejected_at_s[0] * 1000 == pytest.approx(30.0)


TWO_LEVELS = prof(priority_levels=2, default_priority_level=2)
PRIORITY_MIX = Workload(t_s=np.array([0.0, 0.01]), duration_s=1.0, priority=np.array([1, 2]))


@pytest.mark.parametrize("engine", ["triton", "rules"])
@pytest.mark.parametrize(("profile", "work"), [(BOUNDED, arrivals(0, 10)), (TWO_LEVELS, PRIORITY_MIX)],
                         ids=["queue policy", "priority levels"])
def test_engines_that_do_not_model_a_feature_refuse_it(engine, profile, work):
    """Neither FIFO engine models queue policies or priority levels (Triton forms batches
    differently with them): each refuses both, naming itself, rather than answer wrongly;
    the general engine, which models them, takes the same input."""
    with pytest.raises(ConfigError, match=rf"^engine = '{engine}': does not model priority levels or "
                                          r"queue policies .*use engine 'general'"):
        simulate(profile, ServiceModel(SLOW_2S), work, engine=engine)
    assert simulate(profile, ServiceModel(SLOW_2S), work, engine="general").requests == 2


def test_rows_over_max_batch_size_are_refused():
    with pytest.raises(ConfigError, match=r"rows = 9 \(request 1 of .*\): must be <= .* max_batch_size 8"):
        simulate(prof(), ServiceModel(FLAT_10MS), arrivals((0, 2), (1, 9)))


# -- the walk: the O(1) one-row version is the literal loop -----------------------------------


@pytest.mark.parametrize("preferred", [(), (1,), (4,), (2, 6), (1, 2, 4), (3, 8), (8,)])
def test_walk_single_is_the_walk_for_one_row_requests(preferred):
    rules = Rules.of(prof(preferred=preferred, mbs=8))
    ones = [1] * 12
    for queued, payload in itertools.product(range(12), range(9)):
        assert walk_single(queued, payload, rules) == walk(ones, 0, queued, payload, rules), (
            queued, payload)


def test_the_engines_row_path_matches_their_one_row_path():
    """The multi-row code path fed one-row requests gives the validated one-row batches."""
    rng = np.random.default_rng(7)
    t = np.sort(rng.uniform(0, 5, 2000)).tolist()
    for p in (prof(preferred=(4, 8), mbs=16, delay_ms=5), prof(preferred=(2,), delay_ms=0)):
        rules = Rules.of(p)
        svc = Service.of(ServiceModel(BatchCurve({1: 4.0, 16: 20.0})), p.max_batch_size)
        noise = [1.0] * len(t)
        ones = [1] * len(t)
        for run in (run_triton, run_rules):
            fast = run(t, None, None, rules, svc, noise, 1)
            slow = run(t, ones, prefix_rows(np.array(ones), len(t)), rules, svc, noise, 1)
            assert fast == slow


# -- multi-row workloads: the engines that decide at a free instance agree ------------------


def test_rules_and_general_agree_on_multi_row_load():
    curve = BatchCurve({1: 4.0, 4: 7.0, 8: 11.0, 16: 19.0})
    service = ServiceModel(curve, batch_overhead_ms=0.3, request_overhead_ms=0.05, noise_cv=0.2)
    for p in (prof(preferred=(4, 8), mbs=16, delay_ms=5), prof(preferred=(8,), delay_ms=0)):
        for rate in (50, 300, 800):
            w = Workload.poisson(rate, 5, seed=rate, rows={1: 0.5, 2: 0.3, 3: 0.2})
            a = simulate(p, service, w, engine="rules", seed=5, keep_latencies=True)
            b = simulate(p, service, w, engine="general", seed=5, keep_latencies=True)
            assert a.batch_counts == b.batch_counts
            np.testing.assert_allclose(a.latencies_ms, b.latencies_ms)
            assert a.rows == int(w.rows.sum()) and a.mean_batch > a.mean_batch_requests


def test_rows_from_a_fixed_number_or_a_distribution():
    fixed = Workload.poisson(100, 2, seed=1, rows=3)
    assert set(fixed.rows.tolist()) == {3}
    mixed = Workload.poisson(1000, 10, seed=1, rows={1: 0.75, 4: 0.25})
    assert set(mixed.rows.tolist()) == {1, 4}
    assert np.mean(mixed.rows == 4) == pytest.approx(0.25, abs=0.02)


def test_a_burst_reaches_the_server_spread_unless_told_otherwise():
    t, order = spread_same_times(np.array([0.0, 0.0, 0.0, 1.0]), 60e-6)
    np.testing.assert_allclose(t, [0.0, 60e-6, 120e-6, 1.0])
    assert order.tolist() == [0, 1, 2, 3]
    at_once = Workload.bursty(80, 1, 8, seed=1, burst_gap_s=0.0)
    assert np.all(at_once.t_s[0::8] == at_once.t_s[7::8])
    spread = Workload.bursty(80, 1, 8, seed=1)
    np.testing.assert_allclose(spread.t_s[7::8] - spread.t_s[0::8], 7 * 60e-6)
