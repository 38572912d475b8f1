"""The lab's views: ``measure``'s progress and the demo (its live table, its results)."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from autobatch.cli.views.cells import ms
from autobatch.lab.closed_loop import ClosedLoopResult, Sample
from autobatch.lab.demo import DemoResult, DemoSetup


class MeasureProgress:
    """The progress bar of ``autobatch measure``: one bar over every run of every batch
    size, named after the size being measured; :meth:`step` is ``measure_curve``'s
    ``on_step``."""

    def __init__(self, console: Console, model: str, sizes: Sequence[int], *, runs_per_size: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.model = model
        self.runs_per_size = runs_per_size
        self._index = {b: i for i, b in enumerate(sizes)}
        self._progress = Progress(TextColumn("measuring {task.description}"), BarColumn(),
                                  MofNCompleteColumn(), console=console, transient=True)
        self._task = self._progress.add_task(f"{model} batch {sizes[0]}", total=len(sizes) * runs_per_size)

    def __enter__(self) -> MeasureProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def step(self, batch_size: int, done: int) -> None:
        self._progress.update(self._task, completed=self._index[batch_size] * self.runs_per_size + done,
                              description=f"{self.model} batch {batch_size}")


def demo_live_view(rows: deque[Sample], status: Any, slo_ms: float) -> Group:
    table = Table(title="autobatch demo: dense_mlp under a step load", expand=False)
    for col, justify in (("t s", "right"), ("phase", "left"), ("target/s", "right"),
                         ("done/s", "right"), ("p95 ms", "right"), ("profile", "left"),
                         ("decision", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in rows:
        p95 = "-" if s.p95_ms is None else f"{s.p95_ms:.0f}"
        style = "red" if s.p95_ms is not None and s.p95_ms > slo_ms else ""
        table.add_row(f"{s.t_s:.0f}", s.phase, f"{s.target_rps:.0f}", f"{s.completed_rps:.0f}",
                      Text(p95, style=style), s.active or "-",
                      f"{s.decision or '-'} ({s.reason or '-'})")
    msg = ""
    if status is not None and status.last_decision:
        msg = status.last_decision.get("message", "")
    return Group(table, Text(f"why: {msg}", overflow="fold"),
                 Text(f"SLO p95 {slo_ms:g} ms (server side); the table shows client-side p95 "
                      f"over the last 2 s", style="dim"))


class DemoView:
    """The demo's observer (:class:`autobatch.lab.demo.DemoObserver`): a spinner while
    Triton starts, then a live table of the last samples."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def starting(self) -> AbstractContextManager[Any]:
        return self.console.status("starting the embedded Triton with dense_mlp ...")

    @contextlib.contextmanager
    def running(self, setup: DemoSetup) -> Iterator[Callable[[Sample, Any], None]]:
        cfg, schedule = setup.config, setup.schedule
        if setup.run == setup.runs[0]:
            count = "" if setup.instances is None else f" x {setup.instances} instance(s)"
            self.console.print(
                f"Triton {setup.triton_http} (gRPC {setup.triton_grpc}), dense_mlp{count}; SLO p95 "
                f"{cfg.policy.slo_p95_ms:g} ms; the same load "
                f"({' -> '.join(f'{p.rate_rps:g}/s for {p.duration_s:g} s' for p in schedule.phases)}) "
                f"{len(setup.runs)} times: {', '.join(setup.runs)}"
            )
        index = setup.runs.index(setup.run) + 1
        what = (f"the sidecar, ladder {' -> '.join(p.name for p in cfg.profiles)}"
                if setup.run == "controller" else f"{setup.run} held, no controller")
        if setup.lead_in_s > 0:
            what += (f" (it runs {setup.lead_in_s:g} s at {schedule.phases[0].rate_rps:g}/s first, "
                     "unmeasured: its start counts as a switch and its p95 rules wait 60 s after one)")
        self.console.print(f"[bold]run {index}/{len(setup.runs)}: {what}[/]")
        rows: deque[Sample] = deque(maxlen=8)
        with Live(console=self.console, refresh_per_second=2, transient=False) as live:

            def on_sample(sample: Sample, status: Any) -> None:
                rows.append(sample)
                live.update(demo_live_view(rows, status, cfg.policy.slo_p95_ms))

            yield on_sample
        self.console.line()  # a piped Live leaves its last line open


def demo_table(result: DemoResult) -> Table:
    """Per phase and over the run, each run side by side: the share of requests over the
    SLO, p95 and device time per request."""
    slo = result.result.slo_p95_ms
    t = Table(title=f"the same load three ways: share over the SLO ({slo:g} ms) / p95 ms / "
                    f"device ms per request")
    t.add_column("phase")
    t.add_column("target/s", justify="right")
    for name in result.runs:
        t.add_column(name, justify="right")
    schedule = result.result.schedule
    for i, ph in enumerate(schedule.phases):
        cells = []
        for r in result.runs.values():
            p = r.phases[i]
            cell = f"{p.over_slo_share:.1%} / {ms(p.p95_ms)} / {ms(p.device_ms)}"
            if r.mode == "controller" and p.profiles:
                cell += "\n" + escape(f"[{max(p.profiles.items(), key=lambda kv: kv[1])[0]}]")
            cells.append(cell)
        t.add_row(ph.name, f"{ph.rate_rps:g}", *cells)
    t.add_row("whole run", "", *[f"{r.over_slo_share:.1%} / - / {ms(r.device_ms)}"
                                  for r in result.runs.values()])
    return t


def demo_verdict_lines(result: DemoResult) -> list[str]:
    """The demo's last lines: the controller against each static run, on both measures."""
    lines = []
    for c in result.comparisons:
        dev = "-" if c.device_ratio is None else f"{c.device_ratio:.2f}x"
        low = "-" if c.low_p95_ratio is None else f"{c.low_p95_ratio:.2f}x"
        lines.append(
            f"controller vs {c.against}: device time per request {dev}; requests over the SLO "
            f"{c.over_slo_points:+.1f} points (worst phase, {c.worst_phase}: {c.worst_phase_points:+.1f}); "
            f"p95 in the low phases {low}"
        )
    return lines


def switches_table(result: ClosedLoopResult) -> Table:
    sw = Table(title="switches")
    for col in ("t s", "to", "reason", "took s", "why"):
        sw.add_column(col)
    for s in result.switches:
        sw.add_row(f"{s.t_s:.0f}", s.to, s.reason,
                   "-" if s.duration_s is None else f"{s.duration_s:.1f}", s.message)
    return sw
