"""``autobatch demo``: the controller on a shared GPU, against Triton's default and a static
profile, all three at the same time on the same trace, co-tenants arriving mid-run.

Each of the three runs on its own emulated GPU (``autobatch device``) with the
same co-tenant jobs placed by the schedule, and its own Triton holding the
emulated model (the config's curve) behind its own HAProxy: the controller
(``examples/sidecar-t4.yaml``, by reload, from the ladder's first rung),
Triton's default held, and the ladder's last rung held (the profile a user
tuning for device time would set and leave). The side-by-side harness
(:mod:`autobatch.lab.sidebyside`) runs them; the sidecar runs ``lead_in_s``
first at the first phase's rate, unmeasured, as every mode does. The result
per phase: the share over the SLO, p95, the model's device busy share and
device time per request, and the co-tenants' throughput.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autobatch.config import load_yaml
from autobatch.controller.config import SidecarConfig, load_sidecar_config
from autobatch.cotenants import CoTenant, parse_cotenants
from autobatch.device.settings import DeviceSettings
from autobatch.errors import ConfigError
from autobatch.lab.paths import check_folder
from autobatch.lab.serve import project_root
from autobatch.lab.sidebyside import BASELINE, Comparison, ModeSpec, StackSetup
from autobatch.lab.sidebyside.run import run_group, whole_run
from autobatch.lab.sidebyside.stack import ModeStack
from autobatch.profiles import Profile, load_profiles
from autobatch.schedule import Schedule, load_schedule

__all__ = ["CONTROLLER", "DemoComparison", "DemoObserver", "DemoProgress", "DemoResult", "DemoSetup",
           "compare_runs", "run_demo"]

CONTROLLER = "controller"
"""The name of the controller's run; the static runs are named after their profiles."""


def examples_dir() -> Path:
    here = Path.cwd() / "examples"
    return here if (here / "sidecar-t4.yaml").is_file() else project_root() / "examples"


@dataclass(frozen=True)
class DemoSetup:
    """What the demo is about to run, for its header line and its live view."""

    config: SidecarConfig
    schedule: Schedule
    runs: tuple[str, ...]
    cotenants: tuple[CoTenant, ...]
    lead_in_s: float
    curve: str


class DemoProgress(Protocol):
    def event(self, line: str) -> None:
        """A step of the set-up (servers starting, the run beginning)."""
        ...

    def tick(self, t_s: float, status: Any) -> None:
        """About once a second while the modes run: seconds into the schedule (the lead-in
        first) and the controller's ``/status`` (None while it does not answer)."""
        ...


class DemoObserver(Protocol):
    """What the demo reports while it runs (the CLI draws it; tests may ignore it)."""

    def running(self, setup: DemoSetup) -> AbstractContextManager[DemoProgress]:
        """Entered for the whole demo, the servers' start included."""
        ...


class _Silent:
    def event(self, line: str) -> None:
        pass

    def tick(self, t_s: float, status: Any) -> None:
        pass


class _Quiet:
    def running(self, setup: DemoSetup) -> AbstractContextManager[DemoProgress]:
        return contextlib.nullcontext(_Silent())


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
    cotenant_ratio: float | None
    """The co-tenants' throughput beside the controller over beside the static run."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def cotenant_items_per_s(run: Mapping[str, Any]) -> float | None:
    """The co-tenants' items a second over the run (summed over the jobs)."""
    rep = run.get("cotenants")
    if not rep:
        return None
    return sum(j["items_per_s"] or 0.0 for j in rep["cotenants"])


def compare_runs(controller: Mapping[str, Any], static: Mapping[str, Any], against: str) -> DemoComparison:
    """The controller's run against a static one over the same measured phases (pure)."""
    c, s = whole_run(controller), whole_run(static)
    excess = [100.0 * (a["over_slo_share"] - b["over_slo_share"]) for a, b in zip(c["phases"], s["phases"])]
    worst = max(range(len(excess)), key=lambda i: excess[i])
    ci, si = cotenant_items_per_s(controller), cotenant_items_per_s(static)
    return DemoComparison(
        against=against,
        device_ratio=c["device_ms"] / s["device_ms"] if c["device_ms"] and s["device_ms"] else None,
        over_slo_points=100.0 * (c["over_slo_share"] - s["over_slo_share"]),
        worst_phase=c["phases"][worst]["name"], worst_phase_points=excess[worst],
        cotenant_ratio=ci / si if ci is not None and si else None,
    )


@dataclass(frozen=True)
class DemoResult:
    runs: dict[str, dict[str, Any]]
    """``controller`` and the static runs by profile name: each mode's figures as the
    side-by-side harness gives them (phases, the lead-in first; timeline; co-tenants)."""
    setup: DemoSetup
    cpu_cores: dict[str, float]
    decision_log: Path | None
    """The controller's decision log, when it was kept (``workdir`` given)."""

    @property
    def slo_p95_ms(self) -> float:
        return self.setup.config.policy.slo_p95_ms

    @property
    def comparisons(self) -> tuple[DemoComparison, ...]:
        ctrl = self.runs[CONTROLLER]
        return tuple(compare_runs(ctrl, r, name) for name, r in self.runs.items() if name != CONTROLLER)

    def to_dict(self) -> dict[str, Any]:
        return {"curve": self.setup.curve, "slo_p95_ms": self.slo_p95_ms,
                "ladder": [p.name for p in self.setup.config.profiles], "lead_in_s": self.setup.lead_in_s,
                "runs": self.runs, "comparisons": [c.to_dict() for c in self.comparisons],
                "cpu_cores": self.cpu_cores}


