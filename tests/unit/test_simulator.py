"""The simulator of Triton's dynamic batcher: batch formation, table by table.

The scenarios are small enough to work out by hand from the rules in
``autobatch.plan.simulator`` (and Triton's ``dynamic_batch_scheduler.cc``);
each expected row is that hand calculation.
"""

from __future__ import annotations

import numpy as np
import pytest

from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError
from autobatch.plan.simulator import ServiceModel, Workload, simulate
from autobatch.profiles import Profile, QueuePolicy
from autobatch.schedule import Phase, Schedule, arrivals, load_schedule

FLAT_10MS = BatchCurve({1: 10.0, 32: 10.0}, name="flat")
"""Any batch takes 10 ms: batch times never blur the formation rules."""


def prof(preferred=(4,), mbs=8, delay_us=2000, **kw) -> Profile:
    return Profile(
        name="t", max_batch_size=mbs, preferred_batch_size=tuple(preferred),
        max_queue_delay_us=delay_us, **kw,
    )


def work(*ms: float) -> Workload:
    t = np.array(ms, dtype=float) / 1000.0
    return Workload(t_s=t, duration_s=max(1.0, float(t[-1]) + 0.001))


def batches(profile, workload, engine, curve=FLAT_10MS, instances=1):
    """(start ms, size) of every batch, in start order."""
    res = simulate(profile, ServiceModel(curve), workload, engine=engine, instances=instances,
                   keep_latencies=True)
    lat = res.latencies_ms
    starts = np.round(workload.t_s * 1000 + lat - 10.0, 6)
    out: dict[float, int] = {}
    for s in starts:
        out[float(s)] = out.get(float(s), 0) + 1
    return sorted(out.items())


BOTH = ["triton", "rules"]


@pytest.mark.parametrize("engine", BOTH)
@pytest.mark.parametrize(
    ("name", "profile", "arrivals_ms", "expected"),
    [
        # An idle server: nothing reaches preferred 4, so the oldest request's 2 ms delay sends all 3.
        ("delay runs out", prof(), (0, 0.5, 1.0), [(2.0, 3)]),
        # The fourth arrival completes the preferred size: sent at once.
        ("preferred completes", prof(), (0, 0.5, 1.0, 1.5), [(1.5, 4)]),
        # Delay 0: whatever is queued goes at once; the first request alone.
        ("no delay", prof(delay_us=0), (0, 1, 2, 3, 4), [(0.0, 1), (10.0, 4)]),
        # Empty preferred counts as [max_batch_size]: 8 arrivals complete it.
        ("empty preferred", prof(preferred=(), mbs=8, delay_us=50_000),
         tuple(range(8)), [(7.0, 8)]),
        # Batch 1 preferred with no delay: never batches, even with a queue.
        ("batch 1", prof(preferred=(1,), delay_us=0), (0, 1, 2), [(0.0, 1), (10.0, 1), (20.0, 1)]),
        # max_batch_size caps a batch whose delay ran out while the instance was busy.
        ("max batch caps", prof(preferred=(3,), mbs=4, delay_us=1000),
         (0, 1, 2, 3, 4, 5, 6, 7, 8), [(1.0, 2), (11.0, 4), (21.0, 3)]),
    ],
)
def test_batch_formation(engine, name, profile, arrivals_ms, expected):
    assert batches(profile, work(*arrivals_ms), engine) == expected


def test_a_payload_sent_on_its_delay_does_not_grow_in_triton():
    """Seen in Triton's request traces: request A's delay runs out while the instance
    is busy, so A leaves as a payload of one. B, C and D arrive before the instance
    is free, but an arrival only wakes the batcher once the queue reaches the
    preferred size (4), so they do not join A and run in the batch after it. The
    plain rules put all four together."""
    arr = (0, 3.0, 6.0, 7.0, 8.0)
    assert batches(prof(), work(*arr), "triton") == [(2.0, 1), (12.0, 1), (22.0, 3)]
    assert batches(prof(), work(*arr), "rules") == [(2.0, 1), (12.0, 4)]


def test_a_payload_below_the_queue_wake_grows_in_triton():
    """A fourth arrival behind A reaches the wake-up count; by then B has waited
    past its delay, so everything queued joins A's payload before the instance
    takes it."""
    arr = (0, 3.0, 6.0, 7.0, 8.0, 9.0)
    assert batches(prof(), work(*arr), "triton") == [(2.0, 1), (12.0, 5)]


