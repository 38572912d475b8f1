"""Device time learned from the windows: the memory, and the efficiency rules that read it.

Pure tables. The case behind it, measured on the real server
(benchmarks/closed_loop.py): dense_mlp with two instances on two cores, where
Triton's default spreads batches of one over both instances and they contend;
``efficient`` (batches of 16-32, 5 ms wait) served the same requests in a
quarter less device time at 100-170 req/s, which the one-instance curve could
not show.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autobatch.curve import BatchCurve
from autobatch.policy import PolicySettings, Reason, State, decide
from autobatch.policy.memory import DeviceMemory, device_cost, rate_bucket
from autobatch.profiles import Profile
from autobatch.signals import Window

DEFAULT = Profile("triton-default", 32, (), 0)
EFFICIENT = Profile("efficient", 32, (16, 32), 5000)
LADDER = (DEFAULT, EFFICIENT)
# dense_mlp's one-instance curve (curves/dense_mlp-cpu.yaml, rounded): batch 2 costs twice
# batch 1, so at 30-310 req/s the default and efficient form batches that cost the same.
ONE_INSTANCE = BatchCurve({1: 7.9, 2: 15.5, 4: 15.7, 8: 21.1, 16: 27.4, 32: 33.2})
# What two contending instances measure live: batch 1 takes 10.5 ms, batch 2 barely more.
CONTENDED = {1: 10.5, 2: 12.0, 3: 13.0}


# -- the memory -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [(1.0, 1.2, True), (110.0, 130.0, True), (100.0, 130.0, False), (0.0, 1.0, True),
     (130.0, 300.0, False)],
)
def test_rate_buckets_are_a_quarter_wide(a: float, b: float, same: bool) -> None:
    assert (rate_bucket(a) == rate_bucket(b)) is same


def test_remember_averages_the_windows_of_one_profile_and_rate() -> None:
    m = DeviceMemory().remember("efficient", 130.0, 6.0, 8.0, alpha=0.5)
    assert m.seen_ms("efficient", rate_bucket(130.0)) == 6.0
    assert m.ratio_of("efficient") == pytest.approx(0.75)
    m = m.remember("efficient", 131.0, 8.0, 8.0, alpha=0.5)
    assert m.seen_ms("efficient", rate_bucket(130.0)) == pytest.approx(7.0)
    assert m.ratio_of("efficient") == pytest.approx(0.875)
    # another rate has its own entry, another profile its own ratio
    m = m.remember("efficient", 20.0, 9.0, None).remember("triton-default", 130.0, 9.0, 9.0)
    assert m.seen_ms("efficient", rate_bucket(20.0)) == 9.0
    assert m.seen_ms("efficient", rate_bucket(130.0)) == pytest.approx(7.0)
    assert m.ratio_of("efficient") == pytest.approx(0.875)
    assert m.ratio_of("triton-default") == 1.0
    # nothing measured, nothing learned
    for bad in (0.0, float("nan"), -1.0):
        assert m.remember("efficient", 130.0, bad, 8.0) == m


SEEN = (DeviceMemory()
        .remember("efficient", 100.0, 6.0, 7.5, alpha=1.0)      # ratio 0.8
        .remember("triton-default", 100.0, 9.0, 6.0, alpha=1.0)  # ratio 1.5
        .remember("efficient", 160.0, 5.0, None, alpha=1.0))


@pytest.mark.parametrize(
    ("profile", "rate", "estimate", "current", "expected", "source"),
    [
        ("efficient", 100.0, 99.0, "triton-default", 6.0, "seen"),  # this very load
        ("efficient", 128.0, 99.0, "triton-default", 5.5, "seen"),  # between two seen loads
        ("efficient", 300.0, 4.0, "triton-default", 3.2, "learned"),  # its own error, elsewhere
        ("triton-default", 300.0, 4.0, "efficient", 6.0, "learned"),
        ("balanced", 300.0, 4.0, "triton-default", 6.0, "assumed"),  # never served: as wrong as current
        ("balanced", 300.0, 4.0, "aggressive", 4.0, "estimated"),  # nothing known
    ],
)
def test_device_cost_prefers_what_was_seen(profile: str, rate: float, estimate: float, current: str,
                                          expected: float, source: str) -> None:
    assert device_cost(SEEN, profile, rate, estimate, current) == (pytest.approx(expected), source)


# -- the rules that read it -------------------------------------------------------------------


def settings(**kw: Any) -> PolicySettings:
    base: dict[str, Any] = dict(
        ladder=LADDER, slo_p95_ms=60.0, confirmations=1, min_dwell_s=0.0, stabilization_s=0.0,
        curve=ONE_INSTANCE, forecast=False,
    )
    base.update(kw)
    return PolicySettings.from_flat(**base)


def win(rate: float, *, instances: int = 2, device: float | None = None, live: bool = True,
        end: float = 100.0, **kw: Any) -> Window:
    """A calm 1-s window at ``rate``: p95 20 ms, no backlog, batches of about one."""
    base: dict[str, Any] = dict(
        model="m", start_s=end - 1.0, end_s=end, success_rps=rate, inference_rps=rate,
        exec_rps=rate / 1.2, mean_batch_size=1.2, mean_queue_ms=0.3, mean_compute_ms=10.5,
        pending_requests=0.0, pending_delta=0.0, p95_ms=20.0, p99_ms=25.0,
        batch_curve_ms=CONTENDED if live else {}, device_ms_per_request=device,
        busy_instances=0.5,
    )
    base.update(kw)
    return Window(**base).with_instance_count(instances)


def step(window: Window, active: str, memory: DeviceMemory | None = None, **kw: Any) -> Any:
    state = State.initial(active)
    if memory is not None:
        state = replace(state, device=memory)
    return decide([window], state, settings(**kw), window.end_s + 0.01)


@pytest.mark.parametrize(
    ("name", "active", "window", "memory", "target", "reason", "source"),
    [
        ("two contending instances at 130/s: the default's batches of one cost most; move",
         "triton-default", win(130.0, device=9.2), None, "efficient", Reason.EFFICIENCY, "assumed"),
        ("one instance on the measured curve: the same batches, no saving; stay",
         "triton-default", win(130.0, instances=1, device=7.9, live=False), None,
         "triton-default", Reason.STEADY, None),
        ("seen before at this load and no cheaper: not tried again",
         "triton-default", win(130.0, device=9.2),
         DeviceMemory().remember("efficient", 130.0, 8.9, 7.0), "triton-default", Reason.STEADY, None),
        ("20/s: 13% less per request frees 1% of two instances; the wait is not worth it",
         "triton-default", win(20.0, device=10.8), DeviceMemory().remember("efficient", 20.0, 9.3, 9.0),
         "triton-default", Reason.STEADY, None),
        ("on efficient at 20/s, the default costs 1% more of the instances: back to it",
         "efficient", win(20.0, device=9.3), DeviceMemory().remember("triton-default", 20.0, 10.8, 10.5),
         "triton-default", Reason.LOW_LOAD, "seen"),
        ("on efficient at 60/s, the default costs 7% of the instances: inside the band, stay",
         "efficient", win(60.0, device=8.0), DeviceMemory().remember("triton-default", 60.0, 10.5, 10.5),
         "efficient", Reason.STEADY, None),
        ("on efficient at 130/s, the default costs 15% of the instances more: stay",
         "efficient", win(130.0, device=6.8), DeviceMemory().remember("triton-default", 130.0, 9.2, 9.0),
         "efficient", Reason.STEADY, None),
    ],
)
def test_efficiency_reads_the_learned_device_time(name: str, active: str, window: Window,
                                                  memory: DeviceMemory | None, target: str,
                                                  reason: Reason, source: str | None) -> None:
    d, state = step(window, active, memory)
    assert (d.target if d.switch else d.current, d.reason) == (target, reason), d.message
    if source is not None:
        assert f"({source})" in d.message
    # the window's own profile is remembered at the window's load
    assert state.device.seen_ms(active, rate_bucket(window.inference_rps)) is not None


def test_without_a_device_signal_nothing_is_remembered() -> None:
    _, state = step(win(130.0, device=None), "triton-default")
    assert state.device == DeviceMemory()


def test_a_wrong_estimate_is_tried_once_then_remembered() -> None:
    """The estimate promises a saving that the server does not give (one instance here):
    the controller tries it, sees the truth, goes back, and does not try again."""
    # what each really costs at 100/s; the estimate on the live points promises efficient 25% less
    truth = {"triton-default": 10.0, "efficient": 9.8}
    s = settings(min_dwell_s=10.0, confirmations=3, stabilization_s=30.0, p95_settle_s=0.0)
    state = State.initial("triton-default")
    history: list[Window] = []
    switches = []
    for t in range(300):
        w = win(100.0, instances=1, device=truth[state.active], end=1000.0 + t)
        history = (history + [w])[-30:]
        d, state = decide(history, state, s, w.end_s + 0.01)
        if d.switch:
            switches.append((t, d.target, d.reason))
            state = state.switched(d.target, d.at_s, 3.0)
    assert [x[1:] for x in switches] == [("efficient", Reason.EFFICIENCY),
                                         ("triton-default", Reason.LOW_LOAD)]


@pytest.mark.parametrize(
    ("name", "memory", "mean_ms", "target", "reason"),
    [
        ("the wait buys a quarter of the device time and requests take 20 ms: keep waiting",
         DeviceMemory().remember("triton-default", 200.0, 7.4, 7.0), 20.0, "efficient", Reason.STEADY),
        ("the default costs the same: the wait buys nothing, step toward latency",
         DeviceMemory().remember("triton-default", 200.0, 5.7, 7.0), 20.0,
         "triton-default", Reason.SELF_INFLICTED_WAIT),
        ("the wait pays, but requests take 45 ms (over 0.7 x SLO): step toward latency",
         DeviceMemory().remember("triton-default", 200.0, 7.4, 7.0), 45.0,
         "triton-default", Reason.SELF_INFLICTED_WAIT),
        ("the same costs seen, the instances 90% busy: not self-inflicted, but the batches gain "
         "nothing and the wait only adds latency",
         DeviceMemory().remember("triton-default", 200.0, 5.7, 7.0), 20.0,
         "triton-default", Reason.NO_GAIN),
        ("the instances 90% busy, the default's cost never seen: assumed to cost more, keep",
         DeviceMemory(), 20.0, "efficient", Reason.STEADY),
    ],
)
def test_a_wait_that_buys_device_time_is_not_self_inflicted(name: str, memory: DeviceMemory,
                                                            mean_ms: float, target: str,
                                                            reason: Reason) -> None:
    """On efficient at 200/s the batches average 2.4, under its preferred 16, and requests
    wait ~5 ms: the real server's case, where that wait saved a quarter of the device time."""
    busy = 1.8 if "busy" in name else 1.0  # of two instances
    w = win(200.0, device=5.6, mean_batch_size=2.4, mean_queue_ms=4.8, mean_request_ms=mean_ms,
            busy_instances=busy)
    d, _ = step(w, "efficient", memory)
    assert (d.target if d.switch else d.current, d.reason) == (target, reason), d.message
    if reason is Reason.STEADY and "busy" not in name:
        assert "the wait pays" in d.signals["wait"]
    if "never seen" in name:
        assert d.signals["device_ms_source"]["triton-default"] == "assumed"


