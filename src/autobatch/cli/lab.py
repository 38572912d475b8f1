"""Lab commands: start the embedded Triton, measure a model's batch curve, run the demo."""

from __future__ import annotations

import math
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from autobatch.cli.app import app, err, out, print_json, restricted_api, warn
from autobatch.cli.options import RestrictedHeaderOption, RestrictedKeyFileOption
from autobatch.errors import AutobatchError, ConfigError, ServeError

SERVE_FLAGS = {"repository": "--repository", "host": "--host", "http_port": "--http-port",
               "grpc_port": "--grpc-port", "metrics_port": "--metrics-port"}
"""TritonServer's settings that `serve` takes as flags, for its error messages."""


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


def int_list(flag: str, text: str) -> tuple[int, ...]:
    """``1,2,4`` as integers >= 1; a bad list names the option."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"{flag} = {text!r}: must be integers separated by commas") from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(f"{flag} = {text!r}: must be integers >= 1 separated by commas")
    return values


@app.command()
def serve(
    repository: Annotated[
        Path | None, typer.Option(help="Model repository (default: the project's model_repository/).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address every endpoint binds.")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(help="HTTP/REST port (0: a free one).")] = 8000,
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0: a free one).")] = 8001,
    metrics_port: Annotated[int, typer.Option(help="Prometheus /metrics port (0: a free one).")] = 8002,
    model: Annotated[
        list[str] | None, typer.Option("--model", help="Load only this model (repeatable).")
    ] = None,
    emulate_curve: Annotated[
        Path | None,
        typer.Option(help="Batch curve file (curves/ format) for emulated_accelerator."),
    ] = None,
    device: Annotated[
        bool, typer.Option("--device", help="Start an emulated GPU (autobatch device) and run "
                                            "emulated_accelerator's batches on it (needs --emulate-curve).")
    ] = False,
    device_config: Annotated[
        Path | None, typer.Option(help="With --device: its YAML (sharing, ports) [timeslice, 2 ms; "
                                       "127.0.0.1:9410, metrics :9411].")
    ] = None,
    device_address: Annotated[
        str | None, typer.Option(help="Instead of --device: HOST:PORT of a device already running.")
    ] = None,
) -> None:
    """Start the embedded Triton (from nvidia-pytriton) with every model loaded.

    With --device (or --device-address) the emulated model's instances are clients of
    one emulated GPU, which other models and co-tenant jobs can share (docs/shared-gpu.md);
    its /metrics is what a sidecar reads as dcgm-exporter.

    Example: autobatch serve --emulate-curve curves/laptop-512x288-fp16.yaml

    Example: autobatch serve --emulate-curve curves/server-512x288-fp16.yaml --device
    """
    from autobatch.curve import load_curve
    from autobatch.lab.serve import TritonServer, check_port

    for field, port in (("http_port", http_port), ("grpc_port", grpc_port), ("metrics_port", metrics_port)):
        check_port(port, SERVE_FLAGS[field])
    curve = load_curve(emulate_curve) if emulate_curve else None
    gpu, address = _serve_device(device, device_config, device_address, curve is not None)
    server = TritonServer(
        repository,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        models=model,
        emulate_curve=curve,
        emulate_device=address,
    )
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        if gpu is not None:
            with err.status("starting the emulated device ..."):
                gpu.start()
        with err.status("starting tritonserver ..."):
            try:
                server.start()
            except (ConfigError, ServeError) as exc:
                # The library names TritonServer's settings; here they are flags.
                if exc.field in SERVE_FLAGS:
                    raise type(exc)(f"{exc} (set with {SERVE_FLAGS[exc.field]})") from exc
                raise
        out.print(f"Triton ready (pid {server.pid}), models from {server.repository}")
        out.print(f"  HTTP     {server.urls.http}")
        out.print(f"  gRPC     {server.urls.grpc}")
        out.print(f"  metrics  {server.urls.metrics}")
        out.print(f"  log      {server.log_path}")
        if address is not None:
            out.print(f"  device   {address}" + (f" (metrics {gpu.metrics_url})" if gpu else ""))
        out.print("Ctrl-C or SIGTERM stops it.")
        while server.running() and (gpu is None or gpu.running()):
            time.sleep(0.5)
        if gpu is not None:
            gpu.check_alive("while serving")
        server.check_alive("while serving")  # raises, naming the exit code or signal
        raise AutobatchError(f"tritonserver exited unexpectedly: {server.log_tail()}")
    except (_Stop, KeyboardInterrupt):
        err.print("stopping tritonserver ...")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut this short
        try:
            server.close()
        finally:
            if gpu is not None:
                gpu.close()
            signal.signal(signal.SIGTERM, previous)


def _serve_device(start: bool, config: Path | None, address: str | None,
                  has_curve: bool) -> tuple[Any, str | None]:
    """``serve``'s device options: the device to start (or None) and the address the emulated
    model is pointed at. Everything is checked before anything starts."""
    if not (start or config or address):
        return None, None
    if address is not None and (start or config):
        raise ConfigError(f"--device-address = {address!r}: give it or --device, not both")
    if not has_curve:
        raise ConfigError("--device: the emulated model needs its curve: give --emulate-curve FILE")
    if address is not None:
        from autobatch.device.client import check_device

        check_device(address)
        return None, address
    from autobatch.device.settings import DeviceSettings, load_device_config
    from autobatch.lab.gpu import DeviceProcess

    gpu = DeviceProcess(load_device_config(config) if config else DeviceSettings())
    return gpu, gpu.address


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
    restricted_api_header: RestrictedHeaderOption = None,
    restricted_api_key_file: RestrictedKeyFileOption = None,
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
    from autobatch.cli.views import MeasureProgress
    from autobatch.curve import load_curve
    from autobatch.lab.fidelity import measure_overheads
    from autobatch.lab.measure import live_curve, measure_curve, write_curve
    from autobatch.lab.paths import check_output

    access = restricted_api(restricted_api_header, restricted_api_key_file)
    if out_file is not None:
        check_output(out_file, "out")  # now, not after the measuring
    if live_s is not None and not (live_s > 0 and math.isfinite(live_s)):
        raise ConfigError(f"live_s = {live_s:g}: must be a finite number > 0")
    if overheads_for is not None:
        with err.status(f"sending {rate:g} rps to {model} for {duration:g} s ..."):
            found = measure_overheads(grpc_url, url, model, load_curve(overheads_for),
                                      rate_rps=rate, duration_s=duration, restricted_api=access)
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
            curve = live_curve(url, model, live_s, restricted_api=access)
        if curve is None:
            raise AutobatchError(
                f"model {model!r} executed no batch size at least 3 times in {live_s:g} s: "
                "send traffic or measure a longer window"
            )
        spreads: dict[int, float] = {}
    else:
        sizes = int_list("--batch-sizes", batch_sizes)
        with MeasureProgress(err, model, sizes, runs_per_size=warmup + repeats) as progress:
            measured = measure_curve(url, model, sizes, warmup=warmup, repeats=repeats,
                                     on_step=progress.step, restricted_api=access)
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
            warn(f"batch {b} varied by {v:.0%} between repeats; the machine may be busy")


@app.command()
def demo(
    schedule: Annotated[
        Path | None, typer.Option(help="Load schedule with co-tenants "
                                       "(default: examples/schedules/demo.yaml).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="Sidecar config; its policy.curve is the emulated GPU's "
                                       "(default: examples/sidecar-t4.yaml).")
    ] = None,
    instances: Annotated[
        int | None, typer.Option(help="The model's instance count in every run (default: the profiles').")
    ] = None,
    lead_in: Annotated[
        float, typer.Option(help="Seconds every run spends at the first phase's rate first, unmeasured "
                                 "(the sidecar's p95 rules wait 60 s after its start).")
    ] = 60.0,
    plot: Annotated[
        Path, typer.Option(help="Write the runs over time here (.png if no suffix; a directory is refused): "
                                "p95 and the profile in force, and each GPU's busy by tenant.")
    ] = Path("out/demo.png"),
    keep: Annotated[
        Path | None, typer.Option(help="Keep the servers' logs and the decision log in this folder.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs and comparisons as JSON.")] = False,
) -> None:
    """The controller on a shared GPU against Triton's default and a static profile: the three at
    the same time, each on its own emulated GPU with the same co-tenants arriving mid-run, fed the
    same requests (~2 min with the lead-in); compared on the SLO, device time and what the
    co-tenants got.

    Example: autobatch demo --plot demo.png
    """
    from autobatch.cli.views import (
        DemoView,
        demo_table,
        demo_verdict_lines,
        plot_demo,
        plot_file,
        switches_table,
    )
    from autobatch.lab.demo import run_demo
    from autobatch.lab.paths import check_folder

    # Every flag is checked before a server starts; the run takes minutes.
    if instances is not None and instances < 1:
        raise ConfigError(f"instances = {instances}: must be an integer >= 1")
    console = err if as_json else out
    if not (math.isfinite(lead_in) and lead_in >= 0):
        raise ConfigError(f"lead_in = {lead_in:g}: must be a finite number >= 0 seconds")
    if keep is not None:
        check_folder(keep, "keep")
    plot = plot_file(plot)
    done = run_demo(schedule_path=schedule, config_path=config, workdir=keep,
                    observer=DemoView(console), instances=instances, lead_in_s=lead_in)
    console.print(switches_table(done))
    console.print(demo_table(done))
    for line in demo_verdict_lines(done):
        console.print(line)
    phases = [p for r in done.runs.values() for p in r["phases"]]
    failed = sum(sum(p["failures"].values()) for p in phases)
    console.print(f"{sum(p['requests'] for p in phases)} requests, {failed} failed; our processes used "
                  f"{done.cpu_cores.get('ours', 0):.2f} cores. "
                  f"Decision log: {done.decision_log or '(temporary)'}")
    console.print(f"the runs over time: {plot_demo(done, plot)}")
    if as_json:
        print_json(done.to_dict())
