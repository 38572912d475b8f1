"""The default policy: keep p95 under the SLO, and within it spend the least device time.

``decide(history, state, settings, now) -> (Decision, State)`` is pure (no clock,
no I/O, no logging): tested with tables, and replayed offline (``autobatch
replay``) through the same code the sidecar runs. After the Kubernetes HPA's
pipeline, one decision runs named stages, each a small function testable alone:

* :func:`pin`: a manual pin overrides everything;
* :func:`guard`: hold on missing, stale, old or already counted data;
  :func:`settle`: a window overlapping the last switch is ignored, but for an overload;
* :func:`~autobatch.policy.rules.recommend`: the first rule of the table that
  answers names a target, with a reason and a message;
* the gates of :data:`GATES`, in order: :func:`confirm` (N windows in a row),
  :func:`dwell` (time since the last switch), :func:`stabilise` (recent
  recommendations agree), :func:`busy_veto` (no reload on saturated instances);
* :func:`switch`: the decision, and what the state remembers of it.

Every decision carries a :class:`~autobatch.policy.types.Reason` (a metric label)
and a human message. Why each rule and stage is what it is: docs/policy.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autobatch.policy.context import EPS, Context, build_context, window_signals
from autobatch.policy.rules import overload, recommend
from autobatch.policy.settings import PolicySettings
from autobatch.policy.types import Action, Decision, Observation, Reason, Recommendation, State

__all__ = ["GATES", "Hold", "Move", "busy_veto", "confirm", "decide", "dwell", "guard", "pin", "settle",
           "stabilise", "switch"]


@dataclass(frozen=True)
class Hold:
    """A stage's answer when it holds: why, in a reason and a message."""

    reason: Reason
    message: str


@dataclass(frozen=True)
class Move:
    """A recommended switch on its way through the gates."""

    ctx: Context
    rec: Recommendation
    state: State
    """The state with this window counted: its recommendation recorded, the streak counted."""

    @property
    def target(self) -> str:
        return self.ctx.ladder[self.rec.target].name

    @property
    def toward_latency(self) -> bool:
        return self.rec.target < self.ctx.current

    @property
    def survival(self) -> bool:
        return self.rec.reason.kind == "survival"

    def signals(self) -> dict[str, Any]:
        return {**self.ctx.signals(), **self.rec.notes}


def decide(
    history: Sequence[Observation],
    state: State,
    settings: PolicySettings,
    now: float,
) -> tuple[Decision, State]:
    """One control step. ``history`` is oldest first; only its last window drives the step
    (the forecast and the live capacity also read the windows before it)."""
    pinned = pin(state, now)
    if pinned is not None:
        return pinned
    held = guard(history, state, settings, now)
    if held is not None:
        sig = window_signals(history[-1], settings.ladder[settings.index(state.active)]) if history else {}
        return _hold(state, held, now, sig), state
    w = history[-1]
    if state.last_switch_s is not None and w.start_s < state.last_switch_s + settings.trust.settle_s - EPS:
        return settle(history, state, settings, now)
    ctx = build_context(history, state, settings, now)
    rec = recommend(ctx)
    state = _count(ctx, rec)
    if rec.target == ctx.current:
        return _hold(state, Hold(rec.reason, rec.message), now, {**ctx.signals(), **rec.notes}), replace(
            state, streak_target=None, streak=0)
    move = Move(ctx, rec, state)
    for gate in GATES:
        stop = gate(move)
        if stop is not None:
            sig = {**move.signals(), "wants": move.target, "because": rec.reason.value}
            return _hold(move.state, stop, now, sig), move.state
    return switch(move)


def pin(state: State, now: float) -> tuple[Decision, State] | None:
    """A manual pin: hold on the pinned profile, or switch to it (dwell and data aside)."""
    if state.pin is None:
        return None
    if state.pin == state.active:
        return _hold(state, Hold(Reason.PINNED, f"pinned to {state.pin}"), now, {}), state
    d = Decision(Action.SWITCH, state.active, state.pin, Reason.PIN,
                 f"manual pin: {state.active} -> {state.pin}", now, {})
    return d, replace(state, efficiency_up_rps=None, relief_from=None)


def guard(history: Sequence[Observation], state: State, settings: PolicySettings, now: float) -> Hold | None:
    """Hold on missing, stale or old data, and on a window already counted."""
    if not history:
        return Hold(Reason.NO_DATA, "no window yet")
    w = history[-1]
    if w.stale:
        return Hold(Reason.STALE, f"window is stale ({w.stale_reason})")
    max_age = settings.trust.max_window_age_s
    if now - w.end_s > max_age + EPS:
        return Hold(Reason.STALE, f"latest window ended {now - w.end_s:.1f} s ago (> {max_age:g} s)")
    if state.last_window_end_s is not None and w.end_s <= state.last_window_end_s + EPS:
        # The scraper did not advance: nothing new to count.
        return Hold(Reason.NO_DATA, "no new window since the last decision")
    return None


