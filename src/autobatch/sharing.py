"""How the batches of many clients share one accelerator: the model the device and simulator run.

A *context* is one client of the device: a model instance, another model in
the same Triton, a co-tenant job. Each submits *jobs* (a batch of ``work_ms``:
what the batch takes with the device to itself, from its curve) and runs them
one after another, in order. The :class:`SharingModel` says how the device
divides its time among the contexts that have work (docs/shared-gpu.md gives
what each models on a real GPU, with sources):

* ``exclusive``: one job at a time, first submitted first served;
* ``timeslice``: round robin over the contexts with work, each holding the
  device for up to ``quantum_ms`` (plus ``switch_ms`` lost at every change of
  holder), as GPU time-slicing between processes does;
* ``concurrent``: every context with work progresses at once, together at
  ``throughput[k]`` times the speed of one alone when ``k`` are active
  (a throughput-sharing curve; 1 at ``k`` = 1), as kernels of concurrent streams do.

:class:`DeviceScheduler` is that model as a state machine over virtual time:
``submit`` a job, ``advance`` to a time and receive the jobs that completed by
then with their exact completion times, ask ``next_completion_ms``. The
emulated device process sleeps until the next completion and then advances to
the clock it reads, so a late wake-up delays a completion by the lateness alone,
never more; the simulator advances from event to event. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from autobatch.config import Section
from autobatch.errors import ConfigError

__all__ = [
    "Completion",
    "DeviceScheduler",
    "DeviceUsage",
    "SharingModel",
    "SharingPolicy",
    "parse_sharing",
]

EPS_MS = 1e-6
"""1 ns: a job with less than this left is done (float error over hours of ms)."""


class SharingPolicy(str, Enum):
    EXCLUSIVE = "exclusive"
    TIMESLICE = "timeslice"
    CONCURRENT = "concurrent"


@dataclass(frozen=True)
class SharingModel:
    """How one device divides its time among its contexts."""

    policy: SharingPolicy = SharingPolicy.TIMESLICE
    quantum_ms: float = 2.0
    """``timeslice``: the longest a context holds the device while others wait."""
    switch_ms: float = 0.0
    """``timeslice``: device time lost at each change of holder (a context switch)."""
    throughput: Mapping[int, float] = field(default_factory=lambda: {1: 1.0})
    """``concurrent``: the device's total speed with k contexts active, relative to one
    alone; past the largest k given, the last value holds."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", SharingPolicy(self.policy))
        if not (math.isfinite(self.quantum_ms) and self.quantum_ms > 0):
            raise ConfigError(f"sharing: quantum_ms = {self.quantum_ms!r}: must be a number > 0")
        if not (math.isfinite(self.switch_ms) and self.switch_ms >= 0):
            raise ConfigError(f"sharing: switch_ms = {self.switch_ms!r}: must be a number >= 0")
        points = dict(sorted((int(k), float(v)) for k, v in self.throughput.items()))
        problem = _throughput_problem(points)
        if problem:
            raise ConfigError(f"sharing: throughput{problem}")
        object.__setattr__(self, "throughput", points)

    def speed(self, active: int) -> float:
        """The device's total speed with ``active`` contexts running (``concurrent``)."""
        if active <= 0:
            return 0.0
        if self.policy is not SharingPolicy.CONCURRENT:
            return 1.0
        best = 1.0
        for k, v in self.throughput.items():
            if k > active:
                break
            best = v
        return best

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"policy": self.policy.value}
        if self.policy is SharingPolicy.TIMESLICE:
            out.update(quantum_ms=self.quantum_ms, switch_ms=self.switch_ms)
        if self.policy is SharingPolicy.CONCURRENT:
            out["throughput"] = dict(self.throughput)
        return out


def _throughput_problem(points: Mapping[int, float]) -> str | None:
    """What is wrong with a throughput-sharing curve (after its field name), or None."""
    if points.get(1) != 1.0:
        return f" = {dict(points)!r}: must map 1 to 1.0 (the speed of one context alone)"
    last_k, last_v = 1, 1.0
    for k, v in points.items():
        if k < 1 or not math.isfinite(v) or v < last_v or v > k:
            return (f"[{k}] = {v!r}: must be >= throughput[{last_k}] ({last_v:g}) and <= {k} "
                    "(k contexts run at most k times as fast as one)")
        last_k, last_v = k, v
    return None


