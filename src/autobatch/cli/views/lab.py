"""The lab's views: ``measure``'s progress and the demo (its live table, its results)."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from autobatch.cli.views.cells import ms
from autobatch.lab.demo import CONTROLLER, DemoResult, DemoSetup, cotenant_items_per_s
from autobatch.lab.sidebyside.run import whole_run


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


def demo_live_view(setup: DemoSetup, t_s: float, status: Any, history: deque[str]) -> Group:
    """Where the run is: the phase, its co-tenants, the controller's profile and last decision."""
    lead = setup.lead_in_s
    if t_s < lead:
        where = f"lead-in, {lead - t_s:.0f} s to go (unmeasured)"
    else:
        i = setup.schedule.phase_at(t_s - lead)
        ph = setup.schedule.phases[-1 if i is None else i]
        where = (f"phase {ph.name}: {ph.rate_rps:g} req/s, {ph.cotenants or 0} co-tenant(s) on every "
                 f"mode's GPU")
    total = lead + setup.schedule.duration_s
    decision = (status or {}).get("last_decision") or {}
    profile = (status or {}).get("active_profile") or "-"
    lines = [Text(f"{min(t_s, total):5.0f} s of {total:.0f}: {where}"),
             Text(f"controller on {profile}: {decision.get('action', '-')} ({decision.get('reason', '-')}) "
                  f"{decision.get('message', '')}", overflow="fold")]
    return Group(*lines, *[Text(h, style="dim") for h in history])


class DemoView:
    """The demo's observer (:class:`autobatch.lab.demo.DemoObserver`): the set-up's steps as
    lines, then a live line of where the run is and what the controller does."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextlib.contextmanager
    def running(self, setup: DemoSetup) -> Iterator[Any]:
        cfg, schedule = setup.config, setup.schedule
        phases = " -> ".join(f"{p.rate_rps:g}/s x {p.cotenants or 0} co-tenant(s) for {p.duration_s:g} s"
                             for p in schedule.phases)
        self.console.print(
            f"[bold]autobatch demo[/]: {cfg.model} on an emulated GPU ({setup.curve}), SLO p95 "
            f"{cfg.policy.slo_p95_ms:g} ms. Three runs at the same time, each on its own GPU with the same "
            f"co-tenants, fed the same requests: {', '.join(setup.runs)} (the controller: ladder "
            f"{' -> '.join(p.name for p in cfg.profiles)}, by reload). Load: {phases}; first "
            f"{setup.lead_in_s:g} s at the first phase's rate, unmeasured (the sidecar's start counts "
            f"as a switch).")
        view = _LiveDemo(self.console, setup)
        try:
            yield view
        finally:
            view.close()


class _LiveDemo:
    def __init__(self, console: Console, setup: DemoSetup) -> None:
        self.console = console
        self.setup = setup
        self.live: Live | None = None
        self.history: deque[str] = deque(maxlen=4)
        self.last: str | None = None

    def event(self, line: str) -> None:
        self.console.print(line, style="dim")

    def tick(self, t_s: float, status: Any) -> None:
        if self.live is None:
            self.live = Live(console=self.console, refresh_per_second=2, transient=False)
            self.live.start()
        decision = (status or {}).get("last_decision") or {}
        if decision.get("action") == "switch":
            line = f"{t_s:5.0f} s: switch to {decision.get('target')} ({decision.get('reason')})"
            if line != self.last:
                self.history.append(line)
                self.last = line
        self.live.update(demo_live_view(self.setup, t_s, status, self.history))

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.console.line()  # a piped Live leaves its last line open


def _measured(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in run["phases"] if p.get("measured", True)]


def _cotenant_rate(result: DemoResult, phase: dict[str, Any]) -> float | None:
    """The co-tenants' items a second in a phase, from their busy share on the device."""
    jobs = {j.name: j for j in result.setup.cotenants}
    shares = phase.get("busy_by_tenant") or {}
    got = [shares[n] * 1000.0 / j.work_ms * j.batch_size for n, j in jobs.items() if n in shares]
    return sum(got) if got else None


def demo_table(result: DemoResult) -> Table:
    """Per phase and over the run, each mode side by side: the share of requests over the SLO,
    p95, the model's share of its GPU, and the co-tenants' throughput on that GPU."""
    t = Table(title=f"the same requests three ways, at once: over the SLO ({result.slo_p95_ms:g} ms) / "
                    "p95 ms / the model's GPU busy / co-tenants' items/s")
    t.add_column("phase")
    t.add_column("req/s", justify="right")
    t.add_column("co-t.", justify="right")
    for name in result.runs:
        t.add_column(name, justify="right")
    first = next(iter(result.runs.values()))
    for i, ph in enumerate(_measured(first)):
        cells = []
        for name, r in result.runs.items():
            p = _measured(r)[i]
            model = (p.get("busy_by_tenant") or {}).get("model")
            cot = _cotenant_rate(result, p)
            cell = (f"{p['over_slo_share']:.1%} / {ms(p['p95_ms'])} / "
                    f"{'-' if model is None else f'{model:.0%}'} / {'-' if cot is None else f'{cot:.0f}'}")
            if name == CONTROLLER and p["profiles"]:
                cell += "\n" + escape(f"[{max(p['profiles'].items(), key=lambda kv: kv[1])[0]}]")
            cells.append(cell)
        t.add_row(ph["name"], f"{ph['target_rps']:g}", str(ph.get("cotenants") or 0), *cells)
    totals = []
    for r in result.runs.values():
        w = whole_run(r)
        cot = cotenant_items_per_s(r)
        totals.append(f"{w['over_slo_share']:.1%} / {ms(w['device_ms'])} ms a request / "
                      f"{'-' if cot is None else f'{cot:.0f}'}")
    t.add_row("whole run", "", "", *totals)
    return t


def demo_verdict_lines(result: DemoResult) -> list[str]:
    """The demo's last lines: the controller against each static run, on the SLO, device time
    and what the co-tenants got."""
    lines = []
    for c in result.comparisons:
        dev = "-" if c.device_ratio is None else f"{c.device_ratio:.2f}x"
        cot = "" if c.cotenant_ratio is None else f"; the co-tenants' throughput {c.cotenant_ratio:.2f}x"
        lines.append(
            f"controller vs {c.against}: device time per request {dev}; requests over the SLO "
            f"{c.over_slo_points:+.1f} points (worst phase, {c.worst_phase}: {c.worst_phase_points:+.1f})"
            f"{cot}")
    return lines


def switches_table(result: DemoResult) -> Table:
    sw = Table(title="the controller's switches (seconds into the run, the lead-in first)")
    for col in ("t s", "to", "reason", "took s"):
        sw.add_column(col)
    for d in result.runs[CONTROLLER].get("decisions", []):
        if d["action"] == "switch":
            sw.add_row(f"{d['t_s']:.0f}", str(d["target"]), d["reason"],
                       "-" if d.get("duration_s") is None else f"{d['duration_s']:.1f}")
    return sw
