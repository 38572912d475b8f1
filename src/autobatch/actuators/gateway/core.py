"""Shift gateway weights between model variants, one guarded step at a time.

Each profile of the ladder is served by its own *variant* of the model, loaded
side by side (``M__latency`` and ``M__throughput`` in one Triton, or ``M`` on
two Triton servers), and a gateway splits the traffic between them by weight.
:class:`GatewayActuator` makes a profile live by moving the traffic onto its
variant instead of reloading the model:

1. read the weights from the gateway (:class:`WeightsBackend`);
2. plan the steps (:func:`plan_shift`): the receiving variant's share of the
   traffic goes up the configured ladder, e.g. 25 -> 50 -> 100 percent, the
   others keep their proportions of the rest;
3. per step: take a baseline of the receiving variant's signals, write the
   weights, read them back, wait ``step_dwell_s``, and let the guard judge what
   the receiving variant did in that time (:func:`judge`): its failures, its
   mean and p95 latency against the SLO, and the gateway's own error counters
   for it. A failed step puts the weights of before the shift back at once.

Why not reload: a reload builds a second copy of the model while the first
serves, and on a heavy model that competes for the device and spikes the tail
(see :mod:`autobatch.actuators.triton`). Both variants here are loaded already,
so a shift changes only where the next request goes.

``live_profile`` is the variant holding the majority of the traffic;
``reconcile`` re-applies the profile when its variant no longer holds all of it
(the gateway restarted from its config file, someone moved a weight by hand).

Weights are compared as *shares* (weight / sum of weights), so a gateway whose
config file says ``weight 1`` and ``weight 0`` and one that says 100 and 0 are
the same split. A server the gateway does not send to (down, in maintenance)
counts with weight 0.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from autobatch.actuators.base import ActuationResult
from autobatch.errors import ActuationError, AutobatchError, ConfigError, SignalError
from autobatch.profiles import Profile
from autobatch.signals.variants import StepSignals

__all__ = [
    "DEFAULT_STEPS",
    "GatewayActuator",
    "GatewayFailure",
    "Guard",
    "GuardSettings",
    "StepRecord",
    "StepSignals",
    "Variant",
    "Verdict",
    "WeightsBackend",
    "holder",
    "judge",
    "percents",
    "plan_shift",
    "shares",
]

log = logging.getLogger(__name__)

DEFAULT_STEPS = (25, 50, 100)
"""Percent of the traffic on the receiving variant after each step."""

_SHARE_TOLERANCE = 0.01
"""How far a share read back may be from the one written: weights are integers
on the gateway (HAProxy: 0..256), so a percent does not always map exactly."""


class GatewayFailure(ActuationError):
    """A gateway step that failed; ``reason`` is a :data:`~autobatch.actuators.base.REASONS` entry."""

    def __init__(self, message: str, *, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason


# -- the gateway side ------------------------------------------------------------------------


class WeightsBackend(Protocol):
    """Reads and writes the weights of a gateway's servers (HAProxy, an HTTPRoute, ...).

    Targets are the gateway's names for the variants (HAProxy server names,
    HTTPRoute backendRef names). Failures raise :class:`GatewayFailure`.
    """

    kind: str
    """'haproxy', 'httproute', 'virtualservice': a log and message label."""
    changes_traffic: bool
    """False when writes only print what would change (nothing to guard)."""

    async def read(self) -> dict[str, float]:
        """Effective weight of every target: 0 for one the gateway does not send to."""
        ...

    async def write(self, weights: Mapping[str, int]) -> None:
        """Set every target's weight, given as percent of the traffic (summing to <= 100)."""
        ...

    async def failure_count(self, target: str) -> float | None:
        """The gateway's own cumulative count of failed requests to ``target``, or None
        when it keeps none (then the guard relies on the variant's signals alone)."""
        ...

    async def aclose(self) -> None: ...


