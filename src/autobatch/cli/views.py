"""Every table, live view and plot the command line shows: the one place output is drawn.

Library functions return values (a :class:`~autobatch.plan.planner.Plan`, a
:class:`~autobatch.load.LoadReport`, a :class:`~autobatch.signals.Window`, a
:class:`~autobatch.lab.closed_loop.ClosedLoopResult`, ...); the functions here
turn them into rich renderables, or draw them with matplotlib (imported only
when a plot is asked for).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from autobatch.curve import PointKind
from autobatch.errors import ConfigError
from autobatch.lab.closed_loop import ClosedLoopResult, Sample
from autobatch.lab.demo import DemoResult, DemoSetup
from autobatch.load.report import OK, LoadReport, RequestRecord
from autobatch.plan.lanes import Lanes
from autobatch.plan.planner import Plan
from autobatch.plan.sessions import SessionsResult
from autobatch.plan.simulator import SimResult
from autobatch.plan.switching import SwitchingKind, SwitchingMap
from autobatch.plan.verdict import VerdictKind
from autobatch.schedule import Schedule
from autobatch.signals.window import Window


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("plot: needs matplotlib: pip install 'autobatch[plot]'") from exc
    return plt


# -- planner: plan, simulate, sessions ---------------------------------------------------------


_FLAG = {
    PointKind.MEASURED: "",
    PointKind.INTERPOLATED: "interpolated",
    PointKind.EXTRAPOLATED: "EXTRAPOLATED",
}


def plan_renderable(plan: Plan) -> RenderableType:
    parts: list[RenderableType] = []
    b = plan.budget
    parts.append(Text(f"Batch curve {plan.curve.name!r}: SLO p99 {plan.slo_p99_ms:g} ms, "
                      f"network {plan.network_ms:g} ms, load: {plan.load.label}", style="bold"))
    parts.append(Text(""))
    parts.append(Text("The SLO equation (queue-delay budget)", style="bold"))
    parts.append(Text("  budget = SLO p99 - time of one batch at the max batch size - network"))
    parts.append(Text(f"  here:    {b.equation()}"))
    parts.append(
        Text(
            f"  delay:   budget x (1 - margin {b.margin_frac:g}) = "
            f"{b.delay_ms:.1f} ms  -> max_queue_delay_microseconds {b.delay_us}"
        )
    )
    ex = plan.example
    parts.append(
        Text(
            f"  (the reference article's example: SLO {ex.slo_p99_ms:g} - batch of "
            f"{ex.batch_size} {ex.batch_ms:g} - network {ex.network_ms:g} = {ex.budget_ms:g} ms; "
            f"with the margin, {ex.delay_ms:g} ms)"
        )
    )
    parts.append(Text(""))

    gains = Table(box=box.SIMPLE_HEAD, title="Batch gain per size (per-item time vs batch 1)",
                  title_justify="left")
    for col in ("batch", "ms/batch", "ms/item", "gain", "items/s", "point"):
        gains.add_column(col, justify="right" if col != "point" else "left")
    for g in plan.gains:
        gains.add_row(
            str(g.batch_size),
            f"{g.ms:.2f}",
            f"{g.per_item_ms:.3f}",
            f"{g.gain:.2f}x",
            f"{g.throughput_rps:.0f}",
            _FLAG[g.kind],
        )
    parts.append(gains)
    if plan.extrapolated_sizes and not plan.allow_extrapolation:
        parts.append(
            Text(
                f"  sizes {', '.join(map(str, plan.extrapolated_sizes))} lie past the measured "
                f"points: guesses, not used for profiles (measure them with `autobatch measure`, "
                f"or pass --allow-extrapolation)"
            )
        )
    parts.append(Text(""))
    style = "bold red" if plan.verdict.kind is VerdictKind.LOSES else "bold green"
    if plan.verdict.kind is VerdictKind.MARGINAL:
        style = "bold yellow"
    parts.append(Text(f"Verdict: {plan.verdict.message}", style=style))
    fit = plan.largest_fit
    if fit is None:
        parts.append(Text(f"Largest batch that fits: none: even batch 1 breaks the SLO "
                          f"({plan.curve.estimate(1).ms:.1f} ms + {plan.network_ms:g} ms network)"))
    else:
        flag = f", {fit.batch_kind.value}" if fit.batch_kind is not PointKind.MEASURED else ""
        parts.append(
            Text(
                f"Largest batch whose run time fits: {fit.batch_size} "
                f"({fit.batch_ms:.1f} ms{flag}; budget left {fit.budget_ms:.1f} ms)"
            )
        )
    parts.append(Text(""))

    cands = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title=f"Candidate profiles (simulated; latency includes the {plan.network_ms:g} ms network)",
        title_justify="left",
    )
    for col in ("profile", "pref", "max", "delay ms", "p50", "p95", "p99", "rps",
                "batch", "device ms", "max rps", ""):
        cands.add_column(col, justify="left" if col in ("profile", "pref", "") else "right",
                         min_width=14 if col == "profile" else None)
    rec = plan.recommended
    for c in plan.candidates:
        lat = c.at_load.latency
        mark = "recommended" if rec is not None and c is rec else ("" if c.meets_slo else "misses SLO")
        cands.add_row(
            c.profile.name,
            ",".join(map(str, c.profile.preferred_batch_size)) or "none",
            str(c.profile.max_batch_size),
            f"{c.profile.max_queue_delay_us / 1000:.1f}",
            _ms(lat and lat.p50_ms),
            _ms(lat and lat.p95_ms),
            _ms(lat and lat.p99_ms),
            f"{c.at_load.throughput_rps:.1f}",
            f"{c.at_load.mean_batch:.2f}",
            _ms(c.device_ms if c.device_ms == c.device_ms else None),
            f"{c.max_rate_rps:.0f}",
            mark,
        )
    parts.append(cands)
    parts.append(Text("  pref: preferred batch sizes (none: Triton's default, read as [max]); max: max "
                      "batch size. p50/p95/p99 (ms), rps (throughput), batch (mean size) and device ms "
                      "(instance time per request) at the given load; max rps: the highest Poisson rate "
                      "with p99 within the SLO. Recommended: the least device time within the SLO, "
                      "the lowest p99 where it saves under 15%"))
    if rec is None:
        parts.append(Text("No candidate keeps p99 within the SLO at this load: only more "
                          "instances or replicas help.", style="bold red"))
    if plan.switching is not None:
        parts.append(Text(""))
        parts.append(switching_renderable(plan.switching))
    for s in plan.sessions:
        parts.append(sessions_renderable(s))
    if plan.lanes is not None:
        parts.append(Text(""))
        parts.append(lanes_renderable(plan.lanes))
    return Group(*parts)


def lanes_renderable(lanes: Lanes) -> RenderableType:
    """Each lane's latency with the two-lane profile and with its base (one queue for all)."""
    prof = lanes.profile
    t = Table(box=box.SIMPLE_HEAD, title_justify="left", title=(
        f"Priority lanes on {lanes.base.name} at {lanes.rate_rps:g} rps (simulated): "
        f"priority_levels {prof.priority_levels}, default level {prof.default_priority_level}, "
        f"preferred {','.join(map(str, prof.preferred_batch_size)) or '-'}, wait "
        f"{prof.max_queue_delay_us / 1000:g} ms"))
    for col in ("lane", "priority", "share", "p50 lanes", "p99 lanes", "p50 one queue", "p99 one queue"):
        t.add_column(col, justify="left" if col == "lane" else "right")
    for lane in lanes.lanes:
        w, wo = lane.with_lanes, lane.without_lanes
        t.add_row(lane.name, str(lane.level), f"{lane.share:.0%}", _ms(w and w.p50_ms), _ms(w and w.p99_ms),
                  _ms(wo and wo.p50_ms), _ms(wo and wo.p99_ms))
    note = Text(
        f"  Urgent requests (priority 1) go ahead of every batchable one; mean batch "
        f"{lanes.mean_batch_with:.2f} with lanes, {lanes.mean_batch_without:.2f} without. Triton has one "
        "max_queue_delay per model: a lone urgent request on an idle model still waits it when no "
        "preferred size can form. With priority levels Triton stops prefetching batches: on the real "
        "server the batchable lane pays more than predicted here (docs/planner.md, Priority lanes).")
    return Group(t, note)


