"""The planner's views: ``plan``, ``simulate`` (also ``--sessions``) and the switching table."""

from __future__ import annotations

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from autobatch.cli.views.cells import ms
from autobatch.curve import PointKind
from autobatch.plan.lanes import Lanes
from autobatch.plan.planner import Plan
from autobatch.plan.sessions import SessionsResult
from autobatch.plan.simulator import SimResult
from autobatch.plan.switching import SwitchingKind, SwitchingMap
from autobatch.plan.verdict import SharedKind, SharedVerdict, VerdictKind

_FLAG = {
    PointKind.MEASURED: "",
    PointKind.INTERPOLATED: "interpolated",
    PointKind.EXTRAPOLATED: "EXTRAPOLATED",
}


def plan_renderable(plan: Plan) -> RenderableType:
    """Everything ``autobatch plan`` prints, top to bottom in the order the plan was made."""
    parts: list[RenderableType] = [
        Text(f"Batch curve {plan.curve.name!r}: SLO {plan.slo_label} {plan.slo_ms:g} ms, "
             f"network {plan.network_ms:g} ms, load: {plan.load.label}", style="bold"),
        Text(""),
        *_equation(plan),
        Text(""),
        *_gains(plan),
        Text(""),
        *_verdict(plan),
        Text(""),
        *_candidates(plan),
    ]
    if plan.shared is not None:
        parts.append(Text(""))
        parts.append(shared_renderable(plan.shared, plan.slo_ms, plan.slo_label))
    if plan.switching is not None:
        parts.append(Text(""))
        parts.append(switching_renderable(plan.switching))
    for s in plan.sessions:
        parts.append(sessions_renderable(s))
    if plan.lanes is not None:
        parts.append(Text(""))
        parts.append(lanes_renderable(plan.lanes))
    return Group(*parts)


def _equation(plan: Plan) -> list[RenderableType]:
    b, ex = plan.budget, plan.example
    return [
        Text("The SLO equation (queue-delay budget)", style="bold"),
        Text(f"  budget = SLO {plan.slo_label} - time of one batch at the max batch size - network"),
        Text(f"  here:    {b.equation()}"),
        Text(
            f"  delay:   budget x (1 - margin {b.margin_frac:g}) = "
            f"{b.delay_ms:.1f} ms  -> max_queue_delay_microseconds {b.delay_us}"
        ),
        Text(
            f"  (the reference article's example: SLO {ex.slo_p99_ms:g} - batch of "
            f"{ex.batch_size} {ex.batch_ms:g} - network {ex.network_ms:g} = {ex.budget_ms:g} ms; "
            f"with the margin, {ex.delay_ms:g} ms)"
        ),
    ]


def _gains(plan: Plan) -> list[RenderableType]:
    gains = Table(box=box.SIMPLE_HEAD, title="Batch gain per size (per-item time vs batch 1)",
                  title_justify="left")
    for col in ("batch", "ms/batch", "ms/item", "gain", "items/s", "point"):
        gains.add_column(col, justify="right" if col != "point" else "left")
    for g in plan.gains:
        gains.add_row(
            str(g.batch_size),
            f"{g.ms:.2f}",
            f"{g.per_item_ms:.3f}",
            f"{g.gain:.2f}x",
            f"{g.throughput_rps:.0f}",
            _FLAG[g.kind],
        )
    parts: list[RenderableType] = [gains]
    if plan.extrapolated_sizes and not plan.allow_extrapolation:
        parts.append(
            Text(
                f"  sizes {', '.join(map(str, plan.extrapolated_sizes))} lie past the measured "
                f"points: guesses, not used for profiles (measure them with `autobatch measure`, "
                f"or pass --allow-extrapolation)"
            )
        )
    return parts


def _verdict(plan: Plan) -> list[RenderableType]:
    """Does batching pay, and the largest batch that fits the SLO."""
    style = "bold red" if plan.verdict.kind is VerdictKind.LOSES else "bold green"
    if plan.verdict.kind is VerdictKind.MARGINAL:
        style = "bold yellow"
    parts: list[RenderableType] = [Text(f"Verdict: {plan.verdict.message}", style=style)]
    fit = plan.largest_fit
    if fit is None:
        parts.append(Text(f"Largest batch that fits: none: even batch 1 breaks the SLO "
                          f"({plan.curve.estimate(1).ms:.1f} ms + {plan.network_ms:g} ms network)"))
    else:
        flag = f", {fit.batch_kind.value}" if fit.batch_kind is not PointKind.MEASURED else ""
        parts.append(
            Text(
                f"Largest batch whose run time fits: {fit.batch_size} "
                f"({fit.batch_ms:.1f} ms{flag}; budget left {fit.budget_ms:.1f} ms)"
            )
        )
    return parts


