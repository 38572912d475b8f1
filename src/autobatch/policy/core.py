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
* **protective** (``failures``, ``slo_breach``): rejected requests, or p95 over
  the SLO without saturation: a step toward latency, confirmed.
* **efficiency** (``efficiency``, ``self_inflicted_wait``, ``low_load``): a step
  toward throughput that saves at least ``min_saving`` of the device time per
  request with p95 still inside ``headroom`` x SLO; a step toward latency when
  the wait is self-inflicted, or when the lower profile costs at most
  ``latency_tolerance`` more device time (at low load they all cost the same).
  Confirmed, dwelled, and stabilized downward.

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
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from autobatch.curve import BatchCurve
from autobatch.policy.capacity import (
    batch_estimate,
    batch_ms,
    capacity_rps,
    device_ms_estimate,
    floor_capacity_rps,
    live_factor,
)
from autobatch.policy.forecast import Forecast, holt
from autobatch.profiles import Profile

__all__ = [
    "Action",
    "Decision",
    "Observation",
    "PolicySettings",
    "Reason",
    "State",
    "capacity_rps",
    "decide",
    "floor_capacity_rps",
]

EPS = 1e-9


class Observation(Protocol):
    """What the policy reads from a window (``autobatch.signals.Window`` fits)."""

    start_s: float
    end_s: float
    inference_rps: float
    exec_rps: float
    failure_rps: Mapping[str, float]
    mean_batch_size: float | None
    mean_queue_ms: float | None
    pending_requests: float | None
    pending_delta: float | None
    p95_ms: float | None
    p99_ms: float | None
    batch_curve_ms: Mapping[int, float]
    utilization: float | None
    device_ms_per_request: float | None
    busy_instances: float | None
    busy_share: float | None
    stale: bool
    stale_reason: str | None

    @property
    def arrival_rps(self) -> float: ...


class Action(str, Enum):
    HOLD = "hold"
    SWITCH = "switch"


class Reason(str, Enum):
    """Why the policy did what it did: a metric label and a log field."""

    # holds
    STEADY = "steady"  # inside the band: nothing to do
    NO_DATA = "no_data"  # no window yet, or the window lacks the signals needed
    STALE = "stale"  # the latest window is stale or too old
    SETTLING = "settling"  # the window overlaps the last switch
    DWELL = "dwell"  # minimum dwell after a switch not over
    CONFIRMING = "confirming"  # a move is recommended, not yet by N windows in a row
    STABILIZING = "stabilizing"  # a move toward latency, vetoed by a recent recommendation
    SATURATED = "saturated"  # saturated, and no profile would add capacity
    CAPACITY = "capacity"  # toward latency wanted, but the lower profile cannot carry the load
    AT_LIMIT = "at_limit"  # the move would leave the ladder
    PINNED = "pinned"  # a manual pin holds the profile
    # survival: the profile cannot carry the load (now, or within the reaction time)
    OVERLOAD = "overload"  # arrivals above capacity, or a backlog growing window after window
    FORECAST = "forecast"  # arrivals projected over the reaction time exceed what it carries
    SATURATION = "saturation"  # queue far above the max delay and the backlog growing
    # protective
    SLO_BREACH = "slo_breach"  # p95 over the SLO and not saturated: back off
    FAILURES = "failures"  # rejected/timed-out requests: back off
    # efficiency
    EFFICIENCY = "efficiency"  # the next profile saves device time, p95 stays inside headroom
    SELF_INFLICTED_WAIT = "self_inflicted_wait"  # waiting for batches that never fill
    LOW_LOAD = "low_load"  # device time barely differs: take the lower latency
    # manual
    PIN = "pin"  # switching to a manually pinned profile

    @property
    def kind(self) -> str:
        """``survival``, ``protective``, ``efficiency``, ``manual`` or ``hold``."""
        return _KINDS.get(self, "hold")


_KINDS = {
    Reason.OVERLOAD: "survival",
    Reason.FORECAST: "survival",
    Reason.SATURATION: "survival",
    Reason.SLO_BREACH: "protective",
    Reason.FAILURES: "protective",
    Reason.EFFICIENCY: "efficiency",
    Reason.SELF_INFLICTED_WAIT: "efficiency",
    Reason.LOW_LOAD: "efficiency",
    Reason.PIN: "manual",
}