def _default_profile(config: SidecarConfig) -> Profile:
    default = next((p for p in config.profiles if p.name == BASELINE), None)
    if default is None:
        folder = Path(config.profiles[0].source).parent
        default = load_profiles(folder).get(BASELINE) if folder.is_dir() else None
    if default is None:
        top = config.profiles[-1]
        default = Profile(name=BASELINE, max_batch_size=top.max_batch_size, preferred_batch_size=(),
                          max_queue_delay_us=0, model=config.model, source="<demo>")
    return default


def _with_count(profile: Profile, instances: int | None) -> Profile:
    return profile if instances is None else Profile(**{**profile.__dict__, "instance_count": instances})


def _inputs(schedule_path: Path | None, config_path: Path | None, lead_in_s: float,
            workdir: Path | None) -> tuple[Path, SidecarConfig, Schedule, tuple[CoTenant, ...]]:
    """Every input read and checked before a server starts: a bad one costs a second."""
    if not (isinstance(lead_in_s, (int, float)) and math.isfinite(lead_in_s) and lead_in_s >= 0):
        raise ConfigError(f"lead_in_s = {lead_in_s!r}: must be a finite number >= 0 seconds",
                          field="lead_in_s", value=lead_in_s)
    if workdir is not None:
        check_folder(workdir, "workdir")
    path = Path(config_path) if config_path else examples_dir() / "sidecar-t4.yaml"
    config = load_sidecar_config(path)
    if config.policy.curve is None:
        raise ConfigError(f"{path}: policy.curve: required for the demo (the emulated GPU runs the "
                          "model's batches for the curve's times)", source=str(path), field="policy.curve")
    sched = Path(schedule_path) if schedule_path else examples_dir() / "schedules" / "demo.yaml"
    schedule = load_schedule(sched)
    jobs = parse_cotenants(load_yaml(sched), str(sched), sched.parent)
    return path, config, schedule, jobs


def run_demo(
    *,
    schedule_path: Path | None = None,
    config_path: Path | None = None,
    workdir: Path | None = None,
    observer: DemoObserver | None = None,
    instances: int | None = None,
    lead_in_s: float = 60.0,
) -> DemoResult:
    """Run the controller, Triton's default and the ladder's last rung side by side (see the
    module docstring). ``instances`` sets the model's instance count in every run (default:
    the profiles'). ``lead_in_s``: the unmeasured stretch at the first phase's rate first
    (the sidecar's start counts as a switch; its p95 rules wait ``p95_settle_s`` after one)."""
    path, config, schedule, jobs = _inputs(schedule_path, config_path, lead_in_s, workdir)
    observer = observer or _Quiet()
    ladder = tuple(_with_count(p, instances) for p in config.profiles)
    start = next((p for p in ladder if p.name == config.initial_profile), ladder[0])
    default, top = _with_count(_default_profile(config), instances), ladder[-1]
    modes = [ModeSpec(CONTROLLER, "reload", start), ModeSpec(BASELINE, "static", default)]
    if top.name != BASELINE:
        modes.append(ModeSpec(top.name, "static", top))
    assert config.policy.curve is not None
    names = tuple(m.name for m in modes)
    setup = DemoSetup(config, schedule, names, jobs, lead_in_s, config.policy.curve.name)
    with tempfile.TemporaryDirectory(prefix="autobatch-demo-") as tmp:
        work = Path(workdir) if workdir else Path(tmp)
        stack = StackSetup(model=config.model, curve=config.policy.curve, device=DeviceSettings(),
                           ladder=ladder, sidecar_config=path, gateway_config=path)
        cmp = Comparison(name="demo", schedule=schedule, setup=stack, modes=tuple(modes),
                         slo_p95_ms=config.policy.slo_p95_ms, cotenants=jobs, repeats=1,
                         group_size=len(modes), lead_in_s=lead_in_s, interval_s=config.interval_s)
        with observer.running(setup) as progress:
            group = run_group(cmp, modes, work / "run", progress.event, _ticker(progress.tick))
        log = work / "run" / CONTROLLER / "decisions.jsonl"
        kept = log if workdir and log.is_file() else None
    return DemoResult(group["modes"], setup, group["cpu_cores"], kept)


def _ticker(on_tick: Callable[[float, Any], None]) -> Callable[[float, Mapping[str, ModeStack]], None]:
    """Each tick with the controller's ``/status`` (None while it does not answer)."""
    import httpx

    def tick(t_s: float, stacks: Mapping[str, ModeStack]) -> None:
        url = stacks[CONTROLLER].sidecar_url
        status = None
        with contextlib.suppress(httpx.HTTPError, ValueError):
            r = httpx.get(f"{url}/status", timeout=0.5)
            status = r.json() if r.status_code == 200 else None
        on_tick(t_s, status)

    return tick
