"""The queue-delay budget: how long a request may wait to be batched and still meet the SLO.

Published recipes for tuning Triton's dynamic batcher from an SLA back-calculate
the batcher's ``max_queue_delay`` from the SLO (docs/planner.md, "The SLO equation")::

    budget = SLO p99 - time of one batch at the max batch size - network overhead

With SLO 100 ms p99, 10 ms of network and a batch of 8 taking 50 ms, the
budget is 40 ms. The recipes then keep a safety margin and set the delay to
20-30 ms; here the margin is a fraction of the budget that the operator sets
(:data:`DEFAULT_MARGIN_FRAC`, 0.4, puts that example at 24 ms).

Pure: values in, values out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autobatch.curve import BatchCurve, PointKind
from autobatch.errors import ConfigError

__all__ = [
    "ARTICLE_EXAMPLE",
    "DEFAULT_MARGIN_FRAC",
    "Budget",
    "check_slo_inputs",
    "largest_fitting_batch",
    "queue_budget",
]

DEFAULT_MARGIN_FRAC = 0.4
"""Share of the budget kept back for variance. 0.4 turns the article's 40 ms budget
into a 24 ms delay, inside the 20-30 ms the article recommends; 0 spends it all."""


@dataclass(frozen=True)
class Budget:
    """The SLO equation for one batch size, with every term named."""

    slo_p99_ms: float
    network_ms: float
    batch_size: int
    batch_ms: float
    """Run time of one batch of ``batch_size`` (from the curve)."""
    batch_kind: PointKind
    """Whether ``batch_ms`` was measured, interpolated or extrapolated."""
    margin_frac: float
    slo_label: str = "p99"
    """The percentile ``slo_p99_ms`` bounds, as the equation names it (``p95`` for a p95 SLO)."""

    @property
    def budget_ms(self) -> float:
        """SLO - batch time - network; negative when the batch alone breaks the SLO."""
        return self.slo_p99_ms - self.batch_ms - self.network_ms

    @property
    def fits(self) -> bool:
        return self.budget_ms >= 0

    @property
    def delay_ms(self) -> float:
        """The ``max_queue_delay`` to set: the budget less the margin, never below 0."""
        return max(0.0, self.budget_ms * (1.0 - self.margin_frac))

    @property
    def delay_us(self) -> int:
        return int(round(self.delay_ms * 1000.0))

    def equation(self) -> str:
        flag = "" if self.batch_kind is PointKind.MEASURED else f", {self.batch_kind.value}"
        return (
            f"budget = SLO {self.slo_label} {self.slo_p99_ms:g} ms - batch of {self.batch_size} "
            f"{self.batch_ms:.4g} ms{flag} - network {self.network_ms:g} ms "
            f"= {self.budget_ms:.4g} ms"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "slo_p99_ms": self.slo_p99_ms,
            "network_ms": self.network_ms,
            "batch_size": self.batch_size,
            "batch_ms": round(self.batch_ms, 4),
            "batch_kind": self.batch_kind.value,
            "budget_ms": round(self.budget_ms, 4),
            "margin_frac": self.margin_frac,
            "delay_ms": round(self.delay_ms, 4),
            "equation": self.equation(),
        }


def check_slo_inputs(slo_p99_ms: float, network_ms: float, margin_frac: float,
                     name: str = "slo_p99_ms") -> None:
    """The SLO, the network overhead and the margin, each named as the field it is (the SLO
    as ``name``: ``slo_p95_ms`` for a p95 SLO)."""
    if not (math.isfinite(slo_p99_ms) and slo_p99_ms > 0):
        raise ConfigError(f"{name} = {slo_p99_ms!r}: must be a number > 0")
    if not (math.isfinite(network_ms) and network_ms >= 0):
        raise ConfigError(f"network_ms = {network_ms!r}: must be a number >= 0")
    if not (math.isfinite(margin_frac) and 0 <= margin_frac < 1):
        raise ConfigError(f"margin = {margin_frac!r}: must be a fraction in [0, 1)")


def queue_budget(
    slo_p99_ms: float,
    network_ms: float,
    batch: BatchCurve | float,
    batch_size: int,
    *,
    margin_frac: float = DEFAULT_MARGIN_FRAC,
) -> Budget:
    """The budget at ``batch_size``; ``batch`` is a curve or the batch's run time in ms.

    >>> queue_budget(100, 10, 50.0, 8).budget_ms
    40.0
    """
    check_slo_inputs(slo_p99_ms, network_ms, margin_frac)
    if batch_size < 1:
        raise ConfigError(f"max_batch_size = {batch_size!r}: must be >= 1")
    if isinstance(batch, BatchCurve):
        est = batch.estimate(batch_size)
        ms, kind = est.ms, est.kind
    else:
        ms, kind = float(batch), PointKind.MEASURED
        if not (math.isfinite(ms) and ms > 0):
            raise ConfigError(f"batch time = {batch!r}: must be a number > 0 ms")
    return Budget(
        slo_p99_ms=float(slo_p99_ms),
        network_ms=float(network_ms),
        batch_size=batch_size,
        batch_ms=ms,
        batch_kind=kind,
        margin_frac=float(margin_frac),
    )


ARTICLE_EXAMPLE = queue_budget(100.0, 10.0, 50.0, 8)
"""The reference article's worked example: 100 - 50 - 10 = 40 ms."""


def largest_fitting_batch(
    curve: BatchCurve,
    slo_p99_ms: float,
    network_ms: float,
    max_batch_size: int,
    *,
    margin_frac: float = DEFAULT_MARGIN_FRAC,
) -> Budget | None:
    """The budget of the largest batch (<= ``max_batch_size``) whose run time fits.

    A batch fits when its run time plus the network leaves a budget >= 0: a
    larger one breaks the SLO even if no request ever waits. None when not even
    batch 1 fits.
    """
    check_slo_inputs(slo_p99_ms, network_ms, margin_frac)
    best = None
    for b in range(1, max_batch_size + 1):
        budget = queue_budget(slo_p99_ms, network_ms, curve, b, margin_frac=margin_frac)
        if budget.fits:
            best = budget
        elif curve.estimate(b).ms >= curve.estimate(max(1, b - 1)).ms:
            # Batch time only grows with the batch past here (curves are monotone
            # in practice), so nothing larger can fit either.
            break
    return best
