"""What each profile of a model carries, and at what device time: the measurements a ladder is built from.

    .venv/bin/python benchmarks/ladder.py [--instances 1,2] [--rates 30,100,200,300,400]
        [--phase-s 10] [--profiles triton-default,balanced,aggressive] [--slo-ms 60] [--json]

One embedded Triton serves dense_mlp. For each instance count and each
profile, the profile is loaded (with that ``instance_group`` count) and one
open-loop Poisson load steps through the rates, ``--phase-s`` seconds each,
lowest first. Per rate: the share of requests over the SLO, p50/p95/p99 seen by
the client, throughput, the mean batch and the device time per request (from
Triton's per-batch-size ``compute_infer`` times, :mod:`autobatch.lab.device`).
Per profile: the highest rate it carried with at most 1% of requests over the
SLO. Everything runs side by side on one server, so the ratios between profiles
hold on a noisy machine even where the absolute figures move.

docs/ladders.md says how to read it: a rung must carry the load that makes the
controller move to it (efficiency, not survival), and it earns its place only
if it saves device time at some load where it meets the SLO.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from autobatch.lab.closed_loop import apply_static
from autobatch.lab.device import DeviceMeter, DeviceTotals
from autobatch.lab.serve import TritonServer
from autobatch.load import RequestRecord, run_load
from autobatch.profiles import Profile, load_profiles
from autobatch.schedule import Phase, Schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import row, save_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "dense_mlp"
CARRY_SHARE = 0.01
"""A profile carries a rate when at most this share of its requests is over the SLO."""


class _FirstRecord:
    """The load's time origin on this clock, from its first completed request."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.event = threading.Event()

    def __call__(self, rec: RequestRecord) -> None:
        if self.t0 is None and rec.sent_s is not None and rec.latency_ms is not None:
            self.t0 = time.monotonic() - rec.sent_s - rec.latency_ms / 1000.0
            self.event.set()


async def _run_profile(server: TritonServer, schedule: Schedule, slo_ms: float, seed: int) -> dict[str, Any]:
    first = _FirstRecord()
    loop = asyncio.get_running_loop()
    load = loop.run_in_executor(None, lambda: run_load(server.urls.grpc, MODEL, schedule, seed=seed,
                                                       on_record=first))
    meter = DeviceMeter(server.urls.http, [MODEL])
    readings: list[DeviceTotals] = []
    try:
        while first.t0 is None and not load.done():
            await asyncio.sleep(0.01)
        t0 = first.t0 or time.monotonic()
        bounds = list(schedule.starts_s[1:]) + [schedule.duration_s]
        readings.append(await meter.read())
        for b in bounds:
            delay = t0 + b - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            readings.append(await meter.read())
        report = await load
    finally:
        await meter.aclose()
    phases = []
    for i, (phase, stats) in enumerate(zip(schedule.phases, report.phases)):
        mine = [r for r in report.records if r.phase_index == i]
        over = sum(1 for r in mine if not r.ok or (r.latency_ms or 0.0) > slo_ms)
        dev = readings[i + 1] - readings[i]
        phases.append({
            "rate_rps": phase.rate_rps,
            "requests": len(mine),
            "over_slo_share": over / max(len(mine), 1),
            "p50_ms": stats.p50_ms, "p95_ms": stats.p95_ms, "p99_ms": stats.p99_ms,
            "throughput_rps": stats.throughput_rps,
            "failed": stats.failed,
            "device_ms_per_request": dev.device_ms_per_request,
            "mean_batch": dev.mean_batch,
        })
    return {"phases": phases}


def parse_extra(spec: str, max_batch_size: int) -> Profile:
    """``NAME=PREFERRED/DELAY_US``, e.g. ``wait5=/5000`` (no preferred sizes) or ``b816=8,16/10000``."""
    try:
        name, rest = spec.split("=", 1)
        pref, delay = rest.split("/", 1)
        sizes = tuple(int(x) for x in pref.split(",") if x)
        return Profile(name=name, max_batch_size=max_batch_size, preferred_batch_size=sizes,
                       max_queue_delay_us=int(delay), model=MODEL, source=f"--extra {spec}")
    except ValueError:
        raise SystemExit(f"--extra = {spec!r}: must be NAME=PREFERRED/DELAY_US, e.g. b8=8/10000") from None


