"""What a load run produced: one record per request, and per-phase statistics.

Pure: turning records into statistics reads no clock and does no I/O, apart
from :func:`write_jsonl`, which writes the records where it is told to.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from autobatch.schedule import Schedule

__all__ = [
    "OK",
    "BehindLimits",
    "LoadReport",
    "PhaseStats",
    "RequestRecord",
    "summarize",
    "write_jsonl",
]

OK = "ok"
"""The outcome of a request that succeeded; anything else is a failure kind."""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request of a run. Offsets are seconds from the start of the schedule."""

    index: int
    """Position in the arrival order."""
    phase: str
    phase_index: int
    scheduled_s: float
    """When the schedule said to send it."""
    sent_s: float | None
    """When the generator handed it to the client library; None if it never did."""
    latency_ms: float | None
    """Send to response (or error); None if it never finished."""
    outcome: str
    """``ok``, or a failure kind: a gRPC status name (``UNAVAILABLE``, ``NOT_FOUND``, ...;
    HTTP status codes are mapped onto the same names), ``REJECTED`` (Triton's queue
    was full or the request timed out in it), ``timeout`` (the client's per-request
    timeout), ``unfinished`` (still running when the run's drain timeout ended) or
    ``unsent`` (the generator was so far behind that the run ended first)."""
    error: str | None = None
    """The server's or client's message, for failures."""
    rows: int = 1
    """The request's batch dimension."""
    priority: int = 0
    """Triton's request priority (0: the model's default level)."""

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    @property
    def lag_ms(self) -> float | None:
        """How late the generator sent it."""
        if self.sent_s is None:
            return None
        return (self.sent_s - self.scheduled_s) * 1000.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "phase": self.phase,
            "scheduled_s": round(self.scheduled_s, 6),
            "sent_s": None if self.sent_s is None else round(self.sent_s, 6),
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 3),
            "outcome": self.outcome,
            "error": self.error,
            "rows": self.rows,
            "priority": self.priority,
        }


@dataclass(frozen=True)
class BehindLimits:
    """When the generator counts as behind its schedule (its numbers then understate
    the offered load, and the report says so)."""

    max_lag_p99_ms: float = 5.0
    """Send lag p99 above this is behind. asyncio timers wake up to ~1 ms late on
    Linux, so a healthy run sits well under 5 ms; set it to ``math.inf`` to turn
    the check off."""
    min_rate_ratio: float = 0.95
    """Sent rate below this fraction of the scheduled rate is behind; 0 turns it off."""


@dataclass(frozen=True)
class PhaseStats:
    """Statistics of one phase (or of the whole run, for :attr:`LoadReport.total`)."""

    name: str
    target_rps: float
    """The schedule's rate."""
    duration_s: float
    """How long the phase ran: its scheduled duration, less if the run was stopped in it."""
    scheduled: int
    """Arrivals drawn for the part of the phase that ran."""
    sent: int
    ok: int
    achieved_rps: float
    """Requests sent per second of the phase. If the generator lagged past the end of
    the phase, the time it took counts too, so lagging lowers this."""
    throughput_rps: float
    """Successful requests per second, over the same time."""
    p50_ms: float | None
    """Latency quantiles of the successful requests; None without any."""
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    failures: Mapping[str, int]
    """Failure kind -> count, most frequent first."""
    lag_p50_ms: float | None
    """How late requests were sent, in ms (see :attr:`RequestRecord.lag_ms`)."""
    lag_p99_ms: float | None
    lag_max_ms: float | None
    behind: bool
    """The generator could not keep to the schedule (see :class:`BehindLimits`)."""
    behind_reason: str | None = None

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target_rps": _r(self.target_rps),
            "duration_s": _r(self.duration_s),
            "scheduled": self.scheduled,
            "sent": self.sent,
            "ok": self.ok,
            "failed": self.failed,
            "achieved_rps": _r(self.achieved_rps),
            "throughput_rps": _r(self.throughput_rps),
            "p50_ms": _r(self.p50_ms),
            "p95_ms": _r(self.p95_ms),
            "p99_ms": _r(self.p99_ms),
            "max_ms": _r(self.max_ms),
            "failures": dict(self.failures),
            "lag_p50_ms": _r(self.lag_p50_ms),
            "lag_p99_ms": _r(self.lag_p99_ms),
            "lag_max_ms": _r(self.lag_max_ms),
            "behind": self.behind,
            "behind_reason": self.behind_reason,
        }


