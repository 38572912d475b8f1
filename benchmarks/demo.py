"""The demo, saved: `autobatch demo` as a benchmark, its figures kept for docs/results.md.

    .venv/bin/python benchmarks/demo.py [--instances 2]

Runs what `autobatch demo` runs (the embedded Triton with dense_mlp, the step load of
examples/schedules/demo.yaml three times: with the sidecar of examples/sidecar.yaml,
with Triton's default held and with the ladder's top rung held), prints the same
table, switches and verdict lines, and saves the runs and the comparisons as
benchmarks/results/demo/<time>.json, with the sidecar's decision log beside it
(logs/<time>-controller.jsonl.gz). One results row per static run: the controller's
device time per request over that run's, with the share over the SLO and the
low-phase p95 in the figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from autobatch.cli.views import demo_table, demo_verdict_lines, switches_table
from autobatch.lab.demo import run_demo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import row, save_logs, save_result  # noqa: E402


def rows_for(done: Any, instances: int) -> list[dict[str, Any]]:
    """One row per static run, its figure the demo's own verdict line against that run."""
    return [
        row(f"demo (`autobatch demo`), dense_mlp x {instances}, step 30 -> 200 -> 30/s: the controller "
            f"against {c.against} held", line,
            key=f"demo_device_vs_{c.against}_x{instances}", value=c.device_ratio, unit="x",
            value_name="device")
        for c, line in zip(done.comparisons, demo_verdict_lines(done), strict=True)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    console = Console(width=140)
    console.print(f"autobatch demo, dense_mlp x {args.instances}: three runs of the step load (~4 min) ...")
    with tempfile.TemporaryDirectory(prefix="ab-demo-bench-") as tmp:
        done = run_demo(workdir=Path(tmp), instances=args.instances)
        log = done.decision_log.read_bytes() if done.decision_log and done.decision_log.is_file() else None
    console.print(demo_table(done))
    console.print(switches_table(done.result))
    for line in demo_verdict_lines(done):
        console.print(line)
    data = {"instances": args.instances, **done.to_dict()}
    rows = rows_for(done, args.instances)
    if not args.no_save:
        path = save_result("demo", data, rows)
        if log is not None:
            save_logs(path, {"controller": log})


if __name__ == "__main__":
    main()
