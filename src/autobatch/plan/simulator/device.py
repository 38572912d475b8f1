"""One shared device: models, their instances and co-tenant jobs, simulated together.

:func:`simulate_device` runs one or more models (each its profile, curve,
arrivals and instance count) and the co-tenant jobs of
:mod:`autobatch.cotenants` on one device shared by a
:class:`autobatch.sharing.SharingModel`: every instance and every co-tenant is
a context of one :class:`autobatch.sharing.DeviceScheduler`, the model the
emulated device process runs too (``engines/shared.py``). It returns, per
model, the usual :class:`SimResult` (latency, throughput, batches, per phase)
with the device's figures attached; per co-tenant its latency and throughput;
and for the device its busy share overall, by tenant, by context and by phase.

:meth:`DeviceRun.summary` gives the flat figures a real run on the emulated
device reports (the model's p50/p95 and throughput, the device's busy share and
each tenant's share, each co-tenant's p50/p95 and throughput), so a benchmark
can set the simulation beside the measurement field by field.

Pure: values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from autobatch.config import Section, check_seed, load_yaml
from autobatch.cotenants import CoTenant, load_cotenants, parse_cotenants, place_in_schedule
from autobatch.errors import ConfigError
from autobatch.plan.simulator.engines.common import Rules, Service, _noise, prefix_rows
from autobatch.plan.simulator.engines.shared import SharedRun, run_shared
from autobatch.plan.simulator.results import (
    CoTenantResult,
    DevicePhase,
    DeviceShare,
    LatencyStats,
    SimResult,
)
from autobatch.plan.simulator.run import _check, _EngineRun, _summarise
from autobatch.plan.simulator.service import ServiceModel
from autobatch.plan.simulator.workload import Workload
from autobatch.profiles import Profile
from autobatch.schedule import Schedule, parse_schedule
from autobatch.sharing import DeviceUsage, SharingModel, SharingPolicy, parse_sharing

__all__ = ["DeviceRun", "ModelLoad", "SharedDevice", "load_shared_device", "simulate_device"]


@dataclass(frozen=True)
class SharedDevice:
    """Who shares the model's device, and how: what ``simulate``, ``plan`` and the
    switching map take to model a shared GPU."""

    sharing: SharingModel = field(default_factory=SharingModel)
    cotenants: tuple[CoTenant, ...] = ()
    """The co-tenant jobs as declared: their own start and stop times, or the schedule's
    phases once :meth:`for_schedule` has placed them."""

    def for_schedule(self, schedule: Schedule) -> SharedDevice:
        """The jobs placed by the schedule's ``cotenants: N`` phases (unchanged when no
        phase gives a count)."""
        return replace(self, cotenants=place_in_schedule(self.cotenants, schedule))

    def between(self, start_s: float, stop_s: float) -> SharedDevice:
        """The co-tenants of ``[start_s, stop_s)`` on a clock that starts at ``start_s``: a
        stretch of a run simulated on its own."""
        jobs = []
        for job in self.cotenants:
            windows = tuple((max(a, start_s) - start_s, min(b, stop_s) - start_s)
                            for a, b in job.windows if min(b, stop_s) > max(a, start_s))
            jobs.append(replace(job, windows=windows or ((0.0, 0.0),)))
        return replace(self, cotenants=tuple(jobs))

    @property
    def label(self) -> str:
        sharing = self.sharing.policy.value
        if self.sharing.policy is SharingPolicy.TIMESLICE:
            sharing += f" {self.sharing.quantum_ms:g} ms turns"
            if self.sharing.switch_ms:
                sharing += f", {self.sharing.switch_ms:g} ms a switch"
        if not self.cotenants:
            return f"a device shared by the model's instances ({sharing})"
        names = ", ".join(f"{j.name} (batch {j.batch_size}, "
                          + (f"duty {j.duty:g}" if j.duty is not None else f"{j.rate_bps:g}/s")
                          + ")" for j in self.cotenants)
        return f"{len(self.cotenants)} co-tenant(s) on the device ({sharing}): {names}"

    def to_dict(self) -> dict[str, Any]:
        return {"sharing": self.sharing.to_dict(), "cotenants": [j.to_dict() for j in self.cotenants]}


def load_shared_device(
    *,
    cotenants: str | Path | None = None,
    schedule: str | Path | None = None,
    policy: str | None = None,
    quantum_ms: float | None = None,
    switch_ms: float | None = None,
    placed: bool = False,
) -> SharedDevice | None:
    """The shared device of ``simulate``'s and ``plan``'s options; None when none is asked
    for (every instance then has a device of its own, as before).

    ``cotenants``: a co-tenant file (:mod:`autobatch.cotenants`), which may also hold a
    ``sharing:`` section (policy, quantum_ms, switch_ms, throughput). ``schedule``: a
    schedule file; its own ``cotenants:`` list is used when no co-tenant file is given.
    The jobs come back as declared (``placed``: as the schedule's ``cotenants: N``
    phases place them, for a run of that schedule; :meth:`SharedDevice.for_schedule`
    does it later). ``policy``, ``quantum_ms`` and ``switch_ms`` override the file's
    sharing. Errors name the file, field and value.
    """
    jobs: tuple[CoTenant, ...] = ()
    fields: dict[str, Any] = {}
    source = "options"
    if cotenants is not None:
        path = Path(cotenants)
        jobs = load_cotenants(path)
        top = Section(str(path), load_yaml(path))
        if top.has("sharing"):
            raw = top.raw("sharing")
            if not isinstance(raw, Mapping):
                raise top.fail("sharing", raw, "must be a mapping (policy, quantum_ms, switch_ms, "
                                               "throughput)")
            fields, source = dict(raw), str(path)
    if schedule is not None:
        path = Path(schedule)
        data = load_yaml(path)
        sched = parse_schedule(data, str(path))
        if cotenants is None:
            jobs = parse_cotenants(data, str(path), path.parent)
            if not jobs and any(ph.cotenants for ph in sched.phases):
                raise ConfigError(f"{path}: cotenants: required field is missing (phases give "
                                  "co-tenant counts: list the jobs there or give a co-tenant file)",
                                  source=str(path), field="cotenants")
        placed_jobs = place_in_schedule(jobs, sched, str(path))  # a count past the jobs fails here
        if placed:
            jobs = placed_jobs
    given = {k: v for k, v in (("policy", policy), ("quantum_ms", quantum_ms),
                               ("switch_ms", switch_ms)) if v is not None}
    fields.update(given)
    if not jobs and not fields:
        return None
    where = f"{source} (with options)" if source != "options" and given else source
    return SharedDevice(parse_sharing(Section(where, fields, "sharing")), jobs)


@dataclass(frozen=True)
class ModelLoad:
    """One model on the shared device: its batching, its curve, what arrives, its instances."""

    name: str
    profile: Profile
    service: ServiceModel
    workload: Workload
    instances: int | None = None
    """Default: the profile's ``instance_group.count``, or 1."""


