"""Does switching pay here? Triton's default, each static profile, and an oracle that switches.

"Does batching pay?" (:func:`autobatch.plan.verdict.batching_verdict`) asks
whether larger batches are cheaper per item on this device. This asks the next
question: over a schedule of load, does moving between profiles beat leaving
one in place, Triton's default included, on the SLO and on device time?

For one batch curve, a ladder, an instance count, a schedule and an SLO, the
simulator runs every profile statically through the whole schedule (backlogs
carry over between phases); every profile on every phase alone, from an empty
queue (the oracle's menu); and an **oracle** that puts the objective's pick for
each phase in force ``reaction_s`` after the phase begins (keep the share over
the SLO at the best any profile reaches, then the least device time, or the
lowest latency when no profile saves ``min_device_saving``). Each stretch of
one profile runs on its own instances, as two warm variants behind a gateway
do, so the oracle is an upper bound on a controller.

The verdict compares the oracle with the best static profile (fewest missed
phases, then the least device time): within ``tolerance`` in every phase and
``min_device_saving`` of its device time, one static profile is the answer;
else switching pays, on the SLO, on device time, or both. docs/planner.md
("Does switching pay here?") shows it on the shipped curves.

Pure: values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from autobatch.errors import ConfigError
from autobatch.plan.simulator import (
    ServiceModel,
    SharedDevice,
    Workload,
    device_ms_per_request,
    simulate,
)
from autobatch.profiles import Profile
from autobatch.schedule import Phase, Schedule

__all__ = [
    "DEFAULT_PROFILE",
    "PhaseFigures",
    "Strategy",
    "SwitchingKind",
    "SwitchingMap",
    "SwitchingVerdict",
    "pick_profile",
    "switching_map",
    "triton_default",
]

DEFAULT_PROFILE = "triton-default"
"""The name of Triton's own default as a profile (profiles/<model>/triton-default.yaml)."""


def triton_default(max_batch_size: int, model: str | None = None, source: str = "<plan>") -> Profile:
    """Triton's default dynamic batching: no preferred sizes (read as ``[max_batch_size]``),
    no delay. The batcher sends whatever is queued when an instance frees."""
    return Profile(
        name=DEFAULT_PROFILE,
        max_batch_size=max_batch_size,
        preferred_batch_size=(),
        max_queue_delay_us=0,
        model=model,
        source=source,
    )


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseFigures:
    """What one strategy got in one phase."""

    phase: str
    rate_rps: float
    requests: int
    over_slo: float
    """Share of the phase's requests slower than the SLO latency (0..1)."""
    p95_ms: float | None
    device_ms: float | None
    """Instance milliseconds per request (steady figure of the profile at this phase's load)."""
    profile: str
    """The profile in force for most of the phase (the oracle's pick; a static's own name)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "rate_rps": self.rate_rps,
            "requests": self.requests,
            "over_slo": round(self.over_slo, 5),
            "p95_ms": None if self.p95_ms is None else round(self.p95_ms, 3),
            "device_ms": None if self.device_ms is None else round(self.device_ms, 4),
            "profile": self.profile,
        }


@dataclass(frozen=True)
class Strategy:
    """A static profile, or the oracle, over the whole schedule."""

    name: str
    phases: tuple[PhaseFigures, ...]
    over_slo: float
    """Share of all requests over the SLO."""
    device_ms: float
    """Instance milliseconds per request over the whole schedule (on a shared device: the
    model's own device work per request)."""
    cotenants_bps: Mapping[str, float] = field(default_factory=dict)
    """On a shared device: each co-tenant's batches per second of its active time."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "over_slo": round(self.over_slo, 5),
            "device_ms": round(self.device_ms, 4),
            "phases": [p.to_dict() for p in self.phases],
        }
        if self.cotenants_bps:
            out["cotenants_bps"] = {k: round(v, 3) for k, v in self.cotenants_bps.items()}
        return out


class SwitchingKind(str, Enum):
    DEFAULT = "default"
    """Triton's default is the answer: no profile, no controller."""
    STATIC = "static"
    """One static profile (not the default) is the answer: set it and leave it."""
    PAYS = "pays"
    """Switching saves device time over every static choice that keeps the SLO."""
    NEEDED = "needed"
    """No static profile keeps every phase as well as switching does."""
    LATENCY = "latency"
    """A static profile matches switching on the SLO and device time, but not on latency."""
    OVERLOADED = "overloaded"
    """Some phase is over the SLO whatever the profile: more instances help, not switching."""


@dataclass(frozen=True)
class SwitchingVerdict:
    kind: SwitchingKind
    best_static: str
    device_ratio: float
    """The oracle's device time over the best static choice's (< 1: switching saves)."""
    missed_phases: tuple[str, ...]
    """Phases the best static choice misses (more than the tolerance over the best)."""
    message: str

    @property
    def switching_pays(self) -> bool:
        return self.kind in (SwitchingKind.PAYS, SwitchingKind.NEEDED, SwitchingKind.LATENCY)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "switching_pays": self.switching_pays,
            "best_static": self.best_static,
            "device_ratio": round(self.device_ratio, 4),
            "missed_phases": list(self.missed_phases),
            "message": self.message,
        }


