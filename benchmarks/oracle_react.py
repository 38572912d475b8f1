"""The oracle's reaction two ways: the verdict's, and the controller's capability.

    .venv/bin/python benchmarks/oracle_react.py [--since 20261206] [--json]

A side-by-side run's oracle (``lab/compare.oracle``) reaches each phase's best
static profile after the controller's measured reaction: the median, over all
its switches, of the time from the phase's start to the switch's end. Late moves
lengthen it. This recomputes each saved result's verdicts from its phases and
decision logs (``shared_gpu_reverdict.reverdict``) with the reaction a
controller is capable of instead, two windows plus the median actuation of its
own switches (``capability_react_s``), and sets the two ratios to the oracle side
by side: per result and controller, the median and range over the repeats.
Reads only; writes nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared_gpu_reverdict import reverdict
from shared_prediction import emit

from autobatch.lab.compare import DEVICE_VS_ORACLE
from autobatch.lab.sidebyside.run import capability_react_s

RESULTS = Path(__file__).resolve().parent / "results" / "shared_gpu"


def compare(path: Path) -> list[dict[str, Any]]:
    """Per controller of the result at ``path``: the ratio to the oracle (median, min, max over
    the repeats) with the verdict's reaction and with the capability's."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    new = reverdict(path, capability_react_s)[0]["data"]["summary"]  # 1 s windows, as every run
    out = []
    for mode, old in data["summary"].items():
        if mode == "single_static" or (old.get("device_vs_oracle") or {}).get("median") is None:
            continue
        a, b = old["device_vs_oracle"], new[mode]["device_vs_oracle"]
        out.append({"result": path.stem, "schedule": data["schedule"], "mode": mode,
                    "verdict": [a["median"], min(a["values"]), max(a["values"])],
                    "capability": [b["median"], min(b["values"]), max(b["values"])],
                    "median_change": b["median"] - a["median"],
                    "target_flips": (a["median"] <= DEVICE_VS_ORACLE) != (b["median"] <= DEVICE_VS_ORACLE)})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--since", default="20261206", help="the first result's date, YYYYMMDD")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [r for p in sorted(RESULTS.glob("*.json")) if p.stem[:8] >= args.since for r in compare(p)]

    def span(x: list[float]) -> str:
        return f"{x[0]:.3f} ({x[1]:.3f}-{x[2]:.3f})"

    emit(rows, args.json, ["result", "schedule", "controller", "vs oracle, the verdict's reaction",
                           "at the capability's", "median change", "1.1x verdict flips"],
         lambda r: [r["result"], r["schedule"], r["mode"], span(r["verdict"]), span(r["capability"]),
                    f"{r['median_change']:+.3f}", "yes" if r["target_flips"] else "no"])
    if not args.json and rows:
        changes = [r["median_change"] for r in rows]
        print(f"\n{len(rows)} controller summaries: median change {min(changes):+.3f} to "
              f"{max(changes):+.3f}; 1.1x verdict flips: {sum(r['target_flips'] for r in rows)}")


if __name__ == "__main__":
    main()
