"""Bursts on the real Triton: which way of modelling them matches the server?

    .venv/bin/python benchmarks/bursts.py          # ~1.5 min

Issue 13 found the simulator's engines disagreeing on the repository's bursty
schedule (examples/schedules/bursty.yaml, its `burst` phase: bursts of 8 requests
at one instant, 150 req/s) with dense_mlp's latency-soft profile: before the
issue the `triton` engine, which ran its batcher after each of a burst's
requests, predicted a mean batch of 2.5 and p50 54 ms; the `rules` engine, which
saw the burst queued at once, 4.0 and 33 ms. This measures it: the emulated
accelerator runs dense_mlp's measured curve (curves/dense_mlp-cpu.yaml) with the
latency-soft profile, `autobatch load` sends the burst phase (--runs times, one
seed each), and the same arrivals go through the simulator three ways:

* the schedule's times, a burst at one instant (what both engines now do with
  simultaneous arrivals: Triton's rule when requests are queued together);
* the schedule's times with a burst spread by SEND_GAP_S (the simulator's default
  for schedules and traces: one client sends a burst a request at a time);
* the times load recorded as it sent them (`load --record-trace`).

Each with the engines as they are and as they were before the issue (git
8399142, benchmarks/baseline.py), on the overheads measured from Triton's timers,
and on the bare curve (the issue's figures had no overheads). Measured: the
client's p50/p95 and the mean batch from Triton's batch_stats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import baseline
import httpx
import numpy as np
from record import row, save_result
from rich.console import Console
from rich.table import Table

from autobatch.curve import load_curve
from autobatch.lab.fidelity import median_overheads, overheads_from_stats
from autobatch.lab.measure import model_stats
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.lab.traces import mean_batch_between
from autobatch.load import run_load
from autobatch.plan.simulator import ServiceModel, Workload, build_workload, simulate
from autobatch.profiles import load_profile
from autobatch.schedule import Schedule, load_schedule

ROOT = Path(__file__).resolve().parents[1]
CURVE_FILE = "curves/dense_mlp-cpu.yaml"
PROFILE_FILE = "profiles/dense_mlp/latency-soft.yaml"
SCHEDULE_FILE = "examples/schedules/bursty.yaml"


def run(runs: int) -> dict[str, Any]:
    curve = load_curve(ROOT / CURVE_FILE)
    profile = load_profile(ROOT / PROFILE_FILE)
    phase = next(p for p in load_schedule(ROOT / SCHEDULE_FILE).phases if p.name == "burst")
    schedule = Schedule((phase,))
    measured = []
    overheads = []
    with TritonServer.on_free_ports(ROOT / "model_repository", models=[EMULATOR_MODEL]) as server, \
            tempfile.TemporaryDirectory() as tmp, httpx.Client(base_url=server.urls.http) as client:
        server.load_emulator(curve, profile)
        for seed in range(1, runs + 1):
            sent_file = Path(tmp) / f"sent-{seed}.csv"
            before = model_stats(client, EMULATOR_MODEL)
            report = run_load(server.urls.grpc, EMULATOR_MODEL, schedule, seed=seed, record_trace=sent_file)
            after = model_stats(client, EMULATOR_MODEL)
            ok = [r.latency_ms for r in report.records if r.ok and r.latency_ms is not None]
            if report.total.failed:
                raise SystemExit(f"failed requests: {dict(report.failures)}")
            overheads.append(overheads_from_stats(before, after, curve, statistics.fmean(ok)))
            sent = np.array(sorted(r.sent_s for r in report.records if r.sent_s is not None))
            spread = [float(np.ptp(sent[i:i + phase.burst_size])) * 1000
                      for i in range(0, len(sent) - phase.burst_size + 1, phase.burst_size)]
            p50, p95 = np.percentile(ok, (50, 95))
            measured.append({"seed": seed, "p50_ms": float(p50), "p95_ms": float(p95),
                             "mean_batch": mean_batch_between(before, after),
                             "burst_send_spread_ms_p50": float(np.median(spread)),
                             "sent": build_workload(trace=sent_file, burst_gap_s=0.0)})
    med = median_overheads(overheads)
    services = {
        "measured overheads": (med.batch_overhead_ms, med.request_overhead_ms, med.fixed_latency_ms),
        "bare curve": (0.0, 0.0, 0.0),
    }
    old = baseline.load()
    predictions = []
    for over_name, (b, r, f) in services.items():
        new_svc = ServiceModel(curve, batch_overhead_ms=b, request_overhead_ms=r, fixed_latency_ms=f)
        old_svc = old.ServiceModel(curve, batch_overhead_ms=b, request_overhead_ms=r, fixed_latency_ms=f)
        for arrivals in ("at one instant", "spread (SEND_GAP_S)", "as sent"):
            for version in ("now", "before"):
                if version == "before" and arrivals == "spread (SEND_GAP_S)":
                    continue  # the old workloads had no spread
                for engine in ("triton", "rules"):
                    figs = []
                    for m in measured:
                        if arrivals == "as sent":
                            w = m["sent"]
                            work = w if version == "now" else old.Workload(w.t_s, w.duration_s)
                        elif version == "now":
                            work = Workload.from_schedule(
                                schedule, m["seed"],
                                **({"burst_gap_s": 0.0} if arrivals == "at one instant" else {}))
                        else:
                            work = old.Workload.from_schedule(schedule, m["seed"])
                        sim = (simulate if version == "now" else old.simulate)(
                            profile, new_svc if version == "now" else old_svc, work, engine=engine)
                        figs.append((sim.mean_batch, sim.latency.p50_ms, sim.latency.p95_ms))
                    mb, p50, p95 = (statistics.median(x) for x in zip(*figs))
                    predictions.append({"overheads": over_name, "arrivals": arrivals, "engines": version,
                                        "engine": engine, "mean_batch": mb, "p50_ms": p50, "p95_ms": p95})
    real = {k: statistics.median(m[k] for m in measured)
            for k in ("p50_ms", "p95_ms", "mean_batch", "burst_send_spread_ms_p50")}
    for p in predictions:
        p["p50_error"] = p["p50_ms"] / real["p50_ms"] - 1
        p["p95_error"] = p["p95_ms"] / real["p95_ms"] - 1
        p["batch_error"] = p["mean_batch"] / real["mean_batch"] - 1
    return {"curve": CURVE_FILE, "profile": PROFILE_FILE, "schedule": f"{SCHEDULE_FILE} (phase burst)",
            "runs": runs, "overheads": med.to_dict(), "measured": real,
            "measured_runs": [{k: v for k, v in m.items() if k != "sent"} for m in measured],
            "predictions": predictions}


def _pick(data: dict[str, Any], **kw: str) -> dict[str, Any]:
    return next(p for p in data["predictions"] if all(p[k] == v for k, v in kw.items()))


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    m = data["measured"]
    sent = _pick(data, overheads="measured overheads", arrivals="as sent", engines="now", engine="triton")
    spread = _pick(data, overheads="measured overheads", arrivals="spread (SEND_GAP_S)", engines="now",
                   engine="triton")
    once = _pick(data, overheads="measured overheads", arrivals="at one instant", engines="now",
                 engine="triton")
    return [row(
        "bursts of 8 at one instant (examples/schedules/bursty.yaml, burst phase), dense_mlp "
        "latency-soft on the emulated accelerator: real Triton vs simulator (triton engine)",
        f"real mean batch {m['mean_batch']:.2f}, p50 {m['p50_ms']:.0f} ms; simulated as sent "
        f"{sent['mean_batch']:.2f} / {sent['p50_ms']:.0f} ms ({sent['p50_error']:+.0%}), bursts spread "
        f"{spread['mean_batch']:.2f} / {spread['p50_ms']:.0f} ms ({spread['p50_error']:+.0%}), "
        f"bursts at one instant {once['mean_batch']:.2f} / {once['p50_ms']:.0f} ms "
        f"({once['p50_error']:+.0%})",
        key="bursts_spread_p50_error_pct", value=round(100 * spread["p50_error"], 2), unit="%")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    console = Console(stderr=args.json, width=160)
    with console.status("bursts on the real Triton ..."):
        data = run(args.runs)
    save_result("bursts", data, _rows(data))
    if args.json:
        print(json.dumps(data, indent=2))
        return
    m = data["measured"]
    console.print(f"real Triton ({data['runs']} runs, medians): mean batch {m['mean_batch']:.2f}, "
                  f"p50 {m['p50_ms']:.1f} ms, p95 {m['p95_ms']:.1f} ms; a burst of 8 left the client "
                  f"within {m['burst_send_spread_ms_p50']:.2f} ms (median); overheads {data['overheads']}")
    t = Table(title=f"{data['schedule']}, {data['profile']} on {data['curve']}")
    left = ("overheads", "arrivals", "engines", "engine")
    for col in (*left, "mean batch", "p50 ms", "err", "p95 ms", "err"):
        t.add_column(col, justify="left" if col in left else "right")
    for p in data["predictions"]:
        t.add_row(p["overheads"], p["arrivals"], p["engines"], p["engine"], f"{p['mean_batch']:.2f}",
                  f"{p['p50_ms']:.1f}", f"{p['p50_error']:+.0%}",
                  f"{p['p95_ms']:.1f}", f"{p['p95_error']:+.0%}")
    console.print(t)


if __name__ == "__main__":
    main()
