"""The policy on a device others share: the stretch, whose the device is, the shared rule (pure).

Windows here are built as the sidecar's source builds them from the emulated GPU
(tests/integration/test_device_triton.py measures the real ones): ``stretch`` is
the batches' compute time over the T4 curve's, ``own_device_share`` the curve's
time of the model's executions per second, ``others_share`` the device's
utilisation less that. The replay of a recorded run is in
tests/unit/test_shared_replay.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from autobatch.curve import BatchCurve
from autobatch.policy import Action, PolicySettings, Reason, State, decide
from autobatch.policy.capacity import capacities, device_stretch, p95_estimate
from autobatch.policy.context import build_context
from autobatch.policy.rules import shared
from autobatch.policy.settings import Stability, Trust
from autobatch.profiles import Profile
from autobatch.signals import Window

# ResNet-50 v1.5 on a T4, mixed precision (curves/t4-resnet50-fp16.yaml, NVIDIA's table).
T4 = BatchCurve({1: 12.96, 2: 13.18, 4: 12.99, 8: 12.82, 16: 15.8, 32: 29.54}, name="t4")
DEFAULT = Profile("triton-default", 32, (), 0)
MID = Profile("wait-8", 32, (16,), 8000)
WAIT = Profile("wait-18", 32, (32,), 18300)
SLO = 60.0


def settings(**kw: Any) -> PolicySettings:
    base: dict[str, Any] = dict(
        ladder=(DEFAULT, MID, WAIT), slo_p95_ms=SLO, curve=T4,
        stability=Stability(confirmations=2, min_dwell_s=10.0, stabilization_s=10.0),
        trust=Trust(p95_settle_s=60.0))
    base.update(kw)
    return PolicySettings(**base)


def dwin(end: float, *, rate: float = 150.0, batch: float = 3.7, stretch: float = 1.25, others: float = 0.0,
         mean_ms: float = 25.0, p95_ms: float = 32.0, util: bool = True, **kw: Any) -> Window:
    """A 1-s window of the emulated T4 model at ``rate``: batches of ``batch`` taking ``stretch``
    x the curve, the others using ``others`` of the device (None without a utilisation)."""
    execs = rate / batch
    curve_ms = T4.ms(round(batch))
    own = execs * curve_ms / 1000.0
    base: dict[str, Any] = dict(
        model="resnet50", start_s=end - 1.0, end_s=end, success_rps=rate, inference_rps=rate, exec_rps=execs,
        mean_batch_size=batch, mean_queue_ms=max(0.0, mean_ms - curve_ms * stretch),
        mean_compute_ms=curve_ms * stretch, mean_request_ms=mean_ms, pending_requests=0.0, pending_delta=0.0,
        p95_ms=p95_ms, p99_ms=p95_ms * 1.1, batch_curve_ms={round(batch): curve_ms * stretch},
        device_ms_per_request=curve_ms * stretch / batch, busy_instances=min(1.0, own * stretch),
        stretch=stretch, own_device_share=own,
        utilization=min(1.0, own + others) if util else None, others_share=others if util else None,
    )
    base.update(kw)
    return Window(**base).with_instance_count(1)


# -- the figures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "stretch"),
    [
        (dict(stretch=2.5, others_share=0.4), 2.5),
        (dict(stretch=2.5, others_share=0.0), 2.5),  # the device is the model's: still what batches take
        (dict(stretch=0.9, others_share=0.0), 1.0),  # the curve is the device alone: nothing runs faster
        (dict(stretch=2.5, others_share=None), 1.0),  # no utilisation (a CPU): the live factor's job
        (dict(stretch=None, others_share=0.4), 1.0),  # no executions
    ],
)
def test_the_stretch_is_read_only_where_the_window_says_what_the_device_does(
        window: dict[str, Any], stretch: float) -> None:
    w = Window(model="m", start_s=0.0, end_s=1.0, **window)
    assert device_stretch(w) == stretch


# Simulated on the T4 curve, one instance, Poisson 30 s, seed 1, the device to the model
# (the i27 shared engine; the command is in docs/policy.md, "A shared device"): p95 ms.
@pytest.mark.parametrize(
    ("profile", "rate", "simulated"),
    [(DEFAULT, 60, 25.0), (DEFAULT, 150, 25.4), (DEFAULT, 300, 25.4),
     (Profile("p16d25", 32, (16,), 25000), 60, 38.2), (Profile("p16d25", 32, (16,), 25000), 300, 38.5),
     (Profile("p32d18", 32, (32,), 18300), 150, 31.4), (Profile("p32d18", 32, (32,), 18300), 300, 31.4)],
)
def test_the_p95_estimate_alone_lands_near_the_simulator(
        profile: Profile, rate: float, simulated: float) -> None:
    assert p95_estimate(profile, rate, T4) == pytest.approx(simulated, rel=0.1)


def test_stretched_batches_wait_longer_and_grow() -> None:
    alone, shared_ = p95_estimate(DEFAULT, 150, T4), p95_estimate(DEFAULT, 150, T4, stretch=2.0)
    assert shared_ > 1.5 * alone


def test_device_time_is_remembered_in_the_devices_own_units() -> None:
    s = settings()
    on_gpu = dwin(100.0, stretch=3.0, others=0.5)
    state = build_context([on_gpu], State.initial("wait-18"), s, 100.5).state
    ((_, _, seen_gpu),) = state.device.seen
    assert seen_gpu == pytest.approx(on_gpu.device_ms_per_request / 3.0)
    on_cpu = dwin(100.0, stretch=3.0, others=0.5, util=False)
    ((_, _, seen_cpu),) = build_context([on_cpu], State.initial("wait-18"), s, 100.5).state.device.seen
    assert seen_cpu == pytest.approx(on_cpu.device_ms_per_request)  # a CPU's compute time is the cost


def test_capacity_is_what_the_stretched_batches_carry() -> None:
    s = settings()
    w = dwin(100.0)
    one, two = capacities([w], s, T4, 1.0), capacities([w], s, T4, 2.0)
    assert all(two.rps[i] == pytest.approx(one.rps[i] / 2) for i in range(3))  # type: ignore[operator]


# -- the shared rule -----------------------------------------------------------------------------


def ctx(active: str, w: Window, s: PolicySettings | None = None) -> Any:
    before = replace(w, start_s=w.start_s - 1.0, end_s=w.end_s - 1.0)
    return build_context([before, w], State.initial(active), s or settings(), w.end_s + 0.1)


def test_co_tenants_that_stretch_the_waiting_profile_past_the_slo_move_it_down() -> None:
    c = ctx("wait-18", dwin(100.0, stretch=2.2, others=0.45, mean_ms=48.0, batch=4.5))
    rec = shared(c)
    assert rec is not None and rec.reason is Reason.SHARED and rec.target < 2
    assert "the device is shared: others use 45%" in rec.message and "wait-18's p95 would be" in rec.message
    # Nothing below is predicted under 0.85 x the SLO: the rung that waits least.
    assert rec.target == 0 and c.p95_predicted[2] > SLO


@pytest.mark.parametrize(
    ("active", "window", "why"),
    [
        ("wait-18", dict(stretch=1.25, others=0.0, mean_ms=25.0), "alone, within the SLO"),
        ("wait-18", dict(stretch=2.2, others=0.05, mean_ms=48.0), "the device is the model's: its load"),
        ("wait-18", dict(stretch=2.2, others=0.45, mean_ms=48.0, util=False), "no utilisation: a CPU"),
        ("triton-default", dict(stretch=2.2, others=0.45, mean_ms=48.0), "already the lowest rung"),
        ("wait-18", dict(stretch=1.3, others=0.3, mean_ms=30.0), "shared, but still within the SLO"),
    ],
)
def test_the_shared_rule_holds_its_fire(active: str, window: dict[str, Any], why: str) -> None:
    assert shared(ctx(active, dwin(100.0, **window))) is None, why


def test_what_the_window_says_of_the_device_is_in_the_decision() -> None:
    d, _ = decide([dwin(99.0), dwin(100.0, others=0.02)], State.initial("wait-18"), settings(), 100.1)
    assert d.signals["device"] == "own" and d.signals["stretch_used"] == 1.25
    assert set(d.signals["p95_predicted_ms"]) == {"triton-default", "wait-8", "wait-18"}
    d, _ = decide([dwin(99.0), dwin(100.0, util=False)], State.initial("wait-18"), settings(), 100.1)
    assert "device" not in d.signals and "p95_predicted_ms" not in d.signals


# -- over time: arrival, and the way back -----------------------------------------------------------

# The batches each rung forms at 150 req/s on the T4 curve, alone and beside two co-tenants
# busy about half the time (batches 2.2x their curve), as the simulator forms them.
BATCH = {"triton-default": (2.0, 4.4), "wait-8": (2.2, 4.4), "wait-18": (3.7, 4.5)}
ALONE = dict(stretch=1.25, others=0.0, mean_ms=25.0, p95_ms=32.0)
SHARED = dict(stretch=2.2, others=0.45, mean_ms=48.0, p95_ms=32.0)


def shared_share(end: float, arrival_s: float, leave_s: float) -> float:
    """How much of the window ending at ``end`` the co-tenants were there."""
    return max(0.0, min(end, leave_s) - max(end - 1.0, arrival_s))


def mixed(end: float, active: str, share: float, **over: Any) -> Window:
    """The window of the rung ``active`` with the co-tenants there ``share`` of it."""
    fields = {k: ALONE[k] + share * (SHARED[k] - ALONE[k]) for k in ("stretch", "others", "mean_ms")}
    alone_b, shared_b = BATCH[active]
    return dwin(end, **{**ALONE, **fields, "batch": alone_b + share * (shared_b - alone_b), **over})


def run(s: PolicySettings, state: State, n: int, window: Any) -> tuple[list[Any], State]:
    """The controller's loop for ``n`` 1-s windows from 101 s (``window(end, active)``), every
    switch taking effect at once."""
    out: list[Any] = []
    history: list[Window] = []
    for i in range(n):
        end = 101.0 + i
        history.append(window(end, state.active))
        d, state = decide(history[-30:], state, s, end + 0.05)
        if d.switch:
            state = state.switched(d.target, d.at_s, 0.5)
        out.append(d)
    return out, state


@pytest.mark.parametrize("arrival_s", [120.05, 120.5, 120.95])
@pytest.mark.parametrize("since_switch_s", [3.0, 100.0])
@pytest.mark.parametrize("steady_windows", [1, 2])
def test_co_tenants_arriving_are_answered_within_two_windows(
        arrival_s: float, since_switch_s: float, steady_windows: int) -> None:
    """However the arrival falls in a window, and even within the dwell of the last switch;
    asking two windows in steady state (``device.steady_windows``) keeps it: an arrival is a change."""
    from autobatch.policy.settings import DeviceSettings

    state = State.initial("wait-18").switched("wait-18", 120.0 - since_switch_s)
    s = settings(device=DeviceSettings(steady_windows=steady_windows))
    decisions, state = run(s, state, 30,
                           lambda end, active: mixed(end, active, shared_share(end, arrival_s, 1e9)))
    moved = [d for d in decisions if d.switch]
    assert moved and moved[0].reason is Reason.SHARED, [(d.at_s, d.reason.value) for d in decisions]
    assert moved[0].at_s - arrival_s <= 2.0 + 0.05, (moved[0].at_s, arrival_s)
    assert state.active != "wait-18"


def test_the_controller_climbs_back_once_the_co_tenants_leave() -> None:
    """Down on arrival; up again through the efficiency rule after confirmations and the dwell,
    although the summary p95 still reads the shared phase."""
    def window(end: float, active: str) -> Window:
        share = shared_share(end, 120.0, 150.0)
        return mixed(end, active, share, p95_ms=32.0 if end <= 150.0 else 52.0)

    decisions, state = run(settings(), State.initial("wait-18").switched("wait-18", 50.0), 80, window)
    switches = [(round(d.at_s - 100.0), d.reason, d.target) for d in decisions if d.switch]
    assert switches[0][:2] == (21, Reason.SHARED), switches
    assert all(r is not Reason.EFFICIENCY for t, r, _ in switches if t <= 50), switches  # not while shared
    up = [(t, target) for t, r, target in switches if r is Reason.EFFICIENCY]
    assert up and 51 < up[0][0] <= 51 + 10 + 2, switches  # after the dwell and two confirmations
    assert state.active == "wait-18"
    assert len(switches) <= 3, switches  # no flapping


@pytest.mark.parametrize("release", [False, True])
def test_release_lets_the_way_back_skip_the_dwell_once_the_co_tenants_leave(release: bool) -> None:
    """Co-tenants for 6 s: the shared move comes within the dwell of their leaving. Without
    ``device.release`` the climb back waits the dwell out; with it, only its confirmations."""
    from autobatch.policy.settings import DeviceSettings

    def window(end: float, active: str) -> Window:
        return mixed(end, active, shared_share(end, 120.0, 126.0))

    s = settings(device=DeviceSettings(release=release))
    decisions, state = run(s, State.initial("wait-18").switched("wait-18", 50.0), 45, window)
    switches = [(d.at_s, d.reason, d.target) for d in decisions if d.switch]
    assert switches[0][1] is Reason.SHARED and 120.0 < switches[0][0] <= 122.1, switches
    down = switches[0][0]
    up = [(t, target) for t, r, target in switches[1:] if r is Reason.EFFICIENCY]
    assert up and up[0][1] == "wait-18", switches
    if release:  # the first two windows wholly after they left confirm it
        assert up[0][0] <= 128.1 < down + s.stability.min_dwell_s, (switches, down)
    else:
        assert up[0][0] >= down + s.stability.min_dwell_s - 0.01, (switches, down)
    assert len(switches) == 2 and state.active == "wait-18", switches  # no flapping


@pytest.mark.parametrize(("others", "shared_from", "failed", "skips"), [
    (0.02, "wait-18", False, True),
    (0.30, "wait-18", False, False),    # still shared: the dwell stands
    (None, "wait-18", False, False),    # the device unread: not known to have left
    (0.02, None, False, False),         # the last switch was not a shared move
    (0.02, "wait-8", False, False),     # a climb to another rung than the one left
    (0.02, "wait-18", True, False),     # the last switch failed: every move dwells
])
def test_undoes_shared_table(others: float | None, shared_from: str | None, failed: bool,
                             skips: bool) -> None:
    from autobatch.policy.core import Move, _undoes_shared
    from autobatch.policy.settings import DeviceSettings
    from autobatch.policy.types import Recommendation

    s = settings(device=DeviceSettings(release=True))
    state = replace(State.initial("triton-default").switched("triton-default", 95.0),
                    shared_from=shared_from, last_switch_failed=failed)
    w = dwin(100.0, others=others if others is not None else 0.0, util=others is not None)
    c = build_context([dwin(99.0), w], state, s, 100.1)
    move = Move(c, Recommendation(2, Reason.EFFICIENCY, "up"), state)
    assert _undoes_shared(move) is skips
    off = build_context([dwin(99.0), w], state, settings(), 100.1)
    assert _undoes_shared(Move(off, Recommendation(2, Reason.EFFICIENCY, "up"), state)) is False


def test_no_relief_while_the_co_tenants_stretch_every_rung() -> None:
    """At the bottom with the summary over the SLO: the rungs above would form the same
    stretched batches (nothing to save) and wait on top: relief holds."""
    s = settings(stability=Stability(confirmations=1, min_dwell_s=0.0, stabilization_s=0.0),
                 trust=Trust(p95_settle_s=0.0))
    w = mixed(100.0, "triton-default", 1.0, p95_ms=75.0, mean_ms=52.0)
    d, _ = decide([mixed(99.0, "triton-default", 1.0), w], State.initial("triton-default"), s, 100.1)
    assert d.action is Action.HOLD and d.reason is Reason.AT_LIMIT, d.message
    assert "nothing above relieves it" in d.signals["relief"]


# -- the efficiency rule on a device it sees ------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "fires", "why"),
    [
        (dict(stretch=1.25, others=0.0, mean_ms=25.0, p95_ms=32.0), True, "alone: the stretch predicts room"),
        (dict(stretch=1.25, others=0.0, mean_ms=25.0, p95_ms=52.0), True,
         "alone, though the summary p95 still remembers the co-tenants gone"),
        (dict(stretch=1.25, others=0.0, mean_ms=25.0, p95_ms=52.0, util=False), False,
         "no utilisation (a CPU): the summary p95 is judged, over the headroom"),
        (dict(stretch=1.25, others=0.65, mean_ms=25.0, p95_ms=32.0), False,
         "others use more than util_ceiling of the device"),
        (dict(stretch=2.2, others=0.45, mean_ms=48.0, p95_ms=32.0), False,
         "shared: the rungs above are predicted past the headroom"),
    ],
)
def test_the_efficiency_rule_judges_the_stretched_predictions_and_the_others_share(
        window: dict[str, Any], fires: bool, why: str) -> None:
    from autobatch.policy.rules import efficiency

    s = settings(trust=Trust(p95_settle_s=0.0))
    rec = efficiency(ctx("triton-default", dwin(100.0, batch=2.0, **window), s))
    assert (rec is not None and rec.reason is Reason.EFFICIENCY and rec.target > 0) is fires, (why, rec)


# -- a climb the shared rule would undo -----------------------------------------------------------

WAIT25 = Profile("wait25", 32, (32,), 25000)


@pytest.mark.parametrize(
    ("rate", "batch", "stretch", "others", "mean_ms", "climbs", "why"),
    [
        (35.0, 1.2, 1.71, 0.47, 27.5, False,
         "40/s with two co-tenants (cotenants-linger, 2026-12-04): wait25 predicted ~49 ms from "
         "the default's window, but its own requests would read ~70"),
        (150.0, 2.3, 1.07, 0.0, 21.0, True, "alone at 150/s: the floor is not the shared rule's"),
        (40.0, 1.1, 1.0, 0.0, 13.5, True, "alone at 40/s"),
    ],
)
def test_no_climb_on_a_shared_device_that_the_shared_rule_would_undo(
        rate: float, batch: float, stretch: float, others: float, mean_ms: float, climbs: bool,
        why: str) -> None:
    """The climbs of cotenants-linger's low-shared phase that the shared rule undid 5-8 s
    later, in all six runs: the efficiency rule now reads the target's p95 as the shared rule
    would once it serves, and refuses it there; alone it still climbs."""
    from autobatch.policy.rules import efficiency
    from autobatch.policy.settings import Efficiency

    s = settings(ladder=(DEFAULT, WAIT25), efficiency=Efficiency(headroom=0.85),
                 trust=Trust(p95_settle_s=0.0))
    c = ctx("triton-default", dwin(100.0, rate=rate, batch=batch, stretch=stretch, others=others,
                                   mean_ms=mean_ms, p95_ms=30.0), s)
    rec = efficiency(c)
    assert (rec is not None and rec.target == 1) is climbs, (why, rec, c.p95_predicted, c.p95_once_live)
    if not climbs:
        assert c.p95_predicted[1] < 0.85 * SLO < SLO < c.p95_once_live[1], why
        # ... and the shared rule, on wait25's own window there, moves back: the same reading.
        on = ctx("wait25", dwin(100.0, rate=rate, batch=2.1, stretch=1.9, others=others, mean_ms=45.7,
                                p95_ms=49.0), s)
        back = shared(on)
        assert back is not None and back.target == 0, why


# -- device.act_p95: where the shared rule acts, below the SLO ---------------------------------------


@pytest.mark.parametrize(("act", "moves"), [(1.0, False), (0.95, True)])
def test_the_shared_rule_acts_at_act_p95_x_the_slo(act: float, moves: bool) -> None:
    """wait25 predicted at ~58.5 ms on a shared device (its requests' mean x p95_per_mean):
    under the SLO, over 0.95 x it. At the default 1 the rule holds (cotenants-step's
    arrival on 2026-12-04 read so for two windows); at 0.95 it moves to the default."""
    from autobatch.policy.settings import DeviceSettings

    s = settings(ladder=(DEFAULT, WAIT25), device=DeviceSettings(act_p95=act))
    c = ctx("wait25", dwin(100.0, rate=150, batch=4.8, stretch=1.6, others=0.4, mean_ms=39.0, p95_ms=40.0), s)
    assert 0.95 * SLO < c.p95_predicted[1] < SLO
    rec = shared(c)
    assert (rec is not None) is moves
    if rec is not None:
        assert rec.target == 0 and "> 0.95 x SLO 57 ms" in rec.message, rec.message


@pytest.mark.parametrize(("act", "climb", "climbs"),
                         [(1.0, 1.0, True), (0.95, 1.0, False), (1.0, 0.95, False)])
def test_a_climb_is_refused_where_the_shared_rule_would_act(act: float, climb: float, climbs: bool) -> None:
    """The climb check reads the line the shared rule acts at, or the band ``climb_p95`` under
    it (the default 0.95), so that a climb it allows is not undone a window later: wait25
    would read ~58 ms once serving (the default's queue carried: ``own_queue`` 0)."""
    from autobatch.policy.rules import efficiency
    from autobatch.policy.settings import DeviceSettings, Efficiency

    s = settings(ladder=(DEFAULT, WAIT25), efficiency=Efficiency(headroom=0.85),
                 trust=Trust(p95_settle_s=0.0),
                 device=DeviceSettings(act_p95=act, climb_p95=climb, own_queue=0.0))
    c = ctx("triton-default", dwin(100.0, rate=150, batch=2.3, stretch=1.3, others=0.3, mean_ms=24.0,
                                   p95_ms=30.0), s)
    assert 0.95 * SLO < c.p95_once_live[1] < SLO
    rec = efficiency(c)
    assert (rec is not None and rec.target == 1) is climbs


# -- device.own_queue: the live profile's queueing for its own busy instances ---------------------


@pytest.mark.parametrize(
    ("rate", "batch", "stretch", "others", "mean_ms", "own_queue", "climb", "climbs", "why"),
    [
        (150.0, 3.0, 1.43, 0.25, 28.7, 0.0, 1.0, False,
         "cotenants-day's afternoon (2026-12-04): the default's ~10 ms queue carried to wait25"),
        (150.0, 3.0, 1.43, 0.25, 28.7, 1.0, 0.95, True,
         "the same window with the queue the default's own: wait25 held measured p95 51.5 there"),
        (35.0, 1.2, 1.71, 0.47, 27.5, 1.0, 0.95, False,
         "cotenants-linger's low-shared: wait25's own wait and stretched run read over the SLO"),
        (40.0, 1.24, 1.55, 0.47, 27.0, 1.0, 1.0, True,
         "a linger window reading wait25 at ~59 ms: under the SLO, so without the band it climbed"),
        (40.0, 1.24, 1.55, 0.47, 27.0, 1.0, 0.95, False,
         "the same window in the band: wait25 held measured p95 57-58 there, the shared rule 61-63"),
    ],
)
def test_own_queue_keeps_the_live_profiles_queueing_off_the_climb_check(
        rate: float, batch: float, stretch: float, others: float, mean_ms: float, own_queue: float,
        climb: float, climbs: bool, why: str) -> None:
    from autobatch.policy.rules import efficiency
    from autobatch.policy.settings import DeviceSettings, Efficiency

    s = settings(ladder=(DEFAULT, WAIT25), efficiency=Efficiency(headroom=0.85),
                 trust=Trust(p95_settle_s=0.0), device=DeviceSettings(own_queue=own_queue, climb_p95=climb))
    w = dwin(100.0, rate=rate, batch=batch, stretch=stretch, others=others, mean_ms=mean_ms, p95_ms=30.0)
    c = ctx("triton-default", w, s)
    rec = efficiency(c)
    assert (rec is not None and rec.target == 1) is climbs, (why, rec, c.p95_predicted, c.p95_once_live)
    assert c.p95_predicted[1] < 0.85 * SLO, why  # the prediction itself allows the climb in each
    # the decision log carries what the check read
    assert c.signals()["p95_once_live_ms"]["wait25"] == round(c.p95_once_live[1], 1)


# -- device.wait_tail: how much of a profile's wait for a batch the p95 floor multiplies ----------


AGG = Profile("aggressive", 32, (32,), 17076)


@pytest.mark.parametrize(
    ("wait_tail", "moves", "why"),
    [
        (1.0, True, "cotenants-linger's low-shared, r3 (2026-12-05): read ~62 ms and moved back; "
                    "held there aggressive measured a p95 of 50-51"),
        (0.0, False, "the same window with its ~14 ms wait counted once: read ~55 ms, under the SLO"),
    ],
)
def test_wait_tail_sets_how_much_of_the_wait_the_floor_multiplies(
        wait_tail: float, moves: bool, why: str) -> None:
    from autobatch.policy.settings import DeviceSettings

    s = settings(ladder=(DEFAULT, AGG), device=DeviceSettings(wait_tail=wait_tail))
    w = dwin(100.0, rate=38.0, batch=1.65, stretch=1.81, others=0.54, mean_ms=41.33, p95_ms=48.4)
    c = ctx("aggressive", w, s)
    rec = shared(c)
    assert (rec is not None) is moves, (why, rec, c.p95_predicted)
    floor = 1.5 * w.mean_request_ms  # type: ignore[operator]
    if wait_tail == 1.0:
        assert c.p95_predicted[1] >= floor - 1e-9, why
    else:
        assert 0.85 * floor < c.p95_predicted[1] < SLO, why


def test_wait_tail_never_reads_a_p95_under_the_mean_request() -> None:
    from autobatch.policy.settings import DeviceSettings

    s = settings(ladder=(DEFAULT, AGG), device=DeviceSettings(wait_tail=0.0))
    w = dwin(100.0, rate=38.0, batch=1.65, stretch=1.81, others=0.54, mean_ms=20.0, p95_ms=30.0)
    c = ctx("aggressive", w, s)
    assert c.p95_predicted[1] >= w.mean_request_ms
    assert all(v >= 0 for v in c.p95_once_live.values())


# -- device.floor_alone: the floor read on a device the model has to itself --------------------------


def _burst() -> Window:
    """bursty's burst of 150/s in bursts of 8 on wait25, alone (20261205-192910, run 2, gateway,
    20.5 s in): its requests averaged 43 ms; the summary p95 lagged at 50.6, the phase's p95 was 56."""
    return dwin(100.0, rate=143.9, batch=11.1, stretch=1.13, others=0.0, mean_ms=43.1, p95_ms=50.6)


@pytest.mark.parametrize("alone", [False, True])
def test_floor_alone_lets_the_shared_rule_read_a_burst_on_a_device_of_its_own(alone: bool) -> None:
    from autobatch.policy.settings import DeviceSettings

    s = settings(ladder=(DEFAULT, AGG, WAIT25), device=DeviceSettings(floor_alone=alone))
    c = ctx("wait25", _burst(), s)
    assert not c.shared and c.floor_counts is alone
    assert c.p95_predicted[2] > SLO  # the floor reads it over the SLO either way ...
    rec = shared(c)
    if not alone:
        assert rec is None  # ... and only with floor_alone does the rule act on it
        return
    assert rec is not None and rec.reason is Reason.SHARED and rec.target < 2
    assert rec.message.startswith("the device is the model's own (others 0%)"), rec.message


@pytest.mark.parametrize(
    ("rate", "batch", "stretch", "mean_ms", "why"),
    [
        (150.0, 2.3, 1.07, 21.0, "Poisson 150/s alone (step, ramp): the default's requests average 21 ms"),
        (40.0, 1.1, 1.0, 13.5, "40/s alone"),
    ],
)
def test_floor_alone_does_not_refuse_the_climbs_of_poisson_load(
        rate: float, batch: float, stretch: float, mean_ms: float, why: str) -> None:
    from autobatch.policy.rules import efficiency
    from autobatch.policy.settings import DeviceSettings, Efficiency

    s = settings(ladder=(DEFAULT, WAIT25), efficiency=Efficiency(headroom=0.85),
                 trust=Trust(p95_settle_s=0.0), device=DeviceSettings(floor_alone=True))
    c = ctx("triton-default", dwin(100.0, rate=rate, batch=batch, stretch=stretch, others=0.0,
                                   mean_ms=mean_ms, p95_ms=30.0), s)
    assert c.floor_counts and c.p95_once_live[1] < 0.95 * SLO, (why, c.p95_once_live)
    rec = efficiency(c)
    assert rec is not None and rec.target == 1, (why, rec)


# -- device.steady_windows: two windows where nothing changed ------------------------------------

# wait25 beside two co-tenants at 150/s (cotenants-step's high-shared): the requests' mean x 1.5
# reads 54 ms at a mean of 36, 63 at 42: a window of the noise's tail.
UNDER = dict(rate=150.0, batch=4.7, stretch=1.6, others=0.5, mean_ms=36.0, p95_ms=45.0)
OVER = {**UNDER, "mean_ms": 42.0}


def _steady_run(steady_windows: int, over_at: set[int], n: int = 12, **step: Any) -> list[Any]:
    """wait25 held 30 s into a shared phase (the dwell long over); the windows in ``over_at``
    (1-based) read over the SLO; ``step`` changes the windows from the 6th on."""
    from autobatch.policy.settings import DeviceSettings

    s = settings(ladder=(DEFAULT, WAIT25), device=DeviceSettings(steady_windows=steady_windows))

    def window(end: float, active: str) -> Window:
        i = round(end - 100.0)
        base = {**UNDER, **(step if i >= 6 else {})}
        return dwin(end, **{**base, **({"mean_ms": OVER["mean_ms"]} if i in over_at else {})})

    decisions, _ = run(s, State.initial("wait25").switched("wait25", 60.0), n, window)
    return decisions


@pytest.mark.parametrize(("steady_windows", "over_at", "moved_at"), [
    (1, {8}, 8),          # as before 2026-12-06: one window of the tail moves it
    (2, {8}, None),       # one window of the tail, nothing changed: held
    (2, {8, 10}, None),   # two, not in a row
    (2, {8, 9}, 9),       # two in a row: the second moves it
])
def test_in_steady_state_a_shared_move_asks_steady_windows_in_a_row(
        steady_windows: int, over_at: set[int], moved_at: int | None) -> None:
    decisions = _steady_run(steady_windows, over_at)
    moved = [round(d.at_s - 100.05) for d in decisions if d.switch]
    assert moved == ([] if moved_at is None else [moved_at]), moved
    if moved_at is None and steady_windows == 2:
        held = decisions[min(over_at) - 1]
        assert held.reason is Reason.CONFIRMING and "confirming (1/2)" in held.message, held.message
    if moved_at is not None:
        assert decisions[moved_at - 1].reason is Reason.SHARED


@pytest.mark.parametrize(("step", "why"), [
    (dict(others=0.62), "others' share rose 0.12 in two windows: a co-tenant arrives"),
    (dict(rate=80.0, batch=3.0), "the arrivals fell 150 -> 80/s: a load step"),
])
def test_a_change_lets_the_shared_rule_act_on_one_window(step: dict[str, Any], why: str) -> None:
    """The 6th window changes and reads over the SLO: acted on at once, as before."""
    decisions = _steady_run(2, {6}, **step)
    moved = [round(d.at_s - 100.05) for d in decisions if d.switch]
    assert moved[:1] == [6], (why, moved)
    assert decisions[5].reason is Reason.SHARED, why


@pytest.mark.parametrize(("now", "then", "steady_"), [
    (dict(others=0.5), dict(others=0.45), True),
    (dict(others=0.5), dict(others=0.4), False),           # rose 0.1: a change
    (dict(others=0.3), dict(others=0.5), True),            # fell: the rule's own business, not an arrival
    (dict(rate=100.0), dict(rate=150.0), True),            # 0.33 of the higher rate
    (dict(rate=80.0), dict(rate=150.0), False),            # 0.47
    (dict(rate=150.0), dict(rate=80.0), False),            # up as down
    (dict(others=0.5), dict(others=0.5, stale=True), False),  # no fresh window to compare
])
def test_steady_compares_this_window_with_the_one_steady_windows_back(
        now: dict[str, Any], then: dict[str, Any], steady_: bool) -> None:
    from autobatch.policy.core import steady
    from autobatch.policy.settings import DeviceSettings

    s = settings(ladder=(DEFAULT, WAIT25), device=DeviceSettings(steady_windows=2))
    history = [dwin(98.0, **{**UNDER, **then}), dwin(99.0, **UNDER), dwin(100.0, **{**UNDER, **now})]
    assert steady(build_context(history, State.initial("wait25"), s, 100.1)) is steady_
    one = settings(ladder=(DEFAULT, WAIT25))
    assert steady(build_context(history, State.initial("wait25"), one, 100.1)) is False


@pytest.mark.parametrize(("steady_windows", "change_windows", "changed_at", "steady_"), [
    (3, 0, 97.0, False),   # 0: looks steady_windows (3) back, where the share was lower
    (3, 2, 97.0, True),    # two back: the rise three windows ago is no longer a change
    (3, 2, 98.0, False),   # within two windows: a change
    (2, 3, 97.0, False),   # further back than steady_windows, too
])
def test_change_windows_sets_how_far_back_steady_looks_for_a_change(
        steady_windows: int, change_windows: int, changed_at: float, steady_: bool) -> None:
    """``device.change_windows`` apart from ``steady_windows``: the windows a steady-state move
    needs in a row, and the span after a co-tenant's arrival in which one window acts."""
    from autobatch.policy.core import steady
    from autobatch.policy.settings import DeviceSettings

    s = settings(ladder=(DEFAULT, WAIT25),
                 device=DeviceSettings(steady_windows=steady_windows, change_windows=change_windows))
    # others' share 0.3 up to the window ending at ``changed_at``, 0.5 from the next one on
    history = [dwin(t, **{**UNDER, "others": 0.5 if t >= changed_at + 1.0 else 0.3})
               for t in (96.0, 97.0, 98.0, 99.0, 100.0)]
    assert steady(build_context(history, State.initial("wait25"), s, 100.1)) is steady_
