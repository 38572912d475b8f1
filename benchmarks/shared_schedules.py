"""The GPU ladders and the shared-GPU schedules, planned and saved; docs/ladders.md's tables from the file.

    .venv/bin/python benchmarks/shared_schedules.py           # 3 ladders, 12 schedule plans (~5-10 min)
    .venv/bin/python benchmarks/shared_schedules.py --docs    # docs/ladders.md's tables from the newest run
    .venv/bin/python benchmarks/shared_schedules.py --check   # exit 1 if those tables differ from it

``autobatch plan`` (:func:`autobatch.plan.planner.make_plan`), SLO p95 60 ms
(the sidecar's ``slo.p95_ms``), 2 ms of network, one instance:

- **ladders**: the T4 curves of curves/ (ResNet-50 v1.5 in mixed precision and in
  fp32, BERT-base at sequence length 128 in fp16 with max_batch_size 8), each
  planned at the load of its ``LADDERS`` row: the candidates ``plan`` writes with
  ``--write-profiles`` (profiles/resnet50, resnet50-fp32, bert-base), what each does at
  that load and the highest Poisson rate it carries within the SLO;
- **schedules**: "does switching pay?" over the shared-GPU schedules
  (examples/schedules/cotenants-*.yaml, their co-tenants placed by their phases) on the
  mixed-precision curve, and over the four load schedules (step, bursty, ramp,
  rise-fall) on the mixed-precision and fp32 curves, each at the schedule's peak rate
  (the candidates are planned there; the schedule is what switching is judged on).

Per schedule it keeps, for every static profile and the oracle, the phases over the
SLO beyond the best choice (more than 1 point) and the device time per request, and
the plan's verdict: whether switching pays, or which single static profile is the
answer. Pure simulation, no server. The tables in docs/ladders.md sit between
``<!-- gpu-ladders:begin/end -->`` and ``<!-- shared-schedules:begin/end -->`` and come
only from the newest saved run (``--docs``); ``--check`` (a unit test runs it) fails on a
stale or hand-edited table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import RESULTS, row, save_result, saved, sync_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SLO_MS, PERCENTILE, NETWORK_MS = 60.0, 95, 2.0
DOCS = ROOT / "docs" / "ladders.md"
NAME = "shared_schedules"
FP16, FP32 = "curves/t4-resnet50-fp16.yaml", "curves/t4-resnet50-fp32.yaml"
BERT = "curves/t4-bert-base-seq128-fp16.yaml"
# (profiles folder, model name, curve, max_batch_size, the load the ladder is planned at)
LADDERS = (("resnet50", "resnet50", FP16, 32, 150.0), ("resnet50-fp32", "resnet50", FP32, 32, 150.0),
           ("bert-base", "bert_base", BERT, 8, 150.0))
# (schedule, curve, the schedule's peak rate)
SCHEDULES = (
    ("cotenants-step", FP16, 150.0), ("cotenants-ramp", FP16, 200.0), ("cotenants-day", FP16, 250.0),
    ("cotenants-linger", FP16, 150.0),
    *((name, curve, peak) for curve in (FP16, FP32)
      for name, peak in (("step", 350.0), ("bursty", 150.0), ("ramp", 380.0), ("rise-fall", 300.0))),
)


def _plan(curve: str, rate: float, *, max_batch_size: int = 32, schedule: str | None = None,
          sweep_points: int, sweep_requests: int, seed: int) -> Any:
    from autobatch.curve import load_curve
    from autobatch.plan.planner import make_plan
    from autobatch.plan.simulator import load_shared_device
    from autobatch.schedule import load_schedule

    path = None if schedule is None else ROOT / "examples" / "schedules" / f"{schedule}.yaml"
    return make_plan(
        load_curve(ROOT / curve), SLO_MS, NETWORK_MS, slo_percentile=PERCENTILE, rate_rps=rate,
        max_batch_size=max_batch_size, sweep_points=sweep_points, sweep_requests=sweep_requests,
        seed=seed, schedule=None if path is None else load_schedule(path),
        schedule_label=None if path is None else str(path.relative_to(ROOT)),
        device=None if path is None else load_shared_device(schedule=path),
    )


def ladder_one(folder: str, model: str, curve: str, mbs: int, rate: float, **kw: Any) -> dict[str, Any]:
    plan = _plan(curve, rate, max_batch_size=mbs, **kw)
    rec = plan.recommended
    return {
        "profiles": f"profiles/{folder}", "curve": curve, "max_batch_size": mbs, "rate_rps": rate,
        "recommended": None if rec is None else rec.profile.name,
        "candidates": [{
            "name": c.profile.name, "summary": c.profile.summary(),
            "p95_ms": round(c.at_load.latency.p95_ms, 2) if c.at_load.latency else None,
            "device_ms": round(c.device_ms, 3), "mean_batch": round(c.at_load.mean_batch, 2),
            "max_rate_rps": round(c.max_rate_rps, 1), "meets_slo": c.meets_slo,
        } for c in plan.candidates],
        "switching": None if plan.switching is None else plan.switching.verdict.to_dict(),
        "command": (f"autobatch plan --curve {curve} --slo-p95-ms {SLO_MS:g} --network-ms {NETWORK_MS:g} "
                    f"--rate {rate:g}" + (f" --max-batch-size {mbs}" if mbs != 32 else "")
                    + f" --model {model} --write-profiles profiles/{folder}"),
    }


def schedule_one(name: str, curve: str, peak: float, **kw: Any) -> dict[str, Any]:
    plan = _plan(curve, peak, schedule=name, **kw)
    sw = plan.switching
    assert sw is not None
    best = [min([s.phases[i].over_slo for s in sw.statics] + [sw.oracle.phases[i].over_slo])
            for i in range(len(sw.oracle.phases))]

    def strategy(s: Any) -> dict[str, Any]:
        return {
            "name": s.name, "device_ms": round(s.device_ms, 4), "over_slo": round(s.over_slo, 5),
            "vs_oracle": round(s.device_ms / sw.oracle.device_ms, 3) if sw.oracle.device_ms else None,
            "misses": [p.phase for p, b in zip(s.phases, best)
                       if p.requests and p.over_slo > b + 0.01 + 1e-12],
            "phases": [p.to_dict() for p in s.phases],
        }

    default = sw.static("triton-default")
    return {
        "schedule": f"examples/schedules/{name}.yaml", "curve": curve, "rate_rps": peak,
        "device": sw.device, "candidates": [c.profile.name for c in plan.candidates],
        "verdict": sw.verdict.to_dict(),
        "oracle_vs_default": round(sw.oracle.device_ms / default.device_ms, 3),
        "oracle_picks": [p.profile for p in sw.oracle.phases],
        "statics": [strategy(s) for s in sw.statics], "oracle": strategy(sw.oracle),
    }


def run(sweep_points: int, sweep_requests: int, seed: int) -> dict[str, Any]:
    kw = {"sweep_points": sweep_points, "sweep_requests": sweep_requests, "seed": seed}
    ladders, schedules = [], []
    for folder, model, curve, mbs, rate in LADDERS:
        print(f"ladder {folder} on {curve} at {rate:g} req/s ...", file=sys.stderr, flush=True)
        ladders.append(ladder_one(folder, model, curve, mbs, rate, **kw))
    for name, curve, peak in SCHEDULES:
        print(f"schedule {name} on {curve} ...", file=sys.stderr, flush=True)
        schedules.append(schedule_one(name, curve, peak, **kw))
    return {"slo": {"percentile": PERCENTILE, "ms": SLO_MS}, "network_ms": NETWORK_MS, "instances": 1,
            **kw, "ladders": ladders, "schedules": schedules}


def newest() -> dict[str, Any]:
    docs = saved(NAME)
    if not docs:
        raise SystemExit(f"no saved run under {RESULTS / NAME}: run benchmarks/shared_schedules.py first")
    return docs[-1]


def _source(doc: dict[str, Any]) -> str:
    return (f"From `{doc['_file']}` ({doc['date']}): `{doc['command']}`; the table by "
            "`.venv/bin/python benchmarks/shared_schedules.py --docs`.")


def ladders_md(doc: dict[str, Any]) -> str:
    lines = ["| profiles | curve (max batch) | at req/s | candidate: p95 ms / device ms per request / "
             "carries req/s within the SLO | plan recommends |", "|---|---|---|---|---|"]
    for r in doc["data"]["ladders"]:
        cands = "<br>".join(
            f"{c['name']} ({c['summary'].split('(', 1)[1].rstrip(')')}): {c['p95_ms']} / "
            f"{c['device_ms']:.2f} / {c['max_rate_rps']:.0f}" for c in r["candidates"])
        lines.append(f"| {r['profiles']} | {Path(r['curve']).stem} ({r['max_batch_size']}) | "
                     f"{r['rate_rps']:g} | {cands} | {r['recommended'] or 'none'} |")
    return "\n".join([*lines, "", _source(doc)])


def _static_cell(s: dict[str, Any]) -> str:
    miss = f"over the SLO in {', '.join(s['misses'])}" if s["misses"] else "keeps every phase"
    return f"{s['name']}: {miss}; {s['vs_oracle']:.2f}x the oracle's device time"


def schedules_md(doc: dict[str, Any]) -> str:
    lines = ["| schedule | curve | each static profile (more than 1 point over the best in a phase; device "
             "time per request) | oracle's device time vs the default's | the plan says |",
             "|---|---|---|---|---|"]
    for r in doc["data"]["schedules"]:
        statics = "<br>".join(_static_cell(s) for s in r["statics"])
        verdict = f"**{r['verdict']['kind']}**: {r['verdict']['message']}"
        lines.append(f"| {Path(r['schedule']).stem} | {Path(r['curve']).stem} | {statics} | "
                     f"{r['oracle_vs_default']:.2f}x | {verdict} |")
    return "\n".join([*lines, "", _source(doc)])


def _blocks() -> dict[str, Any]:
    doc = newest()
    return {"gpu-ladders": lambda: ladders_md(doc), "shared-schedules": lambda: schedules_md(doc)}


def check() -> bool:
    """Whether docs/ladders.md's tables are what the newest saved run gives."""
    return sync_blocks(DOCS, _blocks(), check=True)


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    shared = [r for r in data["schedules"] if "cotenants-" in r["schedule"]]
    pays = sum(r["verdict"]["switching_pays"] for r in shared)
    single = [r for r in data["schedules"] if r["verdict"]["kind"] in ("static", "default")]
    return [
        row("plan on the shared-GPU schedules (examples/schedules/cotenants-*.yaml), T4 mixed precision, "
            "SLO p95 60 ms",
            f"switching pays on **{pays} of {len(shared)}**; the oracle uses "
            + ", ".join(f"{r['oracle_vs_default']:.2f}x" for r in shared)
            + " of Triton's default's device time (docs/ladders.md)"),
        row("plan on the four load schedules on the T4 curves (mixed precision, fp32), SLO p95 60 ms",
            f"one static profile is the answer on {len(single)} of {len(data['schedules']) - len(shared)}: "
            + ", ".join(f"{Path(r['schedule']).stem}/{Path(r['curve']).stem.split('-')[-1]} "
                        f"{r['verdict']['best_static']}" for r in single)
            + " (docs/ladders.md)"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep-points", type=int, default=8, help="each candidate's load sweep [8]")
    ap.add_argument("--sweep-requests", type=int, default=5000, help="requests per sweep point [5000]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--docs", action="store_true", help="write docs/ladders.md's tables from the newest run")
    ap.add_argument("--check", action="store_true", help="exit 1 if those tables differ from the newest run")
    args = ap.parse_args()
    if args.check:
        if not check():
            raise SystemExit(f"{DOCS.relative_to(ROOT)}: the ladder or schedule table differs from the "
                             "newest saved run: run benchmarks/shared_schedules.py --docs")
        return
    if args.docs:
        sync_blocks(DOCS, _blocks(), check=False)
        print(f"wrote {DOCS.relative_to(ROOT)}")
        return
    data = run(args.sweep_points, args.sweep_requests, args.seed)
    path = save_result(NAME, data, _rows(data))
    print(f"saved {path.relative_to(ROOT)}")
    doc = newest()
    print(ladders_md(doc))
    print(schedules_md(doc))


if __name__ == "__main__":
    main()
