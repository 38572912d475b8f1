"""Load schedules: phases of a target arrival rate, and the arrival times they produce.

A schedule is an ordered list of phases, each a rate held for a duration. The
file format (YAML)::

    phases:
      - {name: low,       rate_rps: 20,  duration_s: 20}
      - {name: high,      rate_rps: 150, duration_s: 30, arrival: bursty, burst_size: 8}
      - {name: low-again, rate_rps: 20,  duration_s: 20}

``arrival`` spreads requests inside a phase: ``poisson`` (default: exponential
gaps, the phase's count fixed to ``rate_rps * duration_s`` so every run offers
the same work and "achieved rate" measures the generator, not the dice),
``uniform`` (evenly spaced) or ``bursty`` (Poisson bursts of ``burst_size``
requests at one instant). The format: docs/load.md, "Schedules".

A phase with ``rate_rps: 0`` is idle for its duration. A phase may say how many
co-tenant jobs share the device while it runs (``cotenants: 2``); the jobs are
listed under a top-level ``cotenants:`` (:mod:`autobatch.cotenants`).

Everything here is pure: no clock, no I/O beyond reading the schedule file.
:func:`arrivals` is vectorised with numpy, since the simulator draws millions
of arrivals from it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autobatch.config import Section, load_yaml
from autobatch.errors import ConfigError

__all__ = [
    "ARRIVAL_KINDS",
    "Arrivals",
    "Phase",
    "Schedule",
    "arrivals",
    "load_schedule",
    "parse_schedule",
    "schedule_from_options",
]

ARRIVAL_KINDS = ("poisson", "uniform", "bursty")
"""Allowed values of ``Phase.arrival``."""

DEFAULT_BURST_SIZE = 8

MAX_RATE_RPS = 1e7
"""The highest rate of a phase: ten million requests/s, past any one Triton."""

MAX_DURATION_S = 30 * 86400.0
"""The longest phase: 30 days (the simulator and the load generator run through all of it)."""

MAX_REQUESTS = 1e9
"""The most requests a schedule may ask for in all: its arrivals are drawn up front."""


@dataclass(frozen=True)
class Phase:
    """One constant-rate stretch of a schedule."""

    name: str
    """Shown in reports; unique within a schedule."""
    rate_rps: float
    """Mean arrival rate in requests per second; 0 is an idle phase."""
    duration_s: float
    """How long the phase lasts, in seconds; > 0."""
    arrival: str = "poisson"
    """One of :data:`ARRIVAL_KINDS`."""
    burst_size: int = DEFAULT_BURST_SIZE
    """Requests per burst; only read when ``arrival`` is ``bursty``."""
    cotenants: int | None = None
    """How many co-tenant jobs share the device in this phase (the first N declared,
    :mod:`autobatch.cotenants`); None leaves that to the jobs' own times."""

    def __post_init__(self) -> None:
        where = f"phase {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"phase name = {self.name!r}: must be a non-empty string")
        if not _finite(self.rate_rps) or self.rate_rps < 0 or self.rate_rps > MAX_RATE_RPS:
            raise ConfigError(
                f"{where}: rate_rps = {self.rate_rps!r}: must be a number >= 0 and <= {MAX_RATE_RPS:g}"
            )
        if not _finite(self.duration_s) or self.duration_s <= 0 or self.duration_s > MAX_DURATION_S:
            raise ConfigError(
                f"{where}: duration_s = {self.duration_s!r}: must be a number > 0 and <= "
                f"{MAX_DURATION_S:.0f} (30 days)"
            )
        if self.arrival not in ARRIVAL_KINDS:
            raise ConfigError(
                f"{where}: arrival = {self.arrival!r}: must be one of {', '.join(ARRIVAL_KINDS)}"
            )
        size = self.burst_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"{where}: burst_size = {self.burst_size!r}: must be an integer >= 1")
        n = self.cotenants
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ConfigError(f"{where}: cotenants = {n!r}: must be an integer >= 0")

    @property
    def expected_requests(self) -> float:
        """Mean number of arrivals in this phase."""
        return self.rate_rps * self.duration_s


