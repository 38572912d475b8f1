"""Triton's restricted APIs against the real server: the key opens them, its absence is one line.

The embedded Triton is started as the deploy overlays start it, with the
model-repository, model-config and statistics groups (and trace, logging,
shared-memory) locked behind a header over HTTP and gRPC. Three sidecars run on it:

* A has ``triton.restricted_api`` with the right key: its pin reloads the model
  (loads over gRPC, config reads and ``/stats`` over HTTP, all with the key);
* B has no key, C the wrong one: the start-up read, every pin and every ``/stats``
  read are refused; the error is one line naming the setting to fix, the decision
  log records the ``forbidden`` actuation, and the model keeps A's profile, READY.

Every log record of the run (every logger, DEBUG), the decision logs, ``/status``
and ``/metrics`` of all three, and Triton's own log are then searched for the key.
``autobatch watch`` and ``measure`` and the fleet actuator take the same key. And the
reload overlay as rendered: its Triton command yields the flags the real Triton runs with,
and its sidecar reloads with the key mounted from the overlay's Secret.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from autobatch.access import RestrictedApi
from autobatch.actuators.fleet import Replica, StaticReplicas, TritonFleetActuator
from autobatch.cli import app
from autobatch.controller.config import load_sidecar_config, sidecar_config_from_mapping
from autobatch.controller.loop import read_decision_log
from autobatch.lab.process import poll_until
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.profiles import load_profiles

from ..conftest import PROFILES, REPOSITORY
from ..deploy_support import OVERLAYS, container, container_env, expand, find, materialize, render
from ..helpers import Running, assert_bad_input, run_main

HEADER = "autobatch-key"
GROUPS = "model-repository,model-config,statistics,trace,logging,shared-memory"
"""What the deploy overlays lock (tests/unit/test_deploy.py checks they say the same)."""
KEY = secrets.token_hex(24)
TOKEN = "restricted-test-token"


@pytest.fixture(scope="module")
def locked() -> Iterator[TritonServer]:
    args = [f"--http-restricted-api={GROUPS}:{HEADER}={KEY}",
            f"--grpc-restricted-protocol={GROUPS}:{HEADER}={KEY}"]
    with TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL], extra_args=args) as s:
        yield s


def live_config(server: TritonServer) -> dict:
    r = httpx.get(f"{server.urls.http}/v2/models/{EMULATOR_MODEL}/config", headers={HEADER: KEY}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def sidecar(tmp_path: Path, server: TritonServer, name: str, key: str | None):
    root = tmp_path / name
    root.mkdir()
    (root / "token").write_text(TOKEN + "\n")
    triton: dict = {"http_url": server.urls.http, "metrics_url": server.urls.metrics,
                    "grpc_url": server.urls.grpc}
    if key is not None:
        (root / "triton-key").write_text(key + "\n")
        triton["restricted_api"] = {"header": HEADER, "key_file": "triton-key"}
    data = {
        "model": EMULATOR_MODEL,
        "triton": triton,
        "profiles": {"dir": str(PROFILES / EMULATOR_MODEL),
                     "ladder": ["latency-soft", "triton-default", "aggressive"]},
        "slo": {"p95_ms": 500},
        # An hour's dwell: nothing but the pins moves the model.
        "policy": {"interval_s": 0.5, "min_dwell_s": 3600},
        "server": {"listen": "127.0.0.1:0", "token_file": "token"},
        "decision_log": "decisions.jsonl",
    }
    return sidecar_config_from_mapping(data, f"{name}/sidecar.yaml", base=root)


def pin(running: Running, profile: str) -> None:
    r = httpx.post(running.url + "/profile", json={"profile": profile},
                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert r.status_code == 200, r.text


def refused_pin(decision_log: Path | None) -> dict | None:
    """The actuation of the pin to triton-default, once the decision log holds it."""
    assert decision_log is not None
    for line in read_decision_log(decision_log) if decision_log.exists() else []:
        d, act = line["decision"], line.get("actuation")
        if d["reason"] == "pin" and d["target"] == "triton-default" and act:
            return act
    return None


def dropped(status: dict) -> bool:
    """The refused pin is gone and the start-up's refused apply came before it."""
    return status["pinned"] is None and status["errors"].get("actuate", 0) >= 2


