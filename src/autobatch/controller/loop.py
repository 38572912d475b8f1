"""The sidecar's control loop: observe -> decide -> act -> record, once per interval.

One tick:

1. **observe**: ``source.poll()`` returns the window since the previous poll
   (a ``SignalError`` is counted under stage ``signals``, ``/status`` marks the
   last window stale and the policy sees no new window, so it holds);
2. **reconcile**: ask the actuator whether the profile we want is still live
   (a Triton restart drops a config override; the actuator re-applies it);
3. **decide**: the pure :func:`autobatch.policy.decide`;
4. **act**: on a switch, ``actuator.apply(profile)``; a failure keeps the old
   profile (the actuator rolled back) and starts a dwell;
5. **record**: own metrics, ``/status``, one JSON line in the decision log, and
   the state file when the pin or the profile changed.

Nothing in a tick may end the loop: every failure is counted by stage, logged
and the next tick comes (a bug of ``tick()`` itself too: stage ``tick``, with
its traceback). Nothing in a tick may hang it either: every call has
a timeout (the sources' and the actuator's own, and above them the limits
this loop puts on each), and a call that runs into one is reported to
:class:`~autobatch.controller.health.Health`, which is what ``/healthz`` and
``/readyz`` answer from. ``run_controller(..., stop=, ready=)`` lets tests and
embedders start and stop the whole thing; ``autobatch run`` wires SIGTERM to
``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from autobatch.actuators.base import ActuationResult, Actuator
from autobatch.controller.config import SidecarConfig
from autobatch.controller.files import DecisionLog, FileTimeout, SavedState, StateFile, Writer
from autobatch.controller.health import Health
from autobatch.controller.metrics import ControllerMetrics
from autobatch.errors import AutobatchError, ConfigError, SignalError
from autobatch.policy import Action, Decision, Reason, State, decide
from autobatch.signals.window import Window

__all__ = ["Controller", "WindowSource", "next_multiple", "run_controller"]

log = logging.getLogger("autobatch.controller")

FILE_TIMEOUT_S = 2.0
"""A decision-log line or a state file write that takes longer: the file system hangs."""
CLOSE_TIMEOUT_S = 5.0
"""Closing the source or the actuator at shutdown (a gRPC channel to a stopped Triton)."""


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
    last_switch_s: float | None = None
    restored: dict[str, Any] | None = None
    """What the state file of the previous run held, if this run started from it."""

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
            "last_switch_s": self.last_switch_s,
            "restored": self.restored,
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
        monotonic: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.source = source
        self.actuator = actuator
        self.clock = clock
        self.monotonic = monotonic
        self.registry = registry if registry is not None else CollectorRegistry()
        names = [p.name for p in config.profiles]
        self.metrics = ControllerMetrics(self.registry, config.model, names)
        self.metrics.describe(
            slo_p95_ms=config.policy.slo_p95_ms,
            min_dwell_s=config.policy.stability.min_dwell_s,
            max_window_age_s=config.policy.trust.max_window_age_s,
            ladder=config.profiles,
            started_s=clock(),
        )
        self.history: deque[Window] = deque(maxlen=config.history_windows)
        self.state: State | None = None
        self.status = ControllerStatus(model=config.model, started_s=clock())
        self.wake = asyncio.Event()
        self.health = Health(
            bound_s=config.liveness_bound_s,
            tick_limit_s=config.signals.timeout_s + 2 * config.actuation_limit_s + 2 * FILE_TIMEOUT_S,
            max_age_s=config.policy.trust.max_window_age_s,
            started_s=clock(),
        )
        self.metrics.health(
            config.liveness_bound_s,
            live=lambda: self.health.live(self.clock()).ok,
            ready=lambda: self.health.ready(self.clock()).ok,
        )
        self._writer = Writer(FILE_TIMEOUT_S)
        self._log: DecisionLog | None = None
        if config.decision_log is not None:
            self._log = DecisionLog(config.decision_log)
            try:
                self._log.open()  # a path that cannot be written is a ConfigError, before anything starts
            except ConfigError as exc:
                # Checked at parse time as far as permissions tell; the open is the last word
                # (root on a read-only file system), and its line names the config too.
                self._writer.close()
                raise ConfigError(f"{config.source}: {exc}", source=config.source,
                                  field="decision_log", value=str(config.decision_log)) from exc
        self._state_file = StateFile(config.state_file) if config.state_file is not None else None
        self._saved: tuple[str | None, str | None, float | None] | None = None

    # -- start-up ------------------------------------------------------------------------
    async def start(self) -> None:
        """Find the live profile and take it over; dwell before the first switch.

        A saved state (the previous run's) brings its pin back and its profile as
        the one to restore when none of the ladder is live. Otherwise, when none is
        live (or ``profiles.initial`` names another), the initial profile is applied.
        Either way the start counts as a switch: this run does not know what its
        predecessor did just before it stopped, so it waits ``min_dwell_s`` (and the
        p95 rules ``p95_settle_s``) before switching on its own.
        """
        saved = self._load_state()
        live = await self._call(self.actuator.live_profile(), "actuate", "reading the live profile")
        names = [p.name for p in self.config.profiles]
        if saved is not None:
            want = saved.active if saved.active in names else (self.config.initial_profile or names[0])
            adopt = isinstance(live, str) and live in names
        else:
            want = self.config.initial_profile or names[0]
            adopt = isinstance(live, str) and live in names and self.config.initial_profile is None
        if adopt:
            assert isinstance(live, str)
            self.state = State.initial(live)
            self._set_active(live)
        else:
            self.state = State.initial(want)
            if live == want:
                self._set_active(want)
            else:
                result = await self._apply(want, reason="initial")
                if result is not None and not result.ok and result.active in names:
                    # Refused, and the actuator put a known profile back: start from that one.
                    self.state = State.initial(result.active)
                # Otherwise (unreachable) the loop keeps wanting `want`; reconcile retries it.
        self.state = self.state.switched(self.state.active, self.clock())
        self.status.last_switch_s = self.state.last_switch_s
        if saved is not None and saved.pin is not None:
            if saved.pin in names:
                self.pin(saved.pin)
                log.info("restored the pin to %s from %s", saved.pin, self.config.state_file)
            else:
                self._error("state", AutobatchError(
                    f"the saved pin {saved.pin!r} is not in the ladder any more; dropped"))
        await self._persist()

    def _load_state(self) -> SavedState | None:
        if self._state_file is None:
            return None
        saved, problem = self._state_file.load(self.config.model)
        if problem is not None:
            self._error("state", AutobatchError(problem))
        if saved is not None:
            self.status.restored = {"active": saved.active, "pin": saved.pin,
                                    "last_switch_s": saved.last_switch_s, "saved_s": saved.saved_s}
            log.info("starting from the saved state in %s: active %s, pin %s, last switch at %s",
                     self.config.state_file, saved.active, saved.pin, saved.last_switch_s)
        return saved

    # -- one tick ------------------------------------------------------------------------
    async def tick(self) -> Decision:
        assert self.state is not None, "call start() first"
        cfg = self.config
        self.status.ticks += 1
        self.health.tick_started(self.clock())
        window = await self._poll()

        reconciled = await self._reconcile()
        pin_before = self.state.pin

        now, mono = self.clock(), self.monotonic()
        decision, self.state = decide(list(self.history), self.state, cfg.policy, now)
        self._observe_decision(decision)
        self.status.desired = self.state.active
        self.metrics.decisions.labels(cfg.model, decision.action.value, decision.reason.value).inc()
        self.status.last_decision = decision.to_dict()
        actuation: ActuationResult | None = None
        if decision.action is Action.SWITCH:
            # Saved before the reload starts: a sidecar killed mid-switch dwells after its restart.
            await self._persist(last_switch_s=now)
            actuation = await self._apply(decision.target, reason=decision.reason.value,
                                          urgent=decision.reason.direct,
                                          saturated=decision.reason.kind == "survival")
            if actuation is not None and actuation.ok:
                self.state = self.state.switched(decision.target, self.clock(), actuation.duration_s)
                self.metrics.switches.labels(cfg.model, decision.reason.value, decision.target).inc()
                self.status.switches += 1
            else:
                back = (actuation.active if actuation else None) or decision.current
                self.state = self.state.switch_failed(back, self.clock(), tried=decision.target)
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
        self.status.last_switch_s = self.state.last_switch_s
        await self._record(window, decision, actuation, reconciled, pin_before, mono)
        await self._persist()
        end = self.clock()
        if self.health.tick_ended(end):
            self.metrics.last_tick.labels(cfg.model).set(end)
        return decision

    async def _poll(self) -> Window | None:
        """One read of the source, within its limit; a failure marks the last window stale."""
        cfg = self.config
        try:
            async with asyncio.timeout(self._poll_limit_s):
                window = await self.source.poll()
        except Exception as exc:  # a source bug must not end the loop either
            timed_out = isinstance(exc, TimeoutError) or getattr(exc, "timed_out", False)
            if isinstance(exc, TimeoutError):
                exc = SignalError(f"the source did not return within {self._poll_limit_s:g} s")
            reason = getattr(exc, "reason", "unreachable") if isinstance(exc, SignalError) else "error"
            if timed_out:
                self._timed_out("signals", str(exc))
            self._error("signals", exc)
            self.metrics.stale_windows.labels(cfg.model, reason).inc()
            self.health.signals(fresh_end_s=None, error=str(exc))
            if self.status.last_window is not None:
                self.status.last_window = {
                    **self.status.last_window, "stale": True, "stale_reason": reason,
                    "stale_detail": f"the source failed after this window: {exc}",
                }
            return None
        if window is None:  # a baseline sample: no window yet, but the read worked
            self.health.signals(fresh_end_s=None, error=None)
            return None
        self.status.last_window = window.to_dict()
        self._observe(window)
        if window.stale:
            self.metrics.stale_windows.labels(cfg.model, window.stale_reason or "unknown").inc()
        else:
            self.metrics.window_fresh(window.end_s)
        self.health.signals(fresh_end_s=None if window.stale else window.end_s, error=None)
        self.history.append(window)
        return window

    @property
    def _poll_limit_s(self) -> float:
        # The source's reads run concurrently, each within signals.timeout_s, then parse
        # in a thread: this limit only catches a source that ignores its own timeouts.
        return 2 * self.config.signals.timeout_s + 10.0

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

    async def set_pin(self, name: str | None) -> None:
        """:meth:`pin`, saved to the state file before returning (what ``POST /profile`` calls)."""
        self.pin(name)
        await self._persist()

    def reopen_log(self) -> None:
        """SIGHUP: the decision log was rotated; the next line goes to a new file."""
        if self._log is not None:
            self._log.reopen()

    # -- helpers -------------------------------------------------------------------------
    async def _apply(
        self, name: str, *, reason: str, urgent: bool = False, saturated: bool = False
    ) -> ActuationResult | None:
        cfg = self.config
        profile = cfg.profile(name)
        # A direct move asks for the actuator's fast path; others keep the plain call.
        call = (self.actuator.apply(profile, urgent=True, saturated=saturated) if urgent
                else self.actuator.apply(profile))
        result = await self._call(call, "actuate", f"applying {name}")
        if result is None:
            self.metrics.actuation_failures.labels(cfg.model, "error").inc()
            return None
        if result.reason == "timeout":
            self._timed_out("actuate", result.message)
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
        result = await self._call(
            self.actuator.reconcile(self.config.profile(desired)), "reconcile", f"checking {desired}"
        )
        if result is not None and result.reason == "timeout":
            self._timed_out("reconcile", result.message)
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

    async def _call(self, aw: Awaitable[Any], stage: str, what: str) -> Any:
        """An actuator call within :attr:`SidecarConfig.actuation_limit_s`; None if it
        raised (counted under ``stage``) or outlived the limit (an actuator that ignores
        its own timeouts: reported as a timeout, so ``/healthz`` says so)."""
        limit = self.config.actuation_limit_s
        try:
            async with asyncio.timeout(limit):
                return await aw
        except TimeoutError:
            message = f"{what} did not return within {limit:g} s"
            self._timed_out(stage, message)
            self._error(stage, AutobatchError(message))
        except Exception as exc:  # an actuator bug must not end the loop
            self._error(stage, exc)
        return None

    def _timed_out(self, stage: str, message: str) -> None:
        self.health.timed_out(stage, message)
        self.metrics.timeouts.labels(self.config.model, stage).inc()

    def _set_active(self, name: str | None) -> None:
        self.status.active = name
        self.metrics.set_active(name)

    def _error(self, stage: str, exc: BaseException, *, bug: bool = False) -> None:
        self.metrics.errors.labels(self.config.model, stage).inc()
        self.status.errors[stage] = self.status.errors.get(stage, 0) + 1
        self.status.last_error = f"{stage}: {exc}"
        log.log(logging.ERROR if bug else logging.WARNING, "%s: %s", stage, exc, exc_info=bug)

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
                "device_ms_per_request": w.device_ms_per_request,
                "busy_share": w.busy_share,
                "stretch": w.stretch,
                "own_device_share": w.own_device_share,
                "others_share": w.others_share,
                "arrival_rps": None if w.stale else w.arrival_rps,
            }
        )

    def _observe_decision(self, d: Decision) -> None:
        """The policy's own figures: the forecast and each profile's capacity (a hold on
        stale or missing data carries neither, and the gauges keep their last values)."""
        sig = d.signals
        if "forecast_rps" in sig:
            self.metrics.observe_window({"forecast_rps": sig.get("forecast_rps")})
        if isinstance(sig.get("capacity_rps"), dict):
            self.metrics.observe_capacity(sig["capacity_rps"])

    async def _record(
        self,
        window: Window | None,
        decision: Decision,
        actuation: ActuationResult | None,
        reconciled: ActuationResult | None = None,
        pin: str | None = None,
        mono: float | None = None,
    ) -> None:
        if decision.switch or decision.reason not in (Reason.STEADY, Reason.NO_DATA, Reason.PINNED):
            level = logging.INFO if decision.switch else logging.DEBUG
            log.log(level, "%s %s: %s", decision.action.value, decision.reason.value, decision.message)
        if self._log is None:
            return
        line = {
            "ts": decision.at_s,
            # The monotonic clock at the decision: times between lines that a step of the
            # wall clock (NTP, a paused machine) does not bend.
            "mono": None if mono is None else round(mono, 6),
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
        if self.health.signals_error is not None:
            line["signals_error"] = self.health.signals_error
        decision_log = self._log
        await self._write("log", lambda: decision_log.write_line(line))

    async def _persist(self, *, last_switch_s: float | None = None) -> None:
        """Save the pin and the last switch when they changed (or ``last_switch_s`` is new)."""
        if self._state_file is None or self.state is None:
            return
        key = (self.status.active, self.state.pin, last_switch_s or self.state.last_switch_s)
        if key == self._saved:
            return
        saved = SavedState(self.config.model, key[0], key[1], key[2], self.clock())
        state_file = self._state_file
        if await self._write("state", lambda: state_file.save(saved)):
            self._saved = key

    async def _write(self, stage: str, fn: Callable[[], Any]) -> bool:
        try:
            await self._writer.run(fn)
            return True
        except FileTimeout as exc:
            self._timed_out(stage, str(exc))
            self._error(stage, exc)
        except (OSError, TypeError, ValueError) as exc:
            self._error(stage, exc)
        return False

    async def aclose(self) -> None:
        """Close the source, the actuator and the files; never raises, never hangs."""
        for closing in (self.source.aclose, self.actuator.aclose):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await closing()
        if self._log is not None:
            self._log.close()
        self._writer.close()


async def run_controller(
    controller: Controller,
    *,
    stop: asyncio.Event,
    ready: asyncio.Event | None = None,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
    http: Any = None,
) -> None:
    """Run ticks every ``interval_s`` until ``stop`` is set; close everything after.

    Ticks fall on multiples of the interval on the controller's clock (the wall
    clock's whole seconds at 1 s), not at the sidecar's start plus multiples: two
    sidecars started a moment apart tick in step, so a change on the device lands
    at the same point of both windows (side by side, a gateway mode started
    0.4-0.5 s after its reload twin read every co-tenant arrival half a window
    later). A slow tick does not shift the schedule: the next one starts at the
    next multiple (ticks that fell behind are skipped, not bunched).
    """
    interval = controller.config.interval_s
    try:
        await controller.start()
        if ready is not None:
            ready.set()
        clock = controller.clock
        next_at = next_multiple(clock(), interval)
        while not stop.is_set():
            delay = max(0.0, next_at - clock())
            waiter = asyncio.ensure_future(_first(stop, controller.wake, delay, sleep))
            await waiter
            if stop.is_set():
                break
            controller.wake.clear()
            try:
                await controller.tick()
            except Exception as exc:  # a bug of tick() itself must not end the sidecar either
                controller.health.tick_ended(controller.clock(), failed=True)
                controller._error("tick", exc, bug=True)
            now = clock()
            while next_at <= now:
                next_at += interval
    finally:
        await controller.aclose()


def next_multiple(t: float, interval: float) -> float:
    """The first multiple of ``interval`` after ``t``: where a tick started at ``t`` waits to."""
    return (math.floor(t / interval) + 1) * interval


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
