"""Priority lanes on the real Triton: urgent and batchable requests sent side by side.

Two open-loop Poisson streams (``autobatch load``'s engine,
:func:`autobatch.load.runner.drive`) run at once against one model: urgent
requests with Triton's request priority 1, batchable ones with no priority
(the model's default level). Each lane's client latency is summarised, and
the mean batch Triton executed is read from its statistics around the run.
Run it once with a two-lane profile loaded and once with the same batching
on one level, and the urgent lane's latency shows what the lanes buy. Which
requests an urgent one overtook (:attr:`LanesRun.overtaken`) says whether it
went ahead of the batchable backlog, and does not move with the machine's
speed as latencies do: the two streams share one clock and one start.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from autobatch.errors import ConfigError
from autobatch.lab.measure import model_stats
from autobatch.load.report import RequestRecord
from autobatch.load.runner import drive
from autobatch.load.transport import Transport, open_transport
from autobatch.schedule import Phase, Schedule
from autobatch.stats import LatencyStats

__all__ = ["LaneRun", "LanesRun", "run_lanes"]


@dataclass(frozen=True)
class LaneRun:
    name: str
    priority: int
    """Triton request priority sent (0: the model's default level)."""
    sent: int
    ok: int
    latency: LatencyStats | None
    """Client latency of the successful requests, send to response."""

    def to_dict(self) -> dict[str, Any]:
        return {"lane": self.name, "priority": self.priority, "sent": self.sent, "ok": self.ok,
                "latency_ms": None if self.latency is None else self.latency.to_dict()}


@dataclass(frozen=True)
class LanesRun:
    urgent: LaneRun
    batchable: LaneRun
    mean_batch: float
    """Requests per execution Triton ran during the run (its statistics, differenced)."""
    overtaken: float | None = None
    """Of the batchable requests still waiting when an urgent one was sent (sent before it,
    answered after that), the share answered after the urgent one, pooled over the urgent
    requests; None if none found any waiting. Near 0 when one FIFO queue holds both lanes
    (a request only ties with those in its own batch); high when the urgent ones go ahead."""

    def to_dict(self) -> dict[str, Any]:
        return {"urgent": self.urgent.to_dict(), "batchable": self.batchable.to_dict(),
                "mean_batch": round(self.mean_batch, 3),
                "overtaken": None if self.overtaken is None else round(self.overtaken, 3)}


class _WithPriority:
    """A load sender whose every request carries one Triton priority."""

    def __init__(self, transport: Transport, priority: int) -> None:
        self.transport = transport
        self.priority = priority

    async def infer(self) -> None:
        t = self.transport  # gRPC: tritonclient.grpc.aio takes the priority per request
        await t.client.infer(t.model, t.inputs, priority=self.priority, client_timeout=t.timeout_s)


def _lane(name: str, priority: int, records: tuple[RequestRecord, ...]) -> LaneRun:
    ok = np.array([r.latency_ms for r in records if r.ok and r.latency_ms is not None], dtype=np.float64)
    return LaneRun(name, priority, sum(1 for r in records if r.sent_s is not None), int(ok.shape[0]),
                   LatencyStats.of(ok))


def _overtaken(urgent: tuple[RequestRecord, ...], batchable: tuple[RequestRecord, ...]) -> float | None:
    def spans(records: tuple[RequestRecord, ...]) -> np.ndarray:
        rows = [(r.sent_s, r.sent_s + r.latency_ms / 1000.0) for r in records
                if r.ok and r.sent_s is not None and r.latency_ms is not None]
        return np.array(rows, dtype=np.float64).reshape(-1, 2)

    waiting = overtaken = 0
    b = spans(batchable)
    for sent, done in spans(urgent):
        ahead = b[(b[:, 0] < sent) & (b[:, 1] > sent), 1]
        waiting += int(ahead.shape[0])
        overtaken += int(np.count_nonzero(ahead > done))
    return overtaken / waiting if waiting else None


def run_lanes(
    grpc_url: str,
    http_url: str,
    model: str,
    *,
    urgent_rps: float,
    batchable_rps: float,
    duration_s: float,
    batchable_burst: int = 0,
    urgent_priority: int = 1,
    seed: int = 0,
    timeout_s: float = 10.0,
) -> LanesRun:
    """Urgent (priority ``urgent_priority``, Poisson) and batchable (default level) load at once.

    ``batchable_burst`` > 0 sends the batchable requests in bursts of that many at
    once (the bursts Poisson at ``batchable_rps / batchable_burst``): bulk work
    arriving in chunks, the case lanes are for."""
    for label, value in (("urgent_rps", urgent_rps), ("batchable_rps", batchable_rps),
                         ("duration_s", duration_s)):
        if not value > 0:
            raise ConfigError(f"{label} = {value!r}: must be > 0")
    url = http_url if "://" in http_url else f"http://{http_url}"
    batchable = (Schedule((Phase("batchable", batchable_rps, duration_s, "bursty", batchable_burst),))
                 if batchable_burst else Schedule.constant(batchable_rps, duration_s))

    async def both() -> tuple[tuple[RequestRecord, ...], tuple[RequestRecord, ...]]:
        urgent_t = await open_transport(grpc_url, model, timeout_s=timeout_s, seed=seed)
        batch_t = await open_transport(grpc_url, model, timeout_s=timeout_s, seed=seed + 1)
        # One time 0 for both streams: their send offsets compare (LanesRun.overtaken).
        start = asyncio.get_running_loop().time() + 0.05
        try:
            (u, *_), (b, *_) = await asyncio.gather(
                drive(_WithPriority(urgent_t, urgent_priority), Schedule.constant(urgent_rps, duration_s),
                      seed=seed, drain_s=timeout_s + 1.0, start_at=start),
                drive(_WithPriority(batch_t, 0), batchable, seed=seed + 1, drain_s=timeout_s + 1.0,
                      start_at=start),
            )
        finally:
            await urgent_t.close()
            await batch_t.close()
        return u, b

    with httpx.Client(base_url=url, timeout=30.0) as client:
        before = model_stats(client, model)
        urgent, batchable = asyncio.run(both())
        after = model_stats(client, model)
    count = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    execs = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    return LanesRun(_lane("urgent", urgent_priority, urgent), _lane("batchable", 0, batchable),
                    count / execs if execs else 0.0, _overtaken(urgent, batchable))
