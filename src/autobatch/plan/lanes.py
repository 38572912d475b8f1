"""Priority lanes: an urgent level ahead of every batch, a batchable level with the wait.

Given a priority mix (the share of requests that are urgent), the planner
proposes a two-lane profile built on a profile that waits for batches: the
base profile's preferred sizes and wait, ``priority_levels: 2`` and
``default_priority_level: 2`` (unlabelled requests are batchable); level 1,
urgent, has no queue policy. Urgent callers send Triton's request priority 1.

Triton walks level 1 before level 2, so an urgent request never queues behind
batchable ones; but ``max_queue_delay_microseconds`` is one value per model,
so a lone urgent request on an idle model still waits it. The prediction runs
the simulator twice on the same Poisson arrivals: the lanes profile on the
``general`` engine and the base profile on one level (``triton`` engine).

It leaves out that Triton stops prefetching batches with priority levels, so
on the real server the batchable lane pays more than predicted. The rules, the
measurements and their commands: docs/planner.md, "Priority lanes".

Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autobatch.errors import ConfigError
from autobatch.plan.simulator import ServiceModel, Workload, simulate
from autobatch.plan.simulator.workload import check_priority_share
from autobatch.profiles import Profile
from autobatch.stats import LatencyStats

__all__ = ["URGENT_LEVEL", "BATCHABLE_LEVEL", "Lane", "Lanes", "check_lane_mix", "lanes_profile",
           "plan_lanes"]

URGENT_LEVEL = 1
BATCHABLE_LEVEL = 2


def check_lane_mix(mix: Mapping[int, float]) -> dict[int, float]:
    """The mix as level -> share of requests: level 1 urgent, level 2 (or 0, the
    default level) batchable; both must be there."""
    allowed = "e.g. 1:0.1,2:0.9 (level 1 urgent, level 2 batchable; shares of the requests)"
    if not isinstance(mix, Mapping) or not mix:
        raise ConfigError(f"priority_mix = {mix!r}: give the shares of levels 1 and 2, {allowed}")
    out: dict[int, float] = {}
    for level, share in mix.items():
        if level not in (0, URGENT_LEVEL, BATCHABLE_LEVEL):
            raise ConfigError(f"priority_mix level {level!r}: a two-lane plan has levels 1 (urgent) "
                              f"and 2 (batchable), {allowed}")
        check_priority_share(level, share)
        out[int(level)] = float(share)
    urgent = out.get(URGENT_LEVEL, 0.0)
    batchable = out.get(BATCHABLE_LEVEL, 0.0) + out.get(0, 0.0)
    if urgent <= 0 or batchable <= 0:
        raise ConfigError(f"priority_mix = {dict(mix)!r}: needs urgent (level 1) and batchable "
                          f"(level 2) requests both, {allowed}")
    return out


def lanes_profile(base: Profile, *, name: str = "lanes") -> Profile:
    """``base``'s batching with two levels: 1 urgent, 2 batchable and the default."""
    if base.priority_levels:
        raise ConfigError(f"{base.source}: profile {base.name!r} already has priority_levels = "
                          f"{base.priority_levels}; lanes are built on a profile without levels")
    if base.preserve_ordering:
        raise ConfigError(f"{base.source}: profile {base.name!r} sets preserve_ordering, which Triton "
                          "allows with one priority level only")
    return replace(base, name=name, priority_levels=2, default_priority_level=BATCHABLE_LEVEL,
                   source="<plan lanes>")


@dataclass(frozen=True)
class Lane:
    name: str
    """``urgent`` or ``batchable``."""
    level: int
    share: float
    """Of the requests."""
    requests: int
    with_lanes: LatencyStats | None
    without_lanes: LatencyStats | None
    """The same requests under the base profile, one FIFO queue for all."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "lane": self.name,
            "level": self.level,
            "share": round(self.share, 4),
            "requests": self.requests,
            "with_lanes_ms": None if self.with_lanes is None else self.with_lanes.to_dict(),
            "without_lanes_ms": None if self.without_lanes is None else self.without_lanes.to_dict(),
        }


@dataclass(frozen=True)
class Lanes:
    profile: Profile
    """The two-lane profile the planner proposes (and writes as ``lanes.yaml``)."""
    base: Profile
    """The profile whose batching it keeps."""
    rate_rps: float
    lanes: tuple[Lane, Lane]
    """Urgent, then batchable."""
    mean_batch_with: float
    mean_batch_without: float

    @property
    def urgent(self) -> Lane:
        return self.lanes[0]

    @property
    def batchable(self) -> Lane:
        return self.lanes[1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.to_dict(),
            "base": self.base.name,
            "rate_rps": self.rate_rps,
            "lanes": [lane.to_dict() for lane in self.lanes],
            "mean_batch_with_lanes": round(self.mean_batch_with, 3),
            "mean_batch_without_lanes": round(self.mean_batch_without, 3),
        }


def plan_lanes(
    base: Profile,
    service: ServiceModel,
    rate_rps: float,
    mix: Mapping[int, float],
    *,
    duration_s: float = 60.0,
    instances: int | None = None,
    seed: int = 0,
) -> Lanes:
    """The lanes profile on ``base``, and both lanes' latency with and without it at
    ``rate_rps`` Poisson, with priorities drawn from ``mix``."""
    mix = check_lane_mix(mix)
    profile = lanes_profile(base)
    work = Workload.poisson(rate_rps, duration_s, seed, priority_mix=mix)
    assert work.priority is not None
    with_lanes = simulate(profile, service, work, instances=instances, seed=seed, engine="general",
                          keep_latencies=True)
    # One level, no queue policy: Triton prefetches the next batch while the instance is
    # busy, which the default engine models; with levels it does not (the general engine).
    same_arrivals = Workload(t_s=work.t_s, duration_s=work.duration_s)
    without = simulate(base, service, same_arrivals, instances=instances, seed=seed,
                       keep_latencies=True)
    urgent_mask = work.priority == URGENT_LEVEL
    lanes = []
    for name, level, mask in (("urgent", URGENT_LEVEL, urgent_mask),
                              ("batchable", BATCHABLE_LEVEL, ~urgent_mask)):
        lanes.append(Lane(
            name=name,
            level=level,
            share=float(mask.mean()) if len(work) else 0.0,
            requests=int(mask.sum()),
            with_lanes=_by_mask(with_lanes, mask),
            without_lanes=_by_mask(without, mask),
        ))
    return Lanes(profile, base, float(rate_rps), (lanes[0], lanes[1]), with_lanes.mean_batch,
                 without.mean_batch)


def _by_mask(result: Any, mask: np.ndarray) -> LatencyStats | None:
    lat = result.latencies_ms
    # Without queue policies every request completes, so the latencies are in arrival order.
    if lat is None or result.completed != result.requests:
        raise ConfigError("lanes: a profile with queue policies rejects requests; plan lanes on one "
                          "without them")
    return LatencyStats.of(lat[mask])
