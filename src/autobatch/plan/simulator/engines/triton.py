"""The ``triton`` engine: Triton's batcher thread with payload prefetch and its wake-up rules."""

from __future__ import annotations

import heapq
import math
from collections import deque

from autobatch.plan.simulator.engines.common import SLOT_POLL_S, Rules, Service, walk, walk_single
from autobatch.plan.simulator.engines.rules import Batches


def next_tick(timer: float, until: float, step: float) -> float:
    """The first of ``timer``, ``timer + step``, ``(timer + step) + step``, ... that is >=
    ``until``: the same float the loop that adds ``step`` once per tick reaches.

    Within one binade adding ``step`` is exact (both are multiples of the ulp while
    it is <= ``step``), so many ticks there are one multiplication; the rounding
    at each binade's end is done as the loop does it, one tick at a time.
    """
    if not (until < math.inf) or math.frexp(step)[0] != 0.5:  # exact only for a power of 2
        while timer < until:
            timer += step
        return timer
    while timer < until:
        _, e = math.frexp(timer)  # timer in [2**(e-1), 2**e)
        if timer > 0 and math.ldexp(1.0, e - 53) <= step:
            in_binade = math.ceil((math.ldexp(1.0, e) - timer) / step) - 1  # stay < 2**e
            needed = math.ceil((until - timer) / step)  # may be one off: one fewer is safe
            k = min(in_binade, needed - 1)
            if k > 0:
                timer += k * step
                continue
        timer += step
    return timer


# One flat loop on purpose, for speed (engines/__init__.py): keep it so.
def run_triton(
    t: list[float],
    rows: list[int] | None,
    cum: list[int] | None,
    rules: Rules,
    service: Service,
    noise: list[float],
    instances: int,
) -> Batches:
    """Triton's batcher thread, payload by payload, for one FIFO queue.

    What the plain rules leave out, and what moves latency on a real server
    (seen in Triton's request traces and read in ``dynamic_batch_scheduler.cc``):

    * the batcher forms a *payload* while the instances are busy, up to two per
      instance wait for one ("prefetch"); a queued payload keeps growing
      while the batcher looks at it, and stops when an instance takes it;
    * the batcher only looks when it is woken: by its own timer (the oldest
      request's delay, or 500 ms when the queue is empty), when an instance
      takes a payload, or by an arrival, but an arrival wakes it only if the
      rows queued outside the payload reach ``next_preferred_batch_size``,
      a figure set by the last walk that ended waiting. After a payload left
      because its delay ran out, that figure is stale, so later arrivals do
      not join that payload and start the next one instead.

    Requests that arrive at the same instant are queued together before the
    batcher looks (``Enqueue`` only notifies it; it walks whatever is queued
    when it runs). A payload is a contiguous run of arrivals; ``rows``/``cum``
    are None when every request is one row.
    """

    n = len(t)
    delay = rules.delay_s
    pref_set = set(rules.preferred)
    max_pref = rules.max_preferred
    curve_s, b_over, r_over = service.curve_s, service.batch_over_s, service.request_over_s
    single = cum is None
    cap = 2 * instances  # payloads that may wait for an instance
    idle_wait_s = SLOT_POLL_S  # the batcher's wait when its queue is empty
    inf = math.inf
    heappop, heappush = heapq.heappop, heapq.heappush

    sizes: list[int] = []
    counts: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    busy_heap: list[float] = []
    idle = instances
    waiting: deque[list[int]] = deque()  # payloads waiting for an instance: [first, rows, requests]
    cp: list[int] = [0, 0, 0]  # the batcher's current payload
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
            while adm < n and t[adm] == now:
                adm += 1
            queued_rows = adm - head if single else cum[adm] - cum[head]  # type: ignore[index]
            if not (
                len(waiting) < cap
                and (saturated or cp_state == 2 or queued_rows >= next_pref)
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
            end = now + curve_s[size] * noise[k] + b_over + p[2] * r_over
            k += 1
            heappush(busy_heap, end)
            sizes.append(size)
            counts.append(p[2])
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
                cp = [head, 0, 0]
                cp_state = 0
                saturated = False
                next_pref = 0
            queued = adm - head
            if queued == 0:
                # Each 500 ms tick of an empty queue only sets the next: skip those before
                # the next arrival or finished batch in one step (a long idle gap in a
                # trace or a schedule was millions of turns of this loop).
                timer = now + idle_wait_s
                nxt = t[adm] if adm < n else inf
                if busy_heap and busy_heap[0] < nxt:
                    nxt = busy_heap[0]
                if timer < nxt:
                    timer = next_tick(timer, nxt, idle_wait_s)
                break
            if len(waiting) >= cap:
                break  # waits for a slot: the next payload an instance takes wakes it
            P = cp[1]
            if single:
                w_n, w_rows, best_n, best_rows, sat, send_now = walk_single(queued, P, rules)
            else:
                w_n, w_rows, best_n, best_rows, sat, send_now = walk(rows, head, adm, P, rules)  # type: ignore[arg-type]
            if sat:
                saturated = True
            # Compared as "now >= arrival + delay", the same sum the timer was set to:
            # "now - arrival >= delay" can miss by a rounding error and spin forever.
            exceeded = delay > 0.0 and w_n > 0 and now >= t[head] + delay
            take = 0
            if best_rows and not exceeded:
                if delay == 0.0:
                    saturated = True
                take = best_n
            elif w_n == 0:
                take = 0
            elif send_now or P + w_rows >= max_pref:
                saturated = True
                take = w_n
            elif exceeded or delay == 0.0:
                take = w_n
            else:
                next_pref = rules.next_preferred(P + w_rows) - P
                if not saturated and P != 0 and P not in pref_set:
                    # A payload below a preferred size takes whatever is queued.
                    take = w_n
                else:
                    timer = t[head] + delay
                    break
            if take:
                if cp[1] == 0:
                    cp[0] = head
                cp[1] += take if single else cum[head + take] - cum[head]  # type: ignore[index]
                cp[2] += take
                head += take
                if cp_state == 0:
                    cp_state = 1
                    if idle:
                        idle -= 1
                        size = cp[1]
                        end = now + curve_s[size] * noise[k] + b_over + cp[2] * r_over
                        k += 1
                        heappush(busy_heap, end)
                        sizes.append(size)
                        counts.append(cp[2])
                        starts.append(now)
                        ends.append(end)
                        cp_state = 2
                    else:
                        waiting.append(cp)
            elif w_n == 0 and not saturated:
                # Nothing can join the payload (it is full); wait for it to leave.
                timer = now + idle_wait_s
                break
    return sizes, counts, starts, ends
