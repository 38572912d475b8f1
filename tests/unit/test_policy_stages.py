"""The policy's parts alone: the context, each rule of the table, each stage of ``decide``.

``test_policy.py`` and its siblings judge whole decisions; here each stage (after Ray
Serve's policy, whose stages are tested one by one) and each rule answers for itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest

from autobatch.curve import BatchCurve
from autobatch.policy import Action, Observation, PolicySettings, Reason, State, decide
from autobatch.policy.capacity import capacities
from autobatch.policy.context import Context, build_context
from autobatch.policy.core import (
    GATES,
    Hold,
    Move,
    busy_veto,
    confirm,
    dwell,
    guard,
    pin,
    settle,
    stabilise,
    switch,
)
from autobatch.policy.rules import RULES, recommend, steady
from autobatch.policy.settings import FLAT, GROUPED_ONLY, GROUPS, Efficiency, Stability
from autobatch.policy.types import Recommendation
from autobatch.profiles import Profile
from autobatch.signals import Window

LS = Profile("latency-soft", 32, (2, 4, 8), 1000)
BAL = Profile("balanced", 32, (8, 16), 5000)
AGG = Profile("aggressive", 32, (16, 32), 20000)
GAINS = BatchCurve({1: 7.0, 2: 14.0, 4: 13.0, 8: 15.0, 16: 20.0, 32: 30.0})
# Capacities on GAINS: latency-soft 8/15 ms = 533/s, balanced 800/s, aggressive 1067/s.


def settings(**groups: Any) -> PolicySettings:
    base: dict[str, Any] = dict(ladder=(LS, BAL, AGG), slo_p95_ms=50.0, curve=GAINS,
                                stability=Stability(confirmations=1, min_dwell_s=0.0, stabilization_s=0.0))
    base.update(groups)
    return PolicySettings(**base)


def win(end: float = 100.0, **kw: Any) -> Window:
    """A calm 2-s window: 20 req/s, batches of 1, short queue, p95 well inside the SLO."""
    base: dict[str, Any] = dict(
        model="m", start_s=end - 2.0, end_s=end, success_rps=20.0, inference_rps=20.0, exec_rps=20.0,
        mean_batch_size=1.0, mean_queue_ms=0.2, mean_compute_ms=7.0, pending_requests=0.0,
        pending_delta=0.0, p95_ms=10.0, p99_ms=12.0,
    )
    base.update(kw)
    return Window(**base)


SATURATED = dict(inference_rps=520.0, mean_batch_size=8.0, mean_queue_ms=80.0, pending_requests=60.0,
                 pending_delta=40.0, p95_ms=140.0)


def ctx(active: str = "latency-soft", s: PolicySettings | None = None, state_kw: dict[str, Any] | None = None,
        now: float = 101.0, **window: Any) -> Context:
    w = win(**window)
    before = replace(w, start_s=w.start_s - 2.0, end_s=w.end_s - 2.0)
    state = replace(State.initial(active), **(state_kw or {}))
    return build_context([before, w], state, s or settings(), now)


def move(c: Context, target: int, reason: Reason, state_kw: dict[str, Any] | None = None) -> Move:
    return Move(c, Recommendation(target, reason, "why"), replace(c.state, **(state_kw or {})))


# -- the context ----------------------------------------------------------------------------------


def test_the_context_holds_each_figure_once():
    c = ctx(**SATURATED)
    assert c.current == 0 and c.profile is LS and c.window is c.history[-1]
    assert c.demand_rps == pytest.approx(540.0)  # 520 completed, the backlog grew 40 in 2 s
    assert c.capacity == capacities(c.history, c.settings, c.curve)
    assert c.capacity.rps[0] == pytest.approx(533.3, rel=1e-3)
    assert set(c.costs) == {0, 1, 2} and c.forecast is None  # two windows: too few for Holt
    assert c.queue_is_backlog and c.p95_trusted and c.breach  # no switch yet: the p95 is this profile's
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.demand_rps = 0.0  # type: ignore[misc]


def test_the_context_learns_the_window_unless_told_not_to():
    w = win(device_ms_per_request=3.0)
    learned = build_context([w], State.initial("latency-soft"), settings(), 101.0)
    assert learned.state.device.seen and learned.costs[0].source == "seen"
    unlearned = build_context([w], State.initial("latency-soft"), settings(), 101.0, learn=False)
    assert unlearned.state.device.seen == () and unlearned.costs[0].source == "estimated"


def test_a_window_is_an_observation():
    w: Observation = win()  # mypy checks this assignment (make test runs it on the callers)
    assert w.mean_request_ms is None


# -- the rules, each alone ---------------------------------------------------------------------


def test_the_table_is_ordered_by_section_and_names_what_each_rule_reads():
    kinds = [r.kind for r in RULES]
    assert kinds[:3] == ["survival"] * 3 and set(kinds) == {"survival", "protective", "efficiency"}
    assert len({r.name for r in RULES}) == len(RULES)
    context_fields = {f.name for f in dataclasses.fields(Context)} | {"waiting", "wait_pays", "load"}
    window_fields = {n for n in dir(Observation) if not n.startswith("_")}
    for rule in RULES:
        assert rule.fires and rule.reads, rule.name
        for name in rule.reads:
            head, _, tail = name.partition(".")
            ok = {
                "window": tail in window_fields,
                "state": tail in {f.name for f in dataclasses.fields(State)},
            }.get(head, head in context_fields or (head in GROUPS and tail in
                                                    {f.name for f in dataclasses.fields(GROUPS[head])}))
            assert ok, f"{rule.name} reads {name}, which is no context field, window field or setting"


@pytest.mark.parametrize(
    ("rule", "active", "window", "target", "reason"),
    [
        ("overload", "latency-soft", SATURATED, "balanced", Reason.OVERLOAD),
        ("overload", "latency-soft", {}, None, None),
        ("saturation", "latency-soft", dict(SATURATED, inference_rps=400.0, pending_delta=0.0), "balanced",
         Reason.SATURATION),
        ("saturation", "latency-soft", dict(SATURATED, pending_delta=0.0, pending_requests=2.0), None, None),
        ("failures", "balanced", {"failure_rps": {"REJECTED": 3.0}}, "latency-soft", Reason.FAILURES),
        ("failures", "balanced", {"failure_rps": {"BACKEND": 3.0}}, None, None),
        ("self_inflicted_wait", "aggressive", dict(mean_batch_size=1.2, mean_queue_ms=19.0, p95_ms=30.0),
         "balanced", Reason.SELF_INFLICTED_WAIT),
        ("slo_breach", "aggressive", {"p95_ms": 70.0, "mean_queue_ms": 2.0}, "balanced", Reason.SLO_BREACH),
        ("slo_breach", "latency-soft", {"p95_ms": 70.0, "mean_queue_ms": 2.0}, None, None),  # relief's
        ("relief", "latency-soft", dict(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0,
                                        p95_ms=70.0), "aggressive", Reason.RELIEF),
        ("efficiency", "latency-soft", dict(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0,
                                            p95_ms=12.0), "aggressive", Reason.EFFICIENCY),
        ("low_load", "aggressive", {"p95_ms": 20.0}, "balanced", Reason.LOW_LOAD),
        ("low_load", "latency-soft", {"p95_ms": 20.0}, None, None),
    ],
)
def test_each_rule_alone(rule, active, window, target, reason):
    c = ctx(active, **window)
    judge = {r.name: r.judge for r in RULES}[rule]
    rec = judge(c)
    if target is None:
        assert rec is None
    else:
        assert rec is not None and (c.ladder[rec.target].name, rec.reason) == (target, reason), rec


def test_recommend_takes_the_first_rule_that_answers_else_steady():
    c = ctx(**SATURATED, failure_rps={"REJECTED": 3.0})  # overload and failures both hold
    assert [r.name for r in RULES if r.judge(c) is not None][:3] == ["overload", "saturation", "failures"]
    assert recommend(c).reason is Reason.OVERLOAD
    calm = ctx()
    assert all(r.judge(calm) is None for r in RULES)
    assert recommend(calm) == steady(calm) and steady(calm).reason is Reason.STEADY


def test_a_rule_returns_what_it_reports():
    # relief refused at the bottom: the hold says why, and so do the signals
    c = ctx("latency-soft", settings(efficiency=Efficiency(max_busy=0.7)), inference_rps=300.0,
            mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=70.0, busy_share=0.8)
    rec = recommend(c)
    assert rec.reason is Reason.AT_LIMIT and "busy" in rec.notes["relief"]
    assert rec.notes["relief"] in rec.message


# -- the stages of decide, each alone ---------------------------------------------------------------


def test_pin():
    assert pin(State.initial("balanced"), 1.0) is None
    d, st = pin(State.initial("balanced").pinned("balanced"), 1.0)
    assert (d.action, d.reason) == (Action.HOLD, Reason.PINNED)
    moving = replace(State.initial("balanced").pinned("aggressive"), efficiency_up_rps=300.0)
    d, st = pin(moving, 1.0)
    assert (d.action, d.target, d.reason) == (Action.SWITCH, "aggressive", Reason.PIN)
    assert st.efficiency_up_rps is None


@pytest.mark.parametrize(
    ("history", "state_kw", "reason"),
    [
        ([], {}, Reason.NO_DATA),
        ([win(stale=True, stale_reason="counter_reset")], {}, Reason.STALE),
        ([win(end=50.0)], {}, Reason.STALE),
        ([win()], {"last_window_end_s": 100.0}, Reason.NO_DATA),
        ([win()], {}, None),
        ([win()], {"last_switch_s": 99.0}, None),  # settling is settle's to judge
    ],
)
def test_guard(history, state_kw, reason):
    held = guard(history, replace(State.initial("balanced"), **state_kw), settings(), 101.0)
    assert (held.reason if held else None) is reason


def test_settle_lets_only_an_overload_through():
    state = replace(State.initial("latency-soft"), last_switch_s=99.0)
    d, st = settle([win(**SATURATED)], state, settings(), 101.0)
    assert (d.action, d.target, d.reason) == (Action.SWITCH, "balanced", Reason.OVERLOAD)
    assert d.message.endswith("(in a window overlapping the last switch)")
    d, st = settle([win(p95_ms=70.0, device_ms_per_request=3.0)], state, settings(), 101.0)
    assert (d.action, d.reason, st.last_window_end_s) == (Action.HOLD, Reason.SETTLING, 100.0)
    assert st.device == state.device  # nothing learned from a half-switched window
    d, _ = settle([win(**SATURATED)], replace(state, last_switch_failed=True), settings(), 101.0)
    assert d.reason is Reason.SETTLING


def test_confirm():
    c = ctx("aggressive", settings(stability=Stability(confirmations=3)), p95_ms=20.0)
    assert confirm(move(c, 1, Reason.LOW_LOAD, {"streak": 1})) == Hold(Reason.CONFIRMING,
                                                                      "why; confirming (1/3)")
    assert confirm(move(c, 1, Reason.LOW_LOAD, {"streak": 3})) is None
    assert confirm(move(c, 2, Reason.OVERLOAD, {"streak": 1})) is None  # survival acts on one window


@pytest.mark.parametrize(
    ("reason", "target", "state_kw", "held"),
    [
        (Reason.SLO_BREACH, 1, {"last_switch_s": 95.0}, True),
        (Reason.SLO_BREACH, 1, {"last_switch_s": 70.0}, False),  # 31 s since: over
        (Reason.OVERLOAD, 2, {"last_switch_s": 95.0}, False),  # survival: no dwell
        (Reason.OVERLOAD, 2, {"last_switch_s": 95.0, "last_switch_failed": True}, True),
        # undoing an efficiency move made at 200/s, the load at 20/s: not noise
        (Reason.LOW_LOAD, 1, {"last_switch_s": 95.0, "efficiency_up_rps": 200.0}, False),
        (Reason.LOW_LOAD, 1, {"last_switch_s": 95.0, "efficiency_up_rps": 30.0}, True),
        (Reason.LOW_LOAD, 1, {}, False),  # no switch yet
    ],
)
def test_dwell(reason, target, state_kw, held):
    c = ctx("aggressive", settings(stability=Stability(min_dwell_s=30.0)), p95_ms=20.0)
    hold = dwell(move(c, target, reason, state_kw))
    assert (hold is not None) is held
    if held:
        assert hold.reason is Reason.DWELL and hold.message.startswith("why; dwell: ")


def test_stabilise():
    s = settings(stability=Stability(stabilization_s=30.0, stabilization_drop=0.5))
    c = ctx("aggressive", s, p95_ms=20.0)
    wanted_more = {"recommendations": ((90.0, 2, 25.0),)}  # aggressive wanted at 25/s, 11 s ago
    hold = stabilise(move(c, 1, Reason.LOW_LOAD, wanted_more))
    assert hold is not None and hold.reason is Reason.STABILIZING and "aggressive" in hold.message
    fell = {"recommendations": ((90.0, 2, 200.0),)}  # made at 200/s: the load has fallen since
    assert stabilise(move(c, 1, Reason.LOW_LOAD, fell)) is None
    assert stabilise(move(c, 1, Reason.SLO_BREACH, wanted_more)) is None  # protective: not held


def test_busy_veto():
    backlog = dict(inference_rps=300.0, mean_queue_ms=80.0, busy_share=0.95, p95_ms=30.0)  # 80 > 3 x 20 ms
    s = settings(efficiency=Efficiency(max_busy=0.7))
    c = ctx("aggressive", s, **backlog)
    hold = busy_veto(move(c, 1, Reason.NO_GAIN))
    assert hold is not None and hold.reason is Reason.SATURATED
    assert busy_veto(move(c, 1, Reason.SLO_BREACH)) is None  # protective: never held
    assert busy_veto(move(ctx("aggressive", s, **dict(backlog, busy_share=0.5)), 1, Reason.NO_GAIN)) is None
    assert busy_veto(move(ctx("aggressive", settings(), **backlog), 1, Reason.NO_GAIN)) is None  # no limit


def test_the_gates_run_in_order():
    assert [g.__name__ for g in GATES] == ["confirm", "dwell", "stabilise", "busy_veto"]


def test_switch_remembers_what_the_next_decisions_need():
    up = ctx("latency-soft", inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0)
    d, st = switch(move(up, 2, Reason.EFFICIENCY))
    assert (d.action, d.target, st.efficiency_up_rps, st.relief_from) == (
        Action.SWITCH, "aggressive", 300.0, None)
    d, st = switch(move(up, 2, Reason.RELIEF))
    assert st.relief_from == ("latency-soft", 12.0)
    back = ctx("aggressive", state_kw={"relief_from": ("latency-soft", 70.0)}, p95_ms=75.0)
    d, st = switch(move(back, 1, Reason.SLO_BREACH))
    assert st.relief_worse == ("aggressive", 20.0) and st.relief_from is None and st.efficiency_up_rps is None


def test_decide_is_the_stages_in_order():
    # a held move: the gate's reason, the rule's reason in the signals
    s = settings(stability=Stability(confirmations=2))
    d, st = decide([win(p95_ms=20.0)], State.initial("aggressive"), s, 101.0)
    assert (d.reason, d.signals["wants"], d.signals["because"], st.streak) == (
        Reason.CONFIRMING, "balanced", "low_load", 1)


# -- the settings, grouped -------------------------------------------------------------------------


def test_flat_names_build_the_same_settings_as_the_groups():
    flat = PolicySettings.from_flat(ladder=(LS, BAL, AGG), slo_p95_ms=50.0, min_dwell_s=5.0,
                                    efficiency_max_busy=0.7, forecast=False)
    grouped = PolicySettings(ladder=(LS, BAL, AGG), slo_p95_ms=50.0, stability=Stability(min_dwell_s=5.0),
                             efficiency=Efficiency(max_busy=0.7),
                             forecast=GROUPS["forecast"](enabled=False))
    assert flat == grouped
    assert {group for group, _ in FLAT.values()} == set(GROUPS) - GROUPED_ONLY
    with pytest.raises(TypeError, match="unknown policy settings: dwell_s"):
        PolicySettings.from_flat(ladder=(LS, BAL), slo_p95_ms=50.0, dwell_s=5.0)
    with pytest.raises(ValueError, match=r"^efficiency_max_busy must be in \(0, 1\]$"):
        PolicySettings.from_flat(ladder=(LS, BAL), slo_p95_ms=50.0, efficiency_max_busy=0.0)
    with pytest.raises(ValueError, match=r"^efficiency.max_busy must be in \(0, 1\]$"):
        Efficiency(max_busy=0.0)


def test_the_policy_stays_small_pieces():
    """No function in policy/ over 60 lines, no module docstring over 25 (issue 29); ruff's
    C901 holds each under a complexity of 12 (pyproject.toml)."""
    import ast
    from pathlib import Path

    import autobatch.policy

    long = []
    for path in Path(autobatch.policy.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree, clean=False) or ""
        if len(doc.splitlines()) > 25:
            long.append(f"{path.name}: module docstring {len(doc.splitlines())} lines")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}:{node.lineno} {node.name}: {lines} lines")
    assert not long, long


# -- room for a reload: the busy share, or the load over the live capacity --------------------------

# latency-soft at 300/s on GAINS: it carries 533/s, so the load is 56% of it; its instances read 90% busy.
BUSY_BELOW_CAPACITY = dict(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0,
                           busy_share=0.9)


@pytest.mark.parametrize(("efficiency", "reason", "refused"), [
    (Efficiency(), Reason.EFFICIENCY, None),  # neither guard: the step
    (Efficiency(max_busy=0.7), Reason.STEADY, "the instances are 90% busy (> 70%): no room"),
    # the load gate in its place: 56% of the capacity is room, however busy the instances read
    (Efficiency(max_load=0.7), Reason.EFFICIENCY, None),
    (Efficiency(max_load=0.5), Reason.STEADY,
     "the load is 56% of what latency-soft carries (300 of 533/s, > 50%): no room"),
    (Efficiency(max_busy=0.95, max_load=0.6), Reason.EFFICIENCY, None),
])
def test_room_for_a_reload_is_the_busy_share_or_the_load(efficiency: Efficiency, reason: Reason,
                                                       refused: str | None) -> None:
    rec = recommend(ctx("latency-soft", settings(efficiency=efficiency), **BUSY_BELOW_CAPACITY))
    assert rec.reason is reason
    assert (refused is None) == (rec.target != 0) and (refused is None or refused in rec.message)


def test_the_load_gate_reads_the_stretched_capacity_on_a_shared_device() -> None:
    """Batches 2x their curve while others use the device: latency-soft carries 267/s, so
    300/s is over the gate's 0.7 (the same load alone was 56%)."""
    c = ctx("latency-soft", settings(efficiency=Efficiency(max_load=0.7)), **BUSY_BELOW_CAPACITY,
            stretch=2.0, others_share=0.5, utilization=0.95)
    assert c.load == pytest.approx(300.0 / (533.33 / 2.0), rel=1e-3)
    assert c.no_room() is not None and "carries (300 of 267/s, > 70%)" in c.no_room()
    alone = ctx("latency-soft", settings(efficiency=Efficiency(max_load=0.7)), **BUSY_BELOW_CAPACITY)
    assert alone.load == pytest.approx(300.0 / 533.33, rel=1e-3) and alone.no_room() is None


def test_busy_veto_reads_the_load_gate_too() -> None:
    # aggressive carries 1067/s on GAINS: 300/s is 28% of it, a backlog all the same
    backlog = dict(inference_rps=300.0, mean_queue_ms=80.0, busy_share=0.95, p95_ms=30.0)
    held = busy_veto(move(ctx("aggressive", settings(efficiency=Efficiency(max_load=0.25)), **backlog),
                          1, Reason.NO_GAIN))
    assert held is not None and held.reason is Reason.SATURATED and "the load is 28%" in held.message
    assert busy_veto(move(ctx("aggressive", settings(efficiency=Efficiency(max_load=0.5)), **backlog),
                          1, Reason.NO_GAIN)) is None


def test_max_load_is_a_fraction_or_off_and_has_no_flat_name() -> None:
    assert Efficiency().max_load is None
    with pytest.raises(ValueError, match=r"^efficiency.max_load must be in \(0, 1\]$"):
        Efficiency(max_load=0.0)
    with pytest.raises(ValueError, match=r"^efficiency.max_load must be in \(0, 1\]$"):
        Efficiency(max_load=1.5)
    assert ("efficiency", "max_load") not in FLAT.values()
