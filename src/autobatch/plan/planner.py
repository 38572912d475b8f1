"""The planner: does batching pay here, what may wait, and what each profile would do.

:func:`make_plan` puts the pieces together for one curve and one SLO (the gains,
the verdict and the candidate profiles are :mod:`autobatch.plan.verdict`'s, the
load sweep :mod:`autobatch.plan.sweep`'s):

1. the batch gain per size (per-item time against batch 1), every size
   flagged measured, interpolated or extrapolated;
2. a plain verdict: batching *loses* (no size is cheaper per item than batch
   1: serve batch 1 and do not wait), is *marginal* (under 10% saved: batch
   what queues up, never wait for more) or *pays*;
3. the largest batch whose run time fits the SLO, and the SLO equation
   (:mod:`autobatch.plan.slo`) at the profiles' max batch size;
4. candidate profiles, Triton's default first (no preferred sizes, no wait)
   and then latency-soft to aggressive, each run through the simulator at the
   given load and swept over load to find the highest Poisson rate it sustains
   within the SLO; the recommendation follows the controller's objective (the
   SLO first, then the least device time, the lowest latency where device time
   barely differs);
5. does switching pay here? (:mod:`autobatch.plan.switching`): over a schedule
   of load, the default and each profile held static against an oracle that
   switches per phase, on the SLO and on device time.

Sizes past the last measured point are extrapolated guesses: unless the
caller allows extrapolation, profiles never rely on them.

Pure: values in, values out (writing profiles and plots is
:mod:`autobatch.cli.views`'s job).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autobatch.config import check_seed
from autobatch.curve import BatchCurve, PointKind
from autobatch.errors import ConfigError
from autobatch.plan.lanes import Lanes, plan_lanes
from autobatch.plan.sessions import SESSION_POLICIES, SessionsResult, simulate_sessions
from autobatch.plan.simulator import (
    ServiceModel,
    SharedDevice,
    SimResult,
    Workload,
    device_ms_per_request,
    simulate,
)
from autobatch.plan.slo import (
    ARTICLE_EXAMPLE,
    DEFAULT_MARGIN_FRAC,
    Budget,
    check_slo_inputs,
    largest_fitting_batch,
    queue_budget,
)
from autobatch.plan.sweep import SweepPoint, max_sustained_rate
from autobatch.plan.switching import SwitchingMap, pick_profile, switching_map, triton_default
from autobatch.plan.verdict import (
    GainRow,
    SharedOption,
    SharedVerdict,
    Verdict,
    VerdictKind,
    batching_verdict,
    candidate_profiles,
    gain_table,
    shared_verdict,
)
from autobatch.profiles import INT32_MAX, Profile
from autobatch.schedule import Phase, Schedule

__all__ = [
    "Candidate",
    "LoadSpec",
    "Plan",
    "assumed_step",
    "make_plan",
]


# -- the plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadSpec:
    """The load a plan predicts at: a Poisson rate, or periodic streams."""

    rate_rps: float | None = None
    sessions: int | None = None
    fps: float | None = None
    assumed: bool = False
    """No load was given: half the batch-1 capacity was assumed."""

    def __post_init__(self) -> None:
        if self.rate_rps is not None:
            if self.sessions is not None or self.fps is not None:
                raise ConfigError("rate and sessions/fps: give one load, not both")
            if not (math.isfinite(self.rate_rps) and self.rate_rps > 0):
                raise ConfigError(f"rate = {self.rate_rps!r}: must be a number > 0")
        elif (self.sessions is None) != (self.fps is None):
            raise ConfigError("sessions and fps go together: give both")
        elif self.sessions is not None:
            if self.sessions < 1:
                raise ConfigError(f"sessions = {self.sessions!r}: must be an integer >= 1")
            assert self.fps is not None
            if not (math.isfinite(self.fps) and self.fps > 0):
                raise ConfigError(f"fps = {self.fps!r}: must be a number > 0")
        else:
            raise ConfigError("a load needs rate, or sessions with fps")

    @property
    def offered_rps(self) -> float:
        if self.rate_rps is not None:
            return self.rate_rps
        assert self.sessions is not None and self.fps is not None
        return self.sessions * self.fps

    @property
    def label(self) -> str:
        if self.rate_rps is not None:
            text = f"Poisson at {self.rate_rps:g} rps"
            return text + (" (assumed: half the batch-1 capacity)" if self.assumed else "")
        return f"{self.sessions} streams at {self.fps:g} fps ({self.offered_rps:g} rps)"

    def workload(self, duration_s: float, seed: int) -> Workload:
        if self.rate_rps is not None:
            return Workload.poisson(self.rate_rps, duration_s, seed)
        assert self.sessions is not None and self.fps is not None
        return Workload.streams(self.sessions, self.fps, duration_s, seed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_rps": self.rate_rps,
            "sessions": self.sessions,
            "fps": self.fps,
            "offered_rps": round(self.offered_rps, 3),
            "assumed": self.assumed,
            "label": self.label,
        }


def _tail(lat: Any, percentile: int) -> float:
    """The SLO's percentile of ``lat`` (95 or 99)."""
    return float(lat.p95_ms if percentile == 95 else lat.p99_ms)


