"""The sidecar's control loop: observe -> decide -> act -> record, once per interval.

One tick:

1. **observe**: ``source.poll()`` returns the window since the previous poll
   (a ``SignalError`` is counted under stage ``signals`` and the policy sees no
   new window, so it holds);
2. **reconcile**: ask the actuator whether the profile we want is still live
   (a Triton restart drops a config override; the actuator re-applies it);
3. **decide**: the pure :func:`autobatch.policy.decide`;
4. **act**: on a switch, ``actuator.apply(profile)``; a failure keeps the old
   profile (the actuator rolled back) and starts a dwell;
5. **record**: own metrics, ``/status``, one JSON line in the decision log.

Nothing in a tick may end the loop: every failure is counted by stage, logged
and the next tick comes. ``run_controller(..., stop=, ready=)`` lets tests and
embedders start and stop the whole thing; ``autobatch run`` wires SIGTERM to
``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from autobatch.actuators.base import ActuationResult, Actuator
from autobatch.controller.config import SidecarConfig
from autobatch.controller.metrics import ControllerMetrics
from autobatch.errors import AutobatchError, SignalError
from autobatch.policy import Action, Decision, Reason, State, decide
from autobatch.signals.window import Window

__all__ = ["Controller", "WindowSource", "run_controller"]

log = logging.getLogger("autobatch.controller")


class WindowSource(Protocol):
    async def poll(self) -> Window:
        """The window since the previous poll (the first poll may return a stale one)."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class ControllerStatus:
    """What ``GET /status`` shows. Mutable on purpose: the loop owns it."""

    model: str
    started_s: float
    active: str | None = None
    desired: str | None = None
    pinned: str | None = None
    last_window: dict[str, Any] | None = None
    last_decision: dict[str, Any] | None = None
    last_actuation: dict[str, Any] | None = None
    switches: int = 0
    ticks: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "started_s": self.started_s,
            "active_profile": self.active,
            "desired_profile": self.desired,
            "pinned": self.pinned,
            "ticks": self.ticks,
            "switches": self.switches,
            "errors": dict(self.errors),
            "last_error": self.last_error,
            "last_window": self.last_window,
            "last_decision": self.last_decision,
            "last_actuation": self.last_actuation,
        }


def _result_dict(r: ActuationResult) -> dict[str, Any]:
    return {
        "profile": r.profile,
        "ok": r.ok,
        "reason": r.reason,
        "message": r.message,
        "duration_s": round(r.duration_s, 4),
        "active": r.active,
        "rolled_back": r.rolled_back,
    }