def test_the_key_opens_the_reload_and_its_absence_is_one_line_naming_the_setting(tmp_path, locked, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, every level: the key must be in none of it
    profiles = load_profiles(PROFILES / EMULATOR_MODEL)
    ready_url = f"{locked.urls.http}/v2/models/{EMULATOR_MODEL}/ready"
    # Triton refuses the locked APIs to a client without the key ...
    plain = httpx.get(f"{locked.urls.http}/v2/models/{EMULATOR_MODEL}/stats", timeout=10)
    assert plain.status_code == 403 and HEADER in plain.text
    # ... but its metrics port and readiness answer anyone (the probes, Prometheus).
    assert httpx.get(locked.urls.metrics, timeout=10).status_code == 200
    assert httpx.get(ready_url, timeout=10).status_code == 200

    configs = {name: sidecar(tmp_path, locked, name, key)
               for name, key in (("a", KEY), ("b", None), ("c", KEY[::-1]))}
    seen: dict[str, str] = {}
    with Running(configs["a"]) as a:
        pin(a, "aggressive")
        a.wait_for(lambda s: s["active_profile"] == "aggressive", 60, "A's pin to aggressive")
        want = list(profiles["aggressive"].preferred_batch_size)
        assert live_config(locked)["dynamic_batching"]["preferred_batch_size"] == want
        # A's signals read /stats with the key: a window that is not forbidden.
        a.wait_for(lambda s: s["last_window"] is not None and s["last_window"].get("stale_reason") is None,
                   30, "A's first good window")
        seen["a status"] = json.dumps(a.status())
        seen["a metrics"] = httpx.get(a.url + "/metrics", timeout=10).text
        with Running(configs["b"]) as b, Running(configs["c"]) as c:
            messages = {}
            for running, name in ((b, "b"), (c, "c")):
                pin(running, "triton-default")
                refused = poll_until(lambda n=name: refused_pin(configs[n].decision_log), timeout_s=60,
                                     what=f"{name}'s refused pin in its decision log")
                assert refused["reason"] == "forbidden" and not refused["ok"]
                messages[name] = refused["message"]
                assert "\n" not in messages[name] and "triton.restricted_api" in messages[name]
                # The pin is dropped, not retried; the sidecar's error says why, in one line too.
                status = running.wait_for(dropped, 30, f"{name}'s dropped pin")
                assert "\n" not in status["last_error"] and "triton.restricted_api" in status["last_error"]
                # Its signals are refused too: not ready, and /healthz's detail says why.
                running.wait_for(lambda s: "triton.restricted_api" in (s["health"].get("ready_detail") or ""),
                                 30, f"{name}'s refused /stats")
                seen[f"{name} status"] = json.dumps(running.status())
                seen[f"{name} metrics"] = httpx.get(running.url + "/metrics", timeout=10).text
            assert "key_file" in messages["c"]  # the wrong key: fix the file
            assert "header: autobatch-key" in messages["b"]  # no key: which header to set
    # The refused pins changed nothing: A's profile is live, and the model READY.
    assert live_config(locked)["dynamic_batching"]["preferred_batch_size"] == want
    assert httpx.get(ready_url, timeout=10).status_code == 200
    for name in ("b", "c"):
        lines = read_decision_log(configs[name].decision_log)
        refused = [ln for ln in lines if (ln.get("actuation") or {}).get("reason") == "forbidden"]
        assert refused and all("triton.restricted_api" in ln["actuation"]["message"] for ln in refused), name
    for name, cfg in configs.items():
        seen[f"{name} decision log"] = Path(cfg.decision_log).read_text()
    seen["triton log"] = locked.log_path.read_text()
    records = [f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records]
    assert any("forbidden" in r or "restricted" in r for r in records)  # the refusals were logged
    seen["log records"] = "\n".join(records)
    leaked = [where for where, text in seen.items() if KEY in text]
    assert leaked == [], f"the key appears in {leaked}"


def test_watch_and_measure_send_the_key_and_name_the_setting_without_it(tmp_path, locked, monkeypatch,
                                                                       capsys):
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    common = ["--url", locked.urls.http, "--model", EMULATOR_MODEL]
    keyed = ["--restricted-api-header", HEADER, "--restricted-api-key-file", str(key_file)]
    result = CliRunner().invoke(app, ["watch", *common, "--metrics-url", locked.urls.metrics,
                                      "--interval", "0.5", "--count", "2", "--json", *keyed])
    assert result.exit_code == 0, result.output
    windows = [json.loads(line) for line in result.stdout.splitlines()]
    assert windows and not any(w["stale_reason"] == "forbidden" for w in windows), windows
    code, out, err = run_main(monkeypatch, capsys, "watch", *common, "--metrics-url", locked.urls.metrics,
                              "--interval", "0.5", "--count", "1", "--json")
    assert_bad_input(code, err, "triton.restricted_api")
    result = CliRunner().invoke(app, ["measure", *common, "--batch-sizes", "1,2", "--warmup", "0",
                                      "--repeats", "1", "--json", *keyed])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)["points"]) == {"1", "2"}
    code, out, err = run_main(monkeypatch, capsys, "measure", *common, "--batch-sizes", "1",
                              "--warmup", "0", "--repeats", "1")
    assert_bad_input(code, err, "triton.restricted_api")
    assert KEY not in out + err


