"""The ``shared`` engine: Triton's batcher for models whose instances share one device.

The ``triton`` engine gives every instance a device of its own: a batch ends
the curve's time after it starts. Here every instance is a *context* of one
:class:`autobatch.sharing.DeviceScheduler` (as each Python-backend stub is a
process of its own on a GPU), and so are the instances of other models and the
co-tenant jobs: a batch is a device job of the curve's time, and it ends when
the scheduler says, stretched by whatever shares the device. The emulated
device process runs that same scheduler, so the two model the same sharing.

Each model's batcher is :func:`autobatch.plan.simulator.engines.triton.run_triton`
turned into an object driven by one event loop (arrivals, device completions,
batcher timers, co-tenant submits), with the same decisions in the same order:
with one instance and nothing else on the device, or with ``concurrent``
sharing that scales perfectly, it forms the same batches at the same times (a
unit test holds it). The per-batch and per-request overheads occupy the
instance after its device job, off the device (backend IPC, not GPU work).

The flat engines stay as they are, for speed: this one runs only when a run
names a sharing model or co-tenants.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from autobatch.cotenants import CoTenant
from autobatch.plan.simulator.engines.common import SLOT_POLL_S, Rules, Service, walk, walk_single
from autobatch.plan.simulator.engines.triton import next_tick
from autobatch.sharing import Completion, DeviceScheduler, DeviceUsage, SharingModel

__all__ = ["CoTenantRun", "ModelRun", "SharedRun", "run_shared"]

INF = math.inf


@dataclass
class ModelRun:
    """What one model's batcher produced: per batch (in start order, which is request
    order) its rows, requests, start, end and device work, and the instance it ran on."""

    name: str
    contexts: tuple[str, ...]
    sizes: list[int]
    counts: list[int]
    starts: list[float]
    ends: list[float]
    work_s: list[float]


@dataclass
class CoTenantRun:
    """One co-tenant job's batches: when each was submitted, started and finished (s)."""

    name: str
    submitted: list[float]
    started: list[float]
    finished: list[float]


@dataclass
class SharedRun:
    models: list[ModelRun]
    cotenants: list[CoTenantRun]
    usage: DeviceUsage
    """The device at the end of the run."""
    marks: list[tuple[float, DeviceUsage]]
    """The device's usage at each time asked for (phase boundaries), in order."""


