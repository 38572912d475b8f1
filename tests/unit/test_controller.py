"""The controller loop with an injected source, actuator and clock (pure loop logic).

The same loop against the real Triton is in test_sidecar.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from autobatch.actuators.base import ActuationResult
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.controller.http import ControlServer
from autobatch.controller.loop import Controller, next_multiple, run_controller
from autobatch.controller.metrics import SWITCH_REASONS
from autobatch.errors import SignalError
from autobatch.policy import Reason
from autobatch.signals import Window

from ..conftest import DATA, PROFILES

SATURATED = dict(inference_rps=520.0, mean_batch_size=8.0, mean_queue_ms=80.0,
                 pending_requests=60.0, pending_delta=40.0, p95_ms=140.0)


def make_config(tmp_path: Path, **policy) -> object:
    data = {
        "model": "dense_mlp",
        "profiles": {
            "dir": str(PROFILES / "dense_mlp"),
            "ladder": ["latency-soft", "balanced", "aggressive"],
        },
        "slo": {"p95_ms": 50},
        "policy": {"interval_s": 1, "confirmations": 1, "min_dwell_s": 0, "stabilization_s": 0,
                   "curve": str(DATA / "dense_mlp_curve.yaml"), **policy},
        "decision_log": str(tmp_path / "decisions.jsonl"),
    }
    return sidecar_config_from_mapping(data, "test.yaml", base=tmp_path)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class ScriptedSource:
    """Returns one scripted item per poll: a dict of Window fields, or an exception."""

    def __init__(self, clock: Clock, script: list) -> None:
        self.clock = clock
        self.script = list(script)
        self.closed = False

    async def poll(self) -> Window:
        item = self.script.pop(0) if self.script else {}
        if isinstance(item, Exception):
            raise item
        end = self.clock()
        base = dict(model="dense_mlp", start_s=end - 1.0, end_s=end, inference_rps=20.0,
                    success_rps=20.0, mean_batch_size=1.0, mean_queue_ms=0.2, pending_requests=0.0,
                    pending_delta=0.0, p95_ms=10.0)
        base.update(item)
        return Window(**base)

    async def aclose(self) -> None:
        self.closed = True


class FakeActuator:
    name = "fake"

    def __init__(self, live: str | None = None, fail: set[str] | None = None) -> None:
        self.live = live
        self.fail = fail or set()
        self.applied: list[str] = []
        self.urgent: list[bool] = []
        self.saturated: list[bool] = []
        self.reconcile_result: ActuationResult | None = None
        self.closed = False

    async def apply(self, profile, *, urgent: bool = False, saturated: bool = False) -> ActuationResult:
        self.applied.append(profile.name)
        self.urgent.append(urgent)
        self.saturated.append(saturated)
        if profile.name in self.fail:
            return ActuationResult(profile.name, False, 0.5, "rejected", "refused", self.live, True)
        self.live = profile.name
        return ActuationResult(profile.name, True, 0.25, "applied", "ok", profile.name)

    async def live_profile(self):
        return self.live

    async def reconcile(self, profile):
        result, self.reconcile_result = self.reconcile_result, None
        return result

    async def aclose(self) -> None:
        self.closed = True


async def ticks(controller: Controller, clock: Clock, n: int):
    out = []
    for _ in range(n):
        clock.t += 1.0
        out.append(await controller.tick())
    return out


async def test_start_adopts_a_live_ladder_profile(tmp_path):
    clock = Clock()
    act = FakeActuator(live="balanced")
    c = Controller(make_config(tmp_path), ScriptedSource(clock, []), act, clock=clock)
    await c.start()
    assert c.state.active == "balanced" and act.applied == []
    assert c.registry.get_sample_value(
        "autobatch_active_profile", {"model": "dense_mlp", "profile": "balanced"}) == 1


async def test_start_applies_the_first_profile_when_none_is_live(tmp_path):
    clock = Clock()
    act = FakeActuator(live=None)
    c = Controller(make_config(tmp_path), ScriptedSource(clock, []), act, clock=clock)
    await c.start()
    assert act.applied == ["latency-soft"] and c.state.active == "latency-soft"


async def test_switch_is_applied_counted_and_logged(tmp_path):
    clock = Clock()
    cfg = make_config(tmp_path)
    act = FakeActuator(live="latency-soft")
    c = Controller(cfg, ScriptedSource(clock, [{}, SATURATED]), act, clock=clock)
    await c.start()
    clock.t += cfg.policy.trust.settle_s  # the start counts as a switch: windows settle after it
    decisions = await ticks(c, clock, 2)
    # 520/s completed and the backlog grew 40 in 1 s: 560/s arrive, over what latency-soft
    # carries on the dense_mlp curve; balanced is the first rung that carries it x 1.25.
    assert [d.reason for d in decisions] == [Reason.STEADY, Reason.OVERLOAD]
    assert act.applied == ["balanced"] and c.state.active == "balanced"
    assert act.urgent == [True]  # a survival move asks the actuator for its fast path
    assert act.saturated == [True]
    assert c.state.last_actuation_s == pytest.approx(0.25)
    get = c.registry.get_sample_value
    assert get("autobatch_switches_total",
               {"model": "dense_mlp", "reason": "overload", "to": "balanced"}) == 1
    assert get("autobatch_window_value", {"model": "dense_mlp", "signal": "mean_queue_ms"}) == 80.0
    assert get("autobatch_window_value", {"model": "dense_mlp", "signal": "arrival_rps"}) == 560.0
    assert get("autobatch_window_value", {"model": "dense_mlp", "signal": "forecast_rps"}) is not None
    caps = {p: get("autobatch_capacity_rps", {"model": "dense_mlp", "profile": p})
            for p in ("latency-soft", "balanced", "aggressive")}
    assert caps["latency-soft"] < 560.0 < caps["balanced"] < caps["aggressive"], caps
    await c.aclose()
    lines = [json.loads(x) for x in cfg.decision_log.read_text().splitlines()]
    assert [ln["decision"]["reason"] for ln in lines] == ["steady", "overload"]
    assert [ln["decision"]["kind"] for ln in lines] == ["hold", "survival"]
    assert lines[1]["actuation"]["ok"] is True and lines[1]["window"]["mean_queue_ms"] == 80.0
    assert lines[1]["window"]["arrival_rps"] == 560.0
    assert set(lines[1]["decision"]["signals"]) >= {"arrival_rps", "forecast_rps", "capacity_rps",
                                                      "device_ms_per_request", "busy_share"}
    assert lines[1]["active"] == "balanced"


async def test_refused_profile_keeps_the_old_one_and_counts(tmp_path):
    clock = Clock()
    act = FakeActuator(live="latency-soft", fail={"balanced"})
    c = Controller(make_config(tmp_path, min_dwell_s=30), ScriptedSource(clock, [SATURATED] * 4),
                   act, clock=clock)
    await c.start()
    clock.t += 30  # past the dwell the start begins
    decisions = await ticks(c, clock, 4)
    # Tried once; after a failure even a survival move waits out the dwell.
    assert act.applied == ["balanced"]
    assert c.state.active == "latency-soft" and c.status.active == "latency-soft"
    assert [d.reason for d in decisions[1:]] == [Reason.SETTLING, Reason.SETTLING, Reason.DWELL]
    assert c.registry.get_sample_value(
        "autobatch_actuation_failures_total", {"model": "dense_mlp", "reason": "rejected"}) == 1
    assert c.status.errors["actuate"] == 1


async def test_a_relief_move_the_actuator_refuses_is_not_retried_at_that_load(tmp_path):
    """p95 over the SLO at the bottom, not saturated: relief to aggressive. The actuator
    refuses it (as the gateway's guard rolls back a shift whose p95 read worse); the
    breach lasts, and after the dwell and the p95 settling the loop holds at the limit
    instead of trying aggressive again."""
    clock = Clock()
    act = FakeActuator(live="latency-soft", fail={"aggressive"})
    relief = dict(inference_rps=300.0, success_rps=300.0, mean_batch_size=4.0, mean_queue_ms=3.0,
                  p95_ms=70.0)
    c = Controller(make_config(tmp_path, min_dwell_s=10), ScriptedSource(clock, [relief] * 90),
                   act, clock=clock)
    await c.start()
    clock.t += 100  # past the p95 settling the start begins
    decisions = await ticks(c, clock, 90)
    assert decisions[0].reason is Reason.RELIEF and act.applied == ["aggressive"]
    assert c.state.relief_worse == ("aggressive", pytest.approx(300.0))
    assert decisions[-1].reason is Reason.AT_LIMIT
    assert "aggressive read worse (or did not take) at 300/s" in decisions[-1].message


async def test_signal_errors_hold_and_are_counted(tmp_path):
    clock = Clock()
    script = [SignalError("connection refused"), SignalError("connection refused"), SATURATED]
    act = FakeActuator(live="latency-soft")
    c = Controller(make_config(tmp_path), ScriptedSource(clock, script), act, clock=clock)
    await c.start()
    decisions = await ticks(c, clock, 3)
    assert [d.reason for d in decisions] == [Reason.NO_DATA, Reason.NO_DATA, Reason.OVERLOAD]
    assert c.registry.get_sample_value(
        "autobatch_errors_total", {"model": "dense_mlp", "stage": "signals"}) == 2


async def test_stale_windows_hold(tmp_path):
    clock = Clock()
    script = [dict(SATURATED, stale=True, stale_reason="counter_reset")]
    c = Controller(make_config(tmp_path), ScriptedSource(clock, script),
                   FakeActuator(live="latency-soft"), clock=clock)
    await c.start()
    (d,) = await ticks(c, clock, 1)
    assert d.reason is Reason.STALE
    assert c.registry.get_sample_value(
        "autobatch_stale_windows_total", {"model": "dense_mlp", "reason": "counter_reset"}) == 1


async def test_reconcile_after_restart_restarts_the_dwell(tmp_path):
    clock = Clock()
    act = FakeActuator(live="balanced")
    c = Controller(make_config(tmp_path, min_dwell_s=30), ScriptedSource(clock, [SATURATED] * 3),
                   act, clock=clock)
    await c.start()
    act.reconcile_result = ActuationResult("balanced", True, 1.5, "reapplied", "server restarted",
                                           "balanced")
    decisions = await ticks(c, clock, 3)
    assert decisions[0].reason is Reason.SETTLING
    assert c.state.last_switch_s == pytest.approx(1001.0)
    assert c.status.last_actuation["reason"] == "reapplied"


async def test_http_endpoints_and_pinning(tmp_path):
    clock = Clock()
    act = FakeActuator(live="latency-soft")
    c = Controller(make_config(tmp_path), ScriptedSource(clock, [{}] * 5), act, clock=clock)
    await c.start()
    server = ControlServer(c, "127.0.0.1", 0, token="s3cret")
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/healthz")).status_code == 200
            status = (await http.get("/status")).json()
            assert status["active_profile"] == "latency-soft"
            metrics = (await http.get("/metrics")).text
            assert 'autobatch_active_profile{model="dense_mlp",profile="latency-soft"} 1.0' in metrics

            r = await http.post("/profile", json={"profile": "aggressive"})
            assert r.status_code == 401 and "Bearer" in r.headers["WWW-Authenticate"]
            r = await http.post("/profile", json={"profile": "aggressive"},
                                headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401
            auth = {"Authorization": "Bearer s3cret"}
            r = await http.post("/profile", json={"profile": "nope"}, headers=auth)
            assert r.status_code == 400 and "unknown profile" in r.json()["error"]
            r = await http.post("/profile", content=b"not json", headers=auth)
            assert r.status_code == 400
            r = await http.post("/profile", json={"profile": "aggressive"}, headers=auth)
            assert r.status_code == 200 and r.json()["pinned"] == "aggressive"
            (d,) = await ticks(c, clock, 1)
            assert (d.reason, act.live) == (Reason.PIN, "aggressive")
            (d,) = await ticks(c, clock, 1)
            assert d.reason is Reason.PINNED
            r = await http.post("/profile", json={"profile": None}, headers=auth)
            assert r.status_code == 200 and r.json()["pinned"] is None
            assert (await http.get("/status")).json()["pinned"] is None
    finally:
        await server.stop()


async def test_pinning_without_a_token_file_is_refused(tmp_path):
    clock = Clock()
    c = Controller(make_config(tmp_path), ScriptedSource(clock, []), FakeActuator("balanced"),
                   clock=clock)
    await c.start()
    server = ControlServer(c, "127.0.0.1", 0, token=None)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/profile", json={"profile": "aggressive"},
                                headers={"Authorization": "Bearer x"})
            assert r.status_code == 403
    finally:
        await server.stop()


async def test_run_controller_ticks_until_stopped(tmp_path):
    cfg = make_config(tmp_path)
    cfg = replace(cfg, interval_s=0.01)
    source = ScriptedSource(Clock(), [])
    source.clock = lambda: asyncio.get_running_loop().time()
    act = FakeActuator(live="latency-soft")
    c = Controller(cfg, source, act)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_controller(c, stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 5)
    while c.status.ticks < 3:
        await asyncio.sleep(0.005)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert source.closed and act.closed


def raising_once(c: Controller, stop: asyncio.Event, exc: BaseException, after: int = 2) -> list[float]:
    """Make ``c.tick`` raise ``exc`` on its first call, then tick for real; set ``stop``
    after the ``after``-th call. Returns the clock at each call."""
    real_tick, calls = c.tick, []

    async def tick():
        calls.append(c.clock())
        if len(calls) == 1:
            raise exc
        decision = await real_tick()
        if len(calls) >= after:
            stop.set()
        return decision

    c.tick = tick
    return calls


def fake_sleep(clock: Clock):
    async def sleep(delay_s: float) -> None:
        clock.t += delay_s  # the interval passes at once: no real sleep
        await asyncio.sleep(0)

    return sleep


async def test_a_tick_that_raises_is_counted_logged_and_the_loop_ticks_on(tmp_path, caplog):
    clock = Clock()
    source = ScriptedSource(clock, [])
    c = Controller(make_config(tmp_path), source, FakeActuator(live="latency-soft"), clock=clock)
    stop = asyncio.Event()
    calls = raising_once(c, stop, RuntimeError("a bug in tick"))
    with caplog.at_level(logging.ERROR, logger="autobatch.controller"):
        # The bound only keeps a broken loop from hanging the suite; the clock is fake.
        await asyncio.wait_for(run_controller(c, stop=stop, sleep=fake_sleep(clock)), 10)
    assert calls == [1001.0, 1002.0]  # one interval apart: the failure kept the schedule
    assert c.status.ticks == 1  # the second tick ran for real
    assert c.registry.get_sample_value("autobatch_errors_total",
                                       {"model": "dense_mlp", "stage": "tick"}) == 1
    assert c.status.errors == {"tick": 1}
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "tick: a bug in tick" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError  # the traceback
    # The failed tick is not progress; the next one completed.
    assert c.health.last_completed_s == 1002.0 and c.health.tick_started_s is None
    assert source.closed


@pytest.mark.parametrize(("t", "interval", "want"), [
    (1000.0, 1.0, 1001.0), (1000.3, 1.0, 1001.0), (1000.999, 1.0, 1001.0), (10.2, 0.5, 10.5),
    (7.0, 2.0, 8.0)])
def test_the_next_tick_is_the_next_multiple_of_the_interval(t, interval, want):
    assert next_multiple(t, interval) == pytest.approx(want)


async def test_sidecars_started_apart_tick_in_step(tmp_path):
    """Two controllers started 0.4 s apart tick at the same instants: a change on the device
    falls at the same point of both windows (side by side, the later one read every co-tenant
    arrival half a window late)."""
    seen = []
    for start in (1000.1, 1000.5):
        clock = Clock(start)
        c = Controller(make_config(tmp_path / str(start)), ScriptedSource(clock, []),
                       FakeActuator(live="latency-soft"), clock=clock)
        stop = asyncio.Event()
        calls = raising_once(c, stop, RuntimeError("first"), after=3)
        await asyncio.wait_for(run_controller(c, stop=stop, sleep=fake_sleep(clock)), 10)
        seen.append(calls)
    assert seen[0] == seen[1] == pytest.approx([1001.0, 1002.0, 1003.0])


async def test_a_cancelled_tick_still_ends_the_loop(tmp_path):
    clock = Clock()
    source = ScriptedSource(clock, [])
    c = Controller(make_config(tmp_path), source, FakeActuator(live="latency-soft"), clock=clock)
    stop = asyncio.Event()
    calls = raising_once(c, stop, asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await run_controller(c, stop=stop, sleep=fake_sleep(clock))
    assert len(calls) == 1 and "tick" not in c.status.errors and source.closed


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupt_in_a_tick_still_ends_the_loop(tmp_path, exc):
    # On a loop of its own: asyncio lets these two out of the event loop itself.
    clock = Clock()
    source = ScriptedSource(clock, [])
    c = Controller(make_config(tmp_path), source, FakeActuator(live="latency-soft"), clock=clock)
    stop = asyncio.Event()
    calls = raising_once(c, stop, exc)
    with pytest.raises(type(exc)):
        asyncio.run(run_controller(c, stop=stop, sleep=fake_sleep(clock)))
    assert len(calls) == 1 and "tick" not in c.status.errors and source.closed


async def test_a_refused_pin_is_dropped_not_retried(tmp_path):
    clock = Clock()
    act = FakeActuator(live="latency-soft", fail={"aggressive"})
    c = Controller(make_config(tmp_path), ScriptedSource(clock, [{}] * 3), act, clock=clock)
    await c.start()
    c.pin("aggressive")
    decisions = await ticks(c, clock, 3)
    assert decisions[0].reason is Reason.PIN
    assert act.applied == ["aggressive"]
    assert c.status.pinned is None and c.state.pin is None
    assert "pin to aggressive failed" in c.status.last_error
    assert c.state.active == "latency-soft"


async def test_the_settings_panels_and_alerts_compare_with_are_exported(tmp_path):
    clock = Clock()
    script = [{}, dict(stale=True, stale_reason="counter_reset")]
    c = Controller(make_config(tmp_path, min_dwell_s=25, max_window_age_s=12),
                   ScriptedSource(clock, script), FakeActuator(live="latency-soft"), clock=clock)
    get = c.registry.get_sample_value
    m = {"model": "dense_mlp"}
    assert get("autobatch_slo_p95_ms", m) == 50
    assert get("autobatch_min_dwell_seconds", m) == 25
    assert get("autobatch_max_window_age_seconds", m) == 12
    assert get("autobatch_last_fresh_window_timestamp_seconds", m) == 1000.0  # the start
    settings = {
        "latency-soft": (0.0, 4, 32),
        "balanced": (5.0, 16, 32),
        "aggressive": (20.0, 32, 32),
    }
    for profile, (delay_ms, preferred, largest) in settings.items():
        labels = {**m, "profile": profile}
        assert get("autobatch_profile_max_queue_delay_ms", labels) == delay_ms
        assert get("autobatch_profile_preferred_batch_size", labels) == preferred
        assert get("autobatch_profile_max_batch_size", labels) == largest
    # Every failure reason and switch exists at 0 before the first one, for increase().
    assert get("autobatch_actuation_failures_total", {**m, "reason": "rejected"}) == 0
    assert get("autobatch_switches_total", {**m, "reason": "pin", "to": "aggressive"}) == 0
    assert set(SWITCH_REASONS) <= {r.value for r in Reason}
    await c.start()
    await ticks(c, clock, 1)
    assert get("autobatch_last_fresh_window_timestamp_seconds", m) == 1001.0
    await ticks(c, clock, 1)  # a stale window does not move it
    assert get("autobatch_last_fresh_window_timestamp_seconds", m) == 1001.0


async def test_the_device_figures_are_exported_logged_and_in_the_status(tmp_path):
    clock = Clock()
    cfg = make_config(tmp_path)
    shared = dict(inference_rps=50.0, mean_batch_size=2.0, utilization=0.9, stretch=2.5,
                  own_device_share=0.3, others_share=0.6)
    c = Controller(cfg, ScriptedSource(clock, [{}, shared]), FakeActuator(live="latency-soft"), clock=clock)
    await c.start()
    await ticks(c, clock, 2)
    get = c.registry.get_sample_value
    for signal, value in (("stretch", 2.5), ("own_device_share", 0.3), ("others_share", 0.6)):
        assert get("autobatch_window_value", {"model": "dense_mlp", "signal": signal}) == value
    assert c.status.to_dict()["last_window"]["stretch"] == 2.5
    assert c.status.last_decision["signals"]["others_share"] == 0.6
    await c.aclose()


def test_the_signals_measure_the_stretch_against_the_policy_curve(tmp_path):
    cfg = make_config(tmp_path)
    assert cfg.signals.curve is not None and cfg.signals.curve == cfg.policy.curve
    assert make_config(tmp_path, curve=None).signals.curve is None
