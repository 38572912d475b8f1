"""The default policy: keep p95 under the SLO, and within it spend the least device time.

``decide(history, state, settings, now) -> (Decision, State)`` is a pure
function: it reads no clock, does no I/O and logs nothing, so it is tested
with tables and replayed offline (``autobatch replay``) through the very same
code the sidecar runs.

**The objective.** Keep p95 under the SLO, with headroom; within it, minimise
device time per request (bigger batches formed with a wait serve the same
requests with a third to a half less device time at moderate and high load);
at low load, where device time barely differs between profiles, take the
lowest latency. Triton's default (no preferred sizes, no delay) is a fine
latency profile; the controller earns its place by the device time it saves.

The pipeline, after the Kubernetes HPA controller: **guard** (pin, data,
settling) -> **recommend** a target from the latest window -> **confirm** it
over N windows -> **dwell** -> **stabilize** moves toward latency -> act. Every
decision carries a machine :class:`Reason` and a human message, and every
reason has a :attr:`Reason.kind`:

* **survival** (``overload``, ``forecast``, ``saturation``): the profile cannot
  carry the load, now or within the reaction time. One window decides (no
  confirmations, no dwell): a backlog grows every second it waits. The target
  is the most latency-oriented profile that carries the load with
  ``capacity_margin``, or the highest-capacity one.
* **protective** (``failures``, ``slo_breach``, ``relief``): rejected requests, or p95
  over the SLO without saturation: a step toward latency, confirmed; at the most
  latency-oriented profile, where none is left, a step toward a profile that spends
  ``min_saving`` less device time (``relief``), held there while p95 reads no worse than
  it did below (``relieved``).
* **efficiency** (``efficiency``, ``self_inflicted_wait``, ``low_load``, ``no_gain``): a step
  toward throughput that saves at least ``min_saving`` of the device time per
  request with p95 still inside ``headroom`` x SLO; a step toward latency when
  the wait is self-inflicted, or when the lower profile costs at most
  ``latency_tolerance`` more device time (at low load they all cost the same;
  under load, once seen to cost the same, ``no_gain``). Confirmed, dwelled, and
  stabilized downward (``no_gain`` is not: requests wait for nothing meanwhile). A
  step back that undoes an efficiency move after its load has gone (fallen to
  ``stabilization_drop`` of the rate the move was made at) does not wait out the
  dwell.

Why the survival rules look at arrivals, not latency: a slow p95 has two
causes that want opposite moves. *Self-inflicted waiting* (queue near the max
delay, batches under the preferred size) wants a more latency-oriented
profile; *saturation* (arrivals above capacity, the backlog growing) wants
more capacity, and backing off would make it worse. Arrivals are completions
plus the backlog's growth (Triton counts a request only when it completes).

Capacity is the batch curve's (configured ``curve``, overlaid with live
``batch_stats`` points), scaled by :func:`~autobatch.policy.capacity.live_factor`
so it matches this machine under load. The forecast is Holt's linear method
over the last windows' arrival rates (:mod:`autobatch.policy.forecast`),
projected over the reaction time: one window plus the last actuation's
measured duration.

Signal lags: counter-derived values (rates, mean queue time, batch size,
pending, device time, busy share) react within one window; the summary p95
lags up to 60 s. So the p95 rules only use windows that start ``p95_settle_s``
after the last switch, while the fast rules act at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from autobatch.curve import BatchCurve
from autobatch.policy.capacity import device_ms_estimate
from autobatch.policy.rules import EPS, _demand, _recommend, queue_is_backlog
from autobatch.policy.settings import PolicySettings
from autobatch.policy.types import Action, Decision, Observation, Reason, State
from autobatch.profiles import Profile

__all__ = ["decide"]


def _merged_curve(history: Sequence[Observation], prior: BatchCurve | None) -> BatchCurve | None:
    """The prior curve overlaid with live points, the most recent window winning."""
    points: dict[int, float] = dict(prior.points) if prior else {}
    for w in history:
        for b, ms in (w.batch_curve_ms or {}).items():
            if ms and ms > 0 and math.isfinite(ms):
                points[int(b)] = float(ms)
    if not points:
        return None
    return BatchCurve(points=points, name="merged")


# -- the decision ------------------------------------------------------------------------------


def _hold(state: State, reason: Reason, msg: str, now: float, sig: Mapping[str, Any]) -> Decision:
    return Decision(Action.HOLD, state.active, state.active, reason, msg, now, dict(sig))


def decide(
    history: Sequence[Observation],
    state: State,
    settings: PolicySettings,
    now: float,
) -> tuple[Decision, State]:
    """One control step. ``history`` is oldest first; only its last window drives the step
    (the forecast and the live capacity also read the windows before it)."""
    ladder = settings.ladder
    cur_i = settings.index(state.active)
    current = ladder[cur_i]

    # 1. A manual pin overrides everything, dwell included.
    if state.pin is not None:
        if state.pin == state.active:
            return _hold(state, Reason.PINNED, f"pinned to {state.pin}", now, {}), state
        d = Decision(
            Action.SWITCH, state.active, state.pin, Reason.PIN,
            f"manual pin: {state.active} -> {state.pin}", now, {},
        )
        return d, replace(state, efficiency_up_rps=None, relief_from=None)

    # 2. Data guards: hold on missing, stale or old data.
    if not history:
        return _hold(state, Reason.NO_DATA, "no window yet", now, {}), state
    w = history[-1]
    sig = _signals(w, current)
    if w.stale:
        return _hold(state, Reason.STALE, f"window is stale ({w.stale_reason})", now, sig), state
    if now - w.end_s > settings.max_window_age_s + EPS:
        return _hold(
            state, Reason.STALE,
            f"latest window ended {now - w.end_s:.1f} s ago (> {settings.max_window_age_s:g} s)",
            now, sig,
        ), state
    if state.last_window_end_s is not None and w.end_s <= state.last_window_end_s + EPS:
        # The same window again (the scraper did not advance): nothing new to count.
        return _hold(state, Reason.NO_DATA, "no new window since the last decision", now, sig), state
    if state.last_switch_s is not None and w.start_s < state.last_switch_s + settings.settle_s - EPS:
        return _settling(history, state, settings, cur_i, now, sig)

    # 3. Remember what this window's profile cost, then recommend a target from it.
    curve = _merged_curve(history, settings.curve)
    state = _remember_device(state, w, current, curve, settings)
    target_i, reason, msg = _recommend(w, history, state, settings, cur_i, curve, sig)
    state = replace(state, last_window_end_s=w.end_s)
    demand = _demand(w)
    # A window that began while the load was higher saw part of that load: its
    # recommendation counts as made at the higher of its own rate and the previous
    # window's, so the window straddling a fall (a ramp's 106/s -> 30/s read 46/s and
    # kept efficient) does not veto the step back for the whole stabilization.
    made_at = max(demand, _demand(history[-2])) if len(history) > 1 else demand
    recs = tuple(r for r in state.recommendations if now - r[0] <= settings.stabilization_s)
    state = replace(state, recommendations=recs + ((now, target_i, made_at),))

    if target_i == cur_i:
        return _hold(state, reason, msg, now, sig), replace(state, streak_target=None, streak=0)

    # 4. Confirm over N consecutive windows; survival acts on one (a backlog grows meanwhile).
    survival = reason.kind == "survival"
    target = ladder[target_i].name
    streak = state.streak + 1 if state.streak_target == target else 1
    state = replace(state, streak_target=target, streak=streak)
    needed = 1 if survival else settings.confirmations
    if streak < needed:
        return _hold(
            state, Reason.CONFIRMING,
            f"{msg}; confirming ({streak}/{needed})", now,
            {**sig, "wants": target, "because": reason.value},
        ), state

    # 5. Dwell after the previous switch, except to survive (unless that switch failed),
    # and except to undo an efficiency move whose load is gone: a step toward latency that
    # costs nothing (reason.direct), the load fallen to stabilization_drop of the rate the
    # move was made at (counted at the higher of this window's and the previous one's).
    # The dwell keeps noise from flapping the profile; a load that halved is not noise,
    # and the move back up, an efficiency move, waits its confirmations and the dwell.
    undo = (
        target_i < cur_i and reason.direct and not state.last_switch_failed
        and state.efficiency_up_rps is not None
        and made_at <= settings.stabilization_drop * state.efficiency_up_rps + EPS
    )
    if (
        (not survival or state.last_switch_failed)
        and not undo
        and state.last_switch_s is not None
        and now - state.last_switch_s < settings.min_dwell_s - EPS
    ):
        left = settings.min_dwell_s - (now - state.last_switch_s)
        return _hold(
            state, Reason.DWELL, f"{msg}; dwell: {left:.0f} s left", now,
            {**sig, "wants": target, "because": reason.value},
        ), state

    # 6. Stabilize efficiency moves toward latency (as the HPA stabilizes scale-down):
    # every recent recommendation must agree, but for those made at a load this one has
    # fallen well below (stabilization_drop). Protective moves (failures, an SLO
    # breach) are confirmed by N windows but not held back further.
    if target_i < cur_i and reason in (Reason.SELF_INFLICTED_WAIT, Reason.LOW_LOAD):
        vetoes = [(i, d) for _, i, d in state.recommendations
                  if i > target_i and d * settings.stabilization_drop <= demand + EPS]
        if vetoes:
            most, at = max(vetoes)
            return _hold(
                state, Reason.STABILIZING,
                f"{msg}; a recommendation for {ladder[most].name} in the last "
                f"{settings.stabilization_s:g} s (at {at:.0f}/s) vetoes it",
                now, {**sig, "wants": target, "because": reason.value},
            ), state

    # 7. No optional step toward latency that costs a reload on saturated instances: with
    # the instances over efficiency_max_busy and the queue a backlog (far beyond the max
    # delay), the step shortens no wait, and the new copy loads on the hardware that
    # serves the backlog (a 5.7 s reload there sent 85% of a phase over the SLO). Below
    # that, `no_gain` steps back as before; the gateway's example sets no limit.
    busy = w.busy_share
    if (
        target_i < cur_i and reason.kind == "efficiency" and busy is not None
        and busy > settings.efficiency_max_busy + EPS and queue_is_backlog(w, settings, current)
    ):
        return _hold(
            state, Reason.SATURATED,
            f"{msg}; but the queue ({w.mean_queue_ms:.1f} ms) is a backlog and the instances are "
            f"{busy:.0%} busy (> {settings.efficiency_max_busy:.0%}): a reload now takes them for "
            "seconds and shortens no wait",
            now, {**sig, "wants": target, "because": reason.value},
        ), state

    d = Decision(Action.SWITCH, state.active, target, reason, msg, now, sig)
    up = reason in (Reason.EFFICIENCY, Reason.RELIEF) and target_i > cur_i
    worse = state.relief_worse
    if reason is Reason.SLO_BREACH and state.relief_from is not None:
        # The profile a relief move reached made the breach worse: not again near this rate.
        worse = (state.active, demand)
    relief_from = (state.active, w.p95_ms) if reason is Reason.RELIEF and w.p95_ms is not None else None
    return d, replace(state, efficiency_up_rps=demand if up else None, relief_from=relief_from,
                      relief_worse=worse)


def _settling(history: Sequence[Observation], state: State, settings: PolicySettings, cur_i: int,
              now: float, sig: dict[str, Any]) -> tuple[Decision, State]:
    """A window overlapping the last switch: what the profile did in it is not the new
    profile's (a reloaded copy warming, a shift half made), so it is ignored, but for an
    overload. Arrivals do not depend on the profile: a step in load that lands during a
    switch (a step back toward latency just begun) must not wait out ``settle_s`` too.
    Nothing is remembered from the window (device time, recommendations)."""
    w = history[-1]
    held = replace(state, last_window_end_s=w.end_s)
    if not state.last_switch_failed:
        curve = _merged_curve(history, settings.curve)
        target_i, reason, msg = _recommend(w, history, state, settings, cur_i, curve, sig)
        if reason is Reason.OVERLOAD and target_i > cur_i:
            target = settings.ladder[target_i].name
            return Decision(Action.SWITCH, state.active, target, reason,
                            f"{msg} (in a window overlapping the last switch)", now, sig), replace(
                                held, efficiency_up_rps=None, relief_from=None)
    return _hold(state, Reason.SETTLING, "window overlaps the last switch; ignored", now, sig), held


def _remember_device(state: State, w: Observation, current: Profile, curve: BatchCurve | None,
                     settings: PolicySettings) -> State:
    """The state with the device time the window's profile spent, at the window's load."""
    measured = w.device_ms_per_request
    demand = _demand(w)
    if measured is None or w.inference_rps <= 0:
        return state
    estimated = None if curve is None else device_ms_estimate(
        current, demand, curve, w.instance_count)
    return replace(state, device=state.device.remember(current.name, demand, measured, estimated,
                                                       settings.device_alpha))


def _signals(w: Observation, current: Profile) -> dict[str, Any]:
    return {
        "window_end_s": w.end_s,
        "inference_rps": w.inference_rps,
        "arrival_rps": w.arrival_rps,
        "mean_queue_ms": w.mean_queue_ms,
        "mean_batch_size": w.mean_batch_size,
        "pending_requests": w.pending_requests,
        "pending_delta": w.pending_delta,
        "p95_ms": w.p95_ms,
        "p99_ms": w.p99_ms,
        "utilization": w.utilization,
        "device_ms_per_request": w.device_ms_per_request,
        "busy_share": w.busy_share,
        "max_queue_delay_ms": current.max_queue_delay_us / 1000.0,
    }
