"""The ``general`` engine: per-level queues in priority order, with timeouts and queue limits."""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from autobatch.plan.simulator.engines.common import _Level, _noise, _tables
from autobatch.plan.simulator.service import ServiceModel
from autobatch.profiles import Profile


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
