"""Priority lanes on the real Triton: urgent and batchable requests sent side by side.

Two open-loop Poisson streams (``autobatch load``'s engine,
:func:`autobatch.load.runner.drive`) run at once against one model: urgent
requests with Triton's request priority 1, batchable ones with no priority
(the model's default level). Each lane's client latency is summarised, and
the mean batch Triton executed is read from its statistics around the run.
Run it once with a two-lane profile loaded and once with the same batching
on one level, and the urgent lane's latency shows what the lanes buy.
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

    def to_dict(self) -> dict[str, Any]:
        return {"urgent": self.urgent.to_dict(), "batchable": self.batchable.to_dict(),
                "mean_batch": round(self.mean_batch, 3)}


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
        try:
            (u, *_), (b, *_) = await asyncio.gather(
                drive(_WithPriority(urgent_t, urgent_priority), Schedule.constant(urgent_rps, duration_s),
                      seed=seed, drain_s=timeout_s + 1.0),
                drive(_WithPriority(batch_t, 0), batchable, seed=seed + 1, drain_s=timeout_s + 1.0),
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
                    count / execs if execs else 0.0)
