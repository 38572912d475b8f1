"""Run every benchmark in turn (`make bench`), each on its own, and keep their output.

    .venv/bin/python benchmarks/run_all.py [--out out/bench]

Each saves its run under benchmarks/results/ (then `make results` regenerates the
results table). They start their own Triton servers (and HAProxy) on free ports;
run them on a quiet machine, one at a time: every figure is a ratio measured side by side in
one run, but the absolute numbers move with whatever else the two cores do.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# (log name, script, arguments): the runs whose saved results make the results table.
BENCHMARKS = [
    ("batch_curves", "batch_curves", []),
    ("loadgen", "loadgen", ["--duration", "5"]),
    ("loadgen-http", "loadgen", ["--protocol", "http", "--duration", "5"]),
    ("simulator", "simulator", ["--fidelity"]),
    ("sessions", "sessions", []),
    ("lanes", "lanes", []),
    ("trace_fidelity", "trace_fidelity", []),
    ("bursts", "bursts", []),
    ("sdk", "sdk", []),
    ("footprint", "footprint", []),
    ("overhead", "overhead", []),
    ("reload_cost", "reload_cost", []),
    ("reload_vs_shift", "reload_vs_shift", ["--grpc-load-api"]),
    ("ladder", "ladder", []),
    ("switching_map", "switching_map", []),
    # The emulated GPU (docs/shared-gpu.md).
    ("device_timeslice", "device_timeslice",
     ["--windows", "60", "--repeats", "3", "--duties", "1.0,0.75,0.5"]),
    # The closed loop in parts, one schedule and instance count each (docs/results.md shows the
    # newest run of each command line, so these are the lines to re-run).
    *[(f"closed_loop-{s}-{n}", "closed_loop", ["--schedule", s, "--instances", str(n)])
      for n in (1, 2) for s in ("step", "bursty", "ramp", "rise-fall")],
    # The shared GPU, every mode at once, one schedule each (the T4 curve, examples/sidecar-t4.yaml).
    *[(f"shared_gpu-{s}", "shared_gpu", ["--config", "examples/sidecar-t4.yaml", "--schedule", s])
      for s in ("step", "bursty", "ramp", "rise-fall")],
    ("demo", "demo", []),
    ("faults", "faults", []),
    # soak.py (30 min) is not here: run it on its own (docs/benchmarks.md).
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE.parent / "out" / "bench")
    ap.add_argument("--only", nargs="*", help="names to run (default: all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name, script, extra in BENCHMARKS:
        if args.only and name not in args.only and script not in args.only:
            continue
        t0 = time.monotonic()
        print(f"== {name}", flush=True)
        with open(args.out / f"{name}.txt", "w") as log:
            rc = subprocess.call([sys.executable, str(HERE / f"{script}.py"), *extra], stdout=log,
                                 stderr=subprocess.STDOUT)
        print(f"   exit {rc} after {time.monotonic() - t0:.0f} s; output in {args.out / (name + '.txt')}")
        if rc != 0:
            failed.append(name)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
