"""How long an instance is busy with a batch, and what every request pays besides."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError

__all__ = ["ServiceModel"]


@dataclass(frozen=True)
class ServiceModel:
    """How long an instance is busy with a batch, and what every request pays besides."""

    curve: BatchCurve
    batch_overhead_ms: float = 0.0
    """Instance time per batch beyond the curve (backend IPC, gathering inputs,
    writing outputs). 0 models the bare device."""
    request_overhead_ms: float = 0.0
    """Instance time per request in a batch beyond the curve (per-request tensors
    and responses)."""
    fixed_latency_ms: float = 0.0
    """Added to every latency without occupying the instance: network, protocol,
    client. The planner puts the SLO's network overhead here."""
    noise_cv: float = 0.0
    """Coefficient of variation of lognormal noise on each batch's curve time;
    0 is deterministic."""

    def __post_init__(self) -> None:
        for name in ("batch_overhead_ms", "request_overhead_ms", "fixed_latency_ms", "noise_cv"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ConfigError(f"{name} = {v!r}: must be a number >= 0")

    def curve_ms(self, batch_size: int) -> float:
        return self.curve.estimate(batch_size).ms

    def busy_ms(self, batch_size: int) -> float:
        """Mean instance time of one batch of ``batch_size``."""
        return (
            self.curve_ms(batch_size)
            + self.batch_overhead_ms
            + batch_size * self.request_overhead_ms
        )

    def capacity_rps(self, batch_size: int, instances: int = 1) -> float:
        """Requests per second when every batch has ``batch_size`` requests."""
        return instances * batch_size * 1000.0 / self.busy_ms(batch_size)