_SWITCHING_STYLE = {
    SwitchingKind.DEFAULT: "bold green",
    SwitchingKind.STATIC: "bold green",
    SwitchingKind.PAYS: "bold cyan",
    SwitchingKind.NEEDED: "bold cyan",
    SwitchingKind.LATENCY: "bold yellow",
    SwitchingKind.OVERLOADED: "bold red",
}


def switching_table(sw: SwitchingMap, title: str | None = None) -> Table:
    """Each static profile and the oracle: per phase share over the SLO / p95, and device time."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left", title=title or (
        f"Does switching pay here? {sw.schedule}, {sw.instances} instance(s), SLO {sw.slo_ms:g} ms "
        f"(simulated; oracle reacts {sw.reaction_s:g} s into each phase)"))
    t.add_column("strategy")
    for p in sw.oracle.phases:
        t.add_column(f"{p.phase} {p.rate_rps:g}/s\n> SLO / p95", justify="right")
    t.add_column("device ms\nper request", justify="right")
    t.add_column("vs default", justify="right")
    default = next((s for s in sw.statics if s.name == "triton-default"), None)
    for s in (*sw.statics, sw.oracle):
        cells = [f"{p.over_slo:.1%} / {_ms(p.p95_ms)}" for p in s.phases]
        ratio = ("-" if default is None or default.device_ms <= 0
                 else f"{s.device_ms / default.device_ms:.2f}x")
        name = s.name if s is not sw.oracle else "oracle: " + " > ".join(
            dict.fromkeys(p.profile for p in s.phases))
        t.add_row(name, *cells, f"{s.device_ms:.2f}", ratio)
    return t


def switching_renderable(sw: SwitchingMap) -> RenderableType:
    return Group(
        switching_table(sw),
        Text(f"Does switching pay? {sw.verdict.message}", style=_SWITCHING_STYLE[sw.verdict.kind]),
    )


def sim_renderable(result: SimResult, title: str) -> RenderableType:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for col in ("requests", "completed", "rejected", "thr rps", "p50", "p95", "p99", "max",
                "queue p95", "mean batch", "util"):
        t.add_column(col, justify="right")
    lat, q = result.latency, result.queue
    t.add_row(
        str(result.requests),
        str(result.completed),
        str(result.rejected),
        f"{result.throughput_rps:.1f}",
        _ms(lat and lat.p50_ms),
        _ms(lat and lat.p95_ms),
        _ms(lat and lat.p99_ms),
        _ms(lat and lat.max_ms),
        _ms(q and q.p95_ms),
        f"{result.mean_batch:.2f}",
        f"{result.utilisation:.0%}",
    )
    parts: list[RenderableType] = [t]
    if result.phases:
        ph = Table(box=box.SIMPLE_HEAD, title="Per phase", title_justify="left")
        for col in ("phase", "requests", "thr rps", "p50", "p95", "p99", "mean batch", "rejected"):
            ph.add_column(col, justify="left" if col == "phase" else "right")
        for p in result.phases:
            pl = p.latency
            ph.add_row(p.name, str(p.requests), f"{p.throughput_rps:.1f}", _ms(pl and pl.p50_ms),
                       _ms(pl and pl.p95_ms), _ms(pl and pl.p99_ms), f"{p.mean_batch:.2f}",
                       str(p.rejected))
        parts.append(ph)
    if result.priorities:
        pr = Table(box=box.SIMPLE_HEAD, title="Per priority level", title_justify="left")
        for col in ("level", "requests", "completed", "rejected", "p50", "p99"):
            pr.add_column(col, justify="right")
        for p in result.priorities:
            pl = p.latency
            pr.add_row(str(p.level), str(p.requests), str(p.completed), str(p.rejected),
                       _ms(pl and pl.p50_ms), _ms(pl and pl.p99_ms))
        parts.append(pr)
    notes = []
    if result.rows != result.requests and result.rows:
        notes.append(f"{result.rows} rows in {result.requests} requests: batch sizes count rows "
                     f"({result.mean_batch_requests:.2f} requests per batch)")
    if result.rejected:
        rej = result.rejection
        notes.append(f"rejected: {result.rejected_full} at arrival (queue full), {result.rejected_timeout} "
                     f"timed out in the queue"
                     + (f" (answered {rej.p50_ms:.0f} ms after arrival at p50, {rej.max_ms:.0f} at most)"
                        if rej else ""))
    parts.extend(Text(n) for n in notes)
    return Group(*parts)


def sessions_renderable(result: SessionsResult) -> RenderableType:
    """Per session, then all sessions together; the same for a simulated and a measured run."""
    util = "" if result.utilisation is None else f", device busy {result.utilisation:.0%}"
    kind = "measured" if result.measured else "simulated"
    t = Table(
        box=box.SIMPLE_HEAD,
        title=f"Sessions ({kind}): {result.sessions} streams at {result.fps:g} fps for "
        f"{result.duration_s:g} s, policy {result.policy} (mean batch {result.mean_batch:.2f}"
        f"{util})",
        title_justify="left",
    )
    for col in ("session", "delivered fps", "overwritten", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right")
    for s in result.per_session:
        lat = s.latency
        t.add_row(str(s.session), f"{s.fps:.2f}", f"{s.overwritten_frac:.1%}",
                  _ms(lat and lat.p50_ms), _ms(lat and lat.p99_ms))
    lat = result.latency
    t.add_section()
    t.add_row("all", f"{result.mean_session_fps:.2f} mean, {result.slowest_session_fps:.2f} min",
              f"{result.overwritten_frac:.1%}", _ms(lat and lat.p50_ms), _ms(lat and lat.p99_ms))
    if result.failed:
        return Group(t, Text(f"{result.failed} frames failed", style="bold red"))
    return t


# -- plots of the planner ----------------------------------------------------------------


def _sweeps(plan: Plan) -> Iterator[tuple[str, list[float], list[float], list[float]]]:
    for c in plan.candidates:
        pts = sorted(c.sweep, key=lambda p: p.rate_rps)
        yield (
            c.profile.name,
            [p.rate_rps for p in pts],
            [p.p50_ms for p in pts],
            [p.p99_ms for p in pts],
        )


def plot_file(path: str | Path, field: str = "plot") -> Path:
    """The file a plot given as ``path`` is written to, checked before any work is done.

    matplotlib itself would add ``.png`` to a name without a suffix (and write
    ``adir.png`` for a directory ``adir``); here the suffix is added up front so the
    path printed is the path written, a directory is refused, a suffix matplotlib
    cannot write is refused, and so is a place nothing can be written (missing
    folders are made). Needs the ``plot`` extra.
    """
    _matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    from autobatch.lab.paths import check_output

    p = Path(path)
    if p.is_dir():
        raise ConfigError(
            f"{field} = {str(p)!r}: is a directory: give a file name, such as {str(p / 'plot.png')!r}",
            field=field, value=str(p),
        )
    formats = FigureCanvasBase.get_supported_filetypes()
    if not p.suffix:
        p = p.with_name(p.name + ".png")
    elif p.suffix[1:].lower() not in formats:
        raise ConfigError(
            f"{field} = {str(p)!r}: suffix {p.suffix!r}: must be one of "
            f"{', '.join('.' + f for f in sorted(formats))} (or none: .png)",
            field=field, value=str(p),
        )
    return check_output(p, field)


def _save(fig: Any, p: Path, field: str, **kwargs: Any) -> None:
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, **kwargs)
    except OSError as exc:
        raise ConfigError(f"{field} = {str(p)!r}: cannot write there: {exc}") from exc


def plot_plan(plan: Plan, path: str | Path) -> Path:
    """Latency (p50 dashed, p99 solid) against Poisson load, one colour per profile; returns
    the file written (:func:`plot_file`: ``.png`` added to a name without a suffix)."""
    plt = _matplotlib()
    p = plot_file(path)
    fig, ax = plt.subplots(figsize=(8, 5))
    colours: dict[str, Any] = {}
    for name, rates, p50, p99 in _sweeps(plan):
        (line,) = ax.plot(rates, p99, marker="o", markersize=3, label=f"{name} p99")
        colours[name] = line.get_color()
        ax.plot(rates, p50, linestyle="--", color=line.get_color(), label=f"{name} p50")
    ax.axhline(plan.slo_p99_ms, color="black", linewidth=1, label=f"SLO p99 {plan.slo_p99_ms:g} ms")
    if plan.load.offered_rps:
        ax.axvline(plan.load.offered_rps, color="grey", linewidth=1, linestyle=":",
                   label=f"given load {plan.load.offered_rps:g} rps")
    ax.set_ylim(0, plan.slo_p99_ms * 2)
    ax.set_xlabel("Poisson arrival rate (requests/s)")
    ax.set_ylabel("latency incl. network (ms)")
    ax.set_title(f"{plan.curve.name}: simulated latency against load")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    try:
        _save(fig, p, "plot", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return p


# -- load ------------------------------------------------------------------------------------


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
            _ms(p.p50_ms),
            _ms(p.p95_ms),
            _ms(p.p99_ms),
            _ms(p.lag_p99_ms),
            Text(str(p.failed), style="red" if p.failed else ""),
            end_section=p is report.phases[-1] and len(rows) > 1,
        )
    return table


# -- watch -----------------------------------------------------------------------------------


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


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
                 "curve ms (b:ms)"):
        table.add_column(name, justify="left" if name.startswith(("end", "curve")) else "right")
    for w in windows:
        end = time.strftime("%H:%M:%S", time.localtime(w.end_s))
        if w.stale:
            detail = f"{w.stale_reason}: {w.stale_detail}" if w.stale_detail else w.stale_reason
            table.add_row(end, f"{w.interval_s:.1f}", "[yellow]stale[/]", *[""] * 11,
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
            _num(w.mean_batch_size, "{:.2f}"),
            _num(w.mean_queue_ms, "{:.2f}"),
            _num(w.mean_compute_ms, "{:.2f}"),
            _num(w.mean_request_ms, "{:.2f}"),
            pending,
            _num(w.p95_ms),
            _num(w.p99_ms),
            _num(w.device_ms_per_request, "{:.2f}"),
            _num(None if w.busy_share is None else w.busy_share * 100, "{:.0f}%"),
            _num(None if w.utilization is None else w.utilization * 100, "{:.0f}%"),
            _curve(w),
        )
    return table


# -- demo ------------------------------------------------------------------------------------


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
            cell = f"{p.over_slo_share:.1%} / {_ms(p.p95_ms)} / {_ms(p.device_ms)}"
            if r.mode == "controller" and p.profiles:
                cell += "\n" + escape(f"[{max(p.profiles.items(), key=lambda kv: kv[1])[0]}]")
            cells.append(cell)
        t.add_row(ph.name, f"{ph.rate_rps:g}", *cells)
    t.add_row("whole run", "", *[f"{r.over_slo_share:.1%} / - / {_ms(r.device_ms)}"
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


def plot_timeline(result: ClosedLoopResult, path: Path) -> Path:
    """Latency, load and the live profile over time (matplotlib, the ``plot`` extra); returns
    the file written (:func:`plot_file`)."""
    plt = _matplotlib()
    path = plot_file(path)
    recs = [r for r in result.report.records if r.sent_s is not None and r.latency_ms is not None]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 1]})
    ax1.scatter([r.sent_s for r in recs], [r.latency_ms for r in recs], s=2, alpha=0.3,
                label="request latency (client)")
    ts = [s.t_s for s in result.samples]
    ax1.plot(ts, [s.p95_ms if s.p95_ms is not None else float("nan") for s in result.samples],
             color="black", label="p95, last 2 s")
    ax1.axhline(result.slo_p95_ms, color="red", linestyle="--", label="SLO p95")
    ax1.set_yscale("log")
    ax1.set_ylabel("ms")
    ax1.legend(loc="upper right", fontsize=8)
    for sw in result.switches:
        for ax in (ax1, ax2):
            ax.axvline(sw.t_s, color="gray", linewidth=0.8)
        ax1.annotate(f"-> {sw.to}\n({sw.reason})", (sw.t_s, result.slo_p95_ms), fontsize=7,
                     rotation=90, va="bottom")
    ax2.step(ts, [s.target_rps for s in result.samples], where="post", label="offered /s")
    ax2.plot(ts, [s.completed_rps for s in result.samples], label="completed /s")
    ax2.set_xlabel("seconds")
    ax2.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"{result.mode}: profile switches marked")
    fig.tight_layout()
    try:
        _save(fig, path, "plot", dpi=110)
    finally:
        plt.close(fig)
    return path


# -- the sidecar: status, replay ---------------------------------------------------------------


def status_table(data: Mapping[str, Any]) -> Table:
    """A running sidecar's ``/status`` JSON as a two-column table."""
    table = Table(title=f"autobatch sidecar: {data.get('model')}", show_header=False)
    decision = data.get("last_decision") or {}
    window = data.get("last_window") or {}
    rows = [
        ("active profile", data.get("active_profile")),
        ("pinned", data.get("pinned") or "-"),
        ("last decision", f"{decision.get('action', '-')} ({decision.get('reason', '-')})"),
        ("why", decision.get("message", "-")),
        ("switches", data.get("switches")),
        ("errors", ", ".join(f"{k}={v}" for k, v in (data.get("errors") or {}).items()) or "none"),
    ]
    for key in ("request_rps", "mean_queue_ms", "mean_batch_size", "pending_requests", "p95_ms"):
        value = window.get(key)
        rows.append((f"window {key}", "-" if value is None else f"{value:.3g}"))
    for k, v in rows:
        table.add_row(k, str(v))
    return table