@dataclass(frozen=True)
class SwitchingMap:
    schedule: str
    instances: int
    slo_ms: float
    reaction_s: float
    statics: tuple[Strategy, ...]
    oracle: Strategy
    verdict: SwitchingVerdict
    device: str | None = None
    """On a shared device: who shares it, and how (``SharedDevice.label``)."""

    def static(self, name: str) -> Strategy:
        for s in self.statics:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "instances": self.instances,
            "slo_ms": self.slo_ms,
            "reaction_s": self.reaction_s,
            "statics": [s.to_dict() for s in self.statics],
            "oracle": self.oracle.to_dict(),
            "verdict": self.verdict.to_dict(),
            "device": self.device,
        }


# -- the objective --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Option:
    name: str
    over_slo: float
    p95_ms: float
    device_ms: float


def pick_profile(
    options: Sequence[tuple[str, float, float, float]],
    *,
    tolerance: float = 0.01,
    min_device_saving: float = 0.15,
) -> str:
    """The controller's objective at one load: ``options`` are
    ``(name, share over the SLO, p95 ms, device ms per request)``.

    Keep the share over the SLO within ``tolerance`` of the best any option
    reaches; among those, the least device time, unless it saves less than
    ``min_device_saving`` against the lowest-latency one: then the lowest latency
    (at low load device time barely differs, and latency is what is left to win).
    Ties go to the earlier option.
    """
    if not options:
        raise ConfigError("pick_profile needs at least one option")
    opts = [_Option(*o) for o in options]
    best = min(o.over_slo for o in opts)
    ok = [o for o in opts if o.over_slo <= best + tolerance + 1e-12]
    fastest = min(ok, key=lambda o: o.p95_ms)
    cheapest = min(ok, key=lambda o: o.device_ms)
    if cheapest.device_ms <= fastest.device_ms * (1.0 - min_device_saving) + 1e-12:
        return cheapest.name
    return fastest.name


# -- the simulation -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Out:
    """One simulated stretch: latencies (ms, arrival order), the model's device ms in all,
    and per co-tenant (batches completed, seconds active)."""

    lat: np.ndarray
    device_ms: float
    cotenants: Mapping[str, tuple[int, float]] = field(default_factory=dict)


