"""Run a side-by-side comparison: every mode at the same time, each on its own emulated GPU, fed
the same arrival trace, repeated; the verdicts from :mod:`autobatch.lab.compare`.

A group of modes (:func:`~autobatch.lab.sidebyside.layout.group_modes`) runs at
once: each mode's servers start (:class:`~.stack.ModeStack`), the controllers'
sidecars start, then one worker process per mode (:mod:`.worker`) sends the
trace from one instant on the machine's monotonic clock. Groups that do not fit
on the cores together run one after another, each with Triton's default in it,
so every ratio to the default is taken at one time. Each repeat runs every
group, in a rotated order. What the CPU did meanwhile (the processes' CPU
time, the device's lateness, the generators' send lag) is kept beside the
figures: the evidence that the modes did not slow one another.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autobatch.cotenants import CoTenant
from autobatch.errors import AutobatchError
from autobatch.lab.compare import (
    controller_verdict,
    decision_time_s,
    reactions,
    right_profiles,
    single_static,
    spread,
)
from autobatch.lab.process import ManagedProcess, cpu_seconds, group_members, poll_until
from autobatch.lab.sidebyside.layout import (
    BASELINE,
    LEAD_IN,
    ModeSpec,
    cotenant_to_dict,
    group_modes,
    placed_cotenants,
    statics_of,
    with_lead_in,
)
from autobatch.lab.sidebyside.stack import ModeStack, StackSetup, check_sidecar_configs
from autobatch.lab.sidebyside.worker import WorkerSpec
from autobatch.schedule import Schedule

__all__ = ["Comparison", "arrivals_s", "cpu_by_mode", "decisions_from_log", "machine_cores", "run_comparison",
           "verdicts", "whole_run"]

START_MARGIN_S = 8.0
"""How far ahead the shared start is set, for every worker's set-up (connect, warm-up)."""
REACT_FALLBACK_S = {"gateway": 2.0, "reload": 5.0}
"""The oracle's reaction when a controller made no switch to measure one from."""
HZ = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Comparison:
    """One schedule, compared side by side."""

    name: str
    schedule: Schedule
    setup: StackSetup
    modes: tuple[ModeSpec, ...]
    slo_p95_ms: float
    cotenants: tuple[CoTenant, ...] = ()
    seed: int = 0
    repeats: int = 3
    group_size: int = 3
    lead_in_s: float = 60.0
    interval_s: float = 1.0
    """The controllers' window, for the reaction in windows."""
    keep: Path | None = None
    """Keep each mode's servers' logs and decision logs here."""
    retries: int = 1
    """How many failed repeats (a group whose server stopped answering or whose worker raised)
    are run again, over the whole comparison; each failure is kept in the result."""
    extra: Mapping[str, Any] = field(default_factory=dict)


Event = Callable[[str], None]


