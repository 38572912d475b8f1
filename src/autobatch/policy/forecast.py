"""A short-horizon forecast of the arrival rate: Holt's linear method over the last windows.

Pure: rates in, a :class:`Forecast` out. Holt keeps a *level* and a *trend*
(requests/s per window), each an exponentially weighted update::

    level_t = alpha * y_t + (1 - alpha) * (level_{t-1} + trend_{t-1})
    trend_t = beta * (level_t - level_{t-1}) + (1 - beta) * trend_{t-1}

and projects ``level + h * trend`` for ``h`` windows ahead, over the policy's
measured reaction time (one window plus the last actuation), so a switch
decided now lands before the projected load does.

Steady Poisson arrivals must not trip it: a trend counts only above ``z``
times its own standard deviation under white noise of the observed size
(:func:`trend_noise`; the noise is the larger of the Poisson one and the spread
of Holt's one-step errors). A step is not a trend: a window more than
``jump_z`` Poisson standard deviations above the one-step projection restarts
the level with no trend (only jumps up: a fall trips nothing). How often each
trips, simulated and on the real server, with dates: docs/policy.md#the-forecast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Forecast", "holt", "trend_noise"]


@dataclass(frozen=True)
class Forecast:
    level_rps: float
    """Holt's level after the last window: the smoothed arrival rate now."""
    trend_rps: float
    """Holt's trend: change of the arrival rate per window."""
    horizon_windows: float
    """How many windows ahead :attr:`rps` is projected."""
    noise_rps: float
    """The per-window noise the significance test used (requests/s)."""
    trend_sd_rps: float
    """The trend's standard deviation under that noise."""
    z: float
    shifts: int = 0
    """How many of the windows were read as a level shift (a step), not a trend."""

    @property
    def rps(self) -> float:
        """The projected arrival rate ``horizon_windows`` from now (never below 0)."""
        return max(0.0, self.level_rps + self.horizon_windows * self.trend_rps)

    @property
    def rising(self) -> bool:
        """Whether the trend stands out of the noise (more than ``z`` sigma, upward)."""
        return self.trend_rps > self.z * self.trend_sd_rps


@lru_cache(maxsize=32)
def trend_noise(alpha: float, beta: float) -> float:
    """Steady-state standard deviation of Holt's trend on unit white noise.

    The method is a linear filter of the input, so the covariance of (level,
    trend) follows ``P = A P A' + B B'``; iterating to the fixed point gives it.
    """
    a, b = alpha, beta
    # The state's update matrix for (level, trend) and the input's weights.
    a11, a12 = 1 - a, 1 - a
    a21, a22 = -a * b, (1 - a) * b + (1 - b)
    b1, b2 = a, a * b
    p11 = p12 = p22 = 0.0
    for _ in range(500):
        n11 = a11 * a11 * p11 + 2 * a11 * a12 * p12 + a12 * a12 * p22 + b1 * b1
        n12 = a11 * a21 * p11 + (a11 * a22 + a12 * a21) * p12 + a12 * a22 * p22 + b1 * b2
        n22 = a21 * a21 * p11 + 2 * a21 * a22 * p12 + a22 * a22 * p22 + b2 * b2
        if abs(n22 - p22) < 1e-12 and abs(n11 - p11) < 1e-12:
            p11, p12, p22 = n11, n12, n22
            break
        p11, p12, p22 = n11, n12, n22
    return math.sqrt(max(p22, 0.0))


def holt(
    rates_rps: Sequence[float],
    *,
    window_s: float,
    horizon_windows: float,
    alpha: float = 0.5,
    beta: float = 0.3,
    z: float = 3.5,
    jump_z: float = 4.0,
) -> Forecast | None:
    """Holt's forecast of ``rates_rps`` (oldest first, one per window of ``window_s``).

    None with fewer than three rates: no trend can be told from noise in two. A window
    more than ``jump_z`` Poisson standard deviations above the one-step projection is a
    level shift: the level restarts at it, the trend at 0 (``jump_z`` 0: never).
    """
    if len(rates_rps) < 3:
        return None
    level, trend = float(rates_rps[0]), 0.0
    errors: list[float] = []
    shifts = 0
    for y in rates_rps[1:]:
        projected = level + trend
        error = y - projected
        if jump_z > 0 and error > jump_z * math.sqrt(max(y, 1.0) / max(window_s, 1e-9)):
            level, trend, shifts = float(y), 0.0, shifts + 1
            continue
        errors.append(error)
        new_level = alpha * y + (1 - alpha) * projected
        trend = beta * (new_level - level) + (1 - beta) * trend
        level = new_level
    mean = sum(errors) / len(errors) if errors else 0.0
    spread = math.sqrt(sum((e - mean) ** 2 for e in errors) / len(errors)) if errors else 0.0
    poisson = math.sqrt(max(level, 1.0) / max(window_s, 1e-9))
    noise = max(poisson, spread)
    return Forecast(
        level_rps=level,
        trend_rps=trend,
        horizon_windows=max(0.0, horizon_windows),
        noise_rps=noise,
        trend_sd_rps=noise * trend_noise(alpha, beta),
        z=z,
        shifts=shifts,
    )
