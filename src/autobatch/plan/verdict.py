"""Does batching pay on this curve, and which profiles follow from it.

The batch gain per size (per-item time against batch 1, every size flagged
measured, interpolated or extrapolated), the plain verdict (batching *loses*,
is *marginal* or *pays*), and the candidate profiles from latency-soft to
aggressive that :func:`autobatch.plan.planner.make_plan` then simulates.

On a shared device the curve's answer is not the whole answer: co-tenants
stretch every batch, so the profile that waits for free alone may break the
SLO with them, and Triton's default may no longer keep up. :func:`shared_verdict`
says which, from each candidate simulated alone and with the co-tenants.
Pure: values in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from autobatch.curve import BatchCurve, PointKind
from autobatch.profiles import Profile

__all__ = [
    "GainRow",
    "SharedKind",
    "SharedOption",
    "SharedVerdict",
    "Verdict",
    "VerdictKind",
    "batching_verdict",
    "candidate_profiles",
    "gain_table",
    "shared_verdict",
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


# -- on a shared device -----------------------------------------------------------------------


class SharedKind(str, Enum):
    FREES = "frees"
    """Waiting keeps the SLO with the co-tenants too, and frees device time for them."""
    NEEDED = "needed"
    """Triton's default no longer keeps the SLO with the co-tenants; a waiting profile does."""
    BREAKS = "breaks"
    """The best profile alone breaks the SLO with the co-tenants; another keeps it."""
    FULL = "full"
    """No profile keeps the SLO with the co-tenants: the device is too full."""
    NO_GAIN = "no-gain"
    """With the co-tenants the best profile does not wait: batching frees nothing here."""


@dataclass(frozen=True)
class SharedOption:
    """One candidate at the plan's load, with the device to the model and with the co-tenants."""

    name: str
    waits: bool
    """It waits for a batch (a queue delay above 0)."""
    alone_ok: bool
    shared_ok: bool
    alone_p95_ms: float | None
    shared_p95_ms: float | None
    shared_p99_ms: float | None
    alone_busy: float
    """The device's busy share with the model alone."""
    shared_busy: float
    """The device's busy share with the co-tenants (every tenant)."""
    model_share: float
    """The model's own work over the run, with the co-tenants."""
    served: float
    """Requests served over requests offered, with the co-tenants."""
    cotenant_items_per_s: float
    """The co-tenants' items per second of their active time, summed."""

    def to_dict(self) -> dict[str, Any]:
        def r(v: float | None, n: int = 3) -> float | None:
            return None if v is None else round(v, n)

        return {
            "name": self.name, "waits": self.waits, "alone_ok": self.alone_ok, "shared_ok": self.shared_ok,
            "alone_p95_ms": r(self.alone_p95_ms), "shared_p95_ms": r(self.shared_p95_ms),
            "shared_p99_ms": r(self.shared_p99_ms), "alone_busy": r(self.alone_busy, 4),
            "shared_busy": r(self.shared_busy, 4), "model_share": r(self.model_share, 4),
            "served": r(self.served, 4), "cotenant_items_per_s": r(self.cotenant_items_per_s),
        }


@dataclass(frozen=True)
class SharedVerdict:
    """Does batching pay with these co-tenants on the device, at the plan's load?"""

    kind: SharedKind
    device: str
    """Who shares the device, and how (``SharedDevice.label``)."""
    best_alone: str | None
    best_shared: str | None
    message: str
    options: tuple[SharedOption, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "device": self.device, "best_alone": self.best_alone,
                "best_shared": self.best_shared, "message": self.message,
                "options": [o.to_dict() for o in self.options]}


def shared_verdict(options: tuple[SharedOption, ...], *, default: str, best_alone: str | None,
                   best_shared: str | None, device: str, slo_ms: float,
                   label: str = "p99") -> SharedVerdict:
    """The verdict from each candidate alone and with the co-tenants, given the best choice
    of each (the planner's objective picks them: the SLO first, then device time)."""
    by = {o.name: o for o in options}
    d = by[default]

    def p(o: SharedOption) -> str:
        v = o.shared_p95_ms if label == "p95" else o.shared_p99_ms
        return "-" if v is None else f"{label} {v:.0f} ms"

    def verdict(kind: SharedKind, message: str) -> SharedVerdict:
        return SharedVerdict(kind, device, best_alone, best_shared, message, options)

    if best_shared is None:
        return verdict(SharedKind.FULL, (
            f"with {device}, no profile keeps {label} within {slo_ms:g} ms (Triton's default: {p(d)}, "
            f"{d.served:.0%} of the load served): the device is too full; move a co-tenant or add a device"))
    s = by[best_shared]
    if not d.shared_ok and s.waits:
        return verdict(SharedKind.NEEDED, (
            f"with the co-tenants, Triton's default no longer keeps the SLO ({p(d)}, "
            f"{d.served:.0%} of the load served); {s.name} keeps it ({p(s)}) with the model on "
            f"{s.model_share:.0%} of the device: batching is what keeps it up"))
    a = by.get(best_alone) if best_alone is not None else None
    if a is not None and a.name != s.name and a.alone_ok and not a.shared_ok:
        return verdict(SharedKind.BREAKS, (
            f"{a.name}, the best profile alone (p95 {a.alone_p95_ms or 0:.0f} ms, device "
            f"{a.alone_busy:.0%} busy), breaks the SLO with the co-tenants ({p(a)}); "
            f"{s.name} keeps it ({p(s)}, the model on {s.model_share:.0%} of the device)"))
    if s.waits:
        return verdict(SharedKind.FREES, (
            f"with the co-tenants, {s.name} keeps the SLO ({p(s)}) with the model on "
            f"{s.model_share:.0%} of the device against Triton's default's {d.model_share:.0%}: the "
            f"co-tenants get {s.cotenant_items_per_s:.0f} items/s against {d.cotenant_items_per_s:.0f}"))
    keeping = [o for o in options if o.waits and o.shared_ok]
    if not keeping:
        return verdict(SharedKind.NO_GAIN, (
            f"with the co-tenants, {s.name} (no wait) is the best choice ({p(s)}): no profile "
            f"that waits keeps the SLO with them"))
    w = min(keeping, key=lambda o: o.model_share)
    return verdict(SharedKind.NO_GAIN, (
        f"with the co-tenants, {s.name} (no wait) is the best choice ({p(s)}): {w.name} keeps "
        f"the SLO too ({p(w)}) but leaves the model on {w.model_share:.0%} of the device against "
        f"{s.model_share:.0%}, too little saved to pay for its latency"))
