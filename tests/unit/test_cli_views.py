"""The views of cli/views/ that hold state of their own (pure: no server), and where plots go."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from autobatch.cli.views import MeasureProgress, plot_file, plot_plan
from autobatch.curve import load_curve
from autobatch.errors import ConfigError
from autobatch.plan.planner import make_plan

from ..conftest import CURVES
from ..helpers import run_main


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


# -- plots: the path printed is the path written -----------------------------------------------


@pytest.mark.parametrize(
    ("given", "written"),
    [("plan.png", "plan.png"), ("plan", "plan.png"), ("sub/plan.svg", "sub/plan.svg"), ("p.PDF", "p.PDF")],
)
def test_plot_file_is_where_the_plot_goes(given: str, written: str, tmp_path: Path) -> None:
    assert plot_file(tmp_path / given) == tmp_path / written


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("adir", "plot = '{d}/adir': is a directory: give a file name, such as '{d}/adir/plot.png'"),
        ("afile/p.png", "plot = '{d}/afile/p.png': '{d}/afile' is a file, not a folder"),
        ("p.nope", "plot = '{d}/p.nope': suffix '.nope': must be one of "),
    ],
)
def test_plot_file_refuses_what_cannot_be_written(given: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError) as info:
        plot_file(tmp_path / given)
    assert str(info.value).startswith(message.format(d=tmp_path))


def test_plot_plan_returns_the_file_it_wrote(tmp_path: Path) -> None:
    plan = make_plan(load_curve(CURVES / "laptop-256x144-fp16.yaml"), 100, 10, rate_rps=100,
                     sweep_points=3, sweep_requests=500, duration_s=5)
    drawn = plot_plan(plan, tmp_path / "plan")
    assert drawn == tmp_path / "plan.png"
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "plan").exists()


def test_plan_plot_into_a_directory_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, out, err = run_main(
        monkeypatch, capsys, "plan", "--curve", str(CURVES / "laptop-256x144-fp16.yaml"), "--slo-p99-ms",
        "100", "--network-ms", "10", "--rate", "100", "--plot", str(tmp_path))
    assert code == 2
    assert err.strip() == (f"autobatch: error: --plot = {str(tmp_path)!r}: is a directory: give a "
                                    f"file name, such as {str(tmp_path / 'plot.png')!r}")
    assert "plotted" not in out
    assert list(tmp_path.iterdir()) == []