def parse_sharing(sec: Section) -> SharingModel:
    """A :class:`SharingModel` from a YAML section (``policy``, ``quantum_ms``, ``switch_ms``,
    ``throughput``); errors name the file, field and value."""
    policy = sec.str("policy", SharingPolicy.TIMESLICE.value,
                     choices=tuple(p.value for p in SharingPolicy))
    quantum = sec.float("quantum_ms", 2.0, min=0.0, min_exclusive=True)
    switch = sec.float("switch_ms", 0.0, min=0.0)
    raw = sec.raw("throughput", None, null_is_default=True)
    throughput: dict[int, float] = {1: 1.0}
    if raw is not None:
        ok = isinstance(raw, Mapping) and all(
            isinstance(k, int) and not isinstance(k, bool) and isinstance(v, (int, float))
            and not isinstance(v, bool) for k, v in raw.items())
        if not ok:
            raise sec.fail("throughput", raw, "must map a number of active contexts (an integer) "
                           "to the device's total speed relative to one alone")
        throughput = {k: float(v) for k, v in sorted(raw.items())}
        problem = _throughput_problem(throughput)
        if problem:
            raise ConfigError(f"{sec.source}: {sec.field_path('throughput')}{problem}",
                              source=sec.source, field=sec.field_path("throughput"), value=raw)
    sec.done()
    return SharingModel(SharingPolicy(policy), quantum, switch, throughput)


@dataclass(frozen=True)
class Completion:
    """One job done."""

    context: str
    job: Hashable
    work_ms: float
    submitted_ms: float
    started_ms: float
    """When it first ran (``finished_ms - started_ms`` is its time on the device, stretched
    by whatever shared it)."""
    finished_ms: float


@dataclass(frozen=True)
class DeviceUsage:
    """Cumulative figures since the scheduler was built."""

    now_ms: float
    busy_ms: float
    """Time at least one job was running (what DCGM_FI_DEV_GPU_UTIL reports the share of)."""
    work_ms: Mapping[str, float]
    """Device work done per context, in ms of the device alone (a job's ``work_ms`` once done)."""
    completed: Mapping[str, int]
    """Jobs completed per context."""


class _Job:
    __slots__ = ("job", "left_ms", "started_ms", "submitted_ms", "work_ms")

    def __init__(self, job: Hashable, work_ms: float, submitted_ms: float) -> None:
        self.job = job
        self.work_ms = work_ms
        self.left_ms = work_ms
        self.submitted_ms = submitted_ms
        self.started_ms: float | None = None

    def clone(self) -> _Job:
        out = _Job(self.job, self.work_ms, self.submitted_ms)
        out.left_ms, out.started_ms = self.left_ms, self.started_ms
        return out


