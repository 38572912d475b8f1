"""Gateway weight shifting against a real HAProxy 2.6 and real Triton servers.

Setups (``autobatch.lab.haproxy``):

* HTTP to one Triton holding the variants ``emulated_accelerator__latency``,
  ``__throughput`` and a deliberately slow ``__slow``, the path rewritten per
  variant by HAProxy;
* gRPC (HTTP/2) to two Triton servers, each serving ``emulated_accelerator``
  with its own profile.

The variants are the emulated accelerator (it holds the instance for its
curve's time without burning CPU), so the machine's two cores stay with the
load generator and HAProxy. Each test starts and stops its own HAProxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from autobatch.actuators.gateway import (
    GatewayActuator,
    Guard,
    GuardSettings,
    HAProxyRuntime,
    HAProxyWeights,
    Variant,
    shares,
)
from autobatch.controller.config import load_sidecar_config, sidecar_config_from_mapping
from autobatch.controller.loop import read_decision_log
from autobatch.curve import BatchCurve
from autobatch.lab import haproxy as launch
from autobatch.lab.haproxy import (
    HAProxyProcess,
    check_config,
    grpc_config,
    http_rewrite_config,
)
from autobatch.lab.process import poll_until
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer, free_port
from autobatch.load import run_load
from autobatch.profiles import load_profiles
from autobatch.schedule import Phase, Schedule
from autobatch.signals.triton import TritonSource
from autobatch.signals.variants import TritonStepSignals

from ..conftest import PROFILES, REPOSITORY, ROOT
from ..helpers import BackgroundLoad
from .test_sidecar import Running

pytestmark = pytest.mark.triton

MODEL = EMULATOR_MODEL
# Shaped like dense_mlp's on this CPU (from tests/integration/test_sidecar.py): batching pays, so
# latency-soft ([2, 4]) carries 4/20 ms = 200/s and aggressive ([8, 16, 32]) 667/s.
CURVE = BatchCurve({1: 10.0, 2: 18.0, 4: 20.0, 8: 24.0, 16: 32.0, 32: 48.0}, name="dense-like")
SLOW = BatchCurve({1: 150.0, 32: 150.0}, name="slow")
LADDER = ["latency-soft", "aggressive"]
TOKEN = "gateway-token"


def write_variant(root: Path, name: str, profile: str, curve: BatchCurve) -> None:
    """A copy of the emulator's folder as model ``name``, running ``profile`` on ``curve``."""
    launch.write_variant(
        REPOSITORY / MODEL, root, name, load_profiles(PROFILES / MODEL)[profile],
        parameters={"curve_file": None, "curve": json.dumps(curve.to_dict())},
    )


