"""Does a copy reached by a reload under load run as a static one? Device time per request
of ``efficient`` loaded fresh and of ``efficient`` reached by a reload from Triton's default
while the load runs, alternated in one run on one server.

    .venv/bin/python benchmarks/reload_cost.py [--rate 200] [--pairs 2] [--instances 2]
        [--no-save]

In the closed-loop runs the reload controller's ``efficient`` phases read 0-23% more
device time per request than static ``efficient``'s in the same phases; the sidecar's
own watching is 2% of that (``overhead.py``) and warming the instances up is about 2%.
This one isolates the reload: the bench of ``closed_loop.py`` (dense_mlp with
``--instances`` instances, HAProxy in front) runs four 10 s phases at ``--rate``
requests/s, ``--pairs`` times each of three ways, alternated: ``static`` (efficient,
loaded and warmed up before), ``reload`` (Triton's default, loaded and warmed up,
reloaded to efficient 5 s in by the sidecar's own reload actuator, over gRPC, with no
warm-up) and ``default`` (Triton's default held, what the first phase of ``reload``
mostly runs). Per phase: device ms per request and the mean batch; then the phases after
the reload against static ``efficient``'s same phases (the copy), and the reload's phase
against the default's and static's (the swap itself).

Saved with record.save_result as benchmarks/results/reload_cost/<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from autobatch.actuators.triton import TritonReloadActuator
from autobatch.lab.closed_loop import run_closed_loop
from autobatch.lab.device import DeviceMeter
from autobatch.profiles import load_profiles
from autobatch.schedule import Phase, Schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from closed_loop import MODEL, RELOAD_SERVER, ROOT, Bench, with_count  # noqa: E402
from record import row, save_result  # noqa: E402

RELOAD_AT_S = 5.0
PHASES = 4
PHASE_S = 10.0


async def _reload(bench: Bench, profile: Any, instances: int) -> float:
    """Reload the serving model to ``profile`` with the sidecar's own reload actuator (over
    gRPC, verified as it verifies); the seconds the load took."""
    await asyncio.sleep(RELOAD_AT_S)
    target = with_count(profile, instances)
    actuator = TritonReloadActuator(bench.triton.urls.http, MODEL, [target],
                                    grpc_url=bench.triton.urls.grpc, load_timeout_s=60.0)
    try:
        result = await actuator.apply(target)
    finally:
        await actuator.aclose()
    if not result.ok:
        raise RuntimeError(f"the reload to {target.name} failed: {result.message}")
    return result.load_s if result.load_s is not None else result.duration_s


async def one(bench: Bench, way: str, profiles: dict[str, Any], rate: float, instances: int,
              seed: int) -> dict[str, Any]:
    start = profiles["efficient"] if way == "static" else profiles["triton-default"]
    await bench.route_to(RELOAD_SERVER)
    await bench.fresh(MODEL, start)
    schedule = Schedule(tuple(Phase(f"{PHASE_S * i:g}-{PHASE_S * (i + 1):g} s", rate, PHASE_S)
                              for i in range(PHASES)))
    meter = DeviceMeter(bench.triton.urls.http, [MODEL])
    task = asyncio.create_task(_reload(bench, profiles["efficient"], instances)) if way == "reload" else None
    try:
        r = await run_closed_loop(schedule, bench.listen, MODEL, sidecar=None, slo_p95_ms=60.0,
                                  mode=way, protocol="http", device=meter, seed=seed)
    finally:
        await meter.aclose()
        took = await task if task is not None else None
    return {"way": way, "reload_s": took,
            "device_ms": [p.device_ms for p in r.phases], "mean_batch": [p.mean_batch for p in r.phases],
            "p95_ms": [p.p95_ms for p in r.phases]}


def _mean(runs: list[dict[str, Any]], way: str, phases: range) -> float | None:
    vals = [r["device_ms"][i] for r in runs if r["way"] == way for i in phases
            if r["device_ms"][i] is not None]
    return statistics.fmean(vals) if vals else None


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The copy: the phases that begin after the slowest reload ended, static against reloaded;
    the swap: the phases before, the reload's against the default held and static's."""
    took = [r["reload_s"] for r in runs if r["way"] == "reload" and r["reload_s"] is not None]
    first = min(PHASES, max(1, math.ceil((RELOAD_AT_S + max(took, default=0.0)) / PHASE_S - 1e-9)))
    after, swap = range(first, PHASES), range(first)
    out = {
        "after_from_s": first * PHASE_S,
        "static_after_ms": _mean(runs, "static", after),
        "reload_after_ms": _mean(runs, "reload", after),
        "static_first_ms": _mean(runs, "static", swap),
        "reload_first_ms": _mean(runs, "reload", swap),
        "default_first_ms": _mean(runs, "default", swap),
        "reload_s": [r["reload_s"] for r in runs if r["way"] == "reload"],
    }
    s, r = out["static_after_ms"], out["reload_after_ms"]
    out["after_ratio"] = None if not s or r is None else r / s
    per_run = [statistics.fmean(x["device_ms"][i] for i in after) for x in runs
               if x["way"] == "static" and after]
    out["static_spread"] = (max(per_run) - min(per_run)) / statistics.fmean(per_run) if per_run else None
    return out


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    available = load_profiles(ROOT / "profiles" / MODEL)
    profiles = {n: available[n] for n in ("triton-default", "efficient")}
    runs: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="ab-reload-cost-"))
    try:
        with contextlib.ExitStack() as stack:
            console.print(f"dense_mlp x {args.instances}: starting Triton and HAProxy ...")
            bench = Bench(args.instances, list(profiles.values()), [], tmp, stack)
            k = 0
            for _ in range(args.pairs):
                for way in ("static", "reload", "default"):
                    console.print(f"  {way}: {PHASE_S * PHASES:g} s at {args.rate:g}/s ...", style="dim")
                    runs.append(await one(bench, way, profiles, args.rate, args.instances, args.seed + k))
                    k += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"model": MODEL, "instances": args.instances, "rate_rps": args.rate,
            "reload_at_s": RELOAD_AT_S, "runs": runs, "summary": summary(runs)}


