"""What a simulated run produced: latencies, batches, per phase and per priority level."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autobatch.plan.simulator.workload import Workload
from autobatch.stats import LatencyStats  # shared with the sessions results (autobatch.sessions)

__all__ = ["LatencyStats", "PhaseResult", "PriorityResult", "SimResult"]


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
        return out


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