@dataclass(frozen=True)
class LoadReport:
    """The result of one load run."""

    url: str
    model: str
    protocol: str
    seed: int
    batch_size: int
    timeout_s: float
    schedule: Schedule
    phases: tuple[PhaseStats, ...]
    total: PhaseStats
    """The whole run as one phase."""
    records: tuple[RequestRecord, ...] = field(repr=False)
    """Every request, in arrival order."""
    elapsed_s: float
    """From the first scheduled send to the end of the drain."""
    stopped: bool = False
    """The run was ended early through its stop flag."""

    @property
    def behind(self) -> bool:
        return self.total.behind or any(p.behind for p in self.phases)

    @property
    def failures(self) -> Mapping[str, int]:
        return self.total.failures

    @property
    def warnings(self) -> tuple[str, ...]:
        """One sentence per phase in which the generator fell behind."""
        out = []
        for p in self.phases:
            if p.behind:
                out.append(
                    f"phase {p.name!r}: the load generator fell behind its schedule "
                    f"({p.behind_reason}); requests went out later than planned, so the "
                    f"server saw a gentler load than the schedule describes"
                )
        if not out and self.total.behind:
            out.append(f"the load generator fell behind its schedule ({self.total.behind_reason})")
        return tuple(out)

    def to_dict(self, *, records: bool = False) -> dict[str, Any]:
        """JSON-ready form; ``records=True`` adds every request."""
        d: dict[str, Any] = {
            "url": self.url,
            "model": self.model,
            "protocol": self.protocol,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "timeout_s": self.timeout_s,
            "elapsed_s": _r(self.elapsed_s),
            "stopped": self.stopped,
            "behind": self.behind,
            "warnings": list(self.warnings),
            "schedule": self.schedule.to_dict(),
            "phases": [p.to_dict() for p in self.phases],
            "total": self.total.to_dict(),
        }
        if records:
            d["records"] = [r.to_dict() for r in self.records]
        return d


def summarize(
    schedule: Schedule,
    records: Sequence[RequestRecord],
    *,
    ran_s: float | None = None,
    limits: BehindLimits = BehindLimits(),
) -> tuple[tuple[PhaseStats, ...], PhaseStats]:
    """Per-phase statistics and the total, from the records of a run.

    ``ran_s`` is how far into the schedule the run got before it was stopped
    (None: it ran to the end); phases past that point count as not run.
    """
    end_s = schedule.duration_s if ran_s is None else min(ran_s, schedule.duration_s)
    by_phase: list[list[RequestRecord]] = [[] for _ in schedule.phases]
    for r in records:
        by_phase[r.phase_index].append(r)
    phases = []
    for i, (start, p) in enumerate(zip(schedule.starts_s, schedule.phases)):
        ran = max(0.0, min(start + p.duration_s, end_s) - start)
        phases.append(_stats(p.name, p.rate_rps, start, ran, by_phase[i], limits))
    target = math.fsum(p.rate_rps * s.duration_s for p, s in zip(schedule.phases, phases))
    total = _stats("total", target / end_s if end_s > 0 else 0.0, 0.0, end_s, records, limits)
    return tuple(phases), total


def _stats(
    name: str,
    target_rps: float,
    start_s: float,
    ran_s: float,
    records: Iterable[RequestRecord],
    limits: BehindLimits,
) -> PhaseStats:
    records = list(records)
    sent_at = np.array([r.sent_s for r in records if r.sent_s is not None], dtype=np.float64)
    lags = np.array([r.lag_ms for r in records if r.sent_s is not None], dtype=np.float64)
    ok_ms = np.array([r.latency_ms for r in records if r.ok], dtype=np.float64)
    failures = Counter(r.outcome for r in records if not r.ok)
    scheduled = len(records)
    sent = int(sent_at.shape[0])
    # A generator that lags sends the phase's last requests after the phase is over:
    # stretch the window so that lag shows up as a lower rate.
    span_s = max(ran_s, float(sent_at.max()) - start_s) if sent else ran_s
    achieved = sent / span_s if span_s > 0 else 0.0
    throughput = ok_ms.shape[0] / span_s if span_s > 0 else 0.0
    lag_p50, lag_p99, lag_max = _quantiles(lags, (50, 99, 100))
    p50, p95, p99, p_max = _quantiles(ok_ms, (50, 95, 99, 100))

    reasons = []
    if lag_p99 is not None and lag_p99 > limits.max_lag_p99_ms:
        reasons.append(f"send lag p99 {lag_p99:.1f} ms > {limits.max_lag_p99_ms:g} ms")
    planned = scheduled / ran_s if ran_s > 0 else 0.0
    if planned > 0 and achieved < limits.min_rate_ratio * planned:
        reasons.append(
            f"sent {achieved:.1f} rps < {limits.min_rate_ratio:.0%} of the {planned:.1f} rps scheduled"
        )
    unsent = failures.get("unsent", 0)
    if unsent:
        reasons.append(f"{unsent} requests never sent")
    return PhaseStats(
        name=name,
        target_rps=float(target_rps),
        duration_s=ran_s,
        scheduled=scheduled,
        sent=sent,
        ok=int(ok_ms.shape[0]),
        achieved_rps=achieved,
        throughput_rps=throughput,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        max_ms=p_max,
        failures=dict(failures.most_common()),
        lag_p50_ms=lag_p50,
        lag_p99_ms=lag_p99,
        lag_max_ms=lag_max,
        behind=bool(reasons),
        behind_reason="; ".join(reasons) or None,
    )


def _quantiles(values: np.ndarray, qs: Sequence[float]) -> list[float | None]:
    if values.shape[0] == 0:
        return [None] * len(qs)
    return [float(v) for v in np.percentile(values, qs)]


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


def write_jsonl(records: Iterable[RequestRecord], file: IO[str]) -> int:
    """Write one JSON object per line; returns the number of lines."""
    n = 0
    for r in records:
        file.write(json.dumps(r.to_dict(), separators=(",", ":")) + "\n")
        n += 1
    return n
