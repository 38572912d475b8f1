"""The side-by-side verdicts (autobatch.lab.compare): oracle, targets, losers, reaction, spread."""

from __future__ import annotations

from typing import Any

import pytest

from autobatch.lab.compare import (
    best_shares,
    controller_verdict,
    in_force,
    oracle,
    reactions,
    right_profiles,
    single_static,
    spread,
)


def ph(name: str, requests: int, over: float, dev: float | None) -> dict[str, Any]:
    return {"name": name, "requests": requests, "over_slo_share": over, "p95_ms": 30.0, "device_ms": dev}


def run(*phases: tuple[int, float, float | None]) -> dict[str, Any]:
    names = ["low", "shared", "low-again", "idle"]
    ps = [ph(names[i], *p) for i, p in enumerate(phases)]
    n = sum(p["requests"] for p in ps if p["device_ms"] is not None)
    dev = sum(p["requests"] * p["device_ms"] for p in ps if p["device_ms"] is not None) / n
    return {"phases": ps, "device_ms": dev}


# low 30 s at 100 req, co-tenants 30 s (the waiting profile breaches), low again 30 s
DEFAULT = run((100, 0.0, 12.0), (100, 0.02, 12.0), (100, 0.0, 12.0))
WAITING = run((100, 0.0, 2.0), (100, 0.40, 2.0), (100, 0.0, 2.0))
MIDDLE = run((100, 0.0, 4.0), (100, 0.025, 4.0), (100, 0.0, 4.0))
STATICS = {"triton-default": DEFAULT, "waiting": WAITING, "middle": MIDDLE}
DURATIONS = [30.0, 30.0, 30.0]


def test_best_share_per_phase_and_idle_phases() -> None:
    idle = {"a": [ph("x", 10, 0.1, 1.0), ph("idle", 0, 0.0, None)],
            "b": [ph("x", 10, 0.05, 2.0), ph("idle", 0, 0.0, None)]}
    assert best_shares(idle) == [0.05, None]


@pytest.mark.parametrize(
    ("react_s", "device", "over"),
    [
        # at once: waiting, middle (within a point of the default's 2%), waiting: (200 + 400 + 200) / 300
        (0.0, 8 / 3, 0.025 / 3),
        # 3 s into each 30 s phase: a tenth of the shared phase still on waiting (40% over),
        # a tenth of the low-again phase still on middle
        (3.0, (200 + 0.1 * 200 + 0.9 * 400 + 0.1 * 400 + 0.9 * 200) / 300, (0.1 * 0.40 + 0.9 * 0.025) / 3),
        # slower than a phase: the previous choice throughout it
        (60.0, (200 + 200 + 400) / 300, 0.40 / 3),
    ],
)
def test_the_oracle_is_the_cheapest_profile_near_the_best_per_phase_after_its_reaction(
    react_s: float, device: float, over: float
) -> None:
    got = oracle({m: r["phases"] for m, r in STATICS.items()}, DURATIONS, react_s)
    assert got is not None
    assert got.profiles == ("waiting", "middle", "waiting")
    assert got.device_ms == pytest.approx(device)
    assert got.over_slo_share == pytest.approx(over)
    assert got.instant_device_ms == pytest.approx(8 / 3)


def test_the_oracle_carries_its_choice_over_an_idle_phase_and_needs_device_times() -> None:
    a = [ph("a", 100, 0.0, 2.0), ph("idle", 0, 0.0, None), ph("b", 100, 0.0, 2.0)]
    b = [ph("a", 100, 0.0, 3.0), ph("idle", 0, 0.0, None), ph("b", 100, 0.0, 1.0)]
    got = oracle({"a": a, "b": b}, [10.0, 5.0, 10.0], 5.0)
    assert got is not None and got.profiles == ("a", None, "b")
    assert got.device_ms == pytest.approx((200 + 0.5 * 200 + 0.5 * 100) / 200)
    assert oracle({"a": [ph("a", 100, 0.0, None)]}, [10.0]) is None


def test_a_controller_that_follows_the_device_beats_every_static_profile() -> None:
    ctrl = run((100, 0.0, 2.2), (100, 0.03, 11.0), (100, 0.0, 2.5))
    v = controller_verdict("reload", ctrl, STATICS, DEFAULT, DURATIONS, react_s=3.0)
    assert v.excess_points == pytest.approx((0.0, 1.0, 0.0))
    assert v.worst_phase == "shared" and v.slo_met  # within 3 points by reload
    assert v.losers == {"triton-default": "device", "waiting": "slo", "middle": None}
    assert not v.every_static_loses  # middle: as good on the SLO and cheaper
    assert v.device_vs_default == pytest.approx(ctrl["device_ms"] / 12.0)
    assert v.device_default_met  # 0.43x
    assert v.device_vs_oracle is not None and v.device_vs_oracle > 1.1 and not v.device_oracle_met
    gateway = controller_verdict("gateway", ctrl, STATICS, DEFAULT, DURATIONS, react_s=1.0)
    assert gateway.target_points == 1.0 and gateway.slo_met  # exactly 1 point: met


def test_a_controller_over_the_slo_target_misses_it_and_every_static_losing_is_said() -> None:
    ctrl = run((100, 0.0, 2.0), (100, 0.06, 3.0), (100, 0.0, 2.0))
    statics = {"triton-default": DEFAULT, "waiting": WAITING}
    v = controller_verdict("gateway", ctrl, statics, DEFAULT, DURATIONS, react_s=1.0)
    assert v.worst_excess_points == pytest.approx(4.0) and v.slo_met is False
    assert v.losers == {"triton-default": "device", "waiting": "slo"} and v.every_static_loses
    d = v.to_dict()
    assert d["every_static_loses"] is True
    assert d["oracle"]["profiles"] == ["waiting", "triton-default", "waiting"]


