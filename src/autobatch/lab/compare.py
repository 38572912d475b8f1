"""The verdicts of a side-by-side comparison, from its modes' figures: pure, values in and out.

Every mode of a comparison served the same arrival trace on its own emulated
GPU; each is given here as its phases (dicts as the run saves them: ``requests``,
``over_slo_share``, ``p95_ms``, ``device_ms`` ...) and its whole-run ``device_ms``.
From them: the best static share per phase, the oracle (the cheapest static
profile per phase that keeps within a point of that phase's best, switched to a
reaction time into the phase), each controller against the targets of issue 28,
whether every static profile loses to it on one of the two counts, whether a
single static profile is the answer, the reaction from a co-tenant's arrival to
a decision (none needed when the profile in force suits the phase already), and
the median and spread of a ratio over repeated runs.
docs/benchmarks.md ("The shared GPU, side by side") says how the run makes them.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "BASELINE",
    "CONTROLLER_POINTS",
    "DEVICE_VS_DEFAULT",
    "DEVICE_VS_ORACLE",
    "ORACLE_POINTS",
    "SPREAD_TARGET",
    "ControllerVerdict",
    "Oracle",
    "Reaction",
    "Spread",
    "best_shares",
    "controller_verdict",
    "decision_time_s",
    "oracle",
    "in_force",
    "reactions",
    "right_profiles",
    "single_static",
    "spread",
]

Phases = Sequence[Mapping[str, Any]]

CONTROLLER_POINTS = {"gateway": 1.0, "reload": 3.0}
"""Points a controller may send over the SLO in a phase beyond the best static profile there."""
ORACLE_POINTS = 1.0
"""The oracle's choice in a phase keeps within this many points of the phase's best static share."""
DEVICE_VS_ORACLE = 1.1
DEVICE_VS_DEFAULT = 0.7
SPREAD_TARGET = 0.05
"""The most the controller-vs-default device ratio may move over the repeats (max - min)."""
LOSE_POINTS = 1.0
"""A static profile loses on the SLO when some phase sends more than this many points more
of its requests over the SLO than the controller."""
SINGLE_STATIC_SAVING = 0.05
"""A static profile within ORACLE_POINTS of the best in every phase is the answer when even
the oracle (switching at once) would save it less than this share of its device time."""
EPS = 1e-9
BASELINE = "triton-default"
"""The mode every group runs: Triton's default, the baseline of every ratio."""


def _served(ph: Mapping[str, Any]) -> bool:
    return bool(ph.get("requests"))


def best_shares(statics: Mapping[str, Phases]) -> list[float | None]:
    """The least share over the SLO any static profile had in each phase (None: an idle phase)."""
    n = len(next(iter(statics.values())))
    out: list[float | None] = []
    for i in range(n):
        shares = [ph[i]["over_slo_share"] for ph in statics.values() if _served(ph[i])]
        out.append(min(shares) if shares else None)
    return out


