"""What a simulated run produced: latencies, batches, per phase and per priority level."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autobatch.plan.simulator.workload import Workload
from autobatch.stats import LatencyStats  # shared with the sessions results (autobatch.sessions)

__all__ = [
    "CoTenantResult",
    "DevicePhase",
    "DeviceShare",
    "LatencyStats",
    "PhaseResult",
    "PriorityResult",
    "SimResult",
    "device_ms_per_request",
]


def _latency_dict(stats: LatencyStats | None) -> dict[str, float] | None:
    return None if stats is None else stats.to_dict()


@dataclass(frozen=True)
class PhaseResult:
    name: str
    requests: int
    completed: int
    rejected: int
    throughput_rps: float
    latency: LatencyStats | None
    mean_batch: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "requests": self.requests,
            "completed": self.completed,
            "rejected": self.rejected,
            "throughput_rps": round(self.throughput_rps, 3),
            "latency_ms": _latency_dict(self.latency),
            "mean_batch": round(self.mean_batch, 3),
        }


@dataclass(frozen=True)
class PriorityResult:
    level: int
    requests: int
    completed: int
    rejected: int
    latency: LatencyStats | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "requests": self.requests,
            "completed": self.completed,
            "rejected": self.rejected,
            "latency_ms": _latency_dict(self.latency),
        }


@dataclass(frozen=True)
class DevicePhase:
    """The shared device in one phase of the schedule."""

    name: str
    start_s: float
    duration_s: float
    busy_share: float
    """Share of the phase some job ran on the device (what DCGM_FI_DEV_GPU_UTIL reads)."""
    by_tenant: Mapping[str, float]
    """Each tenant's device work (ms of the device alone) over the phase's time."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start_s": round(self.start_s, 6),
            "duration_s": round(self.duration_s, 6),
            "busy_share": round(self.busy_share, 4),
            "by_tenant": {k: round(v, 4) for k, v in self.by_tenant.items()},
        }


@dataclass(frozen=True)
class DeviceShare:
    """How the one shared device was used over a run (:mod:`autobatch.sharing`)."""

    sharing: Mapping[str, Any]
    """The sharing model (``SharingModel.to_dict``)."""
    span_s: float
    """From 0 to the later of the end of the arrivals and the device's last completion."""
    busy_share: float
    """Share of the span some job ran on the device."""
    by_tenant: Mapping[str, float]
    """Device work over the span, per tenant: each model (all its instances) and each
    co-tenant job. Work is what the jobs take with the device to themselves, so the
    shares add up to the busy share when nothing is stretched by a context switch."""
    by_context: Mapping[str, float]
    """The same per context: each instance (``model/0``, ``model/1``, ...) and co-tenant."""
    model: str
    """The tenant this result's model is."""
    model_work_ms: float
    """This model's device work in ms (its batches' curve times, noise included)."""
    phases: tuple[DevicePhase, ...] = ()

    @property
    def model_share(self) -> float:
        return self.by_tenant.get(self.model, 0.0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sharing": dict(self.sharing),
            "span_s": round(self.span_s, 6),
            "busy_share": round(self.busy_share, 4),
            "model": self.model,
            "model_share": round(self.model_share, 4),
            "model_work_ms": round(self.model_work_ms, 3),
            "by_tenant": {k: round(v, 4) for k, v in self.by_tenant.items()},
            "by_context": {k: round(v, 4) for k, v in self.by_context.items()},
        }
        if self.phases:
            out["phases"] = [p.to_dict() for p in self.phases]
        return out


@dataclass(frozen=True)
class CoTenantResult:
    """What one co-tenant job got from the shared device."""

    name: str
    batch_size: int
    demand: str
    """What it asks for: ``duty 0.9`` (closed loop) or ``40 batches/s`` (open loop)."""
    work_ms: float
    """One of its batches with the device to itself (its curve at its batch size)."""
    batches: int
    """Batches completed."""
    active_s: float
    """How long it was active within the run (its windows up to the end of the arrivals)."""
    throughput_bps: float
    """Batches completed per active second."""
    latency: LatencyStats | None
    """Submit to completion of each batch (its wait for the device included), ms."""
    run: LatencyStats | None
    """First run to completion of each batch: its batch time stretched by the sharing, ms."""
    share: float
    """Its device work over the device's span (its part of ``DeviceShare.by_tenant``)."""

    @property
    def items_per_s(self) -> float:
        return self.throughput_bps * self.batch_size

    @property
    def busy_share(self) -> float:
        """Its device work over its active time: the share of the device it got while it ran
        (its duty when alone and closed loop)."""
        return self.batches * self.work_ms / 1000.0 / self.active_s if self.active_s > 0 else 0.0

    @property
    def stretch(self) -> float | None:
        """Median time of a batch on the device over its time alone (1: not stretched)."""
        return None if self.run is None else self.run.p50_ms / self.work_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "batch_size": self.batch_size,
            "demand": self.demand,
            "work_ms": round(self.work_ms, 4),
            "batches": self.batches,
            "active_s": round(self.active_s, 6),
            "throughput_bps": round(self.throughput_bps, 3),
            "items_per_s": round(self.items_per_s, 3),
            "busy_share": round(self.busy_share, 4),
            "stretch": None if self.stretch is None else round(self.stretch, 3),
            "latency_ms": _latency_dict(self.latency),
            "run_ms": _latency_dict(self.run),
            "share": round(self.share, 4),
        }