class DeviceScheduler:
    """The :class:`SharingModel` over virtual time (milliseconds from any origin).

    Within a context jobs run in submission order; across contexts the policy decides.
    Every method takes the time it is called at, which never goes back.
    """

    def __init__(self, model: SharingModel | None = None, *, start_ms: float = 0.0) -> None:
        self.model = model or SharingModel()
        self.now_ms = start_ms
        self._queues: dict[str, deque[_Job]] = {}
        # Contexts with work: the round robin (timeslice; its head holds the device) or the
        # set running together (concurrent). Exclusive keeps every queued job's context in
        # submission order instead.
        self._order: deque[str] = deque()
        self._fifo: deque[str] = deque()
        self._holder: str | None = None
        self._last_holder: str | None = None
        self._slice_left_ms = 0.0
        self._switch_left_ms = 0.0
        self._busy_ms = 0.0
        self._idle_since_ms = start_ms
        """When the last job completed (or the start): the device has been idle since, if
        nothing is pending."""
        self._work_ms: dict[str, float] = {}
        self._completed: dict[str, int] = {}
        # next_completion_ms's look ahead, kept until the state changes: advance() to that
        # time takes it over instead of running the same steps again (time-slicing takes a
        # step per quantum, so the simulator would otherwise run every quantum twice).
        self._peek: tuple[float, DeviceScheduler, list[Completion]] | None = None

    # -- public ------------------------------------------------------------------------
    def submit(self, now_ms: float, context: str, job: Hashable, work_ms: float, *,
               sent_ms: float | None = None) -> list[Completion]:
        """Queue ``job`` of ``work_ms`` (> 0) on ``context`` at ``now_ms``; returns what
        completed up to then, as :meth:`advance` does.

        ``sent_ms``: when its client sent it, if the way to the device took time. On a device
        that is idle it starts at ``max(sent_ms, when the device went idle)``: nothing ran
        meanwhile, so the model is exactly as if it had arrived then. On a busy device it
        queues at ``now_ms`` (an earlier instant would reorder what already ran)."""
        if not (isinstance(work_ms, (int, float)) and math.isfinite(work_ms) and work_ms > 0):
            raise ValueError(f"work_ms = {work_ms!r}: must be a number > 0")
        done = self.advance(now_ms)
        self._peek = None
        if sent_ms is not None and sent_ms < self.now_ms and not self.pending():
            # Idle since _idle_since_ms: no state to undo but the clock (busy time, queues,
            # the round robin do not change while idle); the job then runs up to now_ms.
            now_ms, self.now_ms = self.now_ms, max(sent_ms, self._idle_since_ms)
            self._queue(context, job, work_ms)
            return done + self.advance(now_ms)
        self._queue(context, job, work_ms)
        return done

    def _queue(self, context: str, job: Hashable, work_ms: float) -> None:
        q = self._queues.setdefault(context, deque())
        q.append(_Job(job, float(work_ms), self.now_ms))
        self._work_ms.setdefault(context, 0.0)
        self._completed.setdefault(context, 0)
        if self.model.policy is SharingPolicy.EXCLUSIVE:
            self._fifo.append(context)
        elif len(q) == 1:
            self._order.append(context)

    def advance(self, now_ms: float) -> list[Completion]:
        """Run the device up to ``now_ms``; the jobs completed meanwhile, in completion order."""
        if now_ms < self.now_ms - EPS_MS:
            raise ValueError(f"time went back: {now_ms} < {self.now_ms}")
        out: list[Completion] = []
        peek, self._peek = self._peek, None
        if peek is not None and peek[0] <= now_ms + EPS_MS:
            self._take_over(peek[1])
            out.extend(peek[2])
        while True:
            step = self._next_step_ms()
            if step is None or self.now_ms + step > now_ms + EPS_MS:
                self._run(max(0.0, now_ms - self.now_ms))
                break
            self._run(step)
            out.extend(self._settle())
        self.now_ms = max(self.now_ms, now_ms)
        return out

    def next_completion_ms(self) -> float | None:
        """When the next job completes if nothing more is submitted; None when idle."""
        if self._peek is not None:
            return self._peek[0]
        probe = self._copy()
        while True:
            step = probe._next_step_ms()
            if step is None:
                return None
            probe._run(step)
            done = probe._settle()
            if done:
                self._peek = (probe.now_ms, probe, done)
                return probe.now_ms

    def pending(self, context: str | None = None) -> int:
        """Jobs queued or running, on ``context`` or on all."""
        if context is not None:
            return len(self._queues.get(context, ()))
        return sum(len(q) for q in self._queues.values())

    def active_contexts(self) -> tuple[str, ...]:
        """Contexts with a job queued or running, in the order they became active."""
        return tuple(c for c, q in self._queues.items() if q)

    def usage(self) -> DeviceUsage:
        return DeviceUsage(self.now_ms, self._busy_ms, dict(self._work_ms), dict(self._completed))

    # -- the model -----------------------------------------------------------------------
    def _running(self) -> list[tuple[str, float]]:
        """(context, rate) of the jobs progressing now."""
        policy = self.model.policy
        if policy is SharingPolicy.EXCLUSIVE:
            return [(self._fifo[0], 1.0)] if self._fifo else []
        if policy is SharingPolicy.CONCURRENT:
            k = len(self._order)
            rate = self.model.speed(k) / k if k else 0.0
            return [(c, rate) for c in self._order]
        if self._holder is None and self._order:
            # The device is free: the head of the round robin takes a fresh slice.
            self._holder = self._order[0]
            self._slice_left_ms = self.model.quantum_ms
            if self._last_holder is not None and self._last_holder != self._holder:
                self._switch_left_ms = self.model.switch_ms
            self._last_holder = self._holder
        if self._holder is None or self._switch_left_ms > EPS_MS:
            return []
        return [(self._holder, 1.0)]

    def _next_step_ms(self) -> float | None:
        """Time until the next change: a job done, a slice over, a context switch over."""
        running = self._running()
        if self.model.policy is SharingPolicy.TIMESLICE and self._holder is not None:
            if self._switch_left_ms > EPS_MS:
                return self._switch_left_ms
            left = self._queues[self._holder][0].left_ms
            if len(self._order) == 1:
                return left  # alone it runs on across its slices: one step, not one per quantum
            return min(left, self._slice_left_ms)
        steps = [self._queues[c][0].left_ms / r for c, r in running if r > 0]
        return min(steps) if steps else None

    def _run(self, dt_ms: float) -> None:
        if dt_ms <= 0:
            return
        running = self._running()
        if self.model.policy is SharingPolicy.TIMESLICE and self._holder is not None:
            if self._switch_left_ms > EPS_MS:
                self._switch_left_ms -= dt_ms  # a context switch runs no job
                self.now_ms += dt_ms
                return
            left = self._slice_left_ms - dt_ms
            if left < 0.0 and len(self._order) == 1:
                # Alone, it ran past the end of its slice into the next ones (nobody waited,
                # so no switch): where its current slice stands.
                q = self.model.quantum_ms
                left = q - (-left) % q
            self._slice_left_ms = left
        if running:
            self._busy_ms += dt_ms
        for c, rate in running:
            job = self._queues[c][0]
            if job.started_ms is None:
                job.started_ms = self.now_ms
            done = min(job.left_ms, dt_ms * rate)
            job.left_ms -= done
            self._work_ms[c] += done
        self.now_ms += dt_ms

    def _settle(self) -> list[Completion]:
        """Complete the jobs that are done; end a slice that is over."""
        exclusive = self.model.policy is SharingPolicy.EXCLUSIVE
        heads = ([self._fifo[0]] if self._fifo else []) if exclusive else list(self._order)
        out: list[Completion] = []
        for c in heads:
            q = self._queues[c]
            if q[0].left_ms > EPS_MS:
                continue
            job = q.popleft()
            self._work_ms[c] += job.left_ms
            self._completed[c] += 1
            started = job.started_ms if job.started_ms is not None else self.now_ms
            out.append(Completion(c, job.job, job.work_ms, job.submitted_ms, started, self.now_ms))
            if exclusive:
                self._fifo.popleft()
            elif not q:
                self._order.remove(c)
                if self._holder == c:
                    self._holder = None
        if (self.model.policy is SharingPolicy.TIMESLICE and self._holder is not None
                and self._switch_left_ms <= EPS_MS and self._slice_left_ms <= EPS_MS):
            # The slice is over: the holder goes to the back of the round robin (alone, it
            # takes the next slice at once, with no switch).
            self._order.rotate(-1)
            self._holder = None
        if out and not self.pending():
            self._idle_since_ms = self.now_ms
        return out

    def _take_over(self, probe: DeviceScheduler) -> None:
        """Become ``probe``, a copy of this scheduler run ahead (the look ahead of
        :meth:`next_completion_ms`)."""
        self.now_ms = probe.now_ms
        self._queues, self._order, self._fifo = probe._queues, probe._order, probe._fifo
        self._holder, self._last_holder = probe._holder, probe._last_holder
        self._slice_left_ms, self._switch_left_ms = probe._slice_left_ms, probe._switch_left_ms
        self._busy_ms, self._work_ms, self._completed = probe._busy_ms, probe._work_ms, probe._completed
        self._idle_since_ms = probe._idle_since_ms

    def _copy(self) -> DeviceScheduler:
        other = DeviceScheduler(self.model, start_ms=self.now_ms)
        # Only a context's first job runs before the first completion: the copy clones that
        # one and shares the rest (a backlog of thousands is not cloned at every event).
        other._queues = {c: _first_cloned(q) for c, q in self._queues.items()}
        other._order = deque(self._order)
        other._fifo = deque(self._fifo)
        other._holder, other._last_holder = self._holder, self._last_holder
        other._slice_left_ms, other._switch_left_ms = self._slice_left_ms, self._switch_left_ms
        other._busy_ms = self._busy_ms
        other._idle_since_ms = self._idle_since_ms
        other._work_ms = dict(self._work_ms)
        other._completed = dict(self._completed)
        return other


def _first_cloned(q: deque[_Job]) -> deque[_Job]:
    out = deque(q)
    if out:
        out[0] = out[0].clone()
    return out
