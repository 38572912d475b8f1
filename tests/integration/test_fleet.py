"""The fleet actuator against two real Triton processes under steady load.

Replica A serves the emulated accelerator as the repository ships it. Replica B
serves the same model from a copy of the repository whose model refuses, in its
``initialize``, a config with a max queue delay over 5 ms: a real Triton refusing a
real load (it keeps the old copy serving), so ``aggressive`` (10 ms) goes through on
A and is refused on B, and A must be rolled back. Every apply, READY check and
config read of each replica is recorded with its time, and a poller reads both
replicas' live configs all along, independently of the actuator.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from autobatch.actuators.fleet import Replica, StaticReplicas, TritonFleetActuator
from autobatch.actuators.triton import TritonReloadActuator
from autobatch.curve import BatchCurve
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.profiles import load_profiles

from ..conftest import PROFILES, REPOSITORY
from ..helpers import BackgroundLoad

CURVE = BatchCurve({1: 2.0, 2: 2.5, 4: 3.0, 8: 4.0, 16: 6.0, 32: 10.0}, name="fleet")
LOAD_RPS = 30.0
REFUSING_MODEL = '''"""The emulated accelerator, refusing a max queue delay over 5 ms."""

import json

from autobatch.lab.example_models import EmulatedAcceleratorModel


class TritonPythonModel(EmulatedAcceleratorModel):
    def initialize(self, args):
        batching = json.loads(args["model_config"]).get("dynamic_batching") or {}
        delay = int(batching.get("max_queue_delay_microseconds", 0) or 0)
        if delay > 5000:
            raise ValueError(f"this replica refuses max_queue_delay_microseconds = {delay}")
        super().initialize(args)
'''


@pytest.fixture(scope="module")
def replicas(tmp_path_factory) -> Iterator[tuple[TritonServer, TritonServer]]:
    repo_b = tmp_path_factory.mktemp("replica-b")
    shutil.copytree(REPOSITORY / EMULATOR_MODEL, repo_b / EMULATOR_MODEL)
    (repo_b / EMULATOR_MODEL / "1" / "model.py").write_text(REFUSING_MODEL)
    with ExitStack() as stack:
        a = stack.enter_context(
            TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL], emulate_curve=CURVE))
        b = stack.enter_context(
            TritonServer.on_free_ports(repo_b, models=[EMULATOR_MODEL], emulate_curve=CURVE))
        yield a, b


def preferred(server: TritonServer) -> list[int] | None:
    try:
        cfg = httpx.get(f"{server.urls.http}/v2/models/{EMULATOR_MODEL}/config", timeout=30).json()
    except httpx.HTTPError:
        return None
    return sorted(int(s) for s in cfg.get("dynamic_batching", {}).get("preferred_batch_size", []))


class Recorder:
    """(time, replica, what, detail) of every apply start/end and live-profile read."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, str, object]] = []

    def reloader(self, name: str, ladder):
        events = self.events

        class Recording(TritonReloadActuator):
            async def apply(self, profile):
                events.append((time.monotonic(), name, "start", profile.name))
                result = await super().apply(profile)
                events.append((time.monotonic(), name, "end", (profile.name, result.ok, result.reason)))
                return result

            async def live_profile(self):
                live = await super().live_profile()
                events.append((time.monotonic(), name, "live", live))
                return live

        return Recording

    def first(self, name: str, what: str, detail=None, after: float = 0.0) -> float:
        for t, n, w, d in self.events:
            if n == name and w == what and t >= after and (detail is None or d == detail):
                return t
        raise AssertionError(f"no {what} {detail} of {name} after {after}: {self.events}")


class Poller:
    """Both replicas' preferred sizes, read every 100 ms in a thread, independently of the actuator."""

    def __init__(self, a: TritonServer, b: TritonServer) -> None:
        self.a, self.b = a, b
        self.seen: list[tuple[list[int] | None, list[int] | None]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            self.seen.append((preferred(self.a), preferred(self.b)))

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)


