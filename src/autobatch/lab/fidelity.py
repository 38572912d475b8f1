"""The simulator against the real server: what a real Triton adds to a batch curve,
and how close the simulator's predictions come to the latencies it measures.

:func:`overheads_from_stats` fits :class:`Overheads` from two ``/stats``
samples around a load run (pure), :func:`measure_overheads` runs that load
(``autobatch measure --overheads-for``), :func:`median_overheads` combines
runs, and :func:`simulator_fidelity` puts the simulator beside the real server
at several rates. Batch curves themselves are measured in
:mod:`autobatch.lab.measure`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from autobatch.access import RestrictedApi
from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError, TritonError
from autobatch.lab.measure import model_stats

__all__ = [
    "Fidelity",
    "FidelityRow",
    "Overheads",
    "measure_overheads",
    "median_overheads",
    "overheads_from_stats",
    "simulator_fidelity",
]

# -- what a real server adds ------------------------------------------------------------------


@dataclass(frozen=True)
class Overheads:
    """What a real Triton adds to a batch curve, in the simulator's terms
    (:class:`autobatch.plan.simulator.ServiceModel`)."""

    batch_overhead_ms: float
    """Instance time per batch beyond the curve: compute input + infer + output,
    per execution, less the curve's time, fitted as ``batch + n * request``."""
    request_overhead_ms: float
    """The per-request slope of that fit."""
    fixed_latency_ms: float
    """Mean client latency less Triton's mean request duration: protocol, network
    and client time, which does not occupy the instance."""
    requests: int
    """Requests the figures come from."""
    executions: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_overhead_ms": round(self.batch_overhead_ms, 4),
            "request_overhead_ms": round(self.request_overhead_ms, 4),
            "fixed_latency_ms": round(self.fixed_latency_ms, 4),
            "requests": self.requests,
            "executions": self.executions,
        }


def overheads_from_stats(
    before: dict[str, Any],
    after: dict[str, Any],
    curve: BatchCurve,
    client_mean_ms: float,
) -> Overheads:
    """Fit :class:`Overheads` from two ``/stats`` samples of one model around a load
    run and the run's mean client latency (pure: the I/O is the caller's)."""

    def rows(stats: dict[str, Any]) -> dict[int, tuple[int, int]]:
        out = {}
        for row in stats.get("batch_stats") or []:
            count = int(row["compute_infer"]["count"])
            ns = sum(int(row[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))
            out[int(row["batch_size"])] = (count, ns)
        return out

    r0, r1 = rows(before), rows(after)
    sizes, weights, extra = [], [], []
    for b, (count, ns) in r1.items():
        c0, ns0 = r0.get(b, (0, 0))
        if count - c0 > 0:
            sizes.append(b)
            weights.append(count - c0)
            extra.append((ns - ns0) / (count - c0) / 1e6 - curve.estimate(b).ms)
    if not sizes:
        raise TritonError("no executions recorded in batch_stats during the calibration run")
    x, w, y = np.array(sizes, float), np.array(weights, float), np.array(extra, float)
    if len(sizes) >= 2:
        slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))
    else:
        slope, intercept = 0.0, float(y[0])
    if slope < 0:
        slope, intercept = 0.0, float(np.average(y, weights=w))
    intercept = max(0.0, float(intercept))

    def inference(stats: dict[str, Any]) -> tuple[int, int]:
        ok = (stats.get("inference_stats") or {}).get("success") or {}
        return int(ok.get("count", 0)), int(ok.get("ns", 0))

    (n0, s0), (n1, s1) = inference(before), inference(after)
    if n1 - n0 <= 0:
        raise TritonError("no successful requests recorded during the calibration run")
    server_mean_ms = (s1 - s0) / (n1 - n0) / 1e6
    return Overheads(
        batch_overhead_ms=intercept,
        request_overhead_ms=float(slope),
        fixed_latency_ms=max(0.0, client_mean_ms - server_mean_ms),
        requests=n1 - n0,
        executions=int(w.sum()),
    )


def median_overheads(items: Sequence[Overheads]) -> Overheads:
    """Each figure's median over several runs: one disturbed run on a busy machine
    does not move it."""
    if not items:
        raise ConfigError("median_overheads needs at least one measurement")
    return Overheads(
        batch_overhead_ms=statistics.median(o.batch_overhead_ms for o in items),
        request_overhead_ms=statistics.median(o.request_overhead_ms for o in items),
        fixed_latency_ms=statistics.median(o.fixed_latency_ms for o in items),
        requests=sum(o.requests for o in items),
        executions=sum(o.executions for o in items),
    )


