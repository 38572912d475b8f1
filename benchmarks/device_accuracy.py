"""The emulated device's batch times against its curve, idle and with both cores kept busy.

    .venv/bin/python benchmarks/device_accuracy.py [--curve curves/t4-resnet50-fp16.yaml]
        [--repeats 10] [--blocks 2] [--json]

One device process (``autobatch device``) and the real Triton with the emulated
model pointed at it. Each block measures the curve at batch 1..32 through
Triton's per-batch-size compute times (``autobatch.lab.measure``: one request
carrying the whole batch, the compute time read from ``batch_stats``), once
with the machine as it is and once with two more processes spinning, one per
core. The blocks alternate so both modes see the same drift. The target
(issue 27): the median over the batch sizes of |measured / curve - 1| within
5% in both modes. Beside them, in the same blocks, the emulated model not
pointed at the device (it sleeps in its own stub, as before the device
existed): what Triton and the stub add to any emulated batch, which is not the
device's. And how late the device answered after each job's exact completion
time (its own lateness histogram): the part of the error that is the device's.

Beside Triton's compute time, the device's own batch times from what it
answered (``/jobs``: each DONE line, and when it went out): ``finished -
started``, on the device's model clock, and ``answered - started``, that plus
how late the answer left. The target is judged on Triton's compute time, as a
user measures a batch on a real server: the device's own figure holds neither
the stub's round trip nor anything the server adds, so it is reported, not judged.
The device runs at its default priority (``realtime``: SCHED_FIFO where
allowed); ``--priority normal`` measures it as an ordinary process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from record import row, save_result
from rich.console import Console
from rich.table import Table

from autobatch.curve import load_curve
from autobatch.device.protocol import parse_address
from autobatch.device.settings import DeviceSettings
from autobatch.lab.gpu import DeviceProcess
from autobatch.lab.measure import measure_curve
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer

ROOT = Path(__file__).resolve().parents[1]
SIZES = [1, 2, 4, 8, 16, 32]
TARGET_PCT = 5.0
FREE = parse_address("127.0.0.1:0")


@contextmanager
def busy_cores(n: int) -> Any:
    """``n`` processes spinning in pure Python: each keeps a core busy while they run."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def lateness(status_url: str) -> dict[str, Any]:
    return httpx.get(status_url, timeout=10).json().get("lateness_ms", {})


def device_jobs(jobs_url: str, after: int) -> list[dict[str, Any]]:
    """The jobs the device completed since job number ``after``, as it answered them."""
    return httpx.get(jobs_url, params={"after": after}, timeout=10).json()["jobs"]


