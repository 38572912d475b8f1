"""The demo, saved: `autobatch demo` as a benchmark, its figures kept for docs/results.md.

    .venv/bin/python benchmarks/demo.py [--plot out/demo.png]

Runs what `autobatch demo` runs (the controller of examples/sidecar-t4.yaml,
Triton's default held and the ladder's top rung held, at the same time, each on
its own emulated GPU with the co-tenants of examples/schedules/demo.yaml
arriving mid-run, fed the same requests), prints the same table, switches and
verdict lines, and saves the runs and the comparisons as
benchmarks/results/demo/<time>.json, with the sidecar's decision log beside it
(logs/<time>-controller.jsonl.gz). One results row per static run: the
controller's device time per request over that run's, with the points over the
SLO and the co-tenants' throughput in the figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from autobatch.cli.views import DemoView, demo_table, demo_verdict_lines, plot_demo, plot_file, switches_table
from autobatch.lab.demo import run_demo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import row, save_logs, save_result  # noqa: E402

CONFIG = "examples/sidecar-t4.yaml"


def rows_for(done: Any) -> list[dict[str, Any]]:
    """One row per static run, its figure the demo's own verdict line against that run."""
    return [
        row(f"demo (`autobatch demo`), {done.setup.curve}, the three at once on their own GPUs, co-tenants "
            f"mid-run: the controller against {c.against} held", line,
            key=f"demo_shared_device_vs_{c.against}", value=c.device_ratio, unit="x", value_name="device")
        for c, line in zip(done.comparisons, demo_verdict_lines(done), strict=True)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", type=Path, default=Path("out/demo.png"))
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    console = Console(width=160)
    plot = plot_file(args.plot)
    with tempfile.TemporaryDirectory(prefix="ab-demo-bench-") as tmp:
        done = run_demo(workdir=Path(tmp), observer=DemoView(console))
        log = done.decision_log.read_bytes() if done.decision_log and done.decision_log.is_file() else None
    console.print(switches_table(done))
    console.print(demo_table(done))
    for line in demo_verdict_lines(done):
        console.print(line)
    console.print(f"the runs over time: {plot_demo(done, plot)}")
    data = {"config": CONFIG, **done.to_dict()}
    for r in data["runs"].values():
        r.pop("timeline", None)
    if not args.no_save:
        path = save_result("demo", data, rows_for(done))
        if log is not None:
            save_logs(path, {"controller": log})


if __name__ == "__main__":
    main()
