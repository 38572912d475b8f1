"""The rules behind one recommendation: survival, protective and efficiency.

:func:`_recommend` reads the latest window (and, for the live capacity and the
forecast, the windows before it) and names a target profile with a
:class:`~autobatch.policy.types.Reason` and a message; :func:`autobatch.policy.decide`
then confirms, dwells and stabilizes it. The kinds of rule, and why the survival
rules look at arrivals rather than latency, are told in :mod:`autobatch.policy.core`.
Pure: no clock, no I/O, no logging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from autobatch.policy.memory import device_cost
from autobatch.policy.settings import PolicySettings
from autobatch.policy.types import Observation, Reason, State
from autobatch.profiles import Profile

EPS = 1e-9


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
    n = history[-1].instance_count if history else None
    cap: dict[int, float | None] = {}
    floor: dict[int, float | None] = {}
    for i, p in enumerate(s.ladder):
        c, f = capacity_rps(p, reference, n), floor_capacity_rps(p, reference, n)
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
                alpha=s.forecast_alpha, beta=s.forecast_beta, z=s.forecast_z,
                jump_z=s.forecast_jump_z)


def _demand(w: Observation) -> float:
    """What the profile must carry: the arrivals, or the completions while a backlog drains."""
    return max(w.arrival_rps, w.inference_rps)


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
    demand = _demand(w)
    sig["demand_rps"] = round(demand, 3)
    capacity = _capacities(history, s, curve)
    cap = capacity.rps
    sig["capacity_rps"] = {p.name: _r(cap[i]) for i, p in enumerate(ladder)}
    sig["live_factor"] = _r(capacity.factor, 3)
    forecast = _forecast(history, state, s, w)
    sig["forecast_rps"] = None if forecast is None else round(forecast.rps, 1)
    sig["forecast_trend_rps"] = None if forecast is None else round(forecast.trend_rps, 2)
    sig["forecast_shifts"] = None if forecast is None else forecast.shifts
    sig["reaction_s"] = None if forecast is None else round(
        forecast.horizon_windows * max(w.end_s - w.start_s, EPS), 2)
    costs = _device_costs(w, state, s, cur_i, curve, demand)
    if costs:
        sig["device_ms_expected"] = {ladder[i].name: round(ms, 3) for i, (ms, _) in costs.items()}
        sig["device_ms_source"] = {ladder[i].name: src for i, (_, src) in costs.items()}

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
    far = queue_is_backlog(w, s, cur)
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

    # Efficiency toward latency: requests sit out the delay for batches that never fill
    # while the instances idle (busier, the queue is the load's, not the wait's), unless
    # the wait buys device time (the lower profile costs more than the band allows) and
    # the window's requests stay inside the headroom.
    share = w.busy_share
    if (
        q is not None
        and b is not None
        and delay_ms > 0
        and q >= s.near_delay_ratio * delay_ms
        and b < min(cur.effective_preferred)
        and (share is None or share < s.wait_max_busy)
    ):
        pays = _wait_pays(w, s, cur_i, demand, costs)
        if pays is not None:
            sig["wait"] = pays
        elif cur_i == 0:
            return cur_i, Reason.STEADY, "waiting at the most latency-oriented profile already"
        else:
            return _toward_latency(
                cur_i, capacity.floor, demand, s, Reason.SELF_INFLICTED_WAIT,
                f"queue {q:.1f} ms near max delay {delay_ms:g} ms while batches average {b:.1f} "
                f"< preferred {min(cur.effective_preferred)}",
            )

    # Efficiency toward latency under load: the instances are busy and requests wait out
    # the delay, and the batches it forms no longer save device time (the profile below
    # was seen, or learned, to cost about the same at this load): the wait only adds
    # latency. With one instance near saturation, efficient and the default both ran
    # 3.0 ms a request at 300/s, and efficient sent 6.4% over the SLO to the default's 0.1%.
    no_gain = _no_gain(w, s, cur_i, demand, costs, delay_ms)
    if no_gain is not None:
        return _toward_latency(cur_i, capacity.floor, demand, s, Reason.NO_GAIN, no_gain)

    # The p95 rules only trust the summary once it has forgotten the previous profile.
    p95_trusted = state.last_switch_s is None or w.start_s >= state.last_switch_s + s.p95_settle_s
    sig["p95_trusted"] = p95_trusted
    if p95_trusted and w.p95_ms is not None:
        breach = w.p95_ms > s.slo_p95_ms or (
            s.slo_p99_ms is not None and w.p99_ms is not None and w.p99_ms > s.slo_p99_ms
        )
        mean = w.mean_request_ms
        if breach and mean is not None and mean < s.breach_min_mean * s.slo_p95_ms - EPS:
            # The summary still holds a past peak; this window's requests are quick.
            sig["p95_stale"] = f"mean request {mean:.1f} ms < {s.breach_min_mean:g} x SLO"
            breach = False
        if breach:
            why = f"p95 {w.p95_ms:.1f} ms over the SLO {s.slo_p95_ms:g} ms without saturation"
            left = state.relief_from
            if left is not None and cur_i > 0 and w.p95_ms <= left[1] + EPS:
                return cur_i, Reason.RELIEVED, (
                    f"{why}, but under the {left[1]:.1f} ms {left[0]} read when relief left it")
            if cur_i == 0:
                relief = _relief_up(w, state, s, cap, demand, costs, why, sig)
                if relief is not None:
                    return relief
                if "relief" in sig:
                    why = f"{why} ({sig['relief']})"
            return _toward_latency(cur_i, capacity.floor, demand, s, Reason.SLO_BREACH, why)
        up = _efficiency_up(w, s, cur_i, curve, cap, demand, costs, sig)
        if up is not None:
            return up

    # Efficiency toward latency at low load: the lower profile costs about the same.
    down = _low_load(w, s, cur_i, capacity.floor, demand, costs)
    if down is not None:
        return down
    return cur_i, Reason.STEADY, sig.pop("efficiency", None) or "inside the band"


def queue_is_backlog(w: Observation, s: PolicySettings, profile: Profile) -> bool:
    """Whether the window's requests queue far beyond ``profile``'s max delay
    (``saturation_delay_ratio`` x the delay, at least ``saturation_min_queue_ms``): a
    backlog, not the batcher's wait."""
    q = w.mean_queue_ms
    delay_ms = profile.max_queue_delay_us / 1000.0
    return q is not None and q > max(s.saturation_delay_ratio * delay_ms, s.saturation_min_queue_ms)


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


