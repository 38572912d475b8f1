"""Write deploy/k8s/monitoring/prometheusrule.yaml: rules.yaml wrapped in a PrometheusRule.

    python deploy/prometheus/build.py          # rewrites it
    python deploy/prometheus/build.py --check  # exit 1 if it differs

rules.yaml is the one source: promtool checks and tests it, a plain Prometheus loads it,
and prometheus-operator gets the same groups in ``spec.groups`` (tests/unit/test_monitoring.py
checks the committed PrometheusRule is this script's output). The overlays label it
``release`` for kube-prometheus-stack's ruleSelector (components/settings).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

RULES = Path(__file__).with_name("rules.yaml")
OUT = Path(__file__).resolve().parents[1] / "k8s" / "monitoring" / "prometheusrule.yaml"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, as rules.yaml writes them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def build() -> dict[str, Any]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "autobatch", "labels": {"app.kubernetes.io/name": "autobatch"}},
        "spec": {"groups": groups},
    }


def render() -> str:
    head = ("# Written by deploy/prometheus/build.py from deploy/prometheus/rules.yaml: do not edit,\n"
            "# edit rules.yaml and run it.\n")
    return head + yaml.dump(build(), Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is not what deploy/prometheus/build.py writes: run it", file=sys.stderr)
            sys.exit(1)
        sys.exit(0)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
