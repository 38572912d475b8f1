"""``Window``: what one model did between two metric samples.

This is the contract between the signal sources (Triton ``/metrics`` and
``/v2/models/M/stats``, Prometheus) and everything downstream: the policy, the
controller's own metrics and status, ``autobatch watch --json`` traces and
``autobatch replay``. Every field is derived from differenced cumulative
counters, except ``pending_requests`` (a gauge), the summary quantiles
(``p95_ms``/``p99_ms``, which lag: see below) and ``utilization``.

A value that could not be measured is ``None``, never a made-up 0: no
completed request means no mean queue time, a CPU-only server means no
accelerator utilisation.

Lag of each signal (what it costs to decide on it):

* differenced counters (rates, means, batch size): one window. Triton updates
  them when a response completes, so a request still queued is not in them;
  ``pending_requests`` is.
* ``p95_ms``/``p99_ms``: Triton's ``*_summary_us`` quantiles come from a
  prometheus-cpp summary over a sliding 60 s window (five 12 s buckets). Right
  after a profile switch they still hold up to a minute of the old profile.
* ``utilization``: ``nv_gpu_utilization`` is refreshed every
  ``--metrics-interval-ms`` (2 s by default).

A stale window (``stale=True``) is a record that something went wrong, not a
measurement: its rates and means are left at their defaults and must not be
read. ``stale_reason`` is one of :class:`StaleReason` (a machine reason, fit
for a metric label) and ``stale_detail`` a sentence for the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = ["StaleReason", "Window"]


class StaleReason(str, Enum):
    """Why a window must not be acted on. Stored in ``Window.stale_reason`` as the plain value."""

    COUNTER_RESET = "counter_reset"
    """A cumulative counter went down: the server restarted or the model was reloaded."""
    TOO_OLD = "too_old"
    """The newest data in the window is older than the configured maximum age."""
    MISSING_SERIES = "missing_series"
    """A series needed for the window is absent (model unloaded, partial scrape)."""
    NOT_FINITE = "not_finite"
    """A counter or gauge read NaN or infinite."""
    BAD_INTERVAL = "bad_interval"
    """The two samples are not in time order (the wall clock stepped back)."""
    UNREACHABLE = "unreachable"
    """An endpoint refused the connection, timed out or answered with an HTTP error."""
    MALFORMED = "malformed"
    """An endpoint answered with text that is not valid exposition format or JSON."""


@dataclass(frozen=True)
class Window:
    """One model's behaviour between two samples. Times are wall-clock epoch seconds."""

    model: str
    start_s: float
    """Wall-clock time of the earlier sample."""
    end_s: float
    """Wall-clock time of the later sample."""

    success_rps: float = 0.0
    """Successful requests per second (d nv_inference_request_success / dt)."""
    failure_rps: Mapping[str, float] = field(default_factory=dict)
    """Failed requests per second by Triton's ``reason`` label (REJECTED, CANCELED, BACKEND, OTHER)."""
    inference_rps: float = 0.0
    """Items per second (d nv_inference_count / dt); > success_rps when requests carry batches."""
    exec_rps: float = 0.0
    """Model executions (batches) per second (d nv_inference_exec_count / dt)."""

    mean_batch_size: float | None = None
    """d(nv_inference_count) / d(nv_inference_exec_count); None without executions."""
    mean_queue_ms: float | None = None
    """Mean time a request waited in the scheduler queue; None without completions."""
    mean_compute_ms: float | None = None
    """Mean compute (infer) time of the batch a request ran in; None without completions."""
    mean_request_ms: float | None = None
    """Mean end-to-end server-side request time; None without completions."""
    pending_requests: float | None = None
    """Requests queued at the end of the window (gauge)."""
    pending_delta: float | None = None
    """Change of the pending gauge over the window (growing backlog when > 0)."""

    p95_ms: float | None = None
    """Server-side request latency p95 from the summary quantiles (lags up to 60 s)."""
    p99_ms: float | None = None
    """Server-side request latency p99 from the summary quantiles (lags up to 60 s)."""

    batch_curve_ms: Mapping[int, float] = field(default_factory=dict)
    """Compute ms per batch size, from the executions in this window (batch_stats delta)."""
    utilization: float | None = None
    """Accelerator utilisation 0..1, or None when no such signal exists."""

    stale: bool = False
    """True when the window must not be acted on (too old, counter reset, partial data)."""
    stale_reason: str | None = None
    """Why the window is stale: a :class:`StaleReason` value ('counter_reset', 'too_old', ...)."""
    source: str = "triton"
    """Which source built it: 'triton' or 'prometheus'."""
    stale_detail: str | None = None
    """A sentence saying what made the window stale (which counter fell, which series is
    missing, what the endpoint answered); None for a good window."""

    def age_s(self, now_s: float) -> float:
        """How long ago, at wall-clock ``now_s``, the newest data in the window was measured."""
        return now_s - self.end_s

    def aged(self, now_s: float, max_age_s: float | None) -> Window:
        """This window, marked stale (``too_old``) if its data is older than ``max_age_s``.

        ``None`` turns the check off. An already stale window keeps its first reason.
        """
        if max_age_s is None or self.stale or self.age_s(now_s) <= max_age_s:
            return self
        return replace(
            self,
            stale=True,
            stale_reason=StaleReason.TOO_OLD.value,
            stale_detail=(
                f"the newest data is {self.age_s(now_s):.1f} s old, more than the "
                f"{max_age_s:g} s allowed"
            ),
        )

    @property
    def interval_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def request_rps(self) -> float:
        """Completed requests per second, successful or not."""
        return self.success_rps + sum(self.failure_rps.values())

    @property
    def failures_rps(self) -> float:
        return sum(self.failure_rps.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; this is one line of ``autobatch watch --json``."""
        d = asdict(self)
        d["interval_s"] = self.interval_s
        d["request_rps"] = self.request_rps
        d["batch_curve_ms"] = {str(k): v for k, v in self.batch_curve_ms.items()}
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Window:
        """Inverse of :meth:`to_dict` (derived fields are ignored); used by replay."""
        names = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "batch_curve_ms" in kwargs and kwargs["batch_curve_ms"] is not None:
            kwargs["batch_curve_ms"] = {int(k): float(v) for k, v in kwargs["batch_curve_ms"].items()}
        if kwargs.get("failure_rps") is None:
            kwargs["failure_rps"] = {}
        if kwargs.get("batch_curve_ms") is None:
            kwargs["batch_curve_ms"] = {}
        return cls(**kwargs)