class Controller:
    """The loop's state and one :meth:`tick`. Build with injected source, actuator, clock."""

    def __init__(
        self,
        config: SidecarConfig,
        source: WindowSource,
        actuator: Actuator,
        *,
        clock: Callable[[], float] = time.time,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.source = source
        self.actuator = actuator
        self.clock = clock
        self.registry = registry if registry is not None else CollectorRegistry()
        names = [p.name for p in config.profiles]
        self.metrics = ControllerMetrics(self.registry, config.model, names)
        self.metrics.describe(
            slo_p95_ms=config.policy.slo_p95_ms,
            min_dwell_s=config.policy.min_dwell_s,
            max_window_age_s=config.policy.max_window_age_s,
            ladder=config.profiles,
            started_s=clock(),
        )
        self.history: deque[Window] = deque(maxlen=config.history_windows)
        self.state: State | None = None
        self.status = ControllerStatus(model=config.model, started_s=clock())
        self.wake = asyncio.Event()
        self._log_file: Any = None
        if config.decision_log is not None:
            config.decision_log.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(config.decision_log, "a", encoding="utf-8")  # noqa: SIM115

    # -- start-up ------------------------------------------------------------------------
    async def start(self) -> None:
        """Find the live profile; if none of the ladder is live, apply the initial one."""
        live = await self._safe(self.actuator.live_profile(), "actuate")
        names = [p.name for p in self.config.profiles]
        want = self.config.initial_profile or names[0]
        if isinstance(live, str) and live in names and self.config.initial_profile is None:
            self.state = State.initial(live)
            self._set_active(live)
            return
        self.state = State.initial(want)
        if live == want:
            self._set_active(want)
            return
        result = await self._apply(want, reason="initial")
        if result is not None and result.ok:
            self.state = self.state.switched(want, self.clock())
        elif result is not None and result.active in names:
            # Refused, and the actuator put a known profile back: start from that one.
            self.state = self.state.switch_failed(result.active, self.clock())
        # Otherwise (unreachable) the loop keeps wanting `want`; reconcile retries it.

    # -- one tick ------------------------------------------------------------------------
    async def tick(self) -> Decision:
        assert self.state is not None, "call start() first"
        cfg = self.config
        self.status.ticks += 1
        window: Window | None = None
        try:
            window = await self.source.poll()
        except SignalError as exc:
            self._error("signals", exc)
        except Exception as exc:  # a source bug must not end the loop
            self._error("signals", exc)
        if window is not None:
            self.status.last_window = window.to_dict()
            self._observe(window)
            if window.stale:
                self.metrics.stale_windows.labels(cfg.model, window.stale_reason or "unknown").inc()
            else:
                self.metrics.window_fresh(window.end_s)
            self.history.append(window)

        reconciled = await self._reconcile()
        pin_before = self.state.pin

        now = self.clock()
        decision, self.state = decide(list(self.history), self.state, cfg.policy, now)
        self.status.desired = self.state.active
        self.metrics.decisions.labels(cfg.model, decision.action.value, decision.reason.value).inc()
        self.status.last_decision = decision.to_dict()
        actuation: ActuationResult | None = None
        if decision.action is Action.SWITCH:
            actuation = await self._apply(decision.target, reason=decision.reason.value)
            if actuation is not None and actuation.ok:
                self.state = self.state.switched(decision.target, self.clock())
                self.metrics.switches.labels(cfg.model, decision.reason.value, decision.target).inc()
                self.status.switches += 1
            else:
                back = (actuation.active if actuation else None) or decision.current
                self.state = self.state.switch_failed(back, self.clock())
                self._set_active(back)
                if decision.reason is Reason.PIN:
                    # A pin the server refuses is dropped, not retried every tick;
                    # /status and the error counter say what happened.
                    self.pin(None)
                    self.status.last_error = (
                        f"actuate: pin to {decision.target} failed and was dropped: "
                        f"{actuation.message if actuation else 'see the log'}"
                    )
            self.status.desired = self.state.active
        self._record(window, decision, actuation, reconciled, pin_before)
        return decision

    # -- pin -----------------------------------------------------------------------------
    def pin(self, name: str | None) -> None:
        """Pin a profile (None unpins). Applied on the next tick, which is woken now."""
        if name is not None and name not in [p.name for p in self.config.profiles]:
            raise KeyError(name)
        assert self.state is not None
        self.state = self.state.pinned(name)
        self.status.pinned = name
        self.metrics.pinned.labels(self.config.model).set(1 if name else 0)
        self.wake.set()

    # -- helpers -------------------------------------------------------------------------
    async def _apply(self, name: str, *, reason: str) -> ActuationResult | None:
        cfg = self.config
        profile = cfg.profile(name)
        try:
            result = await self.actuator.apply(profile)
        except AutobatchError as exc:
            self._error("actuate", exc)
            self.metrics.actuation_failures.labels(cfg.model, "error").inc()
            return None
        except Exception as exc:  # an actuator bug must not end the loop
            self._error("actuate", exc)
            self.metrics.actuation_failures.labels(cfg.model, "error").inc()
            return None
        outcome = "ok" if result.ok else "failed"
        self.metrics.actuation_seconds.labels(cfg.model, self.actuator.name, outcome).observe(
            result.duration_s
        )
        self.status.last_actuation = _result_dict(result)
        if result.ok:
            self._set_active(name)
            log.info("applied %s (%s) in %.2f s", name, reason, result.duration_s)
        else:
            self.metrics.actuation_failures.labels(cfg.model, result.reason).inc()
            self._error("actuate", AutobatchError(f"applying {name} failed: {result.message}"))
            if result.active:
                self._set_active(result.active)
        return result

    async def _reconcile(self) -> ActuationResult | None:
        assert self.state is not None
        desired = self.state.active
        self.status.desired = desired
        try:
            result = await self.actuator.reconcile(self.config.profile(desired))
        except Exception as exc:
            self._error("reconcile", exc)
            return None
        if result is None:
            if self.status.active != desired and desired == self.state.active:
                self._set_active(desired)
            return None
        self.status.last_actuation = _result_dict(result)
        self.metrics.actuation_seconds.labels(
            self.config.model, self.actuator.name, "ok" if result.ok else "failed"
        ).observe(result.duration_s)
        if result.ok:
            log.warning("re-applied %s: %s", desired, result.message)
            # Counters reset with the restart: treat it as a switch, so the policy
            # ignores the windows around it and dwells.
            self.state = self.state.switched(desired, self.clock())
            self._set_active(desired)
        else:
            self.metrics.actuation_failures.labels(self.config.model, result.reason).inc()
            self._error("reconcile", AutobatchError(f"re-applying {desired} failed: {result.message}"))
        return result

    async def _safe(self, aw: Awaitable[Any], stage: str) -> Any:
        try:
            return await aw
        except Exception as exc:
            self._error(stage, exc)
            return None

    def _set_active(self, name: str | None) -> None:
        self.status.active = name
        self.metrics.set_active(name)

    def _error(self, stage: str, exc: BaseException) -> None:
        self.metrics.errors.labels(self.config.model, stage).inc()
        self.status.errors[stage] = self.status.errors.get(stage, 0) + 1
        self.status.last_error = f"{stage}: {exc}"
        log.warning("%s: %s", stage, exc)

    def _observe(self, w: Window) -> None:
        self.metrics.observe_window(
            {
                "request_rps": w.request_rps,
                "inference_rps": w.inference_rps,
                "failure_rps": w.failures_rps,
                "mean_queue_ms": w.mean_queue_ms,
                "mean_compute_ms": w.mean_compute_ms,
                "mean_batch_size": w.mean_batch_size,
                "pending_requests": w.pending_requests,
                "p95_ms": w.p95_ms,
                "p99_ms": w.p99_ms,
                "utilization": w.utilization,
            }
        )

    def _record(
        self,
        window: Window | None,
        decision: Decision,
        actuation: ActuationResult | None,
        reconciled: ActuationResult | None = None,
        pin: str | None = None,
    ) -> None:
        if decision.switch or decision.reason not in (Reason.STEADY, Reason.NO_DATA, Reason.PINNED):
            level = logging.INFO if decision.switch else logging.DEBUG
            log.log(level, "%s %s: %s", decision.action.value, decision.reason.value, decision.message)
        if self._log_file is None:
            return
        line = {
            "ts": decision.at_s,
            "model": self.config.model,
            "active": self.status.active,
            "window": window.to_dict() if window is not None else None,
            "decision": decision.to_dict(),
            "actuation": _result_dict(actuation) if actuation else None,
            # Enough to replay the tick through the same policy: the pin in force and
            # any re-apply after a restart (both change the policy's state).
            "pin": pin,
            "reconcile": _result_dict(reconciled) if reconciled else None,
            "state_after": {"active": self.state.active if self.state else None,
                            "last_switch_s": self.state.last_switch_s if self.state else None},
        }
        try:
            self._log_file.write(json.dumps(line) + "\n")
            self._log_file.flush()
        except (OSError, TypeError, ValueError) as exc:
            self._error("log", exc)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.source.aclose()
        with contextlib.suppress(Exception):
            await self.actuator.aclose()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


async def run_controller(
    controller: Controller,
    *,
    stop: asyncio.Event,
    ready: asyncio.Event | None = None,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
    http: Any = None,
) -> None:
    """Run ticks every ``interval_s`` until ``stop`` is set; close everything after.

    A slow tick does not shift the schedule: the next one starts at the next
    multiple of the interval (ticks that fell behind are skipped, not bunched).
    """
    interval = controller.config.interval_s
    try:
        await controller.start()
        if ready is not None:
            ready.set()
        clock = controller.clock
        next_at = clock() + interval
        while not stop.is_set():
            delay = max(0.0, next_at - clock())
            waiter = asyncio.ensure_future(_first(stop, controller.wake, delay, sleep))
            await waiter
            if stop.is_set():
                break
            controller.wake.clear()
            await controller.tick()
            now = clock()
            while next_at <= now:
                next_at += interval
    finally:
        await controller.aclose()


async def _first(
    stop: asyncio.Event,
    wake: asyncio.Event,
    delay: float,
    sleep: Callable[[float], Awaitable[Any]] | None,
) -> None:
    """Return after ``delay`` or as soon as ``stop`` or ``wake`` is set."""
    tasks = [
        asyncio.ensure_future(stop.wait()),
        asyncio.ensure_future(wake.wait()),
        asyncio.ensure_future((sleep or asyncio.sleep)(delay)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def read_decision_log(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
