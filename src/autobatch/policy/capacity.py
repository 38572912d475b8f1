"""What each profile carries and what it costs in device time, from the curve and the live windows.

Pure: values in, values out.

* :func:`capacity_rps`: items/s a profile sustains with a deep queue (its
  largest preferred batch over that batch's time on the curve, times its
  instances); :func:`floor_capacity_rps`: what it carries without a backlog.
* :func:`live_factor`: the curve is measured on a quiet machine, with the
  model's compute time only, so under load it overstates capacity
  (docs/policy.md#capacity-the-curve-corrected-by-the-live-busy-share). The
  factor is the busy time the curve predicts for the window's executions over
  the busy time measured, times ``capacity.busy_ceiling``; :func:`capacities` scales
  every profile's capacity by it.
* :func:`batch_estimate` and :func:`device_ms_estimate`: the batch a profile
  forms at an arrival rate, and the device time per request that costs; the
  efficiency rules compare profiles with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from autobatch.curve import BatchCurve
from autobatch.policy.settings import PolicySettings
from autobatch.policy.types import Observation
from autobatch.profiles import Profile

__all__ = [
    "Capacities",
    "LiveFactor",
    "batch_estimate",
    "batch_ms",
    "capacities",
    "capacity_rps",
    "device_ms_estimate",
    "floor_capacity_rps",
    "live_factor",
]


def capacity_rps(profile: Profile, curve: BatchCurve | None,
                 instances: int | None = None) -> float | None:
    """Items per second the profile sustains when the queue never empties.

    With a deep queue Triton sends the largest preferred batch every time, so
    the capacity is that batch over its run time, times the instance count: the
    profile's own, else ``instances`` (the count in use, from the window), else
    one. A profile that leaves instance_group alone runs on the model's instances,
    and counting one of two halved every capacity with two instances.
    This is what a saturated server gains by switching to the profile.
    """
    if curve is None:
        return None
    b = max(profile.effective_preferred)
    return curve.throughput_rps(b) * (profile.instance_count or instances or 1)


def floor_capacity_rps(profile: Profile, curve: BatchCurve | None,
                       instances: int | None = None) -> float | None:
    """Items per second the profile carries *without* building a deep queue.

    At the margin the queue holds only a few requests when an instance frees,
    and Triton sends the largest preferred size it can form, often the smallest
    one. So a load below the worst of the preferred sizes' throughputs is
    carried with batches formed on the spot; above it, only a backlog builds
    the larger batches. Stepping toward latency checks this one, so a step down
    under load does not land on a profile that saturates.
    """
    if curve is None:
        return None
    n = profile.instance_count or instances or 1
    return min(curve.throughput_rps(b) for b in profile.effective_preferred) * n


def batch_ms(curve: BatchCurve, b: float) -> float:
    """The curve's time of a batch of ``b`` (a mean, so not always whole): linear
    between the whole sizes around it."""
    b = max(1.0, b)
    lo = math.floor(b)
    t_lo = curve.ms(lo)
    if b == lo:
        return t_lo
    return t_lo + (b - lo) * (curve.ms(lo + 1) - t_lo)


class LiveFactor(NamedTuple):
    factor: float | None
    """What the curve's capacities are scaled by on this machine now; None: unmeasured."""
    busy_share: float | None
    """The busy share of the window it was measured in."""


