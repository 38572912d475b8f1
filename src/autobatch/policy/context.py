"""What one decision reads, computed once: :class:`Context`, built by :func:`build_context`.

The rules (:mod:`autobatch.policy.rules`) and the stages of
:func:`~autobatch.policy.decide` read the latest window, its history, the state
and the settings, and the figures derived from them here: the demand, every
profile's capacity and device cost, the forecast, whether the p95 is to be
trusted. A new signal is a new field, filled in :func:`build_context`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from autobatch.curve import BatchCurve
from autobatch.policy.capacity import (
    Capacities,
    capacities,
    device_ms_estimate,
    device_stretch,
    mean_wait_ms,
    p95_parts,
)
from autobatch.policy.forecast import Forecast, holt
from autobatch.policy.memory import Cost, device_cost
from autobatch.policy.settings import PolicySettings
from autobatch.policy.types import Observation, State
from autobatch.profiles import Profile

__all__ = ["EPS", "Context", "Saving", "build_context", "demand_rps", "steady_load", "window_signals"]

EPS = 1e-9
"""Float comparisons of rates and times allow this much."""


@dataclass(frozen=True)
class Saving:
    """What a move between two profiles saves in device time at the demand."""

    share: float
    """Of the device time per request (negative: it costs more)."""
    freed: float
    """Of the instances' time (negative: it takes more)."""
    refused: str | None
    """Why it does not pay (under ``efficiency.min_saving``, or freeing under ``efficiency.min_freed_share``);
    None when it does."""