@dataclass(frozen=True)
class DeviceRun:
    """A run of several tenants on one device."""

    models: tuple[SimResult, ...]
    """Per model, in the order given; each carries the device's figures (``device``) with
    itself as ``device.model``, and the co-tenants' results."""
    cotenants: tuple[CoTenantResult, ...]
    device: DeviceShare
    """The device; ``model`` is the first model's name (empty without models)."""

    def summary(self) -> dict[str, Any]:
        """The figures a real run on the emulated device reports, flat: per model p50/p95
        (ms), throughput (req/s) and busy share (its work over the span); the device's busy
        share and each tenant's share; per co-tenant p50/p95 of a batch from submit to
        completion (ms), batches/s and items/s over its active time, its busy share over
        its active time and its stretch (the co-tenant runner's field names)."""
        models = {}
        for res in self.models:
            assert res.device is not None
            lat = res.latency
            models[res.device.model] = {
                "p50_ms": None if lat is None else round(lat.p50_ms, 3),
                "p95_ms": None if lat is None else round(lat.p95_ms, 3),
                "throughput_rps": round(res.throughput_rps, 3),
                "completed": res.completed,
                "mean_batch": round(res.mean_batch, 3),
                "busy_share": round(res.device.model_share, 4),
            }
        cots = {}
        for c in self.cotenants:
            cots[c.name] = {
                "p50_ms": None if c.latency is None else round(c.latency.p50_ms, 3),
                "p95_ms": None if c.latency is None else round(c.latency.p95_ms, 3),
                "batches_per_s": round(c.throughput_bps, 3),
                "items_per_s": round(c.items_per_s, 3),
                "completed": c.batches,
                "busy_share": round(c.busy_share, 4),
                "stretch": None if c.stretch is None else round(c.stretch, 3),
            }
        return {
            "sharing": dict(self.device.sharing),
            "busy_share": round(self.device.busy_share, 4),
            "by_tenant": {k: round(v, 4) for k, v in self.device.by_tenant.items()},
            "models": models,
            "cotenants": cots,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device.to_dict(),
            "models": [m.to_dict() for m in self.models],
            "cotenants": [c.to_dict() for c in self.cotenants],
            "summary": self.summary(),
        }


