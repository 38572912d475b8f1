"""The rules: :data:`RULES`, an ordered table; the first rule that answers names the target.

Each rule is a function from the :class:`~autobatch.policy.context.Context` to a
:class:`~autobatch.policy.types.Recommendation` (a target, a reason, a message),
or None to let the next rule judge. The table's order is the priority; when no
rule answers, :func:`steady` holds. :func:`autobatch.policy.decide` then
confirms, dwells and stabilizes what :func:`recommend` returns. Why the rules
are what they are, and the table with what each reads: docs/policy.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from autobatch.policy.capacity import batch_estimate, batch_ms, wait_ms
from autobatch.policy.context import EPS, Context
from autobatch.policy.settings import PolicySettings
from autobatch.policy.types import Reason, Recommendation

__all__ = ["RULES", "Rule", "recommend", "steady", "toward_capacity", "toward_latency"]

Judge = Callable[[Context], "Recommendation | None"]


@dataclass(frozen=True)
class Offer:
    """A move a judgement found, or why it found none (both None: it did not judge)."""

    move: Recommendation | None = None
    refused: str | None = None


@dataclass(frozen=True)
class Candidate:
    """A profile above the live one that pays."""

    index: int
    predicted_p95_ms: float
    share: float
    """Of the device time per request it saves."""


@dataclass(frozen=True)
class Search:
    """The best candidate above, and why each other profile above was refused."""

    best: Candidate | None
    refused: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    """One row of :data:`RULES`."""

    kind: str
    """``survival``, ``protective`` or ``efficiency``: the section of the table."""
    judge: Judge
    reads: tuple[str, ...]
    """The context figures, window fields and settings it reads (docs/policy.md's table)."""

    @property
    def name(self) -> str:
        return self.judge.__name__

    @property
    def fires(self) -> str:
        """When it answers: the first paragraph of its docstring."""
        doc = (self.judge.__doc__ or "").strip().split("\n\n")[0]
        return " ".join(doc.split())


def recommend(ctx: Context) -> Recommendation:
    """The first answer of :data:`RULES` in order, else :func:`steady`'s."""
    for rule in RULES:
        rec = rule.judge(ctx)
        if rec is not None:
            return rec
    return steady(ctx)


# -- survival: the profile cannot carry the load, now or within the reaction time ---------------


def overload(ctx: Context) -> Recommendation | None:
    """More arrives than the live profile carries, in one window; or the backlog grew
    ``survival.overload_windows`` windows in a row and takes over
    ``survival.overload_backlog_ratio`` x the SLO to drain: toward capacity."""
    s, w, c = ctx.settings, ctx.window, ctx.capacity.rps[ctx.current]
    if c is None:
        return None
    over = w.arrival_rps > c * s.survival.overload_ratio + EPS
    backlog = w.pending_requests or 0.0
    drain_ms = backlog / max(c, EPS) * 1000.0
    if not (over or (_backlog_grew(ctx) and drain_ms > s.survival.overload_backlog_ratio * s.slo_p95_ms)):
        return None
    why = (
        f"overload: {w.arrival_rps:.0f}/s arrive, {ctx.profile.name} carries {c:.0f}/s"
        if over else
        f"overload: the backlog grew {s.survival.overload_windows} windows in a row to "
        f"{backlog:.0f} requests ({drain_ms:.0f} ms to drain at {c:.0f}/s)"
    )
    return toward_capacity(ctx, ctx.demand_rps, Reason.OVERLOAD, why)


def saturation(ctx: Context) -> Recommendation | None:
    """The queue far beyond the max delay (a backlog) and the backlog persisting
    ``survival.overload_windows`` windows (grown, or deeper than the largest batch): toward capacity;
    without a curve, hold as saturated."""
    # One window of it is noise at a moderate load on a profile without a delay; a
    # survival move acts at once, so it must not act on that.
    if not (ctx.queue_is_backlog and _backlog_persists(ctx, max(ctx.profile.effective_preferred))):
        return None
    what = (f"saturated (queue {ctx.window.mean_queue_ms:.1f} ms vs max delay {ctx.delay_ms:g} ms, "
            "backlog growing)")
    if ctx.capacity.rps[ctx.current] is None:
        return Recommendation(ctx.current, Reason.SATURATED, (
            f"{what} and no batch curve to show whether batching gains: only more replicas surely help"))
    return toward_capacity(ctx, ctx.demand_rps, Reason.SATURATION, what)


def forecast(ctx: Context) -> Recommendation | None:
    """The arrivals projected over the reaction time, x ``capacity.margin``, exceed what the
    live profile carries, and the trend stands out of the noise: toward a profile that
    carries them."""
    f, c = ctx.forecast, ctx.capacity.rps[ctx.current]
    if f is None or c is None or not f.rising or f.rps * ctx.settings.capacity.margin <= c + EPS:
        return None
    reaction = round(ctx.reaction_s or 0.0, 2)
    rec = toward_capacity(ctx, f.rps, Reason.FORECAST, (
        f"forecast: arrivals rising {f.trend_rps:+.1f}/s per window, {f.rps:.0f}/s in {reaction:g} s; "
        f"{ctx.profile.name} carries {c:.0f}/s"))
    return rec if rec.target != ctx.current else None


def shared(ctx: Context) -> Recommendation | None:
    """Others use at least ``device.shared_min`` of the device (or, with ``device.floor_alone``,
    the window says what the device does), and the live profile's p95 with its batches
    stretched as the window measured would pass ``device.act_p95`` x the SLO: to the profile
    nearest the live one predicted under ``device.target_p95`` x the SLO, else to the most
    latency-oriented one, of those that carry the load."""
    # The summary p95 would show the breach after up to a minute; the stretch shows it in
    # the first window the co-tenants share, so this acts on one window, as a survival move.
    # The fallback is the rung that waits least: near saturation on a shared device a wait
    # costs more than the estimate says (simulated: 85 ms for a waiting rung, 62 for the default).
    pred, slo = ctx.p95_predicted, ctx.settings.slo_p95_ms
    act = ctx.settings.device.act_p95 * slo
    if not ctx.floor_counts or ctx.current == 0 or not pred or pred[ctx.current] <= act + EPS:
        return None
    cap, need = ctx.capacity.rps, ctx.demand_rps * ctx.settings.capacity.margin
    below = [i for i in range(ctx.current - 1, -1, -1) if (c := cap[i]) is None or c >= need]
    if not below:
        return None
    fits = [i for i in below if pred[i] <= ctx.settings.device.target_p95 * slo + EPS]
    target = fits[0] if fits else below[-1]
    return Recommendation(target, Reason.SHARED, (
        f"{ctx.device_note}; {ctx.profile.name}'s p95 would be ~{pred[ctx.current]:.0f} ms > "
        f"{_act_limit(ctx.settings)} "
        f"at {ctx.demand_rps:.0f}/s, {ctx.ladder[target].name}'s ~{pred[target]:.0f} ms"))


# -- protective: failures ---------------------------------------------------------------------


def failures(ctx: Context) -> Recommendation | None:
    """Rejected or timed-out requests over ``protective.failure_rps_threshold``: a step toward latency."""
    if ctx.failures_rps <= ctx.settings.protective.failure_rps_threshold + EPS:
        return None
    why = f"{ctx.failures_rps:.2f} failed requests/s (rejected or timed out)"
    return toward_latency(ctx, Reason.FAILURES, why)


# -- efficiency toward latency: a wait that buys nothing --------------------------------------
# Before the p95 rules: these explain a slow p95 better than "back off", and are stabilized.


def self_inflicted_wait(ctx: Context) -> Recommendation | None:
    """Requests sit out the max delay for batches that never fill while the instances idle,
    and the wait buys no device time (or requests take over headroom x SLO): a step toward
    latency."""
    if not ctx.waiting or ctx.wait_pays is not None:
        return None
    if ctx.current == 0:
        return Recommendation(ctx.current, Reason.STEADY,
                              "waiting at the most latency-oriented profile already")
    w = ctx.window
    return toward_latency(ctx, Reason.SELF_INFLICTED_WAIT, (
        f"queue {w.mean_queue_ms:.1f} ms near max delay {ctx.delay_ms:g} ms while batches average "
        f"{w.mean_batch_size:.1f} < preferred {min(ctx.profile.effective_preferred)}"))


def no_gain(ctx: Context) -> Recommendation | None:
    """Busy instances (at least ``efficiency.wait_max_busy``), requests queuing near the max delay, and the
    profile below seen or learned (only seen, with ``efficiency.no_gain_needs_seen``) to cost about
    the same device time at this load: the wait only adds latency; a step toward latency."""
    # Near saturation a wait that saves nothing only adds latency (measured: docs/policy.md).
    s, w = ctx.settings, ctx.window
    if ctx.current == 0 or not ctx.costs or ctx.delay_ms <= 0:
        return None
    share, q, eff = w.busy_share, w.mean_queue_ms, s.efficiency
    if share is None or share < eff.wait_max_busy or q is None or q < eff.near_delay_ratio * ctx.delay_ms:
        return None
    below = ctx.saving(ctx.current, ctx.current - 1)
    low, cur = ctx.costs[ctx.current - 1], ctx.costs[ctx.current]
    trusted = ("seen",) if eff.no_gain_needs_seen else ("seen", "learned")
    if not ctx.same_cost(below) or low.source not in trusted:
        return None
    return toward_latency(ctx, Reason.NO_GAIN, (
        f"no gain: at {ctx.demand_rps:.0f}/s {ctx.ladder[ctx.current - 1].name} spends {low.ms:.2f} ms of "
        f"device time per request ({low.source}) vs {cur.ms:.2f}, {max(-below.freed, 0.0):.0%} of the "
        f"instances' time, while requests queue {q:.1f} ms (max delay {ctx.delay_ms:g} ms) on "
        f"instances {share:.0%} busy"))


# -- protective: the p95, once trusted (the summary remembers the last profile for a minute) ----


def relieved(ctx: Context) -> Recommendation | None:
    """A breach on a profile a relief move reached, but p95 no worse than the profile it
    left read: hold."""
    left, p95 = ctx.state.relief_from, ctx.window.p95_ms
    if not ctx.breach or left is None or ctx.current == 0 or p95 is None or p95 > left[1] + EPS:
        return None
    return Recommendation(ctx.current, Reason.RELIEVED, (
        f"{_breach(ctx)}, but under the {left[1]:.1f} ms {left[0]} read when relief left it"))


def slo_breach(ctx: Context) -> Recommendation | None:
    """p95 (or p99) over the SLO without saturation, while the window's own requests take at
    least ``trust.breach_min_mean`` x the SLO: a step toward latency."""
    if not ctx.breach or ctx.current == 0:
        return None
    return toward_latency(ctx, Reason.SLO_BREACH, _breach(ctx))


def relief(ctx: Context) -> Recommendation | None:
    """A breach at the most latency-oriented profile: the most latency-oriented profile above
    that spends ``efficiency.min_saving`` less device time, frees
    ``efficiency.min_freed_share`` of the instances' time and carries the load; else hold at
    the limit, saying why."""
    if not ctx.breach or ctx.current != 0:
        return None
    offer = _relief_offer(ctx)
    if offer.move is not None:
        return offer.move
    if offer.refused is None:
        return toward_latency(ctx, Reason.SLO_BREACH, _breach(ctx))
    rec = toward_latency(ctx, Reason.SLO_BREACH, f"{_breach(ctx)} ({offer.refused})")
    return Recommendation(rec.target, rec.reason, rec.message, {"relief": offer.refused})


# -- efficiency ---------------------------------------------------------------------------------


def efficiency(ctx: Context) -> Recommendation | None:
    """A profile above saves ``efficiency.min_saving`` of the device time per request and frees
    ``efficiency.min_freed_share`` of the instances' time, its predicted p95 stays under headroom x SLO
    (and, on a shared device or with ``device.floor_alone``, as the shared rule would read it
    once it serves, under where it acts, or the band ``device.climb_p95`` under that)
    and it carries the load, with room to make the move (``efficiency.max_busy``,
    ``efficiency.max_load``, ``efficiency.max_p95``): a step toward throughput."""
    return _step_up(ctx).move


def low_load(ctx: Context) -> Recommendation | None:
    """The profile below costs about the same device time (``efficiency.latency_tolerance``), carries the
    load without a backlog, and the instances idle (busy under ``efficiency.wait_max_busy``): a step
    toward latency. When nothing arrives, hold.

    In a lull no request waits, so a step buys nothing, and the profile that served the load
    before it is the best guess for what comes next: bursty traffic stepped down in each idle
    gap and met the next burst at the default (docs/policy.md, "Idle gaps")."""
    share = ctx.window.busy_share
    busy = share is not None and share >= ctx.settings.efficiency.wait_max_busy
    if ctx.current == 0 or not ctx.costs or busy:
        return None
    if ctx.demand_rps <= EPS:
        return Recommendation(ctx.current, Reason.STEADY, (
            f"idle: nothing arrives, so nothing waits on {ctx.profile.name}'s delay; "
            "held for the load that comes next"))
    below = ctx.saving(ctx.current, ctx.current - 1)
    if not ctx.same_cost(below):
        return None
    f = ctx.capacity.floor[ctx.current - 1]
    if f is not None and f < ctx.demand_rps * ctx.settings.capacity.margin:
        return None
    low, cur = ctx.costs[ctx.current - 1], ctx.costs[ctx.current]
    return Recommendation(ctx.current - 1, Reason.LOW_LOAD, (
        f"low load: at {ctx.demand_rps:.0f}/s {ctx.ladder[ctx.current - 1].name} spends {low.ms:.2f} ms of "
        f"device time per request ({low.source}) vs {cur.ms:.2f}, {max(-below.freed, 0.0):.0%} of the "
        f"instances' time, for less waiting"))


def steady(ctx: Context) -> Recommendation:
    """No rule answers: hold, saying why no step toward throughput pays when one was judged."""
    return Recommendation(ctx.current, Reason.STEADY, _step_up(ctx).refused or "inside the band")


RULES: tuple[Rule, ...] = (
    # survival: the profile cannot carry the load; one window decides
    Rule("survival", overload, (
        "capacity", "demand_rps", "window.arrival_rps", "window.pending_requests", "window.pending_delta",
        "survival.overload_ratio", "survival.overload_windows", "survival.overload_backlog_ratio",
        "capacity.margin", "capacity.min_gain")),
    Rule("survival", saturation, (
        "capacity", "demand_rps", "window.mean_queue_ms", "window.pending_requests", "window.pending_delta",
        "survival.saturation_delay_ratio", "survival.saturation_min_queue_ms", "survival.overload_windows",
        "capacity.margin", "capacity.min_gain")),
    Rule("survival", forecast, ("forecast", "capacity", "capacity.margin", "capacity.min_gain")),
    Rule("survival", shared, (
        "p95_predicted", "stretch", "capacity", "demand_rps", "window.others_share",
        "window.stretch", "window.mean_request_ms", "device.shared_min", "device.floor_alone",
        "device.p95_per_mean", "device.wait_tail", "device.target_p95", "device.act_p95",
        "capacity.margin")),
    # protective: failures
    Rule("protective", failures, (
        "failures_rps", "capacity", "protective.failure_rps_threshold", "protective.failure_reasons",
        "capacity.margin")),
    # efficiency toward latency: a wait that buys nothing
    Rule("efficiency", self_inflicted_wait, (
        "waiting", "wait_pays", "costs", "capacity", "window.mean_queue_ms", "window.mean_batch_size",
        "window.busy_share", "window.mean_request_ms", "efficiency.near_delay_ratio",
        "efficiency.wait_max_busy", "efficiency.latency_tolerance", "efficiency.headroom")),
    Rule("efficiency", no_gain, (
        "costs", "capacity", "window.busy_share", "window.mean_queue_ms", "efficiency.wait_max_busy",
        "efficiency.near_delay_ratio", "efficiency.latency_tolerance", "efficiency.min_freed_share",
        "efficiency.no_gain_needs_seen")),
    # protective: the p95, once trusted
    Rule("protective", relieved, ("breach", "window.p95_ms", "state.relief_from")),
    Rule("protective", slo_breach, (
        "breach", "window.p95_ms", "window.p99_ms", "window.mean_request_ms", "capacity",
        "trust.breach_min_mean", "trust.p95_settle_s")),
    Rule("protective", relief, (
        "breach", "costs", "capacity", "p95_predicted", "window.busy_share", "state.relief_worse",
        "load", "efficiency.min_saving", "efficiency.min_freed_share", "efficiency.max_busy",
        "efficiency.max_load", "stability.stabilization_drop")),
    # efficiency
    Rule("efficiency", efficiency, (
        "p95_trusted", "p95_predicted", "p95_once_live", "breach", "costs", "capacity", "load", "curve",
        "window.p95_ms", "window.utilization", "window.others_share", "window.busy_share",
        "window.mean_request_ms", "efficiency.headroom", "efficiency.util_ceiling", "efficiency.min_saving",
        "efficiency.min_freed_share", "efficiency.max_busy", "efficiency.max_load", "efficiency.max_p95",
        "device.shared_min", "device.floor_alone", "device.p95_per_mean", "device.wait_tail",
        "device.act_p95", "device.climb_p95", "device.own_queue", "window.mean_queue_ms")),
    Rule("efficiency", low_load, (
        "costs", "capacity", "window.busy_share", "efficiency.wait_max_busy", "efficiency.latency_tolerance",
        "efficiency.min_freed_share", "capacity.margin")),
)
"""The rules in priority order: survival first, then failures, the waits that buy nothing,
the p95 rules and the efficiency steps. Add a rule as a row where its priority lies."""


# -- moves along the ladder -----------------------------------------------------------------------


def toward_latency(ctx: Context, reason: Reason, why: str) -> Recommendation:
    """One step toward latency, if the profile below carries the load without a backlog
    (else hold as ``capacity``; at the bottom, as ``at_limit``)."""
    if ctx.current == 0:
        return Recommendation(ctx.current, Reason.AT_LIMIT,
                              f"{why}; already at the most latency-oriented profile")
    lower, c = ctx.ladder[ctx.current - 1], ctx.capacity.floor[ctx.current - 1]
    if c is not None and c < ctx.demand_rps * ctx.settings.capacity.margin:
        return Recommendation(ctx.current, Reason.CAPACITY, (
            f"{why}; but {lower.name} carries only {c:.0f}/s without a backlog, "
            f"for a load of {ctx.demand_rps:.0f}/s"))
    return Recommendation(ctx.current - 1, reason, why)


def toward_capacity(ctx: Context, need_rps: float, reason: Reason, why: str) -> Recommendation:
    """The most latency-oriented profile with more capacity than the live one that carries
    ``need_rps`` with the margin; else the highest-capacity one if it gains ``capacity.min_gain``;
    else hold as ``saturated``."""
    s, cap = ctx.settings, ctx.capacity.rps
    c = cap[ctx.current]
    assert c is not None
    carries = [i for i, x in cap.items()
               if x is not None and x > c + EPS and x >= need_rps * s.capacity.margin - EPS]
    if carries:
        i = min(carries)
        return Recommendation(i, reason, f"{why}: {ctx.ladder[i].name} carries {cap[i]:.0f}/s")
    best = max(range(len(ctx.ladder)), key=lambda i: (cap[i] or 0.0, -i))
    top = cap[best] or 0.0
    if best != ctx.current and top >= c * s.capacity.min_gain - EPS:
        return Recommendation(best, reason, (
            f"{why}: {ctx.ladder[best].name} carries the most, {top:.0f}/s (less than "
            f"{need_rps:.0f}/s x {s.capacity.margin:g})"))
    return Recommendation(ctx.current, Reason.SATURATED,
                          f"{why}; no profile adds capacity on this curve: only more replicas help")


# -- what the rules share ---------------------------------------------------------------------------


def _breach(ctx: Context) -> str:
    return f"p95 {ctx.window.p95_ms:.1f} ms over the SLO {ctx.settings.slo_p95_ms:g} ms without saturation"


def _recent_fresh(ctx: Context) -> list[bool] | None:
    """For each of the last ``survival.overload_windows`` windows, whether it is fresh and after the
    settling of the last switch; None when there are fewer."""
    s, last = ctx.settings, ctx.state.last_switch_s
    tail = list(ctx.history)[-s.survival.overload_windows:]
    if len(tail) < s.survival.overload_windows:
        return None
    return [not h.stale and (last is None or h.start_s >= last + s.trust.settle_s - EPS) for h in tail]


def _backlog_grew(ctx: Context) -> bool:
    """The pending gauge grew in each of the last ``survival.overload_windows`` windows, all fresh and
    after the settling of the last switch."""
    fresh = _recent_fresh(ctx)
    tail = list(ctx.history)[-ctx.settings.survival.overload_windows:]
    return fresh is not None and all(fresh) and all((h.pending_delta or 0.0) > 0 for h in tail)


def _backlog_persists(ctx: Context, deep: float) -> bool:
    """In each of the last ``survival.overload_windows`` fresh windows after the settling of the last
    switch, the backlog grew or held more than ``deep`` requests."""
    fresh = _recent_fresh(ctx)
    tail = list(ctx.history)[-ctx.settings.survival.overload_windows:]
    return fresh is not None and all(fresh) and all(
        (h.pending_delta or 0.0) > 0 or (h.pending_requests or 0.0) > deep for h in tail)


def _relief_offer(ctx: Context) -> Offer:
    """The relief move out of a breach at the bottom, or why there is none (neither: no costs)."""
    s, demand = ctx.settings, ctx.demand_rps
    if not ctx.costs:
        return Offer()
    worse, refused, drop = ctx.state.relief_worse, [], s.stability.stabilization_drop
    for i in range(1, len(ctx.ladder)):
        name, cost, saving = ctx.ladder[i].name, ctx.costs[i], ctx.saving(0, i)
        c = ctx.capacity.rps[i]
        if saving.refused:
            refused.append(saving.refused)
        elif c is not None and c < demand * s.capacity.margin:
            refused.append(f"{name} carries only {c:.0f}/s")
        elif worse is not None and worse[0] == name and (
                drop * worse[1] - EPS <= demand <= worse[1] / drop + EPS):
            refused.append(f"{name} read worse (or did not take) at {worse[1]:.0f}/s")
        elif (pred := ctx.p95_predicted) and pred[i] >= pred[0] - EPS:
            # On a shared device larger batches stretch too: the move must lower the tail.
            refused.append(f"{name}'s p95 would be ~{pred[i]:.0f} ms, the default's ~{pred[0]:.0f}")
        elif (full := ctx.no_room()) is not None:
            return Offer(refused=f"{name} would spend {saving.share:.0%} less device time ({cost.source}), "
                                 f"but {full}")
        else:
            return Offer(Recommendation(i, Reason.RELIEF, (
                f"relief: {_breach(ctx)} at the most latency-oriented profile; {name} spends "
                f"{cost.ms:.2f} ms of device time per request ({cost.source}) vs {ctx.costs[0].ms:.2f} "
                f"at {demand:.0f}/s ({saving.share:.0%} less, {saving.freed:.0%} of the instances' "
                "time): fewer, larger batches")))
    return Offer(refused=f"nothing above relieves it: {'; '.join(refused)}; need "
                         f"{s.efficiency.min_saving:.0%} less device time and "
                         f"{s.efficiency.min_freed_share:.0%} of the instances freed")


def _step_up(ctx: Context) -> Offer:
    """The efficiency step toward throughput, or why none pays when the p95 allows judging
    one (None: the p95 does not: untrusted, over the SLO, or near the headroom)."""
    s, demand = ctx.settings, ctx.demand_rps
    limit = s.efficiency.headroom * s.slo_p95_ms
    p95 = _judged_p95(ctx)
    if ctx.breach or p95 is None or p95 >= limit or not _device_has_room(ctx):
        return Offer()
    if ctx.current == len(ctx.ladder) - 1 or ctx.curve is None:
        return Offer()
    search = _search_above(ctx, p95, limit)
    best = search.best
    if best is None:
        return Offer(refused=f"p95 has headroom, but at {demand:.0f}/s nothing above pays "
                             f"({'; '.join(search.refused)}; need {s.efficiency.min_saving:.0%} less device "
                             f"time and {s.efficiency.min_freed_share:.0%} of the instances freed, p95 under "
                             f"{limit:g} ms)")
    name, cost = ctx.ladder[best.index].name, ctx.costs[best.index]
    full, room = ctx.no_room(), s.efficiency.max_p95 * s.slo_p95_ms
    if full is not None:
        # A reload loads a second copy on the serving devices: near saturation it costs the SLO.
        return Offer(refused=f"{name} would save {best.share:.0%} of the device time ({cost.source}), "
                             f"but {full}: no room to make the move")
    if p95 > room + EPS:
        # While a reload runs the instances serve on shared devices and the tail grows.
        return Offer(refused=f"{name} would save {best.share:.0%} of the device time ({cost.source}), "
                             f"but p95 {p95:.1f} ms is over {s.efficiency.max_p95:.0%} of the SLO "
                             f"({room:g} ms): no room for the move's own disturbance")
    device = f"; {ctx.device_note}" if ctx.device_seen else ""
    return Offer(Recommendation(best.index, Reason.EFFICIENCY, (
        f"efficiency: {name} spends {cost.ms:.2f} ms of device time per request ({cost.source}) vs "
        f"{ctx.costs[ctx.current].ms:.2f} at {demand:.0f}/s ({best.share:.0%} saved), p95 "
        f"{p95:.1f} -> ~{best.predicted_p95_ms:.0f} ms < {limit:g}{device}")))


def _act_limit(s: PolicySettings) -> str:
    """Where the shared rule acts, as its messages say it: ``SLO 60 ms``, ``0.95 x SLO 57 ms``."""
    act = s.device.act_p95
    return f"{'SLO' if act >= 1.0 else f'{act:g} x SLO'} {act * s.slo_p95_ms:g} ms"


def _climb_p95(s: PolicySettings) -> float:
    """The fraction of the SLO a profile's p95 once serving must stay under to be climbed to."""
    return min(s.device.act_p95, s.device.climb_p95)


def _climb_limit(s: PolicySettings) -> str:
    """The climb check's limit, as its refusals say it: the shared rule's, or a band under it."""
    climb = _climb_p95(s)
    return _act_limit(s) if climb >= s.device.act_p95 else f"{climb:g} x SLO {climb * s.slo_p95_ms:g} ms"


def _judged_p95(ctx: Context) -> float | None:
    """The live profile's p95 a step toward throughput is judged from: on a device the policy
    sees, its prediction from the stretch and the window's own requests (the summary would
    remember co-tenants gone a minute ago); elsewhere the summary p95, once trusted."""
    if ctx.p95_predicted:
        return ctx.p95_predicted[ctx.current]
    return ctx.window.p95_ms if ctx.p95_trusted else None


def _device_has_room(ctx: Context) -> bool:
    """Utilisation under ``util_ceiling``: on a device the policy sees, the share others use
    (the model's own busy device is what a step toward throughput frees); elsewhere the
    device's utilisation; without either, room."""
    w = ctx.window
    used = w.others_share if w.others_share is not None else w.utilization
    return used is None or used < ctx.settings.efficiency.util_ceiling


def _search_above(ctx: Context, p95_ms: float, limit_ms: float) -> Search:
    """The profile above saving the most device time among those that pay, whose predicted
    p95 stays under ``limit_ms`` and that carry the load, with its predicted p95; and why
    each other one was refused. A middle rung may form no bigger batches at this rate while
    the next one does, so every profile above is a candidate."""
    s, demand, curve, n = ctx.settings, ctx.demand_rps, ctx.curve, ctx.window.instance_count
    assert curve is not None
    cur, pred = ctx.profile, ctx.p95_predicted
    b_cur = batch_estimate(cur, demand, curve, n)
    best: Candidate | None = None
    refused: list[str] = []
    for i in range(ctx.current + 1, len(ctx.ladder)):
        nxt, saving, c = ctx.ladder[i], ctx.saving(ctx.current, i), ctx.capacity.rps[i]
        if saving.refused:
            refused.append(saving.refused)
            continue
        # What it would add to p95: its extra wait for a batch, and the longer run of the bigger batch.
        b = batch_estimate(nxt, demand, curve, n)
        added = (wait_ms(nxt, demand) - wait_ms(cur, demand)) + max(
            0.0, batch_ms(curve, b) - batch_ms(curve, b_cur))
        predicted = pred[i] if pred else p95_ms + max(0.0, added)
        once = ctx.p95_once_live.get(i) if ctx.floor_counts else None
        if predicted >= limit_ms:
            refused.append(f"{nxt.name} saves {saving.share:.0%} but its p95 would be ~{predicted:.0f} ms")
        elif once is not None and once > _climb_p95(s) * s.slo_p95_ms + EPS:
            # The shared rule would read this from the profile's own requests and move back.
            where = "the shared device" if ctx.shared else "the device"
            refused.append(f"{nxt.name} saves {saving.share:.0%} but, serving on {where}, its "
                           f"p95 would read ~{once:.0f} ms > {_climb_limit(s)}")
        elif c is not None and c < demand * s.capacity.margin:
            refused.append(f"{nxt.name} carries only {c:.0f}/s")
        elif best is None or saving.share > best.share + EPS:
            best = Candidate(i, predicted, saving.share)
    return Search(best, tuple(refused))
