"""One closed-loop run: a schedule of load against Triton, with the sidecar or a static profile.

The demo (``autobatch demo``) and ``benchmarks/closed_loop.py`` both call
:func:`run_closed_loop`: the load generator runs in a worker thread (it owns
its event loop), the sidecar — when there is one — on the caller's loop, and a
sampler records once a second what was live, so each phase can be told with the
profile that was in force and how fast the controller reacted. With a
:class:`~autobatch.lab.device.DeviceMeter` it also reads Triton's compute times
at every phase boundary: each phase's device time per request.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from autobatch.controller.config import SidecarConfig
from autobatch.errors import AutobatchError
from autobatch.lab.compare import decision_time_s
from autobatch.lab.device import DeviceMeter, DeviceTotals
from autobatch.load import LoadReport, RequestRecord, run_load
from autobatch.profiles import Profile
from autobatch.schedule import Schedule

__all__ = ["ClosedLoopResult", "PhaseSummary", "Sample", "SidecarProcess", "apply_static", "run_closed_loop"]


@dataclass(frozen=True)
class Sample:
    """What was true at one second of the run (offset from the load's start)."""

    t_s: float
    phase: str
    target_rps: float
    active: str | None
    completed_rps: float
    p95_ms: float | None
    decision: str | None
    reason: str | None


@dataclass(frozen=True)
class Switch:
    t_s: float
    to: str
    reason: str
    message: str
    ok: bool
    duration_s: float | None


@dataclass(frozen=True)
class PhaseSummary:
    name: str
    target_rps: float
    throughput_rps: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    over_slo: int
    """Requests slower than the SLO (or failed)."""
    requests: int
    failures: dict[str, int]
    profiles: dict[str, float]
    """Share of the phase's seconds each profile was live."""
    reaction_s: float | None
    """Seconds from the phase start to the first switch in it (None: no switch)."""
    device_ms: float | None = None
    """Instance milliseconds per request served in the phase (Triton's compute times);
    None without a device meter or when nothing was served."""
    mean_batch: float | None = None
    """Requests per execution in the phase, from the same counters."""

    @property
    def over_slo_share(self) -> float:
        return self.over_slo / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "over_slo_share": round(self.over_slo_share, 5)}


@dataclass(frozen=True)
class ClosedLoopResult:
    mode: str
    schedule: Schedule
    slo_p95_ms: float
    report: LoadReport
    samples: tuple[Sample, ...]
    switches: tuple[Switch, ...]
    phases: tuple[PhaseSummary, ...] = field(default=())
    device: DeviceTotals | None = None
    """Triton's compute-time totals over the whole run (with a device meter)."""

    @property
    def over_slo_share(self) -> float:
        n = sum(p.requests for p in self.phases)
        return sum(p.over_slo for p in self.phases) / n if n else 0.0

    @property
    def device_ms(self) -> float | None:
        return None if self.device is None else self.device.device_ms_per_request

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "slo_p95_ms": self.slo_p95_ms,
            "over_slo_share": round(self.over_slo_share, 5),
            "device_ms": self.device_ms,
            "phases": [p.to_dict() for p in self.phases],
            "switches": [s.__dict__ for s in self.switches],
            "failed_requests": sum(sum(p.failures.values()) for p in self.phases),
        }


async def apply_static(http_url: str, model: str, profile: Profile, timeout_s: float = 180.0) -> None:
    """Put ``profile`` live before a static run (through the reload actuator)."""
    from autobatch.actuators.triton import TritonReloadActuator

    actuator = TritonReloadActuator(http_url, model, [profile], load_timeout_s=timeout_s)
    try:
        result = await actuator.apply(profile)
    finally:
        await actuator.aclose()
    if not result.ok:
        raise AutobatchError(f"could not apply {profile.name} to {model}: {result.message}")


