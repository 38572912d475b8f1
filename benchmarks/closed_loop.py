"""The same step load, three ways: static latency-soft, static aggressive, the controller.

    .venv/bin/python benchmarks/closed_loop.py [--schedule examples/schedules/step.yaml] [--json]

One embedded Triton serves dense_mlp; each run starts from its profile (the
controller's from latency-soft) and drives the step load of the demo. Per
phase: p50/p95/p99 and throughput seen by the clients, the share of requests
over the SLO, failures, and for the controller how long after a phase began it
switched. For the controller run it also compares the p99 of requests in flight
during a reload swap with the p99 of all other requests. Everything is measured
side by side in one run on the same server, so the ratios hold on a noisy machine
even where the absolute figures move.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from autobatch.cli.views import summary_table
from autobatch.lab.closed_loop import ClosedLoopResult, apply_static, latencies_during, run_closed_loop
from autobatch.lab.demo import demo_sidecar_config
from autobatch.lab.serve import TritonServer
from autobatch.profiles import load_profile
from autobatch.schedule import load_schedule

ROOT = Path(__file__).resolve().parents[1]
MODEL = "dense_mlp"


def swap_tails(result: ClosedLoopResult) -> dict[str, float | int | None]:
    windows = [(s.t_s, s.t_s + (s.duration_s or 0.0)) for s in result.switches if s.ok]
    during = latencies_during(result.report.records, windows)
    every = np.array([r.latency_ms for r in result.report.records if r.ok and r.latency_ms is not None])
    if windows:
        in_swap = {r.index for r in result.report.records
                   if r.sent_s is not None and r.latency_ms is not None
                   and any(r.sent_s < b and r.sent_s + r.latency_ms / 1000 > a for a, b in windows)}
        steady = np.array([r.latency_ms for r in result.report.records
                           if r.ok and r.latency_ms is not None and r.index not in in_swap])
    else:
        steady = every

    def p99(a: np.ndarray) -> float | None:
        return float(np.percentile(a, 99)) if len(a) else None

    return {"swaps": len(windows), "p99_during_swaps_ms": p99(during), "p99_steady_ms": p99(steady),
            "requests_during_swaps": int(len(during))}


async def main_async(args: argparse.Namespace, console: Console) -> dict:
    schedule = load_schedule(args.schedule)
    results: dict[str, ClosedLoopResult] = {}
    with tempfile.TemporaryDirectory(prefix="autobatch-bench-") as tmp, \
            TritonServer.on_free_ports(ROOT / "model_repository", models=[MODEL]) as server:
        cfg = demo_sidecar_config(server, Path(tmp))
        slo = cfg.policy.slo_p95_ms
        for mode in ("latency-soft", "aggressive", "controller"):
            start = "latency-soft" if mode == "controller" else mode
            profile = load_profile(ROOT / "profiles" / MODEL / f"{start}.yaml")
            await apply_static(server.urls.http, MODEL, profile)
            console.print(f"[bold]{mode}[/]: {schedule.duration_s:.0f} s of load ...")
            results[mode] = await run_closed_loop(
                schedule, server.urls.grpc, MODEL, sidecar=cfg if mode == "controller" else None,
                slo_p95_ms=slo, mode=mode,
            )
    out = {mode: r.to_dict() for mode, r in results.items()}
    out["controller"]["swap_tails"] = swap_tails(results["controller"])
    if args.json:
        print(json.dumps(out, indent=2))
        return out
    for mode, r in results.items():
        console.print(summary_table(r, f"{mode}"))
    comp = Table(title=f"side by side: SLO p95 {slo:g} ms, requests over it / p95 ms / done per s")
    comp.add_column("phase")
    for mode in results:
        comp.add_column(mode, justify="right")
    for i, phase in enumerate(schedule.phases):
        row = [phase.name]
        for r in results.values():
            p = r.phases[i]
            over = p.over_slo / max(p.requests, 1)
            row.append(f"{over:.1%} / {p.p95_ms or 0:.0f} / {p.throughput_rps:.0f}")
        comp.add_row(*row)
    console.print(comp)
    tails = out["controller"]["swap_tails"]
    if tails["swaps"]:
        console.print(
            f"controller: {tails['swaps']} reload swaps; p99 of the {tails['requests_during_swaps']} "
            f"requests in flight during a swap {tails['p99_during_swaps_ms']:.0f} ms vs "
            f"{tails['p99_steady_ms']:.0f} ms for all others "
            f"({tails['p99_during_swaps_ms'] / tails['p99_steady_ms']:.1f}x)"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedule", type=Path, default=ROOT / "examples" / "schedules" / "step.yaml")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    console = Console(stderr=args.json, width=140)
    asyncio.run(main_async(args, console))


if __name__ == "__main__":
    main()
