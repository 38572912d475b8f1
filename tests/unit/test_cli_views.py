"""The views of cli/views.py that hold state of their own (pure: no server)."""

from __future__ import annotations

import io

from rich.console import Console

from autobatch.cli.views import MeasureProgress


def test_the_measure_progress_bar_counts_every_run_of_every_size():
    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    seen = []
    with MeasureProgress(console, "dense_mlp", [1, 4, 16], runs_per_size=5) as bar:
        task = bar._progress.tasks[0]
        assert (task.completed, task.total) == (0, 15)
        for size in (1, 4, 16):
            for done in range(1, 6):
                bar.step(size, done)
            seen.append((task.completed, task.description))
    assert seen == [(5, "dense_mlp batch 1"), (10, "dense_mlp batch 4"), (15, "dense_mlp batch 16")]
