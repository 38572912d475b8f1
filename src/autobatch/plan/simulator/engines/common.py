"""What the engines share: Triton's walk over the queue, service times, noise, queue policies.

:func:`walk` is ``DynamicBatchScheduler::GetDynamicBatch``'s loop, transcribed
(Triton core ``src/dynamic_batch_scheduler.cc``): it walks the queued requests
in order, counting *rows* (a request's batch dimension), and notes the largest
preferred size it passes, where it first went past the largest preferred size,
and where a request would not fit ``max_batch_size``. :func:`walk_single` is
the same for one-row requests in O(1), for the engines' hot loops; a unit test
holds the two equal.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autobatch.plan.simulator.service import ServiceModel
from autobatch.profiles import Profile, QueuePolicy

SLOT_POLL_S = 0.5
"""Triton's batcher waits 500 ms at a time (``default_wait_microseconds``): when its
queue is empty, and when it waits for an instance to take a batch. In the second
wait it rejects timed-out requests each time the 500 ms run out."""


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


class ByRows(dict[int, float]):
    """A table by row count (batch size), each entry worked out the first time it is
    read: a run reads a few sizes, and Triton allows a max_batch_size of 2**31-1."""

    def __init__(self, entry: Callable[[int], float], first: Mapping[int, float] | None = None) -> None:
        super().__init__(first or {})
        self._entry = entry

    def __missing__(self, rows: int) -> float:
        value = self[rows] = self._entry(rows)
        return value


@dataclass(frozen=True, eq=False)
class Rules:
    """A profile's batch-formation parameters, with lookup tables by row count."""

    max_batch_size: int
    delay_s: float
    preferred: tuple[int, ...]
    """Sorted; an empty ``preferred_batch_size`` is ``[max_batch_size]``, as Triton
    fills it in when it loads the config (``model_config_utils.cc``)."""
    best_tab: Mapping[int, int]
    """For k rows (0..max_batch_size): the largest preferred size <= k, 0 if none."""
    next_tab: Mapping[int, int]
    """For k rows: the smallest preferred size > k, 0 if none."""

    @classmethod
    def of(cls, profile: Profile) -> Rules:
        pref = tuple(sorted(profile.effective_preferred))

        def best(k: int) -> int:
            i = bisect.bisect_right(pref, k)  # pref[:i] are <= k
            return pref[i - 1] if i else 0

        def nxt(k: int) -> int:
            i = bisect.bisect_right(pref, k)  # pref[i:] are > k
            return pref[i] if i < len(pref) else 0

        return cls(profile.max_batch_size, profile.max_queue_delay_us / 1e6, pref,
                   ByRows(best), ByRows(nxt))  # type: ignore[arg-type]

    @property
    def max_preferred(self) -> int:
        return self.preferred[-1]

    def next_preferred(self, rows: int) -> int:
        """The queued rows that make it worth looking again, for a batch of ``rows``:
        the next preferred size above it, or the smallest one (Triton's
        ``next_preferred_batch_size_``, before the payload's rows are taken off)."""
        if rows <= self.max_batch_size and self.next_tab[rows]:
            return self.next_tab[rows]
        return self.preferred[0]


Walk = tuple[int, int, int, int, bool, bool]
"""``(n, rows, best_n, best_rows, saturated, send_now)``: the requests and rows the
walk took into the pending batch; the requests and rows up to the best mark
(the largest preferred size passed, or where the walk first went past the
largest preferred size); whether it went past the largest preferred size; and
whether it stopped at a request that would not fit ``max_batch_size``."""


def walk(rows: Sequence[int], start: int, stop: int, payload_rows: int, rules: Rules) -> Walk:
    """Walk ``rows[start:stop]`` (the queue, in order) behind a payload of ``payload_rows``."""
    mbs = rules.max_batch_size
    max_pref = rules.preferred[-1]
    pref = rules.preferred
    P = payload_rows
    n = got = 0
    best_n = best_rows = 0
    saturated = send_now = False
    for i in range(start, stop):
        r = rows[i]
        # The first request of a new batch is taken whatever its size (Triton refuses
        # requests larger than max_batch_size when they arrive).
        if P + n > 0:
            if P + got + r > max_pref and best_rows == 0:
                # Past the largest preferred size with none passed: mark the batch so far.
                best_n, best_rows = n, got
                saturated = True
            if P + got + r > mbs:
                send_now = True
                break
        got += r
        n += 1
        if P + got in pref:
            best_n, best_rows = n, got
    return n, got, best_n, best_rows, saturated, send_now


def walk_single(queued: int, payload_rows: int, rules: Rules) -> Walk:
    """:func:`walk` over ``queued`` requests of one row each, without the loop."""
    P = payload_rows
    limit = rules.max_batch_size - P
    n = queued if queued < limit else max(limit, 0)
    examined = queued if queued < limit + 1 else limit + 1  # the one that does not fit counts
    send_now = queued > limit
    max_pref = rules.preferred[-1]
    # Below the largest preferred size the walk passes it (it is preferred) before it can
    # go past it, so only a payload already at or past it saturates: at the first
    # request, with the mark set at the second.
    over = max_pref <= P
    saturated = over and examined > 0
    b = rules.best_tab[P + n]
    best = b - P if b > P else 0
    if over and examined >= 2:
        best = 1
    return n, n, best, best, saturated, send_now


def prefix_rows(rows: np.ndarray | None, n: int) -> list[int] | None:
    """Cumulative rows: element i is the rows of requests 0..i-1; None for one row each."""
    if rows is None:
        return None
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rows, out=out[1:])
    return out.tolist()


def first_reaching(cum: list[int], start: int, target_rows: int) -> int:
    """Index of the request whose arrival brings the rows from ``start`` to ``target_rows``."""
    return bisect.bisect_left(cum, cum[start] + target_rows) - 1


@dataclass(frozen=True)
class Service:
    """Instance time of a batch in seconds, from the curve and the overheads."""

    curve_s: Mapping[int, float]
    """By rows, 0..max_batch_size."""
    batch_over_s: float
    request_over_s: float

    @classmethod
    def of(cls, service: ServiceModel, max_batch_size: int) -> Service:
        """``max_batch_size``: the largest batch the run can form."""
        curve = ByRows(lambda b: service.curve_ms(b) / 1000.0, {0: 0.0})
        return cls(curve, service.batch_overhead_ms / 1000.0, service.request_overhead_ms / 1000.0)



def _noise(service: ServiceModel, n: int, seed: int) -> list[float]:
    """One factor per possible batch (at most one batch per request)."""
    if service.noise_cv <= 0 or n == 0:
        return [1.0] * n
    sigma = math.sqrt(math.log(1.0 + service.noise_cv**2))
    rng = np.random.default_rng([seed, 11])
    return rng.lognormal(-sigma * sigma / 2.0, sigma, size=n).tolist()