def live_factor(
    history: Sequence[Observation],
    curve: BatchCurve | None,
    *,
    busy_ceiling: float,
    min_busy_share: float,
) -> LiveFactor:
    """The live factor, from the newest window busy enough to measure it.

    ``factor`` scales the curve's capacities to this machine now: the busy
    instance-seconds the curve predicts for the window's executions (its
    execution rate times the curve's time at its mean batch) over the busy
    instance-seconds measured, times ``capacity.busy_ceiling``, and never above 1 (the
    curve is the optimistic prior, the live data only ever lowers it). A window
    whose instances were busy less than ``min_busy_share`` of the time says too
    little (a few batches of one), so older windows are searched; both None when
    none qualifies.
    """
    if curve is None:
        return LiveFactor(None, None)
    for w in reversed(history):
        if w.stale:
            continue
        share = w.busy_share
        busy = w.busy_instances
        b = w.mean_batch_size
        if share is None or busy is None or b is None or busy <= 0 or share < min_busy_share:
            continue
        predicted = w.exec_rps * batch_ms(curve, b) / 1000.0
        if not (predicted > 0 and math.isfinite(predicted)):
            continue
        return LiveFactor(min(1.0, predicted / busy * busy_ceiling), share)
    return LiveFactor(None, None)


def _greedy_batch(rate_rps: float, n: int, curve: BatchCurve, cap: int) -> float:
    """The batch a free instance finds queued when it takes whatever is there: the
    arrivals during one execution (spread over the ``n`` instances), at least one."""
    b = 1.0
    for _ in range(30):
        nxt = min(float(cap), max(1.0, rate_rps * batch_ms(curve, b) / 1000.0 / n))
        if abs(nxt - b) < 1e-3:
            return nxt
        b = nxt
    return b


def batch_estimate(profile: Profile, rate_rps: float, curve: BatchCurve,
                   instances: int | None = None) -> float:
    """The mean batch ``profile`` forms at ``rate_rps`` arrivals: a rough model of
    Triton's batcher, for comparing profiles (the simulator in ``autobatch.plan``
    is the exact one).

    An instance that frees takes what queued while it ran (the greedy batch);
    a profile with a max queue delay also waits for a preferred size, so its
    batch holds what arrives within the delay too. Either way it is capped at
    the largest preferred size. The instances are the profile's own count, else
    ``instances`` (the count in use, from the window), else one: two instances
    share the arrivals, so each finds half as many queued.
    """
    largest = max(profile.effective_preferred)
    n = profile.instance_count or instances or 1
    greedy = _greedy_batch(rate_rps, n, curve, largest)
    waited = 1.0 + rate_rps * profile.max_queue_delay_us / 1e6
    return max(1.0, min(float(largest), max(greedy, waited)))


def device_ms_estimate(profile: Profile, rate_rps: float, curve: BatchCurve,
                       instances: int | None = None) -> float:
    """Device ms per request ``profile`` spends at ``rate_rps``: its batch's time over its size."""
    b = batch_estimate(profile, rate_rps, curve, instances)
    return batch_ms(curve, b) / b


@dataclass(frozen=True)
class Capacities:
    """What every profile of the ladder carries on this machine now."""

    rps: Mapping[int, float | None]
    """By ladder index: the curve's capacity with a deep queue, times the live factor."""
    floor: Mapping[int, float | None]
    """By ladder index: what it carries without a backlog (:func:`floor_capacity_rps`), likewise."""
    factor: float | None
    """The live factor (:func:`live_factor`); None: unmeasured, the curve's capacities stand."""


def capacities(history: Sequence[Observation], settings: PolicySettings,
               curve: BatchCurve | None) -> Capacities:
    """Capacities from the reference curve (the configured one, else ``curve``, the live
    points), times the live factor measured against that same curve. The live points do
    not also lower them: their slowdown is in the factor already."""
    s = settings
    reference = s.curve if s.curve is not None else curve
    factor = live_factor(history, reference, busy_ceiling=s.capacity.busy_ceiling,
                         min_busy_share=s.capacity.live_min_busy).factor
    scale = factor if factor is not None else 1.0
    n = history[-1].instance_count if history else None
    rps: dict[int, float | None] = {}
    floor: dict[int, float | None] = {}
    for i, p in enumerate(s.ladder):
        c, f = capacity_rps(p, reference, n), floor_capacity_rps(p, reference, n)
        rps[i] = None if c is None else c * scale
        floor[i] = None if f is None else f * scale
    return Capacities(rps, floor, factor)