@pytest.mark.parametrize("engine", BOTH)
def test_batches_spread_over_instances(engine):
    # Two instances, no delay: two requests 1 ms apart run side by side.
    got = batches(prof(delay_us=0), work(0, 1, 2), engine, instances=2)
    assert got == [(0.0, 1), (1.0, 1), (10.0, 1)]


def test_rules_and_general_engines_agree():
    rng = np.random.default_rng(3)
    curve = BatchCurve({1: 4.0, 4: 7.0, 8: 11.0, 16: 19.0})
    service = ServiceModel(curve, batch_overhead_ms=0.3, request_overhead_ms=0.05, noise_cv=0.2)
    for p in (prof(), prof(preferred=(2, 8), mbs=16, delay_us=5000), prof(delay_us=0)):
        for rate in (100, 600, 1500):
            w = Workload.poisson(rate, 5, seed=int(rng.integers(1000)))
            a = simulate(p, service, w, engine="rules", seed=5, keep_latencies=True)
            b = simulate(p, service, w, engine="general", seed=5, keep_latencies=True)
            assert a.batch_counts == b.batch_counts
            np.testing.assert_allclose(a.latencies_ms, b.latencies_ms)


def test_throughput_and_batches_under_load():
    curve = BatchCurve({1: 10.0, 2: 12.0, 4: 16.0, 8: 24.0, 16: 40.0, 32: 72.0})
    service = ServiceModel(curve)
    p = prof(preferred=(4, 8), mbs=32)
    light = simulate(p, service, Workload.poisson(20, 30, seed=1))
    heavy = simulate(p, service, Workload.poisson(300, 30, seed=1))
    assert light.completed == light.requests and heavy.completed == heavy.requests
    assert light.throughput_rps == pytest.approx(light.offered_rps, rel=0.02)
    assert heavy.throughput_rps == pytest.approx(heavy.offered_rps, rel=0.02)
    assert light.mean_batch < 1.5 < 4 < heavy.mean_batch
    # 300 rps cannot be served by batch 1 (100 rps), only by batching.
    assert heavy.utilisation < 1.0
    assert sum(b * c for b, c in heavy.batch_counts.items()) == heavy.requests


def test_overload_grows_latency_without_bound():
    service = ServiceModel(BatchCurve({1: 10.0}))  # no gain: 100 rps at most
    short = simulate(prof(preferred=(1,), delay_us=0), service, Workload.poisson(150, 5, seed=1))
    long = simulate(prof(preferred=(1,), delay_us=0), service, Workload.poisson(150, 20, seed=1))
    assert short.throughput_rps == pytest.approx(100, rel=0.02)
    assert long.latency.p99_ms > 3 * short.latency.p99_ms


def test_fixed_latency_is_added_but_takes_no_instance_time():
    w = Workload.poisson(50, 20, seed=2)
    base = simulate(prof(), ServiceModel(FLAT_10MS), w)
    net = simulate(prof(), ServiceModel(FLAT_10MS, fixed_latency_ms=7.0), w)
    assert net.latency.p50_ms == pytest.approx(base.latency.p50_ms + 7.0)
    assert net.utilisation == pytest.approx(base.utilisation)


def test_overheads_occupy_the_instance():
    w = Workload.poisson(60, 20, seed=2)
    base = simulate(prof(delay_us=0), ServiceModel(FLAT_10MS), w)
    slow = simulate(prof(delay_us=0), ServiceModel(FLAT_10MS, batch_overhead_ms=3.0), w)
    assert slow.utilisation > base.utilisation
    assert slow.latency.p95_ms > base.latency.p95_ms + 3.0


def test_noise_keeps_the_mean_batch_time():
    curve = BatchCurve({1: 5.0})
    w = Workload.poisson(50, 200, seed=4)
    calm = simulate(prof(preferred=(1,), delay_us=0), ServiceModel(curve), w)
    noisy = simulate(prof(preferred=(1,), delay_us=0), ServiceModel(curve, noise_cv=0.5), w, seed=9)
    assert noisy.utilisation == pytest.approx(calm.utilisation, rel=0.03)
    assert noisy.latency.p99_ms > calm.latency.p99_ms


# -- priorities and queue policies (the general engine) ------------------------------------


