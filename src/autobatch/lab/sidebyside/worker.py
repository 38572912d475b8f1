"""One mode's run, in a process of its own: the load, the co-tenants and the readings, from one
instant shared with every other mode.

    python -m autobatch.lab.sidebyside SPEC.json OUT.json

The process sends the schedule's arrivals (the same seed in every mode: the
same trace) to its mode's HAProxy from ``start_at`` on the machine's monotonic
clock, runs the co-tenant jobs on its mode's device from the same instant,
and reads, at every phase boundary, the device's own counters (the model's
work by context, busy share by tenant, lateness) and Triton's compute times;
once a second it follows the sidecar's ``/status`` and the device, for the
timeline. A process per mode keeps each generator off the others' interpreter
lock. Its result (JSON) is what :mod:`autobatch.lab.sidebyside.run` compares.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np

from autobatch.device.runner import CoTenantRunner
from autobatch.errors import TritonError
from autobatch.lab.device import DeviceMeter, DeviceTotals
from autobatch.lab.sidebyside.layout import LEAD_IN, cotenant_from_dict
from autobatch.lab.sidebyside.readings import (
    DeviceReading,
    device_figures,
    parse_device_metrics,
    served_shares,
)
from autobatch.load import LoadReport, RequestRecord, run_load
from autobatch.schedule import Schedule, parse_schedule

__all__ = ["STATS_PER_S", "WorkerSpec", "main", "retried", "run_worker", "stats_interval_s", "summarise"]

T = TypeVar("T")

STATS_PER_S = 4.0
"""Triton ``/stats`` requests a second the worker makes between boundaries, the same in every
mode so that the modes' generators carry the same work: one model read every 0.25 s (quick
enough to see a reload as one, :meth:`~autobatch.lab.device.DeviceMeter.poll`), a gateway's
two variants each every 0.5 s (they are never reloaded). Until 2026-12-05 every model was read
every 0.25 s, so a gateway's generator process made 8 a second, each on a new connection, and
used 1.08-1.16x the CPU of the reload's beside it in all 30 groups of the latest shipped
``shared_gpu.py`` runs (the default's: 0.95-1.03x)."""


def stats_interval_s(models: int) -> float:
    """How often the worker reads each of ``models`` models' stats: :data:`STATS_PER_S` in all."""
    return max(1, models) / STATS_PER_S


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, as JSON."""

    mode: str
    url: str
    """HOST:PORT of the mode's HAProxy (HTTP)."""
    model: str
    schedule: dict[str, Any]
    """The schedule run, lead-in included (``Schedule.to_dict``)."""
    seed: int
    start_at: float
    """The instant of the schedule's time 0 on ``time.monotonic`` (one clock for every process)."""
    slo_p95_ms: float
    device_address: str
    device_metrics_url: str
    model_prefixes: list[str]
    triton_http: str
    models: list[str]
    cotenants: list[dict[str, Any]] = field(default_factory=list)
    sidecar_url: str | None = None
    timeout_s: float = 10.0
    variants: dict[str, str] = field(default_factory=dict)
    """A gateway's device-context prefix of each variant, by profile (``ModeStack.variants``)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        return cls(**json.loads(text))


class _Recorder:
    """Completions (offset, latency ms, ok) from the load thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[tuple[float, float, bool]] = []

    def __call__(self, rec: RequestRecord) -> None:
        if rec.sent_s is None:
            return
        lat = rec.latency_ms or 0.0
        with self.lock:
            self.done.append((rec.sent_s + lat / 1000.0, lat, rec.ok))

    def last(self, now_s: float, span_s: float = 2.0) -> tuple[float, float | None]:
        with self.lock:
            recent = [(lat, ok) for t, lat, ok in self.done[-5000:] if now_s - span_s <= t <= now_s]
        lats = [lat for lat, ok in recent if ok]
        return len(recent) / span_s, (float(np.percentile(lats, 95)) if lats else None)


READ_TRIES = 5
"""A boundary read is tried this often, after 0.5, 1, 2 and 4 s, before the mode fails: a
machine paused under the run (a VM snapshot) leaves a server that answers a moment later."""


async def _device(client: httpx.AsyncClient, url: str) -> DeviceReading:
    r = await client.get(url)
    r.raise_for_status()
    return parse_device_metrics(r.text)


async def retried(read: Callable[[], Awaitable[T]], what: str, tries: int = READ_TRIES,
                  first_wait_s: float = 0.5) -> T:
    """``read()``, tried again after a failed answer (:class:`httpx.HTTPError`,
    :class:`~autobatch.errors.TritonError`) with the wait doubling; the last failure, named
    with ``what`` and the tries, if every one failed."""
    wait = first_wait_s
    for _ in range(tries - 1):
        try:
            return await read()
        except (httpx.HTTPError, TritonError):
            await asyncio.sleep(wait)
            wait *= 2
    try:
        return await read()
    except (httpx.HTTPError, TritonError) as exc:
        last = f"{type(exc).__name__}: {exc}"
        raise TritonError(f"{what}: {tries} tries failed, the last: {last}") from exc


async def _mark(client: httpx.AsyncClient, spec: WorkerSpec,
                meter: DeviceMeter) -> tuple[DeviceReading, DeviceTotals]:
    """The readings at a phase boundary: the device's counters and Triton's compute times."""
    url = spec.device_metrics_url
    return (await retried(lambda: _device(client, url), f"device metrics at {url}"),
            await retried(meter.read, f"Triton stats at {spec.triton_http}"))


async def _status(client: httpx.AsyncClient | None) -> dict[str, Any] | None:
    if client is None:
        return None
    try:
        r = await client.get("/status")
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _start_cotenants(spec: WorkerSpec,
                     duration_s: float) -> tuple[CoTenantRunner | None, threading.Thread | None]:
    """The co-tenant jobs, started on the device at ``start_at`` by a thread of their own."""
    if not spec.cotenants:
        return None, None
    jobs = [cotenant_from_dict(d) for d in spec.cotenants]
    runner = CoTenantRunner(jobs, spec.device_address, duration_s=duration_s, seed=spec.seed)

    def go() -> None:
        time.sleep(max(0.0, spec.start_at - time.monotonic()))
        runner.start()

    t = threading.Thread(target=go, name="cotenants-start", daemon=True)
    t.start()
    return runner, t


async def run_worker(spec: WorkerSpec) -> dict[str, Any]:
    """Run the mode and return its figures (see the module docstring)."""
    schedule = parse_schedule(spec.schedule, f"mode {spec.mode}: schedule")
    loop = asyncio.get_running_loop()
    recorder = _Recorder()
    load = loop.run_in_executor(None, lambda: run_load(
        spec.url, spec.model, schedule, protocol="http", seed=spec.seed, timeout_s=spec.timeout_s,
        on_record=recorder, start_at=spec.start_at))
    runner, starter = _start_cotenants(spec, schedule.duration_s)
    meter = DeviceMeter(spec.triton_http, spec.models)
    client = httpx.AsyncClient(timeout=5.0)
    sidecar = httpx.AsyncClient(base_url=spec.sidecar_url, timeout=2.0) if spec.sidecar_url else None
    stop = asyncio.Event()
    poller: asyncio.Future[Any] | None = None
    try:
        await asyncio.sleep(max(0.0, spec.start_at - time.monotonic()))
        t0_wall = time.time() - (time.monotonic() - spec.start_at)
        marks = [await _mark(client, spec, meter)]
        poller = asyncio.ensure_future(meter.poll(stop, interval_s=stats_interval_s(len(spec.models))))
        timeline = await _follow(spec, schedule, load, recorder, client, sidecar, meter, marks)
        report: LoadReport = await load
        marks[-1] = await _mark(client, spec, meter)
    finally:
        stop.set()
        if poller is not None:
            await asyncio.gather(poller, return_exceptions=True)
        await meter.aclose()
        await client.aclose()
        if sidecar is not None:
            await sidecar.aclose()
        if starter is not None:
            starter.join(timeout=30)
        if runner is not None:
            await asyncio.to_thread(runner.stop)
    return {
        "mode": spec.mode, "t0_wall": t0_wall, "t0_mono": spec.start_at, "start_late_s": _start_late(report),
        "phases": summarise(schedule, report, marks, timeline, spec),
        "cotenants": None if runner is None else runner.report().to_dict(),
        "timeline": timeline,
    }


async def _follow(spec: WorkerSpec, schedule: Schedule, load: asyncio.Future[Any], recorder: _Recorder,
                  client: httpx.AsyncClient, sidecar: httpx.AsyncClient | None, meter: DeviceMeter,
                  marks: list[tuple[DeviceReading, DeviceTotals]]) -> list[dict[str, Any]]:
    """Read at every phase boundary (into ``marks``) and sample once a second until the load
    ends; the samples are the timeline."""
    ends = [s + p.duration_s for s, p in zip(schedule.starts_s, schedule.phases, strict=True)]
    timeline: list[dict[str, Any]] = []
    prev = marks[0][0]
    next_sample = 1.0
    while not load.done():
        now = time.monotonic() - spec.start_at
        while len(marks) <= len(ends) and now >= ends[len(marks) - 1]:
            marks.append(await _mark(client, spec, meter))
        if now >= next_sample:
            status = await _status(sidecar)
            try:
                reading = await _device(client, spec.device_metrics_url)
            except httpx.HTTPError:  # a second missing from the timeline; the boundaries retry
                next_sample += 1.0
                continue
            rps, p95 = recorder.last(now)
            fig = device_figures(prev, reading, spec.model_prefixes, [c["name"] for c in spec.cotenants])
            prev = reading
            decision = (status or {}).get("last_decision") or {}
            timeline.append({"t_s": round(now, 2), "active": (status or {}).get("active_profile", spec.mode),
                             "completed_rps": round(rps, 1), "p95_ms": None if p95 is None else round(p95, 2),
                             "busy_by_tenant": fig["busy_by_tenant"], "busy_share": fig["busy_share"],
                             "decision": decision.get("action"), "reason": decision.get("reason")})
            next_sample += 1.0
        upcoming = [e for e in ends if e > now + 1e-3] + [next_sample]
        await asyncio.wait({load}, timeout=max(0.01, min(upcoming) - now))
    while len(marks) < len(ends) + 1:
        marks.append(marks[-1])
    return timeline


def _start_late(report: LoadReport) -> float | None:
    """How late the first request went out after its time (the set-up overran the start)."""
    sent = [r for r in report.records if r.lag_ms is not None]
    return None if not sent else round(min(sent, key=lambda r: r.scheduled_s).lag_ms / 1000.0, 4)  # type: ignore[operator]


def _profiles(timeline: Sequence[Mapping[str, Any]], lo: float, hi: float) -> dict[str, float]:
    shares: dict[str, int] = {}
    for s in timeline:
        if lo <= s["t_s"] < hi + 1e-9:
            shares[str(s["active"])] = shares.get(str(s["active"]), 0) + 1
    total = sum(shares.values()) or 1
    return {k: round(v / total, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])}