@dataclass(frozen=True)
class PolicySettings:
    """Knobs of the default policy. Every time is in seconds unless its name says otherwise."""

    ladder: tuple[Profile, ...]
    """Profiles, most latency-oriented first. At least two."""
    slo_p95_ms: float
    """The latency objective the p95 rules compare against."""
    slo_p99_ms: float | None = None
    """Optional p99 objective; a breach of it counts like a p95 breach."""
    headroom: float = 0.7
    """An efficiency step toward throughput needs p95, and the p95 predicted on the next
    profile, under headroom x SLO (the reference article's 0.7)."""
    util_ceiling: float = 0.6
    """...and accelerator utilisation < this. Ignored when the signal is absent (CPU)."""
    confirmations: int = 3
    """Consecutive fresh windows that must recommend the same target before a protective or
    efficiency switch. Survival switches act on one window."""
    min_dwell_s: float = 20.0
    """No protective or efficiency switch within this long after the previous one. Survival
    switches (toward more capacity) and a manual pin are exempt."""
    settle_s: float = 2.0
    """Windows starting less than this after a switch are ignored (reload, warm-up)."""
    p95_settle_s: float = 60.0
    """The summary p95 holds up to 60 s of the previous profile; p95 rules wait this long."""
    stabilization_s: float = 30.0
    """A step toward latency for efficiency (self-inflicted waiting, low load) needs every
    recommendation of the last this-many seconds to agree (0 turns stabilization off)."""
    max_window_age_s: float = 30.0
    """A window that ended longer ago than this is stale (the scraper is stuck)."""
    near_delay_ratio: float = 0.5
    """Self-inflicted waiting: mean queue time >= this x the profile's max delay ..."""
    saturation_delay_ratio: float = 3.0
    """Saturation: mean queue time > this x the max delay (and the backlog growing)."""
    saturation_min_queue_ms: float = 5.0
    """...and above this floor, so a near-zero max delay does not make every wait saturation."""
    capacity_margin: float = 1.25
    """A profile 'carries' a load when its capacity >= load x this."""
    min_gain: float = 1.1
    """With no profile that carries the load, switch to the highest-capacity one only if it
    carries at least this x the current capacity (the curve shows a gain)."""
    failure_rps_threshold: float = 0.0
    """Failures per second above this count as a breach (0: any failure)."""
    failure_reasons: tuple[str, ...] = ("REJECTED", "CANCELED")
    """Triton failure reasons that count: queue rejections and timeouts/cancellations."""
    curve: BatchCurve | None = None
    """A measured batch curve (``autobatch measure``), the prior for capacity; live points win."""
    overload_ratio: float = 1.0
    """Overload: arrivals above this x the current profile's capacity, in one window."""
    overload_windows: int = 2
    """Overload also: the backlog grew in this many consecutive windows ..."""
    overload_backlog_ratio: float = 0.5
    """... and draining it at the current capacity takes longer than this x the SLO."""
    busy_ceiling: float = 0.9
    """The busy share at which a profile is full on this machine (executions never follow
    each other without a gap): the live capacity is what the curve predicts, scaled by the
    measured busy time and this. 1 trusts the curve's back-to-back batches."""
    live_min_busy: float = 0.3
    """Windows whose instances were busy less than this share say too little about
    capacity; the last one above it sets the live factor."""
    forecast: bool = True
    """Move before saturation on the projected arrival rate (False: only on what is seen)."""
    forecast_windows: int = 10
    """Holt's forecast runs over this many latest fresh windows (at least 3 to say anything)."""
    forecast_alpha: float = 0.5
    """Holt's level smoothing: the weight of the newest window."""
    forecast_beta: float = 0.3
    """Holt's trend smoothing."""
    forecast_z: float = 3.5
    """A trend counts only above this many standard deviations of the trend Poisson noise
    (or the observed noise, if larger) would produce: steady load must not trip it."""
    default_actuation_s: float = 3.0
    """The reaction time's actuation part before the first switch measures it (a reload of
    dense_mlp here takes about 3 s; a gateway shift a fraction of a second)."""
    min_saving: float = 0.15
    """An efficiency step toward throughput needs the next profile's device time per request
    at most (1 - this) x the current one's: a smaller saving is not worth the latency."""
    latency_tolerance: float = 0.05
    """An efficiency step toward latency is taken when the lower profile costs at most
    (1 + this) x the current device time per request (at low load they all cost the same).
    Less than ``min_saving``, so the two rules leave a band where neither moves."""

    def __post_init__(self) -> None:
        if len(self.ladder) < 2:
            raise ValueError("the profile ladder needs at least two profiles")
        names = [p.name for p in self.ladder]
        if len(set(names)) != len(names):
            raise ValueError(f"profile names in the ladder must be unique: {names}")
        if self.confirmations < 1:
            raise ValueError("confirmations must be >= 1")
        if self.overload_windows < 1:
            raise ValueError("overload_windows must be >= 1")
        if not 0 < self.busy_ceiling <= 1:
            raise ValueError("busy_ceiling must be in (0, 1]")
        if not (0 < self.forecast_alpha <= 1 and 0 < self.forecast_beta <= 1):
            raise ValueError("forecast_alpha and forecast_beta must be in (0, 1]")
        if self.latency_tolerance >= self.min_saving:
            raise ValueError("latency_tolerance must be below min_saving, or the ladder flaps")

    def index(self, name: str) -> int:
        for i, p in enumerate(self.ladder):
            if p.name == name:
                return i
        raise KeyError(name)


