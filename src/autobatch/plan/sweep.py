"""The load sweep: the highest Poisson rate a profile sustains within the SLO.

Each point is a run of the simulator (:mod:`autobatch.plan.simulator`) at one
rate; :func:`max_sustained_rate` sweeps a grid up to the curve's capacity and
bisects between the last good and the first bad point. Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autobatch.plan.simulator import ServiceModel, SharedDevice, Workload, simulate
from autobatch.profiles import Profile

__all__ = ["SweepPoint", "max_sustained_rate"]


@dataclass(frozen=True)
class SweepPoint:
    rate_rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    throughput_rps: float
    mean_batch: float
    within_slo: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_rps": round(self.rate_rps, 3),
            "p50_ms": round(self.p50_ms, 3),
            "p95_ms": round(self.p95_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "throughput_rps": round(self.throughput_rps, 3),
            "mean_batch": round(self.mean_batch, 3),
            "within_slo": self.within_slo,
        }


def _capacity_rps(profile: Profile, service: ServiceModel, instances: int) -> float:
    return max(
        service.capacity_rps(b, instances)
        for b in service.curve.sizes_to_try(max(profile.effective_preferred))
    )


def _point(
    profile: Profile,
    service: ServiceModel,
    rate: float,
    slo_ms: float,
    requests: int,
    seed: int,
    instances: int,
    device: SharedDevice | None = None,
    percentile: int = 99,
) -> SweepPoint:
    duration = max(requests / rate, 1.0)
    work = Workload.poisson(rate, duration, seed)
    if device is None:
        res = simulate(profile, service, work, instances=instances)
    else:
        res = simulate(profile, service, work, instances=instances, sharing=device.sharing,
                       cotenants=device.cotenants)
    lat = res.latency
    assert lat is not None  # every request completes without queue policies
    # Saturated runs drain a backlog after the arrivals stop: throughput falls
    # behind the offered rate even when the few requests simulated meet the SLO.
    keeps_up = res.throughput_rps >= 0.97 * res.offered_rps
    return SweepPoint(
        rate_rps=rate,
        p50_ms=lat.p50_ms,
        p95_ms=lat.p95_ms,
        p99_ms=lat.p99_ms,
        throughput_rps=res.throughput_rps,
        mean_batch=res.mean_batch,
        within_slo=keeps_up and (lat.p95_ms if percentile == 95 else lat.p99_ms) <= slo_ms,
    )


def max_sustained_rate(
    profile: Profile,
    service: ServiceModel,
    slo_ms: float,
    *,
    instances: int = 1,
    points: int = 16,
    refine: int = 6,
    requests: int = 20_000,
    seed: int = 0,
    device: SharedDevice | None = None,
    percentile: int = 99,
) -> tuple[float, tuple[SweepPoint, ...]]:
    """The highest Poisson rate at which ``profile`` keeps its ``percentile`` (95 or 99)
    within ``slo_ms``, and the sweep behind it.

    Latency is not monotone in load under batching (at low load a request may
    wait the whole delay; a little more load fills batches sooner), so the
    rate is found on a grid up to the curve's capacity and then bisected
    between the last good and the first bad grid point. 0 when even the
    lowest rate misses the SLO. On a shared ``device`` every point runs with its
    co-tenants (their declared times, from the start of each run).
    """
    cap = _capacity_rps(profile, service, instances)
    grid = [cap * (i + 1) / points for i in range(points)]
    sweep = [
        _point(profile, service, r, slo_ms, requests, seed, instances, device, percentile) for r in grid
    ]
    good = [p for p in sweep if p.within_slo]
    if not good:
        return 0.0, tuple(sweep)
    last_good = max(good, key=lambda p: p.rate_rps)
    above = [p for p in sweep if p.rate_rps > last_good.rate_rps]
    if not above:
        return last_good.rate_rps, tuple(sweep)
    lo, hi = last_good.rate_rps, above[0].rate_rps
    for _ in range(refine):
        mid = (lo + hi) / 2
        pt = _point(profile, service, mid, slo_ms, requests, seed, instances, device, percentile)
        sweep.append(pt)
        if pt.within_slo:
            lo = mid
        else:
            hi = mid
    return lo, tuple(sorted(sweep, key=lambda p: p.rate_rps))
