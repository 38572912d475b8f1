"""The gateway's step planner and the guard's verdict: pure values in, values out.

:func:`plan_shift` turns the gateway's weights and the receiving variant into the
weights of each step (the receiving variant's share goes up the ladder, e.g. 25 ->
50 -> 100 percent, the others keep their proportions of the rest); :func:`judge`
turns the receiving variant's window over one step into a :class:`Verdict`.
No clock, no I/O, no logging (an import-linter contract holds it to that): the
actuator in :mod:`autobatch.actuators.gateway.actuator` does the reading, writing
and waiting around them.

Weights are compared as *shares* (weight / sum of weights), so a gateway whose
config file says ``weight 1`` and ``weight 0`` and one that says 100 and 0 are
the same split. A server the gateway does not send to (down, in maintenance)
counts with weight 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autobatch.errors import ConfigError

__all__ = [
    "DEFAULT_STEPS",
    "SHARE_TOLERANCE",
    "GuardSettings",
    "StepRecord",
    "Variant",
    "Verdict",
    "describe",
    "describe_step",
    "holder",
    "judge",
    "percents",
    "plan_shift",
    "same_split",
    "shares",
]

DEFAULT_STEPS = (25, 50, 100)
"""Percent of the traffic on the receiving variant after each step."""

KEEP_UP_SHARE = 0.1
"""After a survival shift, a receiving variant keeps up with its load when its queue
grew by no more than this share of the requests it completed during the step."""

P95_ROSE_SHARE = 0.02
"""A receiving variant's summary p95 already over the limit before a step has risen over
it only when it grew by more than this share: a summary spans a minute and drifts as old
requests age out (the run that showed it: docs/gateway.md, "What one switch does")."""

SHARE_TOLERANCE = 0.01
"""How far a share read back may be from the one written: weights are integers
on the gateway (HAProxy: 0..256), so a percent does not always map exactly."""


# -- shares and steps ------------------------------------------------------------------------


def shares(weights: Mapping[str, float]) -> dict[str, float]:
    """Each target's fraction of the traffic; all zero when no weight is set."""
    total = sum(max(0.0, w) for w in weights.values())
    if total <= 0:
        return {k: 0.0 for k in weights}
    return {k: max(0.0, w) / total for k, w in weights.items()}


def percents(fractions: Mapping[str, float], total: int = 100) -> dict[str, int]:
    """Integer percents summing to ``round(total x sum)``, by largest remainder.

    Plain rounding of 33.3/33.3/33.3 gives 99; the remainder goes to the largest
    fractional parts, ties to the first named.
    """
    raw = {k: max(0.0, v) * total for k, v in fractions.items()}
    floor = {k: math.floor(v + 1e-9) for k, v in raw.items()}
    want = round(sum(raw.values()))
    left = want - sum(floor.values())
    order = sorted(raw, key=lambda k: -(raw[k] - floor[k]))
    for k in order[: max(0, left)]:
        floor[k] += 1
    return floor


def holder(weights: Mapping[str, float]) -> str | None:
    """The target holding more than half of the traffic, or None (a tie, or no weight)."""
    for k, s in shares(weights).items():
        if s > 0.5 + 1e-9:
            return k
    return None


def plan_shift(
    weights: Mapping[str, float], target: str, steps: Sequence[int] = DEFAULT_STEPS
) -> list[dict[str, int]]:
    """The weights (percent) of each step that moves the traffic onto ``target``.

    Steps the target's share already reaches are skipped, so an interrupted
    shift resumes where it stopped. The other targets keep their proportions of
    what is left; when none of them holds any weight the target simply gets its
    step (it carries everything anyway). Empty when ``target`` holds it all.
    """
    if target not in weights:
        raise KeyError(target)
    now = shares(weights)
    current_pct = now[target] * 100.0
    others = {k: v for k, v in now.items() if k != target}
    rest_total = sum(others.values())
    plan: list[dict[str, int]] = []
    for step in steps:
        if step <= current_pct + SHARE_TOLERANCE * 100:
            continue
        rest = (100 - step) / 100.0
        split = {k: (rest * v / rest_total if rest_total > 0 else 0.0) for k, v in others.items()}
        split[target] = step / 100.0
        plan.append(percents(split))
    return plan


