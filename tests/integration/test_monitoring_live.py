"""The dashboard's panels and the alert rules on real data: a real Prometheus scrapes a
real Triton under load and two running sidecars, and loads deploy/prometheus/rules.yaml.

Sidecar A runs on the Triton (the emulated accelerator) with an SLO it cannot meet
(0.5 ms) and a dwell of an hour. It is pinned to a profile this CPU-only Triton
refuses (an actuation failure), then pinned three times between profiles that load
(switches faster than the dwell allows), ending pinned with p95 over the SLO.
Sidecar B watches a closed port with a 1 s staleness limit (stale signals), and is
then stopped (a sidecar down). Every panel query, ``$model``, ``$namespace``, ``$pod``
and ``$__rate_interval`` filled in (the namespace and pod "All": ``.*``), and every alert
expression must then return a series. Last, Prometheus's targets are taken away, as a
service discovery that lost them would (a reload), and the ``absent()`` alerts must
return one too. Which alert fires on which scenario, and stays quiet on a healthy series,
is promtool's part (tests/unit/test_monitoring.py).

The emulated accelerator runs its batches on the emulated GPU (``autobatch device``,
docs/shared-gpu.md), which exports dcgm-exporter's ``DCGM_FI_DEV_GPU_UTIL``; Prometheus
scrapes it as it would dcgm-exporter. The one exception, stated: Triton's own
``nv_gpu_utilization`` cannot exist on this CPU-only Triton. Prometheus must accept that
query and return nothing for it (absent, never zero).

Two series exist only once the policy has decided on data, not while a pin holds:
``forecast_rps`` (the forecast needs three fresh windows after the start's settling)
and ``autobatch_capacity_rps``. Sidecar A is pinned only after it has exported both,
and the gauges keep their last values while it is pinned.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from autobatch.curve import BatchCurve
from autobatch.device.protocol import parse_address
from autobatch.device.settings import DeviceSettings
from autobatch.lab.gpu import DeviceProcess, emulated_repository
from autobatch.lab.process import poll_until
from autobatch.lab.prometheus import PrometheusServer
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer, free_port

from ..conftest import PROFILES
from ..deploy_support import DEPLOY
from ..helpers import BackgroundLoad, Running

CURVE = BatchCurve({1: 2.0, 2: 2.5, 4: 3.0, 8: 4.0, 16: 6.0, 32: 10.0}, name="monitoring")
TOKEN = "monitoring-token"


@pytest.fixture(scope="module")
def device() -> Iterator[DeviceProcess]:
    free = parse_address("127.0.0.1:0")
    with DeviceProcess(DeviceSettings(listen=free, metrics=free, util_period_ms=250.0)) as dev:
        yield dev


@pytest.fixture(scope="module")
def server(device, tmp_path_factory) -> Iterator[TritonServer]:
    repo = emulated_repository(tmp_path_factory.mktemp("repo"), [EMULATOR_MODEL])
    with TritonServer.on_free_ports(repo, models=[EMULATOR_MODEL], emulate_curve=CURVE,
                                    emulate_device=device.address) as s:
        yield s


def sidecar_config(tmp_path: Path, name: str, triton: dict, policy: dict):
    from autobatch.controller.config import sidecar_config_from_mapping

    profiles = tmp_path / name / "profiles" / EMULATOR_MODEL
    profiles.mkdir(parents=True)
    for p in ("latency-soft", "triton-default", "aggressive"):
        (profiles / f"{p}.yaml").write_text((PROFILES / EMULATOR_MODEL / f"{p}.yaml").read_text())
    # Passes every local check; this CPU-only Triton refuses it.
    (profiles / "gpu.yaml").write_text(
        "name: gpu\nmax_batch_size: 32\ndynamic_batching: {preferred_batch_size: [8, 16]}\n"
        "instance_group: {kind: KIND_GPU}\n")
    (tmp_path / name / "token").write_text(TOKEN + "\n")
    data = {
        "model": EMULATOR_MODEL,
        "triton": triton,
        "profiles": {"dir": str(profiles), "ladder": ["latency-soft", "triton-default", "aggressive", "gpu"]},
        "slo": {"p95_ms": 0.5},
        "policy": {"interval_s": 1, "confirmations": 2, **policy},
        "server": {"listen": "127.0.0.1:0", "token_file": str(tmp_path / name / "token")},
    }
    return sidecar_config_from_mapping(data, f"{name}.yaml", base=tmp_path)


def pin(sidecar: Running, profile: str) -> None:
    r = httpx.post(sidecar.url + "/profile", json={"profile": profile},
                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert r.status_code == 200, r.text


def ask(prom: PrometheusServer, expr: str) -> list[dict]:
    """An instant query's series; a query Prometheus refuses fails the test at once."""
    r = httpx.get(f"{prom.url}/api/v1/query", params={"query": expr}, timeout=10)
    assert r.status_code == 200, f"Prometheus refused {expr}: {r.text}"
    return r.json()["data"]["result"]


GPU_ONLY = ("nv_gpu_utilization",)
"""What only Triton on a real GPU exports: none of it on this CPU-only machine."""


def fill(expr: str) -> str:
    return (expr.replace("$model", EMULATOR_MODEL).replace("$__rate_interval", "1m")
            .replace("$namespace", ".*").replace("$pod", ".*"))


def decided_on_data(sidecar: Running) -> bool:
    """The sidecar exports a finite forecast and a capacity per profile: its policy has
    decided on fresh windows (a pinned sidecar's decisions carry neither)."""
    text = httpx.get(sidecar.url + "/metrics", timeout=5).text
    forecast = capacities = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "autobatch_window_value" and sample.labels.get("signal") == "forecast_rps":
                forecast += math.isfinite(sample.value)
            elif sample.name == "autobatch_capacity_rps":
                capacities += 1
    return forecast == 1 and capacities > 0


