"""Planner commands: plan, simulate, replay, render. Dry runs: nothing here touches a server."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autobatch.cli.app import app, out, print_json, warn
from autobatch.cli.lab import int_list
from autobatch.cli.options import (
    BatchOverheadOption,
    CotenantsOption,
    CurveOption,
    QuantumOption,
    RequestOverheadOption,
    SessionPolicyOption,
    SharingOption,
    SwitchOption,
    TraceModelOption,
)
from autobatch.config import check_seed
from autobatch.errors import ConfigError

if TYPE_CHECKING:
    from autobatch.plan.planner import Plan
    from autobatch.plan.simulator import ServiceModel, SharedDevice, SimResult, Workload
    from autobatch.profiles import Profile


def _priority_mix(text: str | None) -> dict[int, float] | None:
    if not text:
        return None
    mix: dict[int, float] = {}
    for part in text.split(","):
        level, _, share = part.partition(":")
        try:
            lv, sh = int(level), float(share)
        except ValueError:
            raise ConfigError(
                f"--priority-mix = {text!r}: must look like 1:0.2,2:0.8 (level:share, ...)"
            ) from None
        if lv in mix:
            raise ConfigError(f"--priority-mix = {text!r}: level {lv} is given twice")
        mix[lv] = sh
    from autobatch.plan.simulator.workload import check_priority_share

    for lv, sh in mix.items():
        check_priority_share(lv, sh)  # the library's check (plan's lanes use it too)
    return mix


def _at_least_0(option: str, value: float, unit: str) -> float:
    """Checked as the user gave it, before any conversion renames or rescales it."""
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{option} = {value:g}: must be >= 0 ({unit})")
    return value


@app.command()
def simulate(
    curve: CurveOption,
    profile: Annotated[
        Path | None, typer.Option(help="Profile YAML; or give --preferred/--max-batch-size/--delay-us.")
    ] = None,
    preferred: Annotated[str, typer.Option(help="Preferred batch sizes, comma-separated.")] = "",
    max_batch_size: Annotated[
        int | None, typer.Option(help="Max batch size (without --profile) [32].")
    ] = None,
    delay_us: Annotated[
        int | None, typer.Option(help="max_queue_delay_microseconds (without --profile) [0].")
    ] = None,
    rate: Annotated[float | None, typer.Option(help="Poisson arrival rate, requests/s.")] = None,
    duration: Annotated[
        float | None, typer.Option(help="Seconds of arrivals at --rate, or of --sessions [60].")
    ] = None,
    requests: Annotated[
        int | None, typer.Option(help="Instead of --duration: this many requests at --rate.")
    ] = None,
    bursty: Annotated[int, typer.Option(help="Bursts of this many requests at --rate (0: Poisson).")] = 0,
    schedule: Annotated[
        Path | None, typer.Option(help="The phase schedule of `autobatch load` (same YAML).")
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(help="Arrivals to replay: CSV or JSON lines (time_s, rows, priority), "
                          "or Triton's own trace file (.json)."),
    ] = None,
    trace_model: TraceModelOption = None,
    rows: Annotated[
        str | None,
        typer.Option(help="Rows per request with --rate/--schedule: 4, or shares like 1:0.5,4:0.5."),
    ] = None,
    burst_gap_us: Annotated[
        float, typer.Option(help="Requests that share a timestamp reach Triton this far apart "
                                 "(one client sends them in turn); 0: queued at one instant.")
    ] = 60.0,
    sessions: Annotated[int | None, typer.Option(help="Sessions workload: this many streams.")] = None,
    fps: Annotated[float | None, typer.Option(help="Frames per second of each stream.")] = None,
    session_policy: SessionPolicyOption = "oldest-first",
    instances: Annotated[int | None, typer.Option(help="Model instances [profile's, or 1].")] = None,
    priority_mix: Annotated[
        str | None, typer.Option(help="Share of requests per priority level, e.g. 1:0.2,2:0.8.")
    ] = None,
    noise_cv: Annotated[float, typer.Option(help="Lognormal noise on each batch time (CV).")] = 0.0,
    batch_overhead_ms: BatchOverheadOption = 0.0,
    request_overhead_ms: RequestOverheadOption = 0.0,
    fixed_latency_ms: Annotated[
        float, typer.Option(help="Added to every latency (network, client); no instance time.")
    ] = 0.0,
    engine: Annotated[str, typer.Option(help="auto, triton, rules or general.")] = "auto",
    cotenants: CotenantsOption = None,
    sharing: SharingOption = None,
    quantum_ms: QuantumOption = None,
    switch_ms: SwitchOption = None,
    seed: Annotated[int, typer.Option(help="Seed of arrivals and noise.")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Simulate Triton's dynamic batcher on a batch curve: latency, throughput, batch sizes.

    Workloads: Poisson (--rate), bursts (--rate --bursty 8), the phase schedule of `autobatch load`
    (--schedule), recorded arrivals (--trace: a CSV or JSON-lines trace, one `autobatch load
    --record-trace` wrote, or Triton's own trace file), or live sessions (--sessions --fps
    --session-policy) that keep only their latest frame; --rows: multi-row requests.

    Example: autobatch simulate --curve curves/laptop-256x144-fp16.yaml
    --profile profiles/emulated_accelerator/aggressive.yaml --rate 300 --json

    Example: autobatch simulate --curve curves/laptop-512x288-fp16.yaml --sessions 4 --fps 30
    --session-policy batch-waiting

    Example: autobatch simulate --curve C --profile P --trace production.csv --json

    A shared device (--cotenants FILE, --sharing, --quantum-ms; or a --schedule whose phases give
    `cotenants: N`): the instances and the co-tenant jobs share one device, and the result adds
    the device's busy share by tenant and each co-tenant's latency and throughput.

    Example: autobatch simulate --curve curves/t4-resnet50-fp16.yaml --rate 300
    --cotenants examples/cotenants/t4-two-jobs.yaml --instances 2 --sharing timeslice --quantum-ms 2
    """
    check_seed(seed, "--seed")
    _at_least_0("--burst-gap-us", burst_gap_us, "microseconds")
    _refuse_ignored_options(duration=duration, schedule=schedule, trace=trace, profile=profile,
                            preferred=preferred, max_batch_size=max_batch_size, delay_us=delay_us,
                            fps=fps, sessions=sessions, trace_model=trace_model,
                            shared=cotenants is not None or sharing is not None)
    service = _service_model(curve, batch_overhead_ms, request_overhead_ms, fixed_latency_ms, noise_cv)
    _one_workload(rate, schedule, trace, sessions)
    duration = 60.0 if duration is None else duration
    max_batch_size = 32 if max_batch_size is None else max_batch_size
    if sessions is not None:
        _simulate_sessions(service, sessions, fps, session_policy, duration, max_batch_size, seed,
                           json_output)
        return
    prof = _options_profile(profile, preferred, max_batch_size, delay_us)
    work = _requests_workload(rate, duration if rate is not None else None, schedule, requests, bursty,
                              trace, trace_model, rows, priority_mix, burst_gap_us, seed)
    result = _simulate_on_device(prof, service, work, instances=instances, seed=seed, engine=engine,
                                 device=_SharedOptions(cotenants, schedule, sharing, quantum_ms, switch_ms))
    _print_simulation(prof, service, work, result, json_output)


