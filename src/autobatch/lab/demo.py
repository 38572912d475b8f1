"""``autobatch demo``: the controller against Triton's default and a static profile, side by side.

It starts Triton with dense_mlp (two instances unless told otherwise) on free
loopback ports and drives the same short step load
(``examples/schedules/demo.yaml``: 30 -> 200 -> 30 req/s, 40 s) three times on it:

1. with the sidecar from ``examples/sidecar.yaml`` (pointed at that Triton),
   starting from the ladder's first rung; it runs first, on a fresh model, so
   it reads no latency of the other runs;
2. with Triton's default held (``triton-default``: no preferred sizes, no wait);
3. with the ladder's last rung held (the profile a user tuning for throughput
   would set and leave).

A live table shows the phase, the load, the latency the clients see and what
the controller decided. At the end, per phase and over the run: the share of
requests over the SLO, p95, and device time per request (Triton's own compute
times, :mod:`autobatch.lab.device`), and the controller against each of the two,
on latency and on device time. ``--plot`` draws the controller's timeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from autobatch.config import load_yaml
from autobatch.controller.config import SidecarConfig, sidecar_config_from_mapping
from autobatch.errors import ConfigError
from autobatch.lab.closed_loop import ClosedLoopResult, Sample, SidecarProcess, apply_static, run_closed_loop
from autobatch.lab.device import DeviceMeter
from autobatch.lab.paths import check_folder
from autobatch.lab.serve import TritonServer, free_port, project_root
from autobatch.profiles import Profile, load_profiles
from autobatch.schedule import Phase, Schedule, load_schedule

__all__ = [
    "CONTROLLER",
    "DemoComparison",
    "DemoObserver",
    "DemoResult",
    "DemoSetup",
    "compare_runs",
    "demo_sidecar_config",
    "run_demo",
]

CONTROLLER = "controller"
"""The name of the controller's run; the static runs are named after their profiles."""
DEFAULT = "triton-default"
LOW_SHARE = 0.25
"""A phase is low when its rate is at most this share of the schedule's peak."""

MODEL = "dense_mlp"


def examples_dir() -> Path:
    here = Path.cwd() / "examples"
    return here if (here / "sidecar.yaml").is_file() else project_root() / "examples"