def _device_costs(w: Observation, state: State, s: PolicySettings, cur_i: int,
                  curve: BatchCurve | None, demand: float) -> dict[int, tuple[float, str]]:
    """Each profile's device ms per request at ``demand`` and where the figure comes from:
    what it was seen to cost at this load, else the estimate (the curve with its live
    points, at the instance count in use) corrected by what the windows taught
    (:mod:`autobatch.policy.memory`). Empty without a curve."""
    if curve is None:
        return {}
    n = w.instance_count
    current = s.ladder[cur_i].name
    return {
        i: device_cost(state.device, p.name, demand, device_ms_estimate(p, demand, curve, n),
                       current)
        for i, p in enumerate(s.ladder)
    }


def _freed_share(dev_from: float, dev_to: float, demand: float, w: Observation) -> float:
    """The share of the instances' time a move from ``dev_from`` to ``dev_to`` ms per request
    frees at ``demand`` (negative: it costs)."""
    n = w.instance_count or 1
    return (dev_from - dev_to) * demand / 1000.0 / n


def _efficiency_up(
    w: Observation,
    s: PolicySettings,
    cur_i: int,
    curve: BatchCurve | None,
    cap: Mapping[int, float | None],
    demand: float,
    costs: Mapping[int, tuple[float, str]],
    sig: dict[str, Any],
) -> tuple[int, Reason, str] | None:
    """A step toward throughput when it saves device time and p95 keeps its headroom.

    Every profile above the current one is a candidate (a middle rung may form no
    bigger batches than the current one at this rate while the next one does); the
    one saving the most device time among those whose predicted p95 stays under
    headroom x SLO and that carry the load wins. The saving must be ``min_saving``
    of the device time per request and free ``min_freed_share`` of the instances'
    time: at low load a relative saving frees little and still costs the wait.
    """
    ladder = s.ladder
    assert w.p95_ms is not None
    limit = s.headroom * s.slo_p95_ms
    util_ok = w.utilization is None or w.utilization < s.util_ceiling
    if w.p95_ms >= limit or not util_ok:
        return None
    if cur_i == len(ladder) - 1 or curve is None:
        return None
    n = w.instance_count
    cur = ladder[cur_i]
    dev_cur, _ = costs[cur_i]
    b_cur = batch_estimate(cur, demand, curve, n)
    best: tuple[float, int, float, float, str] | None = None
    refused: list[str] = []
    for i in range(cur_i + 1, len(ladder)):
        nxt = ladder[i]
        dev, source = costs[i]
        saving, _, no = _saves(w, s, nxt.name, dev_cur, costs[i], demand)
        if no:
            refused.append(no)
            continue
        # What it would add to p95: its extra wait for a batch, and the longer run of
        # the bigger batch.
        b = batch_estimate(nxt, demand, curve, n)
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
            best = (saving, i, dev, predicted, source)
    if best is None:
        # Not a decision yet: the low-load rule may still step down.
        sig["efficiency"] = (
            f"p95 has headroom, but at {demand:.0f}/s nothing above pays ({'; '.join(refused)}; "
            f"need {s.min_saving:.0%} less device time and {s.min_freed_share:.0%} of the "
            f"instances freed, p95 under {limit:g} ms)"
        )
        return None
    saving, i, dev, predicted, source = best
    busy = w.busy_share
    if busy is not None and busy > s.efficiency_max_busy + EPS:
        # The move would pay, but making it (a reload loads a second copy on the busy
        # devices) would cost the SLO while it runs.
        sig["efficiency"] = (
            f"{ladder[i].name} would save {saving:.0%} of the device time ({source}), but the "
            f"instances are {busy:.0%} busy (> {s.efficiency_max_busy:.0%}): no room to make "
            "the move"
        )
        return None
    room = s.efficiency_max_p95 * s.slo_p95_ms
    if w.p95_ms > room + EPS:
        # ... nor while the tail is already near the headroom: while a reload runs, the
        # instances serve on shared devices and the tail grows.
        sig["efficiency"] = (
            f"{ladder[i].name} would save {saving:.0%} of the device time ({source}), but p95 "
            f"{w.p95_ms:.1f} ms is over {s.efficiency_max_p95:.0%} of the SLO ({room:g} ms): no "
            "room for the move's own disturbance"
        )
        return None
    return i, Reason.EFFICIENCY, (
        f"efficiency: {ladder[i].name} spends {dev:.2f} ms of device time per request "
        f"({source}) vs {dev_cur:.2f} at {demand:.0f}/s ({saving:.0%} saved), p95 "
        f"{w.p95_ms:.1f} -> ~{predicted:.0f} ms < {limit:g}"
    )