def _meets(result: SimResult, slo_ms: float, percentile: int = 99) -> bool:
    """Within the SLO at its percentile, and keeping up (a backlog drained after the arrivals stop
    serves less than was offered)."""
    lat = result.latency
    return (lat is not None and _tail(lat, percentile) <= slo_ms
            and result.throughput_rps >= 0.97 * result.offered_rps)


@dataclass(frozen=True)
class Candidate:
    profile: Profile
    at_load: SimResult
    """At the plan's load, on the plan's device (with its co-tenants, if any)."""
    max_rate_rps: float
    sweep: tuple[SweepPoint, ...]
    slo_ms: float
    alone: SimResult | None = None
    """With co-tenants on the device: the same load with the device to the model (its
    instances only), to set beside ``at_load``."""
    slo_percentile: int = 99

    @property
    def device_ms(self) -> float:
        """Device milliseconds per request at the given load: the busy instance time, or on
        a shared device the model's own device work."""
        return device_ms_per_request(self.at_load)

    @property
    def meets_slo(self) -> bool:
        return _meets(self.at_load, self.slo_ms, self.slo_percentile)

    @property
    def meets_slo_alone(self) -> bool:
        return _meets(self.alone if self.alone is not None else self.at_load, self.slo_ms,
                      self.slo_percentile)

    def to_dict(self) -> dict[str, Any]:
        lat = self.at_load.latency
        dev = self.at_load.device
        return {
            "name": self.profile.name,
            "profile": self.profile.to_dict(),
            "summary": self.profile.summary(),
            "at_load": {
                "latency_ms": None
                if lat is None
                else {
                    "p50": round(lat.p50_ms, 3),
                    "p95": round(lat.p95_ms, 3),
                    "p99": round(lat.p99_ms, 3),
                },
                "throughput_rps": round(self.at_load.throughput_rps, 3),
                "mean_batch": round(self.at_load.mean_batch, 3),
                "utilisation": round(self.at_load.utilisation, 4),
                "device_ms_per_request": None if math.isnan(self.device_ms) else round(self.device_ms, 4),
                "device": None if dev is None else dev.to_dict(),
                "cotenants": [c.to_dict() for c in self.at_load.cotenants],
            },
            "alone": None if self.alone is None else {
                "latency_ms": _latency(self.alone),
                "throughput_rps": round(self.alone.throughput_rps, 3),
                "busy_share": None if self.alone.device is None else round(self.alone.device.busy_share, 4),
                "meets_slo": self.meets_slo_alone,
            },
            "meets_slo": self.meets_slo,
            "max_rate_rps": round(self.max_rate_rps, 2),
            "sweep": [p.to_dict() for p in self.sweep],
        }