def replay_table(steps: Sequence[Any], title: str, *, show_all: bool = False) -> Table:
    """One row per replayed tick whose decision changed (every tick with ``show_all``)."""
    t0 = steps[0].tick.now_s
    table = Table(title=title)
    for col in ("t s", "req/s", "queue ms", "batch", "pending", "p95 ms", "decision", "reason", "why"):
        table.add_column(col, justify="left" if col in ("decision", "reason", "why") else "right")

    def num(v: float | None, fmt: str = "{:.1f}") -> str:
        return "-" if v is None else fmt.format(v)

    previous = None
    for st in steps:
        d, w = st.decision, st.tick.window
        key = (d.action, d.reason)
        if not show_all and not d.switch and key == previous:
            continue
        previous = key
        verb = f"switch -> {d.target}" if d.switch else f"hold {d.current}"
        table.add_row(
            f"{st.tick.now_s - t0:.0f}",
            num(w.request_rps if w else None), num(w.mean_queue_ms if w else None),
            num(w.mean_batch_size if w else None), num(w.pending_requests if w else None, "{:.0f}"),
            num(w.p95_ms if w else None), verb, d.reason.value, d.message,
        )
    return table


def replay_summary(steps: Sequence[Any]) -> list[str]:
    """The lines under the replay table: switches by reason, agreement with the recording."""
    switches = [st for st in steps if st.decision.switch]
    by_reason: Counter[str] = Counter(st.decision.reason.value for st in switches)
    lines = [f"{len(steps)} ticks, {len(switches)} switches "
             f"({', '.join(f'{k} {v}' for k, v in by_reason.items()) or 'none'}); "
             f"final profile {steps[-1].active_after}"]
    recorded = [st.agrees for st in steps if st.agrees is not None]
    if recorded:
        lines.append(f"agrees with the recorded decisions on {sum(recorded)}/{len(recorded)} ticks")
    return lines