def _saves(w: Observation, s: PolicySettings, name: str, dev_cur: float,
           cost: tuple[float, str], demand: float) -> tuple[float, float, str | None]:
    """``(saving, freed, why not)``: the share of the device time per request a move from
    ``dev_cur`` to ``cost`` saves, the share of the instances' time it frees, and why it
    does not pay (under ``min_saving``, or freeing under ``min_freed_share``), None when
    it does."""
    dev, source = cost
    saving = 1.0 - dev / dev_cur if dev_cur > 0 else 0.0
    freed = _freed_share(dev_cur, dev, demand, w)
    if saving < s.min_saving - EPS or freed < s.min_freed_share - EPS:
        return saving, freed, f"{name} saves {_share(saving)} ({source}), frees {_share(freed)}"
    return saving, freed, None


def _share(x: float) -> str:
    """``x`` as a whole percentage, without the "-0%" of a tiny negative."""
    return f"{round(x, 2) + 0.0:.0%}"


def _relief_up(
    w: Observation,
    state: State,
    s: PolicySettings,
    cap: Mapping[int, float | None],
    demand: float,
    costs: Mapping[int, tuple[float, str]],
    why: str,
    sig: dict[str, Any],
) -> tuple[int, Reason, str] | None:
    """A step toward throughput out of a p95 breach at the most latency-oriented profile.

    No step toward latency is left there, and the breach is not saturation (the survival
    rules did not see it) nor the batcher's wait (the bottom rung waits least): requests
    wait for the device time of the ones before them. A profile above that spends
    ``min_saving`` less device time per request at this load and frees
    ``min_freed_share`` of the instances' time serves them in fewer, larger batches (two
    dense_mlp instances on two shared cores, bursts at 150/s: Triton's default sent
    4.3% and 13.0% over the SLO, static ``efficient`` 2.2% and 9.3%). The most
    latency-oriented such profile that carries the load is recommended; none while the
    instances are busier than ``efficiency_max_busy`` (a reload's copy loads on them), nor
    one whose p95 read worse than the bottom's near this rate (``State.relief_worse``).
    """
    ladder = s.ladder
    if not costs:
        return None
    dev_cur, _ = costs[0]
    worse = state.relief_worse
    refused: list[str] = []
    for i in range(1, len(ladder)):
        name = ladder[i].name
        dev, source = costs[i]
        saving, freed, no = _saves(w, s, name, dev_cur, costs[i], demand)
        if no:
            refused.append(no)
            continue
        c = cap[i]
        if c is not None and c < demand * s.capacity_margin:
            refused.append(f"{name} carries only {c:.0f}/s")
            continue
        if worse is not None and worse[0] == name and (
                s.stabilization_drop * worse[1] - EPS <= demand <= worse[1] / s.stabilization_drop + EPS):
            refused.append(f"{name} read worse (or did not take) at {worse[1]:.0f}/s")
            continue
        busy = w.busy_share
        if busy is not None and busy > s.efficiency_max_busy + EPS:
            sig["relief"] = (f"{name} would spend {saving:.0%} less device time ({source}), but the "
                             f"instances are {busy:.0%} busy (> {s.efficiency_max_busy:.0%})")
            return None
        return i, Reason.RELIEF, (
            f"relief: {why} at the most latency-oriented profile; {name} spends {dev:.2f} ms of "
            f"device time per request ({source}) vs {dev_cur:.2f} at {demand:.0f}/s ({saving:.0%} "
            f"less, {freed:.0%} of the instances' time): fewer, larger batches"
        )
    sig["relief"] = (f"nothing above relieves it: {'; '.join(refused)}; need {s.min_saving:.0%} "
                     f"less device time and {s.min_freed_share:.0%} of the instances freed")
    return None