@dataclass(frozen=True)
class State:
    """What the policy remembers between calls. Start with :meth:`initial`."""

    active: str
    """The profile the policy believes is live."""
    last_switch_s: float | None = None
    """When the last switch (or failed attempt) happened; None before the first."""
    streak_target: str | None = None
    """The target recommended by the latest consecutive windows ..."""
    streak: int = 0
    """... and how many windows in a row."""
    last_window_end_s: float | None = None
    """End of the latest window counted, so one window is never counted twice."""
    recommendations: tuple[tuple[float, int], ...] = ()
    """(time, ladder index) of recent recommendations, for the stabilization window."""
    pin: str | None = None
    """A manually pinned profile; overrides everything."""
    last_actuation_s: float | None = None
    """How long the last switch took to apply (the forecast's horizon includes it)."""
    last_switch_failed: bool = False
    """The last switch failed: every move dwells, survival too (retrying a refused
    profile every window would hammer the server)."""

    @classmethod
    def initial(cls, active: str) -> State:
        return cls(active=active)

    def pinned(self, name: str | None) -> State:
        return replace(self, pin=name, streak_target=None, streak=0)

    def switched(self, to: str, at_s: float, duration_s: float | None = None) -> State:
        """The switch to ``to`` happened (the controller calls this after the actuator
        succeeds); ``duration_s`` is how long applying it took."""
        took = self.last_actuation_s if duration_s is None else duration_s
        return replace(self, active=to, last_switch_s=at_s, streak_target=None, streak=0,
                       last_actuation_s=took, last_switch_failed=False)

    def switch_failed(self, active: str, at_s: float) -> State:
        """The switch failed and ``active`` is live again: dwell before trying anything else."""
        return replace(self, active=active, last_switch_s=at_s, streak_target=None, streak=0,
                       last_switch_failed=True)


