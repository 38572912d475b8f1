"""How fast the controller answers a rise in load: steps and a ramp, on the real Triton.

    .venv/bin/python benchmarks/reaction.py [--steps 3] [--no-ramp] [--no-save] [--keep-logs DIR]

One embedded Triton serves dense_mlp (torch on this CPU); the sidecar runs
examples/sidecar.yaml (a 1 s interval, the reload actuator) on the ladder
latency-soft -> balanced -> aggressive (``--ladder``): the ladder of the issue's
step, where a rise in load is an emergency. (On the shipped ladder,
triton-default -> efficient, both rungs carry the same on the curve, so a step
calls for no survival move at all: docs/ladders.md.)

* **steps**: 30 requests/s, then 350/s (more than latency-soft carries here),
  then back, ``--steps`` times. For each step: the seconds from the step to the
  controller's survival decision (decision log ``at_s`` against the load's own
  clock), the windows it took, the reason, and how long the reload then took.
  Target: at most 1.5 s at the default interval.
* **ramp**: 30 -> 380 requests/s in 10 s phases and back down (the issue's
  ramp). Per phase: requests over the SLO, p95, the profile in force; and
  whether the first move toward throughput came before the first phase whose
  p95 went over the SLO (the target: it does).

Saved with record.save_result as benchmarks/results/reaction/<time>.json, its decision
logs beside it (``logs/<time>-steps.jsonl.gz``, ``-ramp``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from autobatch.config import load_yaml
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.lab.closed_loop import apply_static, run_closed_loop
from autobatch.lab.serve import TritonServer
from autobatch.profiles import load_profile
from autobatch.schedule import Phase, Schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import row, save_logs, save_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "dense_mlp"
EXAMPLE = ROOT / "examples" / "sidecar.yaml"


def sidecar_config(server: TritonServer, workdir: Path, ladder: list[str]) -> Any:
    """examples/sidecar.yaml on ``ladder``, pointed at ``server``."""
    data = dict(load_yaml(EXAMPLE))
    data["triton"] = {"http_url": server.urls.http, "metrics_url": server.urls.metrics,
                      "grpc_url": server.urls.grpc}
    data["profiles"] = {**data["profiles"], "ladder": ladder}
    data["server"] = {"listen": "127.0.0.1:0"}
    data["decision_log"] = str(workdir / "decisions.jsonl")
    return sidecar_config_from_mapping(data, str(EXAMPLE), base=EXAMPLE.parent)
RAMP = (30, 80, 130, 170, 210, 250, 290, 330, 380, 290, 210, 130, 30)


def step_schedule(steps: int) -> Schedule:
    phases: list[Phase] = []
    for i in range(steps):
        # 20 s low: the controller steps back down (dwell 10 s, stabilization 10 s)
        # and its forecast sees calm windows before the next step.
        phases.append(Phase(f"low-{i}", 30, 25))
        phases.append(Phase(f"high-{i}", 350, 12))
    phases.append(Phase("low-end", 30, 5))
    return Schedule(tuple(phases))


def ramp_schedule() -> Schedule:
    return Schedule(tuple(Phase(f"{r}/s-{i}", r, 10) for i, r in enumerate(RAMP)))


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _t0_wall(log: list[dict[str, Any]], result: Any) -> float:
    """The load's start on the wall clock: the decision log is stamped with time.time()
    and the closed loop's switches with offsets from the load's start."""
    # result.switches is read from the same log, in the same order (switches with an actuation).
    logged = [ln for ln in log if ln["decision"]["action"] == "switch" and ln.get("actuation")]
    if not logged or not result.switches:
        raise RuntimeError("no switch to align the clocks with")
    return float(logged[0]["decision"]["at_s"]) - result.switches[0].t_s


def reactions(schedule: Schedule, log: list[dict[str, Any]], t0_wall: float) -> list[dict[str, Any]]:
    out = []
    starts = schedule.starts_s
    for i, phase in enumerate(schedule.phases):
        if not phase.name.startswith("high"):
            continue
        step = t0_wall + starts[i]
        end = step + phase.duration_s
        after = [ln for ln in log if ln["window"] and ln["window"]["end_s"] > step
                 and ln["decision"]["at_s"] < end]
        hit = next((k for k, ln in enumerate(after) if ln["decision"]["action"] == "switch"
                    and ln["decision"]["kind"] == "survival"), None)
        before = [x for x in log if x["decision"]["at_s"] <= step]
        live = before[-1]["active"] if before else None
        if hit is None:
            # No survival move: was the rung live at the step one that carries the step?
            caps = [(ln["decision"]["signals"].get("capacity_rps") or {}).get(live) for ln in after]
            caps = [c for c in caps if c is not None]
            out.append({"phase": phase.name, "decision_s": None, "windows": None, "reason": None,
                        "actuation_s": None, "live_at_step": live,
                        "live_capacity_rps": min(caps) if caps else None,
                        "carried": bool(caps) and min(caps) >= phase.rate_rps})
            continue
        ln = after[hit]
        out.append({
            "phase": phase.name,
            "decision_s": round(ln["decision"]["at_s"] - step, 3),
            "windows": hit + 1,
            "reason": ln["decision"]["reason"],
            "target": ln["decision"]["target"],
            "arrival_rps": ln["decision"]["signals"].get("arrival_rps"),
            "capacity_rps": ln["decision"]["signals"].get("capacity_rps"),
            "actuation_s": (ln.get("actuation") or {}).get("duration_s"),
            "actuation_ok": (ln.get("actuation") or {}).get("ok"),
            "live_at_step": live,
        })
    return out


async def run(args: argparse.Namespace, console: Console, logs: dict[str, bytes]) -> dict[str, Any]:
    """Both cases; each case's decision log goes into ``logs`` (by case name)."""
    out: dict[str, Any] = {"ladder": args.ladder.split(",")}
    with tempfile.TemporaryDirectory(prefix="autobatch-reaction-") as tmp, \
            TritonServer.on_free_ports(ROOT / "model_repository", models=[MODEL]) as server:
        cases = [("steps", step_schedule(args.steps))]
        if not args.no_ramp:
            cases.append(("ramp", ramp_schedule()))
        for name, schedule in cases:
            work = Path(tmp) / name
            work.mkdir()
            cfg = sidecar_config(server, work, args.ladder.split(","))
            first = cfg.profiles[0]
            await apply_static(server.urls.http, MODEL, load_profile(
                ROOT / "profiles" / MODEL / f"{first.name}.yaml"))
            console.print(f"[bold]{name}[/]: {schedule.duration_s:.0f} s of load, controller from "
                          f"{first.name} ...")
            result = await run_closed_loop(schedule, server.urls.grpc, MODEL, sidecar=cfg,
                                           slo_p95_ms=cfg.policy.slo_p95_ms, mode="controller")
            log = _log(cfg.decision_log)
            logs[name] = cfg.decision_log.read_bytes()
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cfg.decision_log, args.keep_logs / f"{name}.jsonl")
            t0 = _t0_wall(log, result)
            case: dict[str, Any] = {"result": result.to_dict(), "interval_s": cfg.interval_s,
                                    "slo_p95_ms": cfg.policy.slo_p95_ms}
            if name == "steps":
                case["reactions"] = reactions(schedule, log, t0)
            else:
                case["ramp"] = ramp_verdict(result, cfg.policy.slo_p95_ms)
            case["capacity_seen"] = capacity_seen(log, cfg.profiles[0].name)
            out[name] = case
    return out