@dataclass(frozen=True)
class Context:
    """Everything one decision reads. Built by :func:`build_context`; frozen."""

    window: Observation
    """The latest window: it drives the decision."""
    history: Sequence[Observation]
    """Every window kept, oldest first, :attr:`window` last."""
    state: State
    """What the policy remembers, with this window's device time learned."""
    settings: PolicySettings
    now_s: float
    current: int
    """The ladder index of the live profile."""
    curve: BatchCurve | None
    """The configured curve overlaid with the windows' live points (None: neither)."""
    demand_rps: float
    """What the profile must carry: the arrivals, or the completions while a backlog drains."""
    made_at_rps: float
    """The rate this window's recommendation counts as made at: the higher of its demand
    and the previous window's (the window straddling a fall saw part of the higher load)."""
    capacity: Capacities
    """What each profile carries on this machine now (the curve's, times the live factor)."""
    forecast: Forecast | None
    """The arrival rate projected over the reaction time (None: off, or too few windows)."""
    costs: Mapping[int, Cost]
    """Each profile's device ms per request at the demand, and its source (empty: no curve)."""
    failures_rps: float
    """Failed requests per second, of the reasons that count."""
    p95_trusted: bool
    """The summary p95 has forgotten the profile before the last switch."""
    p95_stale: str | None
    """Why a p95 over the SLO is not a breach (the window's requests are quick), or None."""
    breach: bool
    """p95 (or p99) over the SLO, trusted, and not stale."""
    stretch: float = 1.0
    """What the live batches take over the curve (:func:`~autobatch.policy.capacity.device_stretch`):
    the window's stretch where it also says what the device does, else 1."""
    p95_predicted: Mapping[int, float] = field(default_factory=dict)
    """On a device the policy sees (the window carries ``others_share``) and with a curve: each
    profile's p95 at the demand with its batches stretched as now
    (:func:`~autobatch.policy.capacity.p95_estimate`), times what the live profile's requests
    showed the estimate misses (its p95 no lower than ``p95_per_mean`` x the window's mean
    request time). Empty elsewhere: the rules read the summary p95 there."""
    p95_once_live: Mapping[int, float] = field(default_factory=dict)
    """Where :attr:`p95_predicted` is given: each profile's p95 as the shared rule would read it
    once that profile serves: its prediction, no lower than ``p95_per_mean`` x its own mean
    request time (the window's, with the live profile's mean wait for a batch and run swapped
    for its own, and ``device.own_queue`` of its queueing for its busy instances taken out).
    The floor multiplies a waiting profile's wait too, so a climb the shared rule would undo
    at once is seen before it is made."""

    @property
    def device_seen(self) -> bool:
        """The window says what the device does (its utilisation against the model's own work)."""
        return self.window.others_share is not None

    @property
    def shared(self) -> bool:
        """Others use at least ``device.shared_min`` of the device."""
        o = self.window.others_share
        return o is not None and o >= self.settings.device.shared_min - EPS

    @property
    def floor_counts(self) -> bool:
        """The shared rule and the climb check read the p95 floor in this window: the device is
        shared, or ``device.floor_alone`` and the window says what the device does."""
        return self.shared or (self.settings.device.floor_alone and self.device_seen)

    @property
    def device_note(self) -> str:
        """Whose the device is, for the messages: shared (and how much the batches stretch), or
        the model's own (a stretch is then its own load's)."""
        o = self.window.others_share
        if o is None:
            return ""
        if self.shared:
            return (f"the device is shared: others use {o:.0%} of it, batches take "
                    f"{self.stretch:.2f}x their curve")
        return f"the device is the model's own (others {o:.0%}): its load, not a co-tenant"

    @property
    def ladder(self) -> tuple[Profile, ...]:
        return self.settings.ladder

    @property
    def profile(self) -> Profile:
        """The live profile."""
        return self.settings.ladder[self.current]

    @property
    def delay_ms(self) -> float:
        """The live profile's max queue delay."""
        return self.profile.max_queue_delay_us / 1000.0

    @property
    def reaction_s(self) -> float | None:
        """How far ahead the forecast looks: one window plus the last actuation."""
        if self.forecast is None:
            return None
        return self.forecast.horizon_windows * _window_s(self.window)

    @property
    def load(self) -> float | None:
        """The demand over what the live profile carries now (its capacity with a deep queue,
        over the stretch on a shared device); None without a capacity."""
        c = self.capacity.rps[self.current]
        return None if c is None or c <= 0 else self.demand_rps / c

    def no_room(self) -> str | None:
        """Why an optional reload has no room now, or None: the instances busier than
        ``efficiency.max_busy``, or the demand over ``efficiency.max_load`` of the live capacity."""
        e, busy, load = self.settings.efficiency, self.window.busy_share, self.load
        if busy is not None and busy > e.max_busy + EPS:
            return f"the instances are {busy:.0%} busy (> {e.max_busy:.0%})"
        if e.max_load is not None and load is not None and load > e.max_load + EPS:
            return (f"the load is {load:.0%} of what {self.profile.name} carries ({self.demand_rps:.0f} "
                    f"of {self.capacity.rps[self.current]:.0f}/s, > {e.max_load:.0%})")
        return None

    @property
    def queue_is_backlog(self) -> bool:
        """Requests queue far beyond the live profile's max delay (``survival.saturation_delay_ratio``
        x the delay, at least ``survival.saturation_min_queue_ms``): a backlog, not the batcher's wait."""
        q, s = self.window.mean_queue_ms, self.settings.survival
        return q is not None and q > max(s.saturation_delay_ratio * self.delay_ms, s.saturation_min_queue_ms)

    @property
    def waiting(self) -> bool:
        """Requests sit out the delay for batches that never fill (mean queue time near the
        max delay, batches under the preferred size) while the instances idle (busy under
        ``efficiency.wait_max_busy``: busier, the queue is the load's)."""
        w, s = self.window, self.settings
        q, b, share = w.mean_queue_ms, w.mean_batch_size, w.busy_share
        return (
            q is not None and b is not None and self.delay_ms > 0
            and q >= s.efficiency.near_delay_ratio * self.delay_ms
            and b < min(self.profile.effective_preferred)
            and (share is None or share < s.efficiency.wait_max_busy)
        )

    @property
    def wait_pays(self) -> str | None:
        """Why the wait is worth it while :attr:`waiting`, or None: the profile below would
        cost device time the band does not allow, and requests stay under headroom x SLO."""
        if not self.waiting or self.current == 0 or not self.costs:
            return None
        below = self.saving(self.current, self.current - 1)
        mean = self.window.mean_request_ms
        limit = self.settings.efficiency.headroom * self.settings.slo_p95_ms
        if self.same_cost(below) or mean is None or mean >= limit:
            return None
        low, cur = self.costs[self.current - 1], self.costs[self.current]
        return (f"the wait pays: {self.ladder[self.current - 1].name} would spend {low.ms:.2f} ms of device "
                f"time per request ({low.source}) vs {cur.ms:.2f}, {-below.freed:.0%} of the instances' "
                f"time; mean request {mean:.1f} ms")

    def freed_share(self, dev_from_ms: float, dev_to_ms: float) -> float:
        """The share of the instances' time a move from ``dev_from_ms`` to ``dev_to_ms`` per
        request frees at the demand (negative: it costs)."""
        n = self.window.instance_count or 1
        return (dev_from_ms - dev_to_ms) * self.demand_rps / 1000.0 / n

    def saving(self, frm: int, to: int) -> Saving:
        """What moving from profile ``frm`` to ``to`` (ladder indices) saves; needs costs."""
        s, cur, cost = self.settings, self.costs[frm], self.costs[to]
        share = 1.0 - cost.ms / cur.ms if cur.ms > 0 else 0.0
        freed = self.freed_share(cur.ms, cost.ms)
        refused = None
        if share < s.efficiency.min_saving - EPS or freed < s.efficiency.min_freed_share - EPS:
            refused = (f"{self.ladder[to].name} saves {_share(share)} ({cost.source}), "
                       f"frees {_share(freed)}")
        return Saving(share, freed, refused)

    def same_cost(self, below: Saving) -> bool:
        """Whether a step toward latency with ``below`` (:meth:`saving` to the profile below)
        gives up nothing: it costs at most ``efficiency.latency_tolerance`` more device time per
        request, or under half ``efficiency.min_freed_share`` of the instances' time."""
        s = self.settings
        dev_low, dev_cur = self.costs[self.current - 1].ms, self.costs[self.current].ms
        return (dev_low <= dev_cur * (1 + s.efficiency.latency_tolerance) + EPS
                or -below.freed < s.efficiency.min_freed_share / 2 - EPS)

    def signals(self) -> dict[str, Any]:
        """The figures the decision rested on, for the log, /status and replay."""
        f = self.forecast
        reaction = self.reaction_s
        sig = window_signals(self.window, self.profile)
        sig.update({
            "demand_rps": round(self.demand_rps, 3),
            "capacity_rps": {p.name: _round(self.capacity.rps[i]) for i, p in enumerate(self.ladder)},
            "live_factor": _round(self.capacity.factor, 3),
            "forecast_rps": None if f is None else round(f.rps, 1),
            "forecast_trend_rps": None if f is None else round(f.trend_rps, 2),
            "forecast_shifts": None if f is None else f.shifts,
            "reaction_s": None if reaction is None else round(reaction, 2),
        })
        if self.device_seen:
            sig["stretch_used"] = round(self.stretch, 3)
            sig["device"] = "shared" if self.shared else "own"
        if self.p95_predicted:
            sig["p95_predicted_ms"] = {self.ladder[i].name: round(v, 1)
                                       for i, v in self.p95_predicted.items()}
        if self.p95_once_live:
            sig["p95_once_live_ms"] = {self.ladder[i].name: round(v, 1)
                                       for i, v in self.p95_once_live.items()}
        if self.costs:
            sig["device_ms_expected"] = {self.ladder[i].name: round(c.ms, 3) for i, c in self.costs.items()}
            sig["device_ms_source"] = {self.ladder[i].name: c.source for i, c in self.costs.items()}
        sig["failures_rps"] = self.failures_rps
        pays = self.wait_pays
        if pays is not None:
            sig["wait"] = pays
        sig["p95_trusted"] = self.p95_trusted
        if self.p95_stale is not None:
            sig["p95_stale"] = self.p95_stale
        return sig


