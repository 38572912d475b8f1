"""The planner on a shared GPU: docs/shared-gpu.md's table, planned and saved, then written from the file.

    .venv/bin/python benchmarks/shared_plan.py            # 9 plans (~5-10 min), saved and printed
    .venv/bin/python benchmarks/shared_plan.py --docs     # docs/shared-gpu.md's table from the newest run
    .venv/bin/python benchmarks/shared_plan.py --check    # exit 1 if that table differs from it

``autobatch plan`` (:func:`autobatch.plan.planner.make_plan`) on the T4
mixed-precision curve (curves/t4-resnet50-fp16.yaml), one instance, a p99 SLO
of 60 ms, no network time, at 60, 150 and 300 req/s, with the model alone on
the GPU and with one and two co-tenants (examples/cotenants/t4-one-job.yaml,
t4-two-jobs.yaml: ResNet-50 batch-32 jobs, each busy a quarter of the time
alone, time-slicing the GPU in 2 ms turns). Alone, the instance still runs on
the shared device model (one context: the same figures as a device of its own,
tests/unit/test_simulator_shared.py), so the busy share means the same thing
in every row.

Per row: Triton's default and the best waiting profile within the SLO (of the
candidates that wait, the one the planner's objective picks: least device time
within the SLO); where no waiting profile keeps the SLO, the one that was best
alone, marked as breaking it. Each with p95, the device's busy share (every
tenant) and the model's own share, and the co-tenants' items per second; and
the plan's verdict with the co-tenants.

Pure simulation, no server. The table in docs/shared-gpu.md sits between
``<!-- shared-plan:begin -->`` and ``<!-- shared-plan:end -->`` and comes only
from the newest saved run (``--docs``); ``--check`` (a unit test runs it)
fails on a stale or hand-edited table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import RESULTS, row, save_result, saved, sync_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CURVE = ROOT / "curves" / "t4-resnet50-fp16.yaml"
COTENANTS = {0: None, 1: ROOT / "examples" / "cotenants" / "t4-one-job.yaml",
             2: ROOT / "examples" / "cotenants" / "t4-two-jobs.yaml"}
RATES = (60.0, 150.0, 300.0)
SLO_MS = 60.0
DOCS = ROOT / "docs" / "shared-gpu.md"
BLOCK = "shared-plan"
NAME = "shared_plan"


def _figures(cand: Any) -> dict[str, Any]:
    r = cand.at_load
    dev = r.device
    return {
        "name": cand.profile.name,
        "summary": cand.profile.summary(),
        "p95_ms": round(r.latency.p95_ms, 2),
        "p99_ms": round(r.latency.p99_ms, 2),
        "throughput_rps": round(r.throughput_rps, 2),
        "device_busy": round(dev.busy_share, 4),
        "model_share": round(dev.model_share, 4),
        "meets_slo": cand.meets_slo,
        "cotenant_items_per_s": round(sum(c.items_per_s for c in r.cotenants), 1),
    }


def plan_one(rate: float, k: int, *, duration_s: float, sweep_points: int, sweep_requests: int,
             seed: int) -> dict[str, Any]:
    from autobatch.curve import load_curve
    from autobatch.plan.planner import make_plan
    from autobatch.plan.simulator import SharedDevice, load_shared_device
    from autobatch.plan.switching import pick_profile

    path = COTENANTS[k]
    device = load_shared_device(cotenants=path) if path is not None else SharedDevice()
    assert device is not None and len(device.cotenants) == k
    plan = make_plan(load_curve(CURVE), SLO_MS, 0.0, rate_rps=rate, duration_s=duration_s,
                     sweep_points=sweep_points, sweep_requests=sweep_requests, seed=seed, device=device)
    default = plan.candidates[0]
    waiting = [c for c in plan.candidates if c.profile.max_queue_delay_us > 0]
    ok = [c for c in waiting if c.meets_slo]
    if ok:
        best_name = pick_profile([(c.profile.name, 0.0, c.at_load.latency.p99_ms, c.device_ms) for c in ok])
        best = next(c for c in ok if c.profile.name == best_name)
    else:
        alone = plan.recommended_alone
        best = (alone if alone is not None and any(alone is c for c in waiting)
                else min(waiting, key=lambda c: c.device_ms))
    rec = plan.recommended
    return {
        "rate_rps": rate,
        "cotenants": k,
        "device": device.label,
        "default": _figures(default),
        "best_waiting": _figures(best),
        "recommended": None if rec is None else rec.profile.name,
        "shared": None if plan.shared is None else {"kind": plan.shared.kind.value,
                                                    "message": plan.shared.message},
        "plan": plan.to_dict(),
    }


def run(duration_s: float, sweep_points: int, sweep_requests: int, seed: int) -> dict[str, Any]:
    rows = []
    for rate in RATES:
        for k in COTENANTS:
            print(f"plan at {rate:g} req/s with {k} co-tenant(s) ...", file=sys.stderr, flush=True)
            rows.append(plan_one(rate, k, duration_s=duration_s, sweep_points=sweep_points,
                                 sweep_requests=sweep_requests, seed=seed))
    return {"curve": str(CURVE.relative_to(ROOT)), "slo_p99_ms": SLO_MS, "network_ms": 0.0,
            "instances": 1, "duration_s": duration_s, "sweep_points": sweep_points,
            "sweep_requests": sweep_requests, "seed": seed,
            "cotenant_files": {str(k): None if p is None else str(p.relative_to(ROOT))
                               for k, p in COTENANTS.items()},
            "rows": rows}


def newest() -> dict[str, Any]:
    docs = saved(NAME)
    if not docs:
        raise SystemExit(f"no saved run under {RESULTS / NAME}: run benchmarks/shared_plan.py first")
    return docs[-1]


def _cell(f: dict[str, Any]) -> str:
    broken = "" if f["meets_slo"] else ", **breaks the SLO**"
    return (f"p95 {f['p95_ms']:.1f} ms (p99 {f['p99_ms']:.1f}), device {f['device_busy']:.0%} busy, "
            f"model {f['model_share']:.0%}{broken}")


def markdown(doc: dict[str, Any]) -> str:
    """The docs table of one saved run (its file, date and command under it)."""
    lines = [
        "| req/s | co-tenants | Triton's default | best waiting profile | co-tenants' items/s "
        "(default / waiting) | the plan says, with the co-tenants |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["data"]["rows"]:
        d, w = r["default"], r["best_waiting"]
        verdict = r["shared"]["message"] if r["shared"] else (
            f"alone: recommended {r['recommended'] or 'none'}")
        items = "-" if not r["cotenants"] else (
            f"{d['cotenant_items_per_s']:.0f} / {w['cotenant_items_per_s']:.0f}")
        lines.append(f"| {r['rate_rps']:g} | {r['cotenants']} | {_cell(d)} | {w['name']} "
                     f"({w['summary'].split('(', 1)[1].rstrip(')')}): {_cell(w)} | {items} | {verdict} |")
    lines.append("")
    lines.append(f"From `{doc['_file']}` ({doc['date']}): `{doc['command']}`; the table by "
                 "`.venv/bin/python benchmarks/shared_plan.py --docs`.")
    return "\n".join(lines)


def check() -> bool:
    """Whether docs/shared-gpu.md's table is what the newest saved run gives."""
    return sync_blocks(DOCS, {BLOCK: lambda: markdown(newest())}, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration-s", type=float, default=60.0, help="seconds of load per plan [60]")
    ap.add_argument("--sweep-points", type=int, default=8, help="each candidate's load sweep [8]")
    ap.add_argument("--sweep-requests", type=int, default=5000, help="requests per sweep point [5000]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", action="store_true",
                    help="write docs/shared-gpu.md's table from the newest saved run")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the docs table differs from the newest saved run")
    args = ap.parse_args()
    if args.check:
        if not check():
            raise SystemExit(f"{DOCS.relative_to(ROOT)}: the shared-plan table differs from the newest "
                             "saved run: run benchmarks/shared_plan.py --docs")
        return
    if args.docs:
        sync_blocks(DOCS, {BLOCK: lambda: markdown(newest())}, check=False)
        print(f"wrote {DOCS.relative_to(ROOT)}")
        return
    data = run(args.duration_s, args.sweep_points, args.sweep_requests, args.seed)
    at = {(r["rate_rps"], r["cotenants"]): r for r in data["rows"]}
    top, full = at[(300.0, 0)], at[(300.0, 2)]

    def keeps(f: dict[str, Any]) -> str:
        return "keeps the SLO" if f["meets_slo"] else "breaks it"

    save_result(NAME, data, [
        row("plan on the T4 mixed-precision curve (ResNet-50), 300 req/s, SLO p99 60 ms, alone on the GPU",
            f"Triton's default keeps the GPU **{top['default']['device_busy']:.0%}** busy (p95 "
            f"{top['default']['p95_ms']:.1f} ms); {top['best_waiting']['name']} "
            f"**{top['best_waiting']['device_busy']:.0%}** (p95 {top['best_waiting']['p95_ms']:.1f} ms)",
            key="t4_300_waiting_busy", value=round(100 * top["best_waiting"]["device_busy"], 1), unit="%"),
        row("the same plan with two co-tenants time-slicing the GPU (examples/cotenants/t4-two-jobs.yaml)",
            f"Triton's default p99 {full['default']['p99_ms']:.1f} ms ({keeps(full['default'])}), "
            f"{full['best_waiting']['name']} p99 {full['best_waiting']['p99_ms']:.1f} ms "
            f"({keeps(full['best_waiting'])}); the plan says: "
            f"{full['shared']['kind'] if full['shared'] else '-'} (docs/shared-gpu.md)"),
    ])
    doc = newest()
    print(markdown(doc))


if __name__ == "__main__":
    main()
