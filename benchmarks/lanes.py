"""Priority lanes on the real Triton: what the urgent lane gains and the batchable lane pays.

    .venv/bin/python benchmarks/lanes.py            # ~2 min
    .venv/bin/python benchmarks/lanes.py --cycles 1 --duration 4

The shipped two-lane profile (profiles/emulated_accelerator/lanes.yaml, written by
`autobatch plan --priority-mix`) on the emulated accelerator with its own curve,
against the same batching on one level (one FIFO queue), interleaved, ``--cycles``
times each, under two loads:

- backlog: bulk work in bursts of 128 requests (150/s on average) and urgent
  requests at 20/s (priority 1): the case lanes are for;
- steady: 330 requests/s Poisson, 10% urgent: the load the profile was planned
  for, where the plan predicts a small gain for the urgent lane.

Per lane, client p50/p95/p99 (medians over the cycles) and the mean batch
Triton executed, next to what the simulator predicts for the steady load
(``autobatch plan --priority-mix``, with the overheads the profile was planned
with).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from record import row, save_result
from rich.console import Console
from rich.table import Table

from autobatch.curve import load_curve
from autobatch.plan.lanes import plan_lanes
from autobatch.plan.simulator import ServiceModel
from autobatch.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
MODEL = "emulated_accelerator"
LANES = load_profile(ROOT / "profiles" / MODEL / "lanes.yaml")
ONE_QUEUE = replace(LANES, name="one-queue", priority_levels=0, default_priority_level=0)
CURVE = load_curve(ROOT / "model_repository" / MODEL / "curve.yaml")
LOADS = {
    "backlog": {"urgent_rps": 20.0, "batchable_rps": 150.0, "batchable_burst": 128},
    "steady": {"urgent_rps": 33.0, "batchable_rps": 297.0, "batchable_burst": 0},
}


def measure(duration_s: float, cycles: int) -> dict[str, Any]:
    from autobatch.lab.lanes import run_lanes
    from autobatch.lab.serve import TritonServer

    runs: dict[str, dict[str, list[dict[str, Any]]]] = {k: {"lanes": [], "one-queue": []} for k in LOADS}
    with TritonServer.on_free_ports(ROOT / "model_repository", models=[MODEL]) as server:
        for cycle in range(cycles):
            for load, kwargs in LOADS.items():
                for prof in (LANES, ONE_QUEUE):
                    server.load_emulator(CURVE, prof)
                    r = run_lanes(server.urls.grpc, server.urls.http, MODEL, duration_s=duration_s,
                                  seed=3 + cycle, **kwargs)
                    runs[load][prof.name].append(r.to_dict())
    return runs


def _median(runs: list[dict[str, Any]], lane: str, q: str) -> float:
    return float(statistics.median(r[lane]["latency_ms"][q] for r in runs))


def summary(runs: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for load, by_profile in runs.items():
        for name, rs in by_profile.items():
            out.append({
                "load": load, "profile": name, "runs": len(rs),
                **{f"{lane}_{q}_ms": round(_median(rs, lane, q), 1)
                   for lane in ("urgent", "batchable") for q in ("p50", "p95", "p99")},
                "mean_batch": round(statistics.median(r["mean_batch"] for r in rs), 2),
            })
    return out


def predicted() -> dict[str, Any]:
    service = ServiceModel(CURVE, batch_overhead_ms=1.2, request_overhead_ms=0.1, fixed_latency_ms=2.0)
    lanes = plan_lanes(replace(ONE_QUEUE, name="aggressive"), service, 330.0, {1: 0.1, 2: 0.9})
    return lanes.to_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=6.0, help="seconds per run")
    ap.add_argument("--cycles", type=int, default=3, help="runs per load and profile, interleaved")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    console = Console(stderr=args.json, width=160)
    with console.status("lanes on the real Triton ..."):
        runs = measure(args.duration, args.cycles)
    rows = summary(runs)
    data = {"profile": LANES.to_dict(), "loads": LOADS, "duration_s": args.duration, "cycles": args.cycles,
            "summary": rows, "runs": runs, "predicted_steady": predicted()}
    save_result("lanes", data, _rows(rows, args.cycles))
    if args.json:
        print(json.dumps(data, indent=2))
        return
    t = Table(title=f"Priority lanes on {MODEL} (profiles/{MODEL}/lanes.yaml vs one queue), medians of "
              f"{args.cycles} x {args.duration:g} s")
    for col in ("load", "profile", "urgent p50", "p95", "p99", "batchable p50", "p95", "p99", "mean batch"):
        t.add_column(col, justify="left" if col in ("load", "profile") else "right")
    for r in rows:
        t.add_row(r["load"], r["profile"], *(f"{r[f'{lane}_{q}_ms']:.1f}" for lane in ("urgent", "batchable")
                                              for q in ("p50", "p95", "p99")), f"{r['mean_batch']:.2f}")
    console.print(t)
    p = data["predicted_steady"]
    console.print(f"predicted (steady 330 rps): {json.dumps(p['lanes'])}")


def _rows(rows: list[dict[str, Any]], cycles: int) -> list[dict[str, Any]]:
    by = {(r["load"], r["profile"]): r for r in rows}
    lanes, one = by[("backlog", "lanes")], by[("backlog", "one-queue")]
    s_lanes, s_one = by[("steady", "lanes")], by[("steady", "one-queue")]
    return [row(
        f"priority lanes (profiles/{MODEL}/lanes.yaml) vs one queue, real Triton: bulk bursts of 128 "
        f"(150/s) + urgent 20/s; and 330 rps Poisson, 10% urgent (medians of {cycles} runs)",
        f"bursts: urgent p95 **{lanes['urgent_p95_ms']:.0f} ms** vs {one['urgent_p95_ms']:.0f} ms; batchable "
        f"p95 {lanes['batchable_p95_ms']:.0f} vs {one['batchable_p95_ms']:.0f} ms. Poisson: urgent p95 "
        f"{s_lanes['urgent_p95_ms']:.0f} vs {s_one['urgent_p95_ms']:.0f} ms, batchable p95 "
        f"{s_lanes['batchable_p95_ms']:.0f} vs {s_one['batchable_p95_ms']:.0f} ms",
        key="lanes_backlog_urgent_p95_ratio",
        value=round(lanes["urgent_p95_ms"] / one["urgent_p95_ms"], 3))]


if __name__ == "__main__":
    main()