def test_a_higher_priority_request_overtakes_an_older_one():
    p = prof(preferred=(1,), mbs=1, delay_us=0, priority_levels=2, default_priority_level=2)
    # 0: runs alone. 1 (level 2) and 2 (level 1) wait for it; level 1 goes first.
    w = Workload(t_s=np.array([0, 0.001, 0.002]), duration_s=1.0, priority=np.array([2, 2, 1]))
    res = simulate(p, ServiceModel(FLAT_10MS), w, keep_latencies=True)
    assert res.engine == "general"
    np.testing.assert_allclose(res.latencies_ms, [10.0, 29.0, 18.0])
    levels = {r.level: r for r in res.priorities}
    assert levels[1].latency.p50_ms < levels[2].latency.p50_ms


def test_priority_mix_splits_latency_under_load():
    p = prof(preferred=(4,), mbs=4, delay_us=1000, priority_levels=2, default_priority_level=2)
    w = Workload.poisson(330, 30, seed=1, priority_mix={1: 0.2, 2: 0.8})
    res = simulate(p, ServiceModel(BatchCurve({1: 6.0, 4: 12.0})), w)
    levels = {r.level: r for r in res.priorities}
    assert levels[1].requests + levels[2].requests == res.requests
    assert levels[1].latency.p99_ms < levels[2].latency.p99_ms


def test_reject_timeout_bounds_the_queue_wait():
    policy = QueuePolicy(timeout_action="REJECT", default_timeout_microseconds=20_000)
    p = prof(preferred=(1,), mbs=1, delay_us=0, default_queue_policy=policy)
    res = simulate(p, ServiceModel(FLAT_10MS), Workload.poisson(150, 10, seed=1))
    assert res.rejected > 0 and res.completed + res.rejected == res.requests
    assert res.queue.max_ms <= 20.0
    # Near capacity (100 rps), not above it; dropping stale requests can leave the
    # instance idle for a moment.
    assert 85 < res.throughput_rps <= 100.5


def test_delay_action_keeps_every_request():
    policy = QueuePolicy(timeout_action="DELAY", default_timeout_microseconds=20_000)
    p = prof(preferred=(1,), mbs=1, delay_us=0, default_queue_policy=policy)
    res = simulate(p, ServiceModel(FLAT_10MS), Workload.poisson(120, 5, seed=1))
    assert res.rejected == 0
    assert res.queue.max_ms > 20.0  # delayed requests wait behind the fresh ones


def test_max_queue_size_rejects_at_the_door():
    policy = QueuePolicy(max_queue_size=5)
    p = prof(preferred=(1,), mbs=1, delay_us=0, default_queue_policy=policy)
    res = simulate(p, ServiceModel(FLAT_10MS), Workload.poisson(200, 10, seed=1))
    assert res.rejected > 0
    # At most 5 wait plus the one running: no completed request waited for more than 6 batches.
    assert res.queue.max_ms <= 60.0 + 1e-6


def test_priorities_refuse_the_fifo_engines():
    p = prof(priority_levels=2, default_priority_level=1)
    w = Workload(t_s=np.array([0.0, 0.001]), duration_s=1.0, priority=np.array([1, 2]))
    with pytest.raises(ConfigError, match="does not model priority levels or queue policies"):
        simulate(p, ServiceModel(FLAT_10MS), w, engine="triton")
    with pytest.raises(ConfigError, match=r"priority 3: must be 0 .* \[1, 2\]"):
        simulate(p, ServiceModel(FLAT_10MS),
                 Workload(t_s=np.array([0.0]), duration_s=1.0, priority=np.array([3])))


# -- workloads ------------------------------------------------------------------------------


def test_schedule_workload_is_what_autobatch_load_sends(tmp_path):
    path = tmp_path / "step.yaml"
    path.write_text(
        "phases:\n"
        "  - {name: low, rate_rps: 50, duration_s: 4}\n"
        "  - {name: high, rate_rps: 400, duration_s: 4}\n"
        "  - {name: burst, rate_rps: 100, duration_s: 4, arrival: bursty, burst_size: 8}\n"
    )
    schedule = load_schedule(path)
    at_once = Workload.from_schedule(schedule, seed=11, burst_gap_s=0.0)
    np.testing.assert_array_equal(at_once.t_s, arrivals(schedule, 11).t_s)
    w = Workload.from_schedule(schedule, seed=11)
    p = prof(preferred=(4, 8), mbs=32)
    res = simulate(p, ServiceModel(BatchCurve({1: 5.0, 8: 10.0})), w)
    assert [ph.name for ph in res.phases] == ["low", "high", "burst"]
    low, high, burst = res.phases
    assert low.mean_batch < high.mean_batch
    assert high.throughput_rps == pytest.approx(400, rel=0.05)
    # A burst from one client reaches Triton request by request (SEND_GAP_S apart): the
    # batcher sends the first 4 when the fourth arrives, then the next 4. Queued at
    # one instant, the 8 would go as one batch of the largest preferred size, 8.
    assert 4.0 <= burst.mean_batch < 6.0
    together = simulate(p, ServiceModel(BatchCurve({1: 5.0, 8: 10.0})), at_once)
    assert together.phases[2].mean_batch == pytest.approx(8.0, abs=0.3)