def capacity_seen(log: list[dict[str, Any]], profile: str) -> dict[str, Any]:
    """What the controller believed ``profile`` carries while it was live and busy enough to
    measure (a live factor set): the curve alone says more on this machine under load."""
    caps, factors = [], []
    for ln in log:
        sig = ln["decision"]["signals"]
        if ln["active"] == profile and sig.get("live_factor") is not None:
            caps.append((sig.get("capacity_rps") or {}).get(profile))
            factors.append(sig["live_factor"])
    caps = [c for c in caps if c is not None]
    return {
        "profile": profile,
        "windows": len(caps),
        "capacity_rps_min": min(caps) if caps else None,
        "capacity_rps_max": max(caps) if caps else None,
        "live_factor_min": min(factors) if factors else None,
        "live_factor_max": max(factors) if factors else None,
    }


def ramp_verdict(result: Any, slo_ms: float) -> dict[str, Any]:
    phases = result.phases
    starts = result.schedule.starts_s
    first_over = next((i for i, p in enumerate(phases) if (p.p95_ms or 0) > slo_ms), None)
    ups = [s for s in result.switches if s.ok and s.reason in ("overload", "forecast", "saturation",
                                                                 "efficiency")]
    first_up = ups[0] if ups else None
    return {
        "first_phase_over_slo": None if first_over is None else phases[first_over].name,
        "first_phase_over_slo_start_s": None if first_over is None else starts[first_over],
        "first_move_up_s": None if first_up is None else first_up.t_s,
        "first_move_up_reason": None if first_up is None else first_up.reason,
        "first_move_up_to": None if first_up is None else first_up.to,
        "move_before_breach": first_up is not None and (
            first_over is None or first_up.t_s < starts[first_over]),
    }