def build_context(history: Sequence[Observation], state: State, settings: PolicySettings, now_s: float,
                  *, learn: bool = True) -> Context:
    """The context of a decision on ``history``'s last window. ``learn``: remember the device
    time the window's profile spent (False for a window overlapping a switch, whose profile
    was half the old one)."""
    w, s = history[-1], settings
    current = s.index(state.active)
    curve = merged_curve(history, s.curve)
    demand = demand_rps(w)
    stretch = device_stretch(w)
    if learn and steady_load(history, s.capacity.learn_max_step):
        state = _remember_device(state, w, s.ladder[current], demand, curve, s)
    made_at = max(demand, demand_rps(history[-2])) if len(history) > 1 else demand
    trusted = state.last_switch_s is None or w.start_s >= state.last_switch_s + s.trust.p95_settle_s
    p99_over = s.slo_p99_ms is not None and w.p99_ms is not None and w.p99_ms > s.slo_p99_ms
    over = trusted and w.p95_ms is not None and (w.p95_ms > s.slo_p95_ms or p99_over)
    mean = w.mean_request_ms
    predicted, once_live = _p95_predictions(w, s, current, curve, demand, stretch)
    stale = None
    if over and mean is not None and mean < s.trust.breach_min_mean * s.slo_p95_ms - EPS:
        stale = f"mean request {mean:.1f} ms < {s.trust.breach_min_mean:g} x SLO"
    return Context(
        window=w, history=history, state=state, settings=s, now_s=now_s, current=current, curve=curve,
        demand_rps=demand, made_at_rps=made_at, capacity=capacities(history, s, curve, stretch),
        forecast=_forecast(history, state, s),
        costs=_device_costs(w, state, s, current, curve, demand, stretch),
        failures_rps=sum(v for k, v in (w.failure_rps or {}).items() if k in s.protective.failure_reasons),
        p95_trusted=trusted, p95_stale=stale, breach=over and stale is None, stretch=stretch,
        p95_predicted=predicted, p95_once_live=once_live,
    )


