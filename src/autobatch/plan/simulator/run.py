"""``simulate``: pick an engine, run the workload through it, summarise the result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autobatch.config import check_seed
from autobatch.errors import ConfigError
from autobatch.plan.simulator.engines.common import Rules, Service, _Level, _noise, _policy, prefix_rows
from autobatch.plan.simulator.engines.general import REJECTED_FULL, REJECTED_TIMEOUT, run_general
from autobatch.plan.simulator.engines.rules import run_rules
from autobatch.plan.simulator.engines.triton import run_triton
from autobatch.plan.simulator.results import (
    LatencyStats,
    PriorityResult,
    SimResult,
    _phase_results,
)
from autobatch.plan.simulator.service import ServiceModel
from autobatch.plan.simulator.workload import Workload
from autobatch.profiles import Profile

if TYPE_CHECKING:
    from autobatch.cotenants import CoTenant
    from autobatch.sharing import SharingModel

__all__ = ["ENGINES", "simulate"]

ENGINES = ("auto", "triton", "rules", "general")


def _needs_general(profile: Profile, workload: Workload) -> bool:
    if profile.priority_queue_policy:
        return True
    dqp = profile.default_queue_policy
    if dqp is not None and (dqp.default_timeout_microseconds or dqp.max_queue_size):
        return True
    prio = workload.priority
    return prio is not None and len(prio) > 0 and len(np.unique(prio)) > 1


def _level_map(profile: Profile, workload: Workload) -> tuple[list[int], dict[int, _Level]]:
    n = len(workload)
    if profile.priority_levels == 0:
        return [0] * n, {0: _policy(profile.default_queue_policy)}
    levels = profile.priority_levels
    default = profile.default_priority_level
    prio = workload.priority if workload.priority is not None else np.zeros(n, dtype=np.int64)
    bad = prio[(prio < 0) | (prio > levels)]
    if bad.shape[0]:
        raise ConfigError(
            f"priority {int(bad[0])}: must be 0 (the default level) or in [1, {levels}] "
            f"(the profile's priority_levels)"
        )
    level_of = np.where(prio == 0, default, prio).tolist()
    # Only the levels some request has: an empty level's queue changes nothing, and
    # Triton allows priority_levels up to 2**64-1.
    table = {
        lv: _policy(profile.priority_queue_policy.get(lv, profile.default_queue_policy))
        for lv in sorted(set(level_of))
    }
    return level_of, table


def simulate(
    profile: Profile,
    service: ServiceModel,
    workload: Workload,
    *,
    instances: int | None = None,
    seed: int = 0,
    engine: str = "auto",
    keep_latencies: bool = False,
    sharing: SharingModel | None = None,
    cotenants: Sequence[CoTenant] = (),
    model_name: str = "model",
) -> SimResult:
    """Run ``workload`` through Triton's dynamic batcher configured by ``profile``.

    ``instances`` defaults to the profile's ``instance_group.count`` (or 1);
    ``seed`` drives the service-time noise. ``engine``:

    ``triton``
        Triton's batcher thread with payload prefetch and its wake-up rules
        (one priority level, no queue policy: Triton prefetches only then);
        what ``auto`` picks when it can.
    ``rules``
        the batch-formation rules decided whenever an instance is free (one
        level, no queue policy); the reference the other engines are checked
        against.
    ``general``
        the same with priority levels, timeouts and queue limits, as Triton
        runs them without prefetch; what ``auto`` picks when the profile or
        workload needs them.

    Every engine counts rows (``workload.rows``), never splits a request and
    sees simultaneous arrivals together. A request with more rows than
    ``max_batch_size`` is bad input (Triton refuses it).

    Without ``sharing`` and ``cotenants`` every instance has a device of its own.
    With either, the instances (contexts ``model_name/0``, ``/1``, ...) and the
    co-tenant jobs share one device by ``sharing`` (default: time-slicing in 2 ms
    turns) through the ``shared`` engine (:func:`autobatch.plan.simulator.device.simulate_device`,
    which also runs other models beside this one); the result then carries the
    device's busy share by tenant and each co-tenant's figures.
    """
    if sharing is not None or cotenants:
        # Imported here: device.py builds on this module's steps.
        from autobatch.plan.simulator.device import ModelLoad, simulate_device

        load = ModelLoad(model_name, profile, service, workload, instances)
        return simulate_device([load], sharing=sharing, cotenants=cotenants, seed=seed,
                               engine=engine, keep_latencies=keep_latencies).models[0]
    instances, engine = _check(profile, workload, instances, seed, engine)
    noise = _noise(service, len(workload), seed)
    run = _run_engine(engine, profile, service, workload, noise, instances)
    return _summarise(profile, service, workload, instances, engine, run, keep_latencies)


# -- the steps of simulate, in order ----------------------------------------------------------


def _summarise(profile: Profile, service: ServiceModel, workload: Workload, instances: int,
               engine: str, run: _EngineRun, keep_latencies: bool) -> SimResult:
    """The :class:`SimResult` of an engine's run (the flat engines' and the shared one's)."""
    n = len(workload)
    done = ~np.isnan(run.req_end)
    lat_all = (run.req_end - workload.t_s) * 1000.0 + service.fixed_latency_ms
    lat = lat_all[done]
    completed = int(done.sum())
    last_end = float(np.max(run.req_end[done])) if completed else 0.0
    span = max(workload.duration_s, last_end)
    size_arr = np.array(run.sizes, dtype=np.int64)
    batched = bool(run.sizes)
    busy_total = float(np.sum(np.array(run.ends) - np.array(run.starts))) if batched else 0.0
    counts = np.bincount(size_arr, minlength=1) if batched else np.zeros(1, dtype=np.int64)
    timed_out = run.rej_kind == REJECTED_TIMEOUT if run.rej_kind is not None else None
    return SimResult(
        requests=n,
        completed=completed,
        rejected=n - completed,
        duration_s=workload.duration_s,
        span_s=span,
        throughput_rps=completed / span,
        latency=LatencyStats.of(lat),
        queue=LatencyStats.of(((run.req_start - workload.t_s) * 1000.0)[done]),
        batches=len(run.sizes),
        mean_batch=float(size_arr.mean()) if batched else 0.0,
        batch_counts={int(b): int(c) for b, c in enumerate(counts) if c},
        utilisation=busy_total / (instances * span),
        instances=instances,
        engine=engine,
        phases=_phase_results(workload, done, lat_all, np.array(run.starts), size_arr),
        priorities=_priorities(profile, run, done, lat_all),
        latencies_ms=lat if keep_latencies else None,
        rows=int(workload.rows.sum()) if workload.rows is not None else n,
        mean_batch_requests=float(np.mean(run.counts)) if batched else 0.0,
        rejected_full=int(np.sum(run.rej_kind == REJECTED_FULL)) if run.rej_kind is not None else 0,
        rejected_timeout=int(np.sum(timed_out)) if timed_out is not None else 0,
        rejection=(
            LatencyStats.of((run.rej_at[timed_out] - workload.t_s[timed_out]) * 1000.0)  # type: ignore[index]
            if timed_out is not None
            else None
        ),
        rejected_at_s=run.rej_at if keep_latencies else None,
    )