@dataclass(frozen=True)
class Decision:
    action: Action
    current: str
    target: str
    reason: Reason
    message: str
    at_s: float
    signals: Mapping[str, Any] = field(default_factory=dict)
    """The figures the decision rested on (for logs, /status and replay)."""

    @property
    def switch(self) -> bool:
        return self.action is Action.SWITCH

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_s": self.at_s,
            "action": self.action.value,
            "current": self.current,
            "target": self.target,
            "reason": self.reason.value,
            "kind": self.reason.kind,
            "message": self.message,
            "signals": dict(self.signals),
        }


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
        return d, state

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
        return _hold(
            state, Reason.SETTLING, "window overlaps the last switch; ignored", now, sig
        ), replace(state, last_window_end_s=w.end_s)

    # 3. Recommend a target from this window.
    curve = _merged_curve(history, settings.curve)
    target_i, reason, msg = _recommend(w, history, state, settings, cur_i, curve, sig)
    state = replace(state, last_window_end_s=w.end_s)
    recs = tuple((t, i) for t, i in state.recommendations if now - t <= settings.stabilization_s)
    state = replace(state, recommendations=recs + ((now, target_i),))

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

    # 5. Dwell after the previous switch, except to survive (unless that switch failed).
    if (
        (not survival or state.last_switch_failed)
        and state.last_switch_s is not None
        and now - state.last_switch_s < settings.min_dwell_s - EPS
    ):
        left = settings.min_dwell_s - (now - state.last_switch_s)
        return _hold(
            state, Reason.DWELL, f"{msg}; dwell: {left:.0f} s left", now,
            {**sig, "wants": target, "because": reason.value},
        ), state

    # 6. Stabilize efficiency moves toward latency (as the HPA stabilizes scale-down):
    # every recent recommendation must agree. Protective moves (failures, an SLO
    # breach) are confirmed by N windows but not held back further.
    if target_i < cur_i and reason in (Reason.SELF_INFLICTED_WAIT, Reason.LOW_LOAD):
        most = max(i for _, i in state.recommendations)
        if most > target_i:
            return _hold(
                state, Reason.STABILIZING,
                f"{msg}; a recommendation for {ladder[most].name} in the last "
                f"{settings.stabilization_s:g} s vetoes it",
                now, {**sig, "wants": target, "because": reason.value},
            ), state

    d = Decision(Action.SWITCH, state.active, target, reason, msg, now, sig)
    return d, state


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
        "device_ms_per_request": getattr(w, "device_ms_per_request", None),
        "busy_share": getattr(w, "busy_share", None),
        "max_queue_delay_ms": current.max_queue_delay_us / 1000.0,
    }


