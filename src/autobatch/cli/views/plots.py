"""Every plot: matplotlib (the ``plot`` extra) is imported only when one is asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autobatch.errors import ConfigError
from autobatch.lab.closed_loop import ClosedLoopResult
from autobatch.plan.planner import Plan


def _matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("plot: needs matplotlib: pip install 'autobatch[plot]'") from exc
    return plt


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
