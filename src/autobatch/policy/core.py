"""The default policy: queue-aware hysteresis over a ladder of batching profiles.

``decide(history, state, settings, now) -> (Decision, State)`` is a pure
function: it reads no clock, does no I/O and logs nothing, so it is tested
with tables and replayed offline (``autobatch replay``) through the very same
code the sidecar runs.

The pipeline, after the Kubernetes HPA controller: **guard** (pin, data,
settling, dwell) -> **recommend** a target from the latest window ->
**confirm** it over N windows -> **stabilize** moves toward latency over a
time window -> **constrain** to one ladder step (saturation may jump) -> act.
Every decision carries a machine :class:`Reason` and a human message.

Why not the reference loop alone (p95 < SLO x 0.7 and util < 60% -> batch
harder; p95 > SLO -> back off): a slow p95 has two causes that want opposite
moves.

* *Self-inflicted waiting*: mean queue time near the profile's max delay while
  batches stay under its preferred size. Requests sit out the delay for
  batches that never fill; a more latency-oriented profile costs no throughput.
* *Saturation*: queue time far above the max delay and the backlog growing.
  Backing off to smaller batches lowers capacity and makes the backlog worse;
  the fix is the highest-capacity profile, if the batch curve shows batching
  gains anything on this model and device, and otherwise only more replicas.

Two guards keep the ladder from flapping between those rules: a step toward
throughput needs the arrival rate to fill the next profile's smallest
preferred batch within its delay (else the new wait would be self-inflicted),
and a step toward latency needs the lower profile to carry the current load
with the batches it forms on the spot, without a backlog (else it would
saturate): see :func:`floor_capacity_rps` vs :func:`capacity_rps`.

Signal lags: counter-derived values (rates, mean queue time, batch size,
pending) react within one window; the summary p95 lags up to 60 s. So the
p95 rules (headroom, SLO breach) only use windows that start
``p95_settle_s`` after the last switch, while the fast rules act at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from autobatch.curve import BatchCurve
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
    failure_rps: Mapping[str, float]
    mean_batch_size: float | None
    mean_queue_ms: float | None
    pending_requests: float | None
    pending_delta: float | None
    p95_ms: float | None
    p99_ms: float | None
    batch_curve_ms: Mapping[int, float]
    utilization: float | None
    stale: bool
    stale_reason: str | None


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
    # switches
    HEADROOM = "headroom"  # p95 well inside the SLO and the device has room: batch harder
    SELF_INFLICTED_WAIT = "self_inflicted_wait"  # waiting for batches that never fill
    SLO_BREACH = "slo_breach"  # p95 over the SLO and not saturated: back off
    FAILURES = "failures"  # rejected/timed-out requests: back off
    SATURATION = "saturation"  # backlog growing: go to the highest-capacity profile
    PIN = "pin"  # switching to a manually pinned profile


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
    """Step toward throughput only while p95 < headroom x SLO (the reference article's 0.7)."""
    util_ceiling: float = 0.6
    """...and accelerator utilisation < this. Ignored when the signal is absent (CPU)."""
    confirmations: int = 3
    """Consecutive fresh windows that must recommend the same target before a switch."""
    min_dwell_s: float = 20.0
    """No switch within this long after the previous one (a manual pin is exempt)."""
    settle_s: float = 2.0
    """Windows starting less than this after a switch are ignored (reload, warm-up)."""
    p95_settle_s: float = 60.0
    """The summary p95 holds up to 60 s of the previous profile; p95 rules wait this long."""
    stabilization_s: float = 30.0
    """A step toward latency for self-inflicted waiting needs every recommendation of the
    last this-many seconds to agree (0 turns stabilization off)."""
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
    """Saturation switches only if the target's capacity >= current x this (the curve shows a gain)."""
    failure_rps_threshold: float = 0.0
    """Failures per second above this count as a breach (0: any failure)."""
    failure_reasons: tuple[str, ...] = ("REJECTED", "CANCELED")
    """Triton failure reasons that count: queue rejections and timeouts/cancellations."""
    curve: BatchCurve | None = None
    """A measured batch curve (``autobatch measure``), the prior for capacity; live points win."""

    def __post_init__(self) -> None:
        if len(self.ladder) < 2:
            raise ValueError("the profile ladder needs at least two profiles")
        names = [p.name for p in self.ladder]
        if len(set(names)) != len(names):
            raise ValueError(f"profile names in the ladder must be unique: {names}")
        if self.confirmations < 1:
            raise ValueError("confirmations must be >= 1")

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

    @classmethod
    def initial(cls, active: str) -> State:
        return cls(active=active)

    def pinned(self, name: str | None) -> State:
        return replace(self, pin=name, streak_target=None, streak=0)

    def switched(self, to: str, at_s: float) -> State:
        """The switch to ``to`` happened (the controller calls this after the actuator succeeds)."""
        return replace(self, active=to, last_switch_s=at_s, streak_target=None, streak=0)

    def switch_failed(self, active: str, at_s: float) -> State:
        """The switch failed and ``active`` is live again: dwell before trying anything else."""
        return replace(self, active=active, last_switch_s=at_s, streak_target=None, streak=0)


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
            "message": self.message,
            "signals": dict(self.signals),
        }