def _machine_ticks() -> list[int] | None:
    """The machine's CPU ticks since boot, as /proc/stat's first line gives them (None elsewhere)."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None


def machine_cores(before: Sequence[int] | None, after: Sequence[int] | None, wall_s: float,
                  ours: float) -> dict[str, float] | None:
    """What the whole machine's CPUs did over ``wall_s``, in cores, from two readings of
    /proc/stat's ``cpu`` line (user nice system idle iowait irq softirq steal ...): ``busy`` (every
    process, ours included), ``others`` (busy less ``ours``, the cores our processes used) and
    ``steal`` (time the hypervisor gave the machine's virtual CPUs to someone else). A run whose
    groups read the same of ours but differ in ``others`` or ``steal`` was disturbed from outside."""
    if before is None or after is None or wall_s <= 0 or len(before) < 8 or len(after) < 8:
        return None
    d = [a - b for a, b in zip(after, before, strict=False)]
    busy = (d[0] + d[1] + d[2] + d[5] + d[6]) / HZ / wall_s
    steal = d[7] / HZ / wall_s
    return {"busy": round(busy, 3), "others": round(max(0.0, busy - ours), 3), "steal": round(steal, 3)}


def _own_pids(stack: ModeStack) -> dict[str, list[int]]:
    """One mode's server processes by kind (its generator reports its own CPU)."""
    out: dict[str, list[int]] = {"device": [], "triton": [], "haproxy": [], "sidecar": []}
    out["device"] += [stack.device.pid] if stack.device.pid else []
    out["triton"] += group_members(stack.triton.pid) if stack.triton.pid else []
    out["haproxy"] += [stack.haproxy_pid] if stack.haproxy_pid else []
    if stack.mode.controller and stack.sidecar_pid:
        out["sidecar"] += group_members(stack.sidecar_pid)
    return out


def cpu_by_mode(before: Mapping[str, Mapping[str, float]], after: Mapping[str, Mapping[str, float]],
                generators: Mapping[str, float], wall_s: float) -> dict[str, dict[str, float]]:
    """Each mode's cores by process kind over ``wall_s``, from two readings of its processes' CPU
    seconds, with ``load`` its generator's own report and ``all`` their sum: which mode's stack
    cost the two shared cores more (a controller's sidecar, a gateway's Triton of two variants)."""
    out: dict[str, dict[str, float]] = {}
    for name, kinds in after.items():
        row = {k: round((v - before[name].get(k, 0.0)) / wall_s, 3) for k, v in kinds.items()}
        row["load"] = round(generators.get(name, 0.0) / wall_s, 3)
        row["all"] = round(sum(row.values()), 3)
        out[name] = row
    return out


def _spec(cmp: Comparison, stack: ModeStack, schedule: Schedule, jobs: Sequence[CoTenant],
          start_at: float) -> WorkerSpec:
    return WorkerSpec(
        mode=stack.mode.name, url=stack.url, model=cmp.setup.model, schedule=schedule.to_dict(),
        seed=cmp.seed, start_at=start_at, slo_p95_ms=cmp.slo_p95_ms, device_address=stack.device.address,
        device_metrics_url=stack.device.metrics_url, model_prefixes=stack.contexts_prefixes,
        triton_http=stack.triton.urls.http, models=stack.models,
        cotenants=[cotenant_to_dict(j) for j in jobs], sidecar_url=stack.sidecar_url, variants=stack.variants)


def _start_stacks(cmp: Comparison, group: Sequence[ModeSpec], workdir: Path,
                  stack: contextlib.ExitStack) -> dict[str, ModeStack]:
    """Every mode's servers, then its sidecar, started side by side (most of a start is waiting
    for a server to answer); each mode's own exit stack is closed with ``stack``."""
    own = {m.name: stack.enter_context(contextlib.ExitStack()) for m in group}

    def start(m: ModeSpec) -> ModeStack:
        s = ModeStack(m, cmp.setup, workdir / m.name, own[m.name])
        s.start_sidecar(own[m.name])
        return s

    with ThreadPoolExecutor(max_workers=len(group)) as pool:
        futures = {m.name: pool.submit(start, m) for m in group}
    return {name: f.result() for name, f in futures.items()}


Tick = Callable[[float, Mapping[str, ModeStack]], None]


def run_group(cmp: Comparison, group: Sequence[ModeSpec], workdir: Path,
              event: Event = lambda _: None, tick: Tick | None = None) -> dict[str, Any]:
    """Run ``group``'s modes at once; their results by mode, and the CPU they used. ``tick`` is
    called about once a second while they run (seconds into the schedule, the modes' servers)."""
    schedule = with_lead_in(cmp.schedule, cmp.lead_in_s)
    jobs = placed_cotenants(cmp.cotenants, schedule, cmp.lead_in_s)
    with contextlib.ExitStack() as stack:
        names = ", ".join(m.name for m in group)
        event(f"starting {len(group)} modes' devices, Tritons and HAProxies: {names}")
        stacks = _start_stacks(cmp, group, workdir, stack)
        start_at = time.monotonic() + START_MARGIN_S + 0.5 * len(group)
        workers: dict[str, ManagedProcess] = {}
        for name, s in stacks.items():
            spec_path = workdir / name / "worker.json"
            spec_path.write_text(_spec(cmp, s, schedule, jobs, start_at).to_json(), encoding="utf-8")
            w = ManagedProcess(f"mode worker {name}", workdir / name / "worker.log")
            w.start([sys.executable, "-m", "autobatch.lab.sidebyside", str(spec_path),
                     str(workdir / name / "result.json")])
            stack.callback(w.stop)
            workers[name] = w
        event(f"running {schedule.duration_s:.0f} s ({cmp.lead_in_s:g} s of it the unmeasured lead-in)")
        time.sleep(max(0.0, start_at - time.monotonic()))
        wall0, load0 = time.monotonic(), os.getloadavg()
        own0 = {m: {k: cpu_seconds(v) for k, v in _own_pids(s).items()} for m, s in stacks.items()}
        ticks0 = _machine_ticks()

        def ended() -> bool:
            if tick is not None:
                tick(time.monotonic() - start_at, stacks)
            return not any(w.running() for w in workers.values())

        # The schedule, a drain of the generators' timeout, and room for a loaded machine.
        poll_until(ended, timeout_s=schedule.duration_s + 90.0, interval_s=1.0,
                   what=f"the modes' runs ({', '.join(workers)}) to end")
        wall, ticks1 = time.monotonic() - wall0, _machine_ticks()
        # The members read again: a reload replaces its model's stub (the generators report theirs).
        own1 = {m: {k: cpu_seconds(v) for k, v in _own_pids(s).items()} for m, s in stacks.items()}
        kinds = {k for row in own1.values() for k in row}
        cpu = {k: round(sum(own1[m][k] - own0[m].get(k, 0.0) for m in own1) / wall, 3) for k in sorted(kinds)}
        results, logs = {}, {}
        for name, w in workers.items():
            status = w.exit_status()
            if status and status != "exited with code 0":
                raise RuntimeError(f"mode {name}'s worker {status}: {w.log_tail(15)}")
            results[name] = json.loads((workdir / name / "result.json").read_text(encoding="utf-8"))
        # The generators have exited: their CPU is what each reported of itself (its set-up too).
        cpu["load"] = round(sum(r.get("cpu_s", 0.0) for r in results.values()) / wall, 3)
        by_mode = cpu_by_mode(own0, own1, {m: r.get("cpu_s", 0.0) for m, r in results.items()}, wall)
        for name in workers:
            log = stacks[name].decision_log
            results[name]["decisions"] = decisions_from_log(
                log, results[name]["t0_wall"], results[name].get("t0_mono")) if log else []
            if log is not None and log.is_file():
                logs[name] = log.read_bytes()
    cpu["ours"] = round(sum(cpu.values()), 3)
    return {"modes": results, "logs": logs, "cpu_cores": cpu, "cpu_by_mode": by_mode,
            "wall_s": round(wall, 1),
            "machine_cores": machine_cores(ticks0, ticks1, wall, cpu["ours"]),
            "load_average": [round(x, 2) for x in os.getloadavg()], "load_average_start": list(load0)}


def decisions_from_log(path: Path, t0_wall: float, t0_mono: float | None = None) -> list[dict[str, Any]]:
    """Each decision of a sidecar's log on the run's clock (seconds from the schedule's start),
    with the actuation of a switch: by the monotonic clock where the line and the run both
    carry it (a step of the wall clock mid-run then moves nothing), else by the wall clock."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        d = row["decision"]
        a = row.get("actuation") or {}
        out.append({"t_s": round(decision_time_s(row, t0_wall, t0_mono), 3), "action": d["action"],
                    "reason": d["reason"], "target": d.get("target"), "ok": a.get("ok"),
                    "duration_s": a.get("duration_s")})
    return out


def whole_run(result: Mapping[str, Any]) -> dict[str, Any]:
    """A mode's measured phases (the lead-in dropped) and its figures over them."""
    phases = [p for p in result["phases"] if p.get("measured", True)]
    items = sum(p["device_items"] for p in phases)
    busy = sum(p["device_busy_ms"] for p in phases)
    n = sum(p["requests"] for p in phases)
    return {"phases": phases, "device_ms": round(busy / items, 4) if items else None,
            "over_slo_share": round(sum(p["over_slo"] for p in phases) / n, 5) if n else 0.0,
            "failed": sum(sum(p["failures"].values()) for p in phases)}


def arrivals_s(jobs: Sequence[CoTenant]) -> list[float]:
    """When a co-tenant arrives (a window of a job opens after the start), on the run's clock."""
    return sorted({a for j in jobs for a, _ in j.windows if a > 0})


def _react_s(decisions: Sequence[Mapping[str, Any]], starts: Sequence[float], mode: str) -> float:
    """The controller's measured reaction: median seconds from the start of a phase to the end
    of a switch made in it (its actuation included)."""
    got = []
    for d in decisions:
        if d["action"] != "switch" or not d.get("ok"):
            continue
        start = max((s for s in starts if s <= d["t_s"]), default=None)
        if start is not None:
            got.append(d["t_s"] - start + (d.get("duration_s") or 0.0))
    return statistics.median(got) if got else REACT_FALLBACK_S.get(mode, 2.0)


def capability_react_s(decisions: Sequence[Mapping[str, Any]], starts: Sequence[float], mode: str,
                       windows: float = 2.0, interval_s: float = 1.0) -> float:
    """The reaction a controller is capable of, its late moves aside: ``windows`` windows to
    decide (issue 28's reaction target) plus the median actuation of its own switches. Not
    the verdict's (:func:`_react_s`); ``benchmarks/oracle_react.py`` sets the two side by side."""
    acts = [d.get("duration_s") or 0.0 for d in decisions if d["action"] == "switch" and d.get("ok")]
    return windows * interval_s + statistics.median(acts) if acts else REACT_FALLBACK_S.get(mode, 2.0)


ReactFn = Callable[[Sequence[Mapping[str, Any]], Sequence[float], str], float]


def verdicts(cmp: Comparison, groups: Sequence[Mapping[str, Any]],
             react_s: ReactFn | None = None) -> dict[str, Any]:
    """One repeat's verdicts: each controller against the statics, the oracle and its group's
    default; whether one static profile is the answer; the reaction to each arrival.
    ``react_s``: the oracle's reaction from a controller's decisions (default :func:`_react_s`)."""
    react_of = react_s or _react_s
    schedule = with_lead_in(cmp.schedule, cmp.lead_in_s)
    jobs = placed_cotenants(cmp.cotenants, schedule, cmp.lead_in_s)
    durations = [p.duration_s for p in cmp.schedule.phases]
    kinds = {m.name: m.kind for m in cmp.modes if m.controller}
    statics = {name: whole_run(r) for name, r in statics_of(groups, kinds).items()}
    out: dict[str, Any] = {"single_static": single_static(statics, durations), "controllers": {},
                           "statics": {m: {"device_ms": r["device_ms"], "over_slo_share": r["over_slo_share"]}
                                       for m, r in statics.items()}}
    measured_starts = [s for s, p in zip(schedule.starts_s, schedule.phases, strict=True)
                       if p.name != LEAD_IN]
    arrivals = arrivals_s(jobs)
    right = _right_at(statics, measured_starts, arrivals)
    starts = {m.name: m.profile.name if m.profile else None for m in cmp.modes}
    for g in groups:
        default = whole_run(g["modes"][BASELINE])
        for name, r in g["modes"].items():
            if name not in kinds:
                continue
            react = react_of(r["decisions"], measured_starts, kinds[name])
            v = controller_verdict(name, whole_run(r), statics, default, durations, react, kinds[name])
            out["controllers"][name] = {
                **v.to_dict(), "react_s": round(react, 2), "group_default_device_ms": default["device_ms"],
                "reactions": [x.to_dict() for x in reactions(r["decisions"], arrivals, schedule.duration_s,
                                                             cmp.interval_s, start=starts.get(name),
                                                             right=right)],
            }
    return out


def _right_at(statics: Mapping[str, Any], starts: Sequence[float],
              arrivals: Sequence[float]) -> list[set[str]]:
    """Per arrival, the static profiles right for the measured phase it falls in (none in the lead-in)."""
    phases = {m: r["phases"] for m, r in statics.items()}
    out: list[set[str]] = []
    for a in arrivals:
        index = max((k for k, s in enumerate(starts) if s <= a + 1e-6), default=None)
        out.append(set() if index is None or not phases else right_profiles(phases, index))
    return out


def summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The median and spread over the repeats of each controller's figures."""
    out: dict[str, Any] = {}
    names = sorted({c for r in runs for c in r["verdicts"]["controllers"]})
    for c in names:
        vs = [r["verdicts"]["controllers"].get(c) for r in runs]
        vs = [v for v in vs if v is not None]
        out[c] = {k: None if (s := spread([v[k] for v in vs])) is None else s.to_dict()
                  for k in ("device_vs_default", "device_vs_oracle", "worst_excess_points",
                            "worst_beside_default_points", "device_ms")}
        out[c]["every_static_loses"] = [v["every_static_loses"] for v in vs]
    out["single_static"] = [r["verdicts"]["single_static"] for r in runs]
    return out


GROUP_FAILURES = (AutobatchError, RuntimeError, OSError)
"""What a group's run raises when a server or a worker fails (not a bug in the comparison)."""

RunGroup = Callable[[Comparison, Sequence[ModeSpec], Path, Event], dict[str, Any]]


def run_repeats(cmp: Comparison, groups: Sequence[Sequence[ModeSpec]], base: Path,
                event: Event = lambda _: None,
                run: RunGroup | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each repeat's groups and verdicts, and the failed attempts. A repeat in which a group
    fails (:data:`GROUP_FAILURES`) is dropped whole, since its ratios are taken beside its
    own groups' default, and run again while ``cmp.retries`` allows; after that the
    comparison ends with the repeats it has. Raises the last failure if none completed."""
    run = run or run_group
    runs: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    while len(runs) < cmp.repeats:
        r = len(runs)
        again = sum(f["repeat"] == r for f in failed)
        order = list(groups[r % len(groups):]) + list(groups[:r % len(groups)])
        suffix = f"-retry{again}" if again else ""
        done = []
        try:
            for gi, g in enumerate(order):
                event(f"repeat {r + 1}/{cmp.repeats}, group {gi + 1}/{len(order)}")
                done.append(run(cmp, g, base / f"r{r}-g{groups.index(g)}{suffix}", event))
        except GROUP_FAILURES as exc:
            names = [m.name for m in order[len(done)]]
            error = f"{type(exc).__name__}: {exc}"
            failed.append({"repeat": r, "retry": again, "group": names, "error": error[:600]})
            event(f"repeat {r + 1} failed in group {len(done) + 1} ({', '.join(names)}): {error}")
            if len(failed) > cmp.retries:
                if not runs:
                    raise
                event(f"{len(failed)} failed repeats, more than the {cmp.retries} retries: "
                      f"ending with {len(runs)}")
                break
            continue
        runs.append({"repeat": r, "groups": done, "verdicts": verdicts(cmp, done)})
    return runs, failed


def run_comparison(cmp: Comparison, event: Event = lambda _: None) -> dict[str, Any]:
    """Every repeat of every group; the figures, the verdicts per repeat and their summary,
    and any repeat that failed and was run again (``failed``)."""
    groups = group_modes(cmp.modes, cmp.group_size)
    check_sidecar_configs(cmp.modes, cmp.setup)
    with tempfile.TemporaryDirectory(prefix="ab-sbs-") as tmp:
        runs, failed = run_repeats(cmp, groups, cmp.keep or Path(tmp), event)
    return {
        "schedule": cmp.name, "slo_p95_ms": cmp.slo_p95_ms, "seed": cmp.seed, "lead_in_s": cmp.lead_in_s,
        "group_size": cmp.group_size, "groups": [[m.name for m in g] for g in groups],
        "phases": [{"name": p.name, "rate_rps": p.rate_rps, "duration_s": p.duration_s,
                    "cotenants": p.cotenants} for p in cmp.schedule.phases],
        "ladder": [p.name for p in cmp.setup.ladder], "curve": cmp.setup.curve.name,
        "controllers": {m.name: m.kind for m in cmp.modes if m.controller},
        "sharing": cmp.setup.device.sharing.to_dict(),
        "cotenants": [cotenant_to_dict(j) for j in cmp.cotenants], **dict(cmp.extra),
        "runs": runs, "summary": summary(runs), **({"failed": failed} if failed else {}),
    }
