"""The ``triton`` engine: Triton's batcher thread with payload prefetch and its wake-up rules."""

from __future__ import annotations

import heapq
import math
from collections import deque

from autobatch.plan.simulator.engines.common import _noise, _tables
from autobatch.plan.simulator.service import ServiceModel
from autobatch.profiles import Profile


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