@dataclass(frozen=True)
class Plan:
    curve: BatchCurve
    slo_ms: float
    """The SLO's latency, at :attr:`slo_percentile`."""
    network_ms: float
    model_max_batch_size: int
    instances: int
    service: ServiceModel
    gains: tuple[GainRow, ...]
    verdict: Verdict
    largest_fit: Budget | None
    budget: Budget
    """The SLO equation at the profiles' max batch size."""
    load: LoadSpec
    candidates: tuple[Candidate, ...]
    sessions: tuple[SessionsResult, ...] = ()
    allow_extrapolation: bool = False
    switching: SwitchingMap | None = None
    """Does switching pay here: the default, each profile and an oracle over a schedule."""
    lanes: Lanes | None = None
    """With a priority mix: the two-lane profile (:mod:`autobatch.plan.lanes`)."""
    device: SharedDevice | None = None
    """The shared device the candidates ran on (None: every instance its own device)."""
    shared: SharedVerdict | None = None
    """With co-tenants: does batching pay with them on the device (:func:`shared_verdict`)."""
    slo_percentile: int = 99
    """95 or 99: the percentile the SLO bounds (``autobatch plan --slo-p95-ms`` or ``--slo-p99-ms``)."""

    @property
    def slo_label(self) -> str:
        return f"p{self.slo_percentile}"

    @property
    def example(self) -> Budget:
        return ARTICLE_EXAMPLE

    @property
    def recommended(self) -> Candidate | None:
        """At the given load, the controller's objective among the candidates within the
        SLO: the least device time, unless it saves under 15% against the one with the lowest
        tail (the SLO's percentile), then that one. With batching that loses, batch 1 whenever it is
        within the SLO."""
        return self._best(alone=False)

    @property
    def recommended_alone(self) -> Candidate | None:
        """The same choice from the runs with the device to the model (no co-tenants)."""
        return self._best(alone=True)

    def _best(self, *, alone: bool) -> Candidate | None:
        ok = [c for c in self.candidates if (c.meets_slo_alone if alone else c.meets_slo)]
        if not ok:
            return None
        soft = next((c for c in ok if c.profile.name == "latency-soft"), None)
        if self.verdict.kind is VerdictKind.LOSES and soft is not None:
            return soft

        def figures(c: Candidate) -> tuple[str, float, float, float]:
            r = c.alone if alone and c.alone is not None else c.at_load
            dev = device_ms_per_request(r)
            return (c.profile.name, 0.0, _tail(r.latency, self.slo_percentile) if r.latency else math.inf,
                    dev if not math.isnan(dev) else math.inf)

        name = pick_profile([figures(c) for c in ok])
        return next(c for c in ok if c.profile.name == name)

    @property
    def extrapolated_sizes(self) -> tuple[int, ...]:
        return tuple(g.batch_size for g in self.gains if g.kind is PointKind.EXTRAPOLATED)

    def profile_documents(self) -> list[dict[str, Any]]:
        """Each candidate as a profile file's content, with a description of what the plan
        predicts for it (:func:`autobatch.profiles.write_profiles` writes them)."""
        docs = []
        for cand in self.candidates:
            data = cand.profile.to_dict()
            lat = cand.at_load.latency
            tail = "-" if lat is None else f"{_tail(lat, self.slo_percentile):.1f}"
            docs.append({
                "name": data.pop("name"),
                "description": (
                    f"autobatch plan for curve {self.curve.name!r}, SLO {self.slo_label} {self.slo_ms:g} ms: "
                    f"at {self.load.label}, {self.slo_label} {tail} ms; within the SLO up to "
                    f"{cand.max_rate_rps:.0f} rps"
                ),
                **data,
            })
        if self.lanes is not None:
            data = self.lanes.profile.to_dict()
            urgent, batchable = self.lanes.lanes
            docs.append({
                "name": data.pop("name"),
                "description": (
                    f"autobatch plan for curve {self.curve.name!r}: two lanes on {self.lanes.base.name}; "
                    f"send urgent requests with priority 1 ({urgent.share:.0%} of "
                    f"{self.lanes.rate_rps:g} rps: p99 {_p99(urgent.with_lanes)} ms, "
                    f"{_p99(urgent.without_lanes)} ms without lanes); batchable p99 "
                    f"{_p99(batchable.with_lanes)} ms"
                ),
                **data,
            })
        return docs

    def to_dict(self) -> dict[str, Any]:
        rec = self.recommended
        return {
            "curve": {"name": self.curve.name, "points": dict(self.curve.points)},
            f"slo_{self.slo_label}_ms": self.slo_ms,
            "slo": {"percentile": self.slo_percentile, "ms": self.slo_ms},
            "network_ms": self.network_ms,
            "model_max_batch_size": self.model_max_batch_size,
            "instances": self.instances,
            "service": {
                "batch_overhead_ms": self.service.batch_overhead_ms,
                "request_overhead_ms": self.service.request_overhead_ms,
                "fixed_latency_ms": self.service.fixed_latency_ms,
                "noise_cv": self.service.noise_cv,
            },
            "equation": self.budget.to_dict(),
            "article_example": self.example.to_dict(),
            "gains": [g.to_dict() for g in self.gains],
            "verdict": self.verdict.to_dict(),
            "largest_fitting_batch": None
            if self.largest_fit is None
            else self.largest_fit.to_dict(),
            "allow_extrapolation": self.allow_extrapolation,
            "load": self.load.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "recommended": None if rec is None else rec.profile.name,
            "sessions": [s.to_dict() for s in self.sessions],
            "switching": None if self.switching is None else self.switching.to_dict(),
            "lanes": None if self.lanes is None else self.lanes.to_dict(),
            "device": None if self.device is None else self.device.to_dict(),
            "shared": None if self.shared is None else self.shared.to_dict(),
        }


