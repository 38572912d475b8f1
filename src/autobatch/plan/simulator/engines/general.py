"""The ``general`` engine: priority levels and queue policies, as Triton runs them.

With priority levels or a queue policy (a timeout or ``max_queue_size``)
Triton's batcher cannot prefetch (``PriorityQueue::support_prefetching_``), so
it forms a batch only when an instance waits for one (``RateLimiter::
PayloadSlotAvailable``): the rules of the ``rules`` engine, walked over the
levels in priority order (each level's main queue, then the requests a
``DELAY`` timeout moved behind it).

Timeouts (``PriorityQueue::PolicyQueue``): a request is expired once the time
is past its arrival plus its level's timeout. Expired requests are rejected
(``REJECT``) or moved behind their level (``DELAY``)

* when the batcher's walk reaches them (at each decision, with an instance free);
* while every instance is busy: the batcher then waits for a free instance
  500 ms at a time (``WaitForPayloadSlotAvailable``), and each time the 500 ms
  run out it rejects every expired ``REJECT`` request
  (``RejectTimeoutRequests``). When it starts that wait depends on the queue:
  right after it sends a batch if requests are left, else at the end of its
  500 ms idle wait in which the first of them arrived;
* and the batcher's wait for a batch's delay is cut short at the closest
  timeout among the requests of that batch.

A rejected request leaves its level's queue at once, so its ``max_queue_size``
slot is free for the next arrival. Arrivals that find the level full are
refused at the door ("Exceeds maximum queue size").
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from autobatch.plan.simulator.engines.common import SLOT_POLL_S, Rules, Service, _Level
from autobatch.plan.simulator.engines.rules import Batches

REJECTED_FULL = 1
"""Refused at the door: the level's queue held ``max_queue_size`` requests."""
REJECTED_TIMEOUT = 2
"""Rejected after its level's timeout ran out in the queue."""


