"""Optional client-side Prometheus metrics of the SDK's micro-batchers.

Off unless asked for: pass ``registry=`` to :class:`~autobatch.sdk.TritonBatchClient`
(or a :class:`BatcherMetrics` to :class:`~autobatch.sdk.MicroBatcher`). Every
series carries a ``batcher`` label (the Triton client uses the model name), so
several batchers can share one registry; the metric objects of a registry are
created once and shared.

======================================  =========  ======================================
name                                    type       labels, meaning
======================================  =========  ======================================
``autobatch_sdk_requests_total``        counter    ``outcome``: ok, failed, expired,
                                                   cancelled, rejected
``autobatch_sdk_batches_total``         counter    ``reason``: full, idle, delay, drain
``autobatch_sdk_batch_size``            histogram  size of each batch sent (rows)
``autobatch_sdk_queue_wait_seconds``    histogram  submit to send, per request
``autobatch_sdk_batch_seconds``         histogram  batch function time, per batch
``autobatch_sdk_queued_requests``       gauge      requests waiting to be sent
``autobatch_sdk_in_flight_batches``     gauge      batches sent and not back
======================================  =========  ======================================
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["BatcherMetrics"]

_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_TIME_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1.0, 2.5, 5.0, 10.0)

_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, BatcherMetrics] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


class BatcherMetrics:
    """The SDK's metric families on one registry. Use :meth:`for_registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        label = ["batcher"]
        self.requests = Counter(
            "autobatch_sdk_requests", "Requests by how they ended.", [*label, "outcome"],
            registry=registry,
        )
        self.batches = Counter(
            "autobatch_sdk_batches", "Batches sent, by why they were flushed.",
            [*label, "reason"], registry=registry,
        )
        self.batch_size = Histogram(
            "autobatch_sdk_batch_size", "Size of each batch sent (rows).", label,
            buckets=_SIZE_BUCKETS, registry=registry,
        )
        self.queue_wait = Histogram(
            "autobatch_sdk_queue_wait_seconds", "Time from submit to send, per request.", label,
            buckets=_TIME_BUCKETS, registry=registry,
        )
        self.batch_seconds = Histogram(
            "autobatch_sdk_batch_seconds", "Time the batch function took, per batch.", label,
            buckets=_TIME_BUCKETS, registry=registry,
        )
        self.queued = Gauge(
            "autobatch_sdk_queued_requests", "Requests waiting to be sent.", label,
            registry=registry,
        )
        self.in_flight = Gauge(
            "autobatch_sdk_in_flight_batches", "Batches sent and not yet answered.", label,
            registry=registry,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry) -> BatcherMetrics:
        """The one :class:`BatcherMetrics` of ``registry`` (registering twice would clash)."""
        with _SHARED_LOCK:
            found = _SHARED.get(registry)
            if found is None:
                found = _SHARED[registry] = cls(registry)
            return found

    def child(self, batcher: str) -> _BoundMetrics:
        return _BoundMetrics(self, batcher)


class _BoundMetrics:
    """The series of one batcher, with label lookups done once."""

    def __init__(self, metrics: BatcherMetrics, batcher: str) -> None:
        self._outcomes: dict[str, Any] = {}
        self._reasons: dict[str, Any] = {}
        self._metrics = metrics
        self._batcher = batcher
        self._size = metrics.batch_size.labels(batcher)
        self._wait = metrics.queue_wait.labels(batcher)
        self._seconds = metrics.batch_seconds.labels(batcher)
        self._queued = metrics.queued.labels(batcher)
        self._in_flight = metrics.in_flight.labels(batcher)

    def child(self, batcher: str) -> _BoundMetrics:
        return _BoundMetrics(self._metrics, batcher)

    def request_done(self, outcome: str) -> None:
        counter = self._outcomes.get(outcome)
        if counter is None:
            counter = self._outcomes[outcome] = self._metrics.requests.labels(
                self._batcher, outcome
            )
        counter.inc()

    def batch_sent(self, reason: str, size: int, waits_s: Sequence[float]) -> None:
        counter = self._reasons.get(reason)
        if counter is None:
            counter = self._reasons[reason] = self._metrics.batches.labels(self._batcher, reason)
        counter.inc()
        self._size.observe(size)
        for w in waits_s:
            self._wait.observe(max(0.0, w))

    def batch_done(self, seconds: float) -> None:
        self._seconds.observe(max(0.0, seconds))

    def set_queued(self, n: int) -> None:
        self._queued.set(n)

    def set_in_flight(self, n: int) -> None:
        self._in_flight.set(n)
