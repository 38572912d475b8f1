"""The ``autobatch`` command line: parse, call one library function, print.

Every ``AutobatchError`` becomes one line on stderr and exit code 2; nothing
here holds logic that a library function could hold.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

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


def _console(stream: Any) -> Console:
    """A console for ``stream``; piped into a file or a CI log, tables get 120 columns, not 80."""
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stream is sys.stderr, width=120 if wide else None)


out = _console(sys.stdout)
err = _console(sys.stderr)


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
        Path | None, typer.Option(help="Model repository (default: the project's model_repository/).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address every endpoint binds.")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="HTTP/REST port.")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port.")] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port.")] = 8002,
    model: Annotated[
        list[str] | None, typer.Option("--model", help="Load only this model (repeatable).")
    ] = None,
    emulate_curve: Annotated[
        Path | None,
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
        Path | None,
        typer.Option(help="config.pbtxt to merge into (default: the repository's config of the model)."),
    ] = None,
    repository: Annotated[Path | None, typer.Option(help="Model repository for the default base.")] = None,
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


# -- planner: measure, simulate, plan ---------------------------------------------------------


def _int_list(flag: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{flag} = {text!r}: must be integers separated by commas") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(f"{flag} = {text!r}: must be integers >= 1 separated by commas")
    return values


def _priority_mix(text: str | None) -> dict[int, float] | None:
    if not text:
        return None
    mix: dict[int, float] = {}
    for part in text.split(","):
        level, _, share = part.partition(":")
        try:
            mix[int(level)] = float(share)
        except ValueError:
            raise ConfigError(
                f"--priority-mix = {text!r}: must look like 1:0.2,2:0.8 (level:share, ...)"
            ) from None
    return mix


@app.command()
def measure(
    model: Annotated[str, typer.Option(help="Model to measure (keep other traffic off it).")],
    url: Annotated[str, typer.Option(help="Triton's HTTP endpoint.")] = "http://127.0.0.1:8000",
    batch_sizes: Annotated[
        str, typer.Option(help="Batch sizes to measure, comma-separated.")
    ] = "1,2,4,8,16,32",
    warmup: Annotated[int, typer.Option(help="Discarded runs per size.")] = 3,
    repeats: Annotated[int, typer.Option(help="Measured runs per size (the point is their median).")] = 10,
    live_s: Annotated[
        float | None,
        typer.Option("--live-s", help="Instead: the curve live traffic shows over this many seconds."),
    ] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write the curve here (.yaml, or .csv rows).")
    ] = None,
    overheads_for: Annotated[
        Path | None,
        typer.Option(help="Instead: what the server adds to this curve, under load (for simulate)."),
    ] = None,
    grpc_url: Annotated[str, typer.Option(help="Triton's gRPC host:port (--overheads-for).")] = (
        "127.0.0.1:8001"
    ),
    rate: Annotated[float, typer.Option(help="Poisson load for --overheads-for, requests/s.")] = 50.0,
    duration: Annotated[float, typer.Option(help="Seconds of load for --overheads-for.")] = 5.0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the curve as JSON.")] = False,
) -> None:
    """Measure a model's batch curve through Triton's own per-batch-size timers.

    One request carrying the whole batch at a time; the compute time comes from
    /v2/models/M/stats batch_stats (not the client round trip); warm-up runs
    are dropped and each point is the median of the repeats. With --live-s the
    curve is what live traffic executed over that window instead. With
    --overheads-for CURVE it sends Poisson load and prints what the server adds
    to that curve, as `simulate`/`plan` options.

    Example: autobatch measure --url http://127.0.0.1:8000 --model dense_mlp
    --batch-sizes 1,2,4,8,16,32 --out curves/dense_mlp.yaml

    Example: autobatch measure --model emulated_accelerator --overheads-for curves/laptop-256x144-fp16.yaml
    --rate 100
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from autobatch.measure import live_curve, measure_curve, measure_overheads, write_curve
    from autobatch.plan.curve import load_curve

    if overheads_for is not None:
        if not (rate > 0 and duration > 0):
            raise ConfigError(f"--rate = {rate:g}, --duration = {duration:g}: both must be > 0")
        with err.status(f"sending {rate:g} rps to {model} for {duration:g} s ..."):
            found = measure_overheads(grpc_url, url, model, load_curve(overheads_for),
                                      rate_rps=rate, duration_s=duration)
        if json_output:
            print_json(found.to_dict())
        else:
            out.print(
                f"--batch-overhead-ms {found.batch_overhead_ms:.3f} "
                f"--request-overhead-ms {found.request_overhead_ms:.3f} "
                f"--fixed-latency-ms {found.fixed_latency_ms:.3f}   "
                f"({found.requests} requests, {found.executions} batches)"
            )
        return
    if live_s is not None:
        with err.status(f"reading batch_stats of {model} for {live_s:g} s ..."):
            curve = live_curve(url, model, live_s)
        if curve is None:
            raise AutobatchError(
                f"model {model!r} executed no batch size at least 3 times in {live_s:g} s: "
                "send traffic or measure a longer window"
            )
        spreads: dict[int, float] = {}
    else:
        sizes = _int_list("--batch-sizes", batch_sizes)
        per_size = warmup + repeats
        with Progress(
            TextColumn("measuring {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            transient=True,
        ) as progress:
            task = progress.add_task(f"{model} batch {sizes[0]}", total=len(sizes) * per_size)
            index = {b: i for i, b in enumerate(sizes)}

            def step(batch_size: int, done: int) -> None:
                progress.update(
                    task,
                    completed=index[batch_size] * per_size + done,
                    description=f"{model} batch {batch_size}",
                )

            measured = measure_curve(url, model, sizes, warmup=warmup, repeats=repeats, on_step=step)
        curve = measured.curve
        spreads = {b: measured.spread(b) for b in sizes}
    if out_file is not None:
        write_curve(curve, out_file)
    if json_output:
        print_json({**curve.to_dict(), "spread": {str(b): round(v, 4) for b, v in spreads.items()}})
        return
    if out_file is None:
        sys.stdout.write(curve.to_yaml())
    else:
        out.print(f"curve of {model} written to {out_file}")
    for b, v in spreads.items():
        if v > 0.2:
            err.print(f"autobatch: warning: batch {b} varied by {v:.0%} between repeats; "
                      "the machine may be busy", markup=False, highlight=False)


@app.command()
def simulate(
    curve: Annotated[Path, typer.Option(help="Batch curve (YAML or CSV).")],
    profile: Annotated[
        Path | None, typer.Option(help="Profile YAML; or give --preferred/--max-batch-size/--delay-us.")
    ] = None,
    preferred: Annotated[str, typer.Option(help="Preferred batch sizes, comma-separated.")] = "",
    max_batch_size: Annotated[int, typer.Option(help="Max batch size (without --profile).")] = 32,
    delay_us: Annotated[int, typer.Option(help="max_queue_delay_microseconds (without --profile).")] = 0,
    rate: Annotated[float | None, typer.Option(help="Poisson arrival rate, requests/s.")] = None,
    duration: Annotated[float, typer.Option(help="Seconds of arrivals at --rate.")] = 60.0,
    requests: Annotated[
        int | None, typer.Option(help="Instead of --duration: this many requests at --rate.")
    ] = None,
    bursty: Annotated[int, typer.Option(help="Bursts of this many requests at --rate (0: Poisson).")] = 0,
    schedule: Annotated[
        Path | None, typer.Option(help="The phase schedule of `autobatch load` (same YAML).")
    ] = None,
    sessions: Annotated[int | None, typer.Option(help="Sessions workload: this many streams.")] = None,
    fps: Annotated[float | None, typer.Option(help="Frames per second of each stream.")] = None,
    session_policy: Annotated[
        str, typer.Option(help="oldest-first or batch-waiting.")
    ] = "oldest-first",
    instances: Annotated[int | None, typer.Option(help="Model instances [profile's, or 1].")] = None,
    priority_mix: Annotated[
        str | None, typer.Option(help="Share of requests per priority level, e.g. 1:0.2,2:0.8.")
    ] = None,
    noise_cv: Annotated[float, typer.Option(help="Lognormal noise on each batch time (CV).")] = 0.0,
    batch_overhead_ms: Annotated[float, typer.Option(help="Instance time per batch beyond the curve.")] = 0.0,
    request_overhead_ms: Annotated[
        float, typer.Option(help="Instance time per request beyond the curve.")
    ] = 0.0,
    fixed_latency_ms: Annotated[
        float, typer.Option(help="Added to every latency (network, client); no instance time.")
    ] = 0.0,
    engine: Annotated[str, typer.Option(help="auto, triton, rules or general.")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of arrivals and noise.")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Simulate Triton's dynamic batcher on a batch curve: latency, throughput, batch sizes.

    Workloads: Poisson (--rate), bursts (--rate --bursty 8), the phase schedule
    of `autobatch load` (--schedule), or live sessions (--sessions --fps
    --session-policy) that keep only their latest frame.

    Example: autobatch simulate --curve curves/laptop-256x144-fp16.yaml
    --profile profiles/emulated_accelerator/aggressive.yaml --rate 300 --json

    Example: autobatch simulate --curve curves/laptop-512x288-fp16.yaml --sessions 4 --fps 30
    --session-policy batch-waiting
    """
    from autobatch.plan.curve import load_curve
    from autobatch.plan.sessions import simulate_sessions
    from autobatch.plan.simulator import ServiceModel, Workload
    from autobatch.plan.simulator import simulate as run_simulation
    from autobatch.plan_output import sessions_renderable, sim_renderable
    from autobatch.profiles import Profile, load_profile
    from autobatch.schedule import Phase, Schedule, load_schedule

    service = ServiceModel(
        load_curve(curve),
        batch_overhead_ms=batch_overhead_ms,
        request_overhead_ms=request_overhead_ms,
        fixed_latency_ms=fixed_latency_ms,
        noise_cv=noise_cv,
    )
    given = [v for v in (rate, schedule, sessions) if v is not None]
    if len(given) != 1:
        raise ConfigError("give one workload: --rate R, --schedule FILE, or --sessions K --fps F")
    if sessions is not None:
        if fps is None:
            raise ConfigError("--sessions needs --fps")
        result = simulate_sessions(
            service, sessions, fps, policy=session_policy, duration_s=duration,
            max_batch_size=max_batch_size, seed=seed,
        )
        if json_output:
            print_json(result.to_dict())
        else:
            out.print(sessions_renderable(result))
        return
    if profile is not None:
        prof = load_profile(profile)
    else:
        prof = Profile(
            name="cli",
            max_batch_size=max_batch_size,
            preferred_batch_size=_int_list("--preferred", preferred) if preferred else (),
            max_queue_delay_us=delay_us,
            source="command line",
        )
    mix = _priority_mix(priority_mix)
    if schedule is not None:
        work = Workload.from_schedule(load_schedule(schedule), seed, priority_mix=mix)
    else:
        assert rate is not None
        if not rate > 0:
            raise ConfigError(f"--rate = {rate:g}: must be > 0 requests/s")
        if requests is not None:
            if requests < 1:
                raise ConfigError(f"--requests = {requests}: must be >= 1")
            duration = requests / rate
        if bursty:
            if bursty < 1:
                raise ConfigError(f"--bursty = {bursty}: must be a burst size >= 1")
            sched = Schedule((Phase("bursty", rate, duration, "bursty", bursty),))
        else:
            sched = Schedule.constant(rate, duration)
        work = Workload.from_schedule(sched, seed, priority_mix=mix)
    result = run_simulation(prof, service, work, instances=instances, seed=seed, engine=engine)
    if json_output:
        print_json({"profile": prof.to_dict(), "workload": work.label, **result.to_dict()})
    else:
        out.print(sim_renderable(result, f"{prof.summary()} on {service.curve.name}, {work.label}"))


@app.command()
def plan(
    curve: Annotated[Path, typer.Option(help="Batch curve (YAML or CSV).")],
    slo_p99_ms: Annotated[float, typer.Option(help="The latency SLO, p99, in ms.")],
    network_ms: Annotated[float, typer.Option(help="Network and client overhead per request, ms.")],
    rate: Annotated[float | None, typer.Option(help="The load to plan for: Poisson requests/s.")] = None,
    sessions: Annotated[int | None, typer.Option(help="Or: this many streams ...")] = None,
    fps: Annotated[float | None, typer.Option(help="... at this many frames per second.")] = None,
    max_batch_size: Annotated[int, typer.Option(help="The model's max_batch_size.")] = 32,
    margin: Annotated[float, typer.Option(help="Share of the budget kept back (0..1).")] = 0.4,
    instances: Annotated[int, typer.Option(help="Model instances.")] = 1,
    model: Annotated[str | None, typer.Option(help="Model name written into the profiles.")] = None,
    allow_extrapolation: Annotated[
        bool, typer.Option(help="Let profiles use batch sizes past the measured points.")
    ] = False,
    batch_overhead_ms: Annotated[float, typer.Option(help="Instance time per batch beyond the curve.")] = 0.0,
    request_overhead_ms: Annotated[
        float, typer.Option(help="Instance time per request beyond the curve.")
    ] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the simulated arrivals.")] = 0,
    write_profiles: Annotated[
        Path | None, typer.Option(help="Write each candidate as DIR/<name>.yaml (sidecar format).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite existing profile files.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Draw latency against load per profile (PNG).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Plan batching for a model: the SLO budget, whether batching pays, candidate profiles.

    Predicted latencies come from the simulator of Triton's dynamic batcher and
    include --network-ms, as the SLO does.

    Example: autobatch plan --curve curves/laptop-256x144-fp16.yaml --slo-p99-ms 100
    --network-ms 10 --rate 200 --write-profiles profiles/mymodel --plot plan.png
    """
    from autobatch.plan.curve import load_curve
    from autobatch.plan.planner import make_plan
    from autobatch.plan_output import plan_renderable, plot_plan
    from autobatch.plan_output import write_profiles as write_profile_files

    result = make_plan(
        load_curve(curve),
        slo_p99_ms,
        network_ms,
        rate_rps=rate,
        sessions=sessions,
        fps=fps,
        max_batch_size=max_batch_size,
        margin_frac=margin,
        instances=instances,
        model=model,
        allow_extrapolation=allow_extrapolation,
        batch_overhead_ms=batch_overhead_ms,
        request_overhead_ms=request_overhead_ms,
        seed=seed,
    )
    written = write_profile_files(result, write_profiles, force=force) if write_profiles else []
    drawn = plot_plan(result, plot) if plot else None
    if json_output:
        print_json({**result.to_dict(), "written": [str(p) for p in written],
                    "plot": None if drawn is None else str(drawn)})
        return
    out.print(plan_renderable(result))
    for path in written:
        out.print(f"wrote {path}")
    if drawn is not None:
        out.print(f"plotted {drawn}")


# -- the sidecar ------------------------------------------------------------------------------


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="Sidecar YAML (see examples/sidecar.yaml).")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Decide and log, but change nothing on the server.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the sidecar: watch the model, decide, swap profiles; SIGTERM stops it.

    Example: autobatch run --config examples/sidecar.yaml --dry-run
    """
    import asyncio
    import logging

    from autobatch.controller.app import run_sidecar
    from autobatch.controller.config import load_sidecar_config

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise ConfigError(f"--log-level = {log_level!r}: must be debug, info, warning or error")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per HTTP request to Triton is noise at info level.
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))
    cfg = load_sidecar_config(config)

    async def main_async() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def started(sidecar: Any) -> None:
            mode = "dry run" if dry_run else cfg.actuator.kind
            err.print(
                f"autobatch sidecar for {cfg.model} ({mode}) on {sidecar.url}: "
                f"/metrics /healthz /status POST /profile"
            )

        await run_sidecar(cfg, stop=stop, ready=started, dry_run=dry_run)
        err.print("sidecar stopped")

    asyncio.run(main_async())


@app.command()
def status(
    url: Annotated[str, typer.Option(help="The sidecar's address.")] = "http://127.0.0.1:9400",
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
) -> None:
    """Print a running sidecar's /status.

    Example: autobatch status --url http://127.0.0.1:9400 --json
    """
    import httpx
    from rich.table import Table

    from autobatch.signals.triton import normalize_url

    url = normalize_url(url, "--url")
    try:
        r = httpx.get(url + "/status", timeout=5.0)
        r.raise_for_status()
        data = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise AutobatchError(f"cannot read {url}/status: {exc}") from exc
    if as_json:
        print_json(data)
        return
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
    out.print(table)


@app.command()
def replay(
    config: Annotated[Path, typer.Option("--config", "-c", help="Sidecar YAML whose policy to replay.")],
    trace: Annotated[
        Path, typer.Option(help="JSON lines: `autobatch watch --json` output or a decision log.")
    ],
    initial: Annotated[
        str | None, typer.Option(help="Profile live at the start (default: the trace's, else the first).")
    ] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Show every tick, not only the changes.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per tick.")] = False,
) -> None:
    """Replay recorded windows through the sidecar's policy: what would it decide, and why.

    Example: autobatch replay --config examples/sidecar.yaml --trace out/decisions.jsonl
    """
    from rich.table import Table

    from autobatch.controller.config import load_sidecar_config
    from autobatch.plan.replay import parse_trace
    from autobatch.plan.replay import replay as run_replay

    cfg = load_sidecar_config(config)
    try:
        lines = trace.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"{trace}: cannot read: {exc}", source=str(trace)) from exc
    if initial is not None and initial not in [p.name for p in cfg.profiles]:
        raise ConfigError(f"--initial = {initial!r}: not in the ladder of {config}")
    steps = run_replay(
        parse_trace(lines, str(trace)), cfg.policy, initial=initial, history_windows=cfg.history_windows
    )
    if as_json:
        for st in steps:
            print_json({"now_s": st.tick.now_s, "decision": st.decision.to_dict(),
                        "active_after": st.active_after, "agrees_with_recording": st.agrees})
        return
    t0 = steps[0].tick.now_s
    table = Table(title=f"replay of {trace} through {config}")
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
    out.print(table)
    switches = [st for st in steps if st.decision.switch]
    by_reason: dict[str, int] = {}
    for st in switches:
        by_reason[st.decision.reason.value] = by_reason.get(st.decision.reason.value, 0) + 1
    out.print(f"{len(steps)} ticks, {len(switches)} switches "
              f"({', '.join(f'{k} {v}' for k, v in by_reason.items()) or 'none'}); "
              f"final profile {steps[-1].active_after}")
    recorded = [st.agrees for st in steps if st.agrees is not None]
    if recorded:
        out.print(f"agrees with the recorded decisions on {sum(recorded)}/{len(recorded)} ticks")


@app.command()
def demo(
    schedule: Annotated[
        Path | None, typer.Option(help="Load schedule (default: examples/schedules/step.yaml).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="Sidecar config (default: examples/sidecar.yaml).")
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="Write the timeline as a PNG here.")] = None,
    keep: Annotated[
        Path | None, typer.Option(help="Keep the decision log in this folder.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the per-phase summary as JSON.")] = False,
) -> None:
    """Close the loop: embedded Triton + dense_mlp, the sidecar, a step load (~2 min).

    Example: autobatch demo --plot timeline.png
    """
    from autobatch.demo import run_demo

    result = run_demo(
        schedule_path=schedule, config_path=config, plot=plot, workdir=keep,
        console=err if as_json else out,
    )
    if as_json:
        print_json(result.to_dict())


if __name__ == "__main__":  # pragma: no cover
    main()
