"""Device time per request, from Triton's own per-batch-size compute times.

The measure the controller minimises within the SLO: how long the model's
instances computed, per request served. Triton's ``GET /v2/models/M/stats``
holds, per batch size, the executions and the summed ``compute_infer`` time;
differenced over a stretch of time, their ratio to the requests served is the
device time per request (milliseconds of instance time; on a GPU, of the GPU).
It counts the batches as they ran, so it needs no curve, and counts nothing of
the queue or the client.

:class:`DeviceMeter` polls one or several models (the two variants behind a
gateway are one service) and keeps running totals. A reload brings a new copy
of the model whose counters start at 0; a counter that goes backwards is read
as that restart, and the new copy's counts are added from 0, each counter on
its own (Triton does not restart them all). What the old copy
ran between the last poll and the swap is lost: with a poll a second, at most a
second of work per reload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

import httpx

from autobatch.errors import TritonError
from autobatch.signals.parse import StatsSample, parse_stats

__all__ = ["DeviceMeter", "DeviceTotals"]


@dataclass(frozen=True)
class DeviceTotals:
    """Running totals over the models a :class:`DeviceMeter` reads."""

    compute_ns: int = 0
    """Summed ``compute_infer`` time of every execution, nanoseconds."""
    requests: int = 0
    """Inferences served (``inference_count``: requests of one row each here)."""
    executions: int = 0
    """Batches run."""

    def __sub__(self, other: DeviceTotals) -> DeviceTotals:
        return DeviceTotals(
            self.compute_ns - other.compute_ns,
            self.requests - other.requests,
            self.executions - other.executions,
        )

    def __add__(self, other: DeviceTotals) -> DeviceTotals:
        return DeviceTotals(
            self.compute_ns + other.compute_ns,
            self.requests + other.requests,
            self.executions + other.executions,
        )

    @property
    def device_ms_per_request(self) -> float | None:
        """Instance milliseconds per request; None when no request was served."""
        return self.compute_ns / 1e6 / self.requests if self.requests > 0 else None

    @property
    def mean_batch(self) -> float | None:
        return self.requests / self.executions if self.executions > 0 else None


def _totals(sample: StatsSample) -> DeviceTotals:
    return DeviceTotals(
        compute_ns=sum(ns for _, _, ns in sample.batch_stats),
        requests=sample.inference_count,
        executions=sum(c for _, c, _ in sample.batch_stats),
    )


def _since(last: DeviceTotals, now: DeviceTotals) -> DeviceTotals:
    """What ran between two readings, each counter on its own: one that went backwards
    restarted from 0 with a new copy (a reload), so its new value is what ran since.
    Triton restarts the per-batch-size ``batch_stats`` of a reloaded model but not
    always its ``inference_count``; taking both from 0 when one of them reset counted
    every request since the model's load again (a step's high phase read batches of
    9.3 where the sidecar's windows saw 4.2)."""

    def one(a: int, b: int) -> int:
        return b - a if b >= a else b

    return DeviceTotals(one(last.compute_ns, now.compute_ns), one(last.requests, now.requests),
                        one(last.executions, now.executions))


class DeviceMeter:
    """Running device-time totals over ``models`` on the Triton at ``http_url``.

    Call :meth:`read` at the boundaries you want to compare (phase starts, a
    second apart); subtract two readings for the stretch between them.
    """

    def __init__(
        self,
        http_url: str,
        models: Sequence[str],
        *,
        client: httpx.AsyncClient | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        url = http_url.rstrip("/")
        self.http_url = url if "://" in url else f"http://{url}"
        self.models = tuple(models)
        self._owns = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._last: dict[str, DeviceTotals] = {}
        self._total = DeviceTotals()

    async def read(self) -> DeviceTotals:
        """Poll every model once; the totals since the first read."""
        for model in self.models:
            now = await self._sample(model)
            last = self._last.get(model)
            delta = DeviceTotals() if last is None else _since(last, now)  # the first read is the origin
            self._last[model] = now
            self._total = self._total + delta
        return self._total

    async def _sample(self, model: str) -> DeviceTotals:
        url = f"{self.http_url}/v2/models/{quote(model, safe='')}/stats"
        try:
            r = await self._client.get(url)
        except httpx.HTTPError as exc:
            raise TritonError(f"stats of {model!r} at {self.http_url}: {type(exc).__name__}: {exc}") from exc
        if r.status_code != 200:
            raise TritonError(f"stats of {model!r} at {self.http_url}: HTTP {r.status_code}: {r.text[:200]}")
        return _totals(parse_stats(r.json(), model, source=url))

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()