def simulate_device(
    models: Sequence[ModelLoad],
    *,
    sharing: SharingModel | None = None,
    cotenants: Sequence[CoTenant] = (),
    seed: int = 0,
    engine: str = "auto",
    duration_s: float | None = None,
    keep_latencies: bool = False,
) -> DeviceRun:
    """Run ``models`` and ``cotenants`` on one device shared by ``sharing`` (default:
    time-slicing in 2 ms turns, :class:`SharingModel`'s default).

    Co-tenants submit within their windows from 0 to ``duration_s`` (default: the
    longest model workload; required without models), and what they submitted runs
    to its end; the models' requests all complete. Each model's batches follow
    Triton's batcher with prefetch (the ``triton`` engine); priority levels and
    queue policies are not modelled on a shared device and are refused. ``seed``
    drives the service-time noise and the open-loop co-tenants' arrivals (job k
    from ``seed + k``, as the device's co-tenant runner draws them).
    """
    check_seed(seed)
    sharing = sharing if sharing is not None else SharingModel()
    loads = list(models)
    names = [m.name for m in loads]
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigError(f"models[{i}].name = {name!r}: must be a non-empty name without '/'")
        if names.index(name) != i:
            raise ConfigError(f"models[{i}].name = {name!r}: must be unique "
                              f"(models[{names.index(name)}] has it too)")
    for job in cotenants:
        if job.name in names or "/" in job.name:
            raise ConfigError(f"co-tenant {job.name!r}: name taken by a model, or holds '/' "
                              "(model instances are the device's contexts 'model/0', 'model/1', ...)")
    if len({j.name for j in cotenants}) != len(cotenants):
        raise ConfigError("cotenants: names must be unique")
    if duration_s is None:
        if not loads:
            raise ConfigError("duration_s: required without models (how long the co-tenants run)")
        duration_s = max(m.workload.duration_s for m in loads)
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"duration_s = {duration_s!r}: must be a number > 0")

    prepared = []
    for k, m in enumerate(loads):
        instances, chosen = _check(m.profile, m.workload, m.instances, seed, engine)
        if chosen != "triton" or engine == "rules":
            raise ConfigError(
                f"engine = {engine!r} for model {m.name!r}: a shared device is modelled with the "
                "triton engine only (one priority level, no queue policy)")
        t = m.workload.t_s.tolist()
        n = len(t)
        multi = m.workload.rows is not None and bool(np.any(m.workload.rows != 1))
        rows = m.workload.rows.tolist() if multi else None  # type: ignore[union-attr]
        cum = prefix_rows(m.workload.rows, n) if multi else None
        # The first model draws the noise the flat engines draw for the same seed.
        noise = _noise(m.service, n, seed + k)
        prepared.append((m.name, t, rows, cum, Rules.of(m.profile),
                         Service.of(m.service, m.profile.max_batch_size), noise, instances))

    marks: list[float] = []
    first = loads[0].workload if loads else None
    if first is not None and first.phase is not None and len(first.phase_names) > 1:
        marks = [*first.phase_starts_s, first.phase_starts_s[-1] + first.phase_durations_s[-1]]
    run = run_shared(prepared, cotenants, sharing, horizon_s=duration_s, marks_s=marks, seed=seed)
    return _results(loads, prepared, cotenants, sharing, run, duration_s, marks, keep_latencies)


