"""Latency percentiles of a sample: the one summary the simulator and the real runs share.

Pure: numpy in, a frozen value out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LatencyStats"]


@dataclass(frozen=True)
class LatencyStats:
    """p50/p95/p99, mean and max of a latency sample, in milliseconds.

    Percentiles are numpy's default (linear interpolation between order
    statistics), the same for a simulated sample and a measured one.
    """

    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float

    @classmethod
    def of(cls, ms: np.ndarray) -> LatencyStats | None:
        """The summary of ``ms`` (a 1-d array), or None for an empty sample."""
        ms = np.asarray(ms, dtype=np.float64)
        if ms.shape[0] == 0:
            return None
        p50, p95, p99 = np.percentile(ms, (50, 95, 99))
        return cls(float(p50), float(p95), float(p99), float(ms.mean()), float(ms.max()))

    def to_dict(self) -> dict[str, float]:
        return {
            "p50": round(self.p50_ms, 3),
            "p95": round(self.p95_ms, 3),
            "p99": round(self.p99_ms, 3),
            "mean": round(self.mean_ms, 3),
            "max": round(self.max_ms, 3),
        }