@dataclass(frozen=True)
class _SharedOptions:
    """The shared-device options of simulate and plan, as given."""

    cotenants: Path | None
    schedule: Path | None
    sharing: str | None
    quantum_ms: float | None
    switch_ms: float | None

    def load(self, *, placed: bool = False) -> SharedDevice | None:
        from autobatch.plan.simulator import load_shared_device

        return load_shared_device(cotenants=self.cotenants, schedule=self.schedule,
                                  policy=self.sharing, quantum_ms=self.quantum_ms,
                                  switch_ms=self.switch_ms, placed=placed)


def _requests_workload(rate: float | None, duration_s: float | None, schedule: Path | None,
                       requests: int | None, bursty: int, trace: Path | None,
                       trace_model: str | None, rows: str | None, priority_mix: str | None,
                       burst_gap_us: float, seed: int) -> Workload:
    """The arrivals of --rate, --schedule or --trace, with their rows and priorities."""
    from autobatch.plan.simulator import build_workload
    from autobatch.traces import parse_rows

    return build_workload(
        rate_rps=rate, duration_s=duration_s, schedule=schedule,
        requests=requests, burst_size=bursty, trace=trace, trace_model=trace_model,
        rows=parse_rows(rows) if rows is not None else None,
        priority_mix=_priority_mix(priority_mix), burst_gap_s=burst_gap_us / 1e6, seed=seed,
    )