def demo_sidecar_config(
    server: TritonServer, workdir: Path, config_path: Path | None = None
) -> SidecarConfig:
    """The example sidecar config, pointed at ``server`` and logging into ``workdir``; also
    written as ``workdir/sidecar.yaml`` (every path absolute, a free port to listen on) for
    ``autobatch run`` to read in a process of its own."""
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
    here = path.resolve().parent
    server_section = dict(data.get("server") or {})
    server_section["listen"] = f"127.0.0.1:{free_port()}"
    if server_section.get("token_file"):
        server_section["token_file"] = str((here / server_section["token_file"]).resolve())
    data["server"] = server_section
    for section, key in (("profiles", "dir"), ("policy", "curve"), ("actuator", "repository")):
        sub = dict(data.get(section) or {})
        if sub.get(key):
            sub[key] = str((here / sub[key]).resolve())
            data[section] = sub
    data["decision_log"] = str(workdir / "decisions.jsonl")
    cfg = sidecar_config_from_mapping(data, str(path), base=here)
    (workdir / "sidecar.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return cfg


@dataclass(frozen=True)
class DemoSetup:
    """What the demo is about to run, for its header line."""

    triton_http: str
    triton_grpc: str
    config: SidecarConfig
    schedule: Schedule
    run: str = CONTROLLER
    """Which run starts: ``controller`` or the name of the profile held."""
    runs: tuple[str, ...] = (CONTROLLER,)
    instances: int | None = None
    lead_in_s: float = 0.0
    """Seconds the sidecar runs at the first phase's rate before the schedule, unmeasured."""


class DemoObserver(Protocol):
    """What the demo reports while it runs (the CLI draws it; tests may ignore it)."""

    def starting(self) -> AbstractContextManager[Any]:
        """Entered while the embedded Triton starts."""
        ...

    def running(self, setup: DemoSetup) -> AbstractContextManager[Callable[[Sample, Any], None]]:
        """Entered for each run (``setup.run``); yields the callback each sample goes to."""
        ...


class _Quiet:
    def starting(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def running(self, setup: DemoSetup) -> AbstractContextManager[Callable[[Sample, Any], None]]:
        return contextlib.nullcontext(lambda sample, status: None)


@dataclass(frozen=True)
class DemoComparison:
    """The controller against one static run: what the demo's last lines say."""

    against: str
    device_ratio: float | None
    """The controller's device time per request over the run, over the static run's."""
    over_slo_points: float
    """The controller's share of requests over the SLO minus the static run's, in points."""
    worst_phase: str
    worst_phase_points: float
    """The largest per-phase excess of the controller's share over the SLO, in points."""
    low_p95_ratio: float | None
    """The controller's p95 over the static run's, in the worst low phase."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def compare_runs(controller: ClosedLoopResult, static: ClosedLoopResult) -> DemoComparison:
    """The controller against ``static`` over the same schedule (pure)."""
    phases = controller.schedule.phases
    peak = max(p.rate_rps for p in phases)
    excess = [c.over_slo_share - s.over_slo_share for c, s in zip(controller.phases, static.phases)]
    worst = max(range(len(phases)), key=lambda i: excess[i])
    lows = [c.p95_ms / s.p95_ms for c, s, ph in zip(controller.phases, static.phases, phases)
            if 0 < ph.rate_rps <= LOW_SHARE * peak and c.p95_ms is not None and s.p95_ms]
    dev = (controller.device_ms / static.device_ms
           if controller.device_ms is not None and static.device_ms else None)
    return DemoComparison(
        against=static.mode,
        device_ratio=dev,
        over_slo_points=100.0 * (controller.over_slo_share - static.over_slo_share),
        worst_phase=phases[worst].name,
        worst_phase_points=100.0 * excess[worst],
        low_p95_ratio=max(lows) if lows else None,
    )


@dataclass(frozen=True)
class DemoResult:
    runs: dict[str, ClosedLoopResult]
    """``controller`` and the static runs by profile name, in the order they ran."""
    config: SidecarConfig
    decision_log: Path | None
    """The decision log, when it was kept (``workdir`` given); None if it was temporary."""

    @property
    def result(self) -> ClosedLoopResult:
        """The controller's run."""
        return self.runs[CONTROLLER]

    @property
    def comparisons(self) -> tuple[DemoComparison, ...]:
        return tuple(compare_runs(self.result, r) for name, r in self.runs.items() if name != CONTROLLER)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": {name: r.to_dict() for name, r in self.runs.items()},
            "comparisons": [c.to_dict() for c in self.comparisons],
        }


def _statics(config: SidecarConfig) -> list[Profile]:
    """Triton's default and the ladder's last rung, as held profiles."""
    top = config.profiles[-1]
    default = next((p for p in config.profiles if p.name == DEFAULT), None)
    if default is None:
        folder = Path(config.profiles[0].source).parent
        found = load_profiles(folder) if folder.is_dir() else {}
        default = found.get(DEFAULT) or Profile(
            name=DEFAULT, max_batch_size=top.max_batch_size, preferred_batch_size=(),
            max_queue_delay_us=0, model=MODEL, source="<demo>")
    return [default] if top.name == DEFAULT else [default, top]


def _with_count(profile: Profile, instances: int | None) -> Profile:
    return profile if instances is None else Profile(**{**profile.__dict__, "instance_count": instances})


def run_demo(
    *,
    schedule_path: Path | None = None,
    config_path: Path | None = None,
    workdir: Path | None = None,
    observer: DemoObserver | None = None,
    instances: int | None = None,
    lead_in_s: float = 60.0,
) -> DemoResult:
    """Start Triton with dense_mlp; run the step load with the sidecar, then with Triton's
    default and with the ladder's last rung held; return what each run got.

    ``instances`` sets dense_mlp's instance count for every run (default: the
    repository's). ``lead_in_s``: the sidecar first runs this long at the first
    phase's rate, unmeasured. Its start counts as a switch (it cannot know what a
    predecessor just did), so its p95 rules wait ``p95_settle_s`` (60 s) after it;
    a sidecar in production has long been running when the load changes.
    """
    # Every input is read and checked before Triton starts: a bad one costs a second.
    if not (isinstance(lead_in_s, (int, float)) and math.isfinite(lead_in_s) and lead_in_s >= 0):
        raise ConfigError(f"lead_in_s = {lead_in_s!r}: must be a finite number >= 0 seconds",
                          field="lead_in_s", value=lead_in_s)
    if workdir is not None:
        check_folder(workdir, "workdir")
    observer = observer or _Quiet()
    schedule = load_schedule(schedule_path or examples_dir() / "schedules" / "demo.yaml")
    with tempfile.TemporaryDirectory(prefix="autobatch-demo-") as tmp:
        work = workdir or Path(tmp)
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"workdir = {str(work)!r}: cannot make the folder: {exc.strerror or exc}",
                              field="workdir", value=str(work)) from exc
        server = TritonServer.on_free_ports(models=[MODEL])
        # The config names the server's ports, chosen above; it is written before the start.
        cfg = demo_sidecar_config(server, work, config_path)
        statics = _statics(cfg)
        names = (CONTROLLER, *(p.name for p in statics))
        with observer.starting():
            server.start()
        try:
            runs: dict[str, ClosedLoopResult] = {}
            for name in names:
                held = next((p for p in statics if p.name == name), None)
                setup = DemoSetup(server.urls.http, server.urls.grpc, cfg, schedule, run=name, runs=names,
                                  instances=instances, lead_in_s=lead_in_s if held is None else 0.0)
                start = _with_count(held or cfg.profiles[0], instances)
                asyncio.run(apply_static(server.urls.http, MODEL, start))
                with observer.running(setup) as on_sample:
                    runs[name] = asyncio.run(_one_run(server, schedule, cfg if held is None else None,
                                                      cfg.policy.slo_p95_ms, name, on_sample,
                                                      setup.lead_in_s))
        finally:
            server.close()
    return DemoResult(runs, cfg, cfg.decision_log if workdir else None)