def _run(profile: Profile, service: ServiceModel, t_s: np.ndarray, duration_s: float,
         instances: int, seed: int, device: SharedDevice | None = None,
         offset_s: float = 0.0) -> _Out:
    """``t_s`` (from 0) under ``profile``; on a shared ``device``, with the co-tenants of
    ``[offset_s, offset_s + duration_s)`` of the schedule."""
    if t_s.shape[0] == 0:
        return _Out(np.zeros(0), 0.0)
    work = Workload(t_s=t_s, duration_s=max(duration_s, float(t_s[-1]) + 1e-6))
    if device is None:
        res = simulate(profile, service, work, instances=instances, seed=seed, keep_latencies=True)
    else:
        here = device.between(offset_s, offset_s + work.duration_s)
        res = simulate(profile, service, work, instances=instances, seed=seed, keep_latencies=True,
                       sharing=here.sharing, cotenants=here.cotenants)
    lat = res.latencies_ms
    assert lat is not None and lat.shape[0] == t_s.shape[0], "every request completes without queue policies"
    return _Out(lat, device_ms_per_request(res) * res.completed,
                {c.name: (c.batches, c.active_s) for c in res.cotenants})


def _rates(outs: Sequence[_Out]) -> dict[str, float]:
    """Each co-tenant's batches per active second over several stretches."""
    done: dict[str, list[float]] = {}
    for o in outs:
        for name, (batches, active) in o.cotenants.items():
            acc = done.setdefault(name, [0.0, 0.0])
            acc[0] += batches
            acc[1] += active
    return {name: b / a if a > 0 else 0.0 for name, (b, a) in done.items()}


def _p95(lat: np.ndarray) -> float | None:
    return float(np.percentile(lat, 95)) if lat.shape[0] else None


def switching_map(
    profiles: Sequence[Profile],
    service: ServiceModel,
    schedule: Schedule,
    *,
    slo_ms: float,
    instances: int = 1,
    slo_share: float = 0.05,
    reaction_s: float = 2.0,
    tolerance: float = 0.01,
    min_device_saving: float = 0.15,
    seed: int = 0,
    label: str = "schedule",
    device: SharedDevice | None = None,
) -> SwitchingMap:
    """Simulate the default, each static profile and the oracle over ``schedule``.

    ``profiles`` is the ladder; Triton's default is added (with the ladder's
    largest ``max_batch_size``) when no profile of it is there. ``slo_ms`` is the
    latency a request must beat; the share over it is what every comparison uses,
    and ``slo_share`` the share the SLO allows (0.05 for a p95 SLO, 0.01 for p99):
    a phase no strategy keeps within it is overloaded.

    On a shared ``device`` every run has the co-tenants of its stretch of the schedule
    (their windows on the schedule's clock: :meth:`SharedDevice.for_schedule` places a
    schedule's ``cotenants: N`` phases), device time is the model's own work, and each
    strategy reports the co-tenants' throughput.
    """
    _check(profiles, slo_ms, reaction_s, instances)
    ladder = sorted(profiles, key=lambda p: p.name != DEFAULT_PROFILE)  # the default first: ties go to it
    if ladder[0].name != DEFAULT_PROFILE:
        ladder.insert(0, triton_default(max(p.max_batch_size for p in ladder), model=ladder[0].model))
    run = _Setup.of(schedule, service, slo_ms, instances, seed, device)
    steady = _steady(run, ladder)
    statics = [_static(run, p, steady) for p in ladder]
    picks = _picks(run, ladder, steady, tolerance=tolerance, min_device_saving=min_device_saving)
    oracle = _oracle(run, {p.name: p for p in ladder}, steady, picks, reaction_s)
    verdict = _verdict(statics, oracle, tolerance=tolerance, min_device_saving=min_device_saving,
                       slo_share=slo_share, instances=instances)
    return SwitchingMap(label, instances, float(slo_ms), float(reaction_s), tuple(statics), oracle, verdict,
                        None if device is None else device.label)


# -- the steps of switching_map, in order -----------------------------------------------------


def _check(profiles: Sequence[Profile], slo_ms: float, reaction_s: float, instances: int) -> None:
    if not profiles:
        raise ConfigError("switching_map needs at least one profile")
    if not (math.isfinite(slo_ms) and slo_ms > 0):
        raise ConfigError(f"slo_ms = {slo_ms!r}: must be a number > 0")
    if not (math.isfinite(reaction_s) and reaction_s >= 0):
        raise ConfigError(f"reaction_s = {reaction_s!r}: must be a number >= 0 seconds")
    if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
        raise ConfigError(f"instances = {instances!r}: must be an integer >= 1")


