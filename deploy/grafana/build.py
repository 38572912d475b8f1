"""Write the Grafana dashboard of the sidecar and its Triton, and its provisioning ConfigMap.

    python deploy/grafana/build.py          # rewrites both files
    python deploy/grafana/build.py --check  # exit 1 if either differs

* deploy/grafana/autobatch.json: the dashboard, to import or provision;
* deploy/k8s/monitoring/grafana-dashboard.yaml: the same JSON in a ConfigMap labelled
  ``grafana_dashboard: "1"``, which the dashboard sidecar of kube-prometheus-stack's
  Grafana loads (every overlay ships it).

The dashboard is plain JSON built here (no SDK needed to read or change it);
tests/unit/test_monitoring.py checks the committed files are this script's output, and
tests/integration/test_monitoring_live.py runs every panel's query, variables filled in,
on a real Prometheus scraping a real Triton and running sidecars.

Variables: ``datasource`` (a Prometheus), ``model`` (from ``autobatch_slo_p95_ms``),
``namespace`` and ``pod`` (the labels prometheus-operator's scrapes add; "All" matches
series without them too, as a static scrape config has). Series of several sidecars (one
per pod) are summed where they add up (rates, replicas on a profile) and maxed where the
worst replica matters (p95, queue time). The Triton panels read Triton's own metrics
(``nv_*``), per pod, beside what the sidecar's windows say.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("autobatch.json")
CONFIGMAP = Path(__file__).resolve().parents[1] / "k8s" / "monitoring" / "grafana-dashboard.yaml"
DS = {"type": "prometheus", "uid": "${datasource}"}
M = 'model="$model",namespace=~"$namespace",pod=~"$pod"'
NS = 'namespace=~"$namespace",pod=~"$pod"'


def triton(metric: str) -> str:
    """One of Triton's per-model counters, as a per-pod rate."""
    return f"sum by (pod, instance) (rate({metric}{{{M}}}[$__rate_interval]))"


def per_request_ms(metric: str) -> str:
    """A Triton duration counter (microseconds) per successful request, in ms."""
    return f"{triton(metric)} / {triton('nv_inference_request_success')} / 1000"


def window(signal: str) -> str:
    return f'autobatch_window_value{{{M},signal="{signal}"}}'


def of_active(metric: str) -> str:
    """A per-profile gauge, for the profile in force on each sidecar (``and`` matches every
    label: the same sidecar, model and profile)."""
    return f"{metric}{{{M}}} and (autobatch_active_profile{{{M}}} == 1)"


def target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, "range": True}


