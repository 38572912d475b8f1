"""From what Triton's endpoints return to typed samples of one model. Pure: no I/O, no clock.

Two endpoints, two parsers:

* ``/metrics`` (Prometheus exposition text, parsed only with
  ``prometheus_client.parser.text_string_to_metric_families``) ->
  :class:`MetricsSample`: the model's cumulative counters, pending gauge and
  summary quantiles, summed over its versions (and devices, on a GPU server,
  where Triton adds a ``gpu_uuid`` label); plus accelerator utilisation when the
  text carries it.
* ``/v2/models/M/stats`` (JSON) -> :class:`StatsSample`: the same model's
  counts and its ``batch_stats`` table (executions and compute time per batch
  size), summed over versions.

Anything that is not what these endpoints produce raises
:class:`~autobatch.errors.ScrapeError` with reason ``malformed``, never a
library exception. A value that is present but NaN is kept as NaN here: the
window built from it is then marked stale, so the sample itself stays an
honest copy of what was read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from autobatch.config import Section
from autobatch.curve import BatchCurve
from autobatch.errors import ScrapeError

__all__ = [
    "COUNTERS",
    "MetricsSample",
    "StatsSample",
    "curve_from_batch_stats",
    "parse_metrics",
    "parse_instance_count",
    "parse_stats",
    "parse_utilization",
]

COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_request_duration_us",
)
"""The cumulative per-model counters a window is differenced from (all required)."""

FAILURES = "nv_inference_request_failure"
PENDING = "nv_inference_pending_request_count"
SUMMARY = "nv_inference_request_summary_us"
NV_GPU_UTIL = "nv_gpu_utilization"
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"

_UNKNOWN_REASON = "unknown"
"""Failure label when a server exports ``nv_inference_request_failure`` without ``reason``."""

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER", _UNKNOWN_REASON)
"""The ``reason`` labels of ``nv_inference_request_failure`` (Triton's four, and
``unknown`` for a server that exports the counter without the label)."""


def failure_reasons(sec: Section, key: str, value: Any) -> tuple[str, ...]:
    """A config's list of failure reasons (``policy.failure_reasons``), each one of
    :data:`FAILURE_REASONS`: a typo (``REJECTD``) would silently count nothing."""
    allowed = ", ".join(FAILURE_REASONS)
    if not isinstance(value, list):
        raise sec.fail(key, value, f"must be a list of Triton failure reasons ({allowed})")
    for i, r in enumerate(value):
        if r not in FAILURE_REASONS:
            raise sec.fail(f"{key}[{i}]", r, f"must be a Triton failure reason: {allowed}")
    return tuple(value)


@dataclass(frozen=True)
class MetricsSample:
    """One model's series in one scrape of ``/metrics``; values as read (NaN stays NaN)."""

    model: str
    counters: Mapping[str, float] = field(default_factory=dict)
    """Name in :data:`COUNTERS` -> value summed over versions; a name is absent if no series."""
    failures: Mapping[str, float] = field(default_factory=dict)
    """``reason`` label -> cumulative failed requests; empty if the family is absent."""
    pending: float | None = None
    """``nv_inference_pending_request_count`` summed over versions; None if absent."""
    p95_us: float | None = None
    """Summary quantile 0.95 (the highest over versions); None if absent or empty (NaN)."""
    p99_us: float | None = None
    utilization: float | None = None
    """Accelerator utilisation 0..1 found in the same text, or None."""


@dataclass(frozen=True)
class StatsSample:
    """One model's ``/v2/models/M/stats``, summed over versions."""

    model: str
    inference_count: int
    execution_count: int
    success_count: int
    batch_stats: tuple[tuple[int, int, int], ...] = ()
    """``(batch_size, executions, compute_infer ns)`` per batch size, ascending."""
    busy_ns: int = 0
    """Compute input + infer + output ns of every execution, all batch sizes: the time
    the model's instances were occupied by its batches (``batch_stats``, summed)."""

    def batch_stats_rows(self) -> list[dict[str, Any]]:
        """The rows in the endpoint's own shape, for :func:`curve_from_batch_stats`."""
        return [
            {"batch_size": b, "compute_infer": {"count": c, "ns": ns}}
            for b, c, ns in self.batch_stats
        ]


