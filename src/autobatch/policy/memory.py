"""What each profile was seen to cost in device time, learned from the windows it served.

The efficiency rules compare profiles by device time per request, and a curve
measured on one instance cannot tell all of it (two instances on two cores
fight for the CPU: docs/policy.md#device-time-estimated-then-learned-from-the-windows).
So the policy remembers what it saw:

* per profile and arrival-rate bucket (buckets 25% wide), the device ms per
  request the windows served by that profile measured (an exponential average);
* per profile, the ratio of what it measured to what the estimate predicted
  (the curve, its live points and the instance count in use): the estimate's
  error on this machine, which carries to rates the profile has not served yet.

:func:`device_cost` answers with what was seen at this rate (or the buckets
next to it), else with the estimate times the profile's learned ratio, else
times the current profile's ratio (a profile never tried is assumed to be as
wrong as the one in force). A profile tried once and found no cheaper is then
known to be no cheaper: the controller does not try it again at that load.

Pure: values in, values out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

__all__ = ["Cost", "DeviceMemory", "device_cost", "rate_bucket"]

BUCKET_WIDTH = 1.25
"""Neighbouring buckets' rates differ by this factor."""


def rate_bucket(rate_rps: float) -> int:
    """The bucket of an arrival rate: rates within 25% of each other share one or touch."""
    return math.floor(math.log(max(rate_rps, 1.0)) / math.log(BUCKET_WIDTH))


@dataclass(frozen=True)
class DeviceMemory:
    """Device time per request seen per profile, and the estimate's learned error."""

    seen: tuple[tuple[str, int, float], ...] = ()
    """(profile, rate bucket, device ms per request), averaged over the windows seen."""
    ratio: tuple[tuple[str, float], ...] = ()
    """(profile, measured / estimated device ms), averaged over the windows seen."""

    def seen_ms(self, profile: str, bucket: int) -> float | None:
        for p, b, ms in self.seen:
            if p == profile and b == bucket:
                return ms
        return None

    def ratio_of(self, profile: str) -> float | None:
        for p, r in self.ratio:
            if p == profile:
                return r
        return None

    def remember(self, profile: str, rate_rps: float, measured_ms: float,
                 estimated_ms: float | None, alpha: float = 0.5) -> DeviceMemory:
        """This memory with one more window served by ``profile`` at ``rate_rps``;
        ``alpha`` is the newest window's weight in both averages."""
        if not (measured_ms > 0 and math.isfinite(measured_ms) and rate_rps > 0):
            return self
        a = alpha
        bucket = rate_bucket(rate_rps)
        old = self.seen_ms(profile, bucket)
        ms = measured_ms if old is None else a * measured_ms + (1 - a) * old
        seen = tuple(e for e in self.seen if (e[0], e[1]) != (profile, bucket))
        out = replace(self, seen=(*seen, (profile, bucket, ms)))
        if estimated_ms is not None and estimated_ms > 0 and math.isfinite(estimated_ms):
            r_now = measured_ms / estimated_ms
            r_old = self.ratio_of(profile)
            r = r_now if r_old is None else a * r_now + (1 - a) * r_old
            ratio = tuple(e for e in self.ratio if e[0] != profile)
            out = replace(out, ratio=(*ratio, (profile, r)))
        return out


class Cost(NamedTuple):
    """What a profile costs in device time per request at a rate, and where the figure comes from."""

    ms: float
    source: str
    """``seen``, ``learned``, ``assumed`` or ``estimated`` (:func:`device_cost`)."""


def device_cost(memory: DeviceMemory, profile: str, rate_rps: float, estimated_ms: float,
                current: str) -> Cost:
    """The device ms per request of ``profile`` at ``rate_rps``, and its source.

    The source is ``seen`` (measured at this rate, or the mean of the two rates
    around it), ``learned`` (the estimate times this profile's measured error),
    ``assumed`` (times the error of ``current``, the profile in force) or
    ``estimated`` (nothing measured yet).
    """
    b = rate_bucket(rate_rps)
    here = memory.seen_ms(profile, b)
    if here is not None:
        return Cost(here, "seen")
    below, above = memory.seen_ms(profile, b - 1), memory.seen_ms(profile, b + 1)
    if below is not None and above is not None:
        return Cost((below + above) / 2, "seen")
    r = memory.ratio_of(profile)
    if r is not None:
        return Cost(estimated_ms * r, "learned")
    r = memory.ratio_of(current)
    if r is not None:
        return Cost(estimated_ms * r, "assumed")
    return Cost(estimated_ms, "estimated")