class _Batcher:
    """``run_triton``'s batcher thread for one model, one event at a time."""

    def __init__(self, index: int, name: str, t: list[float], rows: list[int] | None,
                 cum: list[int] | None, rules: Rules, service: Service, noise: list[float],
                 instances: int, engine: _Loop) -> None:
        self.index = index
        self.t, self.rows, self.cum = t, rows, cum
        self.n = len(t)
        self.rules, self.service, self.noise = rules, service, noise
        self.loop = engine
        self.contexts = tuple(f"{name}/{i}" for i in range(instances))
        self.cap = 2 * instances  # payloads that may wait for an instance
        self.free = list(range(instances))  # a heap: the lowest free instance takes a batch
        self.waiting: deque[list[int]] = deque()
        self.cp: list[int] = [0, 0, 0]
        self.cp_state = 0
        self.saturated = False
        self.next_pref = 0
        self.head = 0
        self.adm = 0
        self.timer = 0.0 if self.n else INF
        self.k = 0
        self.out = ModelRun(name, self.contexts, [], [], [], [], [])
        self.over_s: list[float] = []

    # -- what the loop asks ------------------------------------------------------------
    def next_arrival(self) -> float:
        return self.t[self.adm] if self.adm < self.n else INF

    def next_timer(self) -> float:
        # Once every request is in a payload a timer only sets the next one.
        return self.timer if self.head < self.n else INF

    # -- events --------------------------------------------------------------------------
    def on_arrival(self, now: float) -> None:
        t, n = self.t, self.n
        self.adm += 1
        while self.adm < n and t[self.adm] == now:
            self.adm += 1
        cum = self.cum
        queued_rows = self.adm - self.head if cum is None else cum[self.adm] - cum[self.head]
        if not (len(self.waiting) < self.cap
                and (self.saturated or self.cp_state == 2 or queued_rows >= self.next_pref)):
            return
        self._run(now)

    def on_free(self, now: float, instance: int) -> None:
        heapq.heappush(self.free, instance)
        if not self.waiting:
            return
        # The free instance takes the next payload; its callback wakes the batcher.
        p = self.waiting.popleft()
        self._start(now, p[1], p[2])
        if p is self.cp:
            self.cp_state = 2
        self._run(now)

    def on_timer(self, now: float) -> None:
        self._run(now)

    # -- the batcher ---------------------------------------------------------------------
    def _start(self, now: float, size: int, count: int) -> None:
        instance = heapq.heappop(self.free)
        svc = self.service
        work = svc.curve_s[size] * self.noise[self.k]
        self.k += 1
        out = self.out
        batch = len(out.sizes)
        out.sizes.append(size)
        out.counts.append(count)
        out.starts.append(now)
        out.ends.append(math.nan)
        out.work_s.append(work)
        self.over_s.append(svc.batch_over_s + count * svc.request_over_s)
        self.loop.submit(now, self.contexts[instance], (self.index, batch, instance), work)

    def _run(self, now: float) -> None:
        """The batcher runs until it blocks (``run_triton``'s inner loop)."""
        t, n, rules = self.t, self.n, self.rules
        single = self.cum is None
        delay = rules.delay_s
        self.timer = INF
        while True:
            if self.saturated or self.cp_state == 2:
                self.cp = [self.head, 0, 0]
                self.cp_state = 0
                self.saturated = False
                self.next_pref = 0
            queued = self.adm - self.head
            if queued == 0:
                timer = now + SLOT_POLL_S
                nxt = t[self.adm] if self.adm < n else INF
                if nxt == INF:
                    timer = INF  # nothing more arrives: the idle ticks change nothing
                elif timer < nxt:
                    timer = next_tick(timer, nxt, SLOT_POLL_S)
                self.timer = timer
                break
            if len(self.waiting) >= self.cap:
                break
            cp = self.cp
            P = cp[1]
            if single:
                w_n, w_rows, best_n, best_rows, sat, send_now = walk_single(queued, P, rules)
            else:
                w_n, w_rows, best_n, best_rows, sat, send_now = walk(
                    self.rows, self.head, self.adm, P, rules)  # type: ignore[arg-type]
            if sat:
                self.saturated = True
            exceeded = delay > 0.0 and w_n > 0 and now >= t[self.head] + delay
            take = 0
            if best_rows and not exceeded:
                if delay == 0.0:
                    self.saturated = True
                take = best_n
            elif w_n == 0:
                take = 0
            elif send_now or P + w_rows >= rules.max_preferred:
                self.saturated = True
                take = w_n
            elif exceeded or delay == 0.0:
                take = w_n
            else:
                self.next_pref = rules.next_preferred(P + w_rows) - P
                if not self.saturated and P != 0 and P not in rules.preferred:
                    take = w_n
                else:
                    self.timer = t[self.head] + delay
                    break
            if take:
                if cp[1] == 0:
                    cp[0] = self.head
                cp[1] += take if single else self.cum[self.head + take] - self.cum[self.head]  # type: ignore[index]
                cp[2] += take
                self.head += take
                if self.cp_state == 0:
                    self.cp_state = 1
                    if self.free:
                        self._start(now, cp[1], cp[2])
                        self.cp_state = 2
                    else:
                        self.waiting.append(cp)
            elif w_n == 0 and not self.saturated:
                self.timer = now + SLOT_POLL_S
                break


class _Tenant:
    """A co-tenant job's clock: its next submit, and what it ran."""

    def __init__(self, job: CoTenant, horizon_s: float, seed: int) -> None:
        self.job = job
        self.work_ms = job.work_ms
        self.horizon_s = horizon_s
        self.open = job.rate_bps is not None
        self.plan: list[float] = job.open_loop_submits_s(horizon_s, seed).tolist() if self.open else []
        self.i = 0
        self.sent = 0
        first = job.next_start_s(0.0)
        self.next_s = INF
        if self.open:
            self.next_s = self.plan[0] if self.plan else INF
        elif first is not None and first < horizon_s:
            self.next_s = first
        self.out = CoTenantRun(job.name, [], [], [])

    def submitted(self) -> None:
        self.sent += 1
        if self.open:
            self.i += 1
            self.next_s = self.plan[self.i] if self.i < len(self.plan) else INF
        else:
            self.next_s = INF  # closed loop: the next one follows this one's completion

    def completed(self, c: Completion) -> None:
        self.out.submitted.append(c.submitted_ms / 1000.0)
        self.out.started.append(c.started_ms / 1000.0)
        self.out.finished.append(c.finished_ms / 1000.0)
        if not self.open:
            nxt = self.job.closed_loop_next_s(c.finished_ms / 1000.0)
            if nxt is not None and nxt < self.horizon_s:
                self.next_s = nxt


