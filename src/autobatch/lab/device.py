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
of the model whose counters all start at 0 (on the real Triton every counter of
the model's statistics restarts together: ``inference_count``, ``execution_count``
and ``batch_stats``; tests/integration/test_device_meter.py). Any counter that
went backwards marks the new copy, whose counts are then added from 0. What the
old copy ran between the last poll and the swap is lost, so the meter must be
read often while reloads can happen (:meth:`DeviceMeter.poll`, every 0.25 s by
default): read only at the ends of a long stretch, a new copy that has already
served more than the old one had at the first reading looks like the old copy
counting on in some counters and not in others, and the two copies' counts mix
(read at phase boundaries only, a step's high phase read batches of 9.3 where the
sidecar's windows saw 4.2, and the demo 19.9 ms of device time per request).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
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
    """What ran between two readings of one model: the difference, or, when any counter
    went backwards (a reload brought a new copy, every counter from 0), the new copy's
    counts."""
    if now.compute_ns < last.compute_ns or now.requests < last.requests or now.executions < last.executions:
        return now
    return now - last


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = http_url.rstrip("/")
        self.http_url = url if "://" in url else f"http://{url}"
        self.models = tuple(models)
        self._owns = client is None
        # A connection per read: a kept-alive one can wait out a reload instead of reading
        # the old copy's last counts (docs/triton-facts.md).
        self._client = client or httpx.AsyncClient(
            timeout=timeout_s, limits=httpx.Limits(max_keepalive_connections=0))
        self._last: dict[str, DeviceTotals] = {}
        self._total = DeviceTotals()
        self._lock = asyncio.Lock()
        self._clock = clock
        self._read_at: float | None = None
        self.longest_gap_s = 0.0
        """The longest time between two completed reads: a copy swapped out meanwhile
        takes its counts since the first of them along (what the meter can lose)."""

    async def read(self) -> DeviceTotals:
        """Poll every model once; the totals since the first read."""
        async with self._lock:  # poll() and a caller's reads interleave
            for model in self.models:
                now = await self._sample(model)
                last = self._last.get(model)
                delta = DeviceTotals() if last is None else _since(last, now)  # the first read is the origin
                self._last[model] = now
                self._total = self._total + delta
            t = self._clock()
            if self._read_at is not None:
                self.longest_gap_s = max(self.longest_gap_s, t - self._read_at)
            self._read_at = t
            return self._total

    async def poll(self, stop: asyncio.Event, interval_s: float = 0.25) -> None:
        """Read every ``interval_s`` until ``stop`` is set, so that a reload between the
        caller's own reads is seen as one (see the module's note). A failed read is
        retried at the next tick; the caller's own reads raise. A read that takes longer
        than ``2 x interval_s`` (at least 0.5 s) is given up and made again on a new
        connection: a request can land on the HTTP thread that is running a model load
        (sent over HTTP) and wait the whole load out, and by then the old copy's last
        counts are gone (measured: 236 of 682 requests lost in one CI run)."""
        patience = max(2 * interval_s, 0.5)
        while not stop.is_set():
            with contextlib.suppress(TritonError, asyncio.TimeoutError):
                await asyncio.wait_for(self.read(), timeout=patience)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)

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
