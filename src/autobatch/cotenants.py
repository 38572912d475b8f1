"""Co-tenants: the other jobs on a shared device, what each runs and when.

A co-tenant file (or a schedule file, next to its phases) lists the jobs::

    cotenants:
      - name: train-a
        curve: ../../curves/t4-resnet50-fp16.yaml   # relative to this file
        batch_size: 32
        duty: 0.9            # closed loop: alone, it keeps the device busy 90% of the time
        start_s: 20          # optional: when it arrives (default 0) ...
        stop_s: 80           # ... and leaves (default: never)
      - name: serve-b
        curve: ../../curves/t4-resnet50-fp32.yaml
        batch_size: 8
        rate_bps: 40         # open loop: 40 batches a second
        arrival: poisson     # or uniform

Each job is one context of the device: its batches run one after another, each
``curve(batch_size)`` ms of device work. A ``duty`` job submits its next batch
``work x (1 - duty) / duty`` after the previous one completes (a training loop
with a data-loading gap); a ``rate_bps`` job submits on its own clock whether or
not the device keeps up (an inference service). A schedule's phases may give
``cotenants: N`` instead of times: the first N jobs are active in that phase.
Pure: no clock, no I/O beyond reading the files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from autobatch.config import Section, load_yaml
from autobatch.curve import BatchCurve, load_curve
from autobatch.errors import ConfigError
from autobatch.schedule import Schedule, parse_schedule

__all__ = [
    "ARRIVALS",
    "CoTenant",
    "load_cotenants",
    "load_schedule_with_cotenants",
    "parse_cotenants",
    "place_in_schedule",
]

ARRIVALS = ("poisson", "uniform")


@dataclass(frozen=True)
class CoTenant:
    """One co-tenant job."""

    name: str
    curve: BatchCurve
    batch_size: int
    rate_bps: float | None = None
    """Open loop: batches submitted per second while active."""
    duty: float | None = None
    """Closed loop: the share of the device it keeps busy when alone, in (0, 1]."""
    arrival: str = "poisson"
    """How an open-loop job spreads its batches: ``poisson`` or ``uniform``."""
    windows: tuple[tuple[float, float], ...] = ((0.0, math.inf),)
    """When it is active: [start_s, stop_s) intervals from the start of the run, in order."""

    def __post_init__(self) -> None:
        if (self.rate_bps is None) == (self.duty is None):
            raise ConfigError(f"co-tenant {self.name!r}: give rate_bps or duty, one of the two")
        if self.duty is not None and not 0 < self.duty <= 1:
            raise ConfigError(f"co-tenant {self.name!r}: duty = {self.duty!r}: must be in (0, 1]")
        if self.rate_bps is not None and not (math.isfinite(self.rate_bps) and self.rate_bps > 0):
            raise ConfigError(f"co-tenant {self.name!r}: rate_bps = {self.rate_bps!r}: must be > 0")
        if self.batch_size < 1:
            raise ConfigError(f"co-tenant {self.name!r}: batch_size = {self.batch_size!r}: must be >= 1")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"co-tenant {self.name!r}: arrival = {self.arrival!r}: must be one of "
                              f"{', '.join(ARRIVALS)}")

    @property
    def work_ms(self) -> float:
        """Device time of one of its batches, alone."""
        return self.curve.estimate(self.batch_size).ms

    @property
    def gap_ms(self) -> float:
        """Closed loop: the idle time after each batch (0 for an open-loop job)."""
        if self.duty is None:
            return 0.0
        return self.work_ms * (1.0 - self.duty) / self.duty

    @property
    def demand_share(self) -> float:
        """The share of the device it asks for alone (its duty, or rate x work)."""
        if self.duty is not None:
            return self.duty
        assert self.rate_bps is not None
        return self.rate_bps * self.work_ms / 1000.0

    def active_at(self, t_s: float) -> bool:
        return any(a <= t_s < b for a, b in self.windows)

    def next_start_s(self, t_s: float) -> float | None:
        """The earliest time >= ``t_s`` at which it is active; None if never again."""
        for a, b in self.windows:
            if t_s < b:
                return max(a, t_s)
        return None

    def closed_loop_next_s(self, completed_s: float) -> float | None:
        """Closed loop: when the batch after one completed at ``completed_s`` is submitted."""
        return self.next_start_s(completed_s + self.gap_ms / 1000.0)

    def open_loop_submits_s(self, horizon_s: float, rng: np.random.Generator | int) -> np.ndarray:
        """Open loop: every batch's submit time within its windows, up to ``horizon_s``."""
        assert self.rate_bps is not None
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        out = []
        for a, b in self.windows:
            b = min(b, horizon_s)
            if b <= a:
                continue
            n = (b - a) * self.rate_bps
            if self.arrival == "uniform":
                t = a + np.arange(math.ceil(n - 1e-9)) / self.rate_bps
            else:
                count = int(gen.poisson(n))
                t = np.sort(gen.uniform(a, b, count))
            out.append(t[t < b])
        return np.concatenate(out) if out else np.empty(0)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "curve": self.curve.name, "batch_size": self.batch_size}
        if self.duty is not None:
            d["duty"] = self.duty
        else:
            d.update(rate_bps=self.rate_bps, arrival=self.arrival)
        d["windows"] = [[a, None if math.isinf(b) else b] for a, b in self.windows]
        return d