# -- capacity from the batch curve -----------------------------------------------------------


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


def capacity_rps(profile: Profile, curve: BatchCurve | None) -> float | None:
    """Items per second the profile sustains when the queue never empties.

    With a deep queue Triton sends the largest preferred batch every time, so
    the capacity is that batch over its run time, times the instance count.
    This is what a saturated server gains by switching to the profile.
    """
    if curve is None:
        return None
    b = max(profile.effective_preferred)
    instances = profile.instance_count or 1
    return curve.throughput_rps(b) * instances


def floor_capacity_rps(profile: Profile, curve: BatchCurve | None) -> float | None:
    """Items per second the profile carries *without* building a deep queue.

    At the margin the queue holds only a few requests when an instance frees,
    and Triton sends the largest preferred size it can form, often the smallest
    one. So a load below the worst of the preferred sizes' throughputs is
    carried with batches formed on the spot; above it, only a backlog builds
    the larger batches. Stepping toward latency checks this one, so a step down
    under load does not land on a profile that saturates.
    """
    if curve is None:
        return None
    instances = profile.instance_count or 1
    return min(curve.throughput_rps(b) for b in profile.effective_preferred) * instances


# -- the decision ------------------------------------------------------------------------------


def _hold(state: State, reason: Reason, msg: str, now: float, sig: Mapping[str, Any]) -> Decision:
    return Decision(Action.HOLD, state.active, state.active, reason, msg, now, dict(sig))


def decide(
    history: Sequence[Observation],
    state: State,
    settings: PolicySettings,
    now: float,
) -> tuple[Decision, State]:
    """One control step. ``history`` is oldest first; only its last window drives the step."""
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
    target_i, reason, msg = _recommend(w, history, state, settings, cur_i, curve, now, sig)
    state = replace(state, last_window_end_s=w.end_s)
    recs = tuple((t, i) for t, i in state.recommendations if now - t <= settings.stabilization_s)
    state = replace(state, recommendations=recs + ((now, target_i),))

    if target_i == cur_i:
        return _hold(state, reason, msg, now, sig), replace(state, streak_target=None, streak=0)

    # 4. Confirm over N consecutive windows.
    target = ladder[target_i].name
    streak = state.streak + 1 if state.streak_target == target else 1
    state = replace(state, streak_target=target, streak=streak)
    if streak < settings.confirmations:
        return _hold(
            state, Reason.CONFIRMING,
            f"{msg}; confirming ({streak}/{settings.confirmations})", now,
            {**sig, "wants": target, "because": reason.value},
        ), state

    # 5. Dwell after the previous switch.
    if state.last_switch_s is not None and now - state.last_switch_s < settings.min_dwell_s - EPS:
        left = settings.min_dwell_s - (now - state.last_switch_s)
        return _hold(
            state, Reason.DWELL, f"{msg}; dwell: {left:.0f} s left", now,
            {**sig, "wants": target, "because": reason.value},
        ), state

    # 6. Stabilize efficiency moves toward latency (as the HPA stabilizes scale-down):
    # every recent recommendation must agree. Protective moves (failures, an SLO
    # breach) are confirmed by N windows but not held back further.
    if target_i < cur_i and reason is Reason.SELF_INFLICTED_WAIT:
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
        "mean_queue_ms": w.mean_queue_ms,
        "mean_batch_size": w.mean_batch_size,
        "pending_requests": w.pending_requests,
        "pending_delta": w.pending_delta,
        "p95_ms": w.p95_ms,
        "p99_ms": w.p99_ms,
        "utilization": w.utilization,
        "max_queue_delay_ms": current.max_queue_delay_us / 1000.0,
    }


