"""Every plot: matplotlib (the ``plot`` extra) is imported only when one is asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autobatch.errors import ConfigError
from autobatch.lab.demo import CONTROLLER, DemoResult
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
    ax.axhline(plan.slo_ms, color="black", linewidth=1, label=f"SLO {plan.slo_label} {plan.slo_ms:g} ms")
    if plan.load.offered_rps:
        ax.axvline(plan.load.offered_rps, color="grey", linewidth=1, linestyle=":",
                   label=f"given load {plan.load.offered_rps:g} rps")
    ax.set_ylim(0, plan.slo_ms * 2)
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


def plot_demo(result: DemoResult, path: Path) -> Path:
    """The demo's three runs over time (matplotlib, the ``plot`` extra): each mode's p95 against
    the SLO with the co-tenants' phases shaded, the profile the controller had in force, and each
    mode's GPU busy by tenant; returns the file written (:func:`plot_file`)."""
    plt = _matplotlib()
    path = plot_file(path)
    names = list(result.runs)
    fig, axes = plt.subplots(2 + len(names), 1, figsize=(10, 3 + 1.6 * (1 + len(names))), sharex=True,
                             gridspec_kw={"height_ratios": [3, 1] + [1.2] * len(names)})
    ax, prof = axes[0], axes[1]
    lead = result.setup.lead_in_s
    starts = result.setup.schedule.starts_s
    for a in axes:
        for s, ph in zip(starts, result.setup.schedule.phases):
            if ph.cotenants:
                a.axvspan(lead + s, lead + s + ph.duration_s, color="orange", alpha=0.12, linewidth=0)
        if lead > 0:
            a.axvspan(0, lead, color="grey", alpha=0.08, linewidth=0)
    for name in names:
        tl = result.runs[name].get("timeline") or []
        p95 = [x["p95_ms"] if x["p95_ms"] is not None else float("nan") for x in tl]
        ax.plot([x["t_s"] for x in tl], p95, label=name)
    ax.axhline(result.slo_p95_ms, color="red", linestyle="--", label=f"SLO p95 {result.slo_p95_ms:g} ms")
    ax.set_ylabel("p95 ms (last 2 s)")
    ax.legend(loc="upper left", fontsize=8)
    ladder = [p.name for p in result.setup.config.profiles]
    tl = result.runs[CONTROLLER].get("timeline") or []
    prof.step([x["t_s"] for x in tl], [ladder.index(x["active"]) if x["active"] in ladder else float("nan")
                                       for x in tl], where="post", color="black")
    prof.set_yticks(range(len(ladder)), ladder, fontsize=7)
    prof.set_ylabel("controller", fontsize=8)
    for a, name in zip(axes[2:], names):
        tl = result.runs[name].get("timeline") or []
        tenants = sorted({k for x in tl for k in x["busy_by_tenant"]}, key=lambda k: (k != "model", k))
        a.stackplot([x["t_s"] for x in tl], [[x["busy_by_tenant"].get(k, 0.0) for x in tl] for k in tenants],
                    labels=tenants, alpha=0.8)
        a.set_ylim(0, 1.05)
        a.set_ylabel(f"{name}\nGPU busy", fontsize=8)
        a.legend(loc="upper left", fontsize=7, ncol=len(tenants))
    axes[-1].set_xlabel("seconds (grey: the unmeasured lead-in; orange: co-tenants on every GPU)")
    fig.suptitle(f"autobatch demo: {result.setup.config.model} on an emulated GPU ({result.setup.curve})")
    fig.tight_layout()
    try:
        _save(fig, path, "plot", dpi=110)
    finally:
        plt.close(fig)
    return path
