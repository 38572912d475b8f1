"""What the engines share: per-size tables, service-time noise and queue-policy levels."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autobatch.plan.simulator.service import ServiceModel
from autobatch.profiles import Profile, QueuePolicy


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
