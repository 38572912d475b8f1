"""What the sidecar's watching costs the model it watches: device time per request with
and without a sidecar polling, alternated in one run on one server.

    .venv/bin/python benchmarks/overhead.py [--rate 240] [--seconds 30] [--pairs 3]
        [--profile efficient] [--instances 2] [--no-save]

On this machine the sidecar shares two cores with Triton's instances and the load
generator, and device time is Triton's compute time on the wall clock: whatever
else runs on those cores lengthens it. The closed-loop benchmark compares a
controller (sidecar running) with static profiles (no sidecar); this one measures
the part of that difference that is the sidecar's own polling, not its decisions.

The bench of ``closed_loop.py`` (one Triton, dense_mlp with ``--instances``
instances, HAProxy in front) runs ``--profile`` static at ``--rate`` requests/s
for ``--seconds``, ``--pairs`` times each way, alternated (off, on, off, on,
...) so that the machine's drift over the run falls on both: *off* with no
sidecar, *on* with ``examples/sidecar.yaml``'s sidecar (1 s interval, every
signal it reads) and a dry-run actuator, so it reads and decides but never
switches. Per run: device time per request, p95, the share over the SLO; then
the ratios on/off of the means (device time, and the client p95: a low phase's
p95 must stay within 1.1x of Triton's default's, and a controller pays this
part of it however well it decides), and the spread of each side (the
machine's own noise, the yardstick for the ratio).

Saved with record.save_result as benchmarks/results/overhead/<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from autobatch.config import load_yaml
from autobatch.lab.closed_loop import SidecarProcess, run_closed_loop
from autobatch.lab.device import DeviceMeter
from autobatch.profiles import load_profiles
from autobatch.schedule import Phase, Schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from closed_loop import EXAMPLES, MODEL, RELOAD_SERVER, ROOT, Bench  # noqa: E402
from record import row, save_result  # noqa: E402


async def one(bench: Bench, profile: Any, schedule: Schedule, slo_ms: float, sidecar: bool,
              k: int, seed: int) -> dict[str, Any]:
    """One run of ``schedule`` on ``profile``, freshly loaded; with a dry-run sidecar or none."""
    await bench.route_to(RELOAD_SERVER)
    await bench.fresh(MODEL, profile)
    meter = DeviceMeter(bench.triton.urls.http, [MODEL])
    with contextlib.ExitStack() as stack:
        url = None
        if sidecar:
            log = bench.workdir / f"observe-{k}.jsonl"
            path, url = bench.sidecar_config(EXAMPLES / "sidecar.yaml", log, False, dry_run=True)
            stack.enter_context(SidecarProcess(path, url, bench.workdir / f"observe-{k}.log"))
        try:
            r = await run_closed_loop(schedule, bench.listen, MODEL, sidecar=None, sidecar_url=url,
                                      slo_p95_ms=slo_ms, mode="observe" if sidecar else "static",
                                      protocol="http", device=meter, seed=seed + k)
        finally:
            await meter.aclose()
    p = r.phases[0]
    return {"sidecar": sidecar, "device_ms": r.device_ms, "p95_ms": p.p95_ms,
            "over_slo_share": r.over_slo_share, "throughput_rps": p.throughput_rps,
            "mean_batch": p.mean_batch}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side, on in (("off", False), ("on", True)):
        dev = [r["device_ms"] for r in runs if r["sidecar"] is on and r["device_ms"] is not None]
        p95 = [r["p95_ms"] for r in runs if r["sidecar"] is on and r["p95_ms"] is not None]
        out[side] = {"device_ms_mean": statistics.fmean(dev) if dev else None,
                     "device_ms_min": min(dev, default=None), "device_ms_max": max(dev, default=None),
                     "p95_ms_mean": statistics.fmean(p95) if p95 else None,
                     "p95_ms_min": min(p95, default=None), "p95_ms_max": max(p95, default=None)}
    off, on = out["off"]["device_ms_mean"], out["on"]["device_ms_mean"]
    out["ratio"] = None if not off or on is None else on / off
    p_off, p_on = out["off"]["p95_ms_mean"], out["on"]["p95_ms_mean"]
    out["p95_ratio"] = None if not p_off or p_on is None else p_on / p_off
    spreads = [(s["device_ms_max"] - s["device_ms_min"]) / s["device_ms_mean"]
               for s in (out["off"], out["on"]) if s["device_ms_mean"]]
    out["spread"] = max(spreads, default=None)
    return out


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    cfg = load_yaml(EXAMPLES / "sidecar.yaml")
    slo_ms = float(cfg["slo"]["p95_ms"])
    available = load_profiles(ROOT / "profiles" / MODEL)
    profile = available[args.profile]
    schedule = Schedule((Phase(f"{args.rate:g}/s", args.rate, args.seconds),))
    runs: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="ab-overhead-"))
    try:
        with contextlib.ExitStack() as stack:
            console.print(f"dense_mlp x {args.instances} on {profile.name}: starting Triton and HAProxy ...")
            bench = Bench(args.instances, [profile], [], tmp, stack)
            for k in range(2 * args.pairs):
                sidecar = k % 2 == 1
                console.print(f"  run {k + 1}/{2 * args.pairs}: sidecar {'on' if sidecar else 'off'}, "
                              f"{args.seconds:g} s at {args.rate:g}/s ...", style="dim")
                runs.append(await one(bench, profile, schedule, slo_ms, sidecar, k, args.seed))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"model": MODEL, "profile": profile.name, "instances": args.instances, "rate_rps": args.rate,
            "seconds": args.seconds, "slo_p95_ms": slo_ms, "runs": runs, "summary": summary(runs)}


def report(out: dict[str, Any], console: Console) -> list[dict[str, Any]]:
    t = Table(title=f"dense_mlp x {out['instances']}, {out['profile']} at {out['rate_rps']:g}/s: "
                    "without and with a sidecar watching (dry run)")
    for c in ("run", "sidecar", "device ms/request", "p95 ms", "over the SLO", "mean batch"):
        t.add_column(c)
    for k, r in enumerate(out["runs"], 1):
        dev = "-" if r["device_ms"] is None else f"{r['device_ms']:.2f}"
        t.add_row(str(k), "on" if r["sidecar"] else "off", dev, f"{r['p95_ms'] or 0:.1f}",
                  f"{r['over_slo_share']:.1%}", f"{r['mean_batch'] or 0:.2f}")
    console.print(t)
    s = out["summary"]
    if s["ratio"] is None:
        console.print("no device time read")
        return []
    line = (f"device time per request with the sidecar watching: {s['ratio']:.2f}x without "
            f"({s['on']['device_ms_mean']:.2f} vs {s['off']['device_ms_mean']:.2f} ms, means of "
            f"{len(out['runs']) // 2} runs each); runs of one side spread {s['spread']:.0%}")
    console.print(line)
    # One key per set-up, so that docs/results.md shows each (the default set-up keeps the
    # key of its first run).
    tag = ("" if (out["profile"], out["rate_rps"], out["instances"]) == ("efficient", 240.0, 2)
           else f"_{out['profile']}_{out['rate_rps']:g}_x{out['instances']}")
    rows = [row(f"sidecar overhead: dense_mlp x {out['instances']}, {out['profile']} at "
                f"{out['rate_rps']:g}/s, device time with / without a dry-run sidecar", line,
                key=f"sidecar_overhead_device{tag}", value=round(s["ratio"], 3), unit="x")]
    if s.get("p95_ratio") is not None:
        on, off = s["on"], s["off"]
        p95_line = (f"client p95 with the sidecar watching: {s['p95_ratio']:.2f}x without "
                    f"({on['p95_ms_mean']:.1f} vs {off['p95_ms_mean']:.1f} ms; runs with it "
                    f"{on['p95_ms_min']:.1f}-{on['p95_ms_max']:.1f}, without "
                    f"{off['p95_ms_min']:.1f}-{off['p95_ms_max']:.1f})")
        console.print(p95_line)
        rows.append(row(f"sidecar overhead: dense_mlp x {out['instances']}, {out['profile']} at "
                        f"{out['rate_rps']:g}/s, p95 with / without a dry-run sidecar", p95_line,
                        key=f"sidecar_overhead_p95{tag}", value=round(s["p95_ratio"], 3), unit="x"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=240.0, help="requests/s (240)")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each run (30)")
    ap.add_argument("--pairs", type=int, default=3, help="runs each way, alternated (3)")
    ap.add_argument("--profile", default="efficient", help="the static profile (efficient)")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    console = Console(width=140)
    out = asyncio.run(main_async(args, console))
    rows = report(out, console)
    if not args.no_save:
        save_result("overhead", out, rows)


if __name__ == "__main__":
    main()