def fleet(a: TritonServer, b: TritonServer, ladder, recorder: Recorder) -> TritonFleetActuator:
    urls = {a.urls.http: "A", b.urls.http: "B"}

    def reloader(r: Replica) -> TritonReloadActuator:
        cls = recorder.reloader(urls[r.http_url], ladder)
        return cls(r.http_url, EMULATOR_MODEL, ladder, grpc_url=r.grpc_url, load_timeout_s=60.0)

    source = StaticReplicas([Replica(a.urls.http, a.urls.grpc), Replica(b.urls.http, b.urls.grpc)])
    return TritonFleetActuator(source, EMULATOR_MODEL, ladder, reloader=reloader, ready_timeout_s=60.0)


async def test_a_profile_reaches_both_replicas_one_at_a_time_and_a_refusal_rolls_back(replicas, capsys):
    a, b = replicas
    profiles = load_profiles(PROFILES / EMULATOR_MODEL)
    ladder = [profiles["latency-soft"], profiles["triton-default"], profiles["aggressive"]]
    soft, default, aggressive = ([2, 4], [32], [8, 16, 32])  # triton-default reads back as [max]
    recorder = Recorder()
    act = fleet(a, b, ladder, recorder)
    try:
        first = await act.apply(ladder[0])
        assert first.ok, first.message
        assert (preferred(a), preferred(b)) == (soft, soft)
        with BackgroundLoad(a.urls.grpc, EMULATOR_MODEL, LOAD_RPS, max_s=120.0, seed=11) as load_a, \
                BackgroundLoad(b.urls.grpc, EMULATOR_MODEL, LOAD_RPS, max_s=120.0, seed=12) as load_b:
            load_a.wait_for(20)
            load_b.wait_for(20)
            # -- a change both accept: A, READY on it, then B ---------------------------------
            recorder.events.clear()
            with Poller(a, b) as poller:
                t0 = time.monotonic()
                changed = await act.apply(ladder[1])
                t1 = time.monotonic()
                poller.seen.append((preferred(a), preferred(b)))
            assert changed.ok and changed.reason == "applied", changed.message
            assert (preferred(a), preferred(b)) == (default, default)  # each one's live config
            assert await act.live_profile() == "triton-default"
            a_end = recorder.first("A", "end", ("triton-default", True, "applied"))
            a_ready = recorder.first("A", "live", "triton-default", after=a_end)
            b_start = recorder.first("B", "start", "triton-default")
            assert t0 < a_end <= a_ready <= b_start < t1  # A was READY on it before B began
            assert (soft, default) not in poller.seen  # B never ran ahead of A
            assert (default, default) in poller.seen

            # -- B refuses: A, already changed, is put back ------------------------------------
            recorder.events.clear()
            with Poller(a, b) as poller:
                refused = await act.apply(ladder[2])
                poller.seen.append((preferred(a), preferred(b)))
            assert not refused.ok and refused.reason == "rejected", refused.message
            assert refused.rolled_back and refused.active == "triton-default", refused.message
            assert "refuses max_queue_delay_microseconds = 10000" in refused.message
            assert (preferred(a), preferred(b)) == (default, default)
            steps = [(name, r.profile, r.ok, r.reason) for name, r in act.last_steps]
            assert steps == [
                (a.urls.http.split("://")[1], "aggressive", True, "applied"),
                (b.urls.http.split("://")[1], "aggressive", False, "rejected"),
                (a.urls.http.split("://")[1], "triton-default", True, "applied"),
            ]
            assert (aggressive, default) in poller.seen or any(
                e[1:3] == ("A", "live") and e[3] == "aggressive" for e in recorder.events)
            assert not any(b_seen == aggressive for _, b_seen in poller.seen)
            assert await act.live_profile() == "triton-default"
        for name, load in (("A", load_a), ("B", load_b)):
            report = load.report
            assert report is not None and report.total.sent > 0
            assert report.total.failures == {} and report.total.ok == report.total.sent, (name, report.total)
        with capsys.disabled():
            print(f"\n[fleet] two replicas under {LOAD_RPS:g} req/s each: change applied one at a time in "
                  f"{changed.duration_s:.2f} s (loads {changed.load_s:.2f} s); refused on B and rolled "
                  f"back in {refused.duration_s:.2f} s; requests A {load_a.report.total.sent} / "
                  f"B {load_b.report.total.sent}, failed 0")
    finally:
        await act.aclose()