@dataclass(frozen=True)
class _Setup:
    """The schedule's arrivals, cut into its phases, and what every run of them shares."""

    schedule: Schedule
    service: ServiceModel
    slo_ms: float
    instances: int
    seed: int
    t: np.ndarray
    """Every arrival of the schedule, seconds from its start."""
    masks: list[np.ndarray]
    """Per phase: which arrivals fall in it."""
    starts: list[float]
    ends: list[float]
    device: SharedDevice | None = None

    @classmethod
    def of(cls, schedule: Schedule, service: ServiceModel, slo_ms: float, instances: int,
           seed: int, device: SharedDevice | None = None) -> _Setup:
        work = Workload.from_schedule(schedule, seed)
        phase_of = work.phase
        assert phase_of is not None
        starts = list(schedule.starts_s)
        return cls(schedule, service, slo_ms, instances, seed, work.t_s,
                   [phase_of == i for i in range(len(schedule.phases))],
                   starts, starts[1:] + [schedule.duration_s], device)

    @property
    def phases(self) -> tuple[Phase, ...]:
        return tuple(self.schedule.phases)

    @property
    def n_total(self) -> int:
        return max(int(self.t.shape[0]), 1)

    def run(self, profile: Profile, t_s: np.ndarray, duration_s: float, offset_s: float = 0.0) -> _Out:
        """``t_s`` from ``offset_s`` into the schedule (times relative to it)."""
        return _run(profile, self.service, t_s, duration_s, self.instances, self.seed, self.device,
                    offset_s)


_Steady = dict[tuple[str, int], tuple[float, float, float]]
"""(profile, phase index) -> (share over the SLO, p95 ms, device ms per request)."""


def _steady(run: _Setup, ladder: Sequence[Profile]) -> _Steady:
    """Each profile on each phase alone, from an empty queue: the oracle's menu."""
    steady: _Steady = {}
    for i, phase in enumerate(run.phases):
        ti = run.t[run.masks[i]] - run.starts[i]
        for p in ladder:
            o = run.run(p, ti, phase.duration_s, run.starts[i])
            lat, busy = o.lat, o.device_ms
            n = lat.shape[0]
            steady[(p.name, i)] = (
                float((lat > run.slo_ms).mean()) if n else 0.0,
                _p95(lat) if n else 0.0,
                busy / n if n else math.nan,
            )
    return steady


def _phase_figures(run: _Setup, steady: _Steady, lat: np.ndarray,
                   chosen: Sequence[str]) -> tuple[PhaseFigures, ...]:
    out = []
    for i, phase in enumerate(run.phases):
        mine = lat[run.masks[i]]
        dev = steady[(chosen[i], i)][2]
        out.append(PhaseFigures(
            phase=phase.name,
            rate_rps=phase.rate_rps,
            requests=int(mine.shape[0]),
            over_slo=float((mine > run.slo_ms).mean()) if mine.shape[0] else 0.0,
            p95_ms=_p95(mine),
            device_ms=None if math.isnan(dev) else dev,
            profile=chosen[i],
        ))
    return tuple(out)


def _static(run: _Setup, p: Profile, steady: _Steady) -> Strategy:
    """One profile through the whole schedule: backlogs carry over from phase to phase."""
    o = run.run(p, run.t, run.schedule.duration_s)
    return Strategy(
        name=p.name,
        phases=_phase_figures(run, steady, o.lat, [p.name] * len(run.phases)),
        over_slo=float((o.lat > run.slo_ms).mean()) if o.lat.shape[0] else 0.0,
        device_ms=o.device_ms / run.n_total,
        cotenants_bps=_rates([o]),
    )


