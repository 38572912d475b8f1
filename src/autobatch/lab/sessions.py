"""Sessions on the real Triton against the simulator: same curve, same streams, same policy.

The emulated accelerator holds its instance for the curve's time of each batch,
so the real server and the simulator run the same device. ``autobatch load
--sessions`` (:func:`autobatch.load.sessions.run_sessions`) drives K streams
through the SDK's session batcher; :func:`autobatch.plan.sessions.simulate_sessions`
runs the same streams (the same seed draws the same phases). What the real
server and client add beyond the curve is measured in every run, from Triton's
own timers and the batcher's request round trip
(:func:`autobatch.lab.fidelity.overheads_from_stats`), and the simulator gets
the median over all runs as plain parameters, the same for every case.

The model must already run the curve, with a profile that does not hold a
lone request (Triton's default: no preferred sizes, no delay); with one
request in flight there is nothing for Triton's own batcher to wait for.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError, TritonError
from autobatch.lab.fidelity import Overheads, median_overheads, overheads_from_stats
from autobatch.lab.measure import model_stats
from autobatch.sessions import SessionsResult

__all__ = ["SessionsCase", "SessionsFidelity", "SessionsRow", "sessions_fidelity"]


@dataclass(frozen=True)
class SessionsCase:
    policy: str
    sessions: int
    fps: float


@dataclass(frozen=True)
class SessionsRow:
    """One case: the measured and the predicted run of each repeat, and their medians."""

    case: SessionsCase
    measured: tuple[SessionsResult, ...]
    predicted: tuple[SessionsResult, ...]
    """Each with its measured run's seed, on the median overheads."""
    predicted_bare: tuple[SessionsResult, ...]
    """The same on the bare curve (no overheads): what the curve alone predicts."""

    @staticmethod
    def _median(results: Sequence[SessionsResult], what: str) -> float:
        values = []
        for r in results:
            if what == "fps":
                values.append(r.mean_session_fps)
            elif what == "slowest":
                values.append(r.slowest_session_fps)
            elif what == "overwritten":
                values.append(r.overwritten_frac)
            elif what == "mean_batch":
                values.append(r.mean_batch)
            else:
                lat = r.latency
                values.append(float("nan") if lat is None else getattr(lat, f"{what}_ms"))
        return float(statistics.median(values))

    def figure(self, side: str, what: str) -> float:
        runs = {"measured": self.measured, "predicted": self.predicted,
                "bare": self.predicted_bare}[side]
        return self._median(runs, what)

    def error(self, what: str, side: str = "predicted") -> float:
        """Predicted over measured, less 1 (medians over the repeats)."""
        return self.figure(side, what) / self.figure("measured", what) - 1.0

    def to_dict(self) -> dict[str, Any]:
        figures = {}
        for what in ("fps", "slowest", "p50", "p99", "overwritten", "mean_batch"):
            figures[what] = {
                "measured": round(self.figure("measured", what), 4),
                "predicted": round(self.figure("predicted", what), 4),
                "bare_curve": round(self.figure("bare", what), 4),
            }
        return {
            "policy": self.case.policy,
            "sessions": self.case.sessions,
            "fps": self.case.fps,
            "runs": len(self.measured),
            "figures": figures,
            "fps_error": round(self.error("fps"), 4),
            "p50_error": round(self.error("p50"), 4),
            "measured_runs": [r.to_dict() for r in self.measured],
            "predicted_runs": [r.to_dict() for r in self.predicted],
        }


@dataclass(frozen=True)
class SessionsFidelity:
    rows: tuple[SessionsRow, ...]
    overheads: Overheads
    """Median over every run; the simulator used these for every prediction."""
    mean_request_ms: float
    """Median of the runs' mean request round trip, for the record."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "overheads": self.overheads.to_dict(),
            "mean_request_ms": round(self.mean_request_ms, 3),
            "rows": [r.to_dict() for r in self.rows],
        }


def sessions_fidelity(
    grpc_url: str,
    http_url: str,
    model: str,
    curve: BatchCurve,
    cases: Sequence[SessionsCase],
    *,
    duration_s: float = 10.0,
    runs_per_case: int = 1,
    seed: int = 0,
) -> SessionsFidelity:
    """Each case on the real server (``runs_per_case`` times, interleaved with the
    other cases) and in the simulator with the same seeds.

    Keep other traffic off ``model`` while this runs: its statistics are read
    around every run.
    """
    from autobatch.load.sessions import run_sessions
    from autobatch.plan.sessions import simulate_sessions
    from autobatch.plan.simulator import ServiceModel

    if not cases:
        raise ConfigError("cases = []: give at least one (policy, sessions, fps)")
    if isinstance(runs_per_case, bool) or not isinstance(runs_per_case, int) or runs_per_case < 1:
        raise ConfigError(f"runs_per_case = {runs_per_case!r}: must be an integer >= 1")
    url = http_url if "://" in http_url else f"http://{http_url}"
    runs: list[tuple[int, int, SessionsResult, Overheads]] = []
    with httpx.Client(base_url=url, timeout=30.0) as client:
        for cycle in range(runs_per_case):
            for k, case in enumerate(cases):
                run_seed = seed + 1000 * cycle + k
                before = model_stats(client, model)
                result = run_sessions(grpc_url, model, case.sessions, case.fps, policy=case.policy,
                                      duration_s=duration_s, seed=run_seed)
                after = model_stats(client, model)
                if result.failed or result.mean_request_ms is None:
                    raise TritonError(f"sessions run {case} on {model!r} failed frames: "
                                      f"{'; '.join(result.warnings) or 'no request completed'}")
                overheads = overheads_from_stats(before, after, curve, result.mean_request_ms)
                runs.append((k, run_seed, result, overheads))
    overheads = median_overheads([o for *_, o in runs])
    service = ServiceModel(
        curve,
        batch_overhead_ms=overheads.batch_overhead_ms,
        request_overhead_ms=overheads.request_overhead_ms,
        fixed_latency_ms=overheads.fixed_latency_ms,
    )
    bare = ServiceModel(curve)
    rows = []
    for k, case in enumerate(cases):
        mine = [(s, r) for i, s, r, _ in runs if i == k]
        predicted = tuple(
            simulate_sessions(service, case.sessions, case.fps, policy=case.policy,
                              duration_s=duration_s, seed=s)
            for s, _ in mine
        )
        predicted_bare = tuple(
            simulate_sessions(bare, case.sessions, case.fps, policy=case.policy,
                              duration_s=duration_s, seed=s)
            for s, _ in mine
        )
        rows.append(SessionsRow(case, tuple(r for _, r in mine), predicted, predicted_bare))
    request_ms = statistics.median(r.mean_request_ms or 0.0 for *_, r, _ in runs)
    return SessionsFidelity(tuple(rows), overheads, float(request_ms))