def _wait_ms(p: Profile, rate_rps: float) -> float:
    """How long a batch waits for its preferred size, at most the profile's max delay."""
    delay = p.max_queue_delay_us / 1000.0
    if delay <= 0:
        return 0.0
    fill = (min(p.effective_preferred) - 1) / max(rate_rps, EPS) * 1000.0
    return min(delay, max(0.0, fill))


def _cheaper_below(w: Observation, s: PolicySettings, cur_i: int, demand: float,
                  costs: Mapping[int, tuple[float, str]]) -> tuple[bool, float, float, float, str]:
    """``(about the same, dev_low, dev_cur, extra share, source)``: whether the profile
    below costs about the same device time as the current one (at most
    ``latency_tolerance`` more per request, or under half ``min_freed_share`` of the
    instances' time), so a step toward latency gives up nothing."""
    dev_cur, _ = costs[cur_i]
    dev_low, source = costs[cur_i - 1]
    extra = -_freed_share(dev_cur, dev_low, demand, w)
    same = dev_low <= dev_cur * (1 + s.latency_tolerance) + EPS or extra < s.min_freed_share / 2 - EPS
    return same, dev_low, dev_cur, extra, source


def _wait_pays(w: Observation, s: PolicySettings, cur_i: int, demand: float,
               costs: Mapping[int, tuple[float, str]]) -> str | None:
    """Why waiting for batches that do not fill is worth it here, or None: the profile
    below would cost device time the band does not allow, and the window's mean request
    time stays under headroom x SLO."""
    if cur_i == 0 or not costs:
        return None
    same, dev_low, dev_cur, extra, source = _cheaper_below(w, s, cur_i, demand, costs)
    mean = w.mean_request_ms
    if same or mean is None or mean >= s.headroom * s.slo_p95_ms:
        return None
    return (f"the wait pays: {s.ladder[cur_i - 1].name} would spend {dev_low:.2f} ms of device "
            f"time per request ({source}) vs {dev_cur:.2f}, {extra:.0%} of the instances' time; "
            f"mean request {mean:.1f} ms")