@pytest.mark.parametrize(
    ("own_default", "beside"),
    [
        # the default beside the controller as the statics' default: the verdict's own figures
        (DEFAULT, (0.0, 4.0, 0.0)),
        # a group the machine slowed: its default 10 points worse in the shared phase, 1 in low
        (run((100, 0.01, 12.0), (100, 0.12, 12.0), (100, 0.0, 12.0)), (-1.0, -6.0, 0.0)),
        # a quieter group flatters the controller: it counts against it here
        (run((100, 0.0, 12.0), (100, 0.0, 12.0), (100, 0.0, 12.0)), (0.0, 6.0, 0.0)),
    ],
)
def test_beside_its_default_each_share_is_read_against_the_default_of_its_own_group(
    own_default: dict[str, Any], beside: tuple[float, ...]
) -> None:
    ctrl = run((100, 0.0, 2.0), (100, 0.06, 3.0), (100, 0.0, 2.0))
    v = controller_verdict("gateway", ctrl, STATICS, own_default, DURATIONS, react_s=1.0)
    assert v.excess_points == pytest.approx((0.0, 4.0, 0.0))  # the verdict does not move
    assert v.beside_default_points == pytest.approx(beside)
    assert v.worst_beside_default_points == pytest.approx(max(beside))
    assert v.to_dict()["beside_default_points"] == pytest.approx(list(beside))


def test_beside_its_default_needs_the_default_among_the_statics() -> None:
    ctrl = run((100, 0.0, 2.0), (100, 0.06, 3.0), (100, 0.0, 2.0))
    v = controller_verdict("gateway", ctrl, {"waiting": WAITING}, DEFAULT, DURATIONS, react_s=1.0)
    assert v.beside_default_points == (None, None, None) and v.worst_beside_default_points is None


def test_a_single_static_profile_is_the_answer_when_switching_saves_little() -> None:
    calm = run((100, 0.0, 2.0), (100, 0.0, 2.1), (100, 0.0, 2.0))
    assert single_static({"triton-default": DEFAULT, "calm": calm}, DURATIONS) == "calm"
    assert single_static(STATICS, DURATIONS) is None  # waiting breaches the shared phase


def test_reaction_from_each_arrival_to_the_first_switch_after_it() -> None:
    decisions = [
        {"t_s": 5.0, "action": "switch", "reason": "efficiency", "target": "waiting"},
        {"t_s": 31.0, "action": "hold", "reason": "confirming", "target": "waiting"},
        {"t_s": 32.0, "action": "switch", "reason": "slo_breach", "target": "triton-default"},
        {"t_s": 95.0, "action": "switch", "reason": "efficiency", "target": "waiting"},
    ]
    got = reactions(decisions, [30.0, 60.0], end_s=90.0, interval_s=1.0)
    got_ = [(r.decision_s, r.windows, r.reason) for r in got]
    assert got_ == [(2.0, 2.0, "slo_breach"), (None, None, None)]
    assert reactions(decisions, [], end_s=90.0, interval_s=1.0) == []  # no co-tenant ever arrives


def test_no_reaction_is_needed_when_the_profile_in_force_suits_the_phase() -> None:
    """On the ramp the controller sat on the default when the co-tenants came: nothing to react
    to, not "the first switch 57 s later"."""
    phases = {m: r["phases"] for m, r in STATICS.items()}
    assert right_profiles(phases, 1) == {"triton-default", "middle"}  # within a point of 2%
    assert right_profiles(phases, 0) == {"triton-default", "waiting", "middle"}
    decisions = [
        {"t_s": 5.0, "action": "switch", "reason": "efficiency", "target": "waiting", "ok": True},
        {"t_s": 20.0, "action": "switch", "reason": "low_load", "target": "triton-default", "ok": False},
        {"t_s": 57.0, "action": "switch", "reason": "efficiency", "target": "waiting", "ok": True},
    ]
    assert in_force(decisions, 4.0, "triton-default") == "triton-default"
    assert in_force(decisions, 30.0, "triton-default") == "waiting"  # the failed switch did not take
    right = [right_profiles(phases, 1)]
    # on waiting at the arrival: a reaction is due, the first switch after it
    due = reactions(decisions[:2] + [{"t_s": 31.5, "action": "switch", "reason": "shared",
                                      "target": "triton-default", "ok": True}],
                    [30.0], end_s=90.0, interval_s=1.0, start="triton-default", right=right)
    assert [(r.needed, r.profile, r.decision_s, r.reason) for r in due] == [(True, "waiting", 1.5, "shared")]
    # on the default at the arrival: none needed, whatever switch came later
    calm = reactions(decisions[1:], [30.0], end_s=90.0, interval_s=1.0, start="triton-default", right=right)
    assert [(r.needed, r.profile, r.decision_s, r.windows) for r in calm] == [
        (False, "triton-default", None, None)]
    # without what is right, as before: the first switch after the arrival
    old = reactions(decisions[1:], [30.0], end_s=90.0, interval_s=1.0)
    assert [(r.needed, r.decision_s) for r in old] == [(True, 27.0)]


def test_spread_is_max_minus_min_and_the_median_of_what_exists() -> None:
    s = spread([0.62, None, 0.65, 0.60])
    assert s is not None and s.median == pytest.approx(0.62) and s.spread == pytest.approx(0.05)
    assert s.to_dict()["runs"] == 3
    assert spread([None]) is None