def _check(profile: Profile, workload: Workload, instances: int | None, seed: int,
           engine: str) -> tuple[int, str]:
    """Bad input as one line each; returns the instance count and the engine ``auto`` stands for."""
    check_seed(seed)
    if instances is None:
        instances = profile.instance_count or 1
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise ConfigError(f"instances = {instances!r}: must be an integer >= 1")
    if engine not in ENGINES:
        raise ConfigError(f"engine = {engine!r}: must be one of {', '.join(ENGINES)}")
    if workload.priority is not None:
        _level_map(profile, workload)  # a priority outside the profile's levels is bad input
    if workload.rows is not None and len(workload):
        too_big = np.flatnonzero(workload.rows > profile.max_batch_size)
        if too_big.shape[0]:
            j = int(too_big[0])
            raise ConfigError(
                f"rows = {int(workload.rows[j])} (request {j} of {workload.label}): must be <= "
                f"the profile's max_batch_size {profile.max_batch_size}; Triton refuses "
                f"larger requests"
            )
    needs_general = _needs_general(profile, workload)
    if engine in ("triton", "rules") and needs_general:
        raise ConfigError(
            f"engine = {engine!r}: does not model priority levels or queue policies "
            f"(Triton forms batches differently with them: no prefetch); use engine "
            f"'general' or 'auto'"
        )
    if engine == "auto":
        engine = "general" if needs_general else "triton"
    return instances, engine


@dataclass(frozen=True)
class _EngineRun:
    """What an engine returns, per batch and per request (NaN end: rejected)."""

    sizes: list[int]
    counts: list[int]
    """Requests per batch."""
    starts: list[float]
    ends: list[float]
    req_start: np.ndarray
    req_end: np.ndarray
    levels_of: np.ndarray | None = None
    """Each request's priority level (the ``general`` engine only)."""
    levels: Mapping[int, _Level] = field(default_factory=dict)
    rej_at: np.ndarray | None = None
    rej_kind: np.ndarray | None = None


def _run_engine(engine: str, profile: Profile, service: ServiceModel, workload: Workload,
                noise: list[float], instances: int) -> _EngineRun:
    rules = Rules.of(profile)
    svc = Service.of(service, profile.max_batch_size)
    t = workload.t_s.tolist()
    n = len(t)
    multi = workload.rows is not None and bool(np.any(workload.rows != 1))
    rows_list = workload.rows.tolist() if multi else None  # type: ignore[union-attr]
    if engine != "general":
        cum = prefix_rows(workload.rows, n) if multi else None
        run = run_triton if engine == "triton" else run_rules
        sizes, counts, starts, ends = run(t, rows_list, cum, rules, svc, noise, instances)
        count_arr = np.array(counts, dtype=np.int64)
        return _EngineRun(sizes, counts, starts, ends,
                          np.repeat(np.array(starts), count_arr), np.repeat(np.array(ends), count_arr))
    level_list, levels = _level_map(profile, workload)
    rows_all = rows_list if rows_list is not None else [1] * n
    (sizes, counts, starts, ends), req_start, req_end, _, rej_at, rej_kind = run_general(
        t, rows_all, level_list, levels, rules, svc, noise, instances
    )
    return _EngineRun(sizes, counts, starts, ends, req_start, req_end,
                      np.array(level_list, dtype=np.int64), levels, rej_at, rej_kind)


def _priorities(profile: Profile, run: _EngineRun, done: np.ndarray,
                lat_all: np.ndarray) -> tuple[PriorityResult, ...]:
    """Per priority level, when the profile has levels (the ``general`` engine ran)."""
    if run.levels_of is None or profile.priority_levels <= 0:
        return ()
    prio_rows = []
    for lv in sorted(run.levels):
        mask = run.levels_of == lv
        if not mask.any():
            continue
        ok = mask & done
        prio_rows.append(
            PriorityResult(
                level=lv,
                requests=int(mask.sum()),
                completed=int(ok.sum()),
                rejected=int(mask.sum() - ok.sum()),
                latency=LatencyStats.of(lat_all[ok]),
            )
        )
    return tuple(prio_rows)
