"""Record the windows the sidecar reads while co-tenants arrive on, and leave, a shared GPU.

    .venv/bin/python benchmarks/shared_trace.py --out tests/data/shared-arrival.jsonl.gz

One emulated GPU (``autobatch device``, time-slicing in 2 ms turns) runs the
emulated model (ResNet-50 on a T4, ``--curve``) in the real Triton with a
waiting profile held (no controller: every window is that profile's), under a
Poisson load, and co-tenant jobs (ResNet-50 batch-32 jobs, busy ``--duty`` of
the time alone) that arrive at ``--arrive`` and leave at ``--leave``. Every
``--interval`` the sidecar's own source (``TritonSource`` with the curve and the
device's dcgm-exporter metrics) reads a window; each is one JSON line
(``autobatch watch --json``'s format, ``autobatch replay``'s input), and the first
line is a ``Window`` too, so the file is a plain trace. What the run was is in
``<name>.meta.json`` beside it (the curve, the profile, the co-tenants, when they
arrived on the windows' clock). tests/unit/test_shared_replay.py replays it
through the policy. Not a benchmark: nothing is saved under results/.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import tempfile
import threading
import time
from pathlib import Path

from autobatch.cotenants import CoTenant
from autobatch.curve import load_curve
from autobatch.device.protocol import parse_address
from autobatch.device.runner import CoTenantRunner
from autobatch.device.settings import DeviceSettings
from autobatch.lab.gpu import DeviceProcess, emulated_repository
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.load.runner import run_load
from autobatch.profiles import Profile
from autobatch.schedule import Schedule
from autobatch.signals import TritonSource

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--curve", type=Path, default=ROOT / "curves" / "t4-resnet50-fp16.yaml")
    p.add_argument("--rate", type=float, default=150.0)
    p.add_argument("--preferred", type=int, default=32)
    p.add_argument("--delay-us", type=int, default=18300)
    p.add_argument("--cotenants", type=int, default=2)
    p.add_argument("--duty", type=float, default=0.5)
    p.add_argument("--arrive", type=float, default=20.0)
    p.add_argument("--leave", type=float, default=50.0)
    p.add_argument("--duration", type=float, default=70.0)
    p.add_argument("--interval", type=float, default=1.0)
    args = p.parse_args()
    curve = load_curve(args.curve)
    profile = Profile("waiting", 32, (args.preferred,), args.delay_us)
    jobs = [CoTenant(name=f"batch-{i}", curve=curve, batch_size=32, duty=args.duty,
                     windows=((args.arrive, args.leave),)) for i in range(args.cotenants)]
    free = parse_address("127.0.0.1:0")
    with tempfile.TemporaryDirectory() as tmp, \
            DeviceProcess(DeviceSettings(listen=free, metrics=free, util_period_ms=250.0)) as device:
        repo = emulated_repository(Path(tmp) / "repo", [EMULATOR_MODEL])
        with TritonServer.on_free_ports(repo, emulate_curve=curve, emulate_device=device.address) as server:
            server.load_emulator(curve, profile, device=device.address)
            windows, arrival = record(server, device, jobs, args)
    text = "".join(json.dumps(w) + "\n" for w in windows)
    if args.out.suffix == ".gz":
        with gzip.open(args.out, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
    meta = {"command": "python benchmarks/shared_trace.py " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "curve")),
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "curve": {"name": curve.name, "points": dict(curve.points)},
            "profile": {"preferred": args.preferred, "delay_us": args.delay_us},
            "rate_rps": args.rate, "cotenants": args.cotenants, "duty": args.duty,
            "arrival_s": arrival, "leave_s": arrival - args.arrive + args.leave}
    stem = args.out.name.removesuffix(".gz").removesuffix(".jsonl")
    args.out.with_name(stem + ".meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(f"{len(windows)} windows -> {args.out}; co-tenants from {arrival:.2f} s (window clock)")


def record(server: TritonServer, device: DeviceProcess, jobs: list[CoTenant],
           args: argparse.Namespace) -> tuple[list[dict], float]:
    """Load, co-tenants and the source at once; the windows, and the co-tenants' arrival on
    the windows' (wall) clock."""
    stop = threading.Event()
    load = threading.Thread(target=run_load, args=(server.urls.grpc, EMULATOR_MODEL,
                                                   Schedule.constant(args.rate, args.duration + 10)),
                            kwargs={"protocol": "grpc", "seed": 1, "stop": stop}, daemon=True)
    load.start()
    time.sleep(5.0)  # the load reaches its rate before the first window
    runner = CoTenantRunner(jobs, device.address, duration_s=args.duration, seed=1)
    started = time.time()
    runner.start()

    async def poll() -> list[dict]:
        out = []
        async with TritonSource(server.urls.http, EMULATOR_MODEL, metrics_url=server.urls.metrics,
                                utilization_url=device.metrics_url, curve=load_curve(args.curve)) as src:
            await src.poll()
            while time.time() < started + args.duration:
                await asyncio.sleep(args.interval)
                w = await src.poll()
                if w is not None:
                    out.append(w.to_dict())
        return out

    try:
        windows = asyncio.run(poll())
    finally:
        runner.stop()
        stop.set()
        load.join(30)
    return windows, started + args.arrive


if __name__ == "__main__":
    main()
