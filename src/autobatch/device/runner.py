"""Co-tenant jobs run against an emulated device, each measured as its own client sees it.

Each job (:class:`~autobatch.cotenants.CoTenant`) is one context of the device:
a closed-loop job (``duty``) submits a batch, waits for it, idles its gap and
goes again; an open-loop job (``rate_bps``) submits on its own clock whether
or not the device keeps up, several outstanding at once. Both run only within
their active windows, measured from the runner's start.

    with CoTenantRunner(jobs, "127.0.0.1:9410", duration_s=60) as runner:
        ...                     # the measured run, alongside
    report = runner.report()    # each job's latency, throughput and device share

A job whose device goes away counts its failures and tries again every
``retry_s`` until the run ends; nothing waits longer than the client's
timeout.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autobatch.config import load_yaml
from autobatch.cotenants import CoTenant, load_cotenants, load_schedule_with_cotenants
from autobatch.device.client import JOB_TIMEOUT_S, DeviceClient, check_device
from autobatch.device.protocol import parse_address
from autobatch.errors import ConfigError, DeviceError
from autobatch.stats import LatencyStats

__all__ = ["CoTenantResult", "CoTenantRunner", "CoTenantsReport", "load_jobs", "run_cotenants"]

RETRY_S = 0.5
"""Pause before a job whose device failed tries again."""
DRAIN_S = 5.0
"""At the end, how long an open-loop job waits for the answers still due."""


@dataclass(frozen=True)
class CoTenantResult:
    """One job's run, as its own client measured it."""

    name: str
    kind: str
    """``duty`` (closed loop) or ``rate`` (open loop)."""
    batch_size: int
    work_ms: float
    """One batch's device time alone (its curve at ``batch_size``)."""
    demand: float
    """The share of the device it asks for alone (its duty, or rate x work)."""
    active_s: float
    """Seconds it was active within the run."""
    submitted: int
    completed: int
    failed: int
    latency: LatencyStats | None
    """Submission to answer, in ms, as its client saw it."""
    device: LatencyStats | None
    """Submission to completion on the device's own clock, in ms."""
    first_error: str | None = None

    @property
    def batches_per_s(self) -> float | None:
        return self.completed / self.active_s if self.active_s > 0 else None

    @property
    def items_per_s(self) -> float | None:
        b = self.batches_per_s
        return None if b is None else b * self.batch_size

    @property
    def busy_share(self) -> float | None:
        """Its work done over its active time: the share of the device it got."""
        return self.completed * self.work_ms / 1000.0 / self.active_s if self.active_s > 0 else None

    @property
    def stretch(self) -> float | None:
        """Median device time of a batch over its work alone (1 with the device to itself)."""
        return None if self.device is None else self.device.p50_ms / self.work_ms

    def to_dict(self) -> dict[str, Any]:
        def r(v: float | None, n: int = 3) -> float | None:
            return None if v is None else round(v, n)

        return {
            "name": self.name, "kind": self.kind, "batch_size": self.batch_size,
            "work_ms": r(self.work_ms), "demand": r(self.demand, 4), "active_s": r(self.active_s),
            "submitted": self.submitted, "completed": self.completed, "failed": self.failed,
            "batches_per_s": r(self.batches_per_s), "items_per_s": r(self.items_per_s),
            "busy_share": r(self.busy_share, 4), "stretch": r(self.stretch),
            "latency_ms": None if self.latency is None else self.latency.to_dict(),
            "device_ms": None if self.device is None else self.device.to_dict(),
            "first_error": self.first_error,
        }


@dataclass(frozen=True)
class CoTenantsReport:
    device: str
    duration_s: float
    results: tuple[CoTenantResult, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "duration_s": round(self.duration_s, 3),
                "cotenants": [r.to_dict() for r in self.results]}


