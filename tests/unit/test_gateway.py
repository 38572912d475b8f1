"""Gateway weight shifting, the pure parts and the actuator's logic against fakes.

Every fake here has a real counterpart in tests/integration/test_gateway_haproxy.py (a real
HAProxy and real Triton servers) or tests/unit/test_gateway_kubernetes.py (the
schemas; there is no API server here).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

import autobatch.actuators.gateway as gw
from autobatch.actuators.gateway import (
    GatewayActuator,
    GatewayFailure,
    Guard,
    GuardSettings,
    HAProxyRuntime,
    HAProxyWeights,
    Variant,
    holder,
    judge,
    parse_servers_state,
    parse_stat_failures,
    percents,
    plan_shift,
)
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.errors import ConfigError, ScrapeError
from autobatch.profiles import load_profiles
from autobatch.signals.variants import VariantsSource, combine_windows
from autobatch.signals.window import Window

from ..conftest import PROFILES

MODEL = "emulated_accelerator"

STATE = """1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight \
srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state \
srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl \
srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 be_split 1 latency - 2 0 75 100 3 1 0 2 0 0 0 0 - 0 - 0 0 - - 0
3 be_split 2 throughput - 2 0 25 0 3 1 0 2 0 0 0 0 - 0 - 0 0 - - 0
4 be_other 1 latency - 2 0 7 7 3 1 0 2 0 0 0 0 - 0 - 0 0 - - 0