def report(out: dict[str, Any], console: Console) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if "steps" in out:
        t = Table(title="step 30 -> 350 requests/s: from the step to the survival decision")
        for c in ("step", "live", "decision s", "windows", "reason", "to", "arrival/s", "reload s"):
            t.add_column(c, justify="right")
        for r in out["steps"]["reactions"]:
            t.add_row(r["phase"], str(r.get("live_at_step")), f"{r['decision_s']}", f"{r['windows']}",
                      str(r["reason"]), str(r.get("target")),
                      f"{r.get('arrival_rps') or 0:.0f}", f"{r.get('actuation_s')}")
        console.print(t)
        reactions = out["steps"]["reactions"]
        times = [r["decision_s"] for r in reactions if r["decision_s"] is not None]
        carried = [r for r in reactions if r["decision_s"] is None and r.get("carried")]
        missed = len(reactions) - len(times) - len(carried)
        for r in carried:
            console.print(f"{r['phase']}: no survival move needed, {r['live_at_step']} was live and "
                          f"carries {r['live_capacity_rps']:.0f}/s")
        rungs = ", ".join(sorted({r["live_at_step"] for r in carried}))
        if times:
            worst = max(times)
            rows.append(row(
                "step 30 -> 350 req/s: step to switch decision (1 s interval)",
                (f"{worst:.2f} s in each of {len(times)} steps" if f"{min(times):.2f}" == f"{worst:.2f}"
                 else f"{min(times):.2f}-{worst:.2f} s over {len(times)} steps") + " (target <= 1.5 s)"
                + (f"; {len(carried)} steps met on {rungs}, which carries them (no move needed)"
                   if carried else "")
                + (f", {missed} steps without one" if missed else ""),
                key="step_decision_s", value=worst, unit="s"))
    if "ramp" in out:
        v = out["ramp"]["ramp"]
        phases = out["ramp"]["result"]["phases"]
        t = Table(title=f"ramp, SLO p95 {out['ramp']['slo_p95_ms']:g} ms")
        for c in ("phase", "over SLO", "p95 ms", "done/s", "profiles"):
            t.add_column(c, justify="right")
        for p in phases:
            t.add_row(p["name"], f"{p['over_slo'] / max(p['requests'], 1):.1%}",
                      f"{p['p95_ms'] or 0:.0f}", f"{p['throughput_rps']:.0f}",
                      " ".join(f"{k} {v:.0%}" for k, v in p["profiles"].items()))
        console.print(t)
        console.print(f"first move toward throughput: {v['first_move_up_reason']} to "
                      f"{v['first_move_up_to']} at {v['first_move_up_s']} s; first phase over the SLO: "
                      f"{v['first_phase_over_slo']} (starts {v['first_phase_over_slo_start_s']} s)")
        worst = max(p["over_slo"] / max(p["requests"], 1) for p in phases)
        seen = out["ramp"].get("capacity_seen") or {}
        if seen.get("windows"):
            console.print(f"{seen['profile']} as the controller saw it under load: "
                          f"{seen['capacity_rps_min']:.0f}-{seen['capacity_rps_max']:.0f} req/s "
                          f"(live factor {seen['live_factor_min']}-{seen['live_factor_max']}, "
                          f"{seen['windows']} windows)")
        rows.append(row(
            "ramp 30 -> 380 req/s: the move toward throughput before any phase over the SLO",
            ("yes" if v["move_before_breach"] else "no")
            + f" ({v['first_move_up_reason']} at {v['first_move_up_s']} s; worst phase "
              f"{worst:.1%} over the SLO)",
            key="ramp_worst_phase_over_slo", value=round(100 * worst, 2), unit="%"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ladder", default="latency-soft,balanced,aggressive",
                    help="the sidecar's ladder (examples/sidecar.yaml's other settings)")
    ap.add_argument("--no-ramp", action="store_true")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                    help="copy each case's decision log to DIR/<case>.jsonl (for autobatch replay)")
    args = ap.parse_args()
    console = Console(width=140)
    t0 = time.time()
    logs: dict[str, bytes] = {}
    out = asyncio.run(run(args, console, logs))
    rows = report(out, console)
    out["elapsed_s"] = round(time.time() - t0, 1)
    if not args.no_save:
        save_logs(save_result("reaction", out, rows), logs)


if __name__ == "__main__":
    main()