class SidecarProcess:
    """``autobatch run --config PATH`` in a process of its own, as it runs in production.

    Run in the process that drives the load, the sidecar shares that process's
    interpreter lock with the load generator: a second spent parsing Triton's
    metrics is a second the generator's sends and completions wait, and the
    clients' latencies (and the controller's score) pay for it. As its own
    process it costs about 1% of a core at a 1 s interval (the footprint
    benchmark). ``url`` is its HTTP address (``server.listen`` of the config).
    """

    def __init__(
        self, config_path: Path, url: str, log_path: Path, *, startup_timeout_s: float = 60.0
    ) -> None:
        from autobatch.lab.process import ManagedProcess

        self.config_path = Path(config_path)
        self.url = url.rstrip("/")
        self.startup_timeout_s = startup_timeout_s
        self._proc = ManagedProcess("autobatch run", log_path)

    def start(self) -> SidecarProcess:
        import sys

        import httpx

        from autobatch.lab.process import poll_until

        self._proc.start([sys.executable, "-m", "autobatch", "run", "--config", str(self.config_path)])

        def healthy() -> bool:
            try:
                return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        poll_until(healthy, timeout_s=self.startup_timeout_s, what=f"the sidecar at {self.url}",
                   check=lambda: self._proc.check_alive("while starting"))
        return self

    def stop(self) -> None:
        self._proc.stop()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def __enter__(self) -> SidecarProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class _RemoteStatus:
    """The fields of the controller's status the samples and the live view read, from ``GET /status``."""

    active: str | None = None
    last_decision: dict[str, Any] | None = None


class _Recorder:
    """Collects request records from the load thread; reads are cheap snapshots."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[tuple[float, float, bool]] = []  # (completion offset, latency ms, ok)
        self._origin: float | None = None

    def __call__(self, rec: RequestRecord) -> None:
        if rec.sent_s is None:
            return
        lat = rec.latency_ms or 0.0
        with self.lock:
            if self._origin is None:
                # The load's clock starts at its first send, after its set-up and warm-up.
                self._origin = time.monotonic() - rec.sent_s - lat / 1000.0
            self.done.append((rec.sent_s + lat / 1000.0, lat, rec.ok))

    def origin(self) -> float | None:
        """The load's time 0 on the monotonic clock, once a request has completed."""
        with self.lock:
            return self._origin

    def last(self, now_s: float, span_s: float = 2.0) -> tuple[float, float | None]:
        with self.lock:
            recent = [(lat, ok) for t, lat, ok in self.done[-5000:] if now_s - span_s <= t <= now_s]
        if not recent:
            return 0.0, None
        lats = np.array([lat for lat, ok in recent if ok])
        p95 = float(np.percentile(lats, 95)) if len(lats) else None
        return len(recent) / span_s, p95