def settle(history: Sequence[Observation], state: State, settings: PolicySettings,
           now: float) -> tuple[Decision, State]:
    """A window overlapping the last switch: what the profile did in it is not the new
    profile's (a reloaded copy warming, a shift half made), so it is ignored, but for an
    overload: arrivals do not depend on the profile. Nothing is learned from it."""
    w = history[-1]
    held = replace(state, last_window_end_s=w.end_s)
    sig = window_signals(w, settings.ladder[settings.index(state.active)])
    if not state.last_switch_failed:
        ctx = build_context(history, state, settings, now, learn=False)
        rec = overload(ctx)
        sig = {**ctx.signals(), **(rec.notes if rec else {})}
        if rec is not None and rec.reason is Reason.OVERLOAD and rec.target > ctx.current:
            d = Decision(Action.SWITCH, state.active, ctx.ladder[rec.target].name, rec.reason,
                         f"{rec.message} (in a window overlapping the last switch)", now, sig)
            return d, replace(held, efficiency_up_rps=None, relief_from=None)
    return _hold(state, Hold(Reason.SETTLING, "window overlaps the last switch; ignored"), now, sig), held


def confirm(move: Move) -> Hold | None:
    """Hold until ``stability.confirmations`` windows in a row recommend the target; survival acts on
    one (a backlog grows meanwhile), but a ``shared`` move where nothing changed on
    ``device.steady_windows`` (:func:`steady`)."""
    needed = move.ctx.settings.stability.confirmations
    if move.survival:
        steady_ = move.rec.reason is Reason.SHARED and steady(move.ctx)
        needed = move.ctx.settings.device.steady_windows if steady_ else 1
    if move.state.streak >= needed:
        return None
    return Hold(Reason.CONFIRMING, f"{move.rec.message}; confirming ({move.state.streak}/{needed})")


def steady(ctx: Context) -> bool:
    """Nothing changed over the last ``device.change_windows`` windows (0: ``steady_windows``):
    others' share of the device rose by less than ``device.change_share`` and the arrivals
    moved by less than ``device.change_rate`` of the higher rate, between this window and the
    one that many back (fresh, both). False with ``steady_windows`` 1, or without those
    windows."""
    d = ctx.settings.device
    back = d.change_windows or d.steady_windows
    if d.steady_windows <= 1 or len(ctx.history) <= back:
        return False
    now, then = ctx.history[-1], ctx.history[-1 - back]
    if then.stale or now.others_share is None or then.others_share is None:
        return False
    if now.others_share - then.others_share >= d.change_share - EPS:
        return False
    high = max(now.arrival_rps, then.arrival_rps)
    return high <= 0 or abs(now.arrival_rps - then.arrival_rps) < d.change_rate * high - EPS


def dwell(move: Move) -> Hold | None:
    """Hold within ``stability.min_dwell_s`` of the last switch: noise must not flap the profile.
    Survival moves are exempt (unless that switch failed), and so is a step that undoes an
    efficiency move whose load is gone (:func:`_undoes_efficiency`) or, with ``device.release``,
    a ``shared`` move whose co-tenants are gone (:func:`_undoes_shared`)."""
    st, s = move.state, move.ctx.settings
    if (move.survival and not st.last_switch_failed) or _undoes_efficiency(move) or _undoes_shared(move) \
            or st.last_switch_s is None:
        return None
    elapsed = move.ctx.now_s - st.last_switch_s
    if elapsed >= s.stability.min_dwell_s - EPS:
        return None
    return Hold(Reason.DWELL, f"{move.rec.message}; dwell: {s.stability.min_dwell_s - elapsed:.0f} s left")


def stabilise(move: Move) -> Hold | None:
    """Hold an efficiency step toward latency (self-inflicted wait, low load) while a
    recommendation of the last ``stability.stabilization_s`` wanted more, but for those made at a load
    this one has fallen below ``stability.stabilization_drop`` of (as the HPA stabilizes scale-down)."""
    ctx, s = move.ctx, move.ctx.settings
    if not move.toward_latency or move.rec.reason not in (Reason.SELF_INFLICTED_WAIT, Reason.LOW_LOAD):
        return None
    vetoes = [(i, rate) for _, i, rate in move.state.recommendations
              if i > move.rec.target and rate * s.stability.stabilization_drop <= ctx.demand_rps + EPS]
    if not vetoes:
        return None
    most, at = max(vetoes)
    return Hold(Reason.STABILIZING, (
        f"{move.rec.message}; a recommendation for {ctx.ladder[most].name} in the last "
        f"{s.stability.stabilization_s:g} s (at {at:.0f}/s) vetoes it"))