@dataclass(frozen=True)
class Oracle:
    """The best static profile per phase, switched to ``react_s`` into each phase."""

    profiles: tuple[str | None, ...]
    """The choice per phase (None: idle, the previous choice carries over)."""
    react_s: float
    device_ms: float
    """Device time per request over the schedule, the reaction included."""
    over_slo_share: float
    """Share over the SLO the choices had in their phases, the reaction included (the
    previous choice's share for the first ``react_s`` of a phase)."""
    instant_device_ms: float
    """The same choices switched at each phase's start: the floor no switcher goes under."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "profiles": list(self.profiles)}


def oracle(statics: Mapping[str, Phases], durations: Sequence[float], react_s: float = 0.0,
           points: float = ORACLE_POINTS) -> Oracle | None:
    """The cheapest static profile in each phase among those within ``points`` of that
    phase's best share over the SLO; its first ``react_s`` (at most the whole phase) served
    by the previous phase's choice at that choice's figures there. Requests weigh each
    phase (every mode served the same trace). None when a served phase has no device time."""
    best = best_shares(statics)
    chosen: list[str | None] = []
    prev: str | None = None
    spent = late = over = weight = 0.0
    for i, b in enumerate(best):
        if b is None:
            chosen.append(None)
            continue
        fits = {m: ph[i] for m, ph in statics.items()
                if _served(ph[i]) and ph[i].get("device_ms") is not None
                and ph[i]["over_slo_share"] <= b + points / 100.0 + EPS}
        if not fits:
            return None
        m = min(fits, key=lambda k: (fits[k]["device_ms"], k))
        chosen.append(m)
        mine = fits[m]
        n = float(mine["requests"])
        lag = 0.0 if prev in (None, m) else min(1.0, react_s / durations[i]) if durations[i] > 0 else 1.0
        before = statics[prev][i] if prev is not None and lag > 0 else mine
        if before.get("device_ms") is None:
            before, lag = mine, 0.0
        spent += n * mine["device_ms"]
        late += n * (lag * before["device_ms"] + (1 - lag) * mine["device_ms"])
        over += n * (lag * before["over_slo_share"] + (1 - lag) * mine["over_slo_share"])
        weight += n
        prev = m
    if weight <= 0:
        return None
    return Oracle(tuple(chosen), react_s, late / weight, over / weight, spent / weight)


@dataclass(frozen=True)
class ControllerVerdict:
    """One controller against the same run's static profiles and oracle."""

    mode: str
    target_points: float
    excess_points: tuple[float | None, ...]
    """Per phase: its share over the SLO minus the best static's, in points."""
    worst_phase: str | None
    worst_excess_points: float | None
    device_ms: float | None
    device_vs_default: float | None
    device_vs_oracle: float | None
    oracle: Oracle | None
    losers: dict[str, str | None] = field(default_factory=dict)
    """Each static profile -> ``slo`` (some phase over 1 point more over the SLO than the
    controller), ``device`` (more device time per request), or None: it does not lose."""
    beside_default_points: tuple[float | None, ...] = ()
    """Per phase, each share taken against the Triton's default that ran beside it: the
    controller's share less its own group's default's, minus the best static's less the
    default of the statics' group. Where groups ran at different times this takes out what
    the machine did to a whole group (it slows the default beside the controller too); it
    explains a miss and is not the verdict, which is :attr:`excess_points`."""
    worst_beside_default_points: float | None = None

    @property
    def slo_met(self) -> bool | None:
        worst = self.worst_excess_points
        return None if worst is None else worst <= self.target_points + EPS

    @property
    def device_default_met(self) -> bool | None:
        return None if self.device_vs_default is None else self.device_vs_default <= DEVICE_VS_DEFAULT + EPS

    @property
    def device_oracle_met(self) -> bool | None:
        return None if self.device_vs_oracle is None else self.device_vs_oracle <= DEVICE_VS_ORACLE + EPS

    @property
    def every_static_loses(self) -> bool:
        return bool(self.losers) and all(v is not None for v in self.losers.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(excess_points=list(self.excess_points),
                 beside_default_points=list(self.beside_default_points),
                 oracle=None if self.oracle is None else self.oracle.to_dict(),
                 slo_met=self.slo_met, device_default_met=self.device_default_met,
                 device_oracle_met=self.device_oracle_met, every_static_loses=self.every_static_loses)
        return d


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _loses(static: Mapping[str, Any], ctrl: Mapping[str, Any]) -> str | None:
    for s, c in zip(static["phases"], ctrl["phases"], strict=True):
        if _served(s) and s["over_slo_share"] > c["over_slo_share"] + LOSE_POINTS / 100.0 + EPS:
            return "slo"
    if static.get("device_ms") is not None and ctrl.get("device_ms") is not None \
            and static["device_ms"] > ctrl["device_ms"] + EPS:
        return "device"
    return None


def controller_verdict(mode: str, ctrl: Mapping[str, Any], statics: Mapping[str, Mapping[str, Any]],
                       default: Mapping[str, Any], durations: Sequence[float],
                       react_s: float, kind: str | None = None) -> ControllerVerdict:
    """``ctrl`` (a controller's run: ``phases`` and ``device_ms``) against the ``statics``
    (by mode, Triton's default among them) and ``default`` (the default run of the
    controller's own group: the same time, the same machine). ``kind`` (reload or gateway)
    sets the target; the mode's name when not given."""
    phases = {m: r["phases"] for m, r in statics.items()}
    best = best_shares(phases)
    excess = tuple(None if b is None else round(100.0 * (p["over_slo_share"] - b), 3)
                   for p, b in zip(ctrl["phases"], best, strict=True))
    judged = [(e, i) for i, e in enumerate(excess) if e is not None]
    worst = max(judged) if judged else None
    beside = _beside_default(ctrl["phases"], default.get("phases"), statics, best)
    beside_worst = max((b for b in beside if b is not None), default=None)
    orc = oracle(phases, durations, react_s)
    return ControllerVerdict(
        mode=mode,
        target_points=CONTROLLER_POINTS.get(kind or mode, min(CONTROLLER_POINTS.values())),
        excess_points=excess,
        worst_phase=None if worst is None else ctrl["phases"][worst[1]]["name"],
        worst_excess_points=None if worst is None else worst[0],
        device_ms=ctrl.get("device_ms"),
        device_vs_default=_ratio(ctrl.get("device_ms"), default.get("device_ms")),
        device_vs_oracle=_ratio(ctrl.get("device_ms"), None if orc is None else orc.device_ms),
        oracle=orc,
        losers={m: _loses(r, ctrl) for m, r in statics.items()},
        beside_default_points=beside,
        worst_beside_default_points=beside_worst,
    )


def _beside_default(ctrl: Phases, own_default: Phases | None, statics: Mapping[str, Mapping[str, Any]],
                    best: Sequence[float | None]) -> tuple[float | None, ...]:
    base = statics.get(BASELINE)
    if not own_default or base is None:
        return tuple(None for _ in ctrl)
    return tuple(None if b is None or not _served(d) or not _served(s) else round(
        100.0 * ((c["over_slo_share"] - d["over_slo_share"]) - (b - s["over_slo_share"])), 3)
        for c, d, s, b in zip(ctrl, own_default, base["phases"], best, strict=True))


def single_static(statics: Mapping[str, Mapping[str, Any]], durations: Sequence[float]) -> str | None:
    """The static profile that is the answer on this run, if one is: within
    :data:`ORACLE_POINTS` of the best share in every phase, and the oracle switching at once
    saves it under :data:`SINGLE_STATIC_SAVING` of its device time. The cheapest such one."""
    phases = {m: r["phases"] for m, r in statics.items()}
    orc = oracle(phases, durations, 0.0)
    if orc is None:
        return None
    best = best_shares(phases)
    fits = [m for m, r in statics.items() if r.get("device_ms") is not None and all(
        b is None or p["over_slo_share"] <= b + ORACLE_POINTS / 100.0 + EPS
        for p, b in zip(r["phases"], best, strict=True))]
    fits = [m for m in fits if orc.instant_device_ms >= (1 - SINGLE_STATIC_SAVING) * statics[m]["device_ms"]]
    return min(fits, key=lambda m: (statics[m]["device_ms"], m)) if fits else None


@dataclass(frozen=True)
class Reaction:
    """From a co-tenant's arrival to the controller's first switch after it; or no reaction
    needed, when the profile in force at the arrival is right for the phase it falls in."""

    arrival_s: float
    decision_s: float | None
    """Seconds after the arrival (None: no switch before the next arrival or the end, or
    none needed)."""
    windows: float | None
    """The same in the controller's windows (its interval)."""
    reason: str | None
    target: str | None
    needed: bool = True
    """False: the profile in force at the arrival (``profile``) was already right there."""
    profile: str | None = None
    """The profile in force at the arrival, where known."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def right_profiles(statics: Mapping[str, Phases], index: int, points: float = ORACLE_POINTS) -> set[str]:
    """The static profiles right for phase ``index``: within ``points`` of its best share over
    the SLO (the oracle's test); empty for an idle phase."""
    best = best_shares(statics)[index]
    if best is None:
        return set()
    return {m for m, ph in statics.items()
            if _served(ph[index]) and ph[index]["over_slo_share"] <= best + points / 100.0 + EPS}


def decision_time_s(row: Mapping[str, Any], t0_wall: float, t0_mono: float | None = None) -> float:
    """When a decision-log line's decision was made, in seconds from a run's start: by the
    monotonic clock where the line (``mono``) and the run (``t0_mono``) both carry it, so a
    step of the wall clock mid-run moves nothing; else by the wall clock (``decision.at_s``)."""
    mono = row.get("mono")
    if mono is not None and t0_mono is not None:
        return float(mono) - t0_mono
    return float(row["decision"]["at_s"]) - t0_wall


def in_force(decisions: Sequence[Mapping[str, Any]], at_s: float, start: str | None) -> str | None:
    """The profile in force at ``at_s``: the target of the last switch before it that did not
    fail (``ok`` False), else ``start``."""
    done = [d for d in decisions if d["action"] == "switch" and d["t_s"] < at_s - EPS
            and d.get("ok") is not False]
    return max(done, key=lambda d: d["t_s"])["target"] if done else start


def reactions(decisions: Sequence[Mapping[str, Any]], arrivals_s: Sequence[float], end_s: float,
              interval_s: float, *, start: str | None = None,
              right: Sequence[Collection[str]] | None = None) -> list[Reaction]:
    """For each arrival (seconds into the run), the first ``switch`` decision at or after it
    and before the next arrival (or ``end_s``). ``decisions``: ``t_s``, ``action``,
    ``reason``, ``target`` each, on the same clock. With ``right`` (per arrival, the profiles
    right for the phase it falls in) and ``start`` (the profile the controller started on):
    an arrival the profile in force already suits needs no reaction (``needed`` False)."""
    out: list[Reaction] = []
    if not arrivals_s:
        return out
    bounds = [*arrivals_s[1:], end_s]
    ordered = sorted(decisions, key=lambda d: d["t_s"])
    for i, (a, b) in enumerate(zip(arrivals_s, bounds, strict=True)):
        held = in_force(ordered, a, start) if right is not None else None
        if right is not None and held is not None and held in right[i]:
            out.append(Reaction(a, None, None, None, None, needed=False, profile=held))
            continue
        first = next((d for d in ordered if a - EPS <= d["t_s"] < b and d["action"] == "switch"), None)
        dt = None if first is None else round(first["t_s"] - a, 3)
        out.append(Reaction(a, dt, None if dt is None else round(dt / interval_s, 2),
                            None if first is None else first["reason"],
                            None if first is None else first["target"], profile=held))
    return out


@dataclass(frozen=True)
class Spread:
    """A figure over repeated runs: its median and its spread (max - min)."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        return max(self.values) - min(self.values)

    def to_dict(self) -> dict[str, Any]:
        return {"values": [round(v, 4) for v in self.values], "median": round(self.median, 4),
                "spread": round(self.spread, 4), "runs": len(self.values)}


def spread(values: Sequence[float | None]) -> Spread | None:
    """The median and spread of the values that exist; None when none does."""
    got = tuple(float(v) for v in values if v is not None)
    return Spread(got) if got else None