def report(out: dict[str, Any], console: Console) -> list[dict[str, Any]]:
    t = Table(title=f"dense_mlp x {out['instances']} at {out['rate_rps']:g}/s: device ms per request "
                    f"(mean batch) per 10 s phase; the reload {out['reload_at_s']:g} s in")
    t.add_column("way")
    for i in range(PHASES):
        t.add_column(f"{PHASE_S * i:g}-{PHASE_S * (i + 1):g} s")
    t.add_column("reload s")
    for r in out["runs"]:
        cells = [f"{d:.2f} ({b:.1f})" if d is not None and b is not None else "-"
                 for d, b in zip(r["device_ms"], r["mean_batch"])]
        t.add_row(r["way"], *cells, "-" if r["reload_s"] is None else f"{r['reload_s']:.1f}")
    console.print(t)
    s = out["summary"]
    if s["after_ratio"] is None:
        console.print("no device time read")
        return []
    line = (f"efficient after a reload under load: {s['after_ratio']:.2f}x static efficient's device time "
            f"({s['reload_after_ms']:.2f} vs {s['static_after_ms']:.2f} ms, phases "
            f"{s['after_from_s']:g}-{PHASES * PHASE_S:g} s, after the slowest reload of "
            f"{max(t for t in s['reload_s'] if t is not None):.1f} s ended; static runs spread "
            f"{s['static_spread']:.0%}); the reload's own phases {s['reload_first_ms']:.2f} ms "
            f"against {s['default_first_ms']:.2f} (default held) and {s['static_first_ms']:.2f} (static)")
    console.print(line)
    return [row(f"reload cost: dense_mlp x {out['instances']} at {out['rate_rps']:g}/s, efficient reached "
                "by a reload under load vs loaded fresh, device time", line,
                key=f"reload_cost_after_x{out['instances']}_{out['rate_rps']:g}",
                value=round(s["after_ratio"], 3), unit="x")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=200.0, help="requests/s (200)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of each way, alternated (2)")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    console = Console(width=140)
    out = asyncio.run(main_async(args, console))
    rows = report(out, console)
    if not args.no_save:
        save_result("reload_cost", out, rows)


if __name__ == "__main__":
    main()