async def run_closed_loop(
    schedule: Schedule,
    url: str,
    model: str,
    *,
    sidecar: SidecarConfig | None,
    slo_p95_ms: float,
    mode: str = "controller",
    on_sample: Callable[[Sample, Any], Any] | None = None,
    timeout_s: float = 30.0,
    seed: int = 0,
    protocol: str = "grpc",
    device: DeviceMeter | None = None,
    sidecar_url: str | None = None,
    decision_log: Path | None = None,
) -> ClosedLoopResult:
    """Drive ``schedule`` at ``url`` (``host:port`` of ``protocol``); with ``sidecar``
    the controller runs alongside in this process, else what is live stays. With
    ``sidecar_url`` a sidecar already running elsewhere (:class:`SidecarProcess`) is
    followed through its ``/status``, and ``decision_log`` (its log) gives the
    switches. With ``device``, each phase's device time per request is read from
    Triton's compute times."""
    recorder = _Recorder()
    stop = asyncio.Event()
    holder: dict[str, Any] = {}
    sidecar_task = await _start_sidecar(sidecar, stop, holder) if sidecar is not None else None
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    load = loop.run_in_executor(
        None,
        lambda: run_load(
            url, model, schedule, protocol=protocol, timeout_s=timeout_s, seed=seed,
            on_record=recorder,
        ),
    )
    samples: list[Sample] = []
    starts = schedule.starts_s
    bounds = [*starts[1:], schedule.duration_s]
    remote = None
    if sidecar_url is not None:
        import httpx

        remote = httpx.AsyncClient(base_url=sidecar_url.rstrip("/"), timeout=2.0)
    meter = _PhaseMeter(device, bounds) if device is not None else None
    try:
        if meter is not None:
            await meter.start()
        while not load.done():
            origin = recorder.origin()
            if origin is not None:
                t0 = origin  # the load's own clock: set-up and warm-up come before it
            now = time.monotonic() - t0
            if meter is not None and origin is not None:
                await meter.reach(now)
            next_bound = next((b for b in bounds if b > now + 1e-3), None)
            wait = 1.0 if next_bound is None or origin is None else min(1.0, max(0.01, next_bound - now))
            await asyncio.wait({load}, timeout=wait)
            now = time.monotonic() - t0
            status = holder["sidecar"].controller.status if "sidecar" in holder else None
            if remote is not None:
                status = await _remote_status(remote)
            sample = _sample(schedule, now, recorder, status, mode)
            samples.append(sample)
            if on_sample is not None:
                on_sample(sample, status)
        report: LoadReport = load.result()
        if meter is not None:
            await meter.finish()
    finally:
        stop.set()
        if meter is not None:
            await meter.close()
        if sidecar_task is not None:
            await asyncio.gather(sidecar_task, return_exceptions=True)
        if remote is not None:
            await remote.aclose()
    switches: tuple[Switch, ...] = ()
    log_path = decision_log if decision_log is not None else (sidecar.decision_log if sidecar else None)
    if log_path is not None and Path(log_path).exists():
        switches = tuple(_switches(Path(log_path), t0_wall=time.time() - (time.monotonic() - t0), t0_mono=t0))
    per_phase = meter.per_phase(len(schedule.phases)) if meter is not None else None
    total = meter.total() if meter is not None else None
    result = ClosedLoopResult(mode, schedule, slo_p95_ms, report, tuple(samples), switches, device=total)
    return replace(result, phases=tuple(_summaries(result, per_phase)))


