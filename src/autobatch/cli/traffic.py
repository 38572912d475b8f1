"""Traffic commands: send load to a Triton model, watch its windows live."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autobatch.cli.app import app, err, out, print_json, restricted_api, warn
from autobatch.cli.options import (
    RestrictedHeaderOption,
    RestrictedKeyFileOption,
    SessionPolicyOption,
    TraceModelOption,
)
from autobatch.curve import load_curve
from autobatch.errors import ConfigError

if TYPE_CHECKING:
    from autobatch.load import LoadReport
    from autobatch.schedule import Schedule


@app.command()
def load(
    model: Annotated[str, typer.Option(help="Model to drive (must be READY on the server).")],
    url: Annotated[
        str | None,
        typer.Option(help="Triton host:port, or http:// or grpc:// before it [default: "
                          "127.0.0.1:8001 for grpc, :8000 for http]."),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Constant Poisson arrival rate, requests/s.")
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Seconds at --rate.")] = None,
    schedule: Annotated[
        Path | None,
        typer.Option(help="Schedule YAML of phases instead of --rate/--duration."),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(help="Send these arrivals (time_s, rows, priority): CSV, JSON lines, or "
                          "Triton's own trace file (.json)."),
    ] = None,
    trace_model: TraceModelOption = None,
    record_trace: Annotated[
        Path | None,
        typer.Option(help="Write what was sent (send time, rows, priority) as a trace (.csv/.jsonl)."),
    ] = None,
    protocol: Annotated[str, typer.Option(help="grpc or http.")] = "grpc",
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Write one JSON line per request here.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON on stdout.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the arrival times and the inputs (>= 0).")] = 0,
    timeout_ms: Annotated[float, typer.Option(help="Per-request client timeout.")] = 10_000.0,
    batch_size: Annotated[int, typer.Option(help="Batch dimension of every request.")] = 1,
    sessions: Annotated[
        int | None, typer.Option(help="Instead of a rate: this many latest-only streams ...")
    ] = None,
    fps: Annotated[float | None, typer.Option(help="... at this many frames per second each.")] = None,
    session_policy: SessionPolicyOption = "batch-waiting",
) -> None:
    """Send open-loop load to a Triton model and report latency and failures per phase.

    Requests go out at Poisson arrival times whether or not earlier ones have
    returned. The run ends after the schedule plus a drain of the timeout + 1 s.
    Warns (stderr) when the generator itself fell behind its schedule.

    With --sessions K --fps F: K camera-like streams for --duration seconds
    (default 10), each keeping only its newest frame, one request in flight,
    the next one picked by --session-policy; the report is per session (fps,
    p50/p99, overwritten share), as `autobatch simulate --sessions` gives it.

    Example: autobatch load --url 127.0.0.1:8001 --model dense_mlp --rate 100 --duration 10

    Example: autobatch load --model dense_mlp --schedule examples/schedules/step.yaml --out r.jsonl

    Example: autobatch load --model emulated_accelerator --sessions 4 --fps 30
    --session-policy round-robin --duration 20

    Example: autobatch load --model dense_mlp --trace production.csv --record-trace sent.csv
    """
    from autobatch.config import check_seed
    from autobatch.load.transport import normalize_url

    # Checked here, before any file is read or any connection made, naming the flags.
    check_seed(seed, "--seed")
    if url is not None:
        normalize_url(url, "--url")
    run = _Run(model, url, protocol, out_path, json_output, seed, timeout_ms / 1000.0, batch_size)
    if sessions is not None or fps is not None:
        if rate is not None or schedule is not None or trace is not None:
            raise ConfigError("give one load: --rate/--schedule/--trace, or --sessions K --fps F")
        _load_sessions(run, sessions, fps, session_policy, duration)
        return
    plan, sent = _arrivals(trace, trace_model, rate, duration, schedule)
    report = _run_load_live(run, plan, sent, record_trace)
    _print_load_report(report, run, record_trace)


@dataclass(frozen=True)
class _Run:
    """What every load run takes, whatever the load: the target, where records go and how
    requests look."""

    model: str
    url: str | None
    """None: Triton's default port on loopback for ``protocol``."""
    protocol: str
    out_path: Path | None
    json_output: bool
    seed: int
    timeout_s: float
    batch_size: int

    def target(self) -> str:
        from autobatch.load import default_url

        return default_url(self.protocol) if self.url is None else self.url