# -- pure helpers ----------------------------------------------------------------------------


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
        if step <= current_pct + _SHARE_TOLERANCE * 100:
            continue
        rest = (100 - step) / 100.0
        split = {k: (rest * v / rest_total if rest_total > 0 else 0.0) for k, v in others.items()}
        split[target] = step / 100.0
        plan.append(percents(split))
    return plan


def _same_split(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    sa, sb = shares(a), shares(b)
    return all(abs(sa.get(k, 0.0) - sb.get(k, 0.0)) <= _SHARE_TOLERANCE for k in set(sa) | set(sb))


def _describe(weights: Mapping[str, float]) -> str:
    return " ".join(f"{k}={100 * s:.0f}%" for k, s in shares(weights).items())


# -- the guard -------------------------------------------------------------------------------


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
    """'ok', 'no_traffic', 'stale', 'unreachable', 'failures', 'gateway_errors', 'mean', 'p95'."""
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
) -> Verdict:
    """The verdict on one step from the receiving variant's window over it.

    ``window`` is an :class:`~autobatch.signals.Window` (or anything with its
    fields); ``p95_before_ms`` its summary p95 just before the step;
    ``gateway_errors`` the gateway's own failed requests to it during the step.
    Pure: no clock, no I/O.
    """
    if window.stale:
        return Verdict(
            False, "stale",
            f"its signals cannot be trusted over the step ({window.stale_reason}: "
            f"{window.stale_detail or 'no detail'})",
        )
    dt = max(window.end_s - window.start_s, 1e-9)
    counted = {
        r: v for r, v in (window.failure_rps or {}).items()
        if settings.failure_reasons is None or r in settings.failure_reasons
    }
    failure_rps = sum(counted.values())
    requests = (window.success_rps + sum((window.failure_rps or {}).values())) * dt
    mean = window.mean_request_ms
    p95 = window.p95_ms
    figures = {"requests": requests, "mean_ms": mean, "p95_ms": p95}
    if gateway_errors is not None and gateway_errors > 0:
        return Verdict(
            False, "gateway_errors",
            f"the gateway counted {gateway_errors:g} failed requests or retried connections to "
            "it during the step",
            **figures,
        )
    if failure_rps > settings.max_failure_rps + 1e-9:
        by = ", ".join(f"{r} {v * dt:.0f}" for r, v in sorted(counted.items()) if v > 0)
        return Verdict(
            False, "failures",
            f"it failed {failure_rps * dt:.0f} requests during the step ({by})",
            **figures,
        )
    if requests < max(settings.min_requests, 1) - 1e-9:
        return Verdict(
            True, "no_traffic",
            f"it completed {requests:.0f} requests during the step (fewer than "
            f"{max(settings.min_requests, 1)}): nothing to judge",
            **figures,
        )
    mean_limit = settings.mean_ms if settings.mean_ms is not None else settings.p95_ms
    if mean is not None and mean > mean_limit:
        return Verdict(
            False, "mean",
            f"its mean request time over the step was {mean:.1f} ms, over {mean_limit:g} ms",
            **figures,
        )
    if p95 is not None and p95 > settings.p95_ms:
        rose = p95_before_ms is None or p95_before_ms <= settings.p95_ms or p95 > p95_before_ms + 1e-6
        if rose:
            return Verdict(
                False, "p95",
                f"its p95 is {p95:.1f} ms, over {settings.p95_ms:g} ms",
                **figures,
            )
    mean_txt = "-" if mean is None else f"{mean:.1f} ms"
    p95_txt = "-" if p95 is None else f"{p95:.1f} ms"
    return Verdict(
        True, "ok",
        f"{requests:.0f} requests, mean {mean_txt}, p95 {p95_txt}, no failures",
        **figures,
    )


class Guard:
    """Judges the receiving variant after each step from its own signals."""

    def __init__(self, signals: Mapping[str, StepSignals], settings: GuardSettings) -> None:
        self.signals = dict(signals)
        self.settings = settings

    async def begin(self, profile: str) -> Any:
        return await self.signals[profile].begin()

    async def check(self, profile: str, baseline: Any, gateway_errors: float | None) -> Verdict:
        sig = self.signals[profile]
        try:
            window = await sig.window(baseline)
        except SignalError as exc:
            return Verdict(False, "unreachable", f"its signals cannot be read: {exc}")
        return judge(
            window, self.settings, p95_before_ms=sig.p95_ms(baseline), gateway_errors=gateway_errors
        )

    async def aclose(self) -> None:
        for sig in self.signals.values():
            await sig.aclose()