def _recommend(
    w: Observation,
    history: Sequence[Observation],
    state: State,
    s: PolicySettings,
    cur_i: int,
    curve: BatchCurve | None,
    now: float,
    sig: dict[str, Any],
) -> tuple[int, Reason, str]:
    ladder = s.ladder
    cur = ladder[cur_i]
    delay_ms = cur.max_queue_delay_us / 1000.0
    q = w.mean_queue_ms
    b = w.mean_batch_size
    interval = max(w.end_s - w.start_s, EPS)
    # Triton counts a request when it completes, so under overload the completion
    # rate is capped at capacity; the growth of the backlog is the rest of the demand.
    demand = w.inference_rps + max(0.0, w.pending_delta or 0.0) / interval
    sig["demand_rps"] = round(demand, 3)
    cap = {i: capacity_rps(p, curve) for i, p in enumerate(ladder)}
    floor = {i: floor_capacity_rps(p, curve) for i, p in enumerate(ladder)}
    sig["capacity_rps"] = {p.name: (round(c, 1) if c else None) for p, c in zip(ladder, cap.values())}

    failures = sum(v for k, v in (w.failure_rps or {}).items() if k in s.failure_reasons)
    sig["failures_rps"] = failures

    # Saturation: the queue is far above the max delay and the backlog grows.
    growing = (w.pending_delta or 0.0) > 0 or (w.pending_requests or 0.0) > max(cur.effective_preferred)
    far = q is not None and q > max(s.saturation_delay_ratio * delay_ms, s.saturation_min_queue_ms)
    if far and growing:
        best_i = max(range(len(ladder)), key=lambda i: (cap[i] or 0.0, -i))
        if cap[cur_i] is None or cap[best_i] is None:
            return cur_i, Reason.SATURATED, (
                f"saturated (queue {q:.1f} ms vs max delay {delay_ms:g} ms, backlog growing) "
                "and no batch curve to show whether batching gains: only more replicas surely help"
            )
        if best_i != cur_i and cap[best_i] >= cap[cur_i] * s.min_gain:
            return best_i, Reason.SATURATION, (
                f"saturated (queue {q:.1f} ms vs max delay {delay_ms:g} ms, backlog growing): "
                f"{ladder[best_i].name} carries {cap[best_i]:.0f}/s vs {cap[cur_i]:.0f}/s"
            )
        return cur_i, Reason.SATURATED, (
            f"saturated (queue {q:.1f} ms vs max delay {delay_ms:g} ms, backlog growing) and no "
            f"profile adds capacity on this curve: only more replicas help"
        )

    # Failures count as a breach: back off toward latency.
    if failures > s.failure_rps_threshold + EPS:
        return _toward_latency(
            cur_i, floor, demand, s, Reason.FAILURES,
            f"{failures:.2f} failed requests/s (rejected or timed out)",
        )

    # Self-inflicted waiting: requests sit out the delay for batches that never fill.
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
            cur_i, floor, demand, s, Reason.SELF_INFLICTED_WAIT,
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
                cur_i, floor, demand, s, Reason.SLO_BREACH,
                f"p95 {w.p95_ms:.1f} ms over the SLO {s.slo_p95_ms:g} ms without saturation",
            )
        util_ok = w.utilization is None or w.utilization < s.util_ceiling
        if w.p95_ms < s.headroom * s.slo_p95_ms and util_ok:
            if cur_i == len(ladder) - 1:
                return cur_i, Reason.STEADY, "p95 has headroom; already at the last profile"
            nxt = ladder[cur_i + 1]
            fills = demand * nxt.max_queue_delay_us / 1e6 >= min(nxt.effective_preferred)
            busy = b is not None and b >= 0.8 * max(cur.effective_preferred)
            if fills or busy:
                util = "n/a" if w.utilization is None else f"{w.utilization:.0%}"
                return cur_i + 1, Reason.HEADROOM, (
                    f"p95 {w.p95_ms:.1f} ms < {s.headroom:g} x SLO and utilisation {util}: "
                    f"batch harder"
                )
            return cur_i, Reason.STEADY, (
                f"p95 has headroom, but {demand:.0f}/s would not fill {nxt.name}'s batches "
                f"of {min(nxt.effective_preferred)} within its delay"
            )
    return cur_i, Reason.STEADY, "inside the band"


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
