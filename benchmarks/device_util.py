"""DCGM_FI_DEV_GPU_UTIL as the sidecar reads it, against the device's own busy share.

    .venv/bin/python benchmarks/device_util.py [--rates 15,40,70] [--duration 20] [--json]

One device process and the real Triton with the emulated model (the T4
mixed-precision ResNet-50 curve) pointed at it, under Poisson load at three
rates. Meanwhile the sidecar's own signal source (``TritonSource`` with the
device's ``/metrics`` as its dcgm-exporter URL, as ``signals.utilization: dcgm``
builds it) polls every second, and after each poll the device's exact busy
counter is read. Reported for each rate: the mean utilisation the sidecar read
against the device's busy share over the same span (d busy / d uptime), and,
window by window, the sidecar's reading (the last complete 1 s period) against
the busy share over that window. The load runs until the last window has been
read. Target (issue 27): within 2 points.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
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
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.load import run_load_async
from autobatch.schedule import Schedule
from autobatch.signals.factory import ReadTarget, SignalSettings, build_source

ROOT = Path(__file__).resolve().parents[1]
TARGET_POINTS = 2.0
FREE = parse_address("127.0.0.1:0")


def busy(status_url: str) -> tuple[float, float]:
    s = httpx.get(status_url, timeout=5).json()
    return s["busy_s"], s["uptime_s"]


async def one_rate(server: TritonServer, dev: DeviceProcess, rate: float, duration_s: float,
                   seed: int) -> dict[str, Any]:
    settings = SignalSettings(utilization="dcgm", dcgm_url=dev.metrics_url, timeout_s=2.0)
    source = build_source(settings, ReadTarget(EMULATOR_MODEL, server.urls.http, server.urls.metrics))
    # The load outlasts the readings (a window takes 1 s and a poll) and is stopped after the
    # last one: a window past the load's end compares the sidecar's last full period, a period
    # behind, with an idle device (the 09:11 run's 2.56-point miss was that).
    stop = asyncio.Event()
    load = asyncio.create_task(run_load_async(server.urls.grpc, EMULATOR_MODEL,
                                              Schedule.constant(rate, 3 * duration_s + 10.0), seed=seed,
                                              stop=stop))
    await asyncio.sleep(2.0)  # the load reaches its rate, the first period closes
    readings: list[dict[str, Any]] = []
    await source.poll()
    prev = await asyncio.to_thread(busy, dev.status_url)
    first = prev
    for _ in range(int(duration_s)):
        await asyncio.sleep(1.0)
        w = await source.poll()
        now = await asyncio.to_thread(busy, dev.status_url)
        if load.done():
            break  # the load ended before this window did: it is not a window under load
        share = (now[0] - prev[0]) / max(1e-9, now[1] - prev[1])
        readings.append({"sidecar": None if w is None else w.utilization, "device": share,
                         "detail": None if w is None else w.utilization_detail})
        prev = now
    stop.set()
    report = await load
    await source.aclose()
    got = [r["sidecar"] for r in readings if r["sidecar"] is not None]
    overall = (prev[0] - first[0]) / max(1e-9, prev[1] - first[1])
    per_window = [abs(r["sidecar"] - r["device"]) * 100 for r in readings if r["sidecar"] is not None]
    return {
        "rate_rps": rate, "windows": len(readings), "read": len(got),
        "sidecar_mean": statistics.mean(got) if got else None, "device_share": overall,
        "diff_points": None if not got else 100 * (statistics.mean(got) - overall),
        "per_window_median_abs_points": statistics.median(per_window) if per_window else None,
        "per_window_max_abs_points": max(per_window) if per_window else None,
        "requests": len(report.records), "failed": sum(1 for r in report.records if not r.ok),
        "readings": readings,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--curve", type=Path, default=ROOT / "curves" / "t4-resnet50-fp16.yaml")
    ap.add_argument("--rates", default="15,40,70")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of readings per rate")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    console = Console(stderr=args.json)
    curve = load_curve(args.curve)
    rates = [float(r) for r in args.rates.split(",")]
    cases = []
    settings = DeviceSettings(listen=FREE, metrics=FREE, util_period_ms=1000.0)
    with DeviceProcess(settings) as dev, TritonServer.on_free_ports(
            ROOT / "model_repository", models=[EMULATOR_MODEL], emulate_curve=curve,
            emulate_device=dev.address) as server:
        for i, rate in enumerate(rates):
            with console.status(f"{rate:g} req/s for {args.duration:g} s ..."):
                cases.append(asyncio.run(one_rate(server, dev, rate, args.duration, seed=i)))
    worst = max(abs(c["diff_points"]) for c in cases if c["diff_points"] is not None)
    result = {"curve": curve.name, "duration_s": args.duration, "period_ms": 1000.0,
              "target_points": TARGET_POINTS, "worst_diff_points": worst, "met": worst <= TARGET_POINTS,
              "cases": cases}
    save_result("device_util", result, _rows(result))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    t = Table(title="DCGM_FI_DEV_GPU_UTIL as the sidecar's source reads it vs the device's busy share")
    for col in ("req/s", "sidecar mean", "device busy", "diff (points)", "per window: median |diff|", "max"):
        t.add_column(col, justify="right")
    for c in cases:
        t.add_row(f"{c['rate_rps']:g}", f"{100 * c['sidecar_mean']:.1f}%", f"{100 * c['device_share']:.1f}%",
                  f"{c['diff_points']:+.2f}", f"{c['per_window_median_abs_points']:.1f}",
                  f"{c['per_window_max_abs_points']:.1f}")
    console.print(t)
    console.print(f"worst over the rates: {worst:.2f} points (target {TARGET_POINTS:g}: "
                  f"{'met' if result['met'] else 'MISSED'})")


def _rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    parts = ", ".join(
        f"{c['rate_rps']:g} req/s {100 * c['sidecar_mean']:.1f}% vs {100 * c['device_share']:.1f}%"
        for c in r["cases"])
    return [row("DCGM_FI_DEV_GPU_UTIL as the sidecar reads it vs the device's own busy share",
                f"{parts}: worst **{r['worst_diff_points']:.2f} points** (target 2)",
                key="device_util_worst_points", value=round(r["worst_diff_points"], 3), unit=" points")]


if __name__ == "__main__":
    main()
