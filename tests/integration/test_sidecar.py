"""The sidecar against the real Triton: step load, refused profile, restart, metrics down.

Its own Triton serves the emulated accelerator on a curve shaped like dense_mlp's
on this CPU (batching pays), so the high phase saturates latency-soft and only a
throughput profile carries it. The emulator holds the instance for the curve's
time without burning CPU, which keeps the load generator's numbers honest on a
two-core machine.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from autobatch.cli import app
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.controller.loop import read_decision_log
from autobatch.curve import BatchCurve
from autobatch.lab.process import poll_until
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer, free_port

from ..conftest import PROFILES, REPOSITORY
from ..helpers import BackgroundLoad, Running

# latency-soft ([2, 4]) carries 4/20 ms = 200/s; aggressive ([8, 16, 32]) 32/48 ms = 667/s.
CURVE = BatchCurve({1: 10.0, 2: 18.0, 4: 20.0, 8: 24.0, 16: 32.0, 32: 48.0}, name="dense-like")
TOKEN = "test-token"


@pytest.fixture(scope="module")
def server() -> Iterator[TritonServer]:
    with TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL], emulate_curve=CURVE) as s:
        yield s


def config(tmp_path: Path, server: TritonServer, **over):
    curve = tmp_path / "curve.yaml"
    curve.write_text(CURVE.to_yaml())
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    data = {
        "model": EMULATOR_MODEL,
        "triton": {"http_url": server.urls.http, "metrics_url": server.urls.metrics,
                   "grpc_url": server.urls.grpc},
        "profiles": {"dir": str(PROFILES / EMULATOR_MODEL), "ladder": ["latency-soft", "aggressive"]},
        "slo": {"p95_ms": 150},
        "policy": {
            "interval_s": 1, "confirmations": 2, "min_dwell_s": 6, "stabilization_s": 4,
            "settle_s": 1.5, "curve": str(curve),
        },
        "server": {"listen": "127.0.0.1:0", "token_file": str(token)},
        "decision_log": str(tmp_path / "decisions.jsonl"),
    }
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)


def live_preferred(server: TritonServer) -> list[int]:
    cfg = httpx.get(f"{server.urls.http}/v2/models/{EMULATOR_MODEL}/config", timeout=30).json()
    return cfg["dynamic_batching"]["preferred_batch_size"]


def test_refused_profile_rolls_back_keeps_running_and_counts(tmp_path, server):
    profiles = tmp_path / "profiles" / EMULATOR_MODEL
    profiles.mkdir(parents=True)
    for name in ("latency-soft", "aggressive"):
        (profiles / f"{name}.yaml").write_text((PROFILES / EMULATOR_MODEL / f"{name}.yaml").read_text())
    # Passes every local check; this CPU-only Triton refuses it.
    (profiles / "gpu.yaml").write_text(
        "name: gpu\nmax_batch_size: 32\ndynamic_batching: {preferred_batch_size: [8, 16]}\n"
        "instance_group: {kind: KIND_GPU}\n"
    )
    cfg = config(tmp_path, server, profiles={"dir": str(profiles), "ladder": ["latency-soft", "gpu"]})
    with Running(cfg) as running:
        running.wait_for(lambda s: s["active_profile"] == "latency-soft", 30, "latency-soft")
        r = httpx.post(running.url + "/profile", json={"profile": "gpu"},
                       headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200
        st = running.wait_for(lambda s: s["errors"].get("actuate", 0) >= 1, 30, "the refusal")
        assert st["active_profile"] == "latency-soft"
        assert st["pinned"] is None and "pin to gpu failed" in st["last_error"]
        ticks = st["ticks"]
        running.wait_for(lambda s: s["ticks"] >= ticks + 2, 15, "more ticks")
        metrics = httpx.get(running.url + "/metrics").text
        failed = 'autobatch_actuation_failures_total{model="emulated_accelerator",reason="rejected"}'
        assert f"{failed} 1.0" in metrics
        assert httpx.get(running.url + "/healthz").status_code == 200
    assert live_preferred(server) == [2, 4]


def test_triton_killed_and_restarted_is_reapplied(tmp_path):
    with TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL], emulate_curve=CURVE) as own:
        cfg = config(tmp_path, own, profiles={"initial": "aggressive"})
        with Running(cfg) as running:
            running.wait_for(lambda s: s["active_profile"] == "aggressive", 60, "aggressive applied")
            assert live_preferred(own) == [8, 16, 32]
            own.kill()
            st = running.wait_for(
                lambda s: s["errors"].get("signals", 0) >= 2 and s["errors"].get("reconcile", 0) >= 1,
                30, "errors while Triton is down",
            )
            assert st["last_decision"]["action"] == "hold"
            own.start()  # same ports; the repository config (latency-soft) is back
            # Loading the curve reloads the model with the repository's batching: whether
            # the sidecar re-applied before it (then the load undoes it) or only after,
            # it must end with aggressive live again.
            own.load_emulator(CURVE)
            running.wait_for(
                lambda s: (s["last_actuation"] or {}).get("reason") == "reapplied", 60, "re-apply"
            )
            poll_until(lambda: live_preferred(own) == [8, 16, 32], timeout_s=60, interval_s=0.5,
                       what="aggressive live again after the restart")
            assert running.status()["active_profile"] == "aggressive"


def test_metrics_endpoint_down_holds_without_crashing(tmp_path, server):
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    cfg = config(tmp_path, server, triton={"http_url": server.urls.http, "metrics_url": dead})
    with Running(cfg) as running:
        st = running.wait_for(lambda s: s["errors"].get("signals", 0) >= 3, 30, "signal errors")
        assert st["last_decision"]["action"] == "hold"
        assert st["switches"] == 0
        assert httpx.get(running.url + "/healthz").status_code == 200
        # `autobatch status` reads the same /status, given host:port as the other commands take it
        host_port = running.url.split("://", 1)[1]
        result = CliRunner().invoke(app, ["status", "--url", host_port, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["active_profile"] == "latency-soft"
        table = CliRunner().invoke(app, ["status", "--url", running.url])
        assert table.exit_code == 0 and "latency-soft" in table.output and "signals=" in table.output


def stats_exec_count(server: TritonServer) -> int:
    stats = httpx.get(f"{server.urls.http}/v2/models/{EMULATOR_MODEL}/stats", timeout=30).json()
    return int(stats["model_stats"][0]["execution_count"])


def test_dry_run_decides_and_logs_but_never_touches_triton(tmp_path, server):
    """`autobatch run --dry-run`, the real CLI, under an overload that makes it want aggressive."""
    cfg_file = tmp_path / "sidecar.yaml"
    port = free_port()
    curve = tmp_path / "curve.yaml"
    curve.write_text(CURVE.to_yaml())
    token = tmp_path / "token"
    token.write_text(TOKEN)
    cfg_file.write_text(yaml.safe_dump({
        "model": EMULATOR_MODEL,
        "triton": {"http_url": server.urls.http, "metrics_url": server.urls.metrics,
                   "grpc_url": server.urls.grpc},
        "profiles": {"dir": str(PROFILES / EMULATOR_MODEL), "ladder": ["latency-soft", "aggressive"]},
        "slo": {"p95_ms": 150},
        "policy": {"interval_s": 1, "confirmations": 2, "min_dwell_s": 6, "curve": str(curve)},
        "server": {"listen": f"127.0.0.1:{port}", "token_file": str(token)},
        "decision_log": str(tmp_path / "decisions.jsonl"),
    }))
    preferred = live_preferred(server)
    executions = stats_exec_count(server)  # a reload would restart this count at 0
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "autobatch", "run", "--config", str(cfg_file), "--dry-run"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def alive() -> None:
        assert proc.poll() is None, proc.communicate()[1]

    def up() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return bool(httpx.get(url + "/status", timeout=2).json().get("active_profile"))
        return False

    try:
        poll_until(up, timeout_s=60, interval_s=0.2, check=alive, what="the dry-run sidecar to come up")
        # 300/s is more than latency-soft's batches of 4 carry (200/s): an overload.
        with BackgroundLoad(server.urls.grpc, EMULATOR_MODEL, 300, max_s=40, drain_s=20) as load:
            poll_until(lambda: httpx.get(url + "/status", timeout=5).json()["active_profile"] == "aggressive",
                       timeout_s=40, interval_s=0.2, what="the dry run to want aggressive")
            # Triton still serves latency-soft, and has not reloaded the model.
            assert live_preferred(server) == preferred
            assert stats_exec_count(server) > executions
        assert not [d for d in load.done if d[2] != "ok"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert live_preferred(server) == preferred
    assert stats_exec_count(server) > executions
    log = read_decision_log(tmp_path / "decisions.jsonl")
    dry = [ln for ln in log if ln["decision"]["action"] == "switch" and ln["actuation"]]
    assert dry and dry[-1]["decision"]["target"] == "aggressive"
    assert dry[-1]["decision"]["kind"] == "survival", dry[-1]["decision"]
    assert all(ln["actuation"]["reason"] == "dry_run" for ln in dry)
    assert "would" in err and "dynamic_batching.preferred_batch_size" in err


def test_healthz_turns_503_while_triton_is_stopped_and_200_after_it_resumes(tmp_path, server):
    """SIGSTOP: Triton accepts connections and answers nothing, so every call of a tick runs
    into its timeout. /healthz must turn 503 within the stated bound (and say why), /readyz
    too, and both must come back once Triton resumes."""
    cfg = config(tmp_path, server, signals={"timeout_s": 1}, actuator={"timeout_s": 4})
    bound = cfg.liveness_bound_s  # 1 s interval + 1 s scrape + a 4 s load and three 2 s reads
    with Running(cfg) as running:
        def code(path: str) -> int:
            return httpx.get(running.url + path, timeout=5).status_code

        # Both polled before the stop: they answer from different bookkeeping (fresh signals,
        # a completed tick), and on a loaded machine a tick whose call ran over its 1 s
        # timeout leaves /healthz behind /readyz.
        poll_until(lambda: code("/readyz") == 200 and code("/healthz") == 200, timeout_s=30,
                   what="/readyz and /healthz 200 before the stop")
        stopped = time.monotonic()
        server.signal(signal.SIGSTOP)
        try:
            poll_until(lambda: code("/healthz") == 503, timeout_s=bound + 2 * cfg.interval_s + 5,
                       interval_s=0.2, what=f"/healthz 503 within the bound ({bound:g} s)")
            to_503 = time.monotonic() - stopped
            answer = httpx.get(running.url + "/healthz", timeout=5).text
            assert answer.startswith("stalled: ") and "did not answer" in answer, answer
            assert code("/readyz") == 503
        finally:
            server.signal(signal.SIGCONT)
        resumed = time.monotonic()
        poll_until(lambda: code("/healthz") == 200 and code("/readyz") == 200, timeout_s=bound + 30,
                   interval_s=0.2, what="/healthz and /readyz 200 after SIGCONT")
        back = time.monotonic() - resumed
        st = running.status()
    print(f"\n[liveness] bound {bound:g} s: 503 after {to_503:.1f} s stopped, 200 {back:.1f} s after "
          f"SIGCONT; errors by stage {st['errors']}")
    assert st["health"]["live"] and st["health"]["liveness_bound_s"] == bound