def _latency(result: SimResult) -> dict[str, float] | None:
    lat = result.latency
    if lat is None:
        return None
    return {"p50": round(lat.p50_ms, 3), "p95": round(lat.p95_ms, 3), "p99": round(lat.p99_ms, 3)}


def _p99(stats: Any) -> str:
    return "-" if stats is None else f"{stats.p99_ms:.1f}"


def make_plan(
    curve: BatchCurve,
    slo_ms: float,
    network_ms: float,
    *,
    slo_percentile: int = 99,
    rate_rps: float | None = None,
    sessions: int | None = None,
    fps: float | None = None,
    max_batch_size: int = 32,
    margin_frac: float = DEFAULT_MARGIN_FRAC,
    instances: int = 1,
    model: str | None = None,
    allow_extrapolation: bool = False,
    batch_overhead_ms: float = 0.0,
    request_overhead_ms: float = 0.0,
    noise_cv: float = 0.0,
    duration_s: float = 60.0,
    sweep_points: int = 16,
    sweep_requests: int = 20_000,
    seed: int = 0,
    schedule: Schedule | None = None,
    ladder: Sequence[Profile] | None = None,
    reaction_s: float = 2.0,
    schedule_label: str | None = None,
    priority_mix: Mapping[int, float] | None = None,
    device: SharedDevice | None = None,
) -> Plan:
    """Everything ``autobatch plan`` prints, for one curve, SLO and load.

    Predicted latencies are arrival to completion plus ``network_ms``, the
    same quantity the SLO bounds: ``slo_ms`` at ``slo_percentile`` (95 or 99).
    ``duration_s`` is how long the given load is simulated; ``sweep_points`` and
    ``sweep_requests`` size the search for each candidate's highest sustained rate.

    "Does switching pay here?" runs over ``schedule`` (default: a step from a
    tenth of the load to the load and back, :func:`assumed_step`) with ``ladder``
    (default: the candidates), the oracle reacting ``reaction_s`` into each phase.

    ``priority_mix`` (level -> share of requests: 1 urgent, 2 batchable) adds
    two priority lanes on the candidate with the SLO's wait (:mod:`autobatch.plan.lanes`).

    ``device``: the instances share one device with its co-tenants (:class:`SharedDevice`).
    Every candidate then runs on it, at the load and in the sweep, and again without
    the co-tenants; "does batching pay?" gets a verdict with them (:func:`shared_verdict`);
    "does switching pay?" runs the co-tenants as the schedule's phases place them (as
    declared, for the assumed step). Sessions and priority lanes are planned without it.
    """
    _check_inputs(max_batch_size, instances, seed)
    # network_ms is the SLO's own: checked (and named) as that, before it becomes the
    # simulator's fixed_latency_ms.
    if slo_percentile not in (95, 99):
        raise ConfigError(f"slo_percentile = {slo_percentile!r}: must be 95 or 99")
    check_slo_inputs(slo_ms, network_ms, margin_frac, name=f"slo_p{slo_percentile}_ms")
    service = ServiceModel(
        curve,
        batch_overhead_ms=batch_overhead_ms,
        request_overhead_ms=request_overhead_ms,
        fixed_latency_ms=network_ms,
        noise_cv=noise_cv,
    )
    run = _Run(service, float(slo_ms), instances, seed, duration_s, model, max_batch_size, device,
               slo_percentile)
    load = _load(run, rate_rps, sessions, fps)
    verdict = batching_verdict(curve, max_batch_size)
    fit = largest_fitting_batch(curve, slo_ms, network_ms, max_batch_size, margin_frac=margin_frac)
    profile_mbs = _profile_max_batch(curve, fit, max_batch_size, allow_extrapolation)
    budget = replace(queue_budget(slo_ms, network_ms, curve, profile_mbs, margin_frac=margin_frac),
                     slo_label=f"p{slo_percentile}")
    profiles = _profiles(run, verdict, budget, allow_extrapolation=allow_extrapolation)
    workload = load.workload(duration_s, seed)
    candidates = tuple(_candidate(run, p, workload, sweep_points, sweep_requests) for p in profiles)
    plan = Plan(
        curve=curve,
        slo_ms=run.slo_ms,
        network_ms=float(network_ms),
        model_max_batch_size=max_batch_size,
        instances=instances,
        service=service,
        gains=gain_table(curve, max_batch_size),
        verdict=verdict,
        largest_fit=fit,
        budget=budget,
        load=load,
        candidates=candidates,
        sessions=_sessions(run, load, profile_mbs),
        allow_extrapolation=allow_extrapolation,
        switching=_switching(run, list(ladder) if ladder else list(profiles), load, schedule,
                             schedule_label, reaction_s),
        lanes=_lanes(run, profiles, load, priority_mix),
        device=device,
        slo_percentile=slo_percentile,
    )
    return replace(plan, shared=_shared(plan))


