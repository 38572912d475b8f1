"""What a side-by-side comparison runs: its modes, the groups that run at once, the shared trace.

Pure: the modes and their groups, the schedule with the sidecar's lead-in in
front, and the co-tenant jobs as the worker processes receive them (JSON).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autobatch.cotenants import CoTenant, place_in_schedule
from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError
from autobatch.lab.compare import BASELINE
from autobatch.profiles import Profile
from autobatch.schedule import Phase, Schedule

__all__ = [
    "BASELINE",
    "CONTROLLERS",
    "LEAD_IN",
    "ModeSpec",
    "cotenant_from_dict",
    "cotenant_to_dict",
    "group_modes",
    "modes_for",
    "placed_cotenants",
    "statics_of",
    "with_lead_in",
]

CONTROLLERS = ("reload", "gateway")
LEAD_IN = "lead-in"
"""The unmeasured phase in front of the schedule (the sidecar's start counts as a switch)."""


@dataclass(frozen=True)
class ModeSpec:
    """One mode of a comparison: a static profile held, or a controller over the ladder."""

    name: str
    kind: str
    """``static``, ``reload`` or ``gateway``."""
    profile: Profile | None = None
    """The profile held (static) or started on (a controller: the ladder's first, or its ``initial``)."""
    config: Path | None = None
    """A controller's own sidecar config, for a variant beside the usual two (e.g. a setting off)."""

    @property
    def controller(self) -> bool:
        return self.kind in CONTROLLERS


def modes_for(ladder: Sequence[Profile], default: Profile, start: Profile,
              wanted: Sequence[str] | None = None,
              variants: Sequence[tuple[str, str, Path]] = (),
              statics: Sequence[Profile] = ()) -> list[ModeSpec]:
    """Triton's default, every other rung held, each of ``statics`` held (profiles off the
    ladder, e.g. the static profile a user would pick instead of a controller), both
    controllers starting on ``start``, and each variant (name, ``reload`` or ``gateway``, its
    own config); only the ``wanted`` names when given (the baseline and ``statics`` always
    run: they were asked for by name)."""
    modes = [ModeSpec(BASELINE, "static", default)]
    modes += [ModeSpec(p.name, "static", p) for p in ladder if p.name != BASELINE]
    for p in statics:
        if p.name in {m.name for m in modes}:
            raise ConfigError(f"static {p.source}: name = {p.name!r}: the name of another mode",
                              field="name", value=p.name)
        modes.append(ModeSpec(p.name, "static", p))
    modes += [ModeSpec(c, c, start) for c in CONTROLLERS]
    for name, kind, config in variants:
        if kind not in CONTROLLERS:
            raise ConfigError(f"variant {name!r}: kind = {kind!r}: must be reload or gateway",
                              field="kind", value=kind)
        if name in {m.name for m in modes}:
            raise ConfigError(f"variant {name!r}: the name of another mode", field="name", value=name)
        modes.append(ModeSpec(name, kind, start, config))
    if wanted:
        known = [m.name for m in modes]
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ConfigError(f"modes = {unknown[0]!r}: not a mode of this comparison ({', '.join(known)})",
                              field="modes", value=unknown[0])
        extra = {p.name for p in statics}
        modes = [m for m in modes if m.name == BASELINE or m.name in wanted or m.name in extra]
    return modes


def group_modes(modes: Sequence[ModeSpec], size: int) -> list[list[ModeSpec]]:
    """The modes in groups of at most ``size`` that run at once, each group with the baseline
    in it: the controllers together first (their ratio to the default is measured at the same
    time as it), then the static profiles. ``size`` >= the mode count: one group."""
    if size < 2:
        raise ConfigError(f"group_size = {size}: must be >= 2 (the baseline and one mode)",
                          field="group_size", value=size)
    base = next((m for m in modes if m.name == BASELINE), None)
    if base is None:
        raise ConfigError(f"modes: {BASELINE} must be one of them (the baseline of every ratio)",
                          field="modes")
    if len(modes) <= size:
        return [list(modes)]
    rest = [m for m in modes if m.controller] + [m for m in modes if not m.controller and m is not base]
    return [[base, *rest[i:i + size - 1]] for i in range(0, len(rest), size - 1)]


def statics_of(groups: Sequence[Mapping[str, Any]], controllers: Collection[str]) -> dict[str, Any]:
    """Each static mode's result in one repeat (``groups`` as they ran, each with its
    ``modes``): from the group that held the most static modes among those holding it, the
    later of equals. The groups rotate from repeat to repeat, so the order they ran in does
    not choose: Triton's default is always the one that ran beside the other statics, not
    the one beside the controllers, whatever group ran last."""
    best: dict[str, tuple[int, int]] = {}
    out: dict[str, Any] = {}
    for i, g in enumerate(groups):
        statics = [n for n in g["modes"] if n not in controllers]
        for name in statics:
            rank = (len(statics), i)
            if name not in best or rank > best[name]:
                best[name], out[name] = rank, g["modes"][name]
    return out


def with_lead_in(schedule: Schedule, lead_in_s: float) -> Schedule:
    """``schedule`` with an unmeasured first phase of ``lead_in_s`` at its first phase's rate
    and co-tenant count (unchanged when ``lead_in_s`` is 0)."""
    if lead_in_s <= 0:
        return schedule
    first = schedule.phases[0]
    if any(p.name == LEAD_IN for p in schedule.phases):
        raise ConfigError(f"schedule: a phase is named {LEAD_IN!r}: the lead-in's name; rename it",
                          field="phases", value=LEAD_IN)
    lead = Phase(LEAD_IN, first.rate_rps, lead_in_s, first.arrival, first.burst_size, first.cotenants)
    return Schedule((lead, *schedule.phases))


def placed_cotenants(jobs: Sequence[CoTenant], schedule: Schedule, lead_in_s: float) -> tuple[CoTenant, ...]:
    """The jobs' windows on the schedule run (lead-in in front): by the phases' counts when
    they give them, else their own times moved back by the lead-in."""
    if not jobs:
        return ()
    if any(p.cotenants is not None for p in schedule.phases):
        return place_in_schedule(jobs, schedule)
    shift = lead_in_s if schedule.phases[0].name == LEAD_IN else 0.0
    return tuple(replace(j, windows=tuple((a + shift, b + shift) for a, b in j.windows)) for j in jobs)


def cotenant_to_dict(job: CoTenant) -> dict[str, Any]:
    """The job as a worker process rebuilds it (its curve's points included)."""
    return {"name": job.name, "curve": job.curve.to_dict(), "batch_size": job.batch_size,
            "rate_bps": job.rate_bps, "duty": job.duty, "arrival": job.arrival,
            "windows": [[a, None if b == float("inf") else b] for a, b in job.windows]}


def cotenant_from_dict(d: Mapping[str, Any]) -> CoTenant:
    windows = tuple((float(a), float("inf") if b is None else float(b)) for a, b in d["windows"])
    return CoTenant(d["name"], BatchCurve.from_mapping(d["curve"], source=f"cotenant {d['name']}"),
                    int(d["batch_size"]), d.get("rate_bps"), d.get("duty"), d.get("arrival", "poisson"),
                    windows)