class _Job:
    """One co-tenant's thread(s) and what they measured."""

    def __init__(self, job: CoTenant, runner: CoTenantRunner, seed: int) -> None:
        self.job = job
        self.runner = runner
        self.seed = seed
        self.latency_ms: list[float] = []
        self.device_ms: list[float] = []
        self.submitted = 0
        self.failed = 0
        self.first_error: str | None = None
        self.threads: list[threading.Thread] = []

    def client(self) -> DeviceClient:
        return DeviceClient(self.runner.address, self.job.name, timeout_s=self.runner.timeout_s)

    def fail(self, exc: DeviceError) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = str(exc)

    def start(self) -> None:
        target = self._closed_loop if self.job.duty is not None else self._open_loop
        t = threading.Thread(target=target, name=f"cotenant-{self.job.name}", daemon=True)
        t.start()
        self.threads.append(t)

    def _closed_loop(self) -> None:
        r = self.runner
        client = self.client()
        work, n = self.job.work_ms, self.job.batch_size
        t_s: float | None = self.job.next_start_s(0.0)
        try:
            while t_s is not None and t_s < r.duration_s:
                if r.sleep_until(t_s):
                    return
                sent = r.elapsed_s()
                self.submitted += 1
                try:
                    done = client.run(work, n)
                except DeviceError as exc:
                    self.fail(exc)
                    t_s = self.job.next_start_s(r.elapsed_s() + r.retry_s)
                    continue
                end = r.elapsed_s()
                self.latency_ms.append((end - sent) * 1000.0)
                self.device_ms.append(done.device_ms)
                t_s = self.job.closed_loop_next_s(end)
        finally:
            client.close()

    def _open_loop(self) -> None:
        r = self.runner
        times = self.job.open_loop_submits_s(r.duration_s, self.seed)
        client = self.client()
        # When each outstanding job was sent, in order: the device answers a context's jobs in
        # the order they were sent, so the next answer pairs with the oldest.
        sent: queue.Queue[float] = queue.Queue()
        sender_done = threading.Event()

        def receive() -> None:
            while True:
                try:
                    t0 = sent.get(timeout=0.1)
                except queue.Empty:
                    if sender_done.is_set():
                        return
                    continue
                try:
                    done = client.wait()
                except DeviceError as exc:
                    self.fail(exc)
                    while True:  # what the broken connection still owed is lost too
                        try:
                            sent.get_nowait()
                        except queue.Empty:
                            break
                        self.fail(exc)
                    continue
                self.latency_ms.append((r.elapsed_s() - t0) * 1000.0)
                self.device_ms.append(done.device_ms)

        receiver = threading.Thread(target=receive, name=f"cotenant-{self.job.name}-rx", daemon=True)
        started = False
        try:
            for t_s in times:
                if r.sleep_until(float(t_s)):
                    break
                self.submitted += 1
                if not client.connected:
                    if not sent.empty():  # the receiver has yet to count what the old connection lost
                        self.fail(DeviceError(f"{r.address}: the connection broke"))
                        continue
                    try:
                        client.connect()
                    except DeviceError as exc:
                        self.fail(exc)
                        continue
                if not started:
                    receiver.start()
                    started = True
                sent.put(r.elapsed_s())
                try:
                    client.submit(self.job.work_ms, self.job.batch_size)
                except DeviceError:
                    continue  # the receiver counts what the broken connection lost
        finally:
            sender_done.set()
            if started:
                receiver.join(DRAIN_S + r.timeout_s)
            client.close()

    def result(self, duration_s: float) -> CoTenantResult:
        job = self.job
        active = sum(max(0.0, min(b, duration_s) - a) for a, b in job.windows if a < duration_s)
        return CoTenantResult(
            name=job.name, kind="duty" if job.duty is not None else "rate", batch_size=job.batch_size,
            work_ms=job.work_ms, demand=job.demand_share, active_s=active, submitted=self.submitted,
            completed=len(self.latency_ms), failed=self.failed,
            latency=LatencyStats.of(np.array(self.latency_ms)),
            device=LatencyStats.of(np.array(self.device_ms)), first_error=self.first_error,
        )


class CoTenantRunner:
    """Runs co-tenant jobs against the device at ``address`` for ``duration_s`` (see the module
    docstring). Checks the device answers before anything starts."""

    def __init__(self, jobs: Sequence[CoTenant], address: str, *, duration_s: float, seed: int = 0,
                 timeout_s: float = JOB_TIMEOUT_S, retry_s: float = RETRY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not jobs:
            raise ConfigError("cotenants: no jobs to run", field="cotenants")
        if not (math.isfinite(duration_s) and duration_s > 0):
            raise ConfigError(f"duration_s = {duration_s!r}: must be a number of seconds > 0",
                              field="duration_s", value=duration_s)
        self.address = str(parse_address(address))
        self.jobs = tuple(jobs)
        self.duration_s = float(duration_s)
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.clock = clock
        self.stop_event = threading.Event()
        self._t0: float | None = None
        self._ended_s: float | None = None
        self._workers = [_Job(j, self, seed + i) for i, j in enumerate(self.jobs)]

    def elapsed_s(self) -> float:
        assert self._t0 is not None
        return self.clock() - self._t0

    def sleep_until(self, t_s: float) -> bool:
        """Wait until ``t_s`` into the run; True if the run was stopped meanwhile."""
        left = t_s - self.elapsed_s()
        if left > 0:
            return self.stop_event.wait(left)
        return self.stop_event.is_set()

    def start(self) -> CoTenantRunner:
        check_device(self.address)
        self._t0 = self.clock()
        for w in self._workers:
            w.start()
        return self

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for every job to end (the run's end); True if they all did."""
        deadline = None if timeout_s is None else self.clock() + timeout_s
        for w in self._workers:
            for t in w.threads:
                t.join(None if deadline is None else max(0.0, deadline - self.clock()))
        return not any(t.is_alive() for w in self._workers for t in w.threads)

    def stop(self) -> None:
        """End the run now (jobs finish the batch they are waiting for, within the timeout)."""
        if self._t0 is not None and self._ended_s is None:
            self._ended_s = min(self.elapsed_s(), self.duration_s)
        self.stop_event.set()
        self.join(self.timeout_s + DRAIN_S)

    def report(self) -> CoTenantsReport:
        ended = self._ended_s if self._ended_s is not None else self.duration_s
        return CoTenantsReport(self.address, ended, tuple(w.result(ended) for w in self._workers))

    def __enter__(self) -> CoTenantRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_cotenants(jobs: Sequence[CoTenant], address: str, *, duration_s: float, seed: int = 0,
                  timeout_s: float = JOB_TIMEOUT_S) -> CoTenantsReport:
    """Run the jobs for ``duration_s`` (or until interrupted) and report each one."""
    runner = CoTenantRunner(jobs, address, duration_s=duration_s, seed=seed, timeout_s=timeout_s)
    runner.start()
    try:
        runner.join(duration_s + timeout_s + DRAIN_S)
    finally:
        runner.stop()
    return runner.report()


def load_jobs(path: str | Path) -> tuple[tuple[CoTenant, ...], float | None]:
    """The co-tenant jobs of a file, and the run's length when the file is a schedule (its
    phases then place the jobs: ``cotenants: N``); a co-tenant file gives None."""
    data = load_yaml(path)
    if isinstance(data, dict) and "phases" in data:
        schedule, jobs = load_schedule_with_cotenants(path)
        if not jobs:
            raise ConfigError(f"{path}: cotenants: required field is missing (a list of jobs)",
                              source=str(path), field="cotenants")
        return jobs, schedule.duration_s
    return load_cotenants(path), None
