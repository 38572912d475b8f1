"""The ``rules`` engine: Triton's batch formation, decided whenever an instance is free.

That is Triton's batcher when it cannot prefetch (a queue policy or priority
levels turn prefetching off: ``PriorityQueue``'s ``support_prefetching_``): it
forms a batch only when an instance waits for one. Without a queue policy the
real server prefetches (the ``triton`` engine); this engine is the plain
reference the other two are checked against.
"""

from __future__ import annotations

import bisect
import heapq

from autobatch.plan.simulator.engines.common import (
    Rules,
    Service,
    first_reaching,
    walk,
)

Batches = tuple[list[int], list[int], list[float], list[float]]
"""Per batch: rows, requests, start and end (seconds)."""


# One flat loop on purpose, for speed (engines/__init__.py): keep it so.
def run_rules(
    t: list[float],
    rows: list[int] | None,
    cum: list[int] | None,
    rules: Rules,
    service: Service,
    noise: list[float],
    instances: int,
) -> Batches:
    """One FIFO queue: batches are contiguous runs of arrivals, so the queue is a
    pair of indices and a decision is a walk over at most ``max_batch_size + 1``
    requests. ``rows``/``cum`` are None when every request is one row."""
    n = len(t)
    mbs = rules.max_batch_size
    delay = rules.delay_s
    max_pref = rules.max_preferred
    best_tab = rules.best_tab
    curve_s, b_over, r_over = service.curve_s, service.batch_over_s, service.request_over_s
    free = [0.0] * instances
    sizes: list[int] = []
    counts: list[int] = []
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
        # Simultaneous arrivals are in the queue together: everything up to `now` counts.
        hi = head + mbs + 1 if head + mbs + 1 < n else n
        deadline = oldest + delay
        while True:
            avail = bisect_right(t, now, head, hi)
            if rows is None:
                # walk_single with no payload, inlined: this is the engine's hot loop.
                w_n = avail - head
                send_now = w_n > mbs
                if send_now:
                    w_n = mbs
                w_rows = w_n
                best_n = best_rows = best_tab[w_n]
            else:
                w_n, w_rows, best_n, best_rows, _, send_now = walk(rows, head, avail, 0, rules)
            exceeded = delay > 0.0 and now >= deadline
            if best_rows and not exceeded:
                take = best_n
                break
            if send_now or w_rows >= max_pref or exceeded or delay == 0.0:
                take = w_n
                break
            # Wait for the arrival that brings the queue to the next preferred size,
            # or for the oldest request's delay to run out.
            need = rules.next_preferred(w_rows)
            j = head + need - 1 if cum is None else first_reaching(cum, head, need)
            now = t[j] if j < n and t[j] < deadline else deadline
        size = take if cum is None else cum[head + take] - cum[head]
        end = now + curve_s[size] * noise[k] + b_over + take * r_over
        k += 1
        heappush(free, end)
        sizes.append(size)
        counts.append(take)
        starts.append(now)
        ends.append(end)
        head += take
        last = now
    return sizes, counts, starts, ends
