"""Does batching pay on this curve, and which profiles follow from it.

The batch gain per size (per-item time against batch 1, every size flagged
measured, interpolated or extrapolated), the plain verdict (batching *loses*,
is *marginal* or *pays*), and the candidate profiles from latency-soft to
aggressive that :func:`autobatch.plan.planner.make_plan` then simulates.
Pure: a curve in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from autobatch.curve import BatchCurve, PointKind
from autobatch.profiles import Profile

__all__ = [
    "GainRow",
    "Verdict",
    "VerdictKind",
    "batching_verdict",
    "candidate_profiles",
    "gain_table",
]

MARGINAL_GAIN = 0.9
"""A best per-item ratio at or above this (under 10% saved) makes batching marginal."""


# -- gains and the verdict ------------------------------------------------------------------


@dataclass(frozen=True)
class GainRow:
    batch_size: int
    ms: float
    per_item_ms: float
    gain: float
    """Per-item time relative to batch 1 (< 1: batching pays at this size)."""
    throughput_rps: float
    """Items per second of one instance running batches of this size back to back."""
    kind: PointKind

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "ms": round(self.ms, 4),
            "per_item_ms": round(self.per_item_ms, 4),
            "gain": round(self.gain, 4),
            "throughput_rps": round(self.throughput_rps, 2),
            "kind": self.kind.value,
        }


def gain_table(curve: BatchCurve, max_batch_size: int) -> tuple[GainRow, ...]:
    """Every measured size and every power of two up to ``max_batch_size``."""
    sizes = {b for b in curve.sizes if b <= max_batch_size}
    b = 1
    while b <= max_batch_size:
        sizes.add(b)
        b *= 2
    rows = []
    for b in sorted(sizes):
        est = curve.estimate(b)
        rows.append(
            GainRow(
                batch_size=b,
                ms=est.ms,
                per_item_ms=est.per_item_ms,
                gain=curve.gain(b),
                throughput_rps=curve.throughput_rps(b),
                kind=est.kind,
            )
        )
    return tuple(rows)


class VerdictKind(str, Enum):
    LOSES = "loses"
    MARGINAL = "marginal"
    PAYS = "pays"


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    best_batch: int
    """The measured size (<= the max batch size considered) with the lowest per-item time."""
    best_gain: float
    message: str

    @property
    def batching_pays(self) -> bool:
        return self.kind is VerdictKind.PAYS

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "batching_pays": self.batching_pays,
            "best_batch": self.best_batch,
            "best_gain": round(self.best_gain, 4),
            "message": self.message,
        }


def batching_verdict(curve: BatchCurve, max_batch_size: int | None = None) -> Verdict:
    """Judge on measured sizes only: an extrapolated gain is a guess, not evidence."""
    sizes = [b for b in curve.sizes if max_batch_size is None or b <= max_batch_size]
    if 1 not in curve.points:
        # Without a measured batch 1 the ratio itself rests on an extrapolation.
        sizes = [b for b in sizes if b != 1]
    best = min(sizes, key=lambda b: (curve.gain(b), b), default=1)
    gain = curve.gain(best) if best != 1 else 1.0
    if best == 1 or gain >= 1.0:
        return Verdict(
            VerdictKind.LOSES,
            1,
            1.0,
            "batching lowers throughput on this device: serve batch 1, do not wait",
        )
    if gain >= MARGINAL_GAIN:
        return Verdict(
            VerdictKind.MARGINAL,
            best,
            gain,
            f"batching barely pays on this device: batch {best} takes {gain:.2f}x the per-item "
            f"time of batch 1; batch what queues up, do not wait for more",
        )
    return Verdict(
        VerdictKind.PAYS,
        best,
        gain,
        f"batching pays on this device: batch {best} takes {gain:.2f}x the per-item time of "
        f"batch 1 ({1 / gain:.2f}x the throughput); batch up to {best}",
    )


# -- candidates -----------------------------------------------------------------------------


def candidate_profiles(
    curve: BatchCurve,
    verdict: Verdict,
    max_batch_size: int,
    delay_ms: float,
    *,
    allow_extrapolation: bool = False,
    model: str | None = None,
    instances: int | None = None,
    model_max_batch_size: int | None = None,
) -> tuple[Profile, ...]:
    """Profiles from latency-soft to aggressive, for a profile max batch size and the
    SLO's delay.

    The batches are capped by the preferred sizes (Triton sends the largest
    preferred size it can form; only a payload whose delay ran out grows past
    it, toward ``max_batch_size``), while each profile's own
    ``max_batch_size`` stays the model's (``model_max_batch_size``): a profile
    the sidecar applies must not start rejecting clients that send multi-row
    requests.

    ``latency-soft`` never waits: it batches only what queued up while the
    instance was busy. ``balanced`` waits a quarter of the delay and sends
    half batches early. ``aggressive`` waits up to the whole delay for the
    best batch. When batching loses there are two: batch 1 with no wait, and
    an aggressive one kept only to show what it would cost.
    """
    sizes = [
        b
        for b in (curve.sizes if not allow_extrapolation else curve.sizes_to_try(max_batch_size))
        if b <= max_batch_size
    ] or [1]
    best = max(sizes, key=lambda b: (curve.throughput_rps(b), -b))
    delay_us = int(round(delay_ms * 1000.0))
    common: dict[str, Any] = {
        "max_batch_size": max(model_max_batch_size or max_batch_size, max_batch_size),
        "model": model,
        "instance_count": instances,
        "source": "<plan>",
    }
    if verdict.kind is VerdictKind.LOSES or best == 1:
        largest = max(sizes)
        return (
            Profile(
                name="latency-soft",
                preferred_batch_size=(1,),
                max_queue_delay_us=0,
                **common,
            ),
            Profile(
                name="aggressive",
                preferred_batch_size=(largest,),
                max_queue_delay_us=delay_us,
                **common,
            ),
        )
    half = sorted({max(1, best // 2), best})
    return (
        Profile(name="latency-soft", preferred_batch_size=(best,), max_queue_delay_us=0, **common),
        Profile(
            name="balanced",
            preferred_batch_size=tuple(half),
            max_queue_delay_us=int(round(delay_us / 4)),
            **common,
        ),
        Profile(
            name="aggressive", preferred_batch_size=(best,), max_queue_delay_us=delay_us, **common
        ),
    )