def _simulate_on_device(prof: Profile, service: ServiceModel, work: Workload, *,
                        instances: int | None, seed: int, engine: str,
                        device: _SharedOptions) -> SimResult:
    """``work`` under ``prof``; on a shared device when the options give one."""
    from autobatch.plan.simulator import simulate as run_simulation

    shared = device.load(placed=True)
    return run_simulation(prof, service, work, instances=instances, seed=seed, engine=engine,
                          sharing=None if shared is None else shared.sharing,
                          cotenants=() if shared is None else shared.cotenants)


def _refuse_ignored_options(
    *, duration: float | None, schedule: Path | None, trace: Path | None, profile: Path | None,
    preferred: str, max_batch_size: int | None, delay_us: int | None, fps: float | None,
    sessions: int | None, trace_model: str | None, shared: bool = False,
) -> None:
    """Options the chosen workload or profile would silently ignore: one line naming both."""
    for option, on, other, given, why in (
        ("--duration", duration is not None, "--schedule", schedule is not None,
         "a schedule file sets its own durations"),
        ("--duration", duration is not None, "--trace", trace is not None,
         "a trace brings its own arrival times"),
        ("--preferred", bool(preferred), "--profile", profile is not None, "the profile file sets it"),
        ("--max-batch-size", max_batch_size is not None, "--profile", profile is not None,
         "the profile file sets it"),
        ("--delay-us", delay_us is not None, "--profile", profile is not None, "the profile file sets it"),
        ("--sessions", sessions is not None, "--cotenants/--sharing", shared,
         "sessions are simulated with the device to the model"),
    ):
        if on and given:
            raise ConfigError(f"{option} does not go with {other}: {why}")
    for option, on, needs, given in (
        ("--fps", fps is not None, "--sessions", sessions is not None),
        ("--trace-model", trace_model is not None, "--trace", trace is not None),
    ):
        if on and not given:
            raise ConfigError(f"{option} goes only with {needs}: give {needs} or leave {option} out")


def _one_workload(rate: float | None, schedule: Path | None, trace: Path | None,
                  sessions: int | None) -> None:
    if len([v for v in (rate, schedule, trace, sessions) if v is not None]) != 1:
        raise ConfigError(
            "give one workload: --rate R, --schedule FILE, --trace FILE, or --sessions K --fps F"
        )


def _service_model(curve: Path, batch_overhead_ms: float, request_overhead_ms: float,
                   fixed_latency_ms: float, noise_cv: float) -> ServiceModel:
    from autobatch.curve import load_curve
    from autobatch.plan.simulator import ServiceModel

    return ServiceModel(
        load_curve(curve),
        batch_overhead_ms=batch_overhead_ms,
        request_overhead_ms=request_overhead_ms,
        fixed_latency_ms=fixed_latency_ms,
        noise_cv=noise_cv,
    )


def _simulate_sessions(service: ServiceModel, sessions: int, fps: float | None, policy: str,
                       duration_s: float, max_batch_size: int, seed: int, json_output: bool) -> None:
    from autobatch.cli.views import sessions_renderable
    from autobatch.plan.sessions import simulate_sessions

    if fps is None:
        raise ConfigError("--sessions needs --fps")
    result = simulate_sessions(
        service, sessions, fps, policy=policy, duration_s=duration_s,
        max_batch_size=max_batch_size, seed=seed,
    )
    if json_output:
        print_json(result.to_dict())
    else:
        out.print(sessions_renderable(result))


