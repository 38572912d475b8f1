"""A discrete-event model of Triton's dynamic batcher, fed by a batch curve.

The batch-formation rules are Triton's (core ``dynamic_batch_scheduler.cc``,
``scheduler_utils.cc``), not a textbook queue. When requests are queued, the
batcher walks the queue in arrival order (priority level 1 first, then 2, ...;
within a level, the main queue and then the requests a ``DELAY`` timeout moved
behind it) and takes up to ``max_batch_size`` requests. Then:

1. if the oldest request taken has waited ``max_queue_delay`` or longer, it
   sends everything it took (up to ``max_batch_size``);
2. else, if a preferred size can be formed, it sends the largest preferred
   size that fits;
3. else, with ``max_queue_delay`` 0, it sends everything it took;
4. else it waits, until an arrival completes a preferred size (sent at once)
   or the oldest request's delay runs out.

An empty ``preferred_batch_size`` counts as ``[max_batch_size]`` (Triton fills
it in when it loads the config). Batches go to whichever instance is free
first. Queue policies apply as in Triton: a level's ``max_queue_size`` rejects
arrivals at the door; a request older than its level's timeout is rejected
(``REJECT``) or moved behind the level's other requests (``DELAY``) when the
walk reaches it.

*When* the batcher looks matters as much as what it does then. Triton forms
the next batch (a "payload") while the instances are busy and lets it grow
until an instance takes it, but an arrival wakes the batcher only under
conditions that leave some arrivals out of a payload they could have joined.
The ``triton`` engine models that thread (see :func:`_run_triton`); it is the
default, and its p50 and p95 are within 15% of the real server's (the
fidelity test). The ``rules`` engine applies the rules above whenever an
instance is free, a simpler reference; the ``general`` engine does the same
with priority levels and queue policies.

An instance is busy for the curve's time of the batch (times lognormal noise
with ``noise_cv``, as the emulated accelerator does) plus a fixed cost per
batch and per request. Every latency also gets a fixed cost that does not
occupy the instance (the network, the client, the protocol). On a real server
those costs are not zero: :func:`autobatch.lab.measure.overheads_from_stats`
measures them from Triton's own timers, and the simulator takes them as plain
parameters rather than folding them into the curve.

Pure: values in, values out.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError
from autobatch.profiles import Profile, QueuePolicy
from autobatch.schedule import Schedule, arrivals

__all__ = [
    "ENGINES",
    "LatencyStats",
    "PhaseResult",
    "PriorityResult",
    "ServiceModel",
    "SimResult",
    "Workload",
    "simulate",
]


ENGINES = ("auto", "triton", "rules", "general")

# -- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceModel:
    """How long an instance is busy with a batch, and what every request pays besides."""

    curve: BatchCurve
    batch_overhead_ms: float = 0.0
    """Instance time per batch beyond the curve (backend IPC, gathering inputs,
    writing outputs). 0 models the bare device."""
    request_overhead_ms: float = 0.0
    """Instance time per request in a batch beyond the curve (per-request tensors
    and responses)."""
    fixed_latency_ms: float = 0.0
    """Added to every latency without occupying the instance: network, protocol,
    client. The planner puts the SLO's network overhead here."""
    noise_cv: float = 0.0
    """Coefficient of variation of lognormal noise on each batch's curve time;
    0 is deterministic."""

    def __post_init__(self) -> None:
        for name in ("batch_overhead_ms", "request_overhead_ms", "fixed_latency_ms", "noise_cv"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ConfigError(f"{name} = {v!r}: must be a number >= 0")

    def curve_ms(self, batch_size: int) -> float:
        return self.curve.estimate(batch_size).ms

    def busy_ms(self, batch_size: int) -> float:
        """Mean instance time of one batch of ``batch_size``."""
        return (
            self.curve_ms(batch_size)
            + self.batch_overhead_ms
            + batch_size * self.request_overhead_ms
        )

    def capacity_rps(self, batch_size: int, instances: int = 1) -> float:
        """Requests per second when every batch has ``batch_size`` requests."""
        return instances * batch_size * 1000.0 / self.busy_ms(batch_size)


@dataclass(frozen=True)
class Workload:
    """Arrival times (seconds from 0, sorted), optionally with priorities and phases."""

    t_s: np.ndarray
    duration_s: float
    """How long arrivals were drawn for (throughput is counted over at least this)."""
    priority: np.ndarray | None = None
    """Triton priority of each request (0 = the profile's default level)."""
    phase: np.ndarray | None = None
    """Phase index of each request, for per-phase results."""
    phase_names: tuple[str, ...] = ()
    phase_starts_s: tuple[float, ...] = ()
    phase_durations_s: tuple[float, ...] = ()
    label: str = "workload"

    def __post_init__(self) -> None:
        t = np.asarray(self.t_s, dtype=np.float64)
        if t.ndim != 1:
            raise ConfigError("workload arrival times must be a 1-d array")
        if t.shape[0] > 1 and np.any(np.diff(t) < 0):
            raise ConfigError("workload arrival times must be sorted")
        if t.shape[0] and t[0] < 0:
            raise ConfigError("workload arrival times must be >= 0")
        object.__setattr__(self, "t_s", t)
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ConfigError(f"workload duration_s = {self.duration_s!r}: must be > 0")
        for name in ("priority", "phase"):
            arr = getattr(self, name)
            if arr is not None:
                arr = np.asarray(arr, dtype=np.int64)
                if arr.shape != t.shape:
                    raise ConfigError(f"workload {name} must have one entry per arrival")
                object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    @property
    def offered_rps(self) -> float:
        return len(self) / self.duration_s

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    def from_schedule(
        cls,
        schedule: Schedule,
        seed: int = 0,
        *,
        priority_mix: Mapping[int, float] | None = None,
        label: str | None = None,
    ) -> Workload:
        """The arrivals ``autobatch load`` would send for ``schedule`` and ``seed``."""
        drawn = arrivals(schedule, np.random.default_rng(seed))
        t = np.array(drawn.t_s, dtype=np.float64)
        return cls(
            t_s=t,
            duration_s=schedule.duration_s,
            priority=_priorities(len(t), priority_mix, seed),
            phase=np.array(drawn.phase, dtype=np.int64),
            phase_names=tuple(p.name for p in schedule.phases),
            phase_starts_s=schedule.starts_s,
            phase_durations_s=tuple(p.duration_s for p in schedule.phases),
            label=label or f"schedule of {len(schedule.phases)} phase(s)",
        )

    @classmethod
    def poisson(
        cls,
        rate_rps: float,
        duration_s: float,
        seed: int = 0,
        *,
        priority_mix: Mapping[int, float] | None = None,
    ) -> Workload:
        schedule = Schedule.constant(rate_rps, duration_s, name="poisson")
        return cls.from_schedule(
            schedule, seed, priority_mix=priority_mix, label=f"Poisson at {rate_rps:g} rps"
        )

    @classmethod
    def bursty(
        cls,
        rate_rps: float,
        duration_s: float,
        burst_size: int,
        seed: int = 0,
        *,
        priority_mix: Mapping[int, float] | None = None,
    ) -> Workload:
        from autobatch.schedule import Phase

        schedule = Schedule((Phase("bursty", rate_rps, duration_s, "bursty", burst_size),))
        return cls.from_schedule(
            schedule,
            seed,
            priority_mix=priority_mix,
            label=f"bursts of {burst_size} at {rate_rps:g} rps",
        )

    @classmethod
    def streams(cls, sessions: int, fps: float, duration_s: float, seed: int = 0) -> Workload:
        """``sessions`` periodic streams at ``fps``, each starting at a random phase.

        Every frame is a request (Triton queues them all; the sessions model in
        :mod:`autobatch.plan.sessions` is the one that overwrites stale frames).
        """
        t = stream_frames(sessions, fps, duration_s, seed)[0]
        return cls(t_s=t, duration_s=duration_s, label=f"{sessions} streams at {fps:g} fps")


def stream_frames(
    sessions: int, fps: float, duration_s: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Frame times and session ids of periodic streams with random phases, sorted by time."""
    if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
        raise ConfigError(f"sessions = {sessions!r}: must be an integer >= 1")
    if not (math.isfinite(fps) and fps > 0):
        raise ConfigError(f"fps = {fps!r}: must be a number > 0")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"duration_s = {duration_s!r}: must be a number > 0")
    period = 1.0 / fps
    rng = np.random.default_rng(seed)
    offsets = rng.uniform(0.0, period, size=sessions)
    times, ids = [], []
    for s, off in enumerate(offsets):
        n = int(math.floor((duration_s - off) / period)) + 1 if off < duration_s else 0
        ts = off + np.arange(n, dtype=np.float64) * period
        ts = ts[ts < duration_s]
        times.append(ts)
        ids.append(np.full(ts.shape[0], s, dtype=np.int64))
    t = np.concatenate(times)
    sid = np.concatenate(ids)
    order = np.argsort(t, kind="stable")
    return t[order], sid[order]


def _priorities(n: int, mix: Mapping[int, float] | None, seed: int) -> np.ndarray | None:
    if not mix:
        return None
    levels = sorted(mix)
    weights = np.array([mix[k] for k in levels], dtype=np.float64)
    if any(k < 0 for k in levels) or np.any(weights < 0) or weights.sum() <= 0:
        raise ConfigError(
            f"priority_mix = {dict(mix)!r}: levels must be >= 0 and shares >= 0, not all 0"
        )
    rng = np.random.default_rng([seed, 7])
    return np.array(levels, dtype=np.int64)[
        rng.choice(len(levels), size=n, p=weights / weights.sum())
    ]


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyStats:
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float

    @classmethod
    def of(cls, ms: np.ndarray) -> LatencyStats | None:
        if ms.shape[0] == 0:
            return None
        p50, p95, p99 = np.percentile(ms, (50, 95, 99))
        return cls(float(p50), float(p95), float(p99), float(ms.mean()), float(ms.max()))

    def to_dict(self) -> dict[str, float]:
        return {
            "p50": round(self.p50_ms, 3),
            "p95": round(self.p95_ms, 3),
            "p99": round(self.p99_ms, 3),
            "mean": round(self.mean_ms, 3),
            "max": round(self.max_ms, 3),
        }


def _latency_dict(stats: LatencyStats | None) -> dict[str, float] | None:
    return None if stats is None else stats.to_dict()


@dataclass(frozen=True)
class PhaseResult:
    name: str
    requests: int
    completed: int
    rejected: int
    throughput_rps: float
    latency: LatencyStats | None
    mean_batch: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "requests": self.requests,
            "completed": self.completed,
            "rejected": self.rejected,
            "throughput_rps": round(self.throughput_rps, 3),
            "latency_ms": _latency_dict(self.latency),
            "mean_batch": round(self.mean_batch, 3),
        }


@dataclass(frozen=True)
class PriorityResult:
    level: int
    requests: int
    completed: int
    rejected: int
    latency: LatencyStats | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "requests": self.requests,
            "completed": self.completed,
            "rejected": self.rejected,
            "latency_ms": _latency_dict(self.latency),
        }


@dataclass(frozen=True)
class SimResult:
    """What one simulated run produced. Latencies are arrival to completion plus
    the service model's fixed latency; queue times are arrival to batch start."""

    requests: int
    completed: int
    rejected: int
    duration_s: float
    span_s: float
    """From 0 to the later of the workload's end and the last completion."""
    throughput_rps: float
    """Completed requests per second of the span."""
    latency: LatencyStats | None
    queue: LatencyStats | None
    batches: int
    mean_batch: float
    batch_counts: Mapping[int, int]
    utilisation: float
    """Busy instance time over ``instances * span``."""
    instances: int
    engine: str
    """Which engine ran: ``triton``, ``rules`` or ``general`` (see :func:`simulate`)."""
    phases: tuple[PhaseResult, ...] = ()
    priorities: tuple[PriorityResult, ...] = ()
    latencies_ms: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def offered_rps(self) -> float:
        return self.requests / self.duration_s

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests,
            "completed": self.completed,
            "rejected": self.rejected,
            "duration_s": round(self.duration_s, 6),
            "offered_rps": round(self.offered_rps, 3),
            "throughput_rps": round(self.throughput_rps, 3),
            "latency_ms": _latency_dict(self.latency),
            "queue_ms": _latency_dict(self.queue),
            "batches": self.batches,
            "mean_batch": round(self.mean_batch, 3),
            "batch_counts": {str(k): v for k, v in sorted(self.batch_counts.items())},
            "utilisation": round(self.utilisation, 4),
            "instances": self.instances,
            "engine": self.engine,
        }
        if self.phases:
            out["phases"] = [p.to_dict() for p in self.phases]
        if self.priorities:
            out["priorities"] = [p.to_dict() for p in self.priorities]
        return out


# -- the engines ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Level:
    timeout_s: float
    delay_action: bool
    max_queue_size: int


def _policy(policy: QueuePolicy | None) -> _Level:
    if policy is None:
        return _Level(0.0, False, 0)
    return _Level(
        policy.default_timeout_microseconds / 1e6,
        policy.timeout_action == "DELAY",
        policy.max_queue_size,
    )


def _tables(
    profile: Profile, service: ServiceModel
) -> tuple[list[int], list[int], list[float], list[float]]:
    """For k queued requests (0..max_batch_size): the largest preferred size <= k
    (0 if none), the smallest preferred size > k (0 if none), and the curve time
    and overhead of a batch of k."""
    mbs = profile.max_batch_size
    pref = sorted(profile.effective_preferred)
    best = [0] * (mbs + 1)
    nxt = [0] * (mbs + 1)
    for k in range(mbs + 1):
        below = [p for p in pref if p <= k]
        above = [p for p in pref if p > k]
        best[k] = below[-1] if below else 0
        nxt[k] = above[0] if above else 0
    curve_s = [0.0] + [service.curve_ms(b) / 1000.0 for b in range(1, mbs + 1)]
    over_s = [0.0] + [
        (service.batch_overhead_ms + b * service.request_overhead_ms) / 1000.0
        for b in range(1, mbs + 1)
    ]
    return best, nxt, curve_s, over_s


def _noise(service: ServiceModel, n: int, seed: int) -> list[float]:
    """One factor per possible batch (at most one batch per request)."""
    if service.noise_cv <= 0 or n == 0:
        return [1.0] * n
    sigma = math.sqrt(math.log(1.0 + service.noise_cv**2))
    rng = np.random.default_rng([seed, 11])
    return rng.lognormal(-sigma * sigma / 2.0, sigma, size=n).tolist()


def _run_fifo(
    t: list[float],
    profile: Profile,
    service: ServiceModel,
    instances: int,
    seed: int,
) -> tuple[list[int], list[float], list[float]]:
    """The ``rules`` engine: the module's rules, decided whenever an instance is free.

    One FIFO queue: batches are contiguous runs of arrivals, so the queue is a
    pair of indices and each decision costs a bisection, not a walk."""
    n = len(t)
    mbs = profile.max_batch_size
    delay = profile.max_queue_delay_us / 1e6
    best, nxt, curve_s, over_s = _tables(profile, service)
    noise = _noise(service, n, seed)
    free = [0.0] * instances
    sizes: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    head = 0
    last = 0.0
    bisect_right = bisect.bisect_right
    heappop, heappush = heapq.heappop, heapq.heappush
    k = 0
    while head < n:
        now = heappop(free)
        oldest = t[head]
        if now < oldest:
            now = oldest
        if now < last:
            now = last
        hi = head + mbs if head + mbs < n else n
        if delay > 0.0:
            deadline = oldest + delay
            while True:
                avail = bisect_right(t, now, head, hi) - head
                if now >= deadline:
                    size = avail
                    break
                size = best[avail]
                if size:
                    break
                # Wait for the arrival that completes the next preferred size,
                # or for the oldest request's delay to run out.
                j = head + nxt[avail] - 1
                now = t[j] if nxt[avail] and j < n and t[j] < deadline else deadline
        else:
            avail = bisect_right(t, now, head, hi) - head
            size = best[avail] or avail
        end = now + curve_s[size] * noise[k] + over_s[size]
        k += 1
        heappush(free, end)
        sizes.append(size)
        starts.append(now)
        ends.append(end)
        head += size
        last = now
    return sizes, starts, ends


def _run_triton(
    t: list[float],
    profile: Profile,
    service: ServiceModel,
    instances: int,
    seed: int,
) -> tuple[list[int], list[float], list[float]]:
    """Triton's batcher thread, payload by payload, for one FIFO queue.

    What the plain rules leave out, and what moves latency on a real server
    (seen in Triton's request traces and read in ``dynamic_batch_scheduler.cc``):

    * the batcher forms a *payload* while the instances are busy, up to two per
      instance wait for one ("prefetch"); a queued payload keeps growing
      while the batcher looks at it, and stops when an instance takes it;
    * the batcher only looks when it is woken: by its own timer (the oldest
      request's delay, or 500 ms when the queue is empty), when an instance
      takes a payload, or by an arrival, but an arrival wakes it only if the
      requests queued outside the payload reach ``next_preferred_batch_size``,
      a figure set by the last walk that ended waiting. After a payload left
      because its delay ran out, that figure is stale, so later arrivals do
      not join that payload and start the next one instead.

    Requests are single items, so a payload is a contiguous run of arrivals.
    """
    n = len(t)
    mbs = profile.max_batch_size
    delay = profile.max_queue_delay_us / 1e6
    pref = sorted(profile.effective_preferred)
    pref_set = set(pref)
    max_pref = pref[-1]
    best_tab, next_tab, curve_s, over_s = _tables(profile, service)
    noise = _noise(service, n, seed)
    cap = 2 * instances  # payloads that may wait for an instance
    idle_wait_s = 0.5  # the batcher's wait when its queue is empty
    inf = math.inf
    heappop, heappush = heapq.heappop, heapq.heappush

    sizes: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    busy_heap: list[float] = []
    idle = instances
    waiting: deque[list[int]] = deque()  # payloads waiting for an instance: [first, size]
    cp: list[int] = [0, 0]  # the batcher's current payload
    cp_state = 0  # 0 empty, 1 queued for an instance, 2 executing
    saturated = False
    next_pref = 0
    head = 0  # first request not in any payload
    adm = 0  # arrivals so far
    timer = 0.0 if n else inf
    k = 0

    while True:
        if head >= n and not busy_heap:
            break  # every request has run (the batcher's idle timer would tick forever)
        t_arr = t[adm] if adm < n else inf
        t_done = busy_heap[0] if busy_heap else inf
        # At equal times an arrival goes first (it is in the queue at that instant,
        # as in the other engines), then a finished batch, then the batcher's timer.
        if t_arr <= t_done and t_arr <= timer:
            now = t_arr
            adm += 1
            if not (
                len(waiting) < cap
                and (saturated or cp_state == 2 or adm - head >= next_pref)
            ):
                continue
        elif t_done <= timer:
            now = heappop(busy_heap)
            idle += 1
            if not waiting:
                continue
            # The free instance takes the next payload; its callback wakes the batcher.
            p = waiting.popleft()
            idle -= 1
            size = p[1]
            end = now + curve_s[size] * noise[k] + over_s[size]
            k += 1
            heappush(busy_heap, end)
            sizes.append(size)
            starts.append(now)
            ends.append(end)
            if p is cp:
                cp_state = 2
        else:
            now = timer
        # The batcher runs until it blocks.
        timer = inf
        while True:
            if saturated or cp_state == 2:
                cp = [head, 0]
                cp_state = 0
                saturated = False
                next_pref = 0
            queued = adm - head
            if queued == 0:
                timer = now + idle_wait_s
                break
            if len(waiting) >= cap:
                break  # waits for a slot: the next payload an instance takes wakes it
            P = cp[1]
            limit = mbs - P
            pending = queued if queued < limit else limit
            walked = queued if queued < limit + 1 else limit + 1
            b = best_tab[P + pending]
            best = b - P if b > P else 0
            if P + walked > max_pref and not (P == 0 and walked == 1):
                saturated = True
            # Compared as "now >= arrival + delay", the same sum the timer was set to:
            # "now - arrival >= delay" can miss by a rounding error and spin forever.
            exceeded = delay > 0.0 and pending > 0 and now >= t[head] + delay
            take = 0
            if best and not exceeded:
                if delay == 0.0:
                    saturated = True
                take = best
            elif pending == 0:
                take = 0
            elif queued > limit or P + pending >= max_pref:
                saturated = True
                take = pending
            elif exceeded or delay == 0.0:
                take = pending
            else:
                nxt = next_tab[P + pending]
                next_pref = (nxt if nxt else pref[0]) - P
                if not saturated and P != 0 and P not in pref_set:
                    take = pending
                else:
                    timer = t[head] + delay
                    break
            if take:
                if cp[1] == 0:
                    cp[0] = head
                cp[1] += take
                head += take
                if cp_state == 0:
                    cp_state = 1
                    if idle:
                        idle -= 1
                        size = cp[1]
                        end = now + curve_s[size] * noise[k] + over_s[size]
                        k += 1
                        heappush(busy_heap, end)
                        sizes.append(size)
                        starts.append(now)
                        ends.append(end)
                        cp_state = 2
                    else:
                        waiting.append(cp)
            elif pending == 0 and not saturated:
                # Nothing can join the payload (it is full); wait for it to leave.
                timer = now + idle_wait_s
                break
    return sizes, starts, ends


def _run_general(
    t: list[float],
    level_of: list[int],
    levels: dict[int, _Level],
    profile: Profile,
    service: ServiceModel,
    instances: int,
    seed: int,
) -> tuple[list[int], list[float], list[float], np.ndarray, np.ndarray, np.ndarray]:
    """Per-level queues walked in priority order, with timeouts and queue limits.

    Returns the batches (sizes, starts, ends) and, per request, its start, end
    (NaN if rejected) and batch size (0 if rejected).
    """
    n = len(t)
    mbs = profile.max_batch_size
    delay = profile.max_queue_delay_us / 1e6
    pref = set(profile.effective_preferred)
    max_pref = max(pref)
    _, _, curve_s, over_s = _tables(profile, service)
    noise = _noise(service, n, seed)
    order = sorted(levels)
    main: dict[int, deque[int]] = {lv: deque() for lv in order}
    delayed: dict[int, deque[int]] = {lv: deque() for lv in order}
    req_start = np.full(n, np.nan)
    req_end = np.full(n, np.nan)
    req_batch = np.zeros(n, dtype=np.int64)
    sizes: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    free = [0.0] * instances
    queued = 0
    i = 0
    last = 0.0
    k = 0

    def admit(until: float) -> None:
        nonlocal i, queued
        while i < n and t[i] <= until:
            lv = level_of[i]
            pol = levels[lv]
            if pol.max_queue_size and len(main[lv]) + len(delayed[lv]) >= pol.max_queue_size:
                pass  # rejected at the door: "Exceeds maximum queue size"
            else:
                main[lv].append(i)
                queued += 1
            i += 1

    while i < n or queued:
        now = max(free[0], last)
        if not queued:
            now = max(now, t[i])
        admit(now)
        while True:
            # Walk: priority order, main queue then the delayed one, up to mbs.
            taken: list[tuple[int, int, int]] = []  # (level, from_delayed, count)
            count = 0
            oldest = math.inf
            closest_timeout = math.inf
            best_pref = 0
            for lv in order:
                if count >= mbs:
                    break
                pol = levels[lv]
                q = main[lv]
                if pol.timeout_s > 0:
                    # Within a level the timeout is the same for all, so the expired
                    # requests are the oldest ones: the front of the main queue.
                    while q and now > t[q[0]] + pol.timeout_s:
                        idx = q.popleft()
                        if pol.delay_action:
                            delayed[lv].append(idx)
                        else:
                            queued -= 1
                for from_delayed, src in ((0, q), (1, delayed[lv])):
                    m = min(len(src), mbs - count)
                    if m <= 0:
                        continue
                    for j in range(m):
                        idx = src[j]
                        if t[idx] < oldest:
                            oldest = t[idx]
                        if pol.timeout_s > 0 and not from_delayed:
                            closest_timeout = min(closest_timeout, t[idx] + pol.timeout_s)
                        count += 1
                        if count in pref:
                            best_pref = count
                    taken.append((lv, from_delayed, m))
            if count == 0:
                size = 0
                break
            exceeded = delay > 0.0 and now >= oldest + delay
            if best_pref and not exceeded:
                size = best_pref
                break
            if exceeded or delay == 0.0 or count >= max_pref:
                size = count
                break
            wake = oldest + delay
            if closest_timeout < wake:
                wake = math.nextafter(closest_timeout, math.inf)
            if i < n and t[i] < wake:
                wake = t[i]
            now = wake
            admit(now)
        if size == 0:
            last = now
            continue
        f = heapq.heappop(free)
        del f  # the earliest-free instance takes the batch; its time is already in `now`
        end = now + curve_s[size] * noise[k] + over_s[size]
        k += 1
        heapq.heappush(free, end)
        left = size
        for lv, from_delayed, m in taken:
            src = delayed[lv] if from_delayed else main[lv]
            for _ in range(min(m, left)):
                idx = src.popleft()
                req_start[idx] = now
                req_end[idx] = end
                req_batch[idx] = size
            left -= min(m, left)
            if left == 0:
                break
        queued -= size
        sizes.append(size)
        starts.append(now)
        ends.append(end)
        last = now
    return sizes, starts, ends, req_start, req_end, req_batch


def _needs_general(profile: Profile, workload: Workload) -> bool:
    if profile.priority_queue_policy:
        return True
    dqp = profile.default_queue_policy
    if dqp is not None and (dqp.default_timeout_microseconds or dqp.max_queue_size):
        return True
    prio = workload.priority
    return prio is not None and len(prio) > 0 and len(np.unique(prio)) > 1


def _level_map(profile: Profile, workload: Workload) -> tuple[list[int], dict[int, _Level]]:
    n = len(workload)
    if profile.priority_levels == 0:
        return [0] * n, {0: _policy(profile.default_queue_policy)}
    levels = profile.priority_levels
    default = profile.default_priority_level
    prio = workload.priority if workload.priority is not None else np.zeros(n, dtype=np.int64)
    bad = prio[(prio < 0) | (prio > levels)]
    if bad.shape[0]:
        raise ConfigError(
            f"priority {int(bad[0])}: must be 0 (the default level) or in [1, {levels}] "
            f"(the profile's priority_levels)"
        )
    level_of = np.where(prio == 0, default, prio).tolist()
    table = {
        lv: _policy(profile.priority_queue_policy.get(lv, profile.default_queue_policy))
        for lv in range(1, levels + 1)
    }
    return level_of, table


def simulate(
    profile: Profile,
    service: ServiceModel,
    workload: Workload,
    *,
    instances: int | None = None,
    seed: int = 0,
    engine: str = "auto",
    keep_latencies: bool = False,
) -> SimResult:
    """Run ``workload`` through Triton's dynamic batcher configured by ``profile``.

    ``instances`` defaults to the profile's ``instance_group.count`` (or 1);
    ``seed`` drives the service-time noise. ``engine``:

    ``triton``
        Triton's batcher thread with payload prefetch and its wake-up rules
        (one priority level, no queue policy); what ``auto`` picks when it can.
    ``rules``
        the plain batch-formation rules of the module docstring, decided when
        an instance is free (one level, no queue policy); a reference.
    ``general``
        the same rules with priority levels, timeouts and queue limits; what
        ``auto`` picks when the profile or workload needs them.
    """
    if instances is None:
        instances = profile.instance_count or 1
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise ConfigError(f"instances = {instances!r}: must be an integer >= 1")
    if engine not in ENGINES:
        raise ConfigError(f"engine = {engine!r}: must be one of {', '.join(ENGINES)}")
    if workload.priority is not None:
        _level_map(profile, workload)  # a priority outside the profile's levels is bad input
    needs_general = _needs_general(profile, workload)
    if engine in ("triton", "rules") and needs_general:
        raise ConfigError(
            f"engine = {engine!r}: priority levels and queue policies need the general engine"
        )
    if engine == "auto":
        engine = "general" if needs_general else "triton"
    general = engine == "general"
    t_arr = workload.t_s
    t = t_arr.tolist()
    n = len(t)
    if not general:
        run = _run_triton if engine == "triton" else _run_fifo
        sizes, starts, ends = run(t, profile, service, instances, seed)
        size_arr = np.array(sizes, dtype=np.int64)
        req_start = np.repeat(np.array(starts), size_arr)
        req_end = np.repeat(np.array(ends), size_arr)
        req_batch = np.repeat(size_arr, size_arr)
        levels_of = None
    else:
        level_list, levels = _level_map(profile, workload)
        sizes, starts, ends, req_start, req_end, req_batch = _run_general(
            t, level_list, levels, profile, service, instances, seed
        )
        size_arr = np.array(sizes, dtype=np.int64)
        levels_of = np.array(level_list, dtype=np.int64)
    done = ~np.isnan(req_end)
    lat_all = (req_end - t_arr) * 1000.0 + service.fixed_latency_ms
    queue_all = (req_start - t_arr) * 1000.0
    lat = lat_all[done]
    completed = int(done.sum())
    last_end = float(np.max(req_end[done])) if completed else 0.0
    span = max(workload.duration_s, last_end)
    busy_total = float(np.sum(np.array(ends) - np.array(starts))) if sizes else 0.0
    counts = np.bincount(size_arr, minlength=1) if sizes else np.zeros(1, dtype=np.int64)
    batch_counts = {int(b): int(c) for b, c in enumerate(counts) if c}
    phases = _phase_results(workload, done, lat_all, np.array(starts), size_arr)
    priorities: tuple[PriorityResult, ...] = ()
    if levels_of is not None and profile.priority_levels > 0:
        rows = []
        for lv in range(1, profile.priority_levels + 1):
            mask = levels_of == lv
            if not mask.any():
                continue
            ok = mask & done
            rows.append(
                PriorityResult(
                    level=lv,
                    requests=int(mask.sum()),
                    completed=int(ok.sum()),
                    rejected=int(mask.sum() - ok.sum()),
                    latency=LatencyStats.of(lat_all[ok]),
                )
            )
        priorities = tuple(rows)
    return SimResult(
        requests=n,
        completed=completed,
        rejected=n - completed,
        duration_s=workload.duration_s,
        span_s=span,
        throughput_rps=completed / span,
        latency=LatencyStats.of(lat),
        queue=LatencyStats.of(queue_all[done]),
        batches=len(sizes),
        mean_batch=float(size_arr.mean()) if sizes else 0.0,
        batch_counts=batch_counts,
        utilisation=busy_total / (instances * span),
        instances=instances,
        engine=engine,
        phases=phases,
        priorities=priorities,
        latencies_ms=lat if keep_latencies else None,
    )


def _phase_results(
    workload: Workload,
    done: np.ndarray,
    lat_all: np.ndarray,
    batch_starts: np.ndarray,
    batch_sizes: np.ndarray,
) -> tuple[PhaseResult, ...]:
    if workload.phase is None or len(workload.phase_names) < 2:
        return ()
    out = []
    for i, name in enumerate(workload.phase_names):
        mask = workload.phase == i
        ok = mask & done
        start = workload.phase_starts_s[i]
        dur = workload.phase_durations_s[i]
        in_phase = (batch_starts >= start) & (batch_starts < start + dur)
        out.append(
            PhaseResult(
                name=name,
                requests=int(mask.sum()),
                completed=int(ok.sum()),
                rejected=int(mask.sum() - ok.sum()),
                throughput_rps=float(ok.sum()) / dur,
                latency=LatencyStats.of(lat_all[ok]),
                mean_batch=float(batch_sizes[in_phase].mean()) if in_phase.any() else 0.0,
            )
        )
    return tuple(out)