def test_bursty_workload_arrives_in_bursts():
    w = Workload.bursty(80, 10, 8, seed=1, burst_gap_s=0.0)
    assert len(w) % 8 == 0
    assert np.all(w.t_s[0::8] == w.t_s[7::8])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"t_s": np.array([0.2, 0.1]), "duration_s": 1.0}, "sorted"),
        ({"t_s": np.array([0.1]), "duration_s": 0.0}, "duration_s"),
        ({"t_s": np.array([0.1]), "duration_s": 1.0, "priority": np.array([1, 2])}, "one entry"),
    ],
)
def test_bad_workloads(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Workload(**kwargs)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        # numpy's "expected non-negative integer" and "probabilities contain NaN" were tracebacks.
        (lambda: Workload.poisson(10, 1, seed=-1), r"seed = -1: must be an integer >= 0"),
        (lambda: Workload.streams(2, 30, 1, seed=-1), r"seed = -1: must be an integer >= 0"),
        (lambda: simulate(prof(), ServiceModel(FLAT_10MS), work(0), seed=-1), r"seed = -1: must be"),
        (lambda: Workload.poisson(10, 1, priority_mix={1: float("nan"), 2: 1.0}),
         r"priority_mix share of level 1 = nan: must be a number >= 0"),
        (lambda: Workload.poisson(10, 1, priority_mix={1: float("inf"), 2: 1.0}),
         r"priority_mix share of level 1 = inf: must be a number >= 0"),
        (lambda: Workload.poisson(10, 1, priority_mix={-1: 1.0}), r"priority_mix level -1: must be"),
        (lambda: Workload.poisson(10, 1, priority_mix={1: 0.0}), r"priority_mix = \{1: 0.0\}: .* not all 0"),
    ],
)
def test_bad_seeds_and_priority_mixes(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_bad_service_and_engine():
    with pytest.raises(ConfigError, match="batch_overhead_ms = -1"):
        ServiceModel(FLAT_10MS, batch_overhead_ms=-1)
    with pytest.raises(ConfigError, match="engine = 'fast'"):
        simulate(prof(), ServiceModel(FLAT_10MS), work(0), engine="fast")
    with pytest.raises(ConfigError, match="instances = 0"):
        simulate(prof(), ServiceModel(FLAT_10MS), work(0), instances=0)


def test_phase_schedule_constant_matches_poisson_constructor():
    a = Workload.poisson(100, 3, seed=5)
    b = Workload.from_schedule(Schedule((Phase("poisson", 100, 3),)), seed=5)
    np.testing.assert_array_equal(a.t_s, b.t_s)


@pytest.mark.parametrize(
    ("timer", "until"),
    [(0.0, 1e6), (0.3, 0.3), (1 / 3, 7.0), (1e-9, 2.6e6), (2.0**20 - 0.1, 2.0**22 + 0.3), (7.25, 7.2)],
)
def test_the_idle_timer_skip_lands_where_ticking_does(timer, until):
    from autobatch.plan.simulator.engines.triton import next_tick

    ticked = timer
    while ticked < until:
        ticked += 0.5
    assert next_tick(timer, until, 0.5) == ticked  # the same float, not a close one


@pytest.mark.parametrize("engine", ["triton", "rules", "general"])
def test_a_long_idle_gap_and_a_huge_max_batch_size_run_at_once(engine):
    # 30 days of idle between two requests was 5 million turns of the idle timer, and a
    # max_batch_size of 2**31-1 (Triton's int32) a table of 2**31 entries: the test's
    # timeout is the assertion.
    w = work(0.0, 2_592_000_000.0 - 20.0, 2_592_000_000.0)
    res = simulate(prof((), mbs=2**31 - 1, delay_us=0), ServiceModel(FLAT_10MS), w, engine=engine)
    assert res.completed == 3 and res.latency.max_ms == pytest.approx(10.0)