def _candidates(plan: Plan) -> list[RenderableType]:
    where = "" if plan.device is None else f"; on {plan.device.label}"
    cands = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title=f"Candidate profiles (simulated; latency includes the {plan.network_ms:g} ms network{where})",
        title_justify="left",
    )
    for col in ("profile", "pref", "max", "delay ms", "p50", "p95", "p99", "rps",
                "batch", "device ms", "max rps", ""):
        cands.add_column(col, justify="left" if col in ("profile", "pref", "") else "right",
                         min_width=14 if col == "profile" else None)
    rec = plan.recommended
    for c in plan.candidates:
        lat = c.at_load.latency
        mark = "recommended" if rec is not None and c is rec else ("" if c.meets_slo else "misses SLO")
        cands.add_row(
            c.profile.name,
            ",".join(map(str, c.profile.preferred_batch_size)) or "none",
            str(c.profile.max_batch_size),
            f"{c.profile.max_queue_delay_us / 1000:.1f}",
            ms(lat and lat.p50_ms),
            ms(lat and lat.p95_ms),
            ms(lat and lat.p99_ms),
            f"{c.at_load.throughput_rps:.1f}",
            f"{c.at_load.mean_batch:.2f}",
            ms(c.device_ms if c.device_ms == c.device_ms else None),
            f"{c.max_rate_rps:.0f}",
            mark,
        )
    parts: list[RenderableType] = [cands]
    device_ms = ("the model's own device work per request, not its time stretched by the others"
                 if plan.device is not None else "instance time per request")
    parts.append(Text("  pref: preferred batch sizes (none: Triton's default, read as [max]); max: max "
                      "batch size. p50/p95/p99 (ms), rps (throughput), batch (mean size) and device ms "
                      f"({device_ms}) at the given load; max rps: the highest Poisson rate "
                      f"with {plan.slo_label} within the SLO. Recommended: the least device time within "
                      f"the SLO, the lowest {plan.slo_label} where it saves under 15%"))
    if rec is None:
        who = " (or fewer co-tenants)" if plan.device is not None and plan.device.cotenants else ""
        parts.append(Text(f"No candidate keeps {plan.slo_label} within the SLO at this load: only more "
                          f"instances or replicas{who} help.", style="bold red"))
    return parts


_SHARED_STYLE = {
    SharedKind.FREES: "bold green",
    SharedKind.NEEDED: "bold cyan",
    SharedKind.BREAKS: "bold yellow",
    SharedKind.FULL: "bold red",
    SharedKind.NO_GAIN: "bold yellow",
}


def shared_renderable(v: SharedVerdict, slo_ms: float, label: str = "p99") -> RenderableType:
    """Each candidate with the device to the model and with the co-tenants, and the verdict."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
              title=f"With co-tenants: {v.device} (simulated, SLO {label} {slo_ms:g} ms)")
    for col in ("profile", "alone p95", "alone busy", "shared p95", "shared p99", "device busy",
                "model share", "served", "co-tenant items/s", ""):
        t.add_column(col, justify="left" if col in ("profile", "") else "right")
    for o in v.options:
        mark = ("best alone, best shared" if o.name == v.best_alone == v.best_shared
                else "best alone" if o.name == v.best_alone
                else "best shared" if o.name == v.best_shared
                else "" if o.shared_ok else "misses SLO")
        t.add_row(o.name, ms(o.alone_p95_ms), f"{o.alone_busy:.0%}", ms(o.shared_p95_ms),
                  ms(o.shared_p99_ms), f"{o.shared_busy:.0%}", f"{o.model_share:.0%}",
                  f"{o.served:.0%}", f"{o.cotenant_items_per_s:.0f}", mark)
    note = Text("  alone: the model's instances only; busy: the device's busy share (every tenant); "
                "model share: the model's own work over the run; served: completed / offered.")
    return Group(t, note, Text(f"With co-tenants: {v.message}", style=_SHARED_STYLE[v.kind]))


def lanes_renderable(lanes: Lanes) -> RenderableType:
    """Each lane's latency with the two-lane profile and with its base (one queue for all)."""
    prof = lanes.profile
    t = Table(box=box.SIMPLE_HEAD, title_justify="left", title=(
        f"Priority lanes on {lanes.base.name} at {lanes.rate_rps:g} rps (simulated): "
        f"priority_levels {prof.priority_levels}, default level {prof.default_priority_level}, "
        f"preferred {','.join(map(str, prof.preferred_batch_size)) or '-'}, wait "
        f"{prof.max_queue_delay_us / 1000:g} ms"))
    for col in ("lane", "priority", "share", "p50 lanes", "p99 lanes", "p50 one queue", "p99 one queue"):
        t.add_column(col, justify="left" if col == "lane" else "right")
    for lane in lanes.lanes:
        w, wo = lane.with_lanes, lane.without_lanes
        t.add_row(lane.name, str(lane.level), f"{lane.share:.0%}", ms(w and w.p50_ms), ms(w and w.p99_ms),
                  ms(wo and wo.p50_ms), ms(wo and wo.p99_ms))
    note = Text(
        f"  Urgent requests (priority 1) go ahead of every batchable one; mean batch "
        f"{lanes.mean_batch_with:.2f} with lanes, {lanes.mean_batch_without:.2f} without. Triton has one "
        "max_queue_delay per model: a lone urgent request on an idle model still waits it when no "
        "preferred size can form. With priority levels Triton stops prefetching batches: on the real "
        "server the batchable lane pays more than predicted here (docs/planner.md, Priority lanes).")
    return Group(t, note)