def _no_gain(w: Observation, s: PolicySettings, cur_i: int, demand: float,
             costs: Mapping[int, tuple[float, str]], delay_ms: float) -> str | None:
    """Why the current profile's wait buys nothing under load, or None: busy instances
    (at least ``wait_max_busy``; less busy, the self-inflicted-wait and low-load rules
    judge), requests queuing near the max delay, and the profile below costing about the
    same device time by what the windows showed (``seen`` or ``learned``, never an
    unproven estimate)."""
    if cur_i == 0 or not costs or delay_ms <= 0:
        return None
    share = w.busy_share
    q = w.mean_queue_ms
    if share is None or share < s.wait_max_busy or q is None or q < s.near_delay_ratio * delay_ms:
        return None
    same, dev_low, dev_cur, extra, source = _cheaper_below(w, s, cur_i, demand, costs)
    if not same or source not in ("seen", "learned"):
        return None
    return (f"no gain: at {demand:.0f}/s {s.ladder[cur_i - 1].name} spends {dev_low:.2f} ms of "
            f"device time per request ({source}) vs {dev_cur:.2f}, {max(extra, 0.0):.0%} of the "
            f"instances' time, while requests queue {q:.1f} ms (max delay {delay_ms:g} ms) on "
            f"instances {share:.0%} busy")


def _low_load(
    w: Observation,
    s: PolicySettings,
    cur_i: int,
    floor: Mapping[int, float | None],
    demand: float,
    costs: Mapping[int, tuple[float, str]],
) -> tuple[int, Reason, str] | None:
    """A step toward latency when the lower profile costs about the same device time (at
    most ``latency_tolerance`` more per request, or less than half ``min_freed_share`` of
    the instances' time) and carries the load without a backlog, while the instances
    idle (busy under ``wait_max_busy``)."""
    if cur_i == 0 or not costs:
        return None
    share = w.busy_share
    if share is not None and share >= s.wait_max_busy:
        return None  # not a low load: busy instances queue on either profile
    lower = s.ladder[cur_i - 1]
    same, dev_low, dev_cur, extra, source = _cheaper_below(w, s, cur_i, demand, costs)
    if not same:
        return None
    f = floor[cur_i - 1]
    if f is not None and f < demand * s.capacity_margin:
        return None
    return cur_i - 1, Reason.LOW_LOAD, (
        f"low load: at {demand:.0f}/s {lower.name} spends {dev_low:.2f} ms of device time per "
        f"request ({source}) vs {dev_cur:.2f}, {max(extra, 0.0):.0%} of the instances' time, "
        f"for less waiting"
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