@contextlib.contextmanager
def _first_ctrl_c_stops(message: str) -> Iterator[threading.Event]:
    """The first Ctrl-C sets the event (the run ends early and still reports); a second aborts."""
    stop = threading.Event()

    def _on_sigint(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        err.print(message)

    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _arrivals(trace: Path | None, trace_model: str | None, rate: float | None, duration: float | None,
              schedule: Path | None) -> tuple[Schedule, Any]:
    """The schedule shown while the run goes, and what ``run_load`` sends: a trace or the phases."""
    from autobatch.load import trace_schedule
    from autobatch.schedule import schedule_from_options
    from autobatch.traces import read_trace

    if trace is not None:
        if rate is not None or schedule is not None or duration is not None:
            raise ConfigError("give one load: --trace FILE, or --rate/--duration, or --schedule FILE")
        sent = read_trace(trace, model=trace_model)
        return trace_schedule(sent), sent
    plan = schedule_from_options(rate_rps=rate, duration_s=duration, path=schedule)
    return plan, plan


def _run_load_live(run: _Run, plan: Schedule, sent: Any, record_trace: Path | None) -> LoadReport:
    """``run_load`` with a live status on a terminal's stderr."""
    from rich.live import Live

    from autobatch.cli.views import LiveStatus
    from autobatch.load import run_load

    url = run.target()
    status = LiveStatus(plan)
    with _first_ctrl_c_stops("stopping: draining in-flight requests (Ctrl-C again to abort) ...") as stop:
        live = (
            Live(status, console=err, refresh_per_second=4, transient=True)
            if err.is_terminal
            else contextlib.nullcontext()
        )
        with live:
            return run_load(
                url,
                run.model,
                sent,
                protocol=run.protocol,
                seed=run.seed,
                timeout_s=run.timeout_s,
                batch_size=run.batch_size,
                out=run.out_path,
                on_record=status.record,
                stop=stop,
                record_trace=record_trace,
            )


def _print_load_report(report: LoadReport, run: _Run, record_trace: Path | None) -> None:
    from autobatch.cli.views import failure_lines, report_table

    out_path = run.out_path
    if run.json_output:
        print_json(report.to_dict())
    else:
        out.print(report_table(report))
        for line in failure_lines(report):
            out.print(f"failures in {line}", markup=False, highlight=False)
        t = report.total
        out.print(
            f"{t.sent} requests sent, {t.ok} ok, {t.failed} failed; "
            f"achieved {t.achieved_rps:.1f} rps of {t.target_rps:.1f} target"
            + (f"; records in {out_path}" if out_path else "")
            + (f"; sent trace in {record_trace}" if record_trace else "")
        )
    for warning in report.warnings:
        warn(warning)


def _load_sessions(run: _Run, sessions: int | None, fps: float | None, policy: str,
                   duration: float | None) -> None:
    from autobatch.cli.views import sessions_renderable
    from autobatch.load.sessions import run_sessions

    if sessions is None or fps is None:
        raise ConfigError("--sessions and --fps go together: give both")
    url, model, protocol = run.target(), run.model, run.protocol
    stopping = "stopping: serving the frames still waiting (Ctrl-C again to abort) ..."
    with _first_ctrl_c_stops(stopping) as stop:
        status = (err.status(f"{sessions} sessions at {fps:g} fps, {policy}, on {model} ...")
                  if err.is_terminal else contextlib.nullcontext())
        with status:
            result = run_sessions(
                url, model, sessions, fps, policy=policy,
                duration_s=10.0 if duration is None else duration, protocol=protocol, seed=run.seed,
                timeout_s=run.timeout_s, rows=run.batch_size, out=run.out_path, stop=stop,
            )
    if run.json_output:
        print_json(result.to_dict())
    else:
        out.print(sessions_renderable(result))
        if run.out_path:
            out.print(f"frame records in {run.out_path}")
    for warning in result.warnings:
        warn(warning)


@app.command()
def watch(
    url: Annotated[
        str, typer.Option(help="Triton's HTTP endpoint (or Prometheus's, with --source prometheus).")
    ],
    model: Annotated[str, typer.Option(help="The model to watch (its versions are summed).")],
    source: Annotated[str, typer.Option(help="triton (direct) or prometheus (fleet, PromQL).")] = (
        "triton"
    ),
    metrics_url: Annotated[
        str | None, typer.Option(help="Triton's /metrics [default: --url's host, port 8002].")
    ] = None,
    utilization_url: Annotated[
        str | None, typer.Option(help="A dcgm-exporter /metrics for DCGM_FI_DEV_GPU_UTIL.")
    ] = None,
    selector: Annotated[
        str | None, typer.Option(help='Prometheus only: extra label matchers, e.g. job="triton".')
    ] = None,
    range_s: Annotated[
        float | None, typer.Option("--range", help="Prometheus only: rate() range, seconds [30].")
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between samples.")] = 1.0,
    count: Annotated[int | None, typer.Option(help="Stop after this many windows.")] = None,
    max_age: Annotated[
        float | None, typer.Option(help="Mark windows whose data is older than this stale (s).")
    ] = None,
    rows: Annotated[int, typer.Option(help="Windows kept on screen in the table.")] = 20,
    curve: Annotated[
        Path | None, typer.Option(help="The model's batch curve alone on its device: each window's "
                                       "stretch against it, and who else uses the device.")
    ] = None,
    restricted_api_header: RestrictedHeaderOption = None,
    restricted_api_key_file: RestrictedKeyFileOption = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="One JSON window per line (the replay trace format).")
    ] = False,
) -> None:
    """Print live windows of one model: rates, batch size, queue time, p95, batch curve.

    The --json lines are Window.to_dict() and read back with Window.from_dict:
    the trace format of `autobatch replay`. Ctrl-C stops.

    Example: autobatch watch --url 127.0.0.1:8000 --model dense_mlp --interval 2

    Example: autobatch watch --source prometheus --url 127.0.0.1:9090 --model dense_mlp
    --selector 'job="triton"' --json > trace.jsonl

    Example: autobatch watch --url 127.0.0.1:8000 --model emulated_accelerator
    --curve curves/t4-resnet50-fp16.yaml --utilization-url http://127.0.0.1:9411/metrics
    """
    from rich.live import Live

    from autobatch.cli.views import window_table
    from autobatch.signals import make_source
    from autobatch.signals import watch as run_watch
    from autobatch.signals.loop import check_polling

    if rows < 1:
        raise ConfigError(f"--rows = {rows}: must be >= 1")
    check_polling(interval, count)
    src = make_source(
        source,
        url,
        model,
        metrics_url=metrics_url,
        utilization_url=utilization_url,
        selector=selector,
        range_s=range_s,
        max_age_s=max_age,
        restricted_api=restricted_api(restricted_api_header, restricted_api_key_file),
        curve=None if curve is None else load_curve(curve),
    )
    try:
        if json_output:
            run_watch(src, interval, lambda w: print_json(w.to_dict()), count=count)
            return
        recent: deque[Any] = deque(maxlen=rows)
        title = f"{model} via {source} {url}"
        with Live(window_table(recent, title=title), console=out, auto_refresh=False) as live:

            def show(window: Any) -> None:
                recent.append(window)
                live.update(window_table(recent, title=title), refresh=True)

            run_watch(src, interval, show, count=count)
    except KeyboardInterrupt:
        # Ctrl-C is how a watch ends; it is not an error.
        return