def parse_cotenants(data: Any, source: str, base_dir: str | Path = ".") -> tuple[CoTenant, ...]:
    """The ``cotenants`` list of a parsed file (a co-tenant file, or a schedule file with one);
    () when it has none. Curve paths are relative to ``base_dir``. Other top-level keys are
    left to whoever reads them."""
    top = Section(source, data)
    if not top.has("cotenants") or top.raw("cotenants", None) is None:
        return ()
    jobs: list[CoTenant] = []
    names: dict[str, int] = {}
    for i, sec in enumerate(top.sections("cotenants")):
        name = sec.str("name")
        if name in names:
            raise sec.fail("name", name, f"must be unique (cotenants[{names[name]}] has it too)")
        names[name] = i
        curve = _curve(sec, Path(base_dir))
        batch_size = sec.int("batch_size", min=1)
        rate = sec.float("rate_bps", None, min=0.0, min_exclusive=True)
        duty = sec.float("duty", None, min=0.0, min_exclusive=True, max=1.0)
        arrival = sec.str("arrival", "poisson", choices=ARRIVALS)
        start = sec.float("start_s", 0.0, min=0.0)
        stop = sec.float("stop_s", math.inf, min=0.0)
        sec.done()  # first: a misspelt field ('dutty') is named as such, not as a missing duty
        if (rate is None) == (duty is None):
            raise sec.fail("duty" if duty is not None else "rate_bps", duty,
                           "give rate_bps (batches a second, open loop) or duty (share of the "
                           "device, closed loop): one of the two")
        if duty is not None and sec.has("arrival"):
            raise sec.fail("arrival", arrival, "only applies to an open-loop job (rate_bps)")
        if stop <= start:
            raise sec.fail("stop_s", stop, f"must be after start_s ({start:g})")
        jobs.append(CoTenant(name, curve, batch_size, rate, duty, arrival, ((start, stop),)))
    return tuple(jobs)


def _curve(sec: Section, base: Path) -> BatchCurve:
    raw = sec.raw("curve")
    if isinstance(raw, dict):
        return BatchCurve.from_mapping(raw, source=f"{sec.source}: {sec.field_path('curve')}")
    if not isinstance(raw, str) or not raw:
        raise sec.fail("curve", raw, "must be a curve file (curves/ format) or a mapping with points")
    path = Path(raw) if Path(raw).is_absolute() else base / raw
    if not path.is_file():
        raise sec.fail("curve", raw, f"no such curve file ({path})")
    return load_curve(path)


def load_cotenants(path: str | Path) -> tuple[CoTenant, ...]:
    """Read a co-tenant file (or a schedule file holding ``cotenants``); a file with none
    is an error, as asking for co-tenants and getting none would be."""
    p = Path(path)
    data = load_yaml(p)
    jobs = parse_cotenants(data, str(p), p.parent)
    if not jobs:
        raise ConfigError(f"{p}: cotenants: required field is missing (a list of jobs)",
                          source=str(p), field="cotenants")
    return jobs


def place_in_schedule(jobs: Sequence[CoTenant], schedule: Schedule,
                      source: str = "schedule") -> tuple[CoTenant, ...]:
    """``jobs`` with their windows set by the schedule's ``cotenants: N`` phases (the first
    N jobs are active in such a phase, none in a phase without it); unchanged when no phase
    gives a count."""
    counts = [p.cotenants for p in schedule.phases]
    if all(c is None for c in counts):
        return tuple(jobs)
    for i, c in enumerate(counts):
        if c is not None and c > len(jobs):
            raise ConfigError(
                f"{source}: phases[{i}].cotenants = {c}: only {len(jobs)} co-tenant job(s) are "
                "declared", source=source, field=f"phases[{i}].cotenants", value=c)
    if any(j.windows != ((0.0, math.inf),) for j in jobs):
        raise ConfigError(f"{source}: phases give co-tenant counts: leave start_s/stop_s out of "
                          "the jobs (the phases say when each runs)", source=source,
                          field="cotenants")
    out = []
    for k, job in enumerate(jobs):
        windows: list[tuple[float, float]] = []
        for start, p, c in zip(schedule.starts_s, schedule.phases, counts):
            if c is not None and c > k:
                end = start + p.duration_s
                if windows and abs(windows[-1][1] - start) < 1e-9:
                    windows[-1] = (windows[-1][0], end)
                else:
                    windows.append((start, end))
        out.append(replace(job, windows=tuple(windows) or ((0.0, 0.0),)))
    return tuple(out)


def load_schedule_with_cotenants(path: str | Path) -> tuple[Schedule, tuple[CoTenant, ...]]:
    """A schedule file and the co-tenant jobs it lists, placed by its phases' counts."""
    p = Path(path)
    data = load_yaml(p)
    schedule = parse_schedule(data, str(p))
    jobs = parse_cotenants(data, str(p), p.parent)
    if not jobs and any(ph.cotenants for ph in schedule.phases):
        raise ConfigError(f"{p}: cotenants: required field is missing (phases give co-tenant counts, "
                          "so the file must list the jobs)", source=str(p), field="cotenants")
    return schedule, place_in_schedule(jobs, schedule, str(p))