def test_the_fleet_actuator_sends_the_key_to_every_replica(tmp_path, locked):
    profiles = load_profiles(PROFILES / EMULATOR_MODEL)
    ladder = [profiles["latency-soft"], profiles["triton-default"]]

    async def run(api: RestrictedApi | None) -> tuple[str, str, str | None]:
        fleet = TritonFleetActuator(StaticReplicas([Replica(locked.urls.http, locked.urls.grpc)]),
                                    EMULATOR_MODEL, ladder, restricted_api=api)
        try:
            result = await fleet.apply(ladder[1])
            return result.reason, result.message, result.active
        finally:
            await fleet.aclose()

    key_file = tmp_path / "fleet-key"
    key_file.write_text(KEY)
    reason, message, active = asyncio.run(run(RestrictedApi.from_file(HEADER, key_file)))
    # The fleet read the replica back READY on the profile (with the key) before it said so.
    assert reason in ("applied", "unchanged") and active == "triton-default", message
    reason, message, _ = asyncio.run(run(None))
    assert reason == "forbidden" and "triton.restricted_api" in message and KEY not in message


def test_the_overlay_starts_triton_locked_and_its_sidecar_reloads_with_the_mounted_key(tmp_path):
    """The reload overlay as rendered: its Triton container's command, run by sh with the
    Secret's key mounted (paths moved under a temporary root), yields the flags the real
    Triton is started with; the sidecar runs on the overlay's own sidecar.yaml and mounted
    key (only the addresses change) and a pin reloads the model."""
    objects = render(OVERLAYS / "reload")
    (dep,) = find(objects, "Deployment", "triton")
    triton = container(dep, "triton")
    env = container_env(objects, dep, "triton")
    root = tmp_path / "pod"
    materialize(objects, dep, "triton", root)
    materialize(objects, dep, "autobatch", root)
    # The kubelet's expansion, then the mount paths moved under the root.
    mounts = [m["mountPath"] for m in triton["volumeMounts"]]
    command = [expand(a, env) for a in triton["command"]]
    script = command[2]
    for m in mounts:
        script = script.replace(m + "/", f"{root}{m}/")
    # `tritonserver` on PATH prints the argv it was given, one JSON list, instead of serving.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "tritonserver"
    fake.write_text('#!/bin/sh\nexec python3 -c \'import json, sys; print(json.dumps(sys.argv[1:]))\' "$@"\n')
    fake.chmod(0o755)
    args = [expand(a, env) for a in triton["args"]]
    proc = subprocess.run([*command[:2], script, command[3], *args], capture_output=True, text=True,
                          timeout=30, env={**env, "PATH": f"{bindir}:/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)
    restricted = [a for a in argv if a.startswith(("--http-restricted-api=", "--grpc-restricted-protocol="))]
    assert len(restricted) == 2
    assert argv[: len(args)] == args  # the pod's own flags, untouched
    model = env["MODEL"]
    # The real Triton with the flags the overlay's command produced (its repository and ports
    # are the test's; --load-model=MODEL is among the overlay's flags).
    passed = [a for a in argv if not a.startswith("--model-repository=")]
    with TritonServer.on_free_ports(REPOSITORY, models=[model], extra_args=passed) as server:
        plain = httpx.get(f"{server.urls.http}/v2/models/{model}/config", timeout=10)
        assert plain.status_code == 403 and env["TRITON_RESTRICTED_HEADER"] in plain.text
        sidecar_dep = container(dep, "autobatch")
        sidecar_env = container_env(objects, dep, "autobatch")
        mount = root / "etc" / "autobatch"
        config = yaml.safe_load((mount / "sidecar.yaml").read_text())
        config["triton"].update(http_url=server.urls.http, metrics_url=server.urls.metrics,
                                grpc_url=server.urls.grpc)
        config["server"]["listen"] = "127.0.0.1:0"
        (mount / "sidecar.yaml").write_text(yaml.safe_dump(config))
        cfg = load_sidecar_config(mount / "sidecar.yaml", model=sidecar_env["AUTOBATCH_MODEL"])
        assert cfg.triton.restricted_api is not None
        token = (mount / "token").read_text().strip()
        assert sidecar_dep["args"][-1] == "/etc/autobatch/sidecar.yaml"
        with Running(cfg) as running:
            status = running.wait_for(lambda s: s["active_profile"] in ("triton-default", "efficient"), 60,
                                      "the live profile read with the mounted key")
            target = "efficient" if status["active_profile"] == "triton-default" else "triton-default"
            r = httpx.post(running.url + "/profile", json={"profile": target},
                           headers={"Authorization": f"Bearer {token}"}, timeout=10)
            assert r.status_code == 200, r.text
            running.wait_for(lambda s: s["active_profile"] == target and s["pinned"] == target, 120,
                             f"the pin to {target}")
        key = (mount / "triton-api-key").read_text().strip()
        live = httpx.get(f"{server.urls.http}/v2/models/{model}/config",
                         headers={env["TRITON_RESTRICTED_HEADER"]: key}, timeout=30).json()
        want = cfg.profile(target)
        assert live["max_batch_size"] == want.max_batch_size
        assert live["dynamic_batching"].get("max_queue_delay_microseconds", 0) == want.max_queue_delay_us
