"""The ``autobatch`` command line: parse, call one library function, print.

Every ``AutobatchError`` becomes one line on stderr and exit code 2; nothing
here holds logic that a library function could hold.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from autobatch.errors import AutobatchError, ConfigError

app = typer.Typer(
    name="autobatch",
    help="Keep a Triton model inside its latency SLO while getting the most out of the device.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
out = Console()
err = Console(stderr=True)


def main() -> None:
    try:
        app()
    except AutobatchError as exc:
        err.print(f"autobatch: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=None, sort_keys=False) + "\n")
    sys.stdout.flush()


# -- serve ---------------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


@app.command()
def serve(
    repository: Annotated[
        Optional[Path], typer.Option(help="Model repository (default: the project's model_repository/).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address every endpoint binds.")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="HTTP/REST port.")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port.")] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port.")] = 8002,
    model: Annotated[
        Optional[list[str]], typer.Option("--model", help="Load only this model (repeatable).")
    ] = None,
    emulate_curve: Annotated[
        Optional[Path],
        typer.Option(help="Batch curve file (../shared/curves format) for emulated_accelerator."),
    ] = None,
) -> None:
    """Start the embedded Triton (from nvidia-pytriton) with every model loaded.

    Example: autobatch serve --emulate-curve ../shared/curves/laptop-512x288-fp16.yaml
    """
    from autobatch.plan.curve import load_curve
    from autobatch.serve import TritonServer

    curve = load_curve(emulate_curve) if emulate_curve else None
    server = TritonServer(
        repository,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        models=model,
        emulate_curve=curve,
    )
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        with err.status("starting tritonserver ..."):
            server.start()
        out.print(f"Triton ready (pid {server.pid}), models from {server.repository}")
        out.print(f"  HTTP     {server.urls.http}")
        out.print(f"  gRPC     {server.urls.grpc}")
        out.print(f"  metrics  {server.urls.metrics}")
        out.print(f"  log      {server.log_path}")
        out.print("Ctrl-C or SIGTERM stops it.")
        while server.running():
            time.sleep(0.5)
        raise AutobatchError(f"tritonserver exited unexpectedly: {server.log_tail()}")
    except (_Stop, KeyboardInterrupt):
        err.print("stopping tritonserver ...")
    finally:
        server.close()
        signal.signal(signal.SIGTERM, previous)


# -- render --------------------------------------------------------------------------------


@app.command()
def render(
    profile: Annotated[Path, typer.Argument(help="Profile YAML (profiles/<model>/<name>.yaml).")],
    base: Annotated[
        Optional[Path],
        typer.Option(help="config.pbtxt to merge into (default: the repository's config of the model)."),
    ] = None,
    repository: Annotated[Optional[Path], typer.Option(help="Model repository for the default base.")] = None,
    override: Annotated[
        bool, typer.Option("--override", help="Print the JSON body of POST .../load instead.")
    ] = False,
) -> None:
    """Render a profile into a full config.pbtxt (or the load API's config override).

    Example: autobatch render profiles/dense_mlp/aggressive.yaml > config.pbtxt
    """
    from autobatch.profiles import load_profile, parse_pbtxt, render_pbtxt
    from autobatch.serve import default_repository

    prof = load_profile(profile)
    if base is None:
        repo = repository or default_repository()
        base = repo / (prof.model or "") / "config.pbtxt"
        if not base.is_file():
            raise ConfigError(
                f"{profile}: no base config for model {prof.model!r} at {base}; pass --base",
                source=str(profile),
            )
    try:
        base_text = base.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{base}: cannot read: {exc}", source=str(base)) from exc
    config = parse_pbtxt(base_text, str(base))
    if override:
        print_json(prof.to_override(config))
    else:
        sys.stdout.write(render_pbtxt(prof.merge_into(config), str(profile)))


# -- load ----------------------------------------------------------------------------------


@app.command()
def load(
    model: Annotated[str, typer.Option(help="Model to drive (must be READY on the server).")],
    url: Annotated[
        str | None,
        typer.Option(help="Triton host:port [default: 127.0.0.1:8001 for grpc, :8000 for http]."),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Constant Poisson arrival rate, requests/s.")
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Seconds at --rate.")] = None,
    schedule: Annotated[
        Path | None,
        typer.Option(help="Schedule YAML of phases instead of --rate/--duration."),
    ] = None,
    protocol: Annotated[str, typer.Option(help="grpc or http.")] = "grpc",
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Write one JSON line per request here.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON on stdout.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the arrival times and the inputs.")] = 0,
    timeout_ms: Annotated[float, typer.Option(help="Per-request client timeout.")] = 10_000.0,
    batch_size: Annotated[int, typer.Option(help="Batch dimension of every request.")] = 1,
) -> None:
    """Send open-loop load to a Triton model and report latency and failures per phase.

    Requests go out at Poisson arrival times whether or not earlier ones have
    returned. The run ends after the schedule plus a drain of the timeout + 1 s.
    Warns (stderr) when the generator itself fell behind its schedule.

    Example: autobatch load --url 127.0.0.1:8001 --model dense_mlp --rate 100 --duration 10

    Example: autobatch load --model dense_mlp --schedule examples/schedules/step.yaml --out r.jsonl
    """
    import contextlib
    import threading

    from rich.live import Live

    from autobatch.load import run_load
    from autobatch.load.display import LiveStatus, failure_lines, report_table
    from autobatch.schedule import Schedule, load_schedule

    if (rate is None) == (schedule is None):
        raise ConfigError("give either --rate (with --duration) or --schedule FILE, not both or neither")
    if schedule is not None:
        if duration is not None:
            raise ConfigError("--duration goes with --rate; a --schedule file sets its own durations")
        plan = load_schedule(schedule)
    else:
        assert rate is not None
        if rate < 0:
            raise ConfigError(f"--rate = {rate:g}: must be >= 0 requests/s")
        if duration is None:
            raise ConfigError("--rate needs --duration SECONDS")
        if duration <= 0:
            raise ConfigError(f"--duration = {duration:g}: must be > 0 seconds")
        plan = Schedule.constant(rate, duration)
    if protocol not in ("grpc", "http"):
        raise ConfigError(f"--protocol = {protocol!r}: must be grpc or http")
    if timeout_ms <= 0:
        raise ConfigError(f"--timeout-ms = {timeout_ms:g}: must be > 0")
    if url is None:
        url = "127.0.0.1:8001" if protocol == "grpc" else "127.0.0.1:8000"

    # First Ctrl-C ends the run early and still reports; a second one aborts.
    stop = threading.Event()

    def _on_sigint(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        err.print("stopping: draining in-flight requests (Ctrl-C again to abort) ...")

    status = LiveStatus(plan)
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        live = (
            Live(status, console=err, refresh_per_second=4, transient=True)
            if err.is_terminal
            else contextlib.nullcontext()
        )
        with live:
            report = run_load(
                url,
                model,
                plan,
                protocol=protocol,
                seed=seed,
                timeout_s=timeout_ms / 1000.0,
                batch_size=batch_size,
                out=out_path,
                on_record=status.record,
                stop=stop,
            )
    finally:
        signal.signal(signal.SIGINT, previous)

    if json_output:
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
        )
    for warning in report.warnings:
        err.print(f"autobatch: warning: {warning}", markup=False, highlight=False, soft_wrap=True)


# -- watch ---------------------------------------------------------------------------------


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
    """
    from collections import deque

    from rich.live import Live

    from autobatch.signals import make_source
    from autobatch.signals import watch as run_watch
    from autobatch.signals.table import window_table

    if not interval > 0:
        raise ConfigError(f"--interval = {interval:g}: must be > 0 seconds")
    if count is not None and count < 1:
        raise ConfigError(f"--count = {count}: must be >= 1")
    if rows < 1:
        raise ConfigError(f"--rows = {rows}: must be >= 1")
    src = make_source(
        source,
        url,
        model,
        metrics_url=metrics_url,
        utilization_url=utilization_url,
        selector=selector,
        range_s=range_s,
        max_age_s=max_age,
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


if __name__ == "__main__":  # pragma: no cover
    main()