_SWITCHING_STYLE = {
    SwitchingKind.DEFAULT: "bold green",
    SwitchingKind.STATIC: "bold green",
    SwitchingKind.PAYS: "bold cyan",
    SwitchingKind.NEEDED: "bold cyan",
    SwitchingKind.LATENCY: "bold yellow",
    SwitchingKind.OVERLOADED: "bold red",
}


def switching_table(sw: SwitchingMap, title: str | None = None) -> Table:
    """Each static profile and the oracle: per phase share over the SLO / p95, and device time."""
    where = "" if sw.device is None else f"; {sw.device}"
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left", title=title or (
        f"Does switching pay here? {sw.schedule}, {sw.instances} instance(s), SLO {sw.slo_ms:g} ms "
        f"(simulated; oracle reacts {sw.reaction_s:g} s into each phase{where})"))
    t.add_column("strategy")
    for p in sw.oracle.phases:
        t.add_column(f"{p.phase} {p.rate_rps:g}/s\n> SLO / p95", justify="right")
    t.add_column("device ms\nper request", justify="right")
    t.add_column("vs default", justify="right")
    names = list(sw.oracle.cotenants_bps)
    if names:
        t.add_column("co-tenants\nbatches/s", justify="right")
    default = next((s for s in sw.statics if s.name == "triton-default"), None)
    for s in (*sw.statics, sw.oracle):
        cells = [f"{p.over_slo:.1%} / {ms(p.p95_ms)}" for p in s.phases]
        ratio = ("-" if default is None or default.device_ms <= 0
                 else f"{s.device_ms / default.device_ms:.2f}x")
        name = s.name if s is not sw.oracle else "oracle: " + " > ".join(
            dict.fromkeys(p.profile for p in s.phases))
        extra = [" ".join(f"{s.cotenants_bps.get(n, 0.0):.1f}" for n in names)] if names else []
        t.add_row(name, *cells, f"{s.device_ms:.2f}", ratio, *extra)
    return t


def switching_renderable(sw: SwitchingMap) -> RenderableType:
    return Group(
        switching_table(sw),
        Text(f"Does switching pay? {sw.verdict.message}", style=_SWITCHING_STYLE[sw.verdict.kind]),
    )


def sim_renderable(result: SimResult, title: str) -> RenderableType:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for col in ("requests", "completed", "rejected", "thr rps", "p50", "p95", "p99", "max",
                "queue p95", "mean batch", "util"):
        t.add_column(col, justify="right")
    lat, q = result.latency, result.queue
    t.add_row(
        str(result.requests),
        str(result.completed),
        str(result.rejected),
        f"{result.throughput_rps:.1f}",
        ms(lat and lat.p50_ms),
        ms(lat and lat.p95_ms),
        ms(lat and lat.p99_ms),
        ms(lat and lat.max_ms),
        ms(q and q.p95_ms),
        f"{result.mean_batch:.2f}",
        f"{result.utilisation:.0%}",
    )
    parts: list[RenderableType] = [t]
    if result.phases:
        ph = Table(box=box.SIMPLE_HEAD, title="Per phase", title_justify="left")
        for col in ("phase", "requests", "thr rps", "p50", "p95", "p99", "mean batch", "rejected"):
            ph.add_column(col, justify="left" if col == "phase" else "right")
        for p in result.phases:
            pl = p.latency
            ph.add_row(p.name, str(p.requests), f"{p.throughput_rps:.1f}", ms(pl and pl.p50_ms),
                       ms(pl and pl.p95_ms), ms(pl and pl.p99_ms), f"{p.mean_batch:.2f}",
                       str(p.rejected))
        parts.append(ph)
    if result.priorities:
        pr = Table(box=box.SIMPLE_HEAD, title="Per priority level", title_justify="left")
        for col in ("level", "requests", "completed", "rejected", "p50", "p99"):
            pr.add_column(col, justify="right")
        for p in result.priorities:
            pl = p.latency
            pr.add_row(str(p.level), str(p.requests), str(p.completed), str(p.rejected),
                       ms(pl and pl.p50_ms), ms(pl and pl.p99_ms))
        parts.append(pr)
    notes = []
    if result.rows != result.requests and result.rows:
        notes.append(f"{result.rows} rows in {result.requests} requests: batch sizes count rows "
                     f"({result.mean_batch_requests:.2f} requests per batch)")
    if result.rejected:
        rej = result.rejection
        notes.append(f"rejected: {result.rejected_full} at arrival (queue full), {result.rejected_timeout} "
                     f"timed out in the queue"
                     + (f" (answered {rej.p50_ms:.0f} ms after arrival at p50, {rej.max_ms:.0f} at most)"
                        if rej else ""))
    if result.device is not None:
        parts.extend(_device_parts(result))
    parts.extend(Text(n) for n in notes)
    return Group(*parts)