def test_a_sidecar_with_replicas_decides_on_the_whole_fleet_and_reloads_each(replicas, tmp_path):
    """The sidecar YAML's ``actuator.replicas`` end to end: Prometheus signals summed over
    both replicas reach the policy, and a pin reaches both Tritons through the fleet."""
    from autobatch.controller.config import sidecar_config_from_mapping
    from autobatch.lab.prometheus import PrometheusServer

    from ..helpers import Running

    a, b = replicas
    (tmp_path / "token").write_text("fleet-token\n")
    targets = {name: s.urls.metrics.split("://", 1)[1].removesuffix("/metrics")
               for name, s in (("a", a), ("b", b))}
    with PrometheusServer(targets) as prom:
        cfg = sidecar_config_from_mapping({
            "model": EMULATOR_MODEL,
            "profiles": {"dir": str(PROFILES / EMULATOR_MODEL), "ladder": ["latency-soft", "triton-default"]},
            "slo": {"p95_ms": 500},
            "policy": {"interval_s": 1, "min_dwell_s": 3600},
            "signals": {"source": "prometheus", "prometheus_url": prom.url, "selector": {"job": "triton"}},
            "actuator": {"kind": "triton", "replicas": [
                {"http_url": s.urls.http, "grpc_url": s.urls.grpc} for s in (a, b)]},
            "server": {"listen": "127.0.0.1:0", "token_file": str(tmp_path / "token")},
        }, "fleet.yaml", base=tmp_path)
        with BackgroundLoad(a.urls.grpc, EMULATOR_MODEL, LOAD_RPS, max_s=90.0, seed=13) as load_a, \
                BackgroundLoad(b.urls.grpc, EMULATOR_MODEL, LOAD_RPS, max_s=90.0, seed=14) as load_b, \
                Running(cfg) as sidecar:
            # The policy's window is the fleet's: both replicas' requests, summed.
            st = sidecar.wait_for(
                lambda s: ((s.get("last_window") or {}).get("request_rps") or 0) > 1.5 * LOAD_RPS, 60,
                "a window with both replicas' traffic")
            assert st["last_window"]["request_rps"] < 2.5 * LOAD_RPS
            # The sidecar adopted what both replicas run; pin the other profile, then back:
            # each pin is a reload of both.
            start = st["active_profile"]
            assert start in ("latency-soft", "triton-default")
            reads = {"latency-soft": [2, 4], "triton-default": [32]}
            other = "latency-soft" if start == "triton-default" else "triton-default"
            for profile, want in ((other, reads[other]), (start, reads[start])):
                r = httpx.post(sidecar.url + "/profile", json={"profile": profile},
                               headers={"Authorization": "Bearer fleet-token"}, timeout=10)
                assert r.status_code == 200
                st = sidecar.wait_for(
                    lambda s, p=profile: s["active_profile"] == p and (s["last_actuation"] or {}).get(
                        "profile") == p, 60, f"the pin to {profile}")
                assert st["last_actuation"]["ok"], st["last_actuation"]
                assert "on 2 replicas" in st["last_actuation"]["message"]
                assert (preferred(a), preferred(b)) == (want, want)
        for load in (load_a, load_b):
            assert load.report.total.failures == {} and load.report.total.ok == load.report.total.sent