# One flat loop on purpose, for speed (engines/__init__.py): keep it so.
def run_general(
    t: list[float],
    rows: list[int],
    level_of: list[int],
    levels: dict[int, _Level],
    rules: Rules,
    service: Service,
    noise: list[float],
    instances: int,
) -> tuple[Batches, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-level queues walked in priority order, with timeouts and queue limits.

    Returns the batches and, per request: its batch's start and end (NaN if
    rejected), the rows of its batch (0 if rejected), when it was rejected
    (NaN if not) and how (0, :data:`REJECTED_FULL`, :data:`REJECTED_TIMEOUT`).
    """
    n = len(t)
    mbs = rules.max_batch_size
    delay = rules.delay_s
    pref = rules.preferred
    max_pref = pref[-1]
    curve_s, b_over, r_over = service.curve_s, service.batch_over_s, service.request_over_s
    order = sorted(levels)
    pol = [levels[lv] for lv in order]
    index_of = {lv: j for j, lv in enumerate(order)}
    lvl = [index_of[lv] for lv in level_of]
    main: list[deque[int]] = [deque() for _ in order]
    delayed: list[deque[int]] = [deque() for _ in order]
    req_start = np.full(n, np.nan)
    req_end = np.full(n, np.nan)
    req_batch = np.zeros(n, dtype=np.int64)
    rej_at = np.full(n, np.nan)
    rej_kind = np.zeros(n, dtype=np.int8)
    sizes: list[int] = []
    counts: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    busy: list[float] = []
    idle = instances
    queued = 0
    i = 0
    k = 0
    inf = math.inf
    # The batcher's wait: "idle" (queue empty; a 500 ms lattice from `origin`),
    # "slot" (every instance busy; rejects expired requests every 500 ms) or
    # "delay" (an instance waits while a batch's delay runs).
    mode = "idle"
    origin = 0.0
    timer = inf

    def expire_front(lv: int, now: float) -> None:
        """Apply the level's policy to the expired requests at the front of its queue."""
        nonlocal queued
        p = pol[lv]
        if p.timeout_s <= 0:
            return
        q = main[lv]
        # One timeout per level: the expired requests are the oldest, at the front.
        while q and now > t[q[0]] + p.timeout_s:
            j = q.popleft()
            if p.delay_action:
                delayed[lv].append(j)
            else:
                rej_at[j] = now
                rej_kind[j] = REJECTED_TIMEOUT
                queued -= 1

    def batcher(now: float) -> float:
        """Run the batcher until it waits; returns when its timer fires."""
        nonlocal idle, queued, k, mode, origin
        while True:
            if queued == 0:
                mode, origin = "idle", now
                return inf  # nothing to reject; the lattice matters once requests queue
            if idle == 0:
                mode = "slot"
                return now + SLOT_POLL_S
            # The walk: levels in priority order, each level's main queue, then its
            # delayed requests; the policy applies where the walk arrives.
            taken: list[tuple[int, int, int]] = []  # (level, from_delayed, requests)
            w_n = w_rows = best_n = best_rows = 0
            send_now = False
            oldest = inf
            closest = inf
            for lv in range(len(order)):
                expire_front(lv, now)
                p = pol[lv]
                for from_delayed, src in ((0, main[lv]), (1, delayed[lv])):
                    m = 0
                    for j in src:
                        r = rows[j]
                        if w_n > 0:
                            if w_rows + r > max_pref and best_rows == 0:
                                best_n, best_rows = w_n, w_rows
                            if w_rows + r > mbs:
                                send_now = True
                                break
                        w_rows += r
                        w_n += 1
                        m += 1
                        if t[j] < oldest:
                            oldest = t[j]
                        if p.timeout_s > 0 and not from_delayed:
                            c = t[j] + p.timeout_s
                            if c < closest:
                                closest = c
                        if w_rows in pref:
                            best_n, best_rows = w_n, w_rows
                    if m:
                        taken.append((lv, from_delayed, m))
                    if send_now:
                        break
                if send_now:
                    break
            if w_n == 0:
                continue  # every queued request expired and was rejected
            exceeded = delay > 0.0 and now >= oldest + delay
            if best_rows and not exceeded:
                take = best_n
            elif send_now or w_rows >= max_pref or exceeded or delay == 0.0:
                take = w_n
            else:
                mode = "delay"
                wake = oldest + delay
                if closest < wake:
                    # Woken when the first of the batch's requests times out; it is
                    # expired only once the time is past its timeout.
                    wake = math.nextafter(closest, inf)
                return wake
            # Send `take` requests, in walk order, to a free instance.
            idle -= 1
            left = take
            size = 0
            batch: list[int] = []
            for lv, from_delayed, m in taken:
                src = delayed[lv] if from_delayed else main[lv]
                for _ in range(min(m, left)):
                    j = src.popleft()
                    batch.append(j)
                    size += rows[j]
                left -= min(m, left)
                if left == 0:
                    break
            end = now + curve_s[size] * noise[k] + b_over + take * r_over
            k += 1
            heapq.heappush(busy, end)
            for j in batch:
                req_start[j] = now
                req_end[j] = end
                req_batch[j] = size
            queued -= take
            sizes.append(size)
            counts.append(take)
            starts.append(now)
            ends.append(end)

    while i < n or queued or busy:
        t_arr = t[i] if i < n else inf
        t_done = busy[0] if busy else inf
        if t_arr == inf and t_done == inf and timer == inf:
            break  # requests left only in a queue nobody will look at again (cannot happen)
        # At equal times: arrivals, then a finished batch, then the batcher's timer.
        if t_arr <= t_done and t_arr <= timer:
            now = t_arr
            while i < n and t[i] == now:
                lv = lvl[i]
                p = pol[lv]
                if p.max_queue_size and len(main[lv]) + len(delayed[lv]) >= p.max_queue_size:
                    rej_at[i] = now
                    rej_kind[i] = REJECTED_FULL  # "Exceeds maximum queue size"
                else:
                    main[lv].append(i)
                    queued += 1
                i += 1
            if idle:
                timer = batcher(now)  # Enqueue notifies the batcher when an instance waits
            elif mode == "idle" and timer == inf and queued:
                # Not notified (no instance waits): the idle wait runs out on its 500 ms
                # lattice, and the wait for an instance starts there.
                steps = math.ceil((now - origin) / SLOT_POLL_S)
                timer = origin + max(steps, 1) * SLOT_POLL_S
        elif t_done <= timer:
            now = heapq.heappop(busy)
            idle += 1
            timer = batcher(now)  # the batch's callback wakes the batcher
        else:
            now = timer
            if mode == "slot":
                # RejectTimeoutRequests: every expired REJECT request, every level.
                for lv in range(len(order)):
                    p = pol[lv]
                    if p.timeout_s > 0 and not p.delay_action:
                        expire_front(lv, now)
                # Still no free instance: it keeps waiting, queue empty or not.
                timer = now + SLOT_POLL_S
            elif mode == "idle":
                mode = "slot"  # the idle wait ran out with requests queued, none taken
                timer = now + SLOT_POLL_S
            else:
                timer = batcher(now)
    return (sizes, counts, starts, ends), req_start, req_end, req_batch, rej_at, rej_kind