# -- the actuator ----------------------------------------------------------------------------


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


class GatewayActuator:
    """Apply profiles by shifting gateway weights between variants, in guarded steps.

    Args:
        ladder: the controller's profiles; every one needs a variant.
        variants: the variant of each profile (by profile name).
        backend: the gateway's weights (HAProxy runtime API, Kubernetes route, ...).
        guard: judges the receiving variant after each step; None shifts unguarded.
        steps: percent of the traffic on the receiving variant after each step,
            increasing, ending at 100.
        step_dwell_s: how long each step runs before the guard judges it. The
            window must hold enough requests to say anything: at 50 requests/s a
            2 s step at 25 % is 25 requests.
        retry_s: after a failed re-apply by :meth:`reconcile`, wait this long before
            shifting traffic onto the variant again (each try sends it traffic).
        clock: monotonic seconds, for durations and the retry wait.
        sleep: awaited for the dwell; tests pass one that does not wait.
    """

    name = "gateway"

    def __init__(
        self,
        ladder: Sequence[Profile],
        variants: Mapping[str, Variant],
        backend: WeightsBackend,
        *,
        guard: Guard | None = None,
        steps: Sequence[int] = DEFAULT_STEPS,
        step_dwell_s: float = 2.0,
        retry_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        steps = tuple(int(s) for s in steps)
        if not steps or steps[-1] != 100 or any(not 0 < s <= 100 for s in steps) or any(
            b <= a for a, b in zip(steps, steps[1:])
        ):
            raise ConfigError(
                f"steps = {list(steps)!r}: must be increasing percents in (0, 100] ending at 100",
                field="steps", value=list(steps),
            )
        if not step_dwell_s >= 0:
            raise ConfigError(f"step_dwell_s = {step_dwell_s!r}: must be >= 0", field="step_dwell_s")
        self.ladder = tuple(ladder)
        missing = [p.name for p in self.ladder if p.name not in variants]
        if missing:
            raise ConfigError(
                f"variants: no variant for profile {missing[0]!r}; every ladder profile needs one",
                field="variants", value=missing[0],
            )
        targets = [v.target for v in variants.values()]
        if len(set(targets)) != len(targets):
            raise ConfigError(
                f"variants: targets {targets}: each variant needs a gateway target of its own",
                field="variants", value=targets,
            )
        self.variants = dict(variants)
        self.backend = backend
        self.guard = guard
        self.steps = steps
        self.step_dwell_s = float(step_dwell_s)
        self.retry_s = float(retry_s)
        self.clock = clock
        self.sleep = sleep
        self._lock = asyncio.Lock()
        self._history: list[StepRecord] = []
        self._retry_at: dict[str, float] = {}
        self._by_target = {v.target: v.profile for v in self.variants.values()}

    # -- the protocol ----------------------------------------------------------------------
    async def apply(self, profile: Profile) -> ActuationResult:
        async with self._lock:
            t0 = self.clock()
            variant = self.variants.get(profile.name)
            if variant is None:
                return self._result(
                    profile, t0, ok=False, reason="invalid",
                    message=f"no variant serves profile {profile.name!r} "
                    f"(variants: {', '.join(self.variants)})",
                )
            try:
                weights = await self._read()
            except GatewayFailure as exc:
                return self._result(profile, t0, ok=False, reason=exc.reason, message=str(exc))
            return await self._shift(profile, variant, weights, t0, ok_reason="applied")

    async def live_profile(self) -> str | None:
        """The profile whose variant holds the majority of the traffic; None if none does."""
        async with self._lock:
            try:
                weights = await self._read()
            except GatewayFailure as exc:
                log.warning("gateway: cannot read the weights: %s", exc)
                return None
            return self._live(weights)

    async def reconcile(self, profile: Profile) -> ActuationResult | None:
        """Re-apply ``profile`` when its variant no longer holds all of the traffic.

        A gateway restarted from its config file, or a weight moved by hand, is
        found here. The re-apply is guarded like a switch; after a failed one the
        next try waits ``retry_s``, since each try sends the variant traffic.
        """
        async with self._lock:
            t0 = self.clock()
            variant = self.variants.get(profile.name)
            if variant is None:
                return None
            try:
                weights = await self._read()
            except GatewayFailure as exc:
                return self._result(
                    profile, t0, ok=False, reason=exc.reason,
                    message=f"cannot check that {profile.name} still holds the traffic: {exc}",
                )
            if shares(weights)[variant.target] >= 1.0 - _SHARE_TOLERANCE:
                self._retry_at.pop(profile.name, None)
                return None
            retry_at = self._retry_at.get(profile.name)
            if retry_at is not None and t0 < retry_at:
                return self._result(
                    profile, t0, ok=False, reason="verify_failed", active=self._live(weights),
                    message=f"the gateway's weights are {_describe(weights)}, not all on "
                    f"{variant.target}; the last re-apply failed, next try in {retry_at - t0:.0f} s",
                )
            log.warning(
                "gateway: weights are %s, not all on %s (the %s restarted, or someone moved "
                "them); re-applying %s", _describe(weights), variant.target, self.backend.kind,
                profile.name,
            )
            result = await self._shift(profile, variant, weights, t0, ok_reason="reapplied")
            if result.ok:
                self._retry_at.pop(profile.name, None)
                return ActuationResult(
                    profile=result.profile, ok=True, duration_s=result.duration_s,
                    reason="reapplied", active=result.active,
                    message=f"the weights were {_describe(weights)} ({self.backend.kind} restarted "
                    f"or changed by hand); {result.message}",
                )
            self._retry_at[profile.name] = self.clock() + self.retry_s
            return result

    async def aclose(self) -> None:
        try:
            await self.backend.aclose()
        finally:
            if self.guard is not None:
                await self.guard.aclose()

    # -- introspection ---------------------------------------------------------------------
    def steps_taken(self) -> tuple[StepRecord, ...]:
        """Every step written so far, oldest first (a snapshot)."""
        return tuple(self._history)

    # -- the shift -------------------------------------------------------------------------
    async def _shift(
        self, profile: Profile, variant: Variant, weights: dict[str, float], t0: float, *, ok_reason: str
    ) -> ActuationResult:
        plan = plan_shift(weights, variant.target, self.steps)
        if not plan:
            return self._result(
                profile, t0, ok=True, reason="unchanged", active=profile.name,
                message=f"{variant.target} already holds all of the traffic; no weight changed",
            )
        if not self.backend.changes_traffic:
            # Print mode: nothing moves, so there is nothing for a guard to watch;
            # the whole change is shown as one step.
            try:
                await self.backend.write(plan[-1])
            except GatewayFailure as exc:
                return self._result(profile, t0, ok=False, reason=exc.reason, message=str(exc))
            self._history.append(StepRecord(profile.name, plan[-1], self.clock()))
            return self._result(
                profile, t0, ok=True, reason="dry_run", active=profile.name,
                message=f"printed the {self.backend.kind} change onto {variant.target}; "
                "nothing was applied",
            )
        before = dict(weights)
        done: list[str] = []
        for step in plan:
            baseline = None
            if self.guard is not None:
                try:
                    baseline = await self.guard.begin(profile.name)
                except AutobatchError as exc:  # a variant we cannot watch gets no traffic
                    return await self._roll_back(
                        profile, before, t0, done, reason="unavailable",
                        why=f"the signals of {variant.model} cannot be read ({exc}); "
                        "it gets no traffic it cannot be watched with",
                    )
            errors0 = await self._gateway_errors(variant.target)
            record = StepRecord(profile.name, step, self.clock())
            try:
                await self.backend.write(step)
                after = await self._read()
            except GatewayFailure as exc:
                self._history.append(record)
                return await self._roll_back(
                    profile, before, t0, done, reason=exc.reason, why=f"setting {_pct(step)} failed: {exc}"
                )
            if not _same_split(after, step):
                self._history.append(record)
                return await self._roll_back(
                    profile, before, t0, done, reason="verify_failed",
                    why=f"set {_pct(step)} but the {self.backend.kind} reads back {_describe(after)}",
                )
            done.append(f"{step[variant.target]}%")
            if self.guard is None:
                self._history.append(record)
                continue
            if self.step_dwell_s > 0:
                await self.sleep(self.step_dwell_s)
            errors1 = await self._gateway_errors(variant.target)
            delta = errors1 - errors0 if errors0 is not None and errors1 is not None else None
            verdict = await self.guard.check(profile.name, baseline, delta)
            self._history.append(StepRecord(profile.name, step, record.started_s, verdict))
            if not verdict.ok:
                return await self._roll_back(
                    profile, before, t0, done, reason="verify_failed",
                    why=f"guard: at {_pct(step)}, {variant.model} {verdict.message}",
                )
            log.info("gateway: %s at %s: %s", variant.target, _pct(step), verdict.message)
        return self._result(
            profile, t0, ok=True, reason=ok_reason, active=profile.name,
            message=f"traffic shifted onto {variant.target} ({variant.model}) in "
            f"{len(plan)} step{'s' if len(plan) != 1 else ''}: {' -> '.join(done)}",
        )

    async def _roll_back(
        self,
        profile: Profile,
        before: Mapping[str, float],
        t0: float,
        done: Sequence[str],
        *,
        reason: str,
        why: str,
    ) -> ActuationResult:
        """Put the weights of before the shift back at once: the receiving variant is the
        suspect, the one that held the traffic was fine."""
        what = f"shifting to {profile.name} failed ({reason}): {why}"
        if done:
            what += f" (steps passed: {' -> '.join(done)})"
        target = percents(shares(before)) if any(v > 0 for v in before.values()) else {
            k: int(v) for k, v in before.items()
        }
        try:
            current = await self._read()
            if not _same_split(current, before):
                await self.backend.write(target)
                current = await self._read()
                if not _same_split(current, before):
                    raise GatewayFailure(
                        f"the {self.backend.kind} reads back {_describe(current)}", reason="verify_failed"
                    )
                how = f"weights back to {_describe(before)}"
            else:
                how = f"weights unchanged at {_describe(before)}"
        except GatewayFailure as exc:
            message = f"{what}; putting the weights back failed too: {exc}"
            log.error("gateway: %s", message)
            return self._result(profile, t0, ok=False, reason=reason, message=message, active=None)
        message = f"{what}; rolled back, {how}"
        log.warning("gateway: %s", message)
        return self._result(
            profile, t0, ok=False, reason=reason, message=message,
            active=self._live(before), rolled_back=True,
        )

    # -- helpers ---------------------------------------------------------------------------
    async def _read(self) -> dict[str, float]:
        weights = await self.backend.read()
        missing = [v.target for v in self.variants.values() if v.target not in weights]
        if missing:
            raise GatewayFailure(
                f"the {self.backend.kind} has no {missing[0]!r} (it has: "
                f"{', '.join(sorted(weights)) or 'nothing'}); check the variants' targets",
                reason="unavailable",
            )
        return {v.target: weights[v.target] for v in self.variants.values()}

    async def _gateway_errors(self, target: str) -> float | None:
        try:
            return await self.backend.failure_count(target)
        except GatewayFailure as exc:
            log.warning("gateway: cannot read the %s's error counters: %s", self.backend.kind, exc)
            return None

    def _live(self, weights: Mapping[str, float]) -> str | None:
        target = holder(weights)
        return self._by_target.get(target) if target is not None else None

    def _result(self, profile: Profile, t0: float, **fields: Any) -> ActuationResult:
        return ActuationResult.since(profile, t0, self.clock(), **fields)


def _pct(step: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}%" for k, v in step.items())