def own_times(jobs: list[dict[str, Any]], repeats: int) -> dict[int, dict[str, list[float]]]:
    """By batch size, the device's own times of the last ``repeats`` jobs of that size (the
    measured ones: measure_curve runs its warm-ups of a size first)."""
    out = {}
    for b in SIZES:
        mine = [j for j in jobs if j["items"] == b][-repeats:]
        out[b] = {"device_ms": [j["finished_ms"] - j["started_ms"] for j in mine],
                  "answered_ms": [j["answered_ms"] - j["started_ms"] for j in mine]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curve", type=Path, default=ROOT / "curves" / "t4-resnet50-fp16.yaml")
    ap.add_argument("--repeats", type=int, default=10, help="measured runs per size per block")
    ap.add_argument("--blocks", type=int, default=2, help="idle/loaded pairs, alternating")
    ap.add_argument("--priority", choices=("realtime", "high", "normal"), default="realtime")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    console = Console(stderr=args.json)
    curve = load_curve(args.curve)
    modes = [f"{where}-{load}" for where in ("device", "plain") for load in ("idle", "loaded")]
    samples: dict[str, dict[int, list[float]]] = {m: {b: [] for b in SIZES} for m in modes}
    late: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    own: dict[str, dict[int, dict[str, list[float]]]] = {
        m: {b: {"device_ms": [], "answered_ms": []} for b in SIZES} for m in modes if m.startswith("device")}
    loads: dict[str, list[float]] = {m: [] for m in modes}
    settings = DeviceSettings(listen=FREE, metrics=FREE, priority=args.priority)
    with DeviceProcess(settings) as dev, TritonServer.on_free_ports(
        ROOT / "model_repository", models=[EMULATOR_MODEL], emulate_curve=curve, emulate_device=dev.address
    ) as server:
        priority = httpx.get(dev.status_url, timeout=10).json().get("priority")
        measure_curve(server.urls.http, EMULATOR_MODEL, SIZES, warmup=2, repeats=1)  # warm-up
        for block in range(args.blocks):
            for mode in modes:
                where, load = mode.split("-")
                server.load_emulator(curve, device=dev.address if where == "device" else None)
                with busy_cores(2 if load == "loaded" else 0):
                    before = lateness(dev.status_url)
                    mark = max((j["n"] for j in device_jobs(dev.jobs_url, 0)), default=0)
                    with console.status(f"block {block + 1}/{args.blocks}: measuring {mode} ..."):
                        m = measure_curve(server.urls.http, EMULATOR_MODEL, SIZES, warmup=2,
                                          repeats=args.repeats)
                    after = lateness(dev.status_url)
                    jobs = device_jobs(dev.jobs_url, mark)
                    loads[mode].append(os.getloadavg()[0])
                for b in SIZES:
                    samples[mode][b].extend(m.samples_ms[b])
                if mode in own:
                    for b, times in own_times(jobs, args.repeats).items():
                        for k, v in times.items():
                            own[mode][b][k].extend(v)
                late[mode].append(_between(before, after))
    result = _summarise(curve, samples, late, loads, own, args)
    result["priority"] = priority
    save_result("device_accuracy", result, _rows(result))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    t = Table(title=f"emulated model vs {curve.name}: Triton's compute time per batch "
                    f"(median of {args.repeats * args.blocks}); the device at priority {priority}")
    t.add_column("batch", justify="right")
    t.add_column("curve ms", justify="right")
    for mode in modes:
        t.add_column(mode.replace("-", " "), justify="right")
    for b in SIZES:
        t.add_row(str(b), f"{curve.estimate(b).ms:.2f}",
                  *(f"{result['modes'][m]['median_ms'][b]:.2f} ({result['modes'][m]['error_pct'][b]:+.1f}%)"
                    for m in modes))
    console.print(t)
    t = Table(title="the device's own batch times, from what it answered (median): finished - started "
                    "| answered - started (reported, not judged)")
    t.add_column("batch", justify="right")
    t.add_column("curve ms", justify="right")
    for mode in own:
        t.add_column(mode.replace("-", " "), justify="right")
    for b in SIZES:
        t.add_row(str(b), f"{curve.estimate(b).ms:.2f}", *(
            f"{result['modes'][m]['own']['device_ms']['median_ms'][b]:.3f} | "
            f"{result['modes'][m]['own']['answered_ms']['median_ms'][b]:.3f}" for m in own))
    console.print(t)
    for mode in modes:
        r = result["modes"][mode]
        extra = "" if r["lateness_mean_ms"] is None else \
            f"; the device answered {r['lateness_mean_ms']:.3f} ms late on average"
        console.print(f"{mode}: median |error| over the sizes {r['median_abs_error_pct']:.2f}% "
                      f"(target {TARGET_PCT:g}%: {'met' if r['met'] else 'MISSED'}){extra}; "
                      f"load average {r['load_average']}")


def _between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    n = after.get("count", 0) - before.get("count", 0)
    s = after.get("sum", 0.0) - before.get("sum", 0.0)
    return {"count": n, "sum_ms": s}


def _against(curve: Any, by_size: dict[int, list[float]]) -> dict[str, Any]:
    """Median per size, its error against the curve, and the median |error| over the sizes."""
    med = {b: statistics.median(v) for b, v in by_size.items()}
    err = {b: 100.0 * (med[b] / curve.estimate(b).ms - 1.0) for b in SIZES}
    mae = statistics.median(abs(e) for e in err.values())
    return {"median_ms": med, "error_pct": err, "median_abs_error_pct": mae,
            "worst_abs_error_pct": max(abs(e) for e in err.values())}


def _summarise(curve: Any, samples: dict[str, dict[int, list[float]]], late: dict[str, list[dict[str, Any]]],
               loads: dict[str, list[float]], own: dict[str, dict[int, dict[str, list[float]]]],
               args: Any) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for mode, by_size in samples.items():
        n = sum(x["count"] for x in late[mode])
        s = sum(x["sum_ms"] for x in late[mode])
        got = _against(curve, by_size)
        modes[mode] = {
            **got, "met": got["median_abs_error_pct"] <= TARGET_PCT,
            "samples_ms": by_size, "lateness_mean_ms": s / n if n else None, "jobs": n,
            "load_average": [round(x, 2) for x in loads[mode]],
        }
        if mode in own:
            # The device's own times (not judged): on its model clock, and with the answer's delay.
            modes[mode]["own"] = {k: _against(curve, {b: own[mode][b][k] for b in SIZES})
                                  for k in ("device_ms", "answered_ms")}
    return {"curve": curve.name, "curve_ms": {b: curve.estimate(b).ms for b in SIZES}, "sizes": SIZES,
            "repeats": args.repeats, "blocks": args.blocks, "target_pct": TARGET_PCT,
            "judged_on": "Triton's compute time per batch (batch_stats)", "modes": modes}


def _rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    m = r["modes"]
    i, lo, pi, pl = m["device-idle"], m["device-loaded"], m["plain-idle"], m["plain-loaded"]
    return [row(
        f"emulated device ({r['curve']}): batch 1-32 times through Triton vs the curve",
        f"median error over the sizes: **{i['median_abs_error_pct']:.1f}%** as the machine was, "
        f"**{lo['median_abs_error_pct']:.1f}%** with both cores kept busy (target 5%); the model "
        f"not on the device, same blocks: {pi['median_abs_error_pct']:.1f}% / "
        f"{pl['median_abs_error_pct']:.1f}%; device answers {lo['lateness_mean_ms']:.2f} ms late "
        f"on average, busy; the device's own batch times (answered - started), not judged: "
        f"{i['own']['answered_ms']['median_abs_error_pct']:.2f}% / "
        f"{lo['own']['answered_ms']['median_abs_error_pct']:.2f}%",
        key="device_accuracy_busy_pct", value=round(lo["median_abs_error_pct"], 3), unit="%",
        value_name="busy-core error")]


if __name__ == "__main__":
    main()