def _r(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


@dataclass(frozen=True)
class _Capacity:
    """What every profile carries on this machine now, and why."""

    rps: dict[int, float | None]
    """Effective capacity by ladder index: the curve's, times the live factor."""
    floor: dict[int, float | None]
    factor: float | None


def _capacities(history: Sequence[Observation], s: PolicySettings, curve: BatchCurve | None,
                ) -> _Capacity:
    """Capacities from the reference curve (the configured one, else the live points), times
    the live factor measured against that same curve. The live points do not also lower
    the capacities: their slowdown is in the factor already, and counting it twice would
    make every profile look smaller than it is."""
    reference = s.curve if s.curve is not None else curve
    factor, _ = live_factor(history, reference, busy_ceiling=s.busy_ceiling,
                            min_busy_share=s.live_min_busy)
    scale = factor if factor is not None else 1.0
    cap: dict[int, float | None] = {}
    floor: dict[int, float | None] = {}
    for i, p in enumerate(s.ladder):
        c, f = capacity_rps(p, reference), floor_capacity_rps(p, reference)
        cap[i] = None if c is None else c * scale
        floor[i] = None if f is None else f * scale
    return _Capacity(cap, floor, factor)


def _forecast(history: Sequence[Observation], state: State, s: PolicySettings,
              w: Observation) -> Forecast | None:
    if not s.forecast:
        return None
    fresh = [h for h in history if not h.stale][-s.forecast_windows:]
    window_s = max(w.end_s - w.start_s, EPS)
    actuation = state.last_actuation_s if state.last_actuation_s is not None else s.default_actuation_s
    horizon = (window_s + actuation) / window_s
    return holt([h.arrival_rps for h in fresh], window_s=window_s, horizon_windows=horizon,
                alpha=s.forecast_alpha, beta=s.forecast_beta, z=s.forecast_z)


def _recommend(
    w: Observation,
    history: Sequence[Observation],
    state: State,
    s: PolicySettings,
    cur_i: int,
    curve: BatchCurve | None,
    sig: dict[str, Any],
) -> tuple[int, Reason, str]:
    ladder = s.ladder
    cur = ladder[cur_i]
    delay_ms = cur.max_queue_delay_us / 1000.0
    q = w.mean_queue_ms
    b = w.mean_batch_size
    arrival = w.arrival_rps
    # What the profile must carry: the arrivals, or the completions while a backlog drains.
    demand = max(arrival, w.inference_rps)
    sig["demand_rps"] = round(demand, 3)
    capacity = _capacities(history, s, curve)
    cap = capacity.rps
    sig["capacity_rps"] = {p.name: _r(cap[i]) for i, p in enumerate(ladder)}
    sig["live_factor"] = _r(capacity.factor, 3)
    forecast = _forecast(history, state, s, w)
    sig["forecast_rps"] = None if forecast is None else round(forecast.rps, 1)
    sig["forecast_trend_rps"] = None if forecast is None else round(forecast.trend_rps, 2)
    sig["reaction_s"] = None if forecast is None else round(
        forecast.horizon_windows * max(w.end_s - w.start_s, EPS), 2)
    if curve is not None:
        sig["device_ms_estimate"] = {
            p.name: round(device_ms_estimate(p, demand, curve), 3) for p in ladder
        }

    failures = sum(v for k, v in (w.failure_rps or {}).items() if k in s.failure_reasons)
    sig["failures_rps"] = failures

    # Survival 1, overload: more arrives than the profile carries, in this one window;
    # or the backlog has grown window after window and already takes long to drain.
    c = cap[cur_i]
    if c is not None:
        over = arrival > c * s.overload_ratio + EPS
        backlog = w.pending_requests or 0.0
        drain_ms = backlog / max(c, EPS) * 1000.0
        grew = _backlog_grew(history, state, s)
        if over or (grew and drain_ms > s.overload_backlog_ratio * s.slo_p95_ms):
            why = (
                f"overload: {arrival:.0f}/s arrive, {cur.name} carries {c:.0f}/s"
                if over else
                f"overload: the backlog grew {s.overload_windows} windows in a row to "
                f"{backlog:.0f} requests ({drain_ms:.0f} ms to drain at {c:.0f}/s)"
            )
            return _toward_capacity(cur_i, cap, demand, s, Reason.OVERLOAD, why)

    # Survival 2, saturation seen in the queue: far above the max delay, and a backlog
    # that persists: grown, or deeper than the largest batch, in each of the last
    # overload_windows windows. One window of it is noise at a moderate load on a
    # profile without a delay (one request waits out another's run, the gauge ticks up);
    # as a survival move acts at once, it must not act on that.
    far = q is not None and q > max(s.saturation_delay_ratio * delay_ms, s.saturation_min_queue_ms)
    if far and _backlog_persists(history, state, s, max(cur.effective_preferred)):
        what = f"saturated (queue {q:.1f} ms vs max delay {delay_ms:g} ms, backlog growing)"
        if c is None:
            return cur_i, Reason.SATURATED, (
                f"{what} and no batch curve to show whether batching gains: only more replicas "
                "surely help"
            )
        return _toward_capacity(cur_i, cap, demand, s, Reason.SATURATION, what)

    # Survival 3, forecast: the arrivals projected over the reaction time would not be
    # carried (with the margin), and the trend stands out of the noise.
    if forecast is not None and c is not None and forecast.rising and (
        forecast.rps * s.capacity_margin > c + EPS
    ):
        target_i, reason, why = _toward_capacity(
            cur_i, cap, forecast.rps, s, Reason.FORECAST,
            f"forecast: arrivals rising {forecast.trend_rps:+.1f}/s per window, "
            f"{forecast.rps:.0f}/s in {sig['reaction_s']:g} s; {cur.name} carries {c:.0f}/s",
        )
        if target_i != cur_i:
            return target_i, reason, why

    # Protective: failures count as a breach; back off toward latency.
    if failures > s.failure_rps_threshold + EPS:
        return _toward_latency(
            cur_i, capacity.floor, demand, s, Reason.FAILURES,
            f"{failures:.2f} failed requests/s (rejected or timed out)",
        )

    # Efficiency toward latency: requests sit out the delay for batches that never fill.
    if (
        q is not None
        and b is not None
        and delay_ms > 0
        and q >= s.near_delay_ratio * delay_ms
        and b < min(cur.effective_preferred)
    ):
        if cur_i == 0:
            return cur_i, Reason.STEADY, "waiting at the most latency-oriented profile already"
        return _toward_latency(
            cur_i, capacity.floor, demand, s, Reason.SELF_INFLICTED_WAIT,
            f"queue {q:.1f} ms near max delay {delay_ms:g} ms while batches average {b:.1f} "
            f"< preferred {min(cur.effective_preferred)}",
        )

    # The p95 rules only trust the summary once it has forgotten the previous profile.
    p95_trusted = state.last_switch_s is None or w.start_s >= state.last_switch_s + s.p95_settle_s
    sig["p95_trusted"] = p95_trusted
    if p95_trusted and w.p95_ms is not None:
        breach = w.p95_ms > s.slo_p95_ms or (
            s.slo_p99_ms is not None and w.p99_ms is not None and w.p99_ms > s.slo_p99_ms
        )
        if breach:
            return _toward_latency(
                cur_i, capacity.floor, demand, s, Reason.SLO_BREACH,
                f"p95 {w.p95_ms:.1f} ms over the SLO {s.slo_p95_ms:g} ms without saturation",
            )
        up = _efficiency_up(w, s, cur_i, curve, cap, demand, sig)
        if up is not None:
            return up

    # Efficiency toward latency at low load: the lower profile costs about the same.
    down = _low_load(s, cur_i, curve, capacity.floor, demand)
    if down is not None:
        return down
    return cur_i, Reason.STEADY, sig.pop("efficiency", None) or "inside the band"


def _backlog_persists(
    history: Sequence[Observation], state: State, s: PolicySettings, deep: float
) -> bool:
    """Whether, in each of the last ``overload_windows`` fresh windows after the settling
    of the last switch, the backlog grew or held more than ``deep`` requests."""
    tail = list(history)[-s.overload_windows:]
    if len(tail) < s.overload_windows:
        return False
    for h in tail:
        if h.stale:
            return False
        if state.last_switch_s is not None and h.start_s < state.last_switch_s + s.settle_s - EPS:
            return False
        if not ((h.pending_delta or 0.0) > 0 or (h.pending_requests or 0.0) > deep):
            return False
    return True


def _backlog_grew(history: Sequence[Observation], state: State, s: PolicySettings) -> bool:
    """Whether the pending gauge grew in each of the last ``overload_windows`` windows,
    all fresh and after the settling of the last switch."""
    tail = list(history)[-s.overload_windows:]
    if len(tail) < s.overload_windows:
        return False
    for h in tail:
        if h.stale or (h.pending_delta or 0.0) <= 0:
            return False
        if state.last_switch_s is not None and h.start_s < state.last_switch_s + s.settle_s - EPS:
            return False
    return True


def _toward_capacity(
    cur_i: int,
    cap: Mapping[int, float | None],
    need: float,
    s: PolicySettings,
    reason: Reason,
    why: str,
) -> tuple[int, Reason, str]:
    """The most latency-oriented profile with more capacity than the current one that
    carries ``need`` with the margin; else the highest-capacity one if it gains enough."""
    ladder = s.ladder
    c = cap[cur_i]
    assert c is not None
    more = [i for i, x in cap.items() if x is not None and x > c + EPS]
    carries = [i for i in more if cap[i] is not None and cap[i] >= need * s.capacity_margin - EPS]  # type: ignore[operator]
    if carries:
        i = min(carries)
        return i, reason, f"{why}: {ladder[i].name} carries {cap[i]:.0f}/s"
    best = max(range(len(ladder)), key=lambda i: (cap[i] or 0.0, -i))
    top = cap[best] or 0.0
    if best != cur_i and top >= c * s.min_gain - EPS:
        return best, reason, (
            f"{why}: {ladder[best].name} carries the most, {top:.0f}/s (less than "
            f"{need:.0f}/s x {s.capacity_margin:g})"
        )
    return cur_i, Reason.SATURATED, (
        f"{why}; no profile adds capacity on this curve: only more replicas help"
    )


def _efficiency_up(
    w: Observation,
    s: PolicySettings,
    cur_i: int,
    curve: BatchCurve | None,
    cap: Mapping[int, float | None],
    demand: float,
    sig: dict[str, Any],
) -> tuple[int, Reason, str] | None:
    """A step toward throughput when it saves device time and p95 keeps its headroom.

    Every profile above the current one is a candidate (a middle rung may form no
    bigger batches than the current one at this rate while the next one does); the
    one saving the most device time among those whose predicted p95 stays under
    headroom x SLO and that carry the load wins.
    """
    ladder = s.ladder
    assert w.p95_ms is not None
    limit = s.headroom * s.slo_p95_ms
    util_ok = w.utilization is None or w.utilization < s.util_ceiling
    if w.p95_ms >= limit or not util_ok:
        return None
    if cur_i == len(ladder) - 1 or curve is None:
        return None
    cur = ladder[cur_i]
    dev_cur = device_ms_estimate(cur, demand, curve)
    b_cur = batch_estimate(cur, demand, curve)
    best: tuple[float, int, float, float] | None = None
    refused: list[str] = []
    for i in range(cur_i + 1, len(ladder)):
        nxt = ladder[i]
        dev = device_ms_estimate(nxt, demand, curve)
        saving = 1.0 - dev / dev_cur if dev_cur > 0 else 0.0
        if saving < s.min_saving - EPS:
            refused.append(f"{nxt.name} saves {saving:.0%}")
            continue
        # What it would add to p95: its extra wait for a batch, and the longer run of
        # the bigger batch.
        b = batch_estimate(nxt, demand, curve)
        added = (_wait_ms(nxt, demand) - _wait_ms(cur, demand)) + max(
            0.0, batch_ms(curve, b) - batch_ms(curve, b_cur))
        predicted = w.p95_ms + max(0.0, added)
        c = cap[i]
        if predicted >= limit:
            refused.append(f"{nxt.name} saves {saving:.0%} but its p95 would be ~{predicted:.0f} ms")
            continue
        if c is not None and c < demand * s.capacity_margin:
            refused.append(f"{nxt.name} carries only {c:.0f}/s")
            continue
        if best is None or saving > best[0] + EPS:
            best = (saving, i, dev, predicted)
    if best is None:
        # Not a decision yet: the low-load rule may still step down.
        sig["efficiency"] = (
            f"p95 has headroom, but at {demand:.0f}/s nothing above pays ({'; '.join(refused)}; "
            f"need {s.min_saving:.0%} less device time, p95 under {limit:g} ms)"
        )
        return None
    saving, i, dev, predicted = best
    return i, Reason.EFFICIENCY, (
        f"efficiency: {ladder[i].name} spends {dev:.2f} ms of device time per request vs "
        f"{dev_cur:.2f} at {demand:.0f}/s ({saving:.0%} saved), p95 {w.p95_ms:.1f} -> "
        f"~{predicted:.0f} ms < {limit:g}"
    )


def _wait_ms(p: Profile, rate_rps: float) -> float:
    """How long a batch waits for its preferred size, at most the profile's max delay."""
    delay = p.max_queue_delay_us / 1000.0
    if delay <= 0:
        return 0.0
    fill = (min(p.effective_preferred) - 1) / max(rate_rps, EPS) * 1000.0
    return min(delay, max(0.0, fill))


def _low_load(
    s: PolicySettings,
    cur_i: int,
    curve: BatchCurve | None,
    floor: Mapping[int, float | None],
    demand: float,
) -> tuple[int, Reason, str] | None:
    """A step toward latency when the lower profile costs about the same device time and
    carries the load without a backlog."""
    if cur_i == 0 or curve is None:
        return None
    cur, lower = s.ladder[cur_i], s.ladder[cur_i - 1]
    dev_cur = device_ms_estimate(cur, demand, curve)
    dev_low = device_ms_estimate(lower, demand, curve)
    if dev_low > dev_cur * (1 + s.latency_tolerance) + EPS:
        return None
    f = floor[cur_i - 1]
    if f is not None and f < demand * s.capacity_margin:
        return None
    return cur_i - 1, Reason.LOW_LOAD, (
        f"low load: at {demand:.0f}/s {lower.name} spends {dev_low:.2f} ms of device time per "
        f"request vs {dev_cur:.2f}, for less waiting"
    )


def _toward_latency(
    cur_i: int,
    floor: Mapping[int, float | None],
    demand: float,
    s: PolicySettings,
    reason: Reason,
    why: str,
) -> tuple[int, Reason, str]:
    if cur_i == 0:
        return cur_i, Reason.AT_LIMIT, f"{why}; already at the most latency-oriented profile"
    lower = s.ladder[cur_i - 1]
    c = floor[cur_i - 1]
    if c is not None and c < demand * s.capacity_margin:
        return cur_i, Reason.CAPACITY, (
            f"{why}; but {lower.name} carries only {c:.0f}/s without a backlog, "
            f"for a load of {demand:.0f}/s"
        )
    return cur_i - 1, reason, why