"""


def test_public_names_are_pinned():
    assert sorted(gw.__all__) == sorted(
        [
            "DEFAULT_STEPS", "GatewayActuator", "GatewayFailure", "GatewaySettings", "Guard",
            "GuardSettings", "HAProxyRuntime", "HAProxyWeights", "ServerState", "StepRecord",
            "Variant", "Verdict", "WeightsBackend", "build_gateway_actuator",
            "holder", "judge", "parse_gateway_options",
            "parse_servers_state", "parse_stat_failures", "percents", "plan_shift", "shares",
        ]
    )


# -- HAProxy answers ---------------------------------------------------------------------------


def test_servers_state_is_read_by_column_name_and_filtered_by_backend():
    servers = parse_servers_state(STATE, "be_split")
    assert set(servers) == {"latency", "throughput"}
    assert servers["latency"].weight == 75 and servers["latency"].initial_weight == 100
    assert servers["throughput"].effective_weight == 25 and servers["throughput"].serving


@pytest.mark.parametrize(
    ("op_state", "admin_state", "effective"),
    [(2, 0, 25), (0, 0, 0), (2, 0x01, 0), (2, 0x04, 0), (2, 0x08, 0), (1, 0, 25), (3, 0, 0)],
)
def test_a_server_haproxy_does_not_send_to_counts_with_weight_zero(op_state, admin_state, effective):
    line = "3 be_split 2 throughput - {} {} 25"
    text = STATE.replace(line.format(2, 0), line.format(op_state, admin_state))
    assert parse_servers_state(text, "be_split")["throughput"].effective_weight == effective


@pytest.mark.parametrize(
    ("answer", "reason", "says"),
    [
        ("Can't find backend.\n\n", "unavailable", "is 'be_split' a backend"),
        ("Permission denied\n\n", "rejected", "Permission denied"),
        ("", "rejected", "an empty answer"),
        ("1\n# be_id be_name srv_name\n3 be_split latency\n", "rejected", "no column 'srv_op_state'"),
    ],
)
def test_error_answers_become_gateway_failures(answer, reason, says):
    with pytest.raises(GatewayFailure) as err:
        parse_servers_state(answer, "be_split")
    assert err.value.reason == reason and says in str(err.value)


def test_stat_failures_add_errors_5xx_and_retried_connections():
    text = (
        "# pxname,svname,qcur,econ,eresp,wretr,wredis,srv_abrt,hrsp_4xx,hrsp_5xx,\n"
        "be_split,latency,0,1,2,6,1,,9,4,\n"
        "be_split,throughput,0,0,0,0,0,0,3,0,\n"
        "be_split,BACKEND,0,1,2,6,1,0,12,4,\n"
        "fe_clients,FRONTEND,,,,,,,,,\n"
    )
    assert parse_stat_failures(text, "be_split") == {"latency": 14, "throughput": 0}
    with pytest.raises(GatewayFailure):
        parse_stat_failures("Unknown command.\n", "be_split")


class RecordingRuntime:
    """Stands in for the socket: answers `show servers state` from STATE, records the rest."""

    def __init__(self, answer: str = "\n") -> None:
        self.commands: list[str] = []
        self.answer = answer

    async def execute(self, command: str) -> str:
        self.commands.append(command)
        return STATE if command.startswith("show servers state") else self.answer


async def test_weights_are_raised_before_others_are_lowered_so_no_moment_has_all_at_zero():
    runtime = RecordingRuntime()
    weights = HAProxyWeights(runtime, "be_split")  # type: ignore[arg-type]
    await weights.write({"latency": 0, "throughput": 100})
    assert runtime.commands[-1] == (
        "set server be_split/throughput weight 100; set server be_split/latency weight 0"
    )
    scaled = HAProxyWeights(runtime, "be_split", weight_scale=256)  # type: ignore[arg-type]
    await scaled.write({"latency": 50, "throughput": 50})
    assert "be_split/latency weight 128" in runtime.commands[-1]


async def test_a_refused_set_server_is_rejected_with_the_hint_for_the_socket_level():
    weights = HAProxyWeights(RecordingRuntime("Permission denied\n\n"), "be_split")  # type: ignore[arg-type]
    with pytest.raises(GatewayFailure) as err:
        await weights.write({"latency": 100, "throughput": 0})
    assert err.value.reason == "rejected" and "level admin" in str(err.value)
    with pytest.raises(GatewayFailure) as err:
        await weights.write({"nope": 100})
    assert err.value.reason == "unavailable" and "no server 'nope'" in str(err.value)


async def test_a_missing_socket_is_unreachable_and_says_what_to_check(tmp_path):
    runtime = HAProxyRuntime(str(tmp_path / "admin.sock"), timeout_s=1)
    with pytest.raises(GatewayFailure) as err:
        await runtime.execute("show info")
    assert err.value.reason == "unreachable" and "stats socket" in str(err.value)


async def test_a_socket_that_never_answers_times_out(tmp_path):
    path = tmp_path / "silent.sock"
    hold = asyncio.Event()

    async def silent(reader, writer):
        await hold.wait()
        writer.close()

    server = await asyncio.start_unix_server(silent, path=str(path))
    try:
        with pytest.raises(GatewayFailure) as err:
            await HAProxyRuntime(str(path), timeout_s=0.2).execute("show info")
        assert err.value.reason == "timeout" and "did not answer within 0.2 s" in str(err.value)
    finally:
        hold.set()
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    ("address", "path", "host", "port"),
    [
        ("/run/haproxy/admin.sock", "/run/haproxy/admin.sock", None, None),
        ("unix@/tmp/a.sock", "/tmp/a.sock", None, None),
        ("127.0.0.1:9999", None, "127.0.0.1", 9999),
        ("ipv4@127.0.0.1:9999", None, "127.0.0.1", 9999),
        ("relative.sock", "relative.sock", None, None),
    ],
)
def test_runtime_addresses(address, path, host, port):
    r = HAProxyRuntime(address)
    assert (r._path, r._host, r._port) == (path, host, port)


# -- the step planner ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "target", "steps", "plan"),
    [
        ({"a": 100, "b": 0}, "b", (25, 50, 100),
         [{"a": 75, "b": 25}, {"a": 50, "b": 50}, {"a": 0, "b": 100}]),
        ({"a": 1, "b": 0}, "b", (50, 100), [{"a": 50, "b": 50}, {"a": 0, "b": 100}]),
        # resumes an interrupted shift
        ({"a": 50, "b": 50}, "b", (25, 50, 100), [{"a": 0, "b": 100}]),
        ({"a": 0, "b": 100}, "b", (25, 50, 100), []),
        ({"a": 60, "b": 0, "c": 40}, "b", (50, 100),
         [{"a": 30, "b": 50, "c": 20}, {"a": 0, "b": 100, "c": 0}]),
        # nobody else holds weight: the target carries everything at every step anyway
        ({"a": 0, "b": 0}, "b", (25, 100), [{"a": 0, "b": 25}, {"a": 0, "b": 100}]),
        ({"a": 100, "b": 0}, "b", (100,), [{"a": 0, "b": 100}]),
    ],
)
def test_plan_shift(weights, target, steps, plan):
    assert plan_shift(weights, target, steps) == plan


def test_percents_sum_to_a_hundred():
    assert percents({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}) == {"a": 34, "b": 33, "c": 33}
    assert sum(percents({"a": 0.125, "b": 0.875}).values()) == 100


@pytest.mark.parametrize(
    ("weights", "who"),
    [
        ({"a": 100, "b": 0}, "a"),
        ({"a": 49, "b": 51}, "b"),
        ({"a": 50, "b": 50}, None),
        ({"a": 0, "b": 0}, None),
    ],
)
def test_holder_is_the_majority(weights, who):
    assert holder(weights) == who


# -- the guard verdict ----------------------------------------------------------------------------


def win(**kw) -> Window:
    base = dict(
        model="m__b", start_s=100.0, end_s=102.0, success_rps=20.0, mean_request_ms=10.0,
        p95_ms=20.0, failure_rps={"BACKEND": 0.0, "REJECTED": 0.0},
    )
    base.update(kw)
    return Window(**base)


G = GuardSettings(p95_ms=50.0)


@pytest.mark.parametrize(
    ("window", "kwargs", "settings", "ok", "reason"),
    [
        (win(), {}, G, True, "ok"),
        (win(failure_rps={"BACKEND": 0.5}), {}, G, False, "failures"),
        (win(failure_rps={"BACKEND": 0.5}), {}, GuardSettings(50.0, failure_reasons=("REJECTED",)),
         True, "ok"),
        (win(failure_rps={"REJECTED": 0.5}), {}, GuardSettings(50.0, max_failure_rps=1.0), True, "ok"),
        (win(mean_request_ms=60.0), {}, G, False, "mean"),
        (win(mean_request_ms=60.0), {}, GuardSettings(50.0, mean_ms=80.0), True, "ok"),
        (win(p95_ms=70.0), {}, G, False, "p95"),
        # a p95 already over the limit before the step (its earlier traffic) that did not rise
        (win(p95_ms=70.0), {"p95_before_ms": 90.0}, G, True, "ok"),
        # ... nor by a summary's drift while it served nothing (under 2%)
        (win(p95_ms=91.0), {"p95_before_ms": 90.0}, G, True, "ok"),
        (win(p95_ms=95.0), {"p95_before_ms": 90.0}, G, False, "p95"),
        (win(p95_ms=70.0), {"p95_before_ms": 30.0}, G, False, "p95"),
        (win(success_rps=0.0, mean_request_ms=None), {}, G, True, "no_traffic"),
        (win(success_rps=2.0), {}, GuardSettings(50.0, min_requests=10), True, "no_traffic"),
        (win(), {"gateway_errors": 3.0}, G, False, "gateway_errors"),
        (win(stale=True, stale_reason="counter_reset", stale_detail="fell"), {}, G, False, "stale"),
    ],
)
def test_judge(window, kwargs, settings, ok, reason):
    verdict = judge(window, settings, **kwargs)
    assert (verdict.ok, verdict.reason) == (ok, reason), verdict.message


def test_guard_settings_are_checked():
    with pytest.raises(ConfigError):
        GuardSettings(p95_ms=0)
    with pytest.raises(ConfigError):
        GuardSettings(p95_ms=10, max_failure_rps=-1)


# -- the combined window the policy sees ------------------------------------------------------------


def test_combined_window_adds_rates_and_weights_means_by_requests():
    a = win(model="m__a", success_rps=30.0, inference_rps=30.0, exec_rps=10.0, mean_queue_ms=2.0,
            mean_request_ms=10.0, pending_requests=1.0, pending_delta=1.0, p95_ms=15.0,
            batch_curve_ms={1: 5.0, 4: 9.0}, failure_rps={"REJECTED": 1.0})
    b = win(model="m__b", success_rps=10.0, inference_rps=10.0, exec_rps=5.0, mean_queue_ms=6.0,
            mean_request_ms=30.0, pending_requests=2.0, pending_delta=0.0, p95_ms=40.0,
            batch_curve_ms={1: 7.0}, failure_rps={"REJECTED": 0.0})
    # a variant without traffic: its lagging p95 from an earlier overload is ignored
    c = win(model="m__c", success_rps=0.0, inference_rps=0.0, exec_rps=0.0, mean_queue_ms=None,
            mean_request_ms=None, pending_requests=0.0, pending_delta=0.0, p95_ms=900.0, failure_rps={})
    w = combine_windows({"a": a, "b": b, "c": c}, "m")
    assert w.model == "m" and w.source == "gateway" and not w.stale
    assert w.success_rps == pytest.approx(40.0)
    assert w.failure_rps == {"REJECTED": pytest.approx(1.0)}
    assert w.mean_batch_size == pytest.approx(40 / 15)
    assert w.mean_queue_ms == pytest.approx((30 * 2 + 10 * 6) / 40)
    assert w.mean_request_ms == pytest.approx((30 * 10 + 10 * 30) / 40)
    assert w.pending_requests == 3.0 and w.pending_delta == 1.0
    assert w.p95_ms == 40.0
    assert w.batch_curve_ms == {1: 6.0, 4: 9.0}


def test_one_stale_variant_makes_the_combined_window_stale_and_names_it():
    w = combine_windows(
        {"a": win(), "b": win(stale=True, stale_reason="unreachable", stale_detail="refused")}, "m"
    )
    assert w.stale and w.stale_reason == "unreachable" and "variant b" in w.stale_detail


async def test_variants_source_waits_for_every_baseline_and_names_a_failing_variant():
    class Src:
        def __init__(self, windows):
            self.windows = list(windows)

        async def poll(self):
            item = self.windows.pop(0)
            if isinstance(item, Exception):
                raise item
            return item

        async def aclose(self):
            return None

    source = VariantsSource(
        {"a": Src([None, win(), ScrapeError("refused", url="http://x")]), "b": Src([None, win(), win()])}, "m"
    )
    assert await source.poll() is None
    assert (await source.poll()).success_rps == pytest.approx(40.0)
    with pytest.raises(ScrapeError, match="variant a: refused"):
        await source.poll()


# -- the actuator, against a fake gateway --------------------------------------------------------


class FakeGateway:
    kind = "fake"
    changes_traffic = True

    def __init__(self, weights, *, refuse_at: int | None = None) -> None:
        self.weights = {k: float(v) for k, v in weights.items()}
        self.writes: list[dict[str, int]] = []
        self.down = False
        self.refuse_at = refuse_at
        self.errors: dict[str, float] = {k: 0.0 for k in weights}

    async def read(self):
        if self.down:
            raise GatewayFailure("no socket", reason="unreachable")
        return dict(self.weights)

    async def write(self, weights):
        if self.down:
            raise GatewayFailure("no socket", reason="unreachable")
        if self.refuse_at is not None and len(self.writes) == self.refuse_at:
            self.writes.append(dict(weights))
            raise GatewayFailure("No such server.", reason="rejected")
        self.writes.append(dict(weights))
        self.weights.update({k: float(v) for k, v in weights.items()})

    async def failure_count(self, target):
        return self.errors[target]

    async def aclose(self):
        return None


class FakeSignals:
    """Hands out windows in order; a window may be an exception to raise."""

    def __init__(self, windows=()) -> None:
        self.windows = list(windows)
        self.begun = 0

    async def begin(self):
        self.begun += 1
        if self.windows and isinstance(self.windows[0], ScrapeError) and self.begun == 1:
            raise self.windows.pop(0)
        return self.begun

    async def window(self, baseline):
        item = self.windows.pop(0) if self.windows else win()
        if isinstance(item, Exception):
            raise item
        return item

    def p95_ms(self, baseline):
        return None

    async def aclose(self):
        return None


@pytest.fixture
def ladder():
    profiles = load_profiles(PROFILES / MODEL)
    return [profiles["latency-soft"], profiles["aggressive"]]


VARIANTS = {
    "latency-soft": Variant("latency-soft", "lat", f"{MODEL}__latency"),
    "aggressive": Variant("aggressive", "thr", f"{MODEL}__throughput"),
}


def make(ladder, gateway, signals=None, **kw):
    sleeps: list[float] = []
    clock = {"t": 0.0}

    async def sleep(s):
        sleeps.append(s)
        clock["t"] += s

    guard = Guard(signals, GuardSettings(p95_ms=50.0)) if signals is not None else None
    act = GatewayActuator(
        ladder, VARIANTS, gateway, guard=guard, clock=lambda: clock["t"], sleep=sleep, **kw
    )
    return act, sleeps, clock


async def test_apply_shifts_in_guarded_steps(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    signals = {"latency-soft": FakeSignals(), "aggressive": FakeSignals()}
    act, sleeps, _ = make(ladder, gateway, signals, step_dwell_s=1.5)
    result = await act.apply(ladder[1])
    assert result.ok and result.reason == "applied" and result.active == "aggressive", result.message
    assert gateway.writes == [{"lat": 75, "thr": 25}, {"lat": 50, "thr": 50}, {"lat": 0, "thr": 100}]
    assert sleeps == [1.5, 1.5, 1.5]
    assert signals["aggressive"].begun == 3 and signals["latency-soft"].begun == 0
    assert [s.verdict.ok for s in act.steps_taken()] == [True, True, True]
    assert await act.live_profile() == "aggressive"
    again = await act.apply(ladder[1])
    assert again.ok and again.reason == "unchanged" and len(gateway.writes) == 3


async def test_a_failing_guard_puts_the_old_weights_back_at_once(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    bad = win(mean_request_ms=400.0)
    signals = {"latency-soft": FakeSignals(), "aggressive": FakeSignals([win(), bad])}
    act, _, _ = make(ladder, gateway, signals)
    result = await act.apply(ladder[1])
    assert not result.ok and result.reason == "verify_failed" and result.rolled_back
    assert result.active == "latency-soft"
    assert "guard" in result.message and "mean request time" in result.message
    assert gateway.writes[-1] == {"lat": 100, "thr": 0} and len(gateway.writes) == 3
    assert gateway.weights == {"lat": 100.0, "thr": 0.0}


async def test_gateway_counted_errors_fail_the_step(ladder):
    class Erroring(FakeGateway):
        async def write(self, weights):
            await super().write(weights)
            if weights["thr"] > 0:
                self.errors["thr"] += 2  # failures the gateway saw and the variant never did

    gateway = Erroring({"lat": 100, "thr": 0})
    act, _, _ = make(ladder, gateway, {"latency-soft": FakeSignals(), "aggressive": FakeSignals()})
    result = await act.apply(ladder[1])
    assert not result.ok and "the gateway counted 2 failed requests" in result.message
    assert gateway.weights == {"lat": 100.0, "thr": 0.0}


async def test_a_variant_whose_signals_cannot_be_read_gets_no_traffic(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    signals = {"latency-soft": FakeSignals(), "aggressive": FakeSignals([ScrapeError("refused")])}
    act, _, _ = make(ladder, gateway, signals)
    result = await act.apply(ladder[1])
    assert not result.ok and result.reason == "unavailable" and result.rolled_back
    assert gateway.writes == []


async def test_a_refused_write_rolls_back(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0}, refuse_at=1)
    act, _, _ = make(ladder, gateway, {"latency-soft": FakeSignals(), "aggressive": FakeSignals()})
    result = await act.apply(ladder[1])
    assert not result.ok and result.reason == "rejected" and result.rolled_back
    assert gateway.weights == {"lat": 100.0, "thr": 0.0}


async def test_unreachable_gateway_is_reported_and_nothing_is_claimed_live(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    gateway.down = True
    act, _, _ = make(ladder, gateway)
    result = await act.apply(ladder[1])
    assert not result.ok and result.reason == "unreachable" and result.active is None
    assert await act.live_profile() is None
    drift = await act.reconcile(ladder[0])
    assert drift is not None and not drift.ok and drift.reason == "unreachable"


async def test_reconcile_reapplies_drift_and_waits_before_retrying_a_failed_one(ladder):
    gateway = FakeGateway({"lat": 0, "thr": 100})
    signals = {"latency-soft": FakeSignals(), "aggressive": FakeSignals()}
    act, _, clock = make(ladder, gateway, signals, retry_s=30.0)
    assert await act.reconcile(ladder[1]) is None
    gateway.weights = {"lat": 100.0, "thr": 0.0}  # the gateway restarted from its config file
    result = await act.reconcile(ladder[1])
    assert result is not None and result.ok and result.reason == "reapplied", result
    assert gateway.weights == {"lat": 0.0, "thr": 100.0}

    gateway.weights = {"lat": 100.0, "thr": 0.0}
    signals["aggressive"].windows = [win(failure_rps={"BACKEND": 3.0})]
    failed = await act.reconcile(ladder[1])
    assert failed is not None and not failed.ok and failed.rolled_back
    writes = len(gateway.writes)
    clock["t"] += 10
    waiting = await act.reconcile(ladder[1])
    assert waiting is not None and not waiting.ok and "next try in" in waiting.message
    assert len(gateway.writes) == writes  # no traffic sent its way while waiting
    clock["t"] += 30
    retried = await act.reconcile(ladder[1])
    assert retried is not None and retried.ok and retried.reason == "reapplied"


async def test_unguarded_shift_and_bad_settings(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    act, sleeps, _ = make(ladder, gateway, steps=(50, 100))
    assert (await act.apply(ladder[1])).ok
    assert sleeps == [] and gateway.writes[-1] == {"lat": 0, "thr": 100}
    for steps in ([50, 90], [], [50, 50, 100], [0, 100]):
        with pytest.raises(ConfigError):
            GatewayActuator(ladder, VARIANTS, gateway, steps=steps)
    with pytest.raises(ConfigError, match="no variant for profile 'aggressive'"):
        GatewayActuator(ladder, {"latency-soft": VARIANTS["latency-soft"]}, gateway)


# -- the sidecar YAML ---------------------------------------------------------------------------


def sidecar(tmp_path: Path, **actuator):
    data = {
        "model": MODEL,
        "triton": {"http_url": "http://127.0.0.1:8000", "metrics_url": "http://127.0.0.1:8002/metrics"},
        "profiles": {"dir": str(PROFILES / MODEL), "ladder": ["latency-soft", "aggressive"]},
        "slo": {"p95_ms": 80},
        "actuator": {
            "kind": "gateway",
            "socket": str(tmp_path / "admin.sock"),
            "backend": "be_variants",
            "variants": {
                "latency-soft": {"server": "lat", "model": f"{MODEL}__latency"},
                "aggressive": {"server": "thr", "model": f"{MODEL}__throughput",
                               "http_url": "http://127.0.0.1:9000"},
            },
            **actuator,
        },
    }
    return sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)


def test_the_largest_allowed_gateway_numbers_are_taken(tmp_path):
    g = sidecar(tmp_path, step_dwell_s=3600, retry_s=86400, request_timeout_s=3600).actuator.gateway
    assert (g.step_dwell_s, g.retry_s, g.request_timeout_s) == (3600, 86400, 3600)


def test_gateway_settings_from_the_sidecar_yaml(tmp_path):
    cfg = sidecar(tmp_path, steps=[10, 100], guard={"p95_ms": 60, "failure_reasons": ["REJECTED"]})
    g = cfg.actuator.gateway
    assert g.gateway == "haproxy" and g.haproxy.backend == "be_variants" and g.steps == (10, 100)
    assert g.guard.p95_ms == 60 and g.guard.failure_reasons == ("REJECTED",)
    lat, thr = g.variants
    assert (lat.target, lat.model, lat.http_url) == ("lat", f"{MODEL}__latency", "http://127.0.0.1:8000")
    assert thr.http_url == "http://127.0.0.1:9000" and thr.metrics_url == "http://127.0.0.1:8002/metrics"
    assert sidecar(tmp_path).actuator.gateway.guard.p95_ms == 80  # the SLO's
    assert sidecar(tmp_path, guard=False).actuator.gateway.guard is None


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ({"steps": [50, 90]}, "actuator.steps = [50, 90]: must be increasing percents ending at 100"),
        ({"gateway": "nginx"},
         "actuator.gateway = 'nginx': must be one of haproxy, httproute, grpcroute, virtualservice"),
        ({"socket": None}, "actuator.socket: required field is missing"),
        ({"weight_scale": 300}, "actuator.weight_scale = 300: must be <= 256"),
        ({"socket": "127.0.0.1:99999"},
         "actuator.socket = '127.0.0.1:99999': must be a socket path or HOST:PORT with a port in 1-65535"),
        ({"socket": "ipv4@127.0.0.1:0"}, "actuator.socket = 'ipv4@127.0.0.1:0': must be a socket path"),
        ({"guard": {"failure_reasons": ["REJECTD"]}},
         "actuator.guard.failure_reasons[0] = 'REJECTD': must be a Triton failure reason: "
         "REJECTED, CANCELED, BACKEND, OTHER, unknown"),
        ({"guard": {"failure_reasons": "REJECTED"}},
         "actuator.guard.failure_reasons = 'REJECTED': must be a list of Triton failure reasons"),
        ({"step_dwell_s": None}, "actuator.step_dwell_s = None: needs a value"),
        ({"step_dwell_s": 1e300}, "actuator.step_dwell_s = 1e+300: must be <= 3600"),
        ({"retry_s": 1e300}, "actuator.retry_s = 1e+300: must be <= 86400"),
        ({"request_timeout_s": 1e300}, "actuator.request_timeout_s = 1e+300: must be <= 3600"),
        ({"guard": {"p95_ms": 1e300}}, "actuator.guard.p95_ms = 1e+300: must be <= 3.6e+06"),
        ({"guard": {"max_failure_rps": 1e300}}, "actuator.guard.max_failure_rps = 1e+300: must be <= 1e+09"),
        ({"guard": {"min_requests": 10**12}},
         "actuator.guard.min_requests = 1000000000000: must be <= 1000000000"),
        ({"gateway": "httproute", "route": "r", "rule": 10**6}, "actuator.rule = 1000000: must be <= 10000"),
        ({"guard": {"p95": 5}}, "actuator.guard.p95 = 5: unknown field"),
        ({"variants": {"latency-soft": {"server": "a"}}}, "actuator.variants.aggressive: required field"),
        ({"variants": {"latency-soft": {"server": "a"}, "aggressive": {"server": "a"}}},
         "actuator.variants.aggressive.server = 'a': is used by another variant"),
        ({"variants": {"latency-soft": {"server": "a"}, "aggressive": {"server": "b"}, "x": {"server": "c"}}},
         "actuator.variants.x = {'server': 'c'}: is not a profile of the ladder"),
        ({"variants": {"latency-soft": {"server": "a", "http_url": "grpc://localhost:8001"},
                       "aggressive": {"server": "b"}}},
         "actuator.variants.latency-soft.http_url = 'grpc://localhost:8001': must be an http:// or https://"),
        ({"gateway": "httproute", "apply": "print"}, "actuator.route: required field is missing"),
        ({"gateway": "httproute", "route": "r", "apply": "print"}, "actuator.manifest = None: is required"),
    ],
)
def test_bad_gateway_settings_are_one_line_naming_the_field(tmp_path, override, says):
    with pytest.raises(ConfigError) as err:
        sidecar(tmp_path, **override)
    message = str(err.value)
    assert message.startswith("sidecar.yaml: ") and says in message and "\n" not in message, message


async def test_the_sidecar_builds_the_gateway_actuator_and_the_combined_source(tmp_path):
    from autobatch.controller.app import build_actuator, build_source

    cfg = sidecar(tmp_path)
    act = build_actuator(cfg)
    source = build_source(cfg, clock=lambda: 0.0)
    try:
        assert act.name == "gateway" and isinstance(act, GatewayActuator)
        assert isinstance(act.backend, HAProxyWeights) and act.backend.backend == "be_variants"
        assert set(act.guard.signals) == {"latency-soft", "aggressive"}
        assert isinstance(source, VariantsSource)
        assert {n: s.model for n, s in source.sources.items()} == {
            "latency-soft": f"{MODEL}__latency", "aggressive": f"{MODEL}__throughput"
        }
        result = await act.apply(cfg.profiles[1])  # no haproxy at that socket
        assert not result.ok and result.reason == "unreachable"
    finally:
        with contextlib.suppress(Exception):
            await act.aclose()
        await source.aclose()


async def test_with_prometheus_each_variant_is_its_pool_selector(tmp_path):
    from autobatch.controller.app import build_source
    from autobatch.controller.config import load_sidecar_config
    from autobatch.signals.prometheus import PrometheusSource
    from autobatch.signals.variants import PrometheusStepSignals

    from ..deploy_support import OVERLAYS, container_env, find, materialize, render

    # The gateway overlay's controller config, as its pod mounts it (the model in its environment).
    objects = render(OVERLAYS / "gateway")
    (controller,) = find(objects, "Deployment", "autobatch")
    materialize(objects, controller, "autobatch", tmp_path)
    model = container_env(objects, controller, "autobatch")["AUTOBATCH_MODEL"]
    cfg = load_sidecar_config(tmp_path / "etc" / "autobatch" / "sidecar.yaml", model=model)
    source = build_source(cfg, clock=lambda: 0.0)
    try:
        assert all(isinstance(s, PrometheusSource) for s in source.sources.values())
        assert {n: s.promql.selector for n, s in source.sources.items()} == {
            "triton-default": 'namespace="serving",pool="latency"',
            "efficient": 'namespace="serving",pool="throughput"',
        }
    finally:
        await source.aclose()

    class Polls:
        def __init__(self, windows):
            self.windows = list(windows)

        async def poll(self):
            return self.windows.pop(0)

        async def aclose(self):
            return None

    signals = PrometheusStepSignals(Polls([win(p95_ms=33.0), win(p95_ms=40.0), None]))
    baseline = await signals.begin()
    assert signals.p95_ms(baseline) == 33.0
    assert (await signals.window(baseline)).p95_ms == 40.0
    with pytest.raises(ScrapeError):
        await signals.window(baseline)


# -- the fast path: survival moves shift at once, judged against the variant they leave ------


@pytest.mark.parametrize(
    ("window", "reference", "ok", "reason"),
    [
        # over the limits, but better than the saturated variant over the same step: keep it
        (win(mean_request_ms=80.0, p95_ms=90.0), win(mean_request_ms=400.0, p95_ms=900.0), True,
         "better"),
        # worse than the variant it relieves: roll back
        (win(mean_request_ms=500.0), win(mean_request_ms=400.0), False, "mean"),
        (win(p95_ms=950.0), win(p95_ms=900.0), False, "p95"),
        (win(p95_ms=160.0, pending_delta=20.0), win(p95_ms=900.0), True, "better"),
        # not a survival move: keeping up is no excuse, staying was an option
        (win(p95_ms=160.0, pending_delta=0.0), win(p95_ms=80.0), False, "p95"),
        # failures fail, whatever the other variant did
        (win(failure_rps={"REJECTED": 1.0}), win(mean_request_ms=400.0), False, "failures"),
        # a reference that cannot be trusted (or none): the limits alone
        (win(mean_request_ms=80.0), win(stale=True, stale_reason="counter_reset"), False, "mean"),
        (win(mean_request_ms=80.0), None, False, "mean"),
        (win(mean_request_ms=80.0, pending_delta=0.0), None, False, "mean"),
        (win(), win(mean_request_ms=400.0), True, "ok"),
    ],
)
def test_judge_against_the_variant_the_traffic_left(window, reference, ok, reason):
    verdict = judge(window, G, reference=reference)
    assert (verdict.ok, verdict.reason) == (ok, reason), verdict.message


@pytest.mark.parametrize(
    ("window", "reference", "ok", "reason"),
    [
        # over the limits and worse than the other's, but it keeps up with the whole load
        # (40 requests in the step, its queue grew by no more than a tenth of them): the
        # variant it left cannot, so the shift stays (an early overload move: the other's
        # summary p95 still spans the minute before the overload)
        (win(p95_ms=160.0, pending_delta=4.0), win(p95_ms=80.0), True, "keeps_up"),
        (win(mean_request_ms=120.0, pending_delta=0.0), win(mean_request_ms=60.0), True,
         "keeps_up"),
        (win(p95_ms=160.0, pending_delta=-3.0), None, True, "keeps_up"),
        # one that falls behind as well is judged against the other, as before
        (win(p95_ms=160.0, pending_delta=5.0), win(p95_ms=80.0), False, "p95"),
        (win(p95_ms=160.0, pending_delta=5.0), win(p95_ms=900.0), True, "better"),
        # a queue that cannot be read proves nothing
        (win(p95_ms=160.0), win(p95_ms=80.0), False, "p95"),
        # within the limits, a growing queue is the policy's to see, not the guard's
        (win(pending_delta=20.0), win(), True, "ok"),
        # failures fail, however it keeps up
        (win(failure_rps={"BACKEND": 0.5}, p95_ms=160.0, pending_delta=0.0), win(), False,
         "failures"),
    ],
)
def test_judge_after_leaving_a_saturated_variant(window, reference, ok, reason):
    verdict = judge(window, G, reference=reference, saturated=True)
    assert (verdict.ok, verdict.reason) == (ok, reason), verdict.message


async def test_an_urgent_shift_goes_straight_to_the_target_weight(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    saturated = win(mean_request_ms=400.0, p95_ms=900.0)
    signals = {"latency-soft": FakeSignals([saturated]),
               "aggressive": FakeSignals([win(mean_request_ms=80.0, p95_ms=90.0)])}
    act, sleeps, _ = make(ladder, gateway, signals, step_dwell_s=1.5)
    result = await act.apply(ladder[1], urgent=True)
    assert result.ok and result.active == "aggressive", result.message
    assert "at once" in result.message
    assert gateway.writes == [{"lat": 0, "thr": 100}] and sleeps == [1.5]
    # the variant the traffic left is read over the same step, as the reference
    assert signals["latency-soft"].begun == 1
    (step,) = act.steps_taken()
    assert step.verdict is not None and step.verdict.reason == "better"


async def test_a_survival_shift_that_keeps_up_stays_though_over_the_limits(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    # the move came early: the variant left still shows its minute before the overload
    signals = {"latency-soft": FakeSignals([win(mean_request_ms=12.0, p95_ms=40.0)]),
               "aggressive": FakeSignals([win(mean_request_ms=30.0, p95_ms=70.0, pending_delta=2.0)])}
    act, _, _ = make(ladder, gateway, signals)
    result = await act.apply(ladder[1], urgent=True, saturated=True)
    assert result.ok and result.active == "aggressive", result.message
    assert "urgent: the live variant was saturated" in result.message
    (step,) = act.steps_taken()
    assert step.verdict is not None and step.verdict.reason == "keeps_up"
    # the same step on a direct move that was not for survival: staying was an option
    gateway = FakeGateway({"lat": 100, "thr": 0})
    signals = {"latency-soft": FakeSignals([win(mean_request_ms=12.0, p95_ms=40.0)]),
               "aggressive": FakeSignals([win(mean_request_ms=30.0, p95_ms=70.0, pending_delta=2.0)])}
    act, _, _ = make(ladder, gateway, signals)
    result = await act.apply(ladder[1], urgent=True)
    assert not result.ok and result.rolled_back and "over the 40.0 ms of the one it left" in result.message
    assert "urgent" not in result.message


async def test_an_urgent_shift_that_made_things_worse_rolls_back(ladder):
    gateway = FakeGateway({"lat": 100, "thr": 0})
    signals = {"latency-soft": FakeSignals([win(mean_request_ms=100.0)]),
               "aggressive": FakeSignals([win(mean_request_ms=300.0)])}
    act, _, _ = make(ladder, gateway, signals)
    result = await act.apply(ladder[1], urgent=True)
    assert not result.ok and result.rolled_back and result.active == "latency-soft"
    assert "over the 100.0 ms of the one it left" in result.message
    assert gateway.writes == [{"lat": 0, "thr": 100}, {"lat": 100, "thr": 0}]