def summarise(schedule: Schedule, report: LoadReport, marks: Sequence[tuple[DeviceReading, DeviceTotals]],
              timeline: Sequence[Mapping[str, Any]], spec: WorkerSpec) -> list[dict[str, Any]]:
    """Each phase (the lead-in too, named so): the clients' view, the device's and Triton's."""
    out = []
    cotenants = [c["name"] for c in spec.cotenants]
    for i, (phase, stats, start) in enumerate(zip(schedule.phases, report.phases, schedule.starts_s,
                                                  strict=True)):
        mine = [r for r in report.records if r.phase_index == i]
        over = sum(1 for r in mine if not r.ok or (r.latency_ms or 0.0) > spec.slo_p95_ms)
        triton = marks[i + 1][1] - marks[i][1]
        out.append({
            "name": phase.name, "measured": phase.name != LEAD_IN, "target_rps": phase.rate_rps,
            "duration_s": phase.duration_s, "cotenants": phase.cotenants,
            "requests": len(mine), "over_slo": over,
            "over_slo_share": round(over / len(mine), 5) if mine else 0.0,
            "p50_ms": stats.p50_ms, "p95_ms": stats.p95_ms, "p99_ms": stats.p99_ms,
            "throughput_rps": stats.throughput_rps, "failures": dict(stats.failures),
            "lag_p99_ms": stats.lag_p99_ms, "behind": stats.behind,
            "profiles": _profiles(timeline, start, start + phase.duration_s),
            "served": served_shares(marks[i][0], marks[i + 1][0], spec.variants),
            "triton_compute_ms": triton.device_ms_per_request, "mean_batch": triton.mean_batch,
            **device_figures(marks[i][0], marks[i + 1][0], spec.model_prefixes, cotenants),
        })
    return out


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        sys.exit("usage: python -m autobatch.lab.sidebyside SPEC.json OUT.json")
    spec = WorkerSpec.from_json(Path(args[0]).read_text(encoding="utf-8"))
    result = asyncio.run(run_worker(spec))
    t = os.times()  # the generator's own CPU: it has exited before the run reads /proc
    result["cpu_s"] = round(t.user + t.system, 3)
    Path(args[1]).write_text(json.dumps(result, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