@pytest.mark.parametrize(
    ("name", "memory", "needs_seen", "target", "reason"),
    [
        ("the default learned at 50/s to cost a tenth of its estimate, which carries to 200/s: "
         "the same cost, the wait buys nothing", DeviceMemory().remember("triton-default", 50.0, 1.0, 10.0),
         False, "triton-default", Reason.NO_GAIN),
        ("the same memory, no_gain_needs_seen: a cost learned at 50/s is not a cost seen here; keep",
         DeviceMemory().remember("triton-default", 50.0, 1.0, 10.0), True, "efficient", Reason.STEADY),
        ("seen at 200/s to cost the same: no_gain_needs_seen steps back as before",
         DeviceMemory().remember("triton-default", 200.0, 5.7, 7.0), True, "triton-default", Reason.NO_GAIN),
    ],
)
def test_no_gain_on_a_learned_cost_only_without_needs_seen(name: str, memory: DeviceMemory, needs_seen: bool,
                                                           target: str, reason: Reason) -> None:
    """`no_gain` on efficient at 200/s, two instances 90% busy, requests queuing near the max
    delay: with ``efficiency.no_gain_needs_seen`` the default's cost must be seen at this load."""
    w = win(200.0, device=5.6, mean_batch_size=2.4, mean_queue_ms=4.8, mean_request_ms=20.0,
            busy_instances=1.8)
    s = settings()
    s = replace(s, efficiency=replace(s.efficiency, no_gain_needs_seen=needs_seen))
    state = replace(State.initial("efficient"), device=memory)
    d, _ = decide([w], state, s, w.end_s + 0.01)
    assert (d.target if d.switch else d.current, d.reason) == (target, reason), d.message
    assert d.signals["device_ms_source"]["triton-default"] == ("seen" if "seen at 200" in name else "learned")