# -- the steps of make_plan, in order ---------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """What every step of one plan reads: the service model, the SLO, the model's limits, the seed."""

    service: ServiceModel
    slo_ms: float
    instances: int
    seed: int
    duration_s: float
    """How long the given load is simulated."""
    model: str | None
    """The model name written into the profiles."""
    max_batch_size: int
    """The model's own max_batch_size."""
    device: SharedDevice | None = None
    slo_percentile: int = 99

    def simulate(self, profile: Profile, workload: Workload, *, cotenants: bool = True) -> SimResult:
        """``workload`` under ``profile`` on the plan's device (without its co-tenants when
        ``cotenants`` is False)."""
        if self.device is None:
            return simulate(profile, self.service, workload, instances=self.instances, seed=self.seed)
        return simulate(profile, self.service, workload, instances=self.instances, seed=self.seed,
                        sharing=self.device.sharing, cotenants=self.device.cotenants if cotenants else ())


def _check_inputs(max_batch_size: int, instances: int, seed: int) -> None:
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or not (
        1 <= max_batch_size <= INT32_MAX
    ):
        raise ConfigError(f"max_batch_size = {max_batch_size!r}: must be an integer >= 1 and <= "
                          f"{INT32_MAX} (Triton's field is an int32)")
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise ConfigError(f"instances = {instances!r}: must be an integer >= 1")
    check_seed(seed)


def _load(run: _Run, rate_rps: float | None, sessions: int | None, fps: float | None) -> LoadSpec:
    """The load given, or half the batch-1 capacity when none is."""
    if rate_rps is None and sessions is None and fps is None:
        return LoadSpec(rate_rps=round(run.service.capacity_rps(1, run.instances) / 2, 1), assumed=True)
    return LoadSpec(rate_rps=rate_rps, sessions=sessions, fps=fps)


def _profile_max_batch(curve: BatchCurve, fit: Budget | None, max_batch_size: int,
                       allow_extrapolation: bool) -> int:
    """The profiles' max batch size: the largest that fits the SLO, within what was measured
    unless extrapolation is allowed, and within the model's."""
    profile_mbs = fit.batch_size if fit is not None else 1
    if not allow_extrapolation:
        profile_mbs = min(profile_mbs, max(curve.max_measured, 1))
    return max(1, min(profile_mbs, max_batch_size))


def _profiles(run: _Run, verdict: Verdict, budget: Budget, *,
              allow_extrapolation: bool) -> tuple[Profile, ...]:
    """Triton's default first, then the candidates that differ from it."""
    profiles = candidate_profiles(
        run.service.curve,
        verdict,
        budget.batch_size,
        budget.delay_ms,
        allow_extrapolation=allow_extrapolation,
        model=run.model,
        instances=run.instances if run.instances != 1 else None,
        model_max_batch_size=run.max_batch_size,
    )
    default = triton_default(run.max_batch_size, model=run.model)
    if run.instances != 1:
        default = Profile(**{**default.__dict__, "instance_count": run.instances})
    # A candidate Triton would run exactly as its default (no wait, the only preferred
    # size the max) is the default: proposed once, under the default's name.
    same = (default.effective_preferred, 0, default.max_batch_size)
    return (default, *(p for p in profiles
                       if (p.effective_preferred, p.max_queue_delay_us, p.max_batch_size) != same))


