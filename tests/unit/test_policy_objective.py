"""The objective's rules, as tables: live capacity, overload, forecast, efficiency, low load.

Pure: windows in, decisions out (``decide``), plus the helpers it rests on
(``live_factor``, ``batch_estimate``, ``holt``). The real-Triton behaviour is
in tests/integration (the step) and the replayed steady trace.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from autobatch.curve import BatchCurve
from autobatch.policy import (
    Action,
    PolicySettings,
    Reason,
    State,
    batch_estimate,
    decide,
    device_ms_estimate,
    holt,
    live_factor,
)
from autobatch.policy.capacity import batch_ms
from autobatch.policy.forecast import trend_noise
from autobatch.profiles import Profile
from autobatch.signals import Window

LS = Profile("latency-soft", 32, (2, 4, 8), 1000)
BAL = Profile("balanced", 32, (8, 16), 5000)
AGG = Profile("aggressive", 32, (16, 32), 20000)
LADDER = (LS, BAL, AGG)
GAINS = BatchCurve({1: 7.0, 2: 14.0, 4: 13.0, 8: 15.0, 16: 20.0, 32: 30.0})
# Capacities on GAINS: latency-soft 8/15 ms = 533/s, balanced 800/s, aggressive 1067/s.


def settings(**kw: Any) -> PolicySettings:
    base: dict[str, Any] = dict(
        ladder=LADDER, slo_p95_ms=50.0, confirmations=1, min_dwell_s=0.0,
        stabilization_s=0.0, curve=GAINS,
    )
    base.update(kw)
    return PolicySettings.from_flat(**base)


def win(end: float = 100.0, dt: float = 1.0, **kw: Any) -> Window:
    """A calm 1-s window: 20 req/s, batches of 1, p95 well inside the SLO."""
    base: dict[str, Any] = dict(
        model="m", start_s=end - dt, end_s=end, success_rps=20.0, inference_rps=20.0,
        exec_rps=20.0, mean_batch_size=1.0, mean_queue_ms=0.2, mean_compute_ms=7.0,
        pending_requests=0.0, pending_delta=0.0, p95_ms=10.0, p99_ms=12.0,
    )
    base.update(kw)
    return Window(**base)


def series(rates: list[float], **kw: Any) -> list[Window]:
    """One 1-s window per rate, ending at 100 - n + 1 ... 100."""
    n = len(rates)
    return [win(end=100.0 - (n - 1 - i), inference_rps=r, success_rps=r, **kw)
            for i, r in enumerate(rates)]


def one(history: list[Window], active: str, now: float = 100.5, state_kw: dict[str, Any] | None = None,
        **settings_kw: Any) -> Any:
    state = replace(State.initial(active), **(state_kw or {}))
    d, _ = decide(history, state, settings(**settings_kw), now)
    return d


# -- reasons are tagged by kind ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (Reason.OVERLOAD, "survival"), (Reason.FORECAST, "survival"), (Reason.SATURATION, "survival"),
        (Reason.SLO_BREACH, "protective"), (Reason.FAILURES, "protective"),
        (Reason.RELIEF, "protective"), (Reason.RELIEVED, "hold"),
        (Reason.EFFICIENCY, "efficiency"), (Reason.SELF_INFLICTED_WAIT, "efficiency"),
        (Reason.LOW_LOAD, "efficiency"), (Reason.PIN, "manual"),
        (Reason.STEADY, "hold"), (Reason.SATURATED, "hold"), (Reason.DWELL, "hold"),
    ],
)
def test_every_reason_has_a_kind(reason: Reason, kind: str) -> None:
    assert reason.kind == kind


def test_the_fast_path_is_for_survival_and_for_steps_toward_latency_that_cost_nothing() -> None:
    direct = {r for r in Reason if r.direct}
    assert direct == {Reason.OVERLOAD, Reason.FORECAST, Reason.SATURATION, Reason.SHARED,
                      Reason.LOW_LOAD, Reason.SELF_INFLICTED_WAIT, Reason.NO_GAIN,
                      Reason.RELIEF}
    # toward throughput for efficiency, and protective backing-off, keep the cautious steps
    assert not Reason.EFFICIENCY.direct and not Reason.SLO_BREACH.direct and not Reason.FAILURES.direct


# -- live capacity -----------------------------------------------------------------------------


def busy(share: float, *, execs: float, b: float, instances: int = 1, **kw: Any) -> Window:
    """A window whose instances were busy ``share`` of the time, running ``execs``/s of ``b``."""
    return win(exec_rps=execs, mean_batch_size=b, inference_rps=execs * b,
               busy_instances=share * instances, **kw).with_instance_count(instances)


@pytest.mark.parametrize(
    ("history", "factor"),
    [
        ([], None),
        ([win()], None),  # no busy share at all
        ([busy(0.1, execs=10, b=1)], None),  # too idle to say anything
        # 50 batches of 4 per s at 13 ms: the curve predicts 0.65 busy; measured 0.65 -> x 0.9
        ([busy(0.65, execs=50, b=4)], pytest.approx(0.9)),
        # the same batches measured 30% slower (or with copies): capacity scales down with it
        ([busy(0.845, execs=50, b=4)], pytest.approx(0.65 / 0.845 * 0.9)),
        # faster than the curve: the curve stays the bound
        ([busy(0.4, execs=50, b=4)], 1.0),
        # the newest qualifying window wins; a stale or idle newer one is skipped
        ([busy(0.845, execs=50, b=4), busy(0.05, execs=5, b=1)], pytest.approx(0.6925, abs=1e-3)),
        ([busy(0.845, execs=50, b=4), win(stale=True, stale_reason="counter_reset")],
         pytest.approx(0.6925, abs=1e-3)),
        # two instances: busy instance-seconds, not the share, are compared with the curve
        ([busy(0.65, execs=100, b=4, instances=2)], pytest.approx(0.9)),
    ],
)
def test_live_factor(history: list[Window], factor: Any) -> None:
    got, _ = live_factor(history, GAINS, busy_ceiling=0.9, min_busy_share=0.3)
    assert got == factor


def test_live_capacity_finds_overload_the_curve_misses() -> None:
    """latency-soft carries 533/s by the curve; busy 95% at 400/s in batches of 8 says this
    machine runs them 1.28x slower than the curve (and full at 90%): ~375/s."""
    w = busy(0.95, execs=50, b=8, pending_delta=10.0)
    assert w.arrival_rps == pytest.approx(410.0)
    d = one([w], "latency-soft")
    assert (d.action, d.target, d.reason) == (Action.SWITCH, "balanced", Reason.OVERLOAD), d.message
    assert d.signals["capacity_rps"]["latency-soft"] == pytest.approx(533.3 * 0.9 * 0.75 / 0.95, rel=0.01)
    assert d.signals["live_factor"] == pytest.approx(0.9 * 0.75 / 0.95, abs=1e-3)
    # Without the live data, the curve alone lets 410/s pass as carried.
    d = one([replace(w, busy_instances=None, busy_share=None)], "latency-soft")
    assert d.reason is not Reason.OVERLOAD


# -- overload on one window, or a backlog growing window after window -----------------------


@pytest.mark.parametrize(
    ("name", "history", "active", "target", "reason"),
    [
        ("arrivals above capacity in one window", series([20, 560]), "latency-soft",
         "balanced", Reason.OVERLOAD),
        ("arrivals from the backlog's growth", [win(inference_rps=500.0, pending_delta=60.0)],
         "latency-soft", "balanced", Reason.OVERLOAD),
        # two instances in use (the profiles leave instance_group alone): twice the capacity
        ("two instances carry what one does not",
         [win(inference_rps=560.0, p95_ms=40.0).with_instance_count(2)],
         "latency-soft", "latency-soft", Reason.STEADY),
        ("two instances, past their capacity", [win(inference_rps=1100.0).with_instance_count(2)],
         "latency-soft", "balanced", Reason.OVERLOAD),
        ("just under capacity: not an overload", series([500, 520], p95_ms=40.0), "latency-soft",
         "latency-soft", Reason.STEADY),
        ("too much for every rung but the top", [win(inference_rps=900.0)], "latency-soft",
         "aggressive", Reason.OVERLOAD),
        ("more than the top carries: the most there is", [win(inference_rps=1200.0)],
         "latency-soft", "aggressive", Reason.OVERLOAD),
        ("overloaded at the top: hold, only replicas help", [win(inference_rps=1200.0)],
         "aggressive", "aggressive", Reason.SATURATED),
        # 2 windows of growth, 30 requests queued at 533/s: 56 ms to drain > 0.5 x 50 ms
        ("backlog grew two windows in a row", [
            win(end=99.0, inference_rps=400.0, pending_requests=20.0, pending_delta=10.0),
            win(end=100.0, inference_rps=400.0, pending_requests=30.0, pending_delta=10.0)],
         "latency-soft", "balanced", Reason.OVERLOAD),
        ("backlog grew in one window only", [
            win(end=99.0, inference_rps=400.0, pending_requests=20.0, pending_delta=-5.0),
            win(end=100.0, inference_rps=400.0, pending_requests=30.0, pending_delta=10.0,
                p95_ms=40.0)],
         "latency-soft", "latency-soft", Reason.STEADY),
        ("a growing but short backlog drains fast", [
            win(end=99.0, inference_rps=400.0, pending_requests=4.0, pending_delta=2.0),
            win(end=100.0, inference_rps=400.0, pending_requests=6.0, pending_delta=2.0,
                p95_ms=40.0)],
         "latency-soft", "latency-soft", Reason.STEADY),
    ],
)
def test_overload(name: str, history: list[Window], active: str, target: str, reason: Reason) -> None:
    d = one(history, active, forecast=False)
    assert (d.target, d.reason) == (target, reason), d.message


def test_the_backlog_rule_ignores_windows_before_the_switch_settled() -> None:
    grow = [win(end=99.0, inference_rps=400.0, pending_requests=20.0, pending_delta=10.0),
            win(end=100.0, inference_rps=400.0, pending_requests=30.0, pending_delta=10.0,
                p95_ms=40.0)]
    # The switch at 96.5 settles at 98.5: the window 98-99 is still the old profile's.
    d = one(grow, "latency-soft", state_kw={"last_switch_s": 96.5}, forecast=False)
    assert d.reason is Reason.STEADY, d.message


def test_survival_dwells_after_a_failed_switch() -> None:
    s = settings(min_dwell_s=20.0)
    state = State.initial("latency-soft").switch_failed("latency-soft", 95.0)
    d, _ = decide([win(inference_rps=900.0)], state, s, 100.5)
    assert (d.action, d.reason) == (Action.HOLD, Reason.DWELL)
    state = State.initial("latency-soft").switched("latency-soft", 95.0, duration_s=1.0)
    d, _ = decide([win(inference_rps=900.0)], state, s, 100.5)
    assert (d.action, d.reason) == (Action.SWITCH, Reason.OVERLOAD)


# -- the forecast ------------------------------------------------------------------------------


def test_trend_noise_is_the_trend_spread_on_white_noise() -> None:
    rng = np.random.default_rng(7)
    a, b = 0.5, 0.3
    level, trend, trends = 0.0, 0.0, []
    for y in rng.normal(0.0, 1.0, 20000):
        new = a * y + (1 - a) * (level + trend)
        trend = b * (new - level) + (1 - b) * trend
        level = new
        trends.append(trend)
    assert trend_noise(a, b) == pytest.approx(float(np.std(trends[100:])), rel=0.05)


@pytest.mark.parametrize(
    ("rates", "horizon", "rising", "rps"),
    [
        ([100.0] * 10, 4.0, False, pytest.approx(100.0)),
        ([100.0 + 20 * i for i in range(10)], 4.0, True, pytest.approx(280.0 + 80.0, rel=0.1)),
        ([300.0 - 20 * i for i in range(10)], 4.0, False, pytest.approx(120.0 - 80.0, rel=0.25)),
        # a slow rise inside the noise of 200 requests/s is not a trend
        ([200.0 + 1 * i for i in range(10)], 4.0, False, pytest.approx(213.0, rel=0.05)),
    ],
)
def test_holt(rates: list[float], horizon: float, rising: bool, rps: Any) -> None:
    f = holt(rates, window_s=1.0, horizon_windows=horizon)
    assert f is not None
    assert f.rising is rising
    assert f.rps == rps


def test_holt_needs_three_windows() -> None:
    assert holt([1.0, 2.0], window_s=1.0, horizon_windows=4.0) is None


# The windows of the reaction run of 2026-12-01 04:01 (benchmarks/results/reaction/logs/
# 20261201-040138-steps.jsonl.gz): the ten fresh windows behind its two forecast moves, each
# after a step of 30 -> 350/s: one seen after a reload (its windows are stale and skipped),
# one that straddled two windows.
AFTER_RELOAD = [38.0, 37.0, 27.0, 35.0, 31.0, 33.0, 32.0, 29.0, 300.6, 323.8]
STRADDLED = [28.0, 31.0, 22.0, 29.0, 37.0, 27.0, 34.0, 39.0, 284.8, 392.9]


@pytest.mark.parametrize(
    ("rates", "jump_z", "rising", "shifts"),
    [
        # Holt alone reads each step as a trend of +40 to +70/s per window
        (AFTER_RELOAD, 0.0, True, 0),
        (STRADDLED, 0.0, True, 0),
        # read as level shifts, the rate restarts at the step with no trend
        (AFTER_RELOAD, 4.0, False, 1),
        (STRADDLED, 4.0, False, 2),
        # the level after the shift is the new rate: a projection from there, not from 30/s
        ([30.0] * 5 + [350.0] * 5, 4.0, False, 1),
        # a ramp moves the rate by less than the noise per window: no shift, still a trend
        ([100.0 + 20 * i for i in range(10)], 4.0, True, 0),
        # a step down is no shift (a level restarted at a low outlier would read the
        # windows after it as a rise): Holt follows the fall, and where its falling
        # trend overshoots, the rate coming in above the projection is the one shift
        ([350.0] * 5 + [30.0] * 5, 4.0, False, 1),
    ],
)
def test_a_step_is_a_level_shift_not_a_trend(rates: list[float], jump_z: float, rising: bool,
                                              shifts: int) -> None:
    f = holt(rates, window_s=1.0, horizon_windows=4.0, jump_z=jump_z)
    assert f is not None
    assert (f.rising, f.shifts) == (rising, shifts), f
    if shifts and jump_z:
        assert f.level_rps == pytest.approx(rates[-1], rel=0.1)


RAMP = [100.0 + 30.0 * i for i in range(10)]  # 100 -> 370/s, +30/s per window


@pytest.mark.parametrize(
    ("name", "rates", "state_kw", "settings_kw", "target", "reason"),
    [
        # at 370/s latency-soft (533/s) is not overloaded, but +30/s for 1 + 3 s reaches
        # ~480/s, and 480 x 1.25 > 533: move now, to balanced (800/s carries it)
        ("a ramp moves before saturation", RAMP, {}, {}, "balanced", Reason.FORECAST),
        ("no forecast without the knob", RAMP, {}, {"forecast": False}, "latency-soft",
         Reason.STEADY),
        # a measured 0.2 s actuation shortens the horizon: ~400/s x 1.25 < 533
        ("a fast actuator leaves time", RAMP, {"last_actuation_s": 0.2}, {}, "latency-soft",
         Reason.STEADY),
        ("the same rate, steady", [370.0] * 10, {}, {}, "latency-soft", Reason.STEADY),
        ("falling", RAMP[::-1], {}, {}, "latency-soft", Reason.STEADY),
        ("rising, but far from capacity", [20.0 + 5 * i for i in range(10)], {}, {},
         "latency-soft", Reason.STEADY),
        ("at the top nothing carries more: the other rules decide", RAMP, {}, {},
         "aggressive", Reason.STEADY),
        # a step to 400/s, overload's business (one window), leaves no trend to project:
        # 400 x 1.25 = 500 < 533
        ("a step is not a trend", [30.0] * 8 + [310.0, 400.0], {}, {}, "latency-soft",
         Reason.STEADY),
        ("a step read as a trend", [30.0] * 8 + [310.0, 400.0], {}, {"forecast_jump_z": 0.0},
         "balanced", Reason.FORECAST),
    ],
)
def test_forecast(name: str, rates: list[float], state_kw: dict[str, Any],
                  settings_kw: dict[str, Any], target: str, reason: Reason) -> None:
    active = "aggressive" if target == "aggressive" else "latency-soft"
    # p95 over the headroom keeps the efficiency rule out of the way
    d = one(series(rates, p95_ms=40.0, mean_batch_size=4.0), active, state_kw=state_kw,
            **settings_kw)
    assert (d.target, d.reason) == (target, reason), d.message
    assert (d.signals["forecast_rps"] is None) is (settings_kw.get("forecast") is False)
    if reason is Reason.FORECAST:
        assert d.switch and d.to_dict()["kind"] == "survival"
        assert "forecast" in d.message and d.signals["reaction_s"] == pytest.approx(4.0)
    if settings_kw.get("forecast") is not False:
        # the log says how many windows read as a step: 30 -> 310 and 310 -> 400 at the default
        stepped = name == "a step is not a trend"
        assert d.signals["forecast_shifts"] == (2 if stepped else 0), d.signals


def test_steady_poisson_noise_does_not_trip_the_fast_rules() -> None:
    """Five minutes of 1-s windows of Poisson arrivals at 70% of latency-soft's capacity
    (373/s of 533/s), run through decide like the controller does: no switch."""
    rng = np.random.default_rng(20261130)
    s = settings(confirmations=3, min_dwell_s=20.0, stabilization_s=30.0)
    state = State.initial("latency-soft")
    history: list[Window] = []
    switches = []
    for t in range(300):
        n = float(rng.poisson(0.7 * 533.3))
        pending = float(rng.poisson(2.0))
        prev = history[-1].pending_requests if history else 0.0
        w = win(end=1000.0 + t, inference_rps=n, success_rps=n, mean_batch_size=4.0,
                pending_requests=pending, pending_delta=pending - (prev or 0.0), p95_ms=40.0)
        history = (history + [w])[-30:]
        d, state = decide(history, state, s, w.end_s + 0.01)
        if d.switch:
            switches.append(d)
            state = state.switched(d.target, d.at_s, 3.0)
    assert switches == []


def _first_trip(rates: np.ndarray, capacity: float, jump_z: float, start: int = 3) -> int | None:
    """The first window at which the forecast projects past capacity / 1.25 on a trend that
    stands out (ten windows, a reaction time of 4), as the forecast rule reads it."""
    for t in range(start, len(rates) + 1):
        f = holt([float(r) for r in rates[max(0, t - 10):t]], window_s=1.0, horizon_windows=4.0,
                 jump_z=jump_z)
        if f is not None and f.rising and f.rps * 1.25 > capacity:
            return t
    return None


def test_a_step_trips_the_forecast_only_when_read_as_a_trend() -> None:
    """Poisson counts per 1-s window, 100 runs of each, read without the level-shift rule
    (jump_z 0) and with it (4). Steady load at 70% of capacity: the same rare trips either
    way (about 1 run of 5 minutes in 100 projects past capacity / 1.25). A ramp of 5.8
    requests/s per second: the same trips, most before 90% of capacity. A step of 30 -> 350/s against
    a rung carrying 585/s: a trend read into the step in most runs without the rule, never
    with it."""
    rng = np.random.default_rng(20261201)
    steady = [rng.poisson(210.0, 300) for _ in range(100)]
    ramp = np.array([50.0 + 5.8 * t for t in range(60)])
    ramps = [rng.poisson(ramp) for _ in range(100)]
    steps = [rng.poisson(np.array([30.0] * 20 + [350.0] * 30)) for _ in range(100)]
    trips = {
        z: (
            [_first_trip(r, 300.0, z) for r in steady],
            [_first_trip(r, 300.0, z) for r in ramps],
            [_first_trip(r, 585.0, z, start=21) for r in steps],
        )
        for z in (0.0, 4.0)
    }
    assert trips[0.0][0] == trips[4.0][0]
    assert sum(t is not None for t in trips[4.0][0]) <= 3
    assert trips[0.0][1] == trips[4.0][1]
    at = [ramp[t - 1] / 300.0 for t in trips[4.0][1] if t is not None]
    assert len(at) >= 45 and float(np.median(at)) < 0.9
    assert sum(t is not None for t in trips[0.0][2]) >= 50
    assert trips[4.0][2] == [None] * 100


# -- efficiency: device time, within the headroom ---------------------------------------------


@pytest.mark.parametrize(
    ("profile", "rate", "batch"),
    [
        (LS, 20.0, 1.02),  # lone requests
        (LS, 300.0, 4.0),  # what queues during one 13 ms run
        (LS, 2000.0, 8.0),  # capped at the largest preferred size
        (BAL, 300.0, 4.0),  # 5 ms of wait holds 1.5 arrivals: no bigger than greedy
        (AGG, 300.0, 7.0),  # 20 ms of wait holds 6 more
        (replace(LS, instance_count=2), 300.0, 2.0),  # two instances share the arrivals
    ],
)
def test_batch_estimate(profile: Profile, rate: float, batch: float) -> None:
    b = batch_estimate(profile, rate, GAINS)
    assert b == pytest.approx(batch, rel=0.05)
    assert device_ms_estimate(profile, rate, GAINS) == pytest.approx(batch_ms(GAINS, b) / b)


@pytest.mark.parametrize(
    ("name", "active", "window", "settings_kw", "target", "reason"),
    [
        ("low load: all cost 7 ms, take the lowest wait", "balanced", win(p95_ms=15.0), {},
         "latency-soft", Reason.LOW_LOAD),
        ("low load, but the dwell", "balanced", win(p95_ms=15.0), {"min_dwell_s": 60.0},
         "balanced", Reason.DWELL),
        ("idle: nothing arrives, so the waiting profile holds for what comes next", "balanced",
         win(success_rps=0.0, inference_rps=0.0, exec_rps=0.0, mean_batch_size=None, mean_queue_ms=None,
             mean_compute_ms=None, p95_ms=15.0), {}, "balanced", Reason.STEADY),
        ("moderate load at aggressive: device time differs, stay", "aggressive",
         win(inference_rps=600.0, mean_batch_size=13.0, mean_queue_ms=8.0, p95_ms=40.0), {},
         "aggressive", Reason.STEADY),
        ("efficiency: skips a rung that forms no bigger batches", "latency-soft",
         win(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0), {},
         "aggressive", Reason.EFFICIENCY),
        ("efficiency, instances 60% busy under efficiency_max_busy 0.8", "latency-soft",
         busy(0.6, execs=75, b=4, mean_queue_ms=3.0, p95_ms=12.0), {"efficiency_max_busy": 0.8},
         "aggressive", Reason.EFFICIENCY),
        ("efficiency, but instances 85% busy: no room to load a copy", "latency-soft",
         busy(0.85, execs=75, b=4, mean_queue_ms=3.0, p95_ms=12.0), {"efficiency_max_busy": 0.8},
         "latency-soft", Reason.STEADY),
        ("efficiency, p95 12 ms under efficiency_max_p95 0.3 (15 ms)", "latency-soft",
         busy(0.6, execs=75, b=4, mean_queue_ms=3.0, p95_ms=12.0), {"efficiency_max_p95": 0.3},
         "aggressive", Reason.EFFICIENCY),
        ("efficiency, but p95 12 ms, over 20% of the SLO: no room for a reload", "latency-soft",
         busy(0.6, execs=75, b=4, mean_queue_ms=3.0, p95_ms=12.0), {"efficiency_max_p95": 0.2},
         "latency-soft", Reason.STEADY),
        ("efficiency, 85% busy and no limit (the default, the gateway)", "latency-soft",
         busy(0.85, execs=75, b=4, mean_queue_ms=3.0, p95_ms=12.0), {},
         "aggressive", Reason.EFFICIENCY),
        ("efficiency needs a trusted p95", "latency-soft",
         win(inference_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0, p95_ms=12.0),
         {"p95_settle_s": 1000.0}, "latency-soft", Reason.STEADY),
    ],
)
def test_efficiency_and_low_load(name: str, active: str, window: Window, settings_kw: dict[str, Any],
                                 target: str, reason: Reason) -> None:
    state_kw = {"last_switch_s": 50.0} if settings_kw.get("p95_settle_s") or settings_kw.get(
        "min_dwell_s") else {}
    if settings_kw.get("min_dwell_s"):
        state_kw = {"last_switch_s": 90.0}
    d = one([window], active, state_kw=state_kw, forecast=False, **settings_kw)
    assert (d.target if d.switch else d.current, d.reason) == (target, reason), d.message
    assert ("idle: nothing arrives" in d.message) == name.startswith("idle")
    if d.switch:
        assert d.to_dict()["kind"] == "efficiency"
        assert set(d.signals["device_ms_expected"]) == {"latency-soft", "balanced", "aggressive"}


def test_signals_carry_the_objective_for_logs_and_metrics() -> None:
    w = busy(0.5, execs=30, b=4, device_ms_per_request=3.3)
    d = one(series([100.0] * 5) + [w], "latency-soft")
    sig = d.signals
    for key in ("arrival_rps", "forecast_rps", "forecast_trend_rps", "reaction_s", "capacity_rps",
                "live_factor", "device_ms_per_request", "busy_share", "device_ms_expected",
                "device_ms_source"):
        assert key in sig, key
    assert sig["device_ms_per_request"] == 3.3 and sig["busy_share"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"overload_windows": 0}, "overload_windows"),
        ({"busy_ceiling": 0.0}, "busy_ceiling"),
        ({"busy_ceiling": 1.5}, "busy_ceiling"),
        ({"forecast_alpha": 0.0}, "forecast_alpha"),
        ({"latency_tolerance": 0.2, "min_saving": 0.1}, "latency_tolerance"),
        ({"min_freed_share": 1.0}, "min_freed_share"),
        ({"device_alpha": 0.0}, "device_alpha"),
        ({"efficiency_max_busy": 0.0}, "efficiency_max_busy"),
        ({"efficiency_max_busy": 1.2}, "efficiency_max_busy"),
        ({"efficiency_max_p95": 0.0}, "efficiency_max_p95"),
    ],
)
def test_new_settings_are_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(**kwargs)
