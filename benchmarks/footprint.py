"""The sidecar's own footprint: resident memory and CPU at a 1 s poll interval.

    .venv/bin/python benchmarks/footprint.py [--seconds 60] [--json]

Starts the embedded Triton with dense_mlp, `autobatch run` as a separate
process (examples/sidecar.yaml pointed at that Triton, interval 1 s), and a
light load (20 requests/s) so every window has data; then reads the sidecar's
RSS and CPU time from /proc over the run. Each run is saved under
benchmarks/results/footprint/ (record.save_result) for the results table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml
from record import row, save_result

from autobatch.lab.process import poll_until
from autobatch.lab.serve import TritonServer, free_port
from autobatch.load import run_load
from autobatch.schedule import Schedule

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, \
            TritonServer.on_free_ports(ROOT / "model_repository", models=["dense_mlp"]) as server:
        cfg = yaml.safe_load((ROOT / "examples" / "sidecar.yaml").read_text())
        port = free_port()
        cfg["triton"] = {"http_url": server.urls.http, "metrics_url": server.urls.metrics,
                         "grpc_url": server.urls.grpc}
        cfg["profiles"]["dir"] = str(ROOT / "profiles" / "dense_mlp")
        cfg["policy"]["interval_s"] = 1
        cfg["policy"]["curve"] = str(ROOT / "curves" / "dense_mlp-cpu.yaml")
        cfg["server"] = {"listen": f"127.0.0.1:{port}"}
        cfg["decision_log"] = str(Path(tmp) / "decisions.jsonl")
        path = Path(tmp) / "sidecar.yaml"
        path.write_text(yaml.safe_dump(cfg))
        proc = subprocess.Popen([sys.executable, "-m", "autobatch", "run", "--config", str(path),
                                 "--log-level", "warning"], stderr=subprocess.DEVNULL)
        try:
            def healthy() -> bool:
                try:
                    return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            def alive() -> None:
                if proc.poll() is not None:
                    raise SystemExit(f"the sidecar exited with code {proc.returncode} before it came up")

            poll_until(healthy, timeout_s=60, what="the sidecar's /healthz", interval_s=0.2, check=alive)
            load = threading.Thread(target=run_load, daemon=True, args=(
                server.urls.grpc, "dense_mlp", Schedule.constant(20, args.seconds + 5)))
            load.start()
            time.sleep(3)  # let the first windows and imports settle before measuring
            c0, t0, r0 = cpu_s(proc.pid), time.monotonic(), rss_mb(proc.pid)
            peak = r0
            while time.monotonic() - t0 < args.seconds:
                time.sleep(1)
                peak = max(peak, rss_mb(proc.pid))
            c1, t1, r1 = cpu_s(proc.pid), time.monotonic(), rss_mb(proc.pid)
            ticks = httpx.get(f"http://127.0.0.1:{port}/status", timeout=5).json()["ticks"]
        finally:
            proc.terminate()
            proc.wait(30)
        load.join(30)
    result = {
        "seconds": round(t1 - t0, 1),
        "ticks": ticks,
        "cpu_percent_of_one_core": round(100 * (c1 - c0) / (t1 - t0), 2),
        "rss_mb_start": round(r0, 1),
        "rss_mb_end": round(r1, 1),
        "rss_mb_peak": round(peak, 1),
    }
    save_result("footprint", result, [row(
        "the sidecar's own footprint at a 1 s poll interval (a separate `autobatch run` process, "
        "Triton under 20 req/s)",
        f"**{result['cpu_percent_of_one_core']:.1f}% of one core, {result['rss_mb_end']:.0f} MB RSS** "
        f"(peak {result['rss_mb_peak']:.0f} MB) over {result['seconds']:.0f} s, {ticks} ticks",
        key="cpu_percent_of_one_core", value=result["cpu_percent_of_one_core"], unit="% of a core")])
    if args.json:
        print(json.dumps(result))
    else:
        print(f"sidecar at a 1 s interval over {result['seconds']} s ({ticks} ticks): "
              f"CPU {result['cpu_percent_of_one_core']}% of one core, RSS {result['rss_mb_end']} MB "
              f"(peak {result['rss_mb_peak']} MB)")


if __name__ == "__main__":
    main()
