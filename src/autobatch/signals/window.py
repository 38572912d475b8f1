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

Each signal lags differently (what it costs to decide on it: docs/signals.md,
"Each signal, and what it costs in delay"): differenced counters by one window;
Triton's summary quantiles (``p95_ms``/``p99_ms``) span a sliding 60 s, so right
after a switch they still hold up to a minute of the old profile;
``utilization`` refreshes only with Triton's metrics polling interval.

A stale window (``stale=True``) is a record that something went wrong, not a
measurement: its rates and means are left at their defaults and must not be
read. ``stale_reason`` is one of :class:`StaleReason` (a machine reason, fit
for a metric label) and ``stale_detail`` a sentence for the log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from autobatch.errors import short_repr

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
    """The two samples are not in time order (the wall clock stepped back), or the wall clock
    moved further than the monotonic one between them (it stepped forward, or the machine
    paused): the window's rates would divide by the wrong time. In fleet mode: this clock
    reads far from Prometheus's, so the queries evaluated at it would read another time."""
    UNREACHABLE = "unreachable"
    """An endpoint refused the connection, timed out or answered with an HTTP error."""
    MALFORMED = "malformed"
    """An endpoint answered with text that is not valid exposition format or JSON."""
    TOO_LARGE = "too_large"
    """An endpoint sent more than ``signals.max_scrape_bytes``: it is broken or hostile."""
    FORBIDDEN = "forbidden"
    """Triton refused a restricted API (statistics, model-config) without its key
    (``triton.restricted_api``, :mod:`autobatch.access`)."""


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
    utilization_detail: str | None = None
    """Why ``utilization`` is None although a source for it was given (dcgm-exporter did not
    answer, or answered without DCGM_FI_DEV_GPU_UTIL): ``REASON: sentence``, REASON a
    :class:`StaleReason` value. The rest of the window stays good: the model's own signals
    do not depend on the device's exporter."""

    device_ms_per_request: float | None = None
    """Device time per inference: the compute time of the window's executions over the
    items they served (``batch_stats`` compute_infer / d nv_inference_count). What a
    batching profile saves: batch 8 in 10 ms costs 1.25 ms per request, batch 1 in 5 ms
    costs 5. From Prometheus, which carries no ``batch_stats``, it is approximated by
    mean compute ms / mean batch size (exact when the batches are of one size).
    None without executions."""
    busy_instances: float | None = None
    """Instance-seconds of compute per second: how many of the model's instances were
    busy on average (compute input + infer + output of every execution / dt)."""
    instance_count: int | None = None
    """The model's execution instances (from its config), summed over replicas; None
    when unknown."""
    busy_share: float | None = None
    """``busy_instances / instance_count``: the share of wall time the instances spend
    computing, 0..1 (a little over 1 is measurement skew). Near 1 the profile is at its
    capacity on this machine, whatever the batch curve says. None when either is unknown."""

    stretch: float | None = None
    """How much longer the window's batches ran than the reference curve (``policy.curve``)
    says they take with the device to themselves: their compute time over the curve's time
    for the same batch sizes (``batch_stats``). 1: the device was the model's; 3: each batch
    took three times its curve time, others (co-tenants, the model's other instances) held
    the device the rest. None without a curve, without ``batch_stats`` or without executions
    (:mod:`autobatch.signals.stretch`)."""
    own_device_share: float | None = None
    """The model's own work on the device, in the device's own time: the curve's time of the
    window's executions over the window (0..1 of one device). What the utilisation would
    read with the device to the model. None without a curve."""
    others_share: float | None = None
    """The share of the device others used: ``utilization - own_device_share``, at least 0.
    Near 0 the device is the model's and a stretch is its own instances' (its load rose);
    above, the device is shared. None without a utilisation signal or a curve."""

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

    @property
    def arrival_rps(self) -> float:
        """Items arriving per second: completions plus the backlog's growth.

        Triton counts a request when it completes, so under overload the completion
        rate is capped at capacity; the growth of ``pending_requests`` is the rest of
        the demand. A shrinking backlog lowers it (more completed than arrived).
        """
        grow = (self.pending_delta or 0.0) / max(self.interval_s, 1e-9)
        return max(0.0, self.inference_rps + grow)

    def with_instance_count(self, count: int | None) -> Window:
        """This window with ``instance_count`` set and ``busy_share`` derived from it."""
        if count is None or count <= 0:
            return replace(self, instance_count=None, busy_share=None)
        share = None if self.busy_instances is None else self.busy_instances / count
        return replace(self, instance_count=int(count), busy_share=share)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; this is one line of ``autobatch watch --json``."""
        d = asdict(self)
        d["interval_s"] = self.interval_s
        d["request_rps"] = self.request_rps
        d["arrival_rps"] = self.arrival_rps
        d["batch_curve_ms"] = {str(k): v for k, v in self.batch_curve_ms.items()}
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "") -> Window:
        """Inverse of :meth:`to_dict` (derived fields are ignored); used by replay.

        A trace is input: a field of the wrong type, or a number that is NaN or
        infinite, is a ``ValueError`` saying ``FIELD = VALUE: what is allowed``, the
        field prefixed with ``path`` (``window.p95_ms``); a missing field a ``KeyError``.
        """
        prefix = f"{path}." if path else ""
        if not isinstance(data, Mapping):
            raise ValueError(
                f"{path or 'window'} = {short_repr(data)}: must be a JSON object of window fields"
            )
        missing = [k for k in ("model", "start_s", "end_s") if k not in data]
        if missing:
            raise KeyError(f"{prefix}{missing[0]}")
        kwargs: dict[str, Any] = {}
        for name, f in cls.__dataclass_fields__.items():
            if name not in data:
                continue
            kind = str(f.type)
            v = data[name]
            if v is None and (kind.endswith("| None") or kind.startswith("Mapping")):
                if not kind.startswith("Mapping"):
                    kwargs[name] = None
                continue
            if kind.startswith("Mapping"):
                kwargs[name] = _mapping(v, f"{prefix}{name}", int_keys=kind == "Mapping[int, float]")
            elif kind.startswith("float"):
                kwargs[name] = _finite(v, f"{prefix}{name}", kind)
            elif kind.startswith("int"):
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ValueError(f"{prefix}{name} = {short_repr(v)}: must be an integer or null")
                kwargs[name] = v
            elif kind == "bool":
                if not isinstance(v, bool):
                    raise ValueError(f"{prefix}{name} = {short_repr(v)}: must be true or false")
                kwargs[name] = v
            else:  # str, str | None
                if not isinstance(v, str):
                    allowed = "a string or null" if kind.endswith("| None") else "a string"
                    raise ValueError(f"{prefix}{name} = {short_repr(v)}: must be {allowed}")
                kwargs[name] = v
        return cls(**kwargs)


def _finite(v: Any, field: str, kind: str = "float") -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        allowed = "a finite number or null" if kind.endswith("| None") else "a finite number"
        raise ValueError(f"{field} = {short_repr(v)}: must be {allowed}")
    return float(v)


def _mapping(v: Any, field: str, *, int_keys: bool) -> dict[Any, float]:
    """``failure_rps`` (reason: rate) or ``batch_curve_ms`` (batch size: ms)."""
    what = "batch size" if int_keys else "reason"
    if not isinstance(v, Mapping):
        raise ValueError(f"{field} = {short_repr(v)}: must be a JSON object of {what}: number")
    out: dict[Any, float] = {}
    for k, x in v.items():
        key: Any = k
        if int_keys:
            try:
                key = int(k)
            except (TypeError, ValueError):
                key = None
            if isinstance(k, bool) or key is None or key < 1:
                raise ValueError(f"{field} = {short_repr(v)}: keys must be batch sizes (integers >= 1)")
        elif not isinstance(k, str):
            raise ValueError(f"{field} = {short_repr(v)}: keys must be strings")
        out[key] = _finite(x, f"{field}[{k!r}]")
    return out
