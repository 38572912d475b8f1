"""Write deploy/grafana/autobatch.json, the Grafana dashboard of the sidecar and its Triton.

    python deploy/grafana/build.py          # rewrites autobatch.json
    python deploy/grafana/build.py --check  # exit 1 if autobatch.json differs

The dashboard is plain JSON built here (no SDK needed to read or change it);
tests/test_dashboard.py checks the committed file is this script's output, and
tests/unit/test_monitoring.py runs every panel's query, variables filled in, on a real
Prometheus scraping a real Triton and a running sidecar.

Variables: ``datasource`` (a Prometheus) and ``model`` (from ``autobatch_slo_p95_ms``).
Series of several sidecars (one per pod) are summed where they add up (rates,
replicas on a profile) and maxed where the worst replica matters (p95, queue time).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("autobatch.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
M = 'model="$model"'


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


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        if OUT.read_text() != text:
            print(f"{OUT} is not what deploy/grafana/build.py writes: run it", file=sys.stderr)
            sys.exit(1)
        sys.exit(0)
    OUT.write_text(text)
    print(f"wrote {OUT}")
