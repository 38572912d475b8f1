"""Traces on the real Triton against the simulator: the same arrivals, sent and simulated.

Each case is a trace file. ``autobatch load --trace`` (:func:`autobatch.load.run_load`)
sends it to the model, which must already run ``curve`` with ``profile``'s
batching (the emulated accelerator reloaded with both), and records what it
actually sent (``record_trace``). ``autobatch simulate --trace``
(:func:`autobatch.plan.simulator.build_workload` and ``simulate``) then runs
the same file, and the file load recorded, through the simulator.

What the real server adds beyond the curve (Python-backend IPC and copies per
batch and per request; gRPC and the client per request) is measured from
Triton's own timers and the client's clock in every run
(:func:`autobatch.lab.fidelity.overheads_from_stats`); the simulator gets the
median over all runs, the same for every prediction. Latency is the client's,
send to response, against the simulator's arrival to completion plus the
measured fixed latency. Batch sizes (rows) come from Triton's ``batch_stats``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from autobatch.curve import BatchCurve
from autobatch.errors import TritonError
from autobatch.lab.fidelity import Overheads, median_overheads, overheads_from_stats
from autobatch.lab.measure import model_stats
from autobatch.profiles import Profile
from autobatch.schedule import Phase, Schedule, arrivals
from autobatch.traces import ArrivalTrace, RowsSpec, draw_rows, write_trace

__all__ = ["TraceFidelity", "TraceRow", "make_trace", "mean_batch_between", "trace_fidelity"]


def make_trace(
    name: str,
    rate_rps: float,
    duration_s: float,
    *,
    burst_size: int = 0,
    rows: RowsSpec | None = None,
    seed: int = 0,
) -> ArrivalTrace:
    """A synthetic trace: Poisson arrivals (or bursts of ``burst_size`` at one instant,
    the bursts Poisson), with ``rows`` per request (a number or shares)."""
    phase = (Phase(name, rate_rps, duration_s, "bursty", burst_size) if burst_size
             else Phase(name, rate_rps, duration_s))
    t = arrivals(Schedule((phase,)), np.random.default_rng(seed)).t_s
    r = draw_rows(len(t), rows, seed) if rows is not None else None
    return ArrivalTrace.of(t, r, source=name)


@dataclass(frozen=True)
class TraceRow:
    """One trace: measured and predicted latency (client side), medians over its runs."""

    name: str
    requests: int
    mean_rows: float
    runs: int
    measured_p50_ms: float
    measured_p95_ms: float
    predicted_p50_ms: float
    """``simulate --trace`` of the trace file itself."""
    predicted_p95_ms: float
    sent_p50_ms: float
    """``simulate --trace`` of the trace ``load --record-trace`` wrote (what was sent)."""
    sent_p95_ms: float
    measured_mean_batch: float
    """Rows per batch from Triton's batch_stats."""
    predicted_mean_batch: float

    def error(self, what: str, side: str = "predicted") -> float:
        return getattr(self, f"{side}_{what}_ms") / getattr(self, f"measured_{what}_ms") - 1.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "requests": self.requests, "mean_rows": round(self.mean_rows, 3),
            "runs": self.runs,
        }
        for side in ("measured", "predicted", "sent"):
            for what in ("p50", "p95"):
                out[f"{side}_{what}_ms"] = round(getattr(self, f"{side}_{what}_ms"), 3)
        for side in ("predicted", "sent"):
            for what in ("p50", "p95"):
                out[f"{side}_{what}_error"] = round(self.error(what, side), 4)
        out["measured_mean_batch"] = round(self.measured_mean_batch, 3)
        out["predicted_mean_batch"] = round(self.predicted_mean_batch, 3)
        return out


@dataclass(frozen=True)
class TraceFidelity:
    rows: tuple[TraceRow, ...]
    overheads: Overheads
    """Median over every run; the simulator used these for every prediction."""

    def to_dict(self) -> dict[str, Any]:
        return {"overheads": self.overheads.to_dict(), "rows": [r.to_dict() for r in self.rows]}


