"""Where switching wins, mapped with the simulator: every shipped curve, 1 and 2 instances, every schedule.

    .venv/bin/python benchmarks/switching_map.py [--reaction-s 2] [--markdown] [--json]

For each curve in curves/, each instance count and each closed-loop schedule
(examples/schedules/: step, bursty, ramp, rise-fall), :func:`autobatch.plan.
switching.switching_map` simulates Triton's default, each static profile and
an oracle that picks the objective's profile per phase ``--reaction-s`` into
it. Per cell: the worst phase's share over the SLO and the device time per
request of the default, of the best static choice and of the oracle, and the
verdict (does switching pay here?).

The schedules are written for dense_mlp on this CPU; for another curve their
rates are scaled by its single-instance capacity (the best measured batch's
requests per second) over dense_mlp's, so every curve sees the same shape at
the same share of what one instance can do. The ladder is the shipped one for
dense_mlp (examples/sidecar.yaml) and the planner's candidates for the others,
with ``max_batch_size`` the curve's largest measured size (nothing
extrapolated). The SLO (a p95) is 60 ms for dense_mlp, as in the benchmarks;
for the others the larger of 5x the batch-1 time and 2x the best batch's time.

Pure simulation, no server: it needs no lock and writes
benchmarks/results/switching_map/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autobatch.config import load_yaml
from autobatch.curve import BatchCurve, load_curve
from autobatch.plan.simulator import ServiceModel
from autobatch.plan.switching import DEFAULT_PROFILE, SwitchingMap, switching_map, triton_default
from autobatch.plan.verdict import batching_verdict, candidate_profiles
from autobatch.profiles import Profile, load_profiles
from autobatch.schedule import Phase, Schedule, load_schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import row, save_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = ("step", "bursty", "ramp", "rise-fall")
DENSE = "dense_mlp-measured"


def capacity_rps(curve: BatchCurve) -> float:
    return max(b * 1000.0 / curve.points[b] for b in curve.points)


def slo_ms(curve: BatchCurve) -> float:
    if curve.name == DENSE:
        return 60.0
    best = max(curve.points, key=lambda b: b * 1000.0 / curve.points[b])
    return round(max(5 * curve.points[min(curve.points)], 2 * curve.points[best]), 1)


def scaled(schedule: Schedule, factor: float) -> Schedule:
    return Schedule(tuple(Phase(p.name, p.rate_rps * factor, p.duration_s, p.arrival, p.burst_size)
                          for p in schedule.phases))


def ladder_for(curve: BatchCurve, slo: float) -> list[Profile]:
    if curve.name == DENSE:
        cfg = load_yaml(ROOT / "examples" / "sidecar.yaml")
        available = load_profiles(ROOT / "profiles" / "dense_mlp")
        return [available[n] for n in cfg["profiles"]["ladder"]]
    top = max(curve.points)
    verdict = batching_verdict(curve, top)
    # The planner's delay: half the SLO less the largest batch, as its SLO equation with a margin.
    delay_ms = max(0.0, 0.6 * (slo - curve.points[top]))
    return [triton_default(top), *candidate_profiles(curve, verdict, top, delay_ms, model_max_batch_size=top)]


def cell(m: SwitchingMap) -> dict[str, Any]:
    default = m.static(DEFAULT_PROFILE)
    best = m.static(m.verdict.best_static)

    def worst(s: Any) -> float:
        return max(p.over_slo for p in s.phases)

    return {
        "verdict": m.verdict.kind.value,
        "message": m.verdict.message,
        "best_static": best.name,
        "default": {"worst_over": worst(default), "device_ms": default.device_ms},
        "best": {"worst_over": worst(best), "device_ms": best.device_ms},
        "oracle": {"worst_over": worst(m.oracle), "device_ms": m.oracle.device_ms,
                   "picks": [p.profile for p in m.oracle.phases]},
        "oracle_vs_default": m.oracle.device_ms / default.device_ms if default.device_ms else None,
        "oracle_vs_best": m.oracle.device_ms / best.device_ms if best.device_ms else None,
    }


def run(reaction_s: float) -> dict[str, Any]:
    dense = load_curve(ROOT / "curves" / "dense_mlp-cpu.yaml")
    base = capacity_rps(dense)
    out: dict[str, Any] = {"reaction_s": reaction_s, "cells": []}
    for path in sorted((ROOT / "curves").glob("*.yaml")):
        curve = load_curve(path)
        slo = slo_ms(curve)
        factor = capacity_rps(curve) / base
        ladder = ladder_for(curve, slo)
        for name in SCHEDULES:
            schedule = scaled(load_schedule(ROOT / "examples" / "schedules" / f"{name}.yaml"), factor)
            for n in (1, 2):
                m = switching_map(ladder, ServiceModel(curve), schedule, slo_ms=slo, instances=n,
                                  reaction_s=reaction_s, label=name)
                out["cells"].append({"curve": curve.name, "file": path.name, "slo_ms": slo,
                                     "rate_factor": round(factor, 4), "schedule": name, "instances": n,
                                     "ladder": [p.name for p in ladder], **cell(m),
                                     "map": m.to_dict()})
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| curve (SLO p95) | schedule | inst. | default: worst phase over / device ms | best static | "
        "oracle: worst phase over / device ms (x default) | does switching pay? |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in result["cells"]:
        d, b, o = c["default"], c["best"], c["oracle"]
        lines.append(
            f"| {c['curve']} ({c['slo_ms']:g} ms) | {c['schedule']} | {c['instances']} | "
            f"{d['worst_over']:.1%} / {d['device_ms']:.2f} | {c['best_static']}: {b['worst_over']:.1%} / "
            f"{b['device_ms']:.2f} | {o['worst_over']:.1%} / {o['device_ms']:.2f} "
            f"({c['oracle_vs_default']:.2f}x) | {c['verdict']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reaction-s", type=float, default=2.0, help="the oracle's reaction delay (2 s)")
    ap.add_argument("--markdown", action="store_true", help="print the docs table")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--no-save", action="store_true", help="do not write a result file")
    args = ap.parse_args()
    result = run(args.reaction_s)
    kinds: dict[str, int] = {}
    for c in result["cells"]:
        kinds[c["verdict"]] = kinds.get(c["verdict"], 0) + 1
    result["verdicts"] = kinds
    if not args.no_save:
        dense2 = [c for c in result["cells"] if c["curve"] == DENSE and c["instances"] == 2]
        rows = [row("switching map (simulated): verdicts over curves x 1-2 instances x 4 schedules",
                    ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))]
        rows.append(row("switching map (simulated): dense_mlp x 2, the oracle against Triton's default",
                        "; ".join(f"{c['schedule']} {c['oracle_vs_default']:.2f}x ({c['verdict']})"
                                  for c in dense2)))
        save_result("switching_map", result, rows)
    if args.json:
        print(json.dumps(result, indent=1))
    elif args.markdown:
        print(markdown(result))
    else:
        for c in result["cells"]:
            print(f"{c['curve']:22s} {c['schedule']:9s} x{c['instances']} {c['verdict']:10s} {c['message']}")


if __name__ == "__main__":
    main()
