"""The shared rule's prediction of the climbed rung's p95 against that rung held, over saved runs.

    .venv/bin/python benchmarks/shared_prediction.py [--profile wait25] [--since 20261205] [--json]

Reads every saved side-by-side result with co-tenants under
``benchmarks/results/shared_gpu/`` (from ``--since`` on) and its controllers'
decision logs. For each tick of a controller on ``--profile`` while others used
at least ``--others`` of the device (the shared rule's condition), 3 s or more
into its phase, it takes the tick's ``p95_predicted_ms`` of that profile and
the p95 the same profile held measured in the same phase of the same repeat.
Per phase rate and co-tenant count: the ticks, the median prediction and its
10th-90th percentile, the held p95's median, their difference, the stretch,
and how many ticks predicted over the SLO. Reads only; writes nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from autobatch.lab.compare import decision_time_s

RESULTS = Path(__file__).resolve().parent / "results" / "shared_gpu"
LOG = re.compile(r"(\d{8}-\d{6})-(.+)-r(\d+)-g(\d+)-(.+)\.jsonl\.gz")


def _phases(data: dict[str, Any]) -> list[tuple[float, float, dict[str, Any]]]:
    out, t = [], 0.0
    for ph in data["phases"]:
        if ph["name"] == "lead-in":
            continue
        out.append((t, t + ph["duration_s"], ph))
        t += ph["duration_s"]
    return out


def ticks(profile: str, since: str, others: float, settle_s: float = 3.0) -> Iterator[dict[str, Any]]:
    """Every tick on ``profile`` with others at least ``others`` of the device, 3 s into a phase."""
    for res in sorted(RESULTS.glob("*.json")):
        if res.stem[:8] < since:
            continue
        data = json.loads(res.read_text(encoding="utf-8"))["data"]
        if not any(p.get("cotenants") for p in data["phases"]):
            continue
        bounds = _phases(data)
        for log in sorted((RESULTS / "logs").glob(f"{res.stem}-*.jsonl.gz")):
            m = LOG.fullmatch(log.name)
            if m is None:
                continue
            _, _, repeat, group, mode = m.groups()
            run = next(r for r in data["runs"] if r["repeat"] == int(repeat))
            held = [g["modes"][profile] for g in run["groups"] if profile in g["modes"]]
            if int(group) >= len(run["groups"]) or mode not in run["groups"][int(group)]["modes"] or not held:
                continue
            ran = run["groups"][int(group)]["modes"][mode]
            with gzip.open(log, "rt", encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    d = row.get("decision") or {}
                    sig = d.get("signals") or {}
                    pred = (sig.get("p95_predicted_ms") or {}).get(profile)
                    if (d.get("current") or row.get("active")) != profile or pred is None:
                        continue
                    if (sig.get("others_share") or 0.0) < others:
                        continue
                    # the run's clock (monotonic where the line carries it), from the lead-in's end
                    t = decision_time_s(row, ran["t0_wall"], ran.get("t0_mono")) - data["lead_in_s"]
                    phase = next((ph for lo, hi, ph in bounds if lo + settle_s <= t < hi), None)
                    if phase is None:
                        continue
                    measured = next(p for p in held[0]["phases"] if p["name"] == phase["name"])
                    yield {"result": res.stem, "schedule": data["schedule"], "mode": mode,
                           "phase": phase["name"], "rate_rps": phase["rate_rps"],
                           "cotenants": phase.get("cotenants") or 0, "predicted_ms": pred,
                           "held_p95_ms": measured["p95_ms"], "stretch": sig.get("stretch"),
                           "action": d.get("action"), "reason": d.get("reason")}


def _q(xs: Sequence[float], f: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]


def table(rows: Sequence[dict[str, Any]], slo_ms: float) -> list[dict[str, Any]]:
    by: dict[tuple[float, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["rate_rps"], r["cotenants"])].append(r)
    out = []
    for (rate, cot), xs in sorted(by.items()):
        pred = [x["predicted_ms"] for x in xs]
        held = statistics.median(x["held_p95_ms"] for x in xs)
        st = [x["stretch"] for x in xs if x["stretch"] is not None]
        out.append({"rate_rps": rate, "cotenants": cot, "ticks": len(xs),
                    "predicted_median_ms": round(statistics.median(pred), 1),
                    "predicted_p10_ms": round(_q(pred, 0.1), 1), "predicted_p90_ms": round(_q(pred, 0.9), 1),
                    "held_p95_median_ms": round(held, 1),
                    "difference_ms": round(statistics.median(pred) - held, 1),
                    "stretch_p10": round(_q(st, 0.1), 2) if st else None,
                    "stretch_p90": round(_q(st, 0.9), 2) if st else None,
                    "over_slo_ticks": sum(1 for p in pred if p > slo_ms),
                    "results": len({x["result"] for x in xs})})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="wait25")
    ap.add_argument("--since", default="20261205", help="the first result's date, YYYYMMDD")
    ap.add_argument("--others", type=float, default=0.2, help="the others' least share of the device")
    ap.add_argument("--slo", type=float, default=60.0, help="the SLO's p95, ms")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = table(list(ticks(args.profile, args.since, args.others)), args.slo)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return
    print("| phase's rate | co-tenants | ticks | predicted p95, median (10th-90th) | held p95, median "
          f"| difference | stretch (10th-90th) | ticks over {args.slo:g} ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rate_rps']:g}/s | {r['cotenants']} | {r['ticks']} | {r['predicted_median_ms']} "
              f"({r['predicted_p10_ms']}-{r['predicted_p90_ms']}) | {r['held_p95_median_ms']} "
              f"| {r['difference_ms']:+.1f} | {r['stretch_p10']}-{r['stretch_p90']} "
              f"| {r['over_slo_ticks']} |")


if __name__ == "__main__":
    main()