def _options_profile(path: Path | None, preferred: str, max_batch_size: int,
                     delay_us: int | None) -> Profile:
    """The profile file, or one built from --preferred, --max-batch-size and --delay-us."""
    from autobatch.profiles import Profile, load_profile

    if path is not None:
        return load_profile(path)
    return Profile(
        name="cli",
        max_batch_size=max_batch_size,
        preferred_batch_size=int_list("--preferred", preferred) if preferred else (),
        max_queue_delay_us=0 if delay_us is None else delay_us,
        source="command line",
    )


def _print_simulation(prof: Profile, service: ServiceModel, work: Workload, result: SimResult,
                      json_output: bool) -> None:
    from autobatch.cli.views import sim_renderable

    if json_output:
        print_json({"profile": prof.to_dict(), "workload": work.label, **result.to_dict()})
    else:
        out.print(sim_renderable(result, f"{prof.summary()} on {service.curve.name}, {work.label}"))


SloP95Option = Annotated[
    float | None, typer.Option(help="Or: the latency SLO at p95, in ms (the sidecar's slo.p95_ms).")]


@app.command()
def plan(
    curve: CurveOption,
    network_ms: Annotated[float, typer.Option(help="Network and client overhead per request, ms.")],
    slo_p99_ms: Annotated[float | None, typer.Option(help="The latency SLO, p99, in ms.")] = None,
    slo_p95_ms: SloP95Option = None,
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
    batch_overhead_ms: BatchOverheadOption = 0.0,
    request_overhead_ms: RequestOverheadOption = 0.0,
    seed: Annotated[int, typer.Option(help="Seed of the simulated arrivals.")] = 0,
    write_profiles: Annotated[
        Path | None, typer.Option(help="Write each candidate as DIR/<name>.yaml (sidecar format).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite existing profile files.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Draw latency against load per profile (PNG).")] = None,
    schedule: Annotated[
        Path | None,
        typer.Option(help="Does switching pay over this schedule (`autobatch load` YAML)? "
                          "[a step from a tenth of the load to the load and back]"),
    ] = None,
    ladder: Annotated[
        Path | None,
        typer.Option(help="Compare these profiles (a profiles/<model> folder) instead of the candidates."),
    ] = None,
    reaction_s: Annotated[
        float, typer.Option(help="Seconds into a phase before the switching oracle's profile is in force.")
    ] = 2.0,
    priority_mix: Annotated[
        str | None,
        typer.Option(help="Urgent and batchable shares, e.g. 1:0.1,2:0.9: adds a two-lane profile."),
    ] = None,
    cotenants: CotenantsOption = None,
    sharing: SharingOption = None,
    quantum_ms: QuantumOption = None,
    switch_ms: SwitchOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Plan batching for a model: the SLO budget, whether batching pays, candidate profiles,
    and whether switching between them pays over a schedule.

    With --priority-mix (level 1 urgent, level 2 batchable): a `lanes` profile
    with two priority levels on the candidate that waits, and each lane's latency
    with and without it.

    Predicted latencies come from the simulator of Triton's dynamic batcher and
    include --network-ms, as the SLO does. The SLO is --slo-p99-ms or --slo-p95-ms: candidates,
    the sweep and "does switching pay?" judge at its percentile. Triton's default (no preferred sizes,
    no wait) is always a candidate, and the baseline of "does switching pay?".

    Example: autobatch plan --curve curves/laptop-256x144-fp16.yaml --slo-p99-ms 100
    --network-ms 10 --rate 200 --write-profiles profiles/mymodel --plot plan.png

    Example: autobatch plan --curve curves/dense_mlp-cpu.yaml --slo-p99-ms 60 --network-ms 2
    --rate 350 --instances 2 --schedule examples/schedules/step.yaml --ladder profiles/dense_mlp

    Example: autobatch plan --curve curves/laptop-256x144-fp16.yaml --slo-p99-ms 100
    --network-ms 2 --rate 600 --max-batch-size 8 --priority-mix 1:0.1,2:0.9 --write-profiles out/p

    On a shared device (--cotenants FILE, --sharing, --quantum-ms, or a --schedule whose
    phases give `cotenants: N`) every candidate runs with the co-tenants and without
    them: does batching pay with them on the device (the best profile alone may break
    the SLO with them; the default may no longer keep up), and does switching pay when
    they come and go.

    Example: autobatch plan --curve curves/t4-resnet50-fp16.yaml --slo-p95-ms 60 --network-ms 2
    --rate 150 --schedule examples/schedules/cotenants-step.yaml
    """
    from autobatch.cli.views import plot_file, plot_plan
    from autobatch.curve import load_curve
    from autobatch.plan.planner import make_plan
    from autobatch.profiles import load_profiles
    from autobatch.profiles import write_profiles as write_profile_files
    from autobatch.schedule import load_schedule

    check_seed(seed, "--seed")
    _at_least_0("--network-ms", network_ms, "milliseconds")
    if plot is not None:
        plot_file(plot, field="--plot")  # before the planning runs and any profile is written
    device = _SharedOptions(cotenants, schedule, sharing, quantum_ms, switch_ms).load()
    result = make_plan(
        load_curve(curve), network_ms=network_ms, **_slo(slo_p95_ms, slo_p99_ms), rate_rps=rate,
        sessions=sessions, fps=fps, max_batch_size=max_batch_size, margin_frac=margin,
        instances=instances, model=model, allow_extrapolation=allow_extrapolation,
        batch_overhead_ms=batch_overhead_ms, request_overhead_ms=request_overhead_ms, seed=seed,
        schedule=load_schedule(schedule) if schedule is not None else None,
        schedule_label=str(schedule) if schedule is not None else None,
        ladder=list(load_profiles(ladder).values()) if ladder is not None else None,
        reaction_s=reaction_s, priority_mix=_priority_mix(priority_mix), device=device,
    )
    written = (write_profile_files(result.profile_documents(), write_profiles, force=force)
               if write_profiles else [])
    _print_plan(result, written, plot_plan(result, plot) if plot else None, json_output)


def _slo(p95_ms: float | None, p99_ms: float | None) -> dict[str, Any]:
    """The SLO given, as make_plan takes it: exactly one of --slo-p95-ms and --slo-p99-ms."""
    if (p95_ms is None) == (p99_ms is None):
        raise ConfigError("--slo-p95-ms / --slo-p99-ms: give exactly one (the SLO's latency at p95 or p99)")
    return {"slo_ms": p95_ms, "slo_percentile": 95} if p95_ms is not None else {"slo_ms": p99_ms}


def _print_plan(result: Plan, written: list[Path], drawn: Path | None, json_output: bool) -> None:
    from autobatch.cli.views import plan_renderable

    if json_output:
        print_json({**result.to_dict(), "written": [str(p) for p in written],
                    "plot": None if drawn is None else str(drawn)})
        return
    out.print(plan_renderable(result))
    for path in written:
        out.print(f"wrote {path}")
    if drawn is not None:
        out.print(f"plotted {drawn}")


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
    from autobatch.cli.views import replay_summary, replay_table
    from autobatch.config import read_text
    from autobatch.controller.config import load_sidecar_config
    from autobatch.plan.replay import parse_trace
    from autobatch.plan.replay import replay as run_replay

    cfg = load_sidecar_config(config)
    for line in cfg.deprecations:
        warn(line)
    lines = read_text(trace, what="a JSON-lines trace").splitlines()
    steps = run_replay(
        parse_trace(lines, str(trace)), cfg.policy, initial=initial, history_windows=cfg.history_windows
    )
    if as_json:
        for st in steps:
            print_json({"now_s": st.tick.now_s, "decision": st.decision.to_dict(),
                        "active_after": st.active_after, "agrees_with_recording": st.agrees})
        return
    out.print(replay_table(steps, f"replay of {trace} through {config}", show_all=show_all))
    for line in replay_summary(steps):
        out.print(line)


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
    from autobatch.lab.serve import default_repository
    from autobatch.profiles import render_profile

    text = render_profile(profile, base=base, repository=repository or default_repository(),
                          override=override)
    sys.stdout.write(text)
