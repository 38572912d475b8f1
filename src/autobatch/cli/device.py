"""The emulated GPU: ``autobatch device`` runs one; ``autobatch cotenants run`` loads it."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from autobatch.cli.app import app, err, out, print_json, warn
from autobatch.errors import ConfigError

cotenants_app = typer.Typer(help="Co-tenant jobs on an emulated device.", no_args_is_help=True)
app.add_typer(cotenants_app, name="cotenants")


@app.command()
def device(
    config: Annotated[Path | None, typer.Option(
        help="Device YAML (name, listen, metrics, util_period_ms, sharing); options override it.")] = None,
    listen: Annotated[str | None, typer.Option(
        help="HOST:PORT for jobs [127.0.0.1:9410; port 0: a free one].")] = None,
    metrics: Annotated[str | None, typer.Option(
        help="HOST:PORT for /metrics, /status, /healthz [127.0.0.1:9411].")] = None,
    sharing: Annotated[str | None, typer.Option(
        help="exclusive, timeslice or concurrent [timeslice].")] = None,
    quantum_ms: Annotated[float | None, typer.Option(help="timeslice: each context's turn, ms [2].")] = None,
    switch_ms: Annotated[float | None, typer.Option(help="timeslice: time lost per switch, ms [0].")] = None,
    throughput: Annotated[str | None, typer.Option(
        help="concurrent: total speed by active contexts, e.g. 1:1,2:1.5,4:2.")] = None,
    util_period_ms: Annotated[float | None, typer.Option(
        help="DCGM_FI_DEV_GPU_UTIL's period, ms [1000].")] = None,
    name: Annotated[str | None, typer.Option(help="The device's name [gpu0].")] = None,
    priority: Annotated[str | None, typer.Option(
        help="realtime, high or normal: its CPU priority [realtime, where allowed].")] = None,
) -> None:
    """Run one emulated GPU that many clients share (model instances, other models, co-tenants).

    Clients submit jobs of so many ms of device work over one connection per context
    and block until they complete; the device divides its time by the sharing policy
    (docs/shared-gpu.md). /metrics carries dcgm-exporter's DCGM_FI_DEV_GPU_UTIL and the
    busy time by context. Ctrl-C or SIGTERM stops it.

    Example: autobatch device --listen 127.0.0.1:9410 --sharing timeslice --quantum-ms 2
    """
    from autobatch.device.server import DeviceServer, raise_priority
    from autobatch.device.settings import device_settings

    settings = device_settings(config, name=name, listen=listen, metrics=metrics,
                               util_period_ms=util_period_ms, priority=priority, policy=sharing,
                               quantum_ms=quantum_ms, switch_ms=switch_ms, throughput=throughput)
    got = raise_priority(settings.priority)  # before any thread starts: they inherit it
    server = DeviceServer(settings, priority=got).start()
    previous = signal.signal(signal.SIGTERM, lambda *_: server.request_stop())
    try:
        policy = ", ".join(f"{k} {v}" for k, v in settings.sharing.to_dict().items())
        out.print(f"device {settings.name} ready ({policy}; priority {got})", highlight=False)
        out.print(f"  jobs     {server.job_address}", highlight=False)
        out.print(f"  metrics  {server.metrics_url}", highlight=False)
        out.print("Ctrl-C or SIGTERM stops it.", highlight=False)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        err.print("stopping the device ...")
        server.stop()
        signal.signal(signal.SIGTERM, previous)


@cotenants_app.command("run")
def cotenants_run(
    file: Annotated[Path, typer.Argument(help="A co-tenant file, or a schedule file with cotenants.")],
    device_address: Annotated[str, typer.Option("--device", help="The device's HOST:PORT.")],
    duration: Annotated[float | None, typer.Option(help="Seconds to run [a schedule's length; "
                                                        "else required].")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the open-loop jobs' arrivals.")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Run co-tenant jobs against an emulated device and report each one's latency and throughput.

    A schedule file's phases with `cotenants: N` say when each job runs; a co-tenant
    file's start_s/stop_s do.

    Example: autobatch cotenants run examples/cotenants/two-trainers.yaml --device 127.0.0.1:9410
    --duration 30
    """
    from autobatch.cli.views import cotenants_table
    from autobatch.device.runner import load_jobs, run_cotenants

    jobs, length = load_jobs(file)
    if duration is None:
        if length is None:
            raise ConfigError(f"duration = None: {file} is a co-tenant file, not a schedule: give "
                              "the seconds to run", field="duration")
        duration = length
    if not (math.isfinite(duration) and duration > 0):
        raise ConfigError(f"duration = {duration:g}: must be a number of seconds > 0", field="duration")
    console: Any = err if json_output else out
    with console.status(f"running {len(jobs)} co-tenant job(s) on {device_address} for {duration:g} s ..."):
        report = run_cotenants(jobs, device_address, duration_s=duration, seed=seed)
    if json_output:
        print_json(report.to_dict())
    else:
        out.print(cotenants_table(report))
    for r in report.results:
        if r.failed:
            warn(f"{r.name}: {r.failed} batch(es) failed; first: {r.first_error}")