def busy_veto(move: Move) -> Hold | None:
    """Hold an optional step toward latency while the instances are busier than
    ``efficiency.max_busy`` (or the demand over ``efficiency.max_load`` of the live capacity)
    and the queue is a backlog: the step shortens no wait, and a reload's new copy loads on
    the hardware that serves the backlog."""
    ctx = move.ctx
    full = ctx.no_room()
    if not (move.toward_latency and move.rec.reason.kind == "efficiency" and full is not None
            and ctx.queue_is_backlog):
        return None
    return Hold(Reason.SATURATED, (
        f"{move.rec.message}; but the queue ({ctx.window.mean_queue_ms:.1f} ms) is a backlog and "
        f"{full}: a reload now takes them for seconds and shortens no wait"))


GATES: tuple[Callable[[Move], Hold | None], ...] = (confirm, dwell, stabilise, busy_veto)
"""What a recommended switch must pass, in order; the first that holds answers."""


def switch(move: Move) -> tuple[Decision, State]:
    """The switch, and what the state keeps of it: the rate an efficiency (or relief) step
    up was made at, where a relief move came from, and a relief that made things worse."""
    ctx, rec, st = move.ctx, move.rec, move.state
    up = rec.reason in (Reason.EFFICIENCY, Reason.RELIEF) and rec.target > ctx.current
    worse = st.relief_worse
    if rec.reason is Reason.SLO_BREACH and st.relief_from is not None:
        # The profile a relief move reached made the breach worse: not again near this rate.
        worse = (st.active, ctx.demand_rps)
    p95 = ctx.window.p95_ms
    relief_from = (st.active, p95) if rec.reason is Reason.RELIEF and p95 is not None else None
    d = Decision(Action.SWITCH, st.active, move.target, rec.reason, rec.message, ctx.now_s, move.signals())
    return d, replace(st, efficiency_up_rps=ctx.demand_rps if up else None, relief_from=relief_from,
                      relief_worse=worse, shared_from=st.active if rec.reason is Reason.SHARED else None)


def _count(ctx: Context, rec: Recommendation) -> State:
    """The state with the window counted: its recommendation recorded (with the rate it
    counts as made at, for :func:`stabilise`) and the streak toward its target counted."""
    s, st = ctx.settings, ctx.state
    recs = tuple(r for r in st.recommendations if ctx.now_s - r[0] <= s.stability.stabilization_s)
    st = replace(st, last_window_end_s=ctx.window.end_s,
                 recommendations=(*recs, (ctx.now_s, rec.target, ctx.made_at_rps)))
    if rec.target == ctx.current:
        return st
    target = ctx.ladder[rec.target].name
    return replace(st, streak_target=target, streak=st.streak + 1 if st.streak_target == target else 1)


def _undoes_efficiency(move: Move) -> bool:
    """A step toward latency that costs nothing (``Reason.direct``) after an efficiency move
    whose load has fallen to ``stability.stabilization_drop`` of the rate it was made at: a load that
    halved is not noise, and the move back up waits its confirmations and the dwell."""
    st, s = move.state, move.ctx.settings
    return (move.toward_latency and move.rec.reason.direct and not st.last_switch_failed
            and st.efficiency_up_rps is not None
            and move.ctx.made_at_rps <= s.stability.stabilization_drop * st.efficiency_up_rps + EPS)


def _undoes_shared(move: Move) -> bool:
    """With ``device.release``: an efficiency step toward throughput back to the profile a
    ``shared`` move left, in a window where others use under ``device.shared_min`` of the
    device (read, not unknown): the co-tenants that caused the move have left."""
    st, ctx = move.state, move.ctx
    others = ctx.window.others_share
    return (ctx.settings.device.release and not move.toward_latency and not st.last_switch_failed
            and move.rec.reason.kind == "efficiency" and st.shared_from == move.target
            and others is not None and others < ctx.settings.device.shared_min - EPS)


def _hold(state: State, hold: Hold, now: float, sig: Mapping[str, Any]) -> Decision:
    return Decision(Action.HOLD, state.active, state.active, hold.reason, hold.message, now, dict(sig))
