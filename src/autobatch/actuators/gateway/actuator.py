"""Shift gateway weights between model variants, one guarded step at a time.

Each profile of the ladder is served by its own *variant* of the model, loaded
side by side (``M__latency`` and ``M__throughput`` in one Triton, or ``M`` on
two Triton servers), and a gateway splits the traffic between them by weight.
:class:`GatewayActuator` makes a profile live by moving the traffic onto its
variant instead of reloading the model: it reads the weights
(:class:`WeightsBackend`), plans the steps
(:func:`~autobatch.actuators.gateway.steps.plan_shift`: e.g. 25 -> 50 -> 100
percent), and per step writes the weights, reads them back, waits
``step_dwell_s`` and lets the guard judge what the receiving variant did
(:func:`~autobatch.actuators.gateway.steps.judge`); a failed step puts the
weights of before the shift back at once. docs/gateway.md, "What one switch
does", walks through it.

Why not reload: a reload builds a second copy of the model while the first
serves, which competes for the device and spikes the tail (docs/triton-facts.md).
Both variants here are loaded already, so a shift changes only where the next
request goes.

``live_profile`` is the variant holding the majority of the traffic;
``reconcile`` re-applies the profile when its variant no longer holds all of
it. This module is the I/O (the gateway, the dwell, the variants' signals)
around the pure step planner and verdict of :mod:`autobatch.actuators.gateway.steps`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from autobatch.actuators.base import ActuationResult
from autobatch.actuators.gateway.backend import GatewayFailure, WeightsBackend
from autobatch.actuators.gateway.steps import (
    DEFAULT_STEPS,
    SHARE_TOLERANCE,
    GuardSettings,
    StepRecord,
    Variant,
    Verdict,
    describe,
    describe_step,
    holder,
    judge,
    percents,
    plan_shift,
    same_split,
    shares,
)
from autobatch.errors import AutobatchError, ConfigError, SignalError
from autobatch.profiles import Profile
from autobatch.signals.variants import StepSignals

__all__ = ["GatewayActuator", "Guard"]

log = logging.getLogger(__name__)


class Guard:
    """Judges the receiving variant after each step from its own signals."""

    def __init__(self, signals: Mapping[str, StepSignals], settings: GuardSettings) -> None:
        self.signals = dict(signals)
        self.settings = settings

    async def begin(self, profile: str) -> Any:
        return await self.signals[profile].begin()

    async def check(
        self,
        profile: str,
        baseline: Any,
        gateway_errors: float | None,
        reference: tuple[str, Any] | None = None,
        *,
        saturated: bool = False,
    ) -> Verdict:
        """Judge ``profile`` over the step since ``baseline``; with ``reference``
        (``(profile, baseline)`` of the variant the traffic left), against that one;
        ``saturated``: that one cannot carry the load (see :func:`judge`)."""
        sig = self.signals[profile]
        try:
            window = await sig.window(baseline)
        except SignalError as exc:
            return Verdict(False, "unreachable", f"its signals cannot be read: {exc}")
        ref_window = None
        if reference is not None:
            # Without the reference the step is judged on the limits alone: stricter.
            with contextlib.suppress(SignalError):
                ref_window = await self.signals[reference[0]].window(reference[1])
        return judge(
            window, self.settings, p95_before_ms=sig.p95_ms(baseline), gateway_errors=gateway_errors,
            reference=ref_window, saturated=saturated,
        )

    async def aclose(self) -> None:
        for sig in self.signals.values():
            await sig.aclose()



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
    async def apply(
        self, profile: Profile, *, urgent: bool = False, saturated: bool = False
    ) -> ActuationResult:
        """Shift the traffic onto ``profile``'s variant, in guarded steps.

        ``urgent`` (the policy's direct moves: survival, whose live variant cannot carry
        the load, and the steps toward latency that cost nothing) skips the
        intermediate steps and writes the target weights at once: every step would
        leave most of the traffic where it should not be. The guard still judges the
        one step, against the variant the traffic left, and rolls back if the shift
        made things worse. ``saturated`` (a survival move:
        the variant it leaves cannot carry the load) also keeps a receiving variant
        over the limits that keeps up with the load (:func:`judge`).
        """
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
            return await self._shift(profile, variant, weights, t0, ok_reason="applied",
                                     urgent=urgent, saturated=saturated)

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
            if shares(weights)[variant.target] >= 1.0 - SHARE_TOLERANCE:
                self._retry_at.pop(profile.name, None)
                return None
            retry_at = self._retry_at.get(profile.name)
            if retry_at is not None and t0 < retry_at:
                return self._result(
                    profile, t0, ok=False, reason="verify_failed", active=self._live(weights),
                    message=f"the gateway's weights are {describe(weights)}, not all on "
                    f"{variant.target}; the last re-apply failed, next try in {retry_at - t0:.0f} s",
                )
            log.warning(
                "gateway: weights are %s, not all on %s (the %s restarted, or someone moved "
                "them); re-applying %s", describe(weights), variant.target, self.backend.kind,
                profile.name,
            )
            result = await self._shift(profile, variant, weights, t0, ok_reason="reapplied")
            if result.ok:
                self._retry_at.pop(profile.name, None)
                return ActuationResult(
                    profile=result.profile, ok=True, duration_s=result.duration_s,
                    reason="reapplied", active=result.active,
                    message=f"the weights were {describe(weights)} ({self.backend.kind} restarted "
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
        self,
        profile: Profile,
        variant: Variant,
        weights: dict[str, float],
        t0: float,
        *,
        ok_reason: str,
        urgent: bool = False,
        saturated: bool = False,
    ) -> ActuationResult:
        plan = plan_shift(weights, variant.target, self.steps)
        source = self._live(weights)
        if urgent and len(plan) > 1:
            plan = plan[-1:]
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
            reference = None
            if urgent and self.guard is not None and source is not None and source != profile.name:
                with contextlib.suppress(AutobatchError):
                    reference = (source, await self.guard.begin(source))
            errors0 = await self._gateway_errors(variant.target)
            record = StepRecord(profile.name, step, self.clock())
            try:
                await self.backend.write(step)
                after = await self._read()
            except GatewayFailure as exc:
                self._history.append(record)
                return await self._roll_back(
                    profile, before, t0, done, reason=exc.reason,
                    why=f"setting {describe_step(step)} failed: {exc}",
                )
            if not same_split(after, step):
                self._history.append(record)
                return await self._roll_back(
                    profile, before, t0, done, reason="verify_failed",
                    why=f"set {describe_step(step)} but the {self.backend.kind} reads back {describe(after)}",
                )
            done.append(f"{step[variant.target]}%")
            if self.guard is None:
                self._history.append(record)
                continue
            if self.step_dwell_s > 0:
                await self.sleep(self.step_dwell_s)
            errors1 = await self._gateway_errors(variant.target)
            delta = errors1 - errors0 if errors0 is not None and errors1 is not None else None
            verdict = await self.guard.check(profile.name, baseline, delta, reference,
                                             saturated=urgent and saturated)
            self._history.append(StepRecord(profile.name, step, record.started_s, verdict))
            if not verdict.ok:
                return await self._roll_back(
                    profile, before, t0, done, reason="verify_failed",
                    why=f"guard: at {describe_step(step)}, {variant.model} {verdict.message}",
                )
            log.info("gateway: %s at %s: %s", variant.target, describe_step(step), verdict.message)
        how = "" if not urgent else (
            " at once (urgent: the live variant was saturated)" if saturated else " at once")
        return self._result(
            profile, t0, ok=True, reason=ok_reason, active=profile.name,
            message=f"traffic shifted onto {variant.target} ({variant.model}){how} in "
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
            if not same_split(current, before):
                await self.backend.write(target)
                current = await self._read()
                if not same_split(current, before):
                    raise GatewayFailure(
                        f"the {self.backend.kind} reads back {describe(current)}", reason="verify_failed"
                    )
                how = f"weights back to {describe(before)}"
            else:
                how = f"weights unchanged at {describe(before)}"
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