def panel(pid: int, title: str, description: str, targets: list[tuple[str, str]], *, unit: str,
          x: int, y: int, kind: str = "timeseries", stack: bool = False, bars: bool = False,
          w: int = 12, h: int = 8) -> dict[str, Any]:
    custom: dict[str, Any] = {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    if stack:
        custom.update(stacking={"mode": "normal", "group": "A"}, fillOpacity=60)
    if bars:
        custom.update(drawStyle="bars", fillOpacity=80, stacking={"mode": "normal", "group": "A"})
    p: dict[str, Any] = {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)],
    }
    if kind == "state-timeline":
        p["fieldConfig"]["defaults"]["custom"] = {"lineWidth": 0, "fillOpacity": 80}
        p["options"] = {"showValue": "never", "mergeValues": True, "rowHeight": 0.9,
                        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
    return p


def variable(name: str, query: str) -> dict[str, Any]:
    """A label's values, several at once; "All" is ``.*``, which also matches series without
    the label (a static scrape config has no namespace or pod)."""
    return {"name": name, "label": name, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "current": {"text": "All", "value": "$__all"}, "includeAll": True, "allValue": ".*",
            "multi": True, "hide": 0, "sort": 1}


def build() -> dict[str, Any]:
    rate = "$__rate_interval"
    panels = [
        panel(1, "Profile in force",
              "Which batching profile is live, per sidecar (1 = in force). With one sidecar per pod, "
              "each replica is a row.",
              [(f"autobatch_active_profile{{{M}}} == 1", "{{instance}} {{profile}}")],
              unit="none", kind="state-timeline", x=0, y=0, w=24, h=6),
        panel(2, "Replicas on each profile",
              "How many sidecars have each profile in force.",
              [(f"sum by (profile) (autobatch_active_profile{{{M}}})", "{{profile}}")],
              unit="none", stack=True, x=0, y=6),
        panel(3, "Switches by reason",
              "Profile switches applied, by the policy's reason: survival (overload, forecast, "
              "saturation, shared), protective (slo_breach, failures, relief), efficiency (efficiency, "
              "self_inflicted_wait, low_load, no_gain) and pin.",
              [(f"sum by (reason) (increase(autobatch_switches_total{{{M}}}[{rate}]))", "{{reason}}")],
              unit="short", bars=True, x=12, y=6),
        panel(4, "Decisions by reason",
              "Every tick's decision, per second, by reason: holds (steady, dwell, confirming, "
              "saturated, stale, no_data, ...) and switches.",
              [(f"sum by (reason) (rate(autobatch_decisions_total{{{M}}}[{rate}]))", "{{reason}}")],
              unit="reqps", stack=True, x=0, y=14),
        panel(5, "p95 against the SLO",
              "The window's p95 latency (worst sidecar) and slo.p95_ms.",
              [(f"max({window('p95_ms')})", "p95"),
               (f"max(autobatch_slo_p95_ms{{{M}}})", "SLO")],
              unit="ms", x=12, y=14),
        panel(6, "Queue time against the profile's max delay",
              "Mean time a request waits in Triton's queue, and the max_queue_delay of the profile "
              "in force. Near the delay with small batches: self-inflicted waiting; far above it: "
              "saturation.",
              [(f"max({window('mean_queue_ms')})", "mean queue time"),
               (f"max({of_active('autobatch_profile_max_queue_delay_ms')})", "profile's max delay")],
              unit="ms", x=0, y=22),
        panel(7, "Mean batch against the preferred size",
              "Requests per execution, and the largest preferred batch size of the profile in force.",
              [(f"max({window('mean_batch_size')})", "mean batch"),
               (f"max({of_active('autobatch_profile_preferred_batch_size')})", "preferred size")],
              unit="none", x=12, y=22),
        panel(8, "Arrival rate against the current profile's capacity",
              "Requests arriving per second (and the forecast the policy plans with) against what "
              "the profile in force can carry on this model and device (from the batch curve).",
              [(f"sum({window('arrival_rps')})", "arrival"),
               (f"sum({window('forecast_rps')})", "forecast"),
               (f"sum({of_active('autobatch_capacity_rps')})", "capacity of the profile in force")],
              unit="reqps", x=0, y=30),
        panel(9, "Device time per request",
              "Accelerator time per request (batch compute time shared out over its requests), and "
              "the share of the time the device was busy. What a larger batch saves.",
              [(f"max({window('device_ms_per_request')})", "device ms per request"),
               (f"max({window('busy_share')}) * 100", "busy %")],
              unit="ms", x=12, y=30),
        panel(10, "Actuation durations",
              "p95 wall time of applying a profile (load, verify, rollback), by outcome.",
              [(f"histogram_quantile(0.95, sum by (le, outcome) "
                f"(rate(autobatch_actuation_duration_seconds_bucket{{{M}}}[{rate}])))", "p95 {{outcome}}")],
              unit="s", x=0, y=38),
        panel(11, "Actuation failures",
              "Profile applications that failed, by reason (rejected, verify_failed, timeout, "
              "unreachable, ...). Each was rolled back or left the old profile serving.",
              [(f"sum by (reason) (increase(autobatch_actuation_failures_total{{{M}}}[{rate}]))",
                "{{reason}}")],
              unit="short", bars=True, x=12, y=38),
        # -- Triton's own view, per pod ---------------------------------------------------
        panel(12, "Triton: queue time per request",
              "Mean time a request waited in Triton's queue, per pod (nv_inference_queue_duration_us "
              "over nv_inference_request_success): what the sidecar's queue-time window reads, "
              "straight from each Triton.",
              [(per_request_ms("nv_inference_queue_duration_us"), "{{pod}} {{instance}}")],
              unit="ms", x=0, y=46),
        panel(13, "Triton: compute time per request",
              "Mean time the model computed per request, per pod (nv_inference_compute_infer_duration_us "
              "over nv_inference_request_success): a batch's time shared out over its requests. "
              "It rises when the device is shared or saturated.",
              [(per_request_ms("nv_inference_compute_infer_duration_us"), "{{pod}} {{instance}}")],
              unit="ms", x=12, y=46),
        panel(14, "Triton: inference rate",
              "Per pod: inferences (rows) per second, requests per second and model executions "
              "(batches) per second. Inferences over executions is the mean batch.",
              [(triton("nv_inference_count"), "inferences {{pod}} {{instance}}"),
               (triton("nv_inference_request_success"), "requests {{pod}} {{instance}}"),
               (triton("nv_inference_exec_count"), "executions {{pod}} {{instance}}")],
              unit="reqps", x=0, y=54),
        panel(15, "Accelerator utilisation",
              "GPU utilisation from Triton (nv_gpu_utilization, refreshed every --metrics-interval-ms) "
              "or from dcgm-exporter (DCGM_FI_DEV_GPU_UTIL), and Triton's CPU utilisation. A CPU-only "
              "Triton exports no GPU series: absent, never zero.",
              [(f"max by (pod, instance, gpu_uuid) (nv_gpu_utilization{{{NS}}}) * 100", "GPU {{pod}} {{gpu_uuid}}"),
               (f"max by (Hostname, gpu, UUID) (DCGM_FI_DEV_GPU_UTIL{{{NS}}})", "GPU {{Hostname}} {{gpu}} (dcgm)"),
               (f"max by (pod, instance) (nv_cpu_utilization{{{NS}}}) * 100", "CPU {{pod}} {{instance}}")],
              unit="percent", x=12, y=54),
    ]
    return {
        "uid": "autobatch",
        "title": "autobatch: Triton batching profiles",
        "description": "The autobatch sidecar and the Triton model it tunes (deploy/grafana/build.py).",
        "tags": ["autobatch", "triton"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            {"name": "model", "label": "model", "type": "query", "datasource": DS,
             "query": {"query": "label_values(autobatch_slo_p95_ms, model)", "refId": "model"},
             "definition": "label_values(autobatch_slo_p95_ms, model)", "refresh": 2, "current": {},
             "includeAll": False, "multi": False, "hide": 0, "sort": 1},
            variable("namespace", 'label_values(autobatch_slo_p95_ms{model="$model"}, namespace)'),
            variable("pod", 'label_values(nv_inference_count{model="$model",namespace=~"$namespace"}, pod)'),
        ]},
        "annotations": {"list": [
            {"name": "switches", "datasource": DS, "enable": True, "iconColor": "orange",
             "expr": f"changes(autobatch_switches_total{{{M}}}[1m]) > 0",
             "titleFormat": "switch to {{to}}", "textFormat": "{{reason}}"},
        ]},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def render_configmap(dashboard: str) -> str:
    """The dashboard in a ConfigMap the Grafana dashboard sidecar loads (label grafana_dashboard)."""
    body = "\n".join("    " + line if line else "" for line in dashboard.rstrip("\n").split("\n"))
    return (
        "# Written by deploy/grafana/build.py from the dashboard it builds: do not edit, run it.\n"
        "# kube-prometheus-stack's Grafana loads every ConfigMap labelled grafana_dashboard: \"1\"\n"
        "# (its dashboard sidecar; if it searches only Grafana's namespace, apply this one there).\n"
        "apiVersion: v1\n"
        "kind: ConfigMap\n"
        "metadata:\n"
        "  name: autobatch-dashboard\n"
        "  labels:\n"
        "    app.kubernetes.io/name: autobatch\n"
        '    grafana_dashboard: "1"\n'
        "data:\n"
        "  autobatch.json: |\n"
        f"{body}\n"
    )


if __name__ == "__main__":
    text = render()
    outputs = {OUT: text, CONFIGMAP: render_configmap(text)}
    if "--check" in sys.argv[1:]:
        stale = [str(path) for path, want in outputs.items() if not path.is_file() or path.read_text() != want]
        if stale:
            print(f"{', '.join(stale)}: not what deploy/grafana/build.py writes: run it", file=sys.stderr)
            sys.exit(1)
        sys.exit(0)
    for path, want in outputs.items():
        path.write_text(want)
        print(f"wrote {path}")
