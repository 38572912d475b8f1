"""The default policy, as tables: one window in, one decision out; then scenarios."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autobatch.curve import BatchCurve
from autobatch.policy import (
    Action,
    PolicySettings,
    Reason,
    State,
    capacity_rps,
    decide,
    floor_capacity_rps,
)
from autobatch.profiles import Profile
from autobatch.signals import Window

LS = Profile("latency-soft", 32, (2, 4, 8), 1000)
BAL = Profile("balanced", 32, (8, 16), 5000)
AGG = Profile("aggressive", 32, (16, 32), 20000)
LADDER = (LS, BAL, AGG)

# Shapes of the two example torch models on this CPU (ms per batch).
GAINS = BatchCurve({1: 7.0, 2: 14.0, 4: 13.0, 8: 15.0, 16: 20.0, 32: 30.0})
NO_GAIN = BatchCurve({1: 2.5, 2: 5.0, 4: 27.0, 8: 48.0, 16: 117.0, 32: 320.0})


def settings(**kw) -> PolicySettings:
    base = dict(
        ladder=LADDER, slo_p95_ms=50.0, confirmations=1, min_dwell_s=0.0,
        stabilization_s=0.0, curve=GAINS,
    )
    base.update(kw)
    return PolicySettings.from_flat(**base)


def win(end: float = 100.0, **kw) -> Window:
    """A calm 2-s window: 20 req/s, batches of 1, short queue, p95 well inside the SLO."""
    base = dict(
        model="m", start_s=end - 2.0, end_s=end, success_rps=20.0, inference_rps=20.0,
        exec_rps=20.0, mean_batch_size=1.0, mean_queue_ms=0.2, mean_compute_ms=7.0,
        pending_requests=0.0, pending_delta=0.0, p95_ms=10.0, p99_ms=12.0,
    )
    base.update(kw)
    return Window(**base)


SATURATED = dict(inference_rps=520.0, mean_batch_size=8.0, mean_queue_ms=80.0,
                 pending_requests=60.0, pending_delta=40.0, p95_ms=140.0)
RELIEF_AT = dict(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=70.0)
SELF_WAIT = dict(inference_rps=20.0, mean_batch_size=1.2, mean_queue_ms=19.0, p95_ms=30.0)


@pytest.mark.parametrize(
    ("name", "active", "window", "state_kw", "settings_kw", "action", "target", "reason"),
    [
        ("no data", "latency-soft", None, {}, {}, Action.HOLD, "latency-soft", Reason.NO_DATA),
        ("stale window", "balanced", win(stale=True, stale_reason="counter_reset"), {}, {},
         Action.HOLD, "balanced", Reason.STALE),
        ("old window", "balanced", win(end=50.0), {}, {}, Action.HOLD, "balanced", Reason.STALE),
        ("same window twice", "balanced", win(), {"last_window_end_s": 100.0}, {},
         Action.HOLD, "balanced", Reason.NO_DATA),
        ("window straddles the switch", "balanced", win(), {"last_switch_s": 99.0}, {},
         Action.HOLD, "balanced", Reason.SETTLING),
        # ... but for an overload: arrivals do not depend on the profile, and a step in
        # load that lands as a switch begins must not wait out settle_s as well
        ("overload in a window straddling the switch", "latency-soft", win(**SATURATED),
         {"last_switch_s": 99.0}, {}, Action.SWITCH, "balanced", Reason.OVERLOAD),
        ("overload straddling a switch that failed: the dwell's to judge", "latency-soft",
         win(**SATURATED), {"last_switch_s": 99.0, "last_switch_failed": True}, {},
         Action.HOLD, "latency-soft", Reason.SETTLING),
        ("saturation seen in the queue straddling the switch: ignored", "latency-soft",
         win(**dict(SATURATED, inference_rps=400.0, pending_delta=0.0)), {"last_switch_s": 99.0},
         {}, Action.HOLD, "latency-soft", Reason.SETTLING),
        ("calm at latency-soft", "latency-soft", win(), {}, {},
         Action.HOLD, "latency-soft", Reason.STEADY),
        # overload: 540/s arrive (520 completed, the backlog grew 40 in 2 s), latency-soft
        # carries 533/s: the most latency-oriented profile that carries it x 1.25
        ("overloaded, batching gains", "latency-soft", win(**SATURATED), {}, {},
         Action.SWITCH, "balanced", Reason.OVERLOAD),
        # ... and where backing off (the reference loop's answer to p95 > SLO) would be
        # wrong: already at the highest capacity, hold and say so
        ("saturated at the top", "aggressive", win(**SATURATED), {}, {},
         Action.HOLD, "aggressive", Reason.SATURATED),
        ("saturated, batching loses", "latency-soft", win(**SATURATED), {}, {"curve": NO_GAIN},
         Action.HOLD, "latency-soft", Reason.SATURATED),
        ("overloaded at aggressive, batching loses: smaller batches carry more", "aggressive",
         win(**SATURATED), {}, {"curve": NO_GAIN}, Action.SWITCH, "latency-soft", Reason.OVERLOAD),
        ("saturated, no curve at all", "latency-soft", win(**SATURATED), {}, {"curve": None},
         Action.HOLD, "latency-soft", Reason.SATURATED),
        ("overloaded, the live curve is enough", "latency-soft",
         win(**SATURATED, batch_curve_ms={8: 15.0, 32: 30.0}), {}, {"curve": None},
         Action.SWITCH, "balanced", Reason.OVERLOAD),
        # saturation seen in the queue, when the capacity estimate says the load fits
        # ... a standing queue deeper than a batch, window after window
        ("queue far above the delay, a deep backlog, under capacity", "latency-soft",
         win(**dict(SATURATED, inference_rps=400.0, pending_delta=0.0)), {}, {},
         Action.SWITCH, "balanced", Reason.SATURATION),
        # ... but p95 over the SLO at the bottom, where aggressive spends 22% less device
        # time a request: relief
        ("long queue but backlog not growing is not saturation", "latency-soft",
         win(**dict(SATURATED, pending_delta=0.0, pending_requests=2.0)), {}, {},
         Action.SWITCH, "aggressive", Reason.RELIEF),
        # self-inflicted waiting: step toward latency if the lower profile carries the load
        ("self-inflicted wait", "aggressive", win(**SELF_WAIT), {}, {},
         Action.SWITCH, "balanced", Reason.SELF_INFLICTED_WAIT),
        # balanced's largest batches would carry 800/s, but at the margin it sends 8 (533/s)
        ("self-inflicted wait, lower carries only with a backlog", "aggressive",
         win(**dict(SELF_WAIT, inference_rps=450.0)), {}, {},
         Action.HOLD, "aggressive", Reason.CAPACITY),
        ("self-inflicted wait, lower cannot carry", "aggressive",
         win(**dict(SELF_WAIT, inference_rps=700.0)), {}, {},
         Action.HOLD, "aggressive", Reason.CAPACITY),
        ("waiting at latency-soft already", "latency-soft",
         win(mean_queue_ms=0.9, mean_batch_size=1.0), {}, {},
         Action.HOLD, "latency-soft", Reason.STEADY),
        ("batches fill the preferred size: not self-inflicted", "aggressive",
         win(**dict(SELF_WAIT, mean_batch_size=16.0, inference_rps=600.0)), {}, {},
         Action.HOLD, "aggressive", Reason.STEADY),
        # failures count as a breach
        ("rejections", "balanced", win(failure_rps={"REJECTED": 3.0}), {}, {},
         Action.SWITCH, "latency-soft", Reason.FAILURES),
        ("rejections at the bottom", "latency-soft", win(failure_rps={"REJECTED": 3.0}), {}, {},
         Action.HOLD, "latency-soft", Reason.AT_LIMIT),
        ("backend errors are not a batching problem", "latency-soft",
         win(failure_rps={"BACKEND": 3.0}), {}, {}, Action.HOLD, "latency-soft", Reason.STEADY),
        # the p95 rules
        ("p95 over the SLO, not saturated", "aggressive", win(p95_ms=70.0, mean_queue_ms=2.0), {},
         {}, Action.SWITCH, "balanced", Reason.SLO_BREACH),
        ("p95 over the SLO and this window's requests slow too", "aggressive",
         win(p95_ms=70.0, mean_queue_ms=2.0, mean_request_ms=30.0), {},
         {}, Action.SWITCH, "balanced", Reason.SLO_BREACH),
        ("p95 over the SLO from a past peak: this window's requests are quick", "aggressive",
         win(p95_ms=70.0, mean_queue_ms=2.0, mean_request_ms=9.0, busy_share=0.8), {},
         {}, Action.HOLD, "aggressive", Reason.STEADY),
        ("p95 over the SLO, quick requests, the summary trusted alone", "aggressive",
         win(p95_ms=70.0, mean_queue_ms=2.0, mean_request_ms=9.0, busy_share=0.8), {},
         {"breach_min_mean": 0.0}, Action.SWITCH, "balanced", Reason.SLO_BREACH),
        # relief: p95 over the SLO at the bottom, not saturated; at 300/s balanced forms
        # latency-soft's batches (no saving), aggressive saves 38% of the device time
        ("relief: a breach at the bottom, a rung above spends less device time", "latency-soft",
         win(**RELIEF_AT), {}, {}, Action.SWITCH, "aggressive", Reason.RELIEF),
        ("relief refused: the instances are busy (a reload loads on them)", "latency-soft",
         win(**RELIEF_AT, busy_share=0.8), {}, {"efficiency_max_busy": 0.7},
         Action.HOLD, "latency-soft", Reason.AT_LIMIT),
        ("relief refused: no rung saves min_saving", "latency-soft", win(**RELIEF_AT), {},
         {"min_saving": 0.5, "latency_tolerance": 0.05}, Action.HOLD, "latency-soft",
         Reason.AT_LIMIT),
        ("relief refused: aggressive read worse near this rate", "latency-soft", win(**RELIEF_AT),
         {"relief_worse": ("aggressive", 250.0)}, {}, Action.HOLD, "latency-soft",
         Reason.AT_LIMIT),
        ("relief at twice the rate aggressive read worse at", "latency-soft", win(**RELIEF_AT),
         {"relief_worse": ("aggressive", 140.0)}, {}, Action.SWITCH, "aggressive", Reason.RELIEF),
        ("relief: the breach is old news (quick requests)", "latency-soft",
         win(**RELIEF_AT, mean_request_ms=9.0), {}, {}, Action.HOLD, "latency-soft", Reason.STEADY),
        ("relieved: p95 over the SLO, but under what the bottom read", "aggressive",
         win(**dict(RELIEF_AT, mean_batch_size=8.0, p95_ms=65.0)),
         {"relief_from": ("latency-soft", 70.0)}, {}, Action.HOLD, "aggressive", Reason.RELIEVED),
        ("relief made it worse: a step toward latency", "aggressive",
         win(**dict(RELIEF_AT, mean_batch_size=8.0, p95_ms=75.0)),
         {"relief_from": ("latency-soft", 70.0)}, {}, Action.SWITCH, "balanced",
         Reason.SLO_BREACH),
        ("p99 over its SLO", "aggressive", win(p99_ms=90.0, mean_queue_ms=2.0), {},
         {"slo_p99_ms": 80.0}, Action.SWITCH, "balanced", Reason.SLO_BREACH),
        ("p95 over the SLO but the summary still holds the old profile", "aggressive",
         win(inference_rps=600.0, mean_batch_size=16.0, p95_ms=70.0, mean_queue_ms=2.0),
         {"last_switch_s": 60.0}, {}, Action.HOLD, "aggressive", Reason.STEADY),
        # efficiency: at 300/s balanced forms latency-soft's batches (its 5 ms wait holds
        # 1.5 arrivals), aggressive's 20 ms wait forms 7: 38% less device time per request,
        # for ~21 ms more p95
        ("efficiency: a rung that saves device time, p95 keeps its headroom", "latency-soft",
         win(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0), {}, {},
         Action.SWITCH, "aggressive", Reason.EFFICIENCY),
        ("efficiency refused: p95 would leave the headroom", "latency-soft",
         win(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=20.0), {}, {},
         Action.HOLD, "latency-soft", Reason.STEADY),
        ("efficiency: 16% saved at 600/s", "balanced",
         win(inference_rps=600.0, mean_batch_size=8.0, mean_queue_ms=2.0, p95_ms=15.0), {}, {},
         Action.SWITCH, "aggressive", Reason.EFFICIENCY),
        ("efficiency refused: a 16% saving under min_saving 20%", "balanced",
         win(inference_rps=600.0, mean_batch_size=8.0, mean_queue_ms=2.0, p95_ms=15.0), {},
         {"min_saving": 0.2}, Action.HOLD, "balanced", Reason.STEADY),
        ("efficiency refused: the device is busy", "latency-soft",
         win(inference_rps=300.0, mean_batch_size=4.0, p95_ms=12.0, utilization=0.9), {}, {},
         Action.HOLD, "latency-soft", Reason.STEADY),
        ("low load at the first rung: nothing saves device time", "latency-soft",
         win(p95_ms=10.0), {}, {}, Action.HOLD, "latency-soft", Reason.STEADY),
        ("busy at the last profile", "aggressive",
         win(inference_rps=600.0, mean_batch_size=16.0, mean_queue_ms=5.0, p95_ms=20.0), {}, {},
         Action.HOLD, "aggressive", Reason.STEADY),
        # low load: every profile spends 7 ms per request at 20/s; take the lower latency
        ("low load at the last profile: step toward latency", "aggressive",
         win(p95_ms=20.0), {}, {}, Action.SWITCH, "balanced", Reason.LOW_LOAD),
        ("600/s at aggressive: balanced would cost 17% more device time", "aggressive",
         win(inference_rps=600.0, mean_batch_size=13.0, mean_queue_ms=8.0, p95_ms=40.0), {}, {},
         Action.HOLD, "aggressive", Reason.STEADY),
        # the manual pin overrides everything
        ("pin switches at once", "latency-soft", win(**SATURATED),
         {"pin": "balanced", "last_switch_s": 99.5}, {"min_dwell_s": 60.0},
         Action.SWITCH, "balanced", Reason.PIN),
        ("pinned holds", "balanced", win(**SATURATED), {"pin": "balanced"}, {},
         Action.HOLD, "balanced", Reason.PINNED),
    ],
)
def test_one_window(name, active, window, state_kw, settings_kw, action, target, reason):
    state = replace(State.initial(active), **state_kw)
    # The window and one just like it before it: the rules that want a backlog to persist
    # (saturation) see it twice, as they would under a steady load.
    before = None if window is None else replace(window, start_s=window.start_s - 2.0,
                                                 end_s=window.end_s - 2.0)
    history = [before, window] if window is not None else []
    decision, _ = decide(history, state, settings(**settings_kw), now=101.0)
    assert (decision.action, decision.target, decision.reason) == (action, target, reason), (
        decision.message
    )
    assert decision.message
    assert decision.current == active


def test_relief_remembers_where_it_came_from_and_what_made_it_worse():
    """A relief move records the profile it left and its p95, and the rate (for the dwell's
    exemption when the load falls); a breach there that reads worse steps back and marks
    the profile reached as worse near that rate; any other switch forgets where relief
    came from."""
    s = settings()
    w = win(**RELIEF_AT)
    before = replace(w, start_s=w.start_s - 2.0, end_s=w.end_s - 2.0)
    d, st = decide([before, w], State.initial("latency-soft"), s, now=101.0)
    assert (d.target, d.reason) == ("aggressive", Reason.RELIEF)
    assert st.relief_from == ("latency-soft", 70.0)
    assert st.efficiency_up_rps == pytest.approx(300.0)
    st = st.switched("aggressive", 101.0)
    worse = win(end=200.0, **dict(RELIEF_AT, mean_batch_size=8.0, p95_ms=75.0))
    d, st = decide([worse], st, s, now=201.0)
    assert (d.target, d.reason) == ("balanced", Reason.SLO_BREACH)
    assert st.relief_worse == ("aggressive", pytest.approx(300.0))
    assert st.relief_from is None and st.efficiency_up_rps is None


def test_a_relief_move_that_did_not_take_is_not_retried_near_that_rate():
    """A relief shift the gateway guard rolled back (or a reload the server refused) is
    marked as worse near the rate it was decided at: a lasting breach holds at the bottom
    instead of trying it again after every dwell (the table tries it again at twice the rate)."""
    s = settings(min_dwell_s=10.0)
    w = win(**RELIEF_AT)
    before = replace(w, start_s=w.start_s - 2.0, end_s=w.end_s - 2.0)
    d, st = decide([before, w], State.initial("latency-soft"), s, now=101.0)
    assert (d.target, d.reason) == ("aggressive", Reason.RELIEF)
    st = st.switch_failed("latency-soft", 102.0, tried="aggressive")
    assert st.relief_worse == ("aggressive", pytest.approx(300.0))
    assert st.relief_from is None and st.active == "latency-soft"
    later = [replace(w, start_s=w.start_s + t - 2.0, end_s=w.end_s + t - 2.0) for t in (100.0, 102.0)]
    d, _ = decide(later, st, s, now=later[-1].end_s + 1.0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.AT_LIMIT)
    assert "aggressive read worse (or did not take) at 300/s" in d.message


def test_a_failed_switch_other_than_relief_marks_nothing():
    s = settings()
    d, st = decide([win(**SATURATED)], State.initial("latency-soft"), s, 101.0)
    assert d.switch and d.reason is not Reason.RELIEF
    st = st.switch_failed("latency-soft", 101.0, tried=d.target)
    assert st.relief_worse is None
    # an efficiency move up sets the rate too, but not where relief came from
    efficiency = replace(State.initial("latency-soft"), efficiency_up_rps=300.0)
    assert efficiency.switch_failed("latency-soft", 101.0, tried="aggressive").relief_worse is None


@pytest.mark.parametrize(
    ("profile", "curve", "instances", "expected"),
    [
        (LS, GAINS, None, 8 * 1000 / 15.0),
        (AGG, GAINS, None, 32 * 1000 / 30.0),
        (AGG, NO_GAIN, None, 32 * 1000 / 320.0),
        (replace(AGG, instance_count=2), GAINS, None, 2 * 32 * 1000 / 30.0),
        # the count in use, when the profile leaves instance_group alone ...
        (AGG, GAINS, 2, 2 * 32 * 1000 / 30.0),
        # ... but a profile's own count wins
        (replace(AGG, instance_count=3), GAINS, 2, 3 * 32 * 1000 / 30.0),
        (Profile("empty-preferred", 16, (), 0), GAINS, None, 16 * 1000 / 20.0),
        (LS, None, 2, None),
    ],
)
def test_capacity_is_the_largest_preferred_batch_over_its_time(profile, curve, instances, expected):
    got = capacity_rps(profile, curve, instances)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("profile", "expected"),
    [(LS, 1000 / 7.0), (BAL, 8 * 1000 / 15.0), (AGG, 16 * 1000 / 20.0)],
)
def test_floor_capacity_is_the_worst_preferred_size(profile, expected):
    assert floor_capacity_rps(profile, GAINS) == pytest.approx(expected)
    assert floor_capacity_rps(profile, None) is None


def run(windows, state, s, interval=2.0, start=100.0, apply=True, history=False):
    """Feed windows one per interval; apply every switch like the controller does.
    ``history``: pass every window so far, as the controller does (else the latest alone)."""
    decisions, seen = [], []
    for i, w in enumerate(windows):
        now = start + i * interval
        w = replace(w, start_s=now - interval, end_s=now)
        seen = [*seen, w] if history else [w]
        d, state = decide(seen, state, s, now)
        if d.switch and apply:
            state = state.switched(d.target, now)
        decisions.append(d)
    return decisions, state


BREACH = dict(inference_rps=600.0, mean_batch_size=16.0, p95_ms=70.0, mean_queue_ms=2.0)


def test_confirmations_needed_before_a_protective_switch():
    s = settings(confirmations=3)
    decisions, state = run([win(p95_ms=70.0)] * 3, State.initial("balanced"), s)
    assert [d.reason for d in decisions] == [Reason.CONFIRMING, Reason.CONFIRMING, Reason.SLO_BREACH]
    assert state.active == "latency-soft"


def test_survival_acts_on_one_window_through_confirmations_and_dwell():
    s = settings(confirmations=3, min_dwell_s=60.0)
    state = replace(State.initial("latency-soft"), last_switch_s=90.0)
    decisions, state = run([win(**SATURATED)], state, s)
    assert [(d.action, d.reason) for d in decisions] == [(Action.SWITCH, Reason.OVERLOAD)]
    assert decisions[0].to_dict()["kind"] == "survival"


def test_an_interrupted_streak_starts_over():
    s = settings(confirmations=3)
    stay = win(inference_rps=600.0, mean_batch_size=8.0, p95_ms=20.0)
    windows = [win(p95_ms=70.0), win(p95_ms=70.0), stay, win(p95_ms=70.0), win(p95_ms=70.0)]
    decisions, state = run(windows, State.initial("balanced"), s)
    assert all(not d.switch for d in decisions)
    assert decisions[-1].reason is Reason.CONFIRMING


def test_dwell_holds_then_lets_the_switch_through():
    s = settings(min_dwell_s=20.0)
    state = replace(State.initial("aggressive"), last_switch_s=95.0)
    decisions, state = run([win(**SELF_WAIT)] * 12, state, s)
    reasons = [d.reason for d in decisions]
    first_switch = next(i for i, d in enumerate(decisions) if d.switch)
    assert set(reasons[:first_switch]) == {Reason.DWELL}
    assert 100.0 + 2.0 * first_switch >= 95.0 + 20.0
    assert decisions[first_switch].reason is Reason.SELF_INFLICTED_WAIT


@pytest.mark.parametrize(
    ("state_kw", "reason"),
    [
        # an efficiency move made at 200/s, the load now 20/s: the step back goes now
        ({"efficiency_up_rps": 200.0}, Reason.SELF_INFLICTED_WAIT),
        # made at 30/s: 20/s is no fall to half of it, the dwell holds
        ({"efficiency_up_rps": 30.0}, Reason.DWELL),
        # the last switch was no efficiency move (survival, protective, a pin): dwell
        ({}, Reason.DWELL),
        # the last switch failed: every move dwells
        ({"efficiency_up_rps": 200.0, "last_switch_failed": True}, Reason.DWELL),
    ],
)
def test_the_dwell_lets_a_step_back_undo_an_efficiency_move_whose_load_is_gone(state_kw, reason):
    s = settings(min_dwell_s=20.0, stabilization_drop=0.5)
    state = replace(State.initial("aggressive"), last_switch_s=95.0, **state_kw)
    decisions, _ = run([win(**SELF_WAIT)] * 2, state, s)
    assert decisions[0].reason is reason, decisions[0].message
    assert decisions[0].switch is (reason is Reason.SELF_INFLICTED_WAIT)


def test_an_efficiency_move_up_is_remembered_and_any_other_switch_forgets_it():
    s = settings()
    up = win(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0)
    d, state = decide([up], State.initial("latency-soft"), s, 100.5)
    assert (d.switch, d.reason, state.efficiency_up_rps) == (True, Reason.EFFICIENCY, 300.0)
    state = state.switched(d.target, 100.6)
    d, state = decide([win(end=130.0, **SELF_WAIT)], state, s, 130.5)
    assert (d.switch, d.reason, state.efficiency_up_rps) == (True, Reason.SELF_INFLICTED_WAIT, None)
    # a manual pin forgets it too
    d, state = decide([up], State.initial("latency-soft"), s, 100.5)
    d, state = decide([win(end=130.0)], state.switched(d.target, 100.6).pinned("balanced"), s, 130.5)
    assert (d.switch, d.reason, state.efficiency_up_rps) == (True, Reason.PIN, None)


def test_a_flapping_load_undoes_an_efficiency_move_at_most_once_per_dwell():
    """Load flipping between 300/s (an efficiency move up) and 20/s (the wait self-inflicted)
    every two windows: a step back comes as soon as the load halves, but each move up
    waits its confirmations and the dwell after the step back, so the profile changes at
    most twice per dwell."""
    s = settings(confirmations=2, min_dwell_s=20.0, stabilization_s=6.0, stabilization_drop=0.5)
    up = win(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0)
    windows = [up if (i // 2) % 2 == 0 else win(**SELF_WAIT) for i in range(200)]
    decisions, _ = run(windows, State.initial("latency-soft"), s)
    switches = [d for d in decisions if d.switch]
    assert any(d.reason is Reason.EFFICIENCY for d in switches)
    ups = [d.at_s for d in switches if d.reason is Reason.EFFICIENCY]
    assert all(b - a >= 20.0 for a, b in zip(ups, ups[1:])), ups
    assert len(switches) <= 2 * (200 * 2.0 / 20.0) + 1


def test_stabilization_vetoes_a_step_down_right_after_high_load():
    s = settings(stabilization_s=10.0, stabilization_drop=0.0)  # every recommendation vetoes
    busy = win(inference_rps=900.0, mean_batch_size=20.0, mean_queue_ms=5.0, p95_ms=20.0)
    windows = [busy, busy] + [win(**SELF_WAIT)] * 8
    decisions, _ = run(windows, State.initial("aggressive"), s)
    reasons = [d.reason for d in decisions]
    assert reasons[2] is Reason.STABILIZING
    first_switch = next(i for i, d in enumerate(decisions) if d.switch)
    # the last "stay" came at index 1 (t=102); the veto lasts 10 s
    assert 100.0 + 2.0 * first_switch > 102.0 + 10.0


@pytest.mark.parametrize(("busy_rps", "vetoed"), [(900.0, False), (41.0, False), (39.0, True), (30.0, True)])
def test_a_recommendation_made_at_over_twice_the_load_does_not_veto(busy_rps, vetoed):
    """The load fell from ``busy_rps`` to SELF_WAIT's 20/s: below half of it, what kept the
    higher profile then says nothing of now, and the step down waits only its confirmations."""
    s = settings(stabilization_s=10.0, stabilization_drop=0.5)
    # Busy instances: the queue is the load's, so nothing argues for a step down yet.
    busy = win(inference_rps=busy_rps, mean_batch_size=20.0, mean_queue_ms=5.0, p95_ms=20.0,
               busy_share=0.8)
    windows = [busy, busy] + [win(**SELF_WAIT)] * 8
    decisions, _ = run(windows, State.initial("aggressive"), s)
    assert decisions[1].target == "aggressive"           # the busy windows kept it
    first_switch = next(i for i, d in enumerate(decisions) if d.switch)
    assert decisions[first_switch].reason is Reason.SELF_INFLICTED_WAIT
    if vetoed:
        assert Reason.STABILIZING in [d.reason for d in decisions[:first_switch]]
        assert 100.0 + 2.0 * first_switch > 102.0 + 10.0
    else:
        assert first_switch == 2 + s.stability.confirmations - 1


@pytest.mark.parametrize(("before_rps", "vetoed"), [(100.0, False), (39.0, True)])
def test_the_window_straddling_a_fall_counts_at_the_rate_before_it(before_rps, vetoed):
    """A window that began at ``before_rps`` and ended after the fall reads 39/s and keeps
    the higher profile: it counts as made at the higher of its rate and the previous
    window's, so after a fall from 100/s it does not veto the step back at 20/s (from
    39/s it still does: a recommendation at under twice the load is no fall)."""
    s = settings(stabilization_s=10.0, stabilization_drop=0.5)
    busy = dict(mean_batch_size=20.0, mean_queue_ms=5.0, p95_ms=20.0, busy_share=0.8)
    windows = [win(inference_rps=before_rps, **busy)] * 2 + [win(inference_rps=39.0, **busy)]
    windows += [win(**SELF_WAIT)] * 8
    decisions, _ = run(windows, State.initial("aggressive"), s, history=True)
    assert decisions[2].target == "aggressive"           # the straddling window kept it
    first_switch = next(i for i, d in enumerate(decisions) if d.switch)
    assert decisions[first_switch].reason is Reason.SELF_INFLICTED_WAIT
    if vetoed:
        assert Reason.STABILIZING in [d.reason for d in decisions[:first_switch]]
    else:
        assert first_switch == 3 + s.stability.confirmations - 1


def test_p95_rules_wait_for_the_summary_to_forget_the_old_profile():
    s = settings(p95_settle_s=60.0)
    busy = win(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0)
    state = replace(State.initial("latency-soft"), last_switch_s=90.0)
    decisions, _ = run([busy] * 40, state, s)
    first_switch = next(i for i, d in enumerate(decisions) if d.switch)
    window_start = 100.0 + 2.0 * first_switch - 2.0
    assert window_start >= 90.0 + 60.0
    assert decisions[first_switch].reason is Reason.EFFICIENCY


def test_oscillating_load_steps_toward_latency_at_most_once_per_dwell():
    """Load flipping at the threshold every window: hysteresis, not flapping. Survival
    moves up at once; every step back down waits the dwell and the stabilization."""
    s = settings(confirmations=2, min_dwell_s=30.0, stabilization_s=10.0)
    windows = [win(**SATURATED) if i % 2 else win(**SELF_WAIT) for i in range(300)]
    # ... and in runs of three, which beat the confirmations
    windows += [win(**SATURATED) if (i // 3) % 2 else win(**SELF_WAIT) for i in range(300)]
    decisions, _ = run(windows, State.initial("latency-soft"), s)
    switches = [d for d in decisions if d.switch]
    assert switches, "a sustained overload must still move the profile"
    for before, d in zip(switches, switches[1:]):
        if s.index(d.target) < s.index(d.current):
            assert d.at_s - before.at_s >= 30.0, (before, d)
    assert len(switches) <= 2 * (600 * 2.0 / 30.0) + 1


def test_step_load_goes_up_and_comes_back_down():
    s = settings(confirmations=2, min_dwell_s=10.0, stabilization_s=6.0)
    low_at_agg = win(**SELF_WAIT)
    windows = [win()] * 5 + [win(**SATURATED)] * 5 + [low_at_agg] * 30
    decisions, state = run(windows, State.initial("latency-soft"), s)
    path = [(d.current, d.target, d.reason) for d in decisions if d.switch]
    assert path[0] == ("latency-soft", "balanced", Reason.OVERLOAD)
    assert path[-1][1] == "latency-soft"
    up = {r for c, t, r in path if s.index(t) > s.index(c)}
    down = {r for c, t, r in path if s.index(t) < s.index(c)}
    assert {r.kind for r in up} == {"survival"} and down == {Reason.SELF_INFLICTED_WAIT}
    assert state.active == "latency-soft"


def test_failed_switch_dwells_and_keeps_the_old_profile():
    s = settings(min_dwell_s=20.0)
    d, state = decide([win(**SATURATED)], State.initial("latency-soft"), s, 101.0)
    assert d.switch
    state = state.switch_failed("latency-soft", 101.0)
    d2, _ = decide([win(end=106.0, **SATURATED)], state, s, 106.0)
    assert (d2.action, d2.reason, d2.current) == (Action.HOLD, Reason.DWELL, "latency-soft")


def test_decide_is_deterministic_and_does_not_mutate():
    s = settings()
    state = State.initial("latency-soft")
    history = [win(**SATURATED)]
    a = decide(history, state, s, 101.0)
    b = decide(history, state, s, 101.0)
    assert a == b
    assert state == State.initial("latency-soft")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ladder": (LS,)}, "at least two"),
        ({"ladder": (LS, LS)}, "unique"),
        ({"confirmations": 0}, "confirmations"),
    ],
)
def test_settings_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        settings(**kwargs)


def test_decision_serialises_for_logs():
    d, _ = decide([win(**SATURATED)], State.initial("latency-soft"), settings(), 101.0)
    data = d.to_dict()
    assert data["reason"] == "overload" and data["action"] == "switch" and data["kind"] == "survival"
    assert data["signals"]["demand_rps"] == pytest.approx(520.0 + 40.0 / 2.0)


def test_the_package_exports_its_public_names():
    # The policy lives in several modules (types, settings, rules, core, capacity,
    # forecast); its importers see one surface.
    import autobatch.policy as policy

    assert sorted(policy.__all__) == [
        "Action", "Decision", "Forecast", "Observation", "PolicySettings", "Reason", "State",
        "batch_estimate", "capacity_rps", "decide", "device_ms_estimate", "floor_capacity_rps",
        "holt", "live_factor",
    ]
    assert all(hasattr(policy, name) for name in policy.__all__)


@pytest.mark.parametrize(("x", "shown"), [(-0.001, "0%"), (-0.05, "-5%"), (0.123, "12%"), (0.0, "0%")])
def test_shares_in_messages_never_read_minus_zero(x, shown):
    from autobatch.policy.context import _share

    assert _share(x) == shown