def measure_overheads(
    grpc_url: str,
    http_url: str,
    model: str,
    curve: BatchCurve,
    *,
    rate_rps: float,
    duration_s: float = 4.0,
    seed: int = 0,
    client: httpx.Client | None = None,
    restricted_api: RestrictedApi | None = None,
) -> Overheads:
    """Run Poisson load at ``rate_rps`` for ``duration_s`` (``autobatch load``) and
    compare what Triton's timers and the client saw with ``curve``. ``restricted_api``:
    the key of Triton's restricted APIs, for the ``/stats`` reads.

    ``curve`` is what the model is meant to take per batch (for the emulated
    accelerator, the curve it was loaded with). Keep other traffic off the
    model while this runs.
    """
    from autobatch.load import run_load
    from autobatch.schedule import Schedule

    for name, value in (("rate_rps", rate_rps), ("duration_s", duration_s)):
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{name} = {value:g}: must be a finite number > 0", field=name, value=value)
    url = http_url if "://" in http_url else f"http://{http_url}"
    own = client is None
    hc = client or httpx.Client(base_url=url, timeout=30.0)
    try:
        before = model_stats(hc, model, restricted_api)
        report = run_load(grpc_url, model, Schedule.constant(rate_rps, duration_s), seed=seed)
        after = model_stats(hc, model, restricted_api)
    finally:
        if own:
            hc.close()
    ok = [r.latency_ms for r in report.records if r.ok and r.latency_ms is not None]
    if not ok:
        raise TritonError(f"calibration load on {model!r} completed no request: {report.failures}")
    return overheads_from_stats(before, after, curve, statistics.fmean(ok))


# -- the simulator against the real server ------------------------------------------------------


@dataclass(frozen=True)
class FidelityRow:
    """One rate: measured and predicted latency, each the median over its runs."""

    rate_rps: float
    runs: int
    measured_p50_ms: float
    predicted_p50_ms: float
    measured_p95_ms: float
    predicted_p95_ms: float
    predicted_mean_batch: float

    @property
    def p50_error(self) -> float:
        return self.predicted_p50_ms / self.measured_p50_ms - 1.0

    @property
    def p95_error(self) -> float:
        return self.predicted_p95_ms / self.measured_p95_ms - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_rps": self.rate_rps,
            "runs": self.runs,
            "measured_p50_ms": round(self.measured_p50_ms, 3),
            "predicted_p50_ms": round(self.predicted_p50_ms, 3),
            "p50_error": round(self.p50_error, 4),
            "measured_p95_ms": round(self.measured_p95_ms, 3),
            "predicted_p95_ms": round(self.predicted_p95_ms, 3),
            "p95_error": round(self.p95_error, 4),
            "predicted_mean_batch": round(self.predicted_mean_batch, 3),
        }


@dataclass(frozen=True)
class Fidelity:
    rows: tuple[FidelityRow, ...]
    overheads: Overheads
    """Median over every run; the simulator used these for every prediction."""

    def to_dict(self) -> dict[str, Any]:
        return {"overheads": self.overheads.to_dict(), "rows": [r.to_dict() for r in self.rows]}


def simulator_fidelity(
    grpc_url: str,
    http_url: str,
    model: str,
    curve: BatchCurve,
    profile: Any,
    rates_rps: Sequence[float],
    *,
    runs_per_rate: int = 3,
    seconds_per_run: float = 4.0,
    seed: int = 0,
) -> Fidelity:
    """Poisson load at each rate on the real server, and the simulator on the same sends.

    ``model`` must already run ``curve`` with ``profile``'s batching (the
    emulated accelerator reloaded with both). Runs go round the rates
    ``runs_per_rate`` times, so a disturbance on a shared machine hits one run
    of each rate rather than every run of one. What the server adds to the
    curve is measured in every run (:func:`overheads_from_stats`); the
    simulator gets the median over all runs. Latency is the client's (send to
    response) against the simulator's arrival to completion plus the measured
    fixed latency, fed the send times the client achieved.
    """
    from autobatch.load import run_load
    from autobatch.plan.simulator import ServiceModel, Workload, simulate
    from autobatch.schedule import Schedule

    url = http_url if "://" in http_url else f"http://{http_url}"
    runs = []
    with httpx.Client(base_url=url, timeout=30.0) as client:
        for cycle in range(runs_per_rate):
            for rate in rates_rps:
                before = model_stats(client, model)
                report = run_load(grpc_url, model, Schedule.constant(rate, seconds_per_run),
                                  seed=seed + 1000 * cycle + int(rate))
                after = model_stats(client, model)
                ok = [r.latency_ms for r in report.records if r.ok and r.latency_ms is not None]
                if report.total.failed or not ok:
                    raise TritonError(
                        f"load at {rate:g} rps on {model!r} failed requests: {dict(report.failures)}"
                    )
                runs.append((rate, report, overheads_from_stats(before, after, curve, statistics.fmean(ok))))
    overheads = median_overheads([o for _, _, o in runs])
    service = ServiceModel(
        curve,
        batch_overhead_ms=overheads.batch_overhead_ms,
        request_overhead_ms=overheads.request_overhead_ms,
        fixed_latency_ms=overheads.fixed_latency_ms,
    )
    rows = []
    for rate in rates_rps:
        figures = []
        for r, report, _ in runs:
            if r != rate:
                continue
            sent = np.sort(np.array([x.sent_s for x in report.records if x.sent_s is not None]))
            predicted = simulate(profile, service, Workload(sent - min(0.0, float(sent[0])), seconds_per_run))
            measured = report.phases[0]
            assert predicted.latency is not None
            figures.append((measured.p50_ms or 0.0, predicted.latency.p50_ms,
                            measured.p95_ms or 0.0, predicted.latency.p95_ms, predicted.mean_batch))
        m = np.median(np.array(figures), axis=0)
        rows.append(FidelityRow(float(rate), len(figures), *(float(v) for v in m)))
    return Fidelity(tuple(rows), overheads)