def test_every_panel_and_alert_expression_returns_a_series(tmp_path, device, server, capsys):
    a_cfg = sidecar_config(tmp_path, "a", {"http_url": server.urls.http, "metrics_url": server.urls.metrics,
                                           "grpc_url": server.urls.grpc}, {"min_dwell_s": 3600})
    closed = free_port()
    b_cfg = sidecar_config(tmp_path, "b", {"http_url": f"http://127.0.0.1:{closed}",
                                           "metrics_url": f"http://127.0.0.1:{closed}/metrics",
                                           "grpc_url": f"127.0.0.1:{closed}"}, {"max_window_age_s": 1})
    board = json.loads((DEPLOY / "grafana" / "autobatch.json").read_text())
    panels = {f"{p['title']} [{t['refId']}]": fill(t["expr"]) for p in board["panels"] for t in p["targets"]}
    panels["variable model"] = "autobatch_slo_p95_ms"  # label_values(autobatch_slo_p95_ms, model)
    # The series behind label_values(..., namespace) and (..., pod): a static scrape config
    # has neither label, so the variables offer "All" (.*), which the panels were run with.
    panels["variable namespace"] = fill('autobatch_slo_p95_ms{model="$model"}')
    panels["variable pod"] = fill('nv_inference_count{model="$model",namespace=~"$namespace"}')
    gpu_only = {name: expr for name, expr in panels.items() if any(m in expr for m in GPU_ONLY)}
    assert len(gpu_only) == 1, gpu_only  # the utilisation panel's Triton GPU target
    for name in gpu_only:
        del panels[name]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())
    alerts = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}

    panels["annotation switches"] = fill(board["annotations"]["list"][0]["expr"])
    results: dict[str, int] = {}
    with BackgroundLoad(server.urls.grpc, EMULATOR_MODEL, 40.0, max_s=180.0, seed=21) as load, \
            Running(a_cfg) as a, ExitStack() as b_running:
        b = b_running.enter_context(Running(b_cfg))
        target = server.urls.metrics.split("://", 1)[1].removesuffix("/metrics")
        sidecars = [a.url.split("://", 1)[1], b.url.split("://", 1)[1]]
        dcgm = device.metrics_url.split("://", 1)[1].removesuffix("/metrics")
        with PrometheusServer({"triton": target}, extra_jobs={"autobatch": sidecars, "dcgm": [dcgm]},
                              rule_files=[DEPLOY / "prometheus" / "rules.yaml"]) as prom:
            poll_until(lambda: ask(prom, 'count(up{job="autobatch"} == 1) == 2'), timeout_s=30,
                       what="both sidecars scraped")
            poll_until(lambda: decided_on_data(a), timeout_s=60, interval_s=0.5,
                       what="sidecar A to export a forecast and the capacities")
            # An actuation failure: the pin to gpu is refused by Triton and dropped.
            pin(a, "gpu")
            a.wait_for(lambda s: s["errors"].get("actuate", 0) >= 1, 60, "the refused pin")
            # Three switches an hour's dwell would not allow, ending pinned over the SLO.
            for profile in ("triton-default", "aggressive", "triton-default"):
                pin(a, profile)
                a.wait_for(lambda s, p=profile: s["active_profile"] == p, 60, f"the pin to {profile}")

            absent = {"AutobatchSidecarDown", "AutobatchSidecarAbsent", "AutobatchTritonAbsent"}
            checks = {**panels, **{f"alert {k}": v for k, v in alerts.items() if k not in absent}}
            for name, expr in checks.items():
                found = poll_until(lambda e=expr: ask(prom, e), timeout_s=45, interval_s=0.5,
                                   what=f"{name} to return a series: {expr}")
                results[name] = len(found)

            # The sidecar down: B stops and its target goes down.
            b_running.close()
            down = poll_until(lambda: ask(prom, alerts["AutobatchSidecarDown"]), timeout_s=30,
                              what="the sidecar down expression to return a series")
            assert [d["metric"]["instance"] for d in down] == [sidecars[1]]
            results["alert AutobatchSidecarDown"] = len(down)
            # Prometheus evaluates the rules it loaded: the failure alert is firing.
            poll_until(lambda: ask(prom, 'ALERTS{alertname="AutobatchActuationFailed",alertstate="firing"}'),
                       timeout_s=30, what="Prometheus to fire AutobatchActuationFailed")
            # Triton's GPU series: accepted, and absent on a CPU-only Triton.
            for name, expr in gpu_only.items():
                assert ask(prom, fill(expr)) == [], name
            # Every target vanishes from discovery: no `up` series at all, and the absent()
            # expressions (never `up == 0`) return one.
            for name in ("AutobatchSidecarAbsent", "AutobatchTritonAbsent"):
                assert ask(prom, alerts[name]) == [], f"{name} while every target is scraped"
            prom.retarget({}, extra_jobs={"autobatch": [], "dcgm": []})
            for name in ("AutobatchSidecarAbsent", "AutobatchTritonAbsent"):
                found = poll_until(lambda e=alerts[name]: ask(prom, e), timeout_s=30, interval_s=0.5,
                                   what=f"{name} to return a series once the targets are gone")
                results[f"alert {name}"] = len(found)
    assert load.report is not None and load.report.total.failures == {}
    assert set(results) == set(panels) | {f"alert {k}" for k in alerts}
    with capsys.disabled():
        print(f"\n[monitoring] {len(results)} queries returned series ({len(panels)} dashboard, "
              f"{len(alerts)} alerts); {len(gpu_only)} GPU-only query accepted and empty on this CPU")