def _candidate(run: _Run, prof: Profile, workload: Workload, sweep_points: int,
               sweep_requests: int) -> Candidate:
    """One profile at the given load, and the highest Poisson rate it sustains within the SLO;
    with co-tenants, also at the load without them."""
    at_load = run.simulate(prof, workload)
    alone = run.simulate(prof, workload, cotenants=False) if run.device and run.device.cotenants else None
    top, sweep = max_sustained_rate(
        prof,
        run.service,
        run.slo_ms,
        instances=run.instances,
        percentile=run.slo_percentile,
        points=sweep_points,
        requests=sweep_requests,
        seed=run.seed,
        device=run.device,
    )
    return Candidate(prof, at_load, top, sweep, run.slo_ms, alone, run.slo_percentile)


def _sessions(run: _Run, load: LoadSpec, profile_mbs: int) -> tuple[SessionsResult, ...]:
    """With a load of streams: each session policy at that load."""
    if load.sessions is None:
        return ()
    assert load.fps is not None
    return tuple(
        simulate_sessions(
            run.service,
            load.sessions,
            load.fps,
            policy=policy,
            duration_s=run.duration_s,
            max_batch_size=profile_mbs,
            seed=run.seed,
        )
        for policy in SESSION_POLICIES
    )


def _switching(run: _Run, ladder: list[Profile], load: LoadSpec, schedule: Schedule | None,
               schedule_label: str | None, reaction_s: float) -> SwitchingMap:
    """Does switching pay: over the schedule given, or an assumed step around the load."""
    if schedule is None:
        schedule = assumed_step(load.offered_rps)
        low = schedule.phases[0].rate_rps
        schedule_label = f"an assumed step, {low:g} -> {load.offered_rps:g} -> {low:g} rps"
    return switching_map(
        ladder, run.service, schedule,
        slo_ms=run.slo_ms, slo_share=1.0 - run.slo_percentile / 100.0, instances=run.instances,
        reaction_s=reaction_s,
        seed=run.seed, label=schedule_label or "the given schedule",
        device=None if run.device is None else run.device.for_schedule(schedule),
    )


def _shared(plan: Plan) -> SharedVerdict | None:
    """With co-tenants: each candidate alone and with them, and the verdict."""
    if plan.device is None or not plan.device.cotenants:
        return None
    options = []
    for c in plan.candidates:
        alone, shared = c.alone, c.at_load
        assert alone is not None and alone.device is not None and shared.device is not None
        options.append(SharedOption(
            name=c.profile.name,
            waits=c.profile.max_queue_delay_us > 0,
            alone_ok=c.meets_slo_alone,
            shared_ok=c.meets_slo,
            alone_p95_ms=None if alone.latency is None else alone.latency.p95_ms,
            shared_p95_ms=None if shared.latency is None else shared.latency.p95_ms,
            shared_p99_ms=None if shared.latency is None else shared.latency.p99_ms,
            alone_busy=alone.device.busy_share,
            shared_busy=shared.device.busy_share,
            model_share=shared.device.model_share,
            served=shared.completed / shared.requests if shared.requests else 1.0,
            cotenant_items_per_s=sum(ct.items_per_s for ct in shared.cotenants),
        ))
    best_alone, best_shared = plan.recommended_alone, plan.recommended
    return shared_verdict(
        tuple(options), default=plan.candidates[0].profile.name,
        best_alone=None if best_alone is None else best_alone.profile.name,
        best_shared=None if best_shared is None else best_shared.profile.name,
        device=plan.device.label, slo_ms=plan.slo_ms, label=plan.slo_label,
    )


def _lanes(run: _Run, profiles: Sequence[Profile], load: LoadSpec,
           priority_mix: Mapping[int, float] | None) -> Lanes | None:
    """With a priority mix: two lanes on the candidate that waits the longest."""
    if not priority_mix:
        return None
    if load.rate_rps is None:
        raise ConfigError("priority_mix: lanes are planned for a Poisson rate, not for sessions "
                          "(a session's frames are chosen by the client, not queued by priority)")
    base = max(profiles, key=lambda p: (p.name == "aggressive", p.max_queue_delay_us))
    return plan_lanes(base, run.service, load.rate_rps, priority_mix, duration_s=run.duration_s,
                      instances=run.instances, seed=run.seed)


def assumed_step(rate_rps: float) -> Schedule:
    """The schedule "does switching pay?" assumes without one: a tenth of the load for
    20 s, the load for 40 s, a tenth again for 20 s."""
    low = max(rate_rps / 10.0, 0.1)
    return Schedule((Phase("low", low, 20.0), Phase("high", rate_rps, 40.0), Phase("low-again", low, 20.0)))
