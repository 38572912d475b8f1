"""Steady Poisson load at 70% of the live profile's capacity: the controller must not switch.

    .venv/bin/python benchmarks/steady.py [--profile aggressive] [--fraction 0.7] [--duration 300]
        [--trace tests/data/steady-aggressive.jsonl.gz] [--no-save]

One embedded Triton serves dense_mlp (torch on this CPU), on the three-rung
ladder latency-soft -> balanced -> aggressive (``--ladder``). The capacity is
measured: 12 s of more load than the static profile can take
(``--probe-rps``), and the completions per second once the backlog builds. (The
controller's own estimate at that moment, curve x live factor, is kept beside
it: it sees the model's instances only, not the front end and the load
generator sharing the two cores.) Then the sidecar (examples/sidecar.yaml, starting on
``--profile``, the reload actuator, a 1 s interval) runs ``--duration`` seconds
of Poisson arrivals at ``--fraction`` of that capacity, and every switch it
makes is counted (target: none). The noise the fast rules must ignore is real
here: Poisson arrivals, a shared 2-core machine, windows of one second.

Why the top rung by default: at 70% of a lower rung's capacity the objective
itself wants the next one up (it saves device time); the property under test is
that noise does not trip the overload and forecast rules.

``--trace`` keeps the run's windows (``autobatch watch --json`` lines, gzipped)
for the replay test that checks the same property in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from autobatch.config import load_yaml
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.lab.closed_loop import apply_static, run_closed_loop
from autobatch.lab.serve import TritonServer
from autobatch.load import run_load
from autobatch.policy import capacity_rps, live_factor
from autobatch.profiles import load_profile
from autobatch.schedule import Phase, Schedule
from autobatch.signals import TritonSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import row, save_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "dense_mlp"
EXAMPLE = ROOT / "examples" / "sidecar.yaml"


def sidecar_config(server: TritonServer, workdir: Path, profile: str, ladder: list[str]) -> Any:
    data = dict(load_yaml(EXAMPLE))
    data["triton"] = {"http_url": server.urls.http, "metrics_url": server.urls.metrics,
                      "grpc_url": server.urls.grpc}
    data["profiles"] = {**data["profiles"], "ladder": ladder, "initial": profile}
    data["server"] = {"listen": "127.0.0.1:0"}
    data["decision_log"] = str(workdir / "decisions.jsonl")
    return sidecar_config_from_mapping(data, str(EXAMPLE), base=EXAMPLE.parent)


async def calibrate(server: TritonServer, cfg: Any, profile_name: str, rps: float,
                    seconds: float) -> dict[str, Any]:
    """What the static profile carries on this machine: ``rps`` (more than it can take) for
    ``seconds``, and the completions per second once the backlog is building. This
    counts everything the machine does per request (the gRPC front end, the load
    generator on the same two cores), which the instance's busy time does not; the
    controller's own estimate (curve x live factor) is kept beside it."""
    profile = cfg.profile(profile_name)
    loop = asyncio.get_running_loop()
    schedule = Schedule((Phase("probe", rps, seconds),))
    load = loop.run_in_executor(
        None, lambda: run_load(server.urls.grpc, MODEL, schedule, seed=1, timeout_s=5.0))
    async with TritonSource(server.urls.http, MODEL, metrics_url=server.urls.metrics) as src:
        await asyncio.sleep(seconds / 3)  # past the start-up, the backlog building
        await src.poll()
        await asyncio.sleep(seconds / 2)
        window = await src.poll()
    await load
    factor, share = live_factor([window], cfg.policy.curve, busy_ceiling=cfg.policy.capacity.busy_ceiling,
                                min_busy_share=cfg.policy.capacity.live_min_busy)
    curve_cap = capacity_rps(profile, cfg.policy.curve)
    assert curve_cap is not None
    return {
        "probe_rps": rps, "seconds": seconds, "window": window.to_dict(),
        "busy_share": share, "live_factor": factor, "curve_capacity_rps": curve_cap,
        "controller_estimate_rps": curve_cap * (factor if factor is not None else 1.0),
        "capacity_rps": window.inference_rps,
    }


