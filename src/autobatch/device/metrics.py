"""What the emulated device exports on ``/metrics``: dcgm-exporter's names, then its own.

As dcgm-exporter on a GPU node (its ``etc/default-counters.csv`` and the
label set of its renderer: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``Hostname``):

* ``DCGM_FI_DEV_GPU_UTIL`` (gauge, integer percent): NVML's utilisation, the
  share of the last sample period during which one or more kernels ran. Here:
  the share of the last complete ``util_period_ms`` during which at least one
  job ran. Absent until the first period has passed (never a made-up 0).
* ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (gauge, ratio 0..1; a profiling field,
  not in the default counters): the share of time the graphics engine was
  active, over the same period, unrounded.

Neither says how much work ran: a device kept busy by batches of one reads
100% (docs/shared-gpu.md). The device's own series say that:

* ``autobatch_device_busy_seconds_total`` and ``autobatch_device_uptime_seconds``:
  busy time and the device's clock, exact, so that busy share over any window is
  d(busy) / d(uptime);
* by ``context``: ``autobatch_device_context_busy_seconds_total`` (its jobs' work done,
  in seconds of the device alone: its time holding the device under exclusive and
  timeslice), ``..._jobs_total``, ``..._items_total``, ``..._queued_jobs``;
* ``autobatch_device_answer_lateness_seconds`` (histogram): how long after a job's
  exact completion time its answer went out, the OS's wake-up delay: the
  device's own accuracy, live (a benchmark that runs several devices at once
  reads it to show they did not slow each other);
* ``autobatch_device_info{name, policy}`` = 1 and ``autobatch_device_contexts``.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

__all__ = ["LATENESS_BUCKETS_MS", "ContextSnapshot", "DeviceSnapshot", "Lateness", "dcgm_labels", "families"]

LATENESS_BUCKETS_MS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 100.0)
"""Upper bounds of the lateness histogram, ms (the last bucket is +Inf)."""


@dataclass(frozen=True)
class Lateness:
    """How late the answers went out after their jobs' exact completion times."""

    buckets: tuple[int, ...] = (0,) * (len(LATENESS_BUCKETS_MS) + 1)
    """Answers per bucket of :data:`LATENESS_BUCKETS_MS` (not cumulative; the last is +Inf)."""
    sum_ms: float = 0.0
    recent_ms: tuple[float, ...] = ()
    """The latest answers' lateness, for percentiles."""

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def to_dict(self) -> dict[str, Any]:
        recent = np.asarray(self.recent_ms) if self.recent_ms else None
        pct = {} if recent is None else {
            "recent_p50": round(float(np.percentile(recent, 50)), 4),
            "recent_p95": round(float(np.percentile(recent, 95)), 4),
            "recent_max": round(float(recent.max()), 4)}
        return {"count": self.count, "sum": round(self.sum_ms, 4), **pct}


@dataclass(frozen=True)
class ContextSnapshot:
    jobs: int = 0
    items: int = 0
    work_ms: float = 0.0
    queued: int = 0
    connections: int = 0


@dataclass(frozen=True)
class DeviceSnapshot:
    """The device's figures at one instant (taken under its lock)."""

    name: str
    policy: Mapping[str, Any]
    now_ms: float
    busy_ms: float
    util_period_ms: float
    util: float | None
    """Busy share of the last complete period, 0..1; None before the first one ended."""
    contexts: Mapping[str, ContextSnapshot] = field(default_factory=dict)
    lateness: Lateness = field(default_factory=Lateness)
    priority: str = "as started"
    """The process's CPU scheduling (:func:`autobatch.device.server.raise_priority`)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sharing": dict(self.policy),
            "priority": self.priority,
            "uptime_s": self.now_ms / 1000.0,
            "busy_s": self.busy_ms / 1000.0,
            "util_period_ms": self.util_period_ms,
            "gpu_util_percent": None if self.util is None else round(self.util * 100.0),
            "contexts": {c: {"jobs": s.jobs, "items": s.items, "busy_s": s.work_ms / 1000.0,
                             "queued": s.queued, "connections": s.connections}
                         for c, s in self.contexts.items()},
            "lateness_ms": self.lateness.to_dict(),
        }


def dcgm_labels(name: str, hostname: str | None = None) -> dict[str, str]:
    """dcgm-exporter's label set for this device; the UUID is stable for a device name."""
    return {
        "gpu": "0",
        "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, 'autobatch-device/' + name)}",
        "pci_bus_id": "00000000:00:00.0",
        "device": "nvidia0",
        "modelName": f"autobatch emulated GPU {name}",
        "Hostname": hostname if hostname is not None else socket.gethostname(),
    }


def families(snap: DeviceSnapshot, labels: Mapping[str, str]) -> Iterator[Metric]:
    """The exposition of one snapshot, as prometheus_client metric families."""
    keys, values = list(labels), list(labels.values())
    if snap.util is not None:
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=keys)
        util.add_metric(values, float(round(snap.util * 100.0)))
        yield util
        gr = GaugeMetricFamily("DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                               "Ratio of time the graphics engine is active.", labels=keys)
        gr.add_metric(values, snap.util)
        yield gr
    info = GaugeMetricFamily("autobatch_device_info", "The emulated device: its name and sharing policy.",
                             labels=["name", "policy"])
    info.add_metric([snap.name, str(snap.policy.get("policy", ""))], 1.0)
    yield info
    yield GaugeMetricFamily("autobatch_device_uptime_seconds",
                            "The device's clock: seconds since it started.", value=snap.now_ms / 1000.0)
    yield CounterMetricFamily("autobatch_device_busy_seconds",
                              "Seconds during which at least one job ran.", value=snap.busy_ms / 1000.0)
    yield GaugeMetricFamily("autobatch_device_util_period_seconds",
                            "The sample period of DCGM_FI_DEV_GPU_UTIL.", value=snap.util_period_ms / 1000.0)
    yield GaugeMetricFamily("autobatch_device_contexts", "Contexts that ever connected.",
                            value=float(len(snap.contexts)))
    busy = CounterMetricFamily("autobatch_device_context_busy_seconds",
                               "Work done by the context's jobs, in seconds of the device alone.",
                               labels=["context"])
    jobs = CounterMetricFamily("autobatch_device_context_jobs", "Jobs completed.", labels=["context"])
    items = CounterMetricFamily("autobatch_device_context_items", "Items in the completed jobs.",
                                labels=["context"])
    queued = GaugeMetricFamily("autobatch_device_context_queued_jobs", "Jobs queued or running.",
                               labels=["context"])
    for ctx, s in sorted(snap.contexts.items()):
        busy.add_metric([ctx], s.work_ms / 1000.0)
        jobs.add_metric([ctx], float(s.jobs))
        items.add_metric([ctx], float(s.items))
        queued.add_metric([ctx], float(s.queued))
    yield from (busy, jobs, items, queued)
    cumulative, running = [], 0
    for le, n in zip((*LATENESS_BUCKETS_MS, float("inf")), snap.lateness.buckets):
        running += n
        cumulative.append(("+Inf" if le == float("inf") else f"{le / 1000.0:g}", running))
    yield HistogramMetricFamily("autobatch_device_answer_lateness_seconds",
                                "How long after its job's exact completion time an answer went out.",
                                buckets=cumulative, sum_value=snap.lateness.sum_ms / 1000.0)