def same_split(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Whether two weightings split the traffic alike, within :data:`SHARE_TOLERANCE`."""
    sa, sb = shares(a), shares(b)
    return all(abs(sa.get(k, 0.0) - sb.get(k, 0.0)) <= SHARE_TOLERANCE for k in set(sa) | set(sb))


def describe(weights: Mapping[str, float]) -> str:
    """``a=25% b=75%``: each target's share, for messages."""
    return " ".join(f"{k}={100 * s:.0f}%" for k, s in shares(weights).items())


def describe_step(step: Mapping[str, int]) -> str:
    """``a=25 b=75%``-style text of the percents one step writes, for messages."""
    return " ".join(f"{k}={v}%" for k, v in step.items())


# -- what is shifted, and the record of each step ----------------------------------------


@dataclass(frozen=True)
class Variant:
    """The variant serving one profile of the ladder."""

    profile: str
    """The ladder profile it serves."""
    target: str
    """The gateway's name for it: an HAProxy server, an HTTPRoute backendRef, an Istio host."""
    model: str
    """Its model name in Triton (``M__latency``, or ``M`` on a server of its own)."""



@dataclass(frozen=True)
class StepRecord:
    """One step of a shift, kept for :meth:`GatewayActuator.steps` (tests, benchmarks, logs)."""

    profile: str
    weights: Mapping[str, int]
    """Percent per target, as written."""
    started_s: float
    """Clock time the weights were written."""
    verdict: Verdict | None = None
    """The guard's verdict after the dwell; None without a guard (or when writing failed)."""



# -- the guard's verdict ---------------------------------------------------------------------


@dataclass(frozen=True)
class GuardSettings:
    """What the receiving variant must keep to after each step, or the weights roll back."""

    p95_ms: float
    """Its summary p95 must stay under this (default: the SLO's p95). The summary
    lags up to 60 s, so a p95 already over the limit before the step (from the
    variant's earlier traffic) only fails the step when it rose during it."""
    mean_ms: float | None = None
    """Its mean server-side request time over the step must stay under this: the
    fast latency signal, exact for the step. None: the same as ``p95_ms`` (a mean
    over the p95 objective means the p95 is surely over it)."""
    max_failure_rps: float = 0.0
    """Failed requests per second it may show over the step (0: none at all)."""
    failure_reasons: tuple[str, ...] | None = None
    """Triton failure reasons that count; None (default): every reason, since a
    variant that fails requests for any reason should not get more traffic."""
    min_requests: int = 1
    """Fewer completed requests than this in the step make the step inconclusive;
    it passes (there is no traffic to protect) and the message says so. A step
    without a single request is always inconclusive."""

    def __post_init__(self) -> None:
        if not self.p95_ms > 0:
            raise ConfigError(f"guard.p95_ms = {self.p95_ms!r}: must be > 0", field="guard.p95_ms")
        if self.mean_ms is not None and not self.mean_ms > 0:
            raise ConfigError(f"guard.mean_ms = {self.mean_ms!r}: must be > 0", field="guard.mean_ms")
        if self.max_failure_rps < 0:
            raise ConfigError(
                f"guard.max_failure_rps = {self.max_failure_rps!r}: must be >= 0",
                field="guard.max_failure_rps",
            )


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    """'ok', 'better', 'keeps_up', 'no_traffic', 'stale', 'unreachable', 'failures',
    'gateway_errors', 'mean', 'p95'."""
    message: str
    requests: float = 0.0
    """Requests the variant completed during the step (successful or failed)."""
    mean_ms: float | None = None
    p95_ms: float | None = None


def judge(
    window: Any,
    settings: GuardSettings,
    *,
    p95_before_ms: float | None = None,
    gateway_errors: float | None = None,
    reference: Any = None,
    saturated: bool = False,
) -> Verdict:
    """The verdict on one step from the receiving variant's window over it.

    ``window`` is an :class:`~autobatch.signals.Window` (or anything with its
    fields); ``p95_before_ms`` its summary p95 just before the step;
    ``gateway_errors`` the gateway's own failed requests to it during the step.

    ``reference``: the window, over the same step, of the variant the traffic was
    moved away from (an urgent shift, when that variant was saturated). Latency
    over the limits then fails the step only when it is also worse than the
    reference's: a shift out of an overload is judged on whether it made things
    worse, not on whether the overload is already gone. Failures always fail.

    ``saturated``: the variant the traffic left cannot carry the load (a survival
    move), so its queue grows for as long as the traffic stays there. A receiving
    variant over the limits that keeps up with the load (its queue grew by no more
    than :data:`KEEP_UP_SHARE` of the requests it completed) passes as ``keeps_up``:
    its first step carries the whole load at once, and the other's summary p95 still
    spans the minute before the overload, so comparing the two says nothing about
    staying. Pure: no clock, no I/O.
    """
    if window.stale:
        return Verdict(
            False, "stale",
            f"its signals cannot be trusted over the step ({window.stale_reason}: "
            f"{window.stale_detail or 'no detail'})",
        )
    step = _Step.of(window, settings)
    return (_traffic_verdict(step, settings, gateway_errors)
            or _latency_verdict(step, settings, p95_before_ms, reference, saturated))


@dataclass(frozen=True)
class _Step:
    """The receiving variant's figures over one step, as the guard reads them."""

    dt: float
    counted: Mapping[str, float]
    """Failures per second by reason, of the reasons the guard counts."""
    requests: float
    """Completed, successful or failed, over the step."""
    mean: float | None
    p95: float | None
    grew: float | None
    """How much its queue grew over the step."""

    @classmethod
    def of(cls, window: Any, settings: GuardSettings) -> _Step:
        dt = max(window.end_s - window.start_s, 1e-9)
        counted = {
            r: v for r, v in (window.failure_rps or {}).items()
            if settings.failure_reasons is None or r in settings.failure_reasons
        }
        requests = (window.success_rps + sum((window.failure_rps or {}).values())) * dt
        return cls(dt, counted, requests, window.mean_request_ms, window.p95_ms,
                   getattr(window, "pending_delta", None))

    @property
    def figures(self) -> dict[str, Any]:
        return {"requests": self.requests, "mean_ms": self.mean, "p95_ms": self.p95}


def _traffic_verdict(step: _Step, settings: GuardSettings, gateway_errors: float | None) -> Verdict | None:
    """Failures fail the step whatever the latency; too few requests leave nothing to judge."""
    figures, dt = step.figures, step.dt
    failure_rps = sum(step.counted.values())
    if gateway_errors is not None and gateway_errors > 0:
        return Verdict(
            False, "gateway_errors",
            f"the gateway counted {gateway_errors:g} failed requests or retried connections to "
            "it during the step",
            **figures,
        )
    if failure_rps > settings.max_failure_rps + 1e-9:
        by = ", ".join(f"{r} {v * dt:.0f}" for r, v in sorted(step.counted.items()) if v > 0)
        return Verdict(
            False, "failures",
            f"it failed {failure_rps * dt:.0f} requests during the step ({by})",
            **figures,
        )
    if step.requests < max(settings.min_requests, 1) - 1e-9:
        return Verdict(
            True, "no_traffic",
            f"it completed {step.requests:.0f} requests during the step (fewer than "
            f"{max(settings.min_requests, 1)}): nothing to judge",
            **figures,
        )
    return None


def _latency_verdict(step: _Step, settings: GuardSettings, p95_before_ms: float | None, reference: Any,
                     saturated: bool) -> Verdict:
    """Latency over the limits fails the step, unless it keeps up or beats the variant it left."""
    requests, mean, p95, grew, figures = step.requests, step.mean, step.p95, step.grew, step.figures
    ref = reference if reference is not None and not reference.stale else None
    ref_mean = None if ref is None else ref.mean_request_ms
    ref_p95 = None if ref is None else ref.p95_ms
    mean_limit = settings.mean_ms if settings.mean_ms is not None else settings.p95_ms
    over = [
        f"{name} {value:.1f} ms over {limit:g} ms"
        for name, value, limit in (("mean", mean, mean_limit), ("p95", p95, settings.p95_ms))
        if value is not None and value > limit
    ]
    if saturated and over and grew is not None and grew <= KEEP_UP_SHARE * requests:
        return Verdict(
            True, "keeps_up",
            f"{requests:.0f} requests, {', '.join(over)}, but it kept up with the load "
            f"(queue {grew:+.0f}) that the saturated variant it left cannot carry",
            **figures,
        )
    if mean is not None and mean > mean_limit and (ref_mean is None or mean > ref_mean):
        than = "" if ref_mean is None else f" and over the {ref_mean:.1f} ms of the one it left"
        return Verdict(
            False, "mean",
            f"its mean request time over the step was {mean:.1f} ms, over {mean_limit:g} ms"
            f"{than}",
            **figures,
        )
    if p95 is not None and p95 > settings.p95_ms:
        rose = (p95_before_ms is None or p95_before_ms <= settings.p95_ms
                or p95 > p95_before_ms * (1 + P95_ROSE_SHARE))
        if rose and (ref_p95 is None or p95 > ref_p95):
            return Verdict(
                False, "p95",
                f"its p95 is {p95:.1f} ms, over {settings.p95_ms:g} ms"
                + ("" if ref_p95 is None else f" and over the {ref_p95:.1f} ms of the one it left")
                + ("" if grew is None else f" (queue {grew:+.0f} over the step)"),
                **figures,
            )
    if ref is not None and mean is not None and mean > mean_limit:
        return Verdict(
            True, "better",
            f"{requests:.0f} requests, mean {mean:.1f} ms: over {mean_limit:g} ms, but under the "
            f"{ref_mean:.1f} ms of the variant it left",
            **figures,
        )
    if ref_p95 is not None and p95 is not None and settings.p95_ms < p95 <= ref_p95:
        return Verdict(
            True, "better",
            f"{requests:.0f} requests, p95 {p95:.1f} ms: over {settings.p95_ms:g} ms, but under the "
            f"{ref_p95:.1f} ms of the variant it left",
            **figures,
        )
    mean_txt = "-" if mean is None else f"{mean:.1f} ms"
    p95_txt = "-" if p95 is None else f"{p95:.1f} ms"
    return Verdict(
        True, "ok",
        f"{requests:.0f} requests, mean {mean_txt}, p95 {p95_txt}, no failures"
        + ("" if grew is None else f", queue {grew:+.0f}"),
        **figures,
    )

