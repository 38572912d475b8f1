"""Batch curves of the example models, measured through Triton's own per-batch-size timers.

    .venv/bin/python benchmarks/batch_curves.py [--repeats 15] [--json]

Starts the embedded Triton on free ports, measures each model with
autobatch.lab.measure (one request per run, compute time read from
/v2/models/M/stats batch_stats, median of the repeats), and prints the
per-item time at each batch size relative to batch 1. It also loads the
emulated accelerator with curves/laptop-512x288-fp16.yaml and shows
how closely it reproduces that curve. The run is saved under
benchmarks/results/batch_curves/ (record.save_result) for the results table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from record import row, save_result
from rich.console import Console
from rich.table import Table

from autobatch.curve import load_curve
from autobatch.lab.measure import measure_curve
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer

ROOT = Path(__file__).resolve().parents[1]
SIZES = [1, 2, 4, 8, 16, 32]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    console = Console(stderr=args.json)
    results: dict[str, dict] = {}
    with TritonServer.on_free_ports(ROOT / "model_repository") as server:
        for model in ("dense_mlp", "small_cnn"):
            with console.status(f"measuring {model} ..."):
                m = measure_curve(server.urls.http, model, SIZES, warmup=3, repeats=args.repeats)
            pts = m.curve.points
            results[model] = {
                "points_ms": pts,
                "per_item_ms": {b: pts[b] / b for b in SIZES},
                "per_item_ratio_16_vs_1": (pts[16] / 16) / pts[1],
                "per_item_ratio_32_vs_1": (pts[32] / 32) / pts[1],
            }
        target = load_curve(ROOT / "curves" / "laptop-512x288-fp16.yaml")
        server.load_emulator(target)
        with console.status("measuring the emulated accelerator ..."):
            m = measure_curve(server.urls.http, EMULATOR_MODEL, [1, 2, 4, 8, 16],
                              warmup=2, repeats=args.repeats)
        results["emulated_laptop-512x288-fp16"] = {
            "points_ms": m.curve.points,
            "target_ms": dict(target.points),
            "error_pct": {b: 100 * (m.curve.points[b] / target.points[b] - 1) for b in m.curve.points},
        }
    save_result("batch_curves", {"repeats": args.repeats, "sizes": SIZES, "models": results},
                _rows(results))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for model in ("dense_mlp", "small_cnn"):
        r = results[model]
        t = Table(title=f"{model}: compute time per batch (Triton batch_stats, median of {args.repeats})")
        for col in ("batch", "ms/batch", "ms/item", "per-item vs batch 1"):
            t.add_column(col, justify="right")
        for b in SIZES:
            t.add_row(str(b), f"{r['points_ms'][b]:.2f}", f"{r['per_item_ms'][b]:.3f}",
                      f"{r['per_item_ms'][b] / r['per_item_ms'][1]:.2f}x")
        console.print(t)
    r = results["emulated_laptop-512x288-fp16"]
    t = Table(title="emulated_accelerator set to laptop-512x288-fp16")
    for col in ("batch", "curve ms", "measured ms", "error"):
        t.add_column(col, justify="right")
    for b, ms in r["points_ms"].items():
        t.add_row(str(b), f"{r['target_ms'][b]:.2f}", f"{ms:.2f}", f"{r['error_pct'][b]:+.1f}%")
    console.print(t)


def _rows(results: dict[str, dict]) -> list[dict]:
    """The results table's lines: where batching pays, where it does not, and how true the emulator runs."""
    out = []
    d = results["dense_mlp"]
    out.append(row(
        "dense_mlp (torch MLP, one thread) per-item time through Triton's batch timers",
        f"{d['points_ms'][1]:.2f} ms at batch 1; {d['per_item_ms'][16]:.2f} ms/item at 16 "
        f"(**{d['per_item_ratio_16_vs_1']:.2f}x**), {d['per_item_ms'][32]:.2f} at 32 "
        f"({d['per_item_ratio_32_vs_1']:.2f}x): batching pays",
        key="dense_mlp_per_item_32_vs_1", value=round(d["per_item_ratio_32_vs_1"], 4), unit="x"))
    s = results["small_cnn"]
    ratios = {b: s["per_item_ms"][b] / s["per_item_ms"][1] for b in SIZES}
    out.append(row(
        "small_cnn (two conv layers) per-item time, same way",
        f"{s['points_ms'][1]:.2f} ms at batch 1; {ratios[2]:.2f}x at 2, {ratios[4]:.2f}x at 4, "
        f"**{ratios[32]:.2f}x at 32**: batching does not pay",
        key="small_cnn_per_item_32_vs_1", value=round(ratios[32], 4), unit="x"))
    e = results["emulated_laptop-512x288-fp16"]
    sizes = sorted(e["points_ms"])
    worst = max(abs(v) for v in e["error_pct"].values())
    out.append(row(
        "emulated accelerator set to curves/laptop-512x288-fp16.yaml: measured vs the curve",
        "batch " + "/".join(map(str, sizes)) + ": "
        + "/".join(f"{e['error_pct'][b]:+.1f}" for b in sizes) + "% "
        + f"(worst **{worst:.1f}%**, Triton's own overhead on top of the curve)",
        key="emulator_worst_error_pct", value=round(worst, 3), unit="%"))
    return out


if __name__ == "__main__":
    main()