@dataclass(frozen=True)
class Schedule:
    """An ordered, non-empty sequence of phases with unique names."""

    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        phases = tuple(self.phases)
        object.__setattr__(self, "phases", phases)
        if not phases:
            raise ConfigError("schedule: phases: must hold at least one phase")
        seen: set[str] = set()
        for i, p in enumerate(phases):
            if not isinstance(p, Phase):
                raise ConfigError(f"schedule: phases[{i}] = {p!r}: must be a Phase")
            if p.name in seen:
                raise ConfigError(f"schedule: phases[{i}].name = {p.name!r}: must be unique")
            seen.add(p.name)
        _check_size(self, "schedule")

    @classmethod
    def constant(
        cls, rate_rps: float, duration_s: float, *, arrival: str = "poisson", name: str = "constant"
    ) -> Schedule:
        """One phase at ``rate_rps`` for ``duration_s``."""
        return cls((Phase(name, rate_rps, duration_s, arrival),))

    @property
    def duration_s(self) -> float:
        """Sum of the phase durations."""
        return math.fsum(p.duration_s for p in self.phases)

    @property
    def starts_s(self) -> tuple[float, ...]:
        """Offset of each phase's start from the start of the schedule."""
        starts, t = [], 0.0
        for p in self.phases:
            starts.append(t)
            t += p.duration_s
        return tuple(starts)

    @property
    def expected_requests(self) -> float:
        return math.fsum(p.expected_requests for p in self.phases)

    def phase_at(self, t_s: float) -> int | None:
        """Index of the phase running at offset ``t_s``; None before 0 or after the end."""
        if t_s < 0:
            return None
        for i, (start, p) in enumerate(zip(self.starts_s, self.phases)):
            if t_s < start + p.duration_s:
                return i
        return None

    def to_dict(self) -> dict[str, Any]:
        """The YAML/JSON form that :func:`parse_schedule` reads back."""
        out = []
        for p in self.phases:
            d: dict[str, Any] = {"name": p.name, "rate_rps": p.rate_rps, "duration_s": p.duration_s}
            if p.arrival != "poisson":
                d["arrival"] = p.arrival
            if p.arrival == "bursty":
                d["burst_size"] = p.burst_size
            if p.cotenants is not None:
                d["cotenants"] = p.cotenants
            out.append(d)
        return {"phases": out}


def parse_schedule(data: Any, source: str = "schedule") -> Schedule:
    """Validate parsed YAML (a mapping with ``phases``) into a :class:`Schedule`.

    Errors are one line: ``SOURCE: phases[1].rate_rps = -5.0: must be >= 0``.
    """
    top = Section(source, data)
    phases: list[Phase] = []
    names: dict[str, int] = {}
    for i, sec in enumerate(top.sections("phases")):
        name = sec.str("name")
        if name in names:
            raise sec.fail("name", name, f"must be unique (phases[{names[name]}] has it too)")
        names[name] = i
        rate_rps = sec.float("rate_rps", min=0.0, max=MAX_RATE_RPS)
        duration_s = sec.float("duration_s", min=0.0, min_exclusive=True)
        if duration_s > MAX_DURATION_S:
            raise sec.fail("duration_s", duration_s, f"must be <= {MAX_DURATION_S:.0f} (30 days)")
        arrival = sec.str("arrival", "poisson", choices=ARRIVAL_KINDS)
        if arrival == "bursty":
            burst_size = sec.int("burst_size", DEFAULT_BURST_SIZE, min=1)
        else:
            if sec.has("burst_size"):
                raise sec.fail("burst_size", sec.raw("burst_size"), "only applies to arrival: bursty")
            burst_size = DEFAULT_BURST_SIZE
        cotenants = sec.int("cotenants", None, min=0)
        sec.done()
        phases.append(Phase(name, rate_rps, duration_s, arrival, burst_size, cotenants))
    top.raw("cotenants", None)  # the jobs themselves: autobatch.cotenants reads them
    top.done()
    _check_size(phases, source)
    return Schedule(tuple(phases))


def _check_size(phases: Schedule | Sequence[Phase], source: str) -> None:
    if isinstance(phases, Schedule):
        phases = phases.phases
    total = math.fsum(p.expected_requests for p in phases)
    if total > MAX_REQUESTS:
        raise ConfigError(
            f"{source}: phases: {total:.3g} requests in all (rate_rps x duration_s): at most "
            f"{MAX_REQUESTS:g}; shorten the phases or lower their rates"
        )


def load_schedule(path: str | Path) -> Schedule:
    """Read and validate a schedule file; any problem is a one-line ``ConfigError``."""
    return parse_schedule(load_yaml(path), str(path))