def _picks(run: _Setup, ladder: Sequence[Profile], steady: _Steady, *, tolerance: float,
           min_device_saving: float) -> list[str]:
    """The oracle's profile per phase; an idle phase keeps the previous one."""
    picks: list[str] = []
    for i, phase in enumerate(run.phases):
        if phase.rate_rps <= 0 or not run.masks[i].any():
            picks.append(picks[-1] if picks else ladder[0].name)
            continue
        picks.append(pick_profile(
            [(p.name, *steady[(p.name, i)]) for p in ladder],
            tolerance=tolerance, min_device_saving=min_device_saving,
        ))
    return picks


def _oracle(run: _Setup, by_name: dict[str, Profile], steady: _Steady, picks: list[str],
            reaction_s: float) -> Strategy:
    """The picks in force ``reaction_s`` into each phase, each stretch run on its own."""
    n_phases = len(run.phases)
    segments: list[tuple[float, float, str]] = []  # (from, to, profile)
    for i in range(n_phases):
        begin = run.starts[i] if i == 0 else run.starts[i] + reaction_s
        end = run.ends[i] + reaction_s if i + 1 < n_phases else math.inf
        if i + 1 < n_phases:
            end = min(end, run.ends[i + 1])
        if i == 0:
            begin = 0.0
        segments.append((begin, end, picks[i]))
    merged: list[list[Any]] = []
    for a, b, name in segments:
        if merged and merged[-1][2] == name:
            merged[-1][1] = b
        else:
            merged.append([a, b, name])
    t, duration_s = run.t, run.schedule.duration_s
    lat_all = np.zeros(t.shape[0])
    busy_all = 0.0
    outs = []
    for a, b, name in merged:
        sel = (t >= a) & (t < b)
        idx = np.nonzero(sel)[0]
        if idx.shape[0] == 0:
            continue
        span = (min(b, duration_s) - a) if math.isfinite(b) else duration_s - a
        o = run.run(by_name[name], t[idx] - a, max(span, 1e-3), a)
        lat_all[idx] = o.lat
        busy_all += o.device_ms
        outs.append(o)
    return Strategy(
        name="oracle",
        phases=_phase_figures(run, steady, lat_all, picks),
        over_slo=float((lat_all > run.slo_ms).mean()) if t.shape[0] else 0.0,
        device_ms=busy_all / run.n_total,
        cotenants_bps=_rates(outs),
    )