class _Loop:
    """The event loop: every model's batcher, the co-tenants and the device, in time order."""

    def __init__(self, sharing: SharingModel) -> None:
        self.device = DeviceScheduler(sharing)
        self.done: deque[Completion] = deque()
        self._next_ms: float | None = None
        self._stale = False

    def submit(self, now_s: float, context: str, job: object, work_s: float) -> None:
        self.done.extend(self.device.submit(now_s * 1000.0, context, job, work_s * 1000.0))  # type: ignore[arg-type]
        self._stale = True

    def advance(self, now_s: float) -> None:
        self.done.extend(self.device.advance(now_s * 1000.0))
        self._stale = True

    def next_completion_s(self) -> float:
        if self._stale:
            self._next_ms = self.device.next_completion_ms()
            self._stale = False
        return INF if self._next_ms is None else self._next_ms / 1000.0


def run_shared(
    models: Sequence[tuple[str, list[float], list[int] | None, list[int] | None, Rules, Service,
                           list[float], int]],
    cotenants: Sequence[CoTenant],
    sharing: SharingModel,
    *,
    horizon_s: float,
    marks_s: Sequence[float] = (),
    seed: int = 0,
) -> SharedRun:
    """Run ``models`` (each ``(name, arrival times, rows, cumulative rows, rules, service,
    noise, instances)``, as the ``triton`` engine takes them) and ``cotenants`` on one
    device shared by ``sharing``, until every request has completed.

    Co-tenants submit from 0 to ``horizon_s`` (within their own windows); what they
    submitted runs to its end. ``marks_s`` are times at which the device's usage is
    recorded (phase boundaries).
    """
    loop = _Loop(sharing)
    batchers = [_Batcher(i, name, t, rows, cum, rules, svc, noise, instances, loop)
                for i, (name, t, rows, cum, rules, svc, noise, instances) in enumerate(models)]
    # Job k draws its open-loop submits from seed + k, as the device's co-tenant runner does:
    # the same seed gives the simulation and the measured run the same arrivals.
    tenants = [_Tenant(job, horizon_s, seed + k) for k, job in enumerate(cotenants)]
    by_context = {job.name: tn for job, tn in zip(cotenants, tenants)}
    marks = sorted(m for m in marks_s if m >= 0)
    mark_i = 0
    recorded: list[tuple[float, DeviceUsage]] = []
    # An instance frees after its batch's overhead: (time, model, batch, instance).
    frees: list[tuple[float, int, int, int]] = []

    def finish(c: Completion) -> None:
        job = c.job
        if isinstance(job, tuple):
            m, batch, instance = job
            b = batchers[m]
            end = c.finished_ms / 1000.0 + b.over_s[batch]
            if b.over_s[batch] > 0.0:
                heapq.heappush(frees, (end, m, batch, instance))
                return
            b.out.ends[batch] = end
            b.on_free(end, instance)
        else:
            by_context[c.context].completed(c)

    while True:
        while loop.done:
            finish(loop.done.popleft())
        t_arr, who_arr = INF, -1
        t_tim, who_tim = INF, -1
        for b in batchers:
            a = b.next_arrival()
            if a < t_arr:
                t_arr, who_arr = a, b.index
            tm = b.next_timer()
            if tm < t_tim:
                t_tim, who_tim = tm, b.index
        t_dev = loop.next_completion_s()
        t_free = frees[0][0] if frees else INF
        t_ct, who_ct = INF, -1
        for k, tn in enumerate(tenants):
            if tn.next_s < t_ct:
                t_ct, who_ct = tn.next_s, k
        t_mark = marks[mark_i] if mark_i < len(marks) else INF
        now = min(t_arr, t_dev, t_free, t_tim, t_ct, t_mark)
        if now == INF:
            break
        # At equal times, as in the triton engine: arrivals, then finished batches, then
        # the batcher's timer; co-tenants and the phase marks after them.
        if t_arr == now:
            batchers[who_arr].on_arrival(now)
        elif t_dev == now:
            loop.advance(now)
        elif t_free == now:
            _, m, batch, instance = heapq.heappop(frees)
            batchers[m].out.ends[batch] = now
            batchers[m].on_free(now, instance)
        elif t_tim == now:
            batchers[who_tim].on_timer(now)
        elif t_ct == now:
            tn = tenants[who_ct]
            # A co-tenant's job is a number; a model's batch is (model, batch, instance).
            loop.submit(now, tn.job.name, tn.sent, tn.work_ms / 1000.0)
            tn.submitted()
        else:
            loop.advance(now)
            while loop.done:
                finish(loop.done.popleft())
            recorded.append((now, loop.device.usage()))
            mark_i += 1
    return SharedRun([b.out for b in batchers], [tn.out for tn in tenants], loop.device.usage(), recorded)
