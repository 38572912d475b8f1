"""The ``rules`` engine: Triton's batch-formation rules, decided whenever an instance is free."""

from __future__ import annotations

import bisect
import heapq

from autobatch.plan.simulator.engines.common import _noise, _tables
from autobatch.plan.simulator.service import ServiceModel
from autobatch.profiles import Profile


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
