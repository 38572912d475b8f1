"""``autobatch demo``: the embedded Triton, the sidecar and a step load, closing the loop.

It starts Triton with dense_mlp on free loopback ports, the sidecar from
``examples/sidecar.yaml`` (pointed at that Triton), and the step load of
``examples/schedules/step.yaml`` (low -> high -> low, about two minutes). A live
table shows the phase, the load, the latency the clients see and what the
controller decided; at the end a table per phase says what each phase got and
which profile was in force, and ``--plot`` draws the timeline.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from autobatch.closed_loop import ClosedLoopResult, Sample, run_closed_loop
from autobatch.config import load_yaml
from autobatch.controller.config import SidecarConfig, sidecar_config_from_mapping
from autobatch.errors import ConfigError
from autobatch.schedule import load_schedule
from autobatch.serve import TritonServer, project_root

__all__ = ["demo_sidecar_config", "run_demo", "summary_table"]

MODEL = "dense_mlp"


def examples_dir() -> Path:
    here = Path.cwd() / "examples"
    return here if (here / "sidecar.yaml").is_file() else project_root() / "examples"


def demo_sidecar_config(
    server: TritonServer, workdir: Path, config_path: Path | None = None
) -> SidecarConfig:
    """The example sidecar config, pointed at ``server`` and logging into ``workdir``."""
    path = config_path or examples_dir() / "sidecar.yaml"
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping")
    data = dict(data)
    data["triton"] = {
        "http_url": server.urls.http,
        "metrics_url": server.urls.metrics,
        "grpc_url": server.urls.grpc,
    }
    server_section = dict(data.get("server") or {})
    server_section["listen"] = "127.0.0.1:0"
    data["server"] = server_section
    data["decision_log"] = str(workdir / "decisions.jsonl")
    return sidecar_config_from_mapping(data, str(path), base=path.resolve().parent)


def _live_view(rows: deque[Sample], status: Any, slo_ms: float) -> Group:
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


def summary_table(result: ClosedLoopResult, title: str | None = None) -> Table:
    t = Table(title=title or f"per phase ({result.mode})")
    for col in ("phase", "target/s", "done/s", "p50 ms", "p95 ms", "p99 ms", "> SLO", "failed",
                "profile in force", "switch after"):
        t.add_column(col, justify="left" if col in ("phase", "profile in force") else "right")
    for p in result.phases:
        prof = "\n".join(f"{k} {v:.0%}" for k, v in p.profiles.items())
        t.add_row(
            p.name, f"{p.target_rps:.0f}", f"{p.throughput_rps:.0f}",
            _ms(p.p50_ms), _ms(p.p95_ms), _ms(p.p99_ms),
            f"{p.over_slo / max(p.requests, 1):.1%}", str(sum(p.failures.values())), prof,
            "-" if p.reaction_s is None else f"{p.reaction_s:.0f} s",
        )
    return t


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def run_demo(
    *,
    schedule_path: Path | None = None,
    config_path: Path | None = None,
    plot: Path | None = None,
    console: Console | None = None,
    workdir: Path | None = None,
) -> ClosedLoopResult:
    console = console or Console()
    schedule = load_schedule(schedule_path or examples_dir() / "schedules" / "step.yaml")
    with tempfile.TemporaryDirectory(prefix="autobatch-demo-") as tmp:
        work = workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        with console.status("starting the embedded Triton with dense_mlp ..."):
            server = TritonServer.on_free_ports(models=[MODEL])
            server.start()
        try:
            cfg = demo_sidecar_config(server, work, config_path)
            console.print(
                f"Triton {server.urls.http} (gRPC {server.urls.grpc}); sidecar ladder "
                f"{' -> '.join(p.name for p in cfg.profiles)}; SLO p95 {cfg.policy.slo_p95_ms:g} ms; "
                f"{' -> '.join(f'{p.rate_rps:g}/s for {p.duration_s:g} s' for p in schedule.phases)}"
            )
            rows: deque[Sample] = deque(maxlen=12)
            with Live(console=console, refresh_per_second=2, transient=False) as live:

                def on_sample(sample: Sample, status: Any) -> None:
                    rows.append(sample)
                    live.update(_live_view(rows, status, cfg.policy.slo_p95_ms))

                result = asyncio.run(
                    run_closed_loop(schedule, server.urls.grpc, MODEL, sidecar=cfg,
                                    slo_p95_ms=cfg.policy.slo_p95_ms, on_sample=on_sample)
                )
        finally:
            server.close()
        console.line()  # a piped Live leaves its last line open
        console.print(summary_table(result, "what each phase got, and the profile in force"))
        if result.switches:
            sw = Table(title="switches")
            for col in ("t s", "to", "reason", "took s", "why"):
                sw.add_column(col)
            for s in result.switches:
                sw.add_row(f"{s.t_s:.0f}", s.to, s.reason,
                           "-" if s.duration_s is None else f"{s.duration_s:.1f}", s.message)
            console.print(sw)
        failed = sum(sum(p.failures.values()) for p in result.phases)
        console.print(f"{len(result.report.records)} requests, {failed} failed. "
                      f"Decision log: {cfg.decision_log if workdir else '(temporary)'}")
        if plot is not None:
            plot_timeline(result, plot)
            console.print(f"timeline written to {plot}")
    return result


def plot_timeline(result: ClosedLoopResult, path: Path) -> None:
    """Latency, load and the live profile over time (matplotlib, the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("--plot needs matplotlib: pip install 'autobatch[plot]'") from exc
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
    fig.savefig(path, dpi=110)
    plt.close(fig)
