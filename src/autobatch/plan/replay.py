"""Replay recorded windows through the sidecar's policy: what would it have decided, and why?

A trace is JSON lines of either kind the project writes:

* ``autobatch watch --json``: one ``Window.to_dict()`` per line;
* the sidecar's decision log: ``{"ts", "window", "decision", "actuation", "pin",
  "reconcile", ...}`` per tick (``window`` is null for a tick whose scrape failed).

Each tick goes through :func:`autobatch.policy.decide` and the same ``State``
transitions the controller makes (``switched`` after a successful apply,
``switch_failed`` after a failed one), so a decision log replayed with the
config that produced it gives back the same decisions: that is tested. Where
the replayed policy decides differently from the recording (another config),
its own switches are assumed to succeed at the moment they are decided.

Pure: lines in, steps out. Reading the file is the caller's job.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from autobatch.errors import ConfigError, short_repr
from autobatch.policy import Decision, PolicySettings, State, decide
from autobatch.signals.window import Window

__all__ = ["ReplayStep", "TraceTick", "parse_trace", "replay"]


@dataclass(frozen=True)
class TraceTick:
    """One tick of a trace."""

    now_s: float
    window: Window | None
    recorded: Mapping[str, Any] | None = None
    """The recorded decision (decision logs only)."""
    actuation: Mapping[str, Any] | None = None
    pin: str | None = None
    reconcile: Mapping[str, Any] | None = None
    active: str | None = None
    """The profile live when the tick was logged (decision logs only)."""
    state_after: Mapping[str, Any] | None = None
    """The controller's state after the tick (decision logs only): when a switch landed."""


@dataclass(frozen=True)
class ReplayStep:
    tick: TraceTick
    decision: Decision
    active_after: str

    @property
    def agrees(self) -> bool | None:
        """Whether the replay decided what the recording did (None: nothing recorded)."""
        rec = self.tick.recorded
        if rec is None:
            return None
        d = self.decision
        return (rec.get("action"), rec.get("target"), rec.get("reason")) == (
            d.action.value,
            d.target,
            d.reason.value,
        )


def parse_trace(lines: Iterable[str], source: str = "trace") -> list[TraceTick]:
    """Parse trace lines; a bad line is a one-line ``ConfigError`` naming its number."""
    ticks: list[TraceTick] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}: line {n}: not JSON ({exc.msg})", source=source) from exc
        if not isinstance(row, dict):
            raise ConfigError(f"{source}: line {n}: expected a JSON object", source=source)
        try:
            if "decision" in row:  # a decision log line
                ticks.append(_decision_tick(row))
            else:  # a watch --json line
                w = Window.from_dict(row)
                ticks.append(TraceTick(now_s=w.end_s, window=w))
        except KeyError as exc:
            raise ConfigError(
                f"{source}: line {n}: not a window or a decision-log line (no {exc.args[0]})", source=source
            ) from exc
        except ValueError as exc:  # FIELD = VALUE: what is allowed
            raise ConfigError(f"{source}: line {n}: {exc}", source=source) from exc
    if not ticks:
        raise ConfigError(f"{source}: the trace holds no lines", source=source)
    return ticks


def _decision_tick(row: Mapping[str, Any]) -> TraceTick:
    """One decision-log line; a field of the wrong type is a ``ValueError`` naming it."""
    decision = _object(row, "decision") or {}
    w = _object(row, "window")
    actuation = _object(row, "actuation")
    reconcile = _object(row, "reconcile")
    state_after = _object(row, "state_after")
    for part, name, keys in (
        (row, "", ("pin", "active")),
        (decision, "decision.", ("action", "current", "target", "reason")),
        (actuation or {}, "actuation.", ("active",)),
        (reconcile or {}, "reconcile.", ("profile",)),
    ):
        for key in keys:
            v = part.get(key)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{name}{key} = {short_repr(v)}: must be a string or null")
    for part, name, key in ((actuation or {}, "actuation.", "duration_s"),
                            (reconcile or {}, "reconcile.", "duration_s"),
                            (state_after or {}, "state_after.", "last_switch_s")):
        if part.get(key) is not None:
            _finite(part[key], f"{name}{key}")
    if decision.get("at_s") is not None:
        now_s = _finite(decision["at_s"], "decision.at_s")
    elif row.get("ts") is None:
        raise KeyError("decision.at_s or ts")
    else:
        now_s = _finite(row["ts"], "ts")
    return TraceTick(
        now_s=now_s,
        window=Window.from_dict(w, "window") if w else None,
        recorded=decision,
        actuation=actuation,
        pin=row.get("pin"),
        reconcile=reconcile,
        active=row.get("active"),
        state_after=state_after,
    )