def _families(text: str, source: str) -> list[Any]:
    if not isinstance(text, str):
        raise ScrapeError(f"{source}: expected exposition text, got {type(text).__name__}",
                          reason="malformed")
    try:
        # The parser is lazy and raises whatever its string handling hits
        # (ValueError mostly, but also IndexError, KeyError, TypeError on odd
        # input), so the whole parse is the boundary.
        return list(text_string_to_metric_families(text))
    except Exception as exc:
        raise ScrapeError(
            f"{source}: not valid Prometheus exposition text: {_one_line(exc)}",
            reason="malformed",
        ) from exc


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _check_unique(seen: set[tuple[str, frozenset[tuple[str, str]]]], sample: Any, source: str) -> None:
    # The parser accepts a series twice; summing it twice would invent traffic.
    key = (sample.name, frozenset(sample.labels.items()))
    if key in seen:
        raise ScrapeError(
            f"{source}: series {sample.name}{dict(sample.labels)} appears twice in one scrape",
            reason="malformed",
        )
    seen.add(key)


def parse_metrics(
    text: str,
    model: str,
    *,
    version: str | None = None,
    source: str = "/metrics",
) -> MetricsSample:
    """The series of ``model`` (all versions, or only ``version``) in one ``/metrics`` scrape."""
    counters: dict[str, float] = {}
    failures: dict[str, float] = {}
    pending: float | None = None
    quantiles: dict[str, list[float]] = {"0.95": [], "0.99": []}
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    families = _families(text, source)
    for family in families:
        name = family.name
        if name not in COUNTERS and name not in (FAILURES, PENDING, SUMMARY):
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") != model:
                continue
            if version is not None and labels.get("version") != version:
                continue
            _check_unique(seen, sample, source)
            value = float(sample.value)
            if name in COUNTERS:
                counters[name] = counters.get(name, 0.0) + value
            elif name == FAILURES:
                reason = labels.get("reason", _UNKNOWN_REASON)
                failures[reason] = failures.get(reason, 0.0) + value
            elif name == PENDING:
                pending = (pending or 0.0) + value
            elif sample.name == SUMMARY:
                q = labels.get("quantile")
                if q in quantiles:
                    quantiles[q].append(value)
    return MetricsSample(
        model=model,
        counters=counters,
        failures=failures,
        pending=pending,
        p95_us=_worst(quantiles["0.95"]),
        p99_us=_worst(quantiles["0.99"]),
        utilization=_utilization(families),
    )


def _worst(values: list[float]) -> float | None:
    # A summary with no observation in its 60 s window reads NaN: that is "no
    # latency measured", not a number, so it becomes None rather than stale.
    finite = [v for v in values if math.isfinite(v) and v >= 0]
    return max(finite) if finite else None


def parse_utilization(text: str, *, source: str = "/metrics") -> float | None:
    """Accelerator utilisation 0..1 in exposition ``text``, or None if it holds none.

    ``nv_gpu_utilization`` (Triton, 0..1) wins over ``DCGM_FI_DEV_GPU_UTIL``
    (dcgm-exporter, percent). Several devices are averaged. Readings outside
    the metric's range or not finite are ignored, never clamped into a number.
    """
    return _utilization(_families(text, source))


def _utilization(families: list[Any]) -> float | None:
    nv: list[float] = []
    dcgm: list[float] = []
    for family in families:
        if family.name not in (NV_GPU_UTIL, DCGM_GPU_UTIL):
            continue
        for sample in family.samples:
            v = float(sample.value)
            if family.name == NV_GPU_UTIL and math.isfinite(v) and 0.0 <= v <= 1.0:
                nv.append(v)
            elif family.name == DCGM_GPU_UTIL and math.isfinite(v) and 0.0 <= v <= 100.0:
                dcgm.append(v / 100.0)
    values = nv or dcgm
    return sum(values) / len(values) if values else None


