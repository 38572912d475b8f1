"""The views of ``load`` (its live status and report) and ``watch`` (windows as they come)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from autobatch.cli.views.cells import ms, num
from autobatch.load.report import OK, LoadReport, RequestRecord
from autobatch.schedule import Schedule
from autobatch.signals.window import Window


class LiveStatus:
    """Counts completions (pass :meth:`record` as ``on_record``) and renders a progress
    bar with the current phase; rich refreshes it from its own thread."""

    def __init__(self, schedule: Schedule, clock: Callable[[], float] = time.monotonic) -> None:
        self.schedule = schedule
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.ok = 0
        self.failures: Counter[str] = Counter()

    def record(self, rec: RequestRecord) -> None:
        # Called for every request on the event loop: count, nothing more.
        self.done += 1
        if rec.outcome == OK:
            self.ok += 1
        else:
            self.failures[rec.outcome] += 1

    def __rich__(self) -> RenderableType:
        total_s = self.schedule.duration_s
        elapsed = min(self.clock() - self.started, total_s)
        i = self.schedule.phase_at(elapsed)
        if i is None:
            phase_txt = "draining"
        else:
            p = self.schedule.phases[i]
            phase_txt = f"{p.name} @ {p.rate_rps:g} rps"
        failed = sum(self.failures.values())
        line = Text(
            f"{elapsed:.1f}/{total_s:g} s  {phase_txt}  done {self.done} ok {self.ok} failed {failed}",
            style="red" if failed else "",
        )
        return Group(ProgressBar(total=total_s, completed=elapsed, width=40), line)


def failure_lines(report: LoadReport) -> list[str]:
    """``phase: KIND n, KIND n`` for each phase with failures (the table only counts them)."""
    return [
        f"{p.name}: " + ", ".join(f"{kind} {n}" for kind, n in p.failures.items())
        for p in report.phases
        if p.failures
    ]


def report_table(report: LoadReport) -> Table:
    """Per phase (and total): target vs sent rate, throughput, latency, lag, failures.

    Sized for an 80-column terminal; the kinds of failures are listed by
    :func:`failure_lines`, and ``--json`` has every figure.
    """
    table = Table(
        title=(
            f"{report.model} over {report.protocol} at {report.url}"
            + ("  (stopped early)" if report.stopped else "")
        ),
        title_justify="left",
        box=None,
        padding=(0, 1),
        pad_edge=False,
        caption="ms: latency of ok requests; lag: generator send delay; !: behind",
        caption_justify="left",
    )
    table.add_column("phase", no_wrap=True, max_width=16)
    for name in ("target/s", "sent/s", "ok/s", "p50 ms", "p95 ms", "p99 ms", "lag p99", "failed"):
        table.add_column(name, justify="right", no_wrap=True)
    rows = list(report.phases)
    if len(rows) > 1:
        rows.append(report.total)
    for p in rows:
        table.add_row(
            p.name,
            f"{p.target_rps:.1f}",
            Text(f"{p.achieved_rps:.1f}" + ("!" if p.behind else ""), style="red" if p.behind else ""),
            f"{p.throughput_rps:.1f}",
            ms(p.p50_ms),
            ms(p.p95_ms),
            ms(p.p99_ms),
            ms(p.lag_p99_ms),
            Text(str(p.failed), style="red" if p.failed else ""),
            end_section=p is report.phases[-1] and len(rows) > 1,
        )
    return table


# -- watch -----------------------------------------------------------------------------------


def _curve(w: Window, limit: int = 6) -> str:
    if not w.batch_curve_ms:
        return "-"
    items = sorted(w.batch_curve_ms.items())
    text = " ".join(f"{b}:{ms:.1f}" for b, ms in items[:limit])
    return text + (" ..." if len(items) > limit else "")


def window_table(windows: Iterable[Window], *, title: str | None = None) -> Table:
    """A table of ``windows``; stale rows show why (in the last column) instead of numbers."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for name in ("end", "s", "req/s", "fail/s", "batch", "queue ms", "compute ms",
                 "request ms", "pending", "p95 ms", "p99 ms", "dev ms/req", "busy", "util",
                 "stretch", "others", "curve ms (b:ms)"):
        table.add_column(name, justify="left" if name.startswith(("end", "curve")) else "right")
    for w in windows:
        end = time.strftime("%H:%M:%S", time.localtime(w.end_s))
        if w.stale:
            detail = f"{w.stale_reason}: {w.stale_detail}" if w.stale_detail else w.stale_reason
            table.add_row(end, f"{w.interval_s:.1f}", "[yellow]stale[/]", *[""] * 13,
                          Text(str(detail), style="yellow"))
            continue
        pending = "-"
        if w.pending_requests is not None:
            pending = f"{w.pending_requests:g}"
            if w.pending_delta:
                pending += f" ({w.pending_delta:+g})"
        table.add_row(
            end,
            f"{w.interval_s:.1f}",
            f"{w.request_rps:.1f}",
            f"{w.failures_rps:.1f}",
            num(w.mean_batch_size, "{:.2f}"),
            num(w.mean_queue_ms, "{:.2f}"),
            num(w.mean_compute_ms, "{:.2f}"),
            num(w.mean_request_ms, "{:.2f}"),
            pending,
            num(w.p95_ms),
            num(w.p99_ms),
            num(w.device_ms_per_request, "{:.2f}"),
            num(None if w.busy_share is None else w.busy_share * 100, "{:.0f}%"),
            num(None if w.utilization is None else w.utilization * 100, "{:.0f}%"),
            num(w.stretch, "{:.2f}x"),
            num(None if w.others_share is None else w.others_share * 100, "{:.0f}%"),
            _curve(w),
        )
    return table