def schedule_from_options(
    *,
    rate_rps: float | None = None,
    duration_s: float | None = None,
    path: str | Path | None = None,
    requests: int | None = None,
    burst_size: int = 0,
    allow_idle: bool = True,
) -> Schedule:
    """One workload from the options ``load`` and ``simulate`` take: a schedule file, or a
    constant rate for a duration (or for a number of ``requests``), optionally in bursts.

    ``allow_idle`` admits a rate of 0 (an idle run). Errors name the field
    (``rate``, ``duration``, ``requests``, ``bursty``) and the value.
    """
    if (rate_rps is None) == (path is None):
        raise ConfigError("give either a rate (with a duration) or a schedule file, not both or neither",
                          field="rate")
    if path is not None:
        if duration_s is not None:
            raise ConfigError(f"duration = {duration_s:g}: goes with a rate; a schedule file sets "
                              "its own durations", field="duration", value=duration_s)
        return load_schedule(path)
    assert rate_rps is not None
    if not (_finite(rate_rps) and (rate_rps > 0 or (allow_idle and rate_rps == 0))
            and rate_rps <= MAX_RATE_RPS):
        raise ConfigError(f"rate = {rate_rps:g}: must be {'>=' if allow_idle else '>'} 0 and <= "
                          f"{MAX_RATE_RPS:g} requests/s", field="rate", value=rate_rps)
    if requests is not None:
        if requests < 1:
            raise ConfigError(f"requests = {requests}: must be >= 1", field="requests", value=requests)
        duration_s = requests / rate_rps
    if duration_s is None:
        raise ConfigError("a rate needs a duration in seconds", field="duration")
    if not (_finite(duration_s) and 0 < duration_s <= MAX_DURATION_S):
        raise ConfigError(f"duration = {duration_s:g}: must be > 0 and <= {MAX_DURATION_S:.0f} seconds "
                          "(30 days)", field="duration", value=duration_s)
    if burst_size:
        if burst_size < 1:
            raise ConfigError(f"bursty = {burst_size}: must be a burst size >= 1", field="bursty",
                              value=burst_size)
        return Schedule((Phase("bursty", rate_rps, duration_s, "bursty", burst_size),))
    return Schedule.constant(rate_rps, duration_s)


# -- arrivals -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrivals:
    """Arrival offsets of a whole schedule, sorted by time.

    ``t_s[k]`` is the k-th arrival's offset in seconds from the start of the
    schedule and ``phase[k]`` the index of its phase. Both arrays are read-only.
    """

    t_s: np.ndarray
    phase: np.ndarray

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    def counts(self, n_phases: int) -> np.ndarray:
        """Number of arrivals per phase index."""
        return np.bincount(self.phase, minlength=n_phases)


def _generator(rng: np.random.Generator | random.Random | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, random.Random):
        return np.random.default_rng(rng.getrandbits(128))
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be a numpy Generator, a random.Random or an int seed, got {rng!r}")


def _count(mean: float, gen: np.random.Generator) -> int:
    """``mean`` rounded to an integer, up or down at random so the expectation is exact."""
    whole = math.floor(mean)
    frac = mean - whole
    return whole + int(frac > 0 and gen.random() < frac)


def _ordered_uniform(n: int, duration_s: float, gen: np.random.Generator) -> np.ndarray:
    """``n`` sorted uniform points in [0, duration_s), in O(n) without a sort.

    The gaps between sorted uniforms are normalised exponentials, so a cumulative
    sum of n + 1 exponentials divided by its total gives them directly.
    """
    if n == 0:
        return np.empty(0)
    c = np.cumsum(gen.standard_exponential(n + 1))
    return c[:-1] * (duration_s / c[-1])


def _phase_offsets(p: Phase, gen: np.random.Generator) -> np.ndarray:
    if p.rate_rps == 0:
        return np.empty(0)
    if p.arrival == "uniform":
        n = _count(p.expected_requests, gen)
        return np.arange(n, dtype=np.float64) * (1.0 / p.rate_rps)
    if p.arrival == "bursty":
        bursts = _count(p.expected_requests / p.burst_size, gen)
        return np.repeat(_ordered_uniform(bursts, p.duration_s, gen), p.burst_size)
    return _ordered_uniform(_count(p.expected_requests, gen), p.duration_s, gen)


def arrivals(
    schedule: Schedule | Sequence[Phase], rng: np.random.Generator | random.Random | int
) -> Arrivals:
    """Draw every arrival of ``schedule`` from ``rng`` (a numpy Generator, a
    ``random.Random`` or an int seed); the same seed gives the same arrivals.

    Offsets are relative to the schedule's start; every arrival of phase i lies
    in ``[start_i, start_i + duration_i)``.
    """
    if not isinstance(schedule, Schedule):
        schedule = Schedule(tuple(schedule))
    gen = _generator(rng)
    times, phases = [], []
    for i, (start, p) in enumerate(zip(schedule.starts_s, schedule.phases)):
        t = _phase_offsets(p, gen)
        # Uniform spacing can land a hair past the end through rounding; keep phases disjoint.
        t = t[t < p.duration_s] + start
        times.append(t)
        phases.append(np.full(t.shape[0], i, dtype=np.int32))
    t_s = np.concatenate(times) if times else np.empty(0)
    phase = np.concatenate(phases) if phases else np.empty(0, dtype=np.int32)
    t_s.setflags(write=False)
    phase.setflags(write=False)
    return Arrivals(t_s, phase)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