@pytest.fixture(scope="module")
def triton(tmp_path_factory) -> Iterator[TritonServer]:
    """One Triton with three variants of the emulator side by side."""
    root = tmp_path_factory.mktemp("variants")
    write_variant(root, f"{MODEL}__latency", "latency-soft", CURVE)
    write_variant(root, f"{MODEL}__throughput", "aggressive", CURVE)
    write_variant(root, f"{MODEL}__slow", "aggressive", SLOW)
    with TritonServer.on_free_ports(root) as server:
        yield server


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[dict[str, TritonServer]]:
    """Two Triton servers, each serving ``emulated_accelerator`` with its own profile."""
    servers: dict[str, TritonServer] = {}
    try:
        for name, profile in (("a", "latency-soft"), ("b", "aggressive")):
            root = tmp_path_factory.mktemp(f"server-{name}")
            write_variant(root, MODEL, profile, CURVE)
            servers[name] = TritonServer.on_free_ports(root).start()
        yield servers
    finally:
        # Each stop waits for Triton's own shutdown; the two can wait together.
        threads = [threading.Thread(target=s.close) for s in servers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory for sockets (a unix socket path has a 107-byte limit)."""
    d = Path(tempfile.mkdtemp(prefix="ab-gw-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def hops() -> str:
    # Abstract sockets are global to the network namespace: unique per HAProxy.
    return f"ab{os.getpid()}-{uuid.uuid4().hex[:6]}"


def http_haproxy(triton: TritonServer, sock: Path, servers: dict[str, str], weights=None) -> HAProxyProcess:
    listen = f"127.0.0.1:{free_port()}"
    text = http_rewrite_config(
        listen=listen, socket_path=sock, triton_http=triton.urls.http, model=MODEL,
        variants=servers, weights=weights, hop_prefix=hops(),
    )
    proc = HAProxyProcess(text, sock)
    proc.listen = listen  # type: ignore[attr-defined]
    return proc


def ladder() -> list[Any]:
    profiles = load_profiles(PROFILES / MODEL)
    return [profiles[n] for n in LADDER]


def success_count(http_url: str, model: str) -> int:
    r = httpx.get(f"{http_url}/v2/models/{model}/stats", timeout=10)
    r.raise_for_status()
    return sum(int(m["inference_stats"]["success"]["count"]) for m in r.json()["model_stats"])


def haproxy_weights(sock: Path, backend: str = "be_variants") -> dict[str, float]:
    """The weights read straight from the socket, independent of the actuator."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(f"show servers state {backend}\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    from autobatch.actuators.gateway import parse_servers_state

    return {k: float(v.weight) for k, v in parse_servers_state(data.decode(), backend).items()}


Span = tuple[float, float]


class SplitMeter:
    """A sleep for the actuator's dwell that also counts, at each Triton, what every
    variant served while the weights stood still: the split seen by the servers."""

    def __init__(self, counters: dict[str, Any], sock: Path) -> None:
        self.counters = counters  # server name -> () -> success count
        self.sock = sock
        # (weight shares, served by server, when the counts before and after were read:
        # (start, end) each, on time.monotonic, the load's clock)
        self.samples: list[tuple[dict[str, float], dict[str, int], Span, Span]] = []

    async def sleep(self, seconds: float) -> None:
        t0 = time.monotonic()
        before = await asyncio.to_thread(self._counts)
        t1 = time.monotonic()
        weights = await asyncio.to_thread(haproxy_weights, self.sock)
        await asyncio.sleep(seconds)
        t2 = time.monotonic()
        after = await asyncio.to_thread(self._counts)
        self.samples.append((shares(weights), {k: after[k] - before[k] for k in after}, (t0, t1),
                             (t2, time.monotonic())))

    def _counts(self) -> dict[str, int]:
        return {k: f() for k, f in self.counters.items()}

    def worst_gap(self, load: BackgroundLoad, min_requests: int = 40) -> tuple[float, float, int]:
        """Over the steps with enough requests: the largest |served share - weight share|
        less what its step allows, that gap, and the number of steps used.

        A step's counts are off its weights by the requests in flight while either count
        was read (sent before those reads ended, answered after they began), found in the
        load's own records. Those at the start went by the weights before: a variant's
        count is off by their number times the change of its share. Those at the end are
        not counted yet, and may all be one variant's (the slower one holds more): off by
        their number times the larger side. Plus a request a side for the weighted round
        robin's rounding."""
        def in_flight(span: Span) -> int:
            return sum(1 for sent, done, _ in load.done if sent < span[1] and done > span[0])

        worst, gap, used, previous = -math.inf, 1.0, 0, None
        for weight_shares, served, start, end in self.samples:
            total = sum(served.values())
            first, last = in_flight(start), in_flight(end)
            for k in served:
                w = weight_shares[k]
                moved = 1.0 if previous is None else abs(w - previous[k])
                allowed = (first * moved + last * max(w, 1 - w) + 2) / total if total else math.inf
                g = abs(served[k] / total - w) if total else 0.0
                if total >= min_requests and g - allowed > worst:
                    worst, gap = g - allowed, g
            used += total >= min_requests
            previous = weight_shares
        return worst, gap, used


def on_one(triton: TritonServer, variants: dict[str, Variant]) -> dict[str, tuple[str, str, str]]:
    """Every variant's signals on the one Triton."""
    return {p: (triton.urls.http, triton.urls.metrics, v.model) for p, v in variants.items()}


def guard_for(sources: dict[str, tuple[str, str, str]], p95_ms: float) -> Guard:
    """sources: profile -> (http_url, metrics_url, model)."""
    return Guard(
        {p: TritonStepSignals(TritonSource(h, m, metrics_url=mu)) for p, (h, mu, m) in sources.items()},
        GuardSettings(p95_ms=p95_ms),
    )


# -- the must-shows ---------------------------------------------------------------------------------


async def test_twenty_shifts_under_load_over_http_zero_failures_split_matches(triton, short_dir, capsys):
    """HTTP to one Triton, path rewritten: 21 guarded shifts under 100 req/s, no failure,
    and each variant's request count at Triton follows the weights."""
    sock = short_dir / "admin.sock"
    servers = {"latency": f"{MODEL}__latency", "throughput": f"{MODEL}__throughput"}
    with http_haproxy(triton, sock, servers) as proxy:
        meter = SplitMeter(
            {s: (lambda m=m: success_count(triton.urls.http, m)) for s, m in servers.items()}, sock
        )
        variants = {
            "latency-soft": Variant("latency-soft", "latency", servers["latency"]),
            "aggressive": Variant("aggressive", "throughput", servers["throughput"]),
        }
        guard = guard_for(on_one(triton, variants), 250.0)
        backend = HAProxyWeights(HAProxyRuntime(str(sock)), "be_variants")
        act = GatewayActuator(
            ladder(), variants, backend, guard=guard, step_dwell_s=0.8, sleep=meter.sleep
        )
        results = []
        try:
            with BackgroundLoad(proxy.listen, MODEL, 100.0, max_s=120.0, protocol="http", seed=1) as load:
                for i in range(7):
                    results.append(await act.apply(ladder()[(i + 1) % 2]))
                    assert results[-1].ok, results[-1].message
            errors = {t: await backend.failure_count(t) for t in servers}
        finally:
            await act.aclose()
        weights_after = haproxy_weights(sock)

    steps = act.steps_taken()
    assert [r.reason for r in results] == ["applied"] * 7
    assert len(steps) >= 20 and all(s.verdict is not None and s.verdict.ok for s in steps)
    report = load.report
    assert report.total.sent > 500 and report.total.failures == {}, dict(report.total.failures)
    assert errors == {"latency": 0.0, "throughput": 0.0}
    assert weights_after == {"latency": 0.0, "throughput": 100.0}
    over, gap, used = meter.worst_gap(load)
    assert used >= 20, meter.samples
    assert over <= 0, meter.samples  # every step's split follows its weights
    with capsys.disabled():
        print(
            f"\n[gateway http] {len(steps)} shifts under 100 req/s: {report.total.sent} requests, "
            f"{report.total.failed} failed; worst split gap {gap:.3f} ({over:+.3f} over what its "
            f"step allows) over {used} steps"
        )


async def test_shifts_over_grpc_between_two_servers(pair, short_dir, capsys):
    """gRPC through HAProxy (HTTP/2 both sides) to two Triton servers with the same model."""
    sock = short_dir / "admin.sock"
    listen = f"127.0.0.1:{free_port()}"
    text = grpc_config(
        listen=listen, socket_path=sock, servers={n: s.urls.grpc for n, s in pair.items()}
    )
    variants = {
        "latency-soft": Variant("latency-soft", "a", MODEL),
        "aggressive": Variant("aggressive", "b", MODEL),
    }
    with HAProxyProcess(text, sock):
        meter = SplitMeter(
            {n: (lambda s=s: success_count(s.urls.http, MODEL)) for n, s in pair.items()}, sock
        )
        guard = guard_for(
            {p: (pair[v.target].urls.http, pair[v.target].urls.metrics, MODEL) for p, v in variants.items()},
            250.0,
        )
        act = GatewayActuator(
            ladder(), variants, HAProxyWeights(HAProxyRuntime(str(sock)), "be_variants"),
            guard=guard, step_dwell_s=1.0, sleep=meter.sleep,
        )
        try:
            with BackgroundLoad(listen, MODEL, 100.0, max_s=120.0, protocol="grpc", seed=2) as load:
                first = await act.apply(ladder()[1])
                back = await act.apply(ladder()[0])
        finally:
            await act.aclose()
        weights_after = haproxy_weights(sock)
    assert first.ok and back.ok, (first.message, back.message)
    assert len(act.steps_taken()) == 6
    assert load.report.total.sent > 200 and load.report.total.failures == {}, dict(load.report.total.failures)
    assert weights_after == {"a": 100.0, "b": 0.0}
    over, gap, used = meter.worst_gap(load)
    assert used >= 5 and over <= 0, meter.samples
    with capsys.disabled():
        print(f"\n[gateway grpc] 6 shifts: {load.report.total.sent} requests, 0 failed; worst gap {gap:.3f} "
              f"({over:+.3f} over what its step allows)")


async def test_the_guard_rolls_back_a_variant_that_breaks_the_slo(triton, short_dir):
    """The receiving variant takes 150 ms a batch against an SLO of 60 ms: the first step
    (25 %) is judged over the limit and the weights go back, without a failed request."""
    sock = short_dir / "admin.sock"
    servers = {"latency": f"{MODEL}__latency", "slow": f"{MODEL}__slow"}
    with http_haproxy(triton, sock, servers) as proxy:
        variants = {
            "latency-soft": Variant("latency-soft", "latency", servers["latency"]),
            "aggressive": Variant("aggressive", "slow", servers["slow"]),
        }
        guard = guard_for(on_one(triton, variants), 60.0)
        act = GatewayActuator(
            ladder(), variants, HAProxyWeights(HAProxyRuntime(str(sock)), "be_variants"),
            guard=guard, step_dwell_s=1.5,
        )
        try:
            with BackgroundLoad(proxy.listen, MODEL, 40.0, max_s=120.0, protocol="http", seed=3) as load:
                result = await act.apply(ladder()[1])
                live = await act.live_profile()
        finally:
            await act.aclose()
        weights_after = haproxy_weights(sock)
    assert not result.ok and result.reason == "verify_failed" and result.rolled_back, result.message
    assert "guard: at latency=75% slow=25%" in result.message
    assert result.active == live == "latency-soft"
    assert weights_after == {"latency": 100.0, "slow": 0.0}
    assert len(act.steps_taken()) == 1 and not act.steps_taken()[0].verdict.ok
    assert load.report.total.failures == {}, dict(load.report.total.failures)


async def test_failures_only_the_gateway_sees_roll_back(triton, short_dir):
    """A server entry pointing nowhere: Triton's signals of the variant look fine (no
    traffic arrives), HAProxy's own counters see the connection errors."""
    sock = short_dir / "admin.sock"
    dead = f"127.0.0.1:{free_port()}"
    listen = f"127.0.0.1:{free_port()}"
    text = http_rewrite_config(
        listen=listen, socket_path=sock, triton_http=triton.urls.http, model=MODEL,
        variants={"latency": f"{MODEL}__latency"}, hop_prefix=hops(),
    ).replace("    server latency", f"    server broken {dead} weight 0\n    server latency")
    variants = {
        "latency-soft": Variant("latency-soft", "latency", f"{MODEL}__latency"),
        "aggressive": Variant("aggressive", "broken", f"{MODEL}__throughput"),
    }
    with HAProxyProcess(text, sock):
        backend = HAProxyWeights(HAProxyRuntime(str(sock)), "be_variants")
        guard = guard_for(on_one(triton, variants), 250.0)
        act = GatewayActuator(ladder(), variants, backend, guard=guard, step_dwell_s=1.0)
        try:
            with BackgroundLoad(listen, MODEL, 40.0, max_s=120.0, protocol="http", seed=4):
                result = await act.apply(ladder()[1])
            broken = await backend.failure_count("broken")
        finally:
            await act.aclose()
        weights_after = haproxy_weights(sock)
    assert not result.ok and result.rolled_back and "the gateway counted" in result.message, result.message
    assert broken is not None and broken > 0
    assert weights_after == {"broken": 0.0, "latency": 100.0}


# -- the sidecar, end to end -------------------------------------------------------------------------


def gateway_config(tmp_path: Path, triton: TritonServer, sock: Path, **policy) -> dict:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return {
        "model": MODEL,
        "triton": {"http_url": triton.urls.http, "metrics_url": triton.urls.metrics},
        "profiles": {"dir": str(PROFILES / MODEL), "ladder": LADDER, "initial": "aggressive"},
        "slo": {"p95_ms": 250},
        # The policy may not move on its own here: the test drives the switches.
        "policy": {"interval_s": 0.5, "confirmations": 1000, "min_dwell_s": 3600, **policy},
        "actuator": {
            "kind": "gateway",
            "socket": str(sock),
            "backend": "be_variants",
            "step_dwell_s": 0.5,
            "retry_s": 0,
            "variants": {
                "latency-soft": {"server": "latency", "model": f"{MODEL}__latency"},
                "aggressive": {"server": "throughput", "model": f"{MODEL}__throughput"},
            },
        },
        "server": {"listen": "127.0.0.1:0", "token_file": str(token)},
        "decision_log": str(tmp_path / "decisions.jsonl"),
    }


def test_socket_gone_the_controller_holds_and_a_restarted_haproxy_is_reconciled(triton, short_dir, tmp_path):
    sock = short_dir / "admin.sock"
    servers = {"latency": f"{MODEL}__latency", "throughput": f"{MODEL}__throughput"}
    cfg = sidecar_config_from_mapping(gateway_config(tmp_path, triton, sock), "sidecar.yaml", base=tmp_path)
    # The config file says: all on latency.
    with http_haproxy(triton, sock, servers) as proxy, Running(cfg) as running:
        st = running.wait_for(lambda s: s["active_profile"] == "aggressive", 60, "aggressive applied")
        assert st["last_actuation"]["ok"] and st["last_actuation"]["reason"] == "applied", st
        assert haproxy_weights(sock) == {"latency": 0.0, "throughput": 100.0}

        with BackgroundLoad(proxy.listen, MODEL, 40.0, max_s=120.0, protocol="http", seed=5) as load:
            sock.unlink()  # haproxy keeps routing; only its runtime API is gone
            running.wait_for(lambda s: s["errors"].get("reconcile", 0) >= 2, 30, "reconcile errors")
            r = httpx.post(running.url + "/profile", json={"profile": "latency-soft"},
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
            assert r.status_code == 200
            st = running.wait_for(lambda s: s["errors"].get("actuate", 0) >= 1, 30, "the failed pin")
            ticks = st["ticks"]
            st = running.wait_for(lambda s: s["ticks"] >= ticks + 3, 30, "more ticks")
        assert st["active_profile"] == "aggressive" and st["desired_profile"] == "aggressive", st
        assert st["pinned"] is None
        pin = [ln["actuation"] for ln in read_decision_log(cfg.decision_log)
               if (ln["actuation"] or {}).get("profile") == "latency-soft"]
        assert pin and not pin[0]["ok"] and pin[0]["reason"] == "unreachable", pin
        assert "no HAProxy runtime socket" in pin[0]["message"]
        assert st["last_decision"]["action"] == "hold"
        assert httpx.get(running.url + "/healthz", timeout=5).status_code == 200
        metrics = httpx.get(running.url + "/metrics", timeout=5).text
        assert f'autobatch_actuation_failures_total{{model="{MODEL}",reason="unreachable"}}' in metrics
        # The gateway kept serving at the weights it had: nothing failed.
        assert load.report.total.failures == {} and load.report.total.sent > 40

        proxy.stop()
        proxy.start()  # a restart: the config file's weights (all on latency) are back
        st = running.wait_for(
            lambda s: (s["last_actuation"] or {}).get("reason") == "reapplied", 60, "the re-apply"
        )
        assert "restarted or changed by hand" in st["last_actuation"]["message"]
        assert haproxy_weights(sock) == {"latency": 0.0, "throughput": 100.0}
        assert running.status()["active_profile"] == "aggressive"


def test_the_policy_moves_the_weights_under_a_step_load(triton, short_dir, tmp_path):
    """The whole loop in gateway mode: the policy reads the variants' combined window,
    saturation at 300 req/s shifts the traffic onto the throughput variant, and the
    waiting at 20 req/s afterwards shifts it back; no request fails on the way."""
    curve = tmp_path / "curve.yaml"
    curve.write_text(CURVE.to_yaml())
    sock = short_dir / "admin.sock"
    servers = {"latency": f"{MODEL}__latency", "throughput": f"{MODEL}__throughput"}
    data = gateway_config(tmp_path, triton, sock, confirmations=2, min_dwell_s=6, stabilization_s=4,
                          settle_s=1.5, interval_s=1, curve=str(curve))
    data["profiles"].pop("initial")
    data["slo"] = {"p95_ms": 150}
    data["actuator"]["step_dwell_s"] = 1
    cfg = sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)
    # latency-soft saturates at 300 req/s; at 20 req/s aggressive waits for batches that never fill.
    schedule = Schedule((Phase("low", 20, 4), Phase("high", 300, 14), Phase("low-again", 20, 25)))
    with http_haproxy(triton, sock, servers) as proxy, Running(cfg) as running:
        running.wait_for(lambda s: s["active_profile"] == "latency-soft", 30, "latency-soft at start")
        report = run_load(proxy.listen, MODEL, schedule, protocol="http", timeout_s=20)
        final = running.status()
        weights = haproxy_weights(sock)
    log = read_decision_log(cfg.decision_log)
    path = [(ln["decision"]["target"], ln["decision"]["reason"], ln["actuation"]["reason"])
            for ln in log if ln["decision"]["action"] == "switch" and ln["actuation"]]
    assert path and path[0][0] == "aggressive" and path[0][1] in (
        "overload", "forecast", "saturation", "efficiency"), path
    assert path[0][2] == "applied" and path[-1][0] == "latency-soft" and path[-1][2] == "applied", path
    assert path[-1][1] in ("self_inflicted_wait", "low_load"), path
    assert final["active_profile"] == "latency-soft" and weights == {"latency": 100.0, "throughput": 0.0}
    assert all(p.failures == {} for p in report.phases), [dict(p.failures) for p in report.phases]


def test_autobatch_run_with_a_gateway_actuator(triton, short_dir, tmp_path):
    """The CLI, end to end: `autobatch run -c sidecar-gateway.yaml`, a pin moves the weights."""
    sock = short_dir / "admin.sock"
    servers = {"latency": f"{MODEL}__latency", "throughput": f"{MODEL}__throughput"}
    port = free_port()
    data = gateway_config(tmp_path, triton, sock)
    data["profiles"].pop("initial")
    data["server"]["listen"] = f"127.0.0.1:{port}"
    path = tmp_path / "sidecar-gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    url = f"http://127.0.0.1:{port}"
    with http_haproxy(triton, sock, servers):
        proc = subprocess.Popen(
            [sys.executable, "-m", "autobatch", "run", "--config", str(path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

        def alive() -> None:
            assert proc.poll() is None, proc.communicate()[1]

        def up() -> dict | None:
            with contextlib.suppress(httpx.HTTPError):
                status = httpx.get(url + "/status", timeout=2).json()
                return status if status.get("active_profile") is not None else None
            return None

        try:
            started = time.monotonic()
            status = poll_until(up, timeout_s=60, interval_s=0.2, check=alive, what="the sidecar to come up")
            assert status["active_profile"] == "latency-soft"  # read from the weights
            r = httpx.post(url + "/profile", json={"profile": "aggressive"},
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
            assert r.status_code == 200
            # The start-up and the pin share one 120 s budget.
            poll_until(lambda: haproxy_weights(sock) == {"latency": 0.0, "throughput": 100.0},
                       timeout_s=started + 120 - time.monotonic(), interval_s=0.2,
                       what="the pin to move the weights")
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "(gateway)" in err and "sidecar stopped" in err


# -- the shipped examples -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["http-rewrite.cfg", "grpc-two-servers.cfg"])
def test_example_haproxy_configs_are_accepted_by_haproxy(name, tmp_path):
    text = (ROOT / "examples" / "haproxy" / name).read_text()
    # The examples' socket lives under /run/haproxy; check them with a writable one.
    cfg = tmp_path / name
    cfg.write_text(text.replace("/run/haproxy/admin.sock", str(tmp_path / "admin.sock")))
    check_config(cfg)


def test_example_gateway_sidecar_config_loads():
    cfg = load_sidecar_config(ROOT / "examples" / "sidecar-gateway.yaml")
    assert cfg.actuator.kind == "gateway" and cfg.actuator.gateway.haproxy.backend == "be_variants"
    assert [v.model for v in cfg.actuator.gateway.variants] == ["dense_mlp__latency", "dense_mlp__throughput"]