def demand_rps(w: Observation) -> float:
    """What the profile must carry: the arrivals, or the completions while a backlog drains."""
    return max(w.arrival_rps, w.inference_rps)


def steady_load(history: Sequence[Observation], max_step: float | None) -> bool:
    """Whether the last window's demand is within ``max_step`` x the previous window's, either
    way (None: not judged, True). The first window, or one after a window that carried
    nothing, is not: the load began within it, so its mean rate understates the rate its
    batches formed at (the demo of 2026-12-02 13:30 learned the default 0.40x its estimate
    from half a window at 150/s read as 67/s)."""
    if max_step is None:
        return True
    if len(history) < 2:
        return False
    now, before = demand_rps(history[-1]), demand_rps(history[-2])
    if before <= 0 or now <= 0:
        return False
    return max(now, before) <= max_step * min(now, before) + EPS


def merged_curve(history: Sequence[Observation], prior: BatchCurve | None) -> BatchCurve | None:
    """The prior curve overlaid with live points, the most recent window winning; on a device
    the policy sees, each window's points over its stretch (the device's own time)."""
    points: dict[int, float] = dict(prior.points) if prior else {}
    for w in history:
        stretch = device_stretch(w)
        for b, ms in (w.batch_curve_ms or {}).items():
            if ms and ms > 0 and math.isfinite(ms):
                points[int(b)] = float(ms) / stretch
    if not points:
        return None
    return BatchCurve(points=points, name="merged")


def window_signals(w: Observation, current: Profile) -> dict[str, Any]:
    """The window's own figures, for every decision on it (a stale one's too)."""
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
        "stretch": w.stretch,
        "others_share": w.others_share,
        "max_queue_delay_ms": current.max_queue_delay_us / 1000.0,
    }


def _window_s(w: Observation) -> float:
    return max(w.end_s - w.start_s, EPS)


def _forecast(history: Sequence[Observation], state: State, s: PolicySettings) -> Forecast | None:
    """Holt's forecast over the latest fresh windows, projected over the reaction time."""
    if not s.forecast.enabled:
        return None
    fresh = [h for h in history if not h.stale][-s.forecast.windows:]
    window_s = _window_s(history[-1])
    actuation = state.last_actuation_s
    if actuation is None:
        actuation = s.forecast.default_actuation_s
    return holt([h.arrival_rps for h in fresh], window_s=window_s,
                horizon_windows=(window_s + actuation) / window_s, alpha=s.forecast.alpha,
                beta=s.forecast.beta, z=s.forecast.z, jump_z=s.forecast.jump_z)


