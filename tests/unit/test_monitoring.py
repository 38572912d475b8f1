"""deploy/prometheus/rules.yaml and deploy/grafana/autobatch.json, offline.

promtool (Debian's prometheus package) checks the rules and runs their unit tests
(deploy/prometheus/tests.yaml: each alert firing on its scenario, a healthy series
beside it staying quiet); a rule with a broken threshold makes those tests fail.
The dashboard is the output of deploy/grafana/build.py and uses only metrics the
sidecar exports (or that the issue names for another engineer's branch).
The same expressions against a real Prometheus, Triton and sidecar:
tests/integration/test_monitoring_live.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ..deploy_support import DEPLOY

RULES = DEPLOY / "prometheus" / "rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "tests.yaml"
DASHBOARD = DEPLOY / "grafana" / "autobatch.json"
ALERTS = {"AutobatchSLOBreachedWithoutRemedy", "AutobatchActuationFailed", "AutobatchFlapping",
          "AutobatchSignalsStale", "AutobatchSidecarDown", "AutobatchSidecarAbsent", "AutobatchTritonAbsent"}
PROMETHEUS_RULE = DEPLOY / "k8s" / "monitoring" / "prometheusrule.yaml"
RUNBOOK = DEPLOY.parent / "docs" / "runbook.md"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: scripts/system-deps.sh installs Debian's prometheus"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def alert_rules(path: Path = RULES) -> dict[str, dict]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_promtool_checks_the_rules():
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout
    assert set(alert_rules()) == ALERTS


def test_each_alert_fires_on_its_scenario_and_not_on_a_healthy_series():
    proc = promtool("test", "rules", str(RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every alert has a scenario that expects it to fire.
    tested = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    firing = {t["alertname"] for case in tested for t in case["alert_rule_test"] if t.get("exp_alerts")}
    assert firing == ALERTS


@pytest.mark.parametrize(
    ("alert", "old", "new"),
    [
        # the flapping limit loosened tenfold: the flapping scenario no longer fires
        ("AutobatchFlapping", "1 + 900 /", "1 + 9000 /"),
        # the window's age read a minute too old: the healthy sidecar alerts too
        ("AutobatchSignalsStale", "time() - autobatch_last", "time() + 60 - autobatch_last"),
        # a vanished sidecar read as a down one: a target that is gone has no `up` to be 0
        ("AutobatchSidecarAbsent", 'absent(up{job="autobatch"}) and on() absent(up{endpoint="autobatch"})',
         'up{job="autobatch"} == 0'),
        # Triton's absence without the endpoint matcher: its sidecar's target hides it
        ("AutobatchTritonAbsent", 'absent(up{job="triton", endpoint=~"|metrics"})',
         'absent(up{job="triton"})'),
    ],
)
def test_the_rule_tests_catch_a_broken_rule(tmp_path, alert, old, new):
    text = RULES.read_text()
    assert old in text
    (tmp_path / "rules.yaml").write_text(text.replace(old, new, 1))
    shutil.copy(RULE_TESTS, tmp_path / "tests.yaml")
    proc = promtool("test", "rules", str(tmp_path / "tests.yaml"))
    assert proc.returncode != 0
    assert f"alertname: {alert}" in proc.stdout + proc.stderr


def test_the_dashboard_and_its_configmap_are_what_build_py_writes():
    proc = subprocess.run(["python3", str(DEPLOY / "grafana" / "build.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_prometheusrule_is_rules_yaml_as_build_py_writes_it(tmp_path):
    proc = subprocess.run(["python3", str(DEPLOY / "prometheus" / "build.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rule = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]  # one source
    # ... and a rule changed only in rules.yaml makes the check fail until build.py runs.
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    copy = tmp_path / "deploy" / "prometheus" / "rules.yaml"
    copy.write_text(copy.read_text().replace("for: 2m", "for: 3m", 1))
    proc = subprocess.run(["python3", str(tmp_path / "deploy" / "prometheus" / "build.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "run it" in proc.stderr


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    heads = re.findall(r"^#{1,6} (.+)$", markdown, re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_every_alert_links_the_runbook_section_that_says_what_to_do():
    anchors = _anchors(RUNBOOK.read_text())
    for name, rule in alert_rules().items():
        url = rule["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "docs/runbook.md" and anchor in anchors, (name, url)
        section = RUNBOOK.read_text().split(f"## {name}", 1)[1].split("\n## ", 1)[0]
        assert "What to do" in section and len(section) > 300, name


def dashboard_exprs() -> dict[str, str]:
    board = json.loads(DASHBOARD.read_text())
    return {f"{p['title']} [{t['refId']}]": t["expr"] for p in board["panels"] for t in p["targets"]}


def test_the_dashboard_has_a_panel_for_everything_the_issue_lists():
    board = json.loads(DASHBOARD.read_text())
    titles = [p["title"] for p in board["panels"]]
    for wanted in ("Profile in force", "Switches by reason", "Decisions by reason", "p95 against the SLO",
                   "Queue time against the profile's max delay", "Mean batch against the preferred size",
                   "Arrival rate against the current profile's capacity", "Device time per request",
                   "Actuation durations", "Actuation failures"):
        assert wanted in titles
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "model", "namespace", "pod"]
    for wanted in ("Triton: queue time per request", "Triton: compute time per request",
                   "Triton: inference rate", "Accelerator utilisation"):
        assert wanted in titles
    # Every query of the sidecar's or Triton's series is scoped to the chosen namespace and pods.
    for expr in dashboard_exprs().values():
        for selector in re.findall(r"\b(?:autobatch_|nv_)[a-z_]+\{([^}]*)\}", expr):
            assert 'namespace=~"$namespace"' in selector and 'pod=~"$pod"' in selector, expr
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    for p in board["panels"]:
        assert p["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])


TRITON_METRICS = {
    # What Triton 2.51 exports (read off the embedded server's /metrics), and on a GPU server
    # nv_gpu_utilization (tests/integration/test_monitoring_live.py queries them all).
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us", "nv_inference_pending_request_count",
    "nv_cpu_utilization", "nv_gpu_utilization",
}


def test_every_dashboard_metric_is_one_the_sidecar_or_triton_exports():
    from prometheus_client import CollectorRegistry

    from autobatch.controller.metrics import ControllerMetrics

    registry = CollectorRegistry()
    ControllerMetrics(registry, "m", ["a", "b"])
    suffixes = ("", "_total", "_bucket", "_sum", "_count")
    exported = {fam.name + x for fam in registry.collect() for x in suffixes} | TRITON_METRICS
    used = {name for expr in dashboard_exprs().values()
            for name in re.findall(r"\b(autobatch_[a-z_]+|nv_[a-z_]+)\b", expr)}
    assert used and used <= exported, used - exported


def test_the_switch_panel_names_every_reason_a_switch_can_have():
    """The panel's description is the operator's legend: a reason added to the policy
    (as no_gain was) must be named there too."""
    from autobatch.policy.types import Reason

    board = json.loads((DEPLOY / "grafana" / "autobatch.json").read_text())
    text = next(p["description"] for p in board["panels"] if p["title"] == "Switches by reason")
    named = set(re.findall(r"[a-z_]+", text))
    missing = [r.value for r in Reason if r.kind != "hold" and r.value not in named]
    assert not missing, f"Switches by reason does not name {missing}"
