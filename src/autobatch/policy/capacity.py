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
* :func:`device_stretch`, :func:`p95_estimate`: on a device others share, what
  the batches take now over the curve, and a profile's p95 with its batches
  stretched so (docs/policy.md, "A shared device").
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
    "device_stretch",
    "floor_capacity_rps",
    "live_factor",
    "P95Parts",
    "p95_estimate",
    "p95_parts",
    "stretched",
    "wait_ms",
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
        # On a device the policy sees, the stretch is in the capacity already (divided by
        # it): the factor is what the instances spend beyond their stretched batches.
        predicted = w.exec_rps * batch_ms(curve, b) * device_stretch(w) / 1000.0
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
                       instances: int | None = None, stretch: float = 1.0) -> float:
    """Device ms per request ``profile`` spends at ``rate_rps``: its batch's time over its size,
    in the device's own time. With its batches ``stretch`` x the curve (others share the
    device) it forms larger batches, each costing the device its curve time."""
    b = batch_estimate(profile, rate_rps, stretched(curve, stretch), instances)
    return batch_ms(curve, b) / b


def stretched(curve: BatchCurve, stretch: float) -> BatchCurve:
    """``curve`` with every batch ``stretch`` x as long (the curve itself at 1)."""
    if stretch == 1.0:
        return curve
    points = {b: ms * stretch for b, ms in curve.points.items()}
    return BatchCurve(points=points, name=f"{curve.name} x{stretch:.2f}")


def device_stretch(w: Observation) -> float:
    """What window ``w``'s batches took over the curve (its ``stretch``, at least 1) where it
    also says what the device does (``others_share``: a device utilisation); 1 elsewhere.
    On a CPU the compute time is the model's own cost, and the live factor scales capacity
    by what the machine does to it."""
    s = w.stretch
    if s is None or w.others_share is None or not math.isfinite(s):
        return 1.0
    return max(1.0, s)


def wait_ms(p: Profile, rate_rps: float) -> float:
    """How long a batch waits for its preferred size, at most the profile's max delay."""
    delay = p.max_queue_delay_us / 1000.0
    if delay <= 0:
        return 0.0
    fill = (min(p.effective_preferred) - 1) / max(rate_rps, 1e-9) * 1000.0
    return min(delay, max(0.0, fill))


def mean_wait_ms(p: Profile, rate_rps: float) -> float:
    """A request's mean wait for its batch: the batch's first request waits the whole
    :func:`wait_ms`, those arriving meanwhile (Poisson, up to the preferred size) half of it."""
    t = wait_ms(p, rate_rps)
    if t <= 0:
        return 0.0
    k = min(rate_rps * t / 1000.0, max(0.0, min(p.effective_preferred) - 1.0))
    return (t + k * t / 2.0) / (1.0 + k)


class P95Parts(NamedTuple):
    """A profile's p95 as two parts: what a request waits before its batch runs, and its
    batch's run with the device to itself (which others, sharing it, stretch)."""

    ahead_ms: float
    """The larger of its wait for a batch and, on busy instances, the run of the batch ahead."""
    run_ms: float
    """The curve's time of the batch it forms."""

    def p95_ms(self, tail: float) -> float:
        """The p95 with the batch's own run ``tail`` x the curve (the stretch of a slow batch)."""
        return self.ahead_ms + self.run_ms * tail


def p95_parts(profile: Profile, rate_rps: float, curve: BatchCurve, instances: int | None = None,
              stretch: float = 1.0) -> P95Parts:
    """The parts of ``profile``'s p95 at ``rate_rps`` with every batch ``stretch`` x the curve:
    the batch it forms then, its wait for that batch (:func:`wait_ms`) or the stretched run of
    the batch ahead on busy instances, and the batch's own run."""
    n = profile.instance_count or instances or 1
    b = batch_estimate(profile, rate_rps, stretched(curve, stretch), n)
    run = batch_ms(curve, b)
    busy = min(1.0, rate_rps * run * stretch / 1000.0 / b / n)
    return P95Parts(max(wait_ms(profile, rate_rps), busy * run * stretch), run)


def p95_estimate(profile: Profile, rate_rps: float, curve: BatchCurve, instances: int | None = None,
                 stretch: float = 1.0) -> float:
    """A rough p95 of ``profile`` at ``rate_rps`` with every batch ``stretch`` x the curve: the
    larger of its wait for a batch plus that batch's run, and (on busy instances) the run of
    the batch ahead plus its own. Against the simulator on the T4 curve alone it lands within
    2 ms for the default and the waiting profiles (one rung with a short wait read 26 ms for
    33 at 300 req/s); co-tenants make some batches slower than the mean stretch, which the
    context reads from the live profile's requests (docs/policy.md, "A shared device")."""
    return p95_parts(profile, rate_rps, curve, instances, stretch).p95_ms(stretch)


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
               curve: BatchCurve | None, stretch: float = 1.0) -> Capacities:
    """Capacities from the reference curve (the configured one, else ``curve``, the live
    points), times the live factor measured against that same curve, over ``stretch`` (what
    the batches take now on a device others share). The live points do not also lower
    them: their slowdown is in the factor already."""
    s = settings
    reference = s.curve if s.curve is not None else curve
    factor = live_factor(history, reference, busy_ceiling=s.capacity.busy_ceiling,
                         min_busy_share=s.capacity.live_min_busy).factor
    scale = (factor if factor is not None else 1.0) / stretch
    n = history[-1].instance_count if history else None
    rps: dict[int, float | None] = {}
    floor: dict[int, float | None] = {}
    for i, p in enumerate(s.ladder):
        c, f = capacity_rps(p, reference, n), floor_capacity_rps(p, reference, n)
        rps[i] = None if c is None else c * scale
        floor[i] = None if f is None else f * scale
    return Capacities(rps, floor, factor)
