"""Showing what the planner computed: tables, profile files, plots.

:mod:`autobatch.plan` is pure; this is its edge. The functions here turn a
:class:`~autobatch.plan.planner.Plan`, a
:class:`~autobatch.plan.simulator.SimResult` or a
:class:`~autobatch.plan.sessions.SessionsResult` into rich renderables, write
profile YAML the sidecar loads, and draw latency against load with
matplotlib (imported only when a plot is asked for).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from autobatch.errors import ConfigError
from autobatch.plan.curve import PointKind
from autobatch.plan.planner import Plan, VerdictKind
from autobatch.plan.sessions import SessionsResult
from autobatch.plan.simulator import SimResult
from autobatch.profiles import load_profile

__all__ = ["plan_renderable", "plot_plan", "sessions_renderable", "sim_renderable", "write_profiles"]

_FLAG = {
    PointKind.MEASURED: "",
    PointKind.INTERPOLATED: "interpolated",
    PointKind.EXTRAPOLATED: "EXTRAPOLATED",
}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


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
                "batch", "max rps", ""):
        cands.add_column(col, justify="left" if col in ("profile", "pref", "") else "right")
    rec = plan.recommended
    for c in plan.candidates:
        lat = c.at_load.latency
        mark = "recommended" if rec is not None and c is rec else ("" if c.meets_slo else "misses SLO")
        cands.add_row(
            c.profile.name,
            ",".join(map(str, c.profile.preferred_batch_size)),
            str(c.profile.max_batch_size),
            f"{c.profile.max_queue_delay_us / 1000:.1f}",
            _ms(lat and lat.p50_ms),
            _ms(lat and lat.p95_ms),
            _ms(lat and lat.p99_ms),
            f"{c.at_load.throughput_rps:.1f}",
            f"{c.at_load.mean_batch:.2f}",
            f"{c.max_rate_rps:.0f}",
            mark,
        )
    parts.append(cands)
    parts.append(Text("  pref: preferred batch sizes; max: max batch size. p50/p95/p99 (ms), rps "
                      "(throughput) and batch (mean size) at the given load; max rps: the highest "
                      "Poisson rate with p99 within the SLO"))
    if rec is None:
        parts.append(Text("No candidate keeps p99 within the SLO at this load: only more "
                          "instances or replicas help.", style="bold red"))
    for s in plan.sessions:
        parts.append(sessions_renderable(s))
    return Group(*parts)


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
    return Group(*parts)


def sessions_renderable(result: SessionsResult) -> RenderableType:
    t = Table(
        box=box.SIMPLE_HEAD,
        title=f"Sessions: {result.sessions} streams at {result.fps:g} fps, policy "
        f"{result.policy} (mean batch {result.mean_batch:.2f}, device busy "
        f"{result.utilisation:.0%})",
        title_justify="left",
    )
    for col in ("session", "delivered fps", "overwritten", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right")
    for s in result.per_session:
        lat = s.latency
        t.add_row(str(s.session), f"{s.fps:.2f}", f"{s.overwritten_frac:.1%}",
                  _ms(lat and lat.p50_ms), _ms(lat and lat.p99_ms))
    return t


def write_profiles(plan: Plan, directory: str | Path, *, force: bool = False) -> list[Path]:
    """One YAML file per candidate under ``directory``, in the schema the sidecar loads.

    Every file is read back through :func:`autobatch.profiles.load_profile`
    before this returns, so a file written is a file the sidecar accepts.
    Existing files are kept unless ``force``.
    """
    d = Path(directory)
    targets = [(c, d / f"{c.profile.name}.yaml") for c in plan.candidates]
    if not force:
        taken = [str(p) for _, p in targets if p.exists()]
        if taken:
            raise ConfigError(
                f"--write-profiles = {str(d)!r}: {taken[0]} already exists; "
                f"pass --force to overwrite"
            )
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--write-profiles = {str(d)!r}: cannot create it: {exc}") from exc
    written = []
    for cand, path in targets:
        data = cand.profile.to_dict()
        lat = cand.at_load.latency
        data = {
            "name": data.pop("name"),
            "description": (
                f"autobatch plan for curve {plan.curve.name!r}, SLO p99 {plan.slo_p99_ms:g} ms: "
                f"at {plan.load.label}, p99 {_ms(lat and lat.p99_ms)} ms; within the SLO up to "
                f"{cand.max_rate_rps:.0f} rps"
            ),
            **data,
        }
        try:
            path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--write-profiles: cannot write {path}: {exc}") from exc
        load_profile(path)
        written.append(path)
    return written


def _sweeps(plan: Plan) -> Iterator[tuple[str, list[float], list[float], list[float]]]:
    for c in plan.candidates:
        pts = sorted(c.sweep, key=lambda p: p.rate_rps)
        yield (
            c.profile.name,
            [p.rate_rps for p in pts],
            [p.p50_ms for p in pts],
            [p.p99_ms for p in pts],
        )


def plot_plan(plan: Plan, path: str | Path) -> Path:
    """Latency (p50 dashed, p99 solid) against Poisson load, one colour per profile."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError(
            "--plot needs matplotlib: pip install 'autobatch[plot]'"
        ) from exc
    p = Path(path)
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
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(p, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise ConfigError(f"--plot = {str(p)!r}: cannot write there: {exc}") from exc
    finally:
        plt.close(fig)
    return p