@pytest.mark.parametrize(
    ("name", "queue_ms", "max_busy", "switch"),
    [
        ("a reload's limit, the queue the batcher's wait: step back", 4.8, 0.7, True),
        ("a reload's limit, the queue a backlog: hold, a reload now takes the busy instances", 40.0,
         0.7, False),
        ("no limit (the gateway's warm variants), the queue a backlog: step back", 40.0, 1.0, True),
        ("a reload's limit above the busy share, the queue a backlog: step back", 40.0, 0.95, True),
    ],
)
def test_no_gain_does_not_reload_into_a_backlog(name: str, queue_ms: float, max_busy: float,
                                                switch: bool) -> None:
    """`no_gain` on efficient, two instances 90% busy: with efficiency_max_busy under the busy
    share and requests queuing far beyond the 5 ms max delay, the step back is held."""
    w = win(200.0, device=5.6, mean_batch_size=2.4, mean_queue_ms=queue_ms, mean_request_ms=20.0,
            busy_instances=1.8)
    memory = DeviceMemory().remember("triton-default", 200.0, 5.7, 7.0)
    d, _ = step(w, "efficient", memory, efficiency_max_busy=max_busy)
    if switch:
        assert (d.switch, d.target, d.reason) == (True, "triton-default", Reason.NO_GAIN), d.message
    else:
        assert (d.switch, d.reason, d.signals["because"]) == (False, Reason.SATURATED, "no_gain"), d.message
        assert "is a backlog" in d.message and "90% busy (> 70%)" in d.message