def _object(row: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    v = row.get(key)
    if v is not None and not isinstance(v, dict):
        raise ValueError(f"{key} = {short_repr(v)}: must be a JSON object or null")
    return v


def _finite(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{field} = {short_repr(v)}: must be a finite number")
    return float(v)


def replay(
    ticks: Iterable[TraceTick],
    settings: PolicySettings,
    *,
    initial: str | None = None,
    history_windows: int = 30,
) -> list[ReplayStep]:
    """Feed ``ticks`` through ``decide``, as the controller's loop does."""
    names = [p.name for p in settings.ladder]
    ticks = list(ticks)
    start = initial
    if start is None and ticks:
        # A line's ``active`` is after its decision: where the first tick switched, the
        # profile it started from is its decision's ``current``.
        first = (ticks[0].recorded or {}).get("current")
        start = first if first in names else ticks[0].active if ticks[0].active in names else None
    if start is None:
        start = names[0]
    if start not in names:
        raise ConfigError(f"initial profile {start!r} is not in the ladder {names}")
    state = State.initial(start)
    before = _last_switch_before(ticks[0]) if ticks else None
    if before is not None:
        # The sidecar's start counts as a switch (it dwells before its first own one):
        # the first line's state, when that tick changed nothing, says when it was.
        state = state.switched(start, before)
    history: deque[Window] = deque(maxlen=history_windows)
    steps: list[ReplayStep] = []
    for tick in ticks:
        if tick.window is not None:
            history.append(tick.window)
        rec = tick.reconcile
        if rec and rec.get("ok") and rec.get("profile") == state.active:
            state = state.switched(state.active, tick.now_s)
        if tick.pin != state.pin and (tick.pin is None or tick.pin in names):
            state = state.pinned(tick.pin)
        decision, state = decide(list(history), state, settings, tick.now_s)
        if decision.switch:
            state = _after_switch(state, decision, tick)
        steps.append(ReplayStep(tick, decision, state.active))
    return steps


def _last_switch_before(tick: TraceTick) -> float | None:
    """The last switch before a decision-log tick that neither switched nor re-applied."""
    if (tick.recorded or {}).get("action") == "switch" or (tick.reconcile or {}).get("ok"):
        return None
    last = (tick.state_after or {}).get("last_switch_s")
    return float(last) if isinstance(last, (int, float)) and not isinstance(last, bool) else None


def _after_switch(state: State, decision: Decision, tick: TraceTick) -> State:
    rec = tick.recorded
    act = tick.actuation
    same = (
        rec is not None
        and rec.get("action") == "switch"
        and rec.get("target") == decision.target
        and act is not None
    )
    if not same:
        return state.switched(decision.target, decision.at_s)
    assert act is not None
    # The controller records the switch when the actuator returns; the log has it.
    landed = (tick.state_after or {}).get("last_switch_s")
    done_s = float(landed) if landed is not None else decision.at_s + float(act.get("duration_s") or 0)
    if act.get("ok"):
        took = act.get("duration_s")
        return state.switched(decision.target, done_s, None if took is None else float(took))
    back = act.get("active") or decision.current
    state = state.switch_failed(back, done_s, tried=decision.target)
    if decision.reason.value == "pin":
        state = state.pinned(None)
    return state