def parse_stats(
    data: Any,
    model: str,
    *,
    version: str | None = None,
    source: str = "/v2/models/M/stats",
) -> StatsSample:
    """``model``'s counts and batch table from the decoded JSON of the stats endpoint."""

    def bad(what: str) -> ScrapeError:
        return ScrapeError(f"{source}: {what}", reason="malformed")

    if not isinstance(data, Mapping) or not isinstance(data.get("model_stats"), list):
        raise bad("expected a JSON object with a 'model_stats' list")
    inference = execution = success = busy = 0
    table: dict[int, tuple[int, int]] = {}
    found = False
    for entry in data["model_stats"]:
        if not isinstance(entry, Mapping) or entry.get("name") != model:
            continue
        if version is not None and str(entry.get("version")) != version:
            continue
        found = True
        try:
            inference += _count(entry["inference_count"])
            execution += _count(entry["execution_count"])
            success += _count(entry["inference_stats"]["success"]["count"])
            for row in entry.get("batch_stats") or []:
                b = _count(row["batch_size"])
                infer = row["compute_infer"]
                c, ns = table.get(b, (0, 0))
                table[b] = (c + _count(infer["count"]), ns + _count(infer["ns"]))
                busy += _count(infer["ns"])
                # Input and output copies occupy the instance too; older servers
                # may leave them out, then the infer time alone counts.
                for part in ("compute_input", "compute_output"):
                    if row.get(part) is not None:
                        busy += _count(row[part]["ns"])
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"model {model!r}: unexpected entry shape ({_one_line(exc)})") from exc
    if not found:
        which = model if version is None else f"{model} version {version}"
        raise ScrapeError(
            f"{source}: no statistics for model {which!r}; is it loaded?",
            reason="missing_series",
        )
    return StatsSample(
        model=model,
        inference_count=inference,
        execution_count=execution,
        success_count=success,
        batch_stats=tuple((b, c, ns) for b, (c, ns) in sorted(table.items())),
        busy_ns=busy,
    )


def parse_instance_count(data: Any) -> int | None:
    """Execution instances of a model from the decoded JSON of ``/v2/models/M/config``.

    The sum of ``instance_group[].count``, times the number of GPUs a group
    lists (Triton places ``count`` instances on each). A group of kind GPU that
    lists no GPUs gets ``count`` on every visible GPU, which the config does
    not say: it counts once. None when the body has no instance groups.
    """
    if not isinstance(data, Mapping):
        return None
    groups = data.get("instance_group")
    if not isinstance(groups, list) or not groups:
        return None
    total = 0
    for g in groups:
        if not isinstance(g, Mapping):
            return None
        count = g.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return None
        gpus = g.get("gpus") or []
        total += count * max(1, len(gpus) if isinstance(gpus, list) else 1)
    return total or None


def _count(value: Any) -> int:
    # Triton writes counts as JSON integers; a bool or a float here means the
    # body is not what the endpoint produces.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"count = {value!r}: must be an integer >= 0")
    return value


def curve_from_batch_stats(
    after: Any,
    before: Any = None,
    *,
    name: str = "live",
    min_count: int = 1,
) -> BatchCurve | None:
    """The batch curve seen by live traffic, from ``/v2/models/M/stats`` ``batch_stats``.

    ``after`` (and optionally an earlier ``before``) are the ``batch_stats`` lists
    of one model. With ``before``, only the executions in between count. A batch
    size needs ``min_count`` executions to be a point. Returns None when no size
    qualifies. The time is ``compute_infer``: the model's own run time, without
    queueing, input copies or the client round trip.
    """

    def table(stats: Any) -> dict[int, tuple[int, int]]:
        rows: dict[int, tuple[int, int]] = {}
        for row in stats or []:
            infer = row.get("compute_infer") or {}
            rows[int(row["batch_size"])] = (int(infer.get("count", 0)), int(infer.get("ns", 0)))
        return rows

    now, then = table(after), table(before)
    points: dict[int, float] = {}
    for b, (count, ns) in now.items():
        c0, ns0 = then.get(b, (0, 0))
        dc, dns = count - c0, ns - ns0
        if dc >= min_count and dc > 0 and dns > 0:
            points[b] = dns / dc / 1e6
    if not points:
        return None
    return BatchCurve(points=points, name=name, meta={"source": "batch_stats"})