def mean_batch_between(before: dict[str, Any], after: dict[str, Any]) -> float:
    """Rows per execution between two ``/stats`` samples of one model (batch_stats)."""
    def counts(stats: dict[str, Any]) -> dict[int, int]:
        return {int(r["batch_size"]): int(r["compute_infer"]["count"])
                for r in stats.get("batch_stats") or []}

    c0, c1 = counts(before), counts(after)
    delta = {b: n - c0.get(b, 0) for b, n in c1.items() if n - c0.get(b, 0) > 0}
    total = sum(delta.values())
    return sum(b * n for b, n in delta.items()) / total if total else 0.0


def trace_fidelity(
    grpc_url: str,
    http_url: str,
    model: str,
    curve: BatchCurve,
    profile: Profile,
    traces: Sequence[ArrivalTrace],
    folder: str | Path,
    *,
    runs: int = 1,
    engine: str = "auto",
) -> TraceFidelity:
    """Send each trace ``runs`` times (round the traces, so a disturbance on a shared
    machine hits one run of each), then simulate each trace file and each sent trace.

    ``folder`` receives the trace files (``<name>.csv``) and the sent ones
    (``<name>-sent-<run>.csv``).
    """
    from autobatch.load import run_load
    from autobatch.plan.simulator import ServiceModel, build_workload, simulate

    folder = Path(folder)
    files = {t.source: write_trace(t, folder / f"{t.source}.csv") for t in traces}
    url = http_url if "://" in http_url else f"http://{http_url}"
    measured: dict[str, list[tuple[float, float, float, Path]]] = {t.source: [] for t in traces}
    overheads = []
    with httpx.Client(base_url=url, timeout=30.0) as client:
        for run in range(runs):
            for trace in traces:
                sent_file = folder / f"{trace.source}-sent-{run}.csv"
                before = model_stats(client, model)
                report = run_load(grpc_url, model, trace, seed=run, record_trace=sent_file)
                after = model_stats(client, model)
                ok = [r.latency_ms for r in report.records if r.ok and r.latency_ms is not None]
                if report.total.failed or not ok:
                    raise TritonError(
                        f"trace {trace.source} on {model!r} failed requests: {dict(report.failures)}"
                    )
                overheads.append(overheads_from_stats(before, after, curve, statistics.fmean(ok)))
                p50, p95 = np.percentile(ok, (50, 95))
                measured[trace.source].append(
                    (float(p50), float(p95), mean_batch_between(before, after), sent_file))
    med = median_overheads(overheads)
    service = ServiceModel(
        curve,
        batch_overhead_ms=med.batch_overhead_ms,
        request_overhead_ms=med.request_overhead_ms,
        fixed_latency_ms=med.fixed_latency_ms,
    )
    rows = []
    for trace in traces:
        runs_of = measured[trace.source]
        whole = simulate(profile, service, build_workload(trace=files[trace.source]), engine=engine)
        sent = [simulate(profile, service, build_workload(trace=f), engine=engine, seed=k)
                for k, (*_, f) in enumerate(runs_of)]
        assert whole.latency is not None and all(s.latency is not None for s in sent)
        rows.append(TraceRow(
            name=trace.source,
            requests=len(trace),
            mean_rows=float(trace.rows.mean()),
            runs=len(runs_of),
            measured_p50_ms=statistics.median(m[0] for m in runs_of),
            measured_p95_ms=statistics.median(m[1] for m in runs_of),
            predicted_p50_ms=whole.latency.p50_ms,
            predicted_p95_ms=whole.latency.p95_ms,
            sent_p50_ms=statistics.median(s.latency.p50_ms for s in sent),  # type: ignore[union-attr]
            sent_p95_ms=statistics.median(s.latency.p95_ms for s in sent),  # type: ignore[union-attr]
            measured_mean_batch=statistics.median(m[2] for m in runs_of),
            predicted_mean_batch=whole.mean_batch,
        ))
    return TraceFidelity(tuple(rows), med)