def _results(loads: Sequence[ModelLoad], prepared: Sequence[tuple[Any, ...]],
             cotenants: Sequence[CoTenant], sharing: SharingModel, run: SharedRun,
             duration_s: float, marks: Sequence[float], keep_latencies: bool) -> DeviceRun:
    usage = run.usage
    span_s = max(duration_s, usage.now_ms / 1000.0)
    span_ms = span_s * 1000.0
    contexts: dict[str, str] = {}  # context -> tenant
    for out in run.models:
        for c in out.contexts:
            contexts[c] = out.name
    for job in cotenants:
        contexts[job.name] = job.name

    def shares(u: DeviceUsage | None, v: DeviceUsage, ms: float) -> tuple[dict[str, float], dict[str, float]]:
        by_context = {c: (v.work_ms.get(c, 0.0) - (u.work_ms.get(c, 0.0) if u else 0.0)) / ms
                      for c in contexts} if ms > 0 else {c: 0.0 for c in contexts}
        by_tenant: dict[str, float] = {}
        for c, share in by_context.items():
            by_tenant[contexts[c]] = by_tenant.get(contexts[c], 0.0) + share
        return by_tenant, by_context

    by_tenant, by_context = shares(None, usage, span_ms)
    phases: list[DevicePhase] = []
    if marks and loads:
        w = loads[0].workload
        recorded = dict(run.marks)
        for i, name in enumerate(w.phase_names):
            a, b = marks[i], marks[i + 1]
            ua, ub = recorded[a], recorded[b]
            ms = (b - a) * 1000.0
            tenants, _ = shares(ua, ub, ms)
            phases.append(DevicePhase(name, a, b - a, (ub.busy_ms - ua.busy_ms) / ms if ms > 0 else 0.0,
                                      tenants))
    sharing_dict: Mapping[str, Any] = sharing.to_dict()

    def device_for(model: str, work_ms: float) -> DeviceShare:
        return DeviceShare(sharing_dict, span_s, usage.busy_ms / span_ms, by_tenant, by_context,
                           model, work_ms, tuple(phases))

    cot_results = tuple(_cotenant(job, out, usage, duration_s, span_ms)
                        for job, out in zip(cotenants, run.cotenants))
    work_of = [float(np.sum(out.work_s)) * 1000.0 if out.work_s else 0.0 for out in run.models]
    results = []
    for m, prep, out, work_ms in zip(loads, prepared, run.models, work_of):
        counts = np.array(out.counts, dtype=np.int64)
        req_start = np.repeat(np.array(out.starts), counts)
        req_end = np.repeat(np.array(out.ends), counts)
        engine_run = _EngineRun(out.sizes, out.counts, out.starts, out.ends, req_start, req_end)
        res = _summarise(m.profile, m.service, m.workload, prep[-1], "shared", engine_run, keep_latencies)
        results.append(replace(res, device=device_for(m.name, work_ms), cotenants=cot_results))
    device = device_for(loads[0].name, work_of[0]) if loads else device_for("", 0.0)
    return DeviceRun(tuple(results), cot_results, device)


def _cotenant(job: CoTenant, out: Any, usage: DeviceUsage, duration_s: float,
              span_ms: float) -> CoTenantResult:
    active = sum(max(0.0, min(b, duration_s) - max(a, 0.0)) for a, b in job.windows)
    sub = np.array(out.submitted)
    start = np.array(out.started)
    fin = np.array(out.finished)
    batches = int(fin.shape[0])
    demand = (f"duty {job.duty:g}" if job.duty is not None
              else f"{job.rate_bps:g} batches/s ({job.arrival})")
    return CoTenantResult(
        name=job.name,
        batch_size=job.batch_size,
        demand=demand,
        work_ms=job.work_ms,
        batches=batches,
        active_s=active,
        throughput_bps=batches / active if active > 0 else 0.0,
        latency=LatencyStats.of((fin - sub) * 1000.0),
        run=LatencyStats.of((fin - start) * 1000.0),
        share=usage.work_ms.get(job.name, 0.0) / span_ms if span_ms > 0 else 0.0,
    )