async def _start_sidecar(sidecar: SidecarConfig, stop: asyncio.Event,
                         holder: dict[str, Any]) -> asyncio.Task[None]:
    """The sidecar running on this loop, once it is ready (``holder["sidecar"]``)."""
    from autobatch.controller.app import run_sidecar

    started = asyncio.Event()

    def ready(sc: Any) -> None:
        holder["sidecar"] = sc
        started.set()

    sidecar_task = asyncio.create_task(run_sidecar(sidecar, stop=stop, ready=ready))
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({sidecar_task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if sidecar_task.done():
        waiter.cancel()
        sidecar_task.result()
        raise AutobatchError("the sidecar stopped before it started")
    return sidecar_task


def _sample(schedule: Schedule, now: float, recorder: _Recorder, status: Any, mode: str) -> Sample:
    """What is true ``now`` seconds into the load: its phase, the live profile, the last decision."""
    starts = schedule.starts_s
    i = max(0, min(len(starts) - 1, int(np.searchsorted(starts, now, side="right")) - 1))
    phase = schedule.phases[i]
    rps, p95 = recorder.last(now)
    decision = status.last_decision if status else None
    return Sample(
        t_s=round(now, 2),
        phase=phase.name,
        target_rps=phase.rate_rps,
        active=status.active if status else mode,
        completed_rps=rps,
        p95_ms=p95,
        decision=decision["action"] if decision else None,
        reason=decision["reason"] if decision else None,
    )


class _PhaseMeter:
    """Device readings at each phase boundary: [start of phase 0, end of phase 0, ...]."""

    def __init__(self, device: DeviceMeter, bounds: Sequence[float]) -> None:
        self.device = device
        self.bounds = list(bounds)
        """Each phase's end, seconds into the load."""
        self.readings: list[DeviceTotals] = []
        self._polling = asyncio.Event()
        self._poller: asyncio.Future[Any] | None = None

    async def start(self) -> None:
        # The origin: what ran before the load does not count (its one warm-up
        # request does, in the first phase).
        self.readings.append(await self.device.read())
        # Read between the boundaries too, so a reload inside a phase is seen as one.
        self._poller = asyncio.ensure_future(self.device.poll(self._polling))

    async def reach(self, now: float) -> None:
        """A reading for each boundary ``now`` has passed."""
        while len(self.readings) <= len(self.bounds) and now >= self.bounds[len(self.readings) - 1]:
            self.readings.append(await self.device.read())

    async def finish(self) -> None:
        # The drain after the schedule counts toward the last phase.
        final = await self.device.read()
        while len(self.readings) < len(self.bounds) + 1:
            self.readings.append(final)
        self.readings[-1] = final

    async def close(self) -> None:
        self._polling.set()
        if self._poller is not None:
            await asyncio.gather(self._poller, return_exceptions=True)

    def per_phase(self, phases: int) -> list[DeviceTotals] | None:
        r = self.readings
        return [r[i + 1] - r[i] for i in range(phases)] if r else None

    def total(self) -> DeviceTotals | None:
        return (self.readings[-1] - self.readings[0]) if self.readings else None


async def _remote_status(client: Any) -> _RemoteStatus | None:
    """The sidecar's ``/status``; None when it does not answer (the sample says so)."""
    import httpx

    try:
        r = await client.get("/status")
        data = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return _RemoteStatus(active=data.get("active_profile"), last_decision=data.get("last_decision"))


def _switches(log_path: Path, t0_wall: float, t0_mono: float | None = None) -> list[Switch]:
    """The log's switches on the load's clock: by the monotonic clock where a line carries it
    (a step of the wall clock mid-run then moves nothing), else by the wall clock."""
    out = []
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            d = row["decision"]
            if d["action"] != "switch" or not row.get("actuation"):
                continue
            a = row["actuation"]
            out.append(Switch(round(decision_time_s(row, t0_wall, t0_mono), 2), d["target"], d["reason"],
                              d["message"], bool(a["ok"]), a.get("duration_s")))
    return out


def _summaries(result: ClosedLoopResult, device: Sequence[DeviceTotals] | None) -> list[PhaseSummary]:
    starts = list(result.schedule.starts_s) + [result.schedule.duration_s]
    out = []
    records = result.report.records
    for i, (phase, stats) in enumerate(zip(result.schedule.phases, result.report.phases)):
        mine = [r for r in records if r.phase_index == i]
        over = sum(1 for r in mine if not r.ok or (r.latency_ms or 0) > result.slo_p95_ms)
        lo, hi = starts[i], starts[i + 1]
        in_phase = [s for s in result.samples if lo <= s.t_s < hi + 1e-9]
        shares: dict[str, float] = {}
        for s in in_phase:
            key = s.active or "?"
            shares[key] = shares.get(key, 0) + 1
        total = sum(shares.values()) or 1
        reaction = next((sw.t_s - lo for sw in result.switches if lo <= sw.t_s < hi and sw.ok), None)
        out.append(
            PhaseSummary(
                name=phase.name,
                target_rps=phase.rate_rps,
                throughput_rps=stats.throughput_rps,
                p50_ms=stats.p50_ms,
                p95_ms=stats.p95_ms,
                p99_ms=stats.p99_ms,
                over_slo=over,
                requests=len(mine),
                failures=dict(stats.failures),
                profiles={k: round(v / total, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1])},
                reaction_s=None if reaction is None else round(reaction, 1),
                device_ms=None if device is None else device[i].device_ms_per_request,
                mean_batch=None if device is None else device[i].mean_batch,
            )
        )
    return out


def latencies_during(records: Sequence[RequestRecord], windows: Sequence[tuple[float, float]]) -> np.ndarray:
    """Latencies (ms) of requests in flight during any of ``windows`` (offsets in seconds)."""
    lats = []
    for r in records:
        if r.sent_s is None or r.latency_ms is None:
            continue
        end = r.sent_s + r.latency_ms / 1000.0
        if any(r.sent_s < b and end > a for a, b in windows):
            lats.append(r.latency_ms)
    return np.array(lats)