def carried_rps(phases: list[dict[str, Any]]) -> float:
    """The highest rate of an unbroken run from the lowest that kept within CARRY_SHARE."""
    top = 0.0
    for p in phases:
        if p["over_slo_share"] > CARRY_SHARE:
            break
        top = p["rate_rps"]
    return top


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    available = load_profiles(ROOT / "profiles" / MODEL)
    for spec in args.extra:
        extra = parse_extra(spec, available["triton-default"].max_batch_size)
        available[extra.name] = extra
    names = args.profiles.split(",") if args.profiles else sorted(available)
    names += [n for n in (spec.split("=", 1)[0] for spec in args.extra) if n not in names]
    unknown = [n for n in names if n not in available]
    if unknown:
        raise SystemExit(f"--profiles: no such profile of {MODEL}: {', '.join(unknown)}")
    rates = [float(r) for r in args.rates.split(",")]
    schedule = Schedule(tuple(Phase(f"{r:g}/s", r, args.phase_s) for r in rates))
    out: dict[str, Any] = {"model": MODEL, "slo_ms": args.slo_ms, "phase_s": args.phase_s,
                           "rates_rps": rates, "runs": {}}
    with TritonServer.on_free_ports(ROOT / "model_repository", models=[MODEL]) as server:
        for n in [int(x) for x in args.instances.split(",")]:
            for name in names:
                profile = dataclasses.replace(available[name], instance_count=n)
                await apply_static(server.urls.http, MODEL, profile)
                console.print(f"{n} instance(s), {name}: {schedule.duration_s:.0f} s of load ...",
                              style="dim")
                run = await _run_profile(server, schedule, args.slo_ms, args.seed)
                run["carried_rps"] = carried_rps(run["phases"])
                out["runs"][f"{n}/{name}"] = {"instances": n, "profile": name,
                                              "summary": profile.summary(), **run}
    return out


def print_tables(result: dict[str, Any], console: Console) -> None:
    by_n: dict[int, list[dict[str, Any]]] = {}
    for run in result["runs"].values():
        by_n.setdefault(run["instances"], []).append(run)
    for n, runs in by_n.items():
        t = Table(title=f"{result['model']}, {n} instance(s): share over the SLO ({result['slo_ms']:g} ms) "
                        f"/ p95 ms / device ms per request / mean batch")
        t.add_column("rate/s", justify="right")
        for run in runs:
            t.add_column(run["profile"], justify="right")
        for i, rate in enumerate(result["rates_rps"]):
            cells = []
            for run in runs:
                p = run["phases"][i]
                dev = p["device_ms_per_request"]
                cells.append(f"{p['over_slo_share']:.1%} / {p['p95_ms'] or 0:.0f} / "
                             f"{'-' if dev is None else f'{dev:.2f}'} / {p['mean_batch'] or 0:.1f}")
            t.add_row(f"{rate:g}", *cells)
        t.add_row("carries", *[f"{run['carried_rps']:g}/s" for run in runs])
        console.print(t)


def rows_for(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One results row per instance count: what each profile carried, and its device time at 100/s."""
    rows = []
    by_n: dict[int, list[dict[str, Any]]] = {}
    for run in result["runs"].values():
        by_n.setdefault(run["instances"], []).append(run)
    for n, runs in sorted(by_n.items()):
        parts = []
        for run in runs:
            at = next((p for p in run["phases"] if p["rate_rps"] == 100), None)
            dev = at and at["device_ms_per_request"]
            parts.append(f"{run['profile']} {run['carried_rps']:g}/s" + (f" ({dev:.2f} ms)" if dev else ""))
        rows.append(row(
            f"ladder: what each profile of {result['model']} x {n} carried with <= 1% over "
            f"{result['slo_ms']:g} ms (device ms per request at 100 req/s)",
            "; ".join(parts),
        ))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", default="1,2", help="instance counts, comma-separated (default 1,2)")
    ap.add_argument("--rates", default="30,100,200,300,400", help="Poisson rates, req/s, lowest first")
    ap.add_argument("--phase-s", type=float, default=10.0, help="seconds at each rate (default 10)")
    ap.add_argument("--profiles", default="", help="profiles of dense_mlp (default: all)")
    ap.add_argument("--extra", action="append", default=[],
                    help="an ad-hoc profile NAME=PREFERRED/DELAY_US to measure too (repeatable)")
    ap.add_argument("--slo-ms", type=float, default=60.0, help="the latency a request must beat (60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-save", action="store_true", help="do not write a result file (smoke runs)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    console = Console(stderr=args.json, width=160)
    result = asyncio.run(main_async(args, console))
    if not args.no_save:
        save_result("ladder", result, rows_for(result))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_tables(result, console)


if __name__ == "__main__":
    main()