def _verdict(
    statics: Sequence[Strategy], oracle: Strategy, *, tolerance: float, min_device_saving: float,
    slo_share: float, instances: int,
) -> SwitchingVerdict:
    n = len(oracle.phases)
    best_per_phase = [
        min([s.phases[i].over_slo for s in statics] + [oracle.phases[i].over_slo]) for i in range(n)
    ]
    overloaded = tuple(oracle.phases[i].phase for i in range(n) if best_per_phase[i] > slo_share + 1e-12)

    def missed(s: Strategy) -> tuple[str, ...]:
        return tuple(
            s.phases[i].phase for i in range(n)
            if s.phases[i].requests and s.phases[i].over_slo > best_per_phase[i] + tolerance + 1e-12
        )

    def ratio_to(s: Strategy) -> float:
        return oracle.device_ms / s.device_ms if s.device_ms > 0 else 1.0

    if overloaded:
        best = min(statics, key=lambda s: (sum(p.over_slo for p in s.phases), s.device_ms))
        return SwitchingVerdict(
            SwitchingKind.OVERLOADED, best.name, ratio_to(best), overloaded,
            f"no profile keeps {', '.join(overloaded)} within the SLO on {instances} instance(s) "
            f"(at best {max(best_per_phase):.0%} of requests over it): more instances or replicas "
            f"help there, not a profile or switching",
        )
    default = next((s for s in statics if s.name == DEFAULT_PROFILE), None)
    versus = "" if default is None else (
        f"; against Triton's default, switching uses {ratio_to(default):.2f}x the device time")
    # A static profile that is as good as switching on all three counts is the answer.
    matches = [s for s in statics if not missed(s) and ratio_to(s) > 1.0 - min_device_saving
               and not _latency_cost(s, oracle)]
    if matches:
        chosen = default if default in matches else min(matches, key=lambda s: s.device_ms)
        kind = SwitchingKind.DEFAULT if chosen is default else SwitchingKind.STATIC
        head = ("one static profile is the answer, and it is Triton's default: leave Triton alone"
                if kind is SwitchingKind.DEFAULT else f"one static profile is the answer: {chosen.name}")
        return SwitchingVerdict(
            kind, chosen.name, ratio_to(chosen), (),
            f"{head}; switching would save {max(0.0, 1 - ratio_to(chosen)):.0%} device time at best"
            + _cheaper(chosen, statics, missed),
        )
    best = min(statics, key=lambda s: (len(missed(s)), s.device_ms))
    ratio = ratio_to(best)
    misses = missed(best)
    if misses and len(missed(oracle)) < len(misses):
        return SwitchingVerdict(
            SwitchingKind.NEEDED, best.name, ratio, misses,
            f"switching pays: no static profile keeps every phase; the best, {best.name}, goes "
            f"more than {tolerance:.0%} over the SLO beyond the best choice in "
            f"{', '.join(misses)}; switching uses {ratio:.2f}x its device time{versus}",
        )
    if ratio <= 1.0 - min_device_saving:
        return SwitchingVerdict(
            SwitchingKind.PAYS, best.name, ratio, misses,
            f"switching pays: {1 - ratio:.0%} less device time per request than the best static "
            f"profile, {best.name}, with every phase as close to the SLO{versus}"
            + _cheaper_misses(best, statics, missed),
        )
    return SwitchingVerdict(
        SwitchingKind.LATENCY, best.name, ratio, misses,
        f"switching pays in latency, not device time: the best static profile, {best.name}, "
        f"uses {1 / ratio:.2f}x switching's device time, but{_latency_cost(best, oracle, lead='')}{versus}",
    )


def _cheaper_misses(best: Strategy, statics: Sequence[Strategy], missed: Any) -> str:
    """The static profiles that would use less device time than ``best``, and the phases they miss."""
    cheaper = sorted((s for s in statics if s.device_ms < best.device_ms and missed(s)),
                     key=lambda s: s.device_ms)
    return "".join(f"; {s.name} uses {s.device_ms / best.device_ms:.2f}x its device time but goes over "
                   f"the SLO in {', '.join(missed(s))}" for s in cheaper)


def _cheaper(chosen: Strategy, statics: Sequence[Strategy], missed: Any) -> str:
    """The static profile that would save the most device time without missing a phase, and its price."""
    others = [s for s in statics if s.name != chosen.name and not missed(s)
              and s.device_ms < chosen.device_ms]
    if not others:
        return ""
    cheap = min(others, key=lambda s: s.device_ms)
    cost = _latency_cost(cheap, chosen)
    return (f"; {cheap.name} would save {1 - cheap.device_ms / chosen.device_ms:.0%} device time"
            + (_latency_cost(cheap, chosen, lead=", at") if cost else ""))


def _latency_cost(best: Strategy, oracle: Strategy,
                  lead: str = "; it pays in latency where switching does not:") -> str:
    """What ``best`` gives up in latency against ``oracle`` (p95 over 1.1x in some phase)."""
    worst = None
    for s, o in zip(best.phases, oracle.phases):
        if s.p95_ms is None or o.p95_ms is None or o.p95_ms <= 0:
            continue
        ratio = s.p95_ms / o.p95_ms
        if ratio > 1.1 and (worst is None or ratio > worst[0]):
            worst = (ratio, s.phase, s.p95_ms, o.p95_ms)
    if worst is None:
        return ""
    ratio, phase, mine, theirs = worst
    return f"{lead} p95 {mine:.0f} ms vs {theirs:.0f} ms in {phase} ({ratio:.1f}x)"