async def _one_run(server: TritonServer, schedule: Schedule, sidecar: SidecarConfig | None,
                   slo_ms: float, mode: str, on_sample: Callable[[Sample, Any], None],
                   lead_in_s: float = 0.0) -> ClosedLoopResult:
    # The sidecar runs as its own process (`autobatch run`), as in production: in this
    # process it would share the interpreter lock with the load generator, and the
    # clients' latencies would pay for its work.
    meter = DeviceMeter(server.urls.http, [MODEL])
    with contextlib.ExitStack() as stack:
        url = log = None
        if sidecar is not None:
            assert sidecar.decision_log is not None
            log = sidecar.decision_log
            url = f"http://{sidecar.server.host}:{sidecar.server.port}"
            stack.enter_context(SidecarProcess(log.parent / "sidecar.yaml", url, log.parent / "sidecar.log"))
            if lead_in_s > 0:
                first = schedule.phases[0]
                lead = Schedule((Phase("lead-in", first.rate_rps or 1.0, lead_in_s),))
                await run_closed_loop(lead, server.urls.grpc, MODEL, sidecar=None, sidecar_url=url,
                                      slo_p95_ms=slo_ms, mode=mode)
        try:
            return await run_closed_loop(schedule, server.urls.grpc, MODEL, sidecar=None, sidecar_url=url,
                                         decision_log=log, slo_p95_ms=slo_ms, mode=mode, on_sample=on_sample,
                                         device=meter)
        finally:
            await meter.aclose()