async def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="autobatch-steady-") as tmp, \
            TritonServer.on_free_ports(ROOT / "model_repository", models=[MODEL]) as server:
        cfg = sidecar_config(server, Path(tmp), args.profile, args.ladder.split(","))
        await apply_static(server.urls.http, MODEL,
                           load_profile(ROOT / "profiles" / MODEL / f"{args.profile}.yaml"))
        console.print(f"probing {args.profile} at {args.probe_rps:g} requests/s ...")
        cal = await calibrate(server, cfg, args.profile, args.probe_rps, 12.0)
        rate = round(args.fraction * cal["capacity_rps"], 1)
        console.print(
            f"{args.profile} carried {cal['capacity_rps']:.0f}/s under overload (the controller's "
            f"estimate then: curve {cal['curve_capacity_rps']:.0f}/s x live factor "
            f"{cal['live_factor']} = {cal['controller_estimate_rps']:.0f}/s); "
            f"steady load {rate:g}/s for {args.duration:g} s ...")
        # Let the probe's backlog drain before the sidecar starts.
        await asyncio.sleep(8.0)
        schedule = Schedule((Phase("steady", rate, args.duration),))
        result = await run_closed_loop(schedule, server.urls.grpc, MODEL, sidecar=cfg,
                                       slo_p95_ms=cfg.policy.slo_p95_ms, mode="controller", seed=7)
        log = [json.loads(x) for x in Path(cfg.decision_log).read_text().splitlines() if x.strip()]
    switches = [ln for ln in log if ln["decision"]["action"] == "switch"]
    reasons: dict[str, int] = {}
    for ln in log:
        r = ln["decision"]["reason"]
        reasons[r] = reasons.get(r, 0) + 1
    caps = [ln["decision"]["signals"].get("capacity_rps", {}).get(args.profile) for ln in log
            if isinstance(ln["decision"]["signals"].get("capacity_rps"), dict)]
    caps = [c for c in caps if c is not None]
    forecasts = [ln["decision"]["signals"].get("forecast_rps") for ln in log]
    forecasts = [f for f in forecasts if f is not None]
    if args.trace:
        with gzip.open(args.trace, "wt", encoding="utf-8") as f:
            for ln in log:
                if ln["window"]:
                    f.write(json.dumps(ln["window"]) + "\n")
        console.print(f"trace: {args.trace} ({sum(1 for ln in log if ln['window'])} windows)")
    phase = result.phases[0]
    return {
        "profile": args.profile, "ladder": args.ladder.split(","), "fraction": args.fraction,
        "duration_s": args.duration,
        "calibration": cal, "rate_rps": rate,
        "ticks": len(log), "switches": [
            {"at_s": ln["decision"]["at_s"], "reason": ln["decision"]["reason"],
             "target": ln["decision"]["target"], "message": ln["decision"]["message"]}
            for ln in switches],
        "reasons": reasons,
        "controller_capacity_rps": {"min": min(caps) if caps else None,
                                    "max": max(caps) if caps else None},
        "forecast_rps": {"min": min(forecasts) if forecasts else None,
                         "max": max(forecasts) if forecasts else None},
        "phase": phase.to_dict(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="aggressive")
    ap.add_argument("--ladder", default="latency-soft,balanced,aggressive",
                    help="the sidecar's ladder (examples/sidecar.yaml's other settings)")
    ap.add_argument("--fraction", type=float, default=0.7)
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--probe-rps", type=float, default=500.0,
                    help="the overload that measures what the profile carries")
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    console = Console(width=140)
    t0 = time.time()
    out = asyncio.run(run(args, console))
    out["elapsed_s"] = round(time.time() - t0, 1)
    p = out["phase"]
    console.print(
        f"{out['duration_s']:g} s at {out['rate_rps']:g}/s ({out['fraction']:.0%} of {out['profile']}'s "
        f"{out['calibration']['capacity_rps']:.0f}/s): {len(out['switches'])} switches; "
        f"{out['ticks']} decisions {out['reasons']}; p95 {p['p95_ms']} ms, "
        f"{p['over_slo'] / max(p['requests'], 1):.2%} over the SLO, {p['throughput_rps']:.0f} done/s; "
        f"the controller's capacity {out['controller_capacity_rps']}, forecast {out['forecast_rps']}")
    for s in out["switches"]:
        console.print(f"  switch: {s['reason']} -> {s['target']}: {s['message']}")
    if not args.no_save:
        save_result("steady", out, [row(
            f"steady Poisson at {out['fraction']:.0%} of {out['profile']}'s capacity for "
            f"{out['duration_s']:g} s: switches",
            f"{len(out['switches'])} (target 0); {out['rate_rps']:g} req/s, "
            f"{p['over_slo'] / max(p['requests'], 1):.1%} over the SLO",
            key=f"steady_switches_{out['profile']}", value=len(out["switches"]))])


if __name__ == "__main__":
    main()