def _device_costs(w: Observation, state: State, s: PolicySettings, current: int, curve: BatchCurve | None,
                  demand: float, stretch: float) -> dict[int, Cost]:
    """Each profile's device ms per request at ``demand``: what it was seen to cost at this
    load, else the estimate (the curve with its live points, at the instance count in use,
    its batches formed at the ``stretch`` of now) corrected by what the windows taught
    (:mod:`autobatch.policy.memory`). In the device's own time, never inflated by others."""
    if curve is None:
        return {}
    live, n = s.ladder[current].name, w.instance_count
    return {i: device_cost(state.device, p.name, demand, device_ms_estimate(p, demand, curve, n, stretch),
                           live) for i, p in enumerate(s.ladder)}


def _remember_device(state: State, w: Observation, current: Profile, demand: float, curve: BatchCurve | None,
                     s: PolicySettings) -> State:
    """The state with the device time the window's profile spent, at the window's load, in the
    device's own time (its compute time over its stretch, where the window says what the
    device does: what the others held the device for is not the model's cost)."""
    measured = w.device_ms_per_request
    if measured is None or w.inference_rps <= 0:
        return state
    stretch = device_stretch(w)
    n = w.instance_count
    estimated = None if curve is None else device_ms_estimate(current, demand, curve, n, stretch)
    device = state.device.remember(current.name, demand, measured / stretch, estimated,
                                   s.capacity.device_alpha)
    return replace(state, device=device)


def _p95_predictions(w: Observation, s: PolicySettings, current: int, curve: BatchCurve | None,
                     demand: float, stretch: float) -> tuple[dict[int, float], dict[int, float]]:
    """:attr:`Context.p95_predicted` and :attr:`Context.p95_once_live` (both empty off a device
    the policy sees, or without a curve; the second also without a mean request time).

    The live profile's p95 is its estimate, but no lower than ``p95_per_mean`` x the window's
    mean request time: co-tenants make some batches much slower than the mean stretch, and
    the requests show by how much. The batch run that explains it (the tail stretch) then
    stretches every other profile's batch too."""
    if w.others_share is None or curve is None:
        return {}, {}
    d = s.device
    parts = {i: p95_parts(p, demand, curve, w.instance_count, stretch) for i, p in enumerate(s.ladder)}
    live = parts[current]
    # Each profile's mean wait for a batch; the floor multiplies ``device.wait_tail`` of it.
    waits = {i: mean_wait_ms(p, demand) for i, p in enumerate(s.ladder)}
    # What the floor leaves unmultiplied of a mean request: the part of a profile's wait that
    # counts once (not more than the live window's queue time, which holds that wait).
    once = {i: (1.0 - d.wait_tail) * waits[i] for i in waits}
    once[current] = min(once[current], w.mean_queue_ms or 0.0)
    seen = 0.0 if w.mean_request_ms is None else p95_floor(w.mean_request_ms, once[current], d.p95_per_mean)
    now = max(live.p95_ms(stretch), seen)
    tail = max(stretch, (now - live.ahead_ms) / live.run_ms) if live.run_ms > 0 else stretch
    pred = {i: part.p95_ms(tail) for i, part in parts.items()}
    if w.mean_request_ms is None:
        return pred, {}
    # Each profile's own part of a mean request: its mean wait for a batch and its batch's run.
    own = {i: waits[i] + parts[i].run_ms * stretch for i in waits}
    # The live profile's queueing for its own busy instances (``device.own_queue`` of it) is not
    # carried to the others: a profile forming bigger batches keeps its instances less busy.
    queued = max(0.0, (w.mean_queue_ms or 0.0) - waits[current])
    rest = max(0.0, w.mean_request_ms - own[current] - d.own_queue * queued)
    return pred, {i: max(pred[i], p95_floor(rest + own[i], once[i], d.p95_per_mean)) for i in pred}


def p95_floor(mean_ms: float, once_ms: float, per_mean: float) -> float:
    """The p95 a mean request time of ``mean_ms`` stands for: ``per_mean`` x it, but for
    ``once_ms`` of it (a wait for a batch, bounded by the max delay), counted once."""
    once = min(max(once_ms, 0.0), mean_ms)
    return per_mean * (mean_ms - once) + once


def _round(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


def _share(x: float) -> str:
    """``x`` as a whole percentage, without the "-0%" of a tiny negative."""
    return f"{round(x, 2) + 0.0:.0%}"