def _device_parts(result: SimResult) -> list[RenderableType]:
    """The shared device: busy share by tenant (and by phase), and each co-tenant's figures."""
    dev = result.device
    assert dev is not None
    tenants = list(dev.by_tenant)
    how = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in dev.sharing.items() if k != "policy")
    t = Table(box=box.SIMPLE_HEAD, title_justify="left", title=(
        f"Shared device, {dev.sharing['policy']}{' (' + how + ')' if how else ''}: busy share and "
        "each tenant's work over the time"), min_width=60)
    t.add_column("", justify="left")
    t.add_column("busy", justify="right")
    for name in tenants:
        t.add_column(name, justify="right")
    t.add_row("run", f"{dev.busy_share:.0%}", *(f"{dev.by_tenant[n]:.0%}" for n in tenants))
    for p in dev.phases:
        t.add_row(p.name, f"{p.busy_share:.0%}", *(f"{p.by_tenant.get(n, 0.0):.0%}" for n in tenants))
    parts: list[RenderableType] = [t]
    if result.cotenants:
        c = Table(box=box.SIMPLE_HEAD, title="Co-tenants (simulated; latency from submit to done)",
                  title_justify="left")
        for col in ("job", "asks", "batch", "ms alone", "active s", "batches/s", "items/s", "p50", "p95",
                    "stretch", "busy"):
            c.add_column(col, justify="left" if col in ("job", "asks") else "right")
        for ct in result.cotenants:
            lat = ct.latency
            c.add_row(ct.name, ct.demand, str(ct.batch_size), f"{ct.work_ms:.2f}", f"{ct.active_s:g}",
                      f"{ct.throughput_bps:.1f}", f"{ct.items_per_s:.0f}", ms(lat and lat.p50_ms),
                      ms(lat and lat.p95_ms), "-" if ct.stretch is None else f"{ct.stretch:.2f}x",
                      f"{ct.busy_share:.0%}")
        parts.append(c)
    return parts


def sessions_renderable(result: SessionsResult) -> RenderableType:
    """Per session, then all sessions together; the same for a simulated and a measured run."""
    util = "" if result.utilisation is None else f", device busy {result.utilisation:.0%}"
    kind = "measured" if result.measured else "simulated"
    t = Table(
        box=box.SIMPLE_HEAD,
        title=f"Sessions ({kind}): {result.sessions} streams at {result.fps:g} fps for "
        f"{result.duration_s:g} s, policy {result.policy} (mean batch {result.mean_batch:.2f}"
        f"{util})",
        title_justify="left",
    )
    for col in ("session", "delivered fps", "overwritten", "p50 ms", "p99 ms"):
        t.add_column(col, justify="right")
    for s in result.per_session:
        lat = s.latency
        t.add_row(str(s.session), f"{s.fps:.2f}", f"{s.overwritten_frac:.1%}",
                  ms(lat and lat.p50_ms), ms(lat and lat.p99_ms))
    lat = result.latency
    t.add_section()
    t.add_row("all", f"{result.mean_session_fps:.2f} mean, {result.slowest_session_fps:.2f} min",
              f"{result.overwritten_frac:.1%}", ms(lat and lat.p50_ms), ms(lat and lat.p99_ms))
    if result.failed:
        return Group(t, Text(f"{result.failed} frames failed", style="bold red"))
    return t
