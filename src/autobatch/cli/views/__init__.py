"""Every table, live view and plot the command line shows: the one place output is drawn.

Library functions return values (a :class:`~autobatch.plan.planner.Plan`, a
:class:`~autobatch.load.LoadReport`, a :class:`~autobatch.signals.Window`, a
:class:`~autobatch.lab.demo.DemoResult`, ...); the modules here
turn them into rich renderables, one module per command group as in ``cli/``
(:mod:`.planner`, :mod:`.traffic`, :mod:`.lab`, :mod:`.sidecar`, :mod:`.device`), or draw them
with matplotlib (:mod:`.plots`, imported only when a plot is asked for). Every
public view is importable from here.
"""

from __future__ import annotations

from autobatch.cli.views.device import cotenants_table
from autobatch.cli.views.lab import (
    DemoView,
    MeasureProgress,
    demo_live_view,
    demo_table,
    demo_verdict_lines,
    switches_table,
)
from autobatch.cli.views.planner import (
    lanes_renderable,
    plan_renderable,
    sessions_renderable,
    shared_renderable,
    sim_renderable,
    switching_renderable,
    switching_table,
)
from autobatch.cli.views.plots import plot_demo, plot_file, plot_plan
from autobatch.cli.views.sidecar import replay_summary, replay_table, status_table
from autobatch.cli.views.traffic import LiveStatus, failure_lines, report_table, window_table

__all__ = [
    "DemoView",
    "LiveStatus",
    "MeasureProgress",
    "cotenants_table",
    "demo_live_view",
    "demo_table",
    "demo_verdict_lines",
    "failure_lines",
    "lanes_renderable",
    "plan_renderable",
    "plot_demo",
    "plot_file",
    "plot_plan",
    "replay_summary",
    "replay_table",
    "report_table",
    "sessions_renderable",
    "shared_renderable",
    "sim_renderable",
    "status_table",
    "switches_table",
    "switching_renderable",
    "switching_table",
    "window_table",
]