@dataclass(frozen=True)
class SimResult:
    """What one simulated run produced. Latencies are arrival to completion plus
    the service model's fixed latency; queue times are arrival to batch start."""

    requests: int
    completed: int
    rejected: int
    duration_s: float
    span_s: float
    """From 0 to the later of the workload's end and the last completion."""
    throughput_rps: float
    """Completed requests per second of the span."""
    latency: LatencyStats | None
    queue: LatencyStats | None
    batches: int
    mean_batch: float
    batch_counts: Mapping[int, int]
    utilisation: float
    """Busy instance time over ``instances * span``."""
    instances: int
    engine: str
    """Which engine ran: ``triton``, ``rules`` or ``general`` (see :func:`simulate`)."""
    phases: tuple[PhaseResult, ...] = ()
    priorities: tuple[PriorityResult, ...] = ()
    latencies_ms: np.ndarray | None = field(default=None, repr=False, compare=False)
    rows: int = 0
    """Rows of all requests (a request's batch dimension); ``mean_batch`` and
    ``batch_counts`` count rows, as Triton's batch sizes do."""
    mean_batch_requests: float = 0.0
    """Requests per batch (equal to ``mean_batch`` when every request is one row)."""
    rejected_full: int = 0
    """Refused at arrival: the priority level's queue held ``max_queue_size`` requests."""
    rejected_timeout: int = 0
    """Rejected in the queue when their queue policy's timeout ran out."""
    rejection: LatencyStats | None = None
    """Arrival to rejection of the timed-out requests (Triton's answer comes then)."""
    rejected_at_s: np.ndarray | None = field(default=None, repr=False, compare=False)
    """Per request, when it was rejected (NaN if it was not); ``keep_latencies`` only,
    general engine only."""
    device: DeviceShare | None = None
    """On a shared device (``simulate(..., sharing=..., cotenants=...)``): how the device
    was used. None when every instance has a device of its own."""
    cotenants: tuple[CoTenantResult, ...] = ()
    """On a shared device: what each co-tenant job got."""

    @property
    def offered_rps(self) -> float:
        return self.requests / self.duration_s

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests,
            "completed": self.completed,
            "rejected": self.rejected,
            "duration_s": round(self.duration_s, 6),
            "offered_rps": round(self.offered_rps, 3),
            "throughput_rps": round(self.throughput_rps, 3),
            "latency_ms": _latency_dict(self.latency),
            "queue_ms": _latency_dict(self.queue),
            "rows": self.rows,
            "batches": self.batches,
            "mean_batch": round(self.mean_batch, 3),
            "mean_batch_requests": round(self.mean_batch_requests, 3),
            "batch_counts": {str(k): v for k, v in sorted(self.batch_counts.items())},
            "utilisation": round(self.utilisation, 4),
            "instances": self.instances,
            "engine": self.engine,
            "rejected_queue_full": self.rejected_full,
            "rejected_timeout": self.rejected_timeout,
            "rejection_ms": _latency_dict(self.rejection),
        }
        if self.phases:
            out["phases"] = [p.to_dict() for p in self.phases]
        if self.priorities:
            out["priorities"] = [p.to_dict() for p in self.priorities]
        if self.device is not None:
            out["device"] = self.device.to_dict()
            out["cotenants"] = [c.to_dict() for c in self.cotenants]
        return out


def device_ms_per_request(result: SimResult) -> float:
    """Device milliseconds per completed request: on a shared device the model's own
    device work (what sharing stretches is not work it asked for), else the busy
    instance time (each instance its own device). NaN when nothing completed."""
    if result.completed == 0:
        return math.nan
    if result.device is not None:
        return result.device.model_work_ms / result.completed
    return result.utilisation * result.instances * result.span_s * 1000.0 / result.completed


def _phase_results(
    workload: Workload,
    done: np.ndarray,
    lat_all: np.ndarray,
    batch_starts: np.ndarray,
    batch_sizes: np.ndarray,
) -> tuple[PhaseResult, ...]:
    if workload.phase is None or len(workload.phase_names) < 2:
        return ()
    out = []
    for i, name in enumerate(workload.phase_names):
        mask = workload.phase == i
        ok = mask & done
        start = workload.phase_starts_s[i]
        dur = workload.phase_durations_s[i]
        in_phase = (batch_starts >= start) & (batch_starts < start + dur)
        out.append(
            PhaseResult(
                name=name,
                requests=int(mask.sum()),
                completed=int(ok.sum()),
                rejected=int(mask.sum() - ok.sum()),
                throughput_rps=float(ok.sum()) / dur,
                latency=LatencyStats.of(lat_all[ok]),
                mean_batch=float(batch_sizes[in_phase].mean()) if in_phase.any() else 0.0,
            )
        )
    return tuple(out)
