"""Schedules: validation, the file format, and the arrival times they draw."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from autobatch.errors import ConfigError
from autobatch.schedule import (
    ARRIVAL_KINDS,
    Phase,
    Schedule,
    arrivals,
    load_schedule,
    parse_schedule,
    schedule_from_options,
)

from ..conftest import ROOT

EXAMPLES = ROOT / "examples" / "schedules"


def phases(*items: dict) -> dict:
    return {"phases": list(items)}


P = {"name": "a", "rate_rps": 10, "duration_s": 1}

# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "s.yaml: phases: required field is missing"),
        ([], "s.yaml: (top level) = []: must be a mapping of field: value"),
        (phases(), "s.yaml: phases = []: must be a non-empty list"),
        ({"phases": {"a": 1}}, "s.yaml: phases = {'a': 1}: must be a non-empty list"),
        (phases("low"), "s.yaml: phases[0] = 'low': must be a mapping of field: value"),
        (phases({**P, "rate_rps": -5}), "s.yaml: phases[0].rate_rps = -5.0: must be >= 0"),
        (phases({**P, "rate_rps": "fast"}), "phases[0].rate_rps = 'fast': must be a finite number"),
        (phases({**P, "rate_rps": float("nan")}), "phases[0].rate_rps = nan: must be a finite number"),
        (phases({**P, "duration_s": 0}), "s.yaml: phases[0].duration_s = 0.0: must be > 0"),
        (phases({**P, "duration_s": -1}), "phases[0].duration_s = -1.0: must be > 0"),
        (phases({"rate_rps": 1, "duration_s": 1}), "phases[0].name: required field is missing"),
        (phases({**P, "duration_s": None}), "phases[0].duration_s: required field is missing"),
        (phases(P, {**P, "rate_rps": 5}), "phases[1].name = 'a': must be unique (phases[0] has it too)"),
        # Bounds: past them the arrivals cannot be drawn (numpy refused) or take for ever to run.
        (phases({**P, "rate_rps": 1.0e300}), "s.yaml: phases[0].rate_rps = 1e+300: must be <= 1e+07"),
        (phases({**P, "duration_s": 1.0e9}),
         "s.yaml: phases[0].duration_s = 1000000000.0: must be <= 2592000 (30 days)"),
        (phases({**P, "rate_rps": 1e7, "duration_s": 1000}),
         "s.yaml: phases: 1e+10 requests in all (rate_rps x duration_s): at most 1e+09"),
        (
            phases({**P, "arrival": "gamma"}),
            "phases[0].arrival = 'gamma': must be one of poisson, uniform, bursty",
        ),
        (
            phases({**P, "burst_size": 4}),
            "phases[0].burst_size = 4: only applies to arrival: bursty",
        ),
        (
            phases({**P, "arrival": "bursty", "burst_size": 0}),
            "phases[0].burst_size = 0: must be >= 1",
        ),
        (
            phases({**P, "arrival": "bursty", "burst_size": 2.5}),
            "phases[0].burst_size = 2.5: must be an integer",
        ),
        (phases({**P, "rps": 3}), "phases[0].rps = 3: unknown field (known fields here:"),
        ({**phases(P), "loop": True}, "s.yaml: loop = True: unknown field"),
    ],
)
def test_bad_schedules_are_one_line_errors(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_schedule(data, "s.yaml")
    text = str(info.value)
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Phase("a", -1, 1), "phase 'a': rate_rps = -1: must be a number >= 0"),
        (lambda: Phase("a", 1, 0), "phase 'a': duration_s = 0: must be a number > 0"),
        (lambda: Phase("a", 1, float("inf")), "duration_s = inf: must be a number > 0"),
        (lambda: Phase("", 1, 1), "phase name = '': must be a non-empty string"),
        (lambda: Phase("a", 1, 1, "zipf"), "arrival = 'zipf': must be one of"),
        (lambda: Phase("a", 1, 1, "bursty", 0), "burst_size = 0: must be an integer >= 1"),
        (lambda: Schedule(()), "schedule: phases: must hold at least one phase"),
        (
            lambda: Schedule((Phase("a", 1, 1), Phase("a", 2, 1))),
            "schedule: phases[1].name = 'a': must be unique",
        ),
        (lambda: Schedule.constant(-3, 10), "rate_rps = -3: must be a number >= 0"),
        (lambda: Phase("a", 1e8, 1), "phase 'a': rate_rps = 100000000.0: must be a number >= 0 and <= 1e+07"),
        (lambda: Phase("a", 1, 1e9), "duration_s = 1000000000.0: must be a number > 0 and <= 2592000"),
        (lambda: Schedule.constant(1e7, 1e3), "schedule: phases: 1e+10 requests in all"),
        (lambda: schedule_from_options(rate_rps=1e300, duration_s=1), "rate = 1e+300: must be >= 0 and <="),
        (lambda: schedule_from_options(rate_rps=1, duration_s=1e9), "duration = 1e+09: must be > 0 and"),
    ],
)
def test_constructors_validate(make, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        make()
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "file not found"),
        ("phases: [\n", "not valid YAML (line"),
        ("phases:\n  - {name: a, rate_rps: -1, duration_s: 1}\n", "phases[0].rate_rps = -1.0"),
    ],
)
def test_load_schedule_errors_name_the_file(tmp_path: Path, text: str | None, message: str) -> None:
    path = tmp_path / "sched.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_schedule(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_step_example_is_low_high_low() -> None:
    s = load_schedule(EXAMPLES / "step.yaml")
    assert [(p.name, p.rate_rps, p.duration_s) for p in s.phases] == [
        ("low", 30.0, 25.0),
        ("high", 350.0, 50.0),
        ("low-again", 30.0, 45.0),
    ]
    assert s.duration_s == 120.0
    assert s.starts_s == (0.0, 25.0, 75.0)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_parses_and_round_trips(path: Path) -> None:
    s = load_schedule(path)
    assert parse_schedule(s.to_dict()) == s


def test_parse_reads_arrival_and_burst_size() -> None:
    s = parse_schedule(
        phases(
            {"name": "i", "rate_rps": 0, "duration_s": 2},
            {"name": "b", "rate_rps": 80, "duration_s": 1, "arrival": "bursty", "burst_size": 4},
            {"name": "u", "rate_rps": 5, "duration_s": 1, "arrival": "uniform"},
        )
    )
    assert s.phases[0] == Phase("i", 0.0, 2.0)
    assert (s.phases[1].arrival, s.phases[1].burst_size) == ("bursty", 4)
    assert s.phases[2].arrival == "uniform"


@pytest.mark.parametrize(
    ("t_s", "expected"),
    [(-0.1, None), (0.0, 0), (0.999, 0), (1.0, 1), (2.5, 2), (3.0, None)],
)
def test_phase_at(t_s: float, expected: int | None) -> None:
    s = Schedule((Phase("a", 1, 1), Phase("b", 0, 1), Phase("c", 1, 1)))
    assert s.phase_at(t_s) == expected


# -- arrivals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "count"),
    [
        # Poisson and uniform phases offer exactly rate x duration requests.
        (Phase("p", 100, 10), 1000),
        (Phase("p", 37, 3), 111),
        (Phase("u", 100, 10, "uniform"), 1000),
        (Phase("u", 7, 3, "uniform"), 21),
        # Bursty: whole bursts, rate x duration / burst_size of them.
        (Phase("b", 80, 10, "bursty", 8), 800),
        (Phase("b", 100, 4, "bursty", 16), 400),  # 25 bursts
        (Phase("idle", 0, 5), 0),
    ],
)
def test_arrival_counts(phase: Phase, count: int) -> None:
    a = arrivals(Schedule((phase,)), np.random.default_rng(1))
    assert len(a) == count


@pytest.mark.parametrize("arrival", ARRIVAL_KINDS)
def test_fractional_counts_are_exact_on_average(arrival: str) -> None:
    # 1.5 expected requests: 1 or 2, mean 1.5 (bursty: 1.5 bursts of 1).
    phase = Phase("f", 0.5, 3, arrival, 1)
    gen = np.random.default_rng(7)
    counts = [len(arrivals([phase], gen)) for _ in range(4000)]
    assert set(counts) == {1, 2}
    assert np.mean(counts) == pytest.approx(1.5, abs=0.05)


@pytest.mark.parametrize(
    ("arrival", "cv_low", "cv_high"),
    [
        # Poisson gaps are exponential: coefficient of variation 1.
        ("poisson", 0.95, 1.05),
        ("uniform", 0.0, 1e-6),
    ],
)
def test_gap_statistics(arrival: str, cv_low: float, cv_high: float) -> None:
    rate_rps = 500.0
    a = arrivals(Schedule.constant(rate_rps, 40, arrival=arrival), np.random.default_rng(3))
    gaps = np.diff(a.t_s)
    assert gaps.mean() == pytest.approx(1 / rate_rps, rel=0.01)
    cv = gaps.std() / gaps.mean()
    assert cv_low <= cv <= cv_high


def test_poisson_counts_per_second_look_poisson() -> None:
    # Conditioned on the total, counts in 1 s bins are binomial(n, 1/T): mean = rate,
    # variance ~ rate (1 - 1/T). Bounds are several standard errors wide.
    a = arrivals(Schedule.constant(200, 400), np.random.default_rng(11))
    per_s = np.bincount(a.t_s.astype(int), minlength=400)
    assert per_s.mean() == pytest.approx(200, abs=1e-9)
    assert 150 < per_s.var() < 250


def test_bursts_share_one_instant() -> None:
    a = arrivals(Schedule((Phase("b", 120, 10, "bursty", 6),)), np.random.default_rng(5))
    _, sizes = np.unique(a.t_s, return_counts=True)
    assert set(sizes.tolist()) == {6}
    assert len(sizes) == 200


def test_arrivals_are_sorted_and_stay_inside_their_phase() -> None:
    s = Schedule(
        (
            Phase("low", 20, 2),
            Phase("idle", 0, 1),
            Phase("high", 150, 3, "bursty", 4),
            Phase("even", 30, 2, "uniform"),
            Phase("low-again", 20, 2),
        )
    )
    a = arrivals(s, np.random.default_rng(0))
    assert np.all(np.diff(a.t_s) >= 0)
    assert np.all(np.diff(a.phase) >= 0)
    for i, (start, p) in enumerate(zip(s.starts_s, s.phases)):
        t = a.t_s[a.phase == i]
        assert np.all((t >= start) & (t < start + p.duration_s)), p.name
    counts = a.counts(len(s.phases)).tolist()
    assert counts[:2] + counts[3:] == [40, 0, 60, 40]
    assert counts[2] in (448, 452)  # 112.5 bursts of 4: 112 or 113


def test_uniform_starts_at_its_phase_start() -> None:
    s = Schedule((Phase("a", 10, 1), Phase("u", 4, 1, "uniform")))
    a = arrivals(s, 0)
    assert a.t_s[a.phase == 1].tolist() == pytest.approx([1.0, 1.25, 1.5, 1.75])


@pytest.mark.parametrize(
    "make_rng",
    [
        lambda: np.random.default_rng(42),
        lambda: random.Random(42),
        lambda: 42,
    ],
    ids=["numpy", "random", "int"],
)
def test_same_seed_same_arrivals(make_rng) -> None:
    s = Schedule((Phase("a", 50, 2), Phase("b", 100, 1, "bursty")))
    one, two = arrivals(s, make_rng()), arrivals(s, make_rng())
    np.testing.assert_array_equal(one.t_s, two.t_s)
    np.testing.assert_array_equal(one.phase, two.phase)
    other = arrivals(s, 43)
    assert len(other.t_s) != len(one.t_s) or not np.array_equal(other.t_s, one.t_s)


def test_arrival_arrays_are_read_only() -> None:
    a = arrivals(Schedule.constant(10, 1), 0)
    with pytest.raises(ValueError):
        a.t_s[0] = 5.0


def test_all_idle_schedule_has_no_arrivals() -> None:
    a = arrivals(Schedule((Phase("x", 0, 1), Phase("y", 0, 2))), 0)
    assert len(a) == 0
    assert a.t_s.dtype == np.float64


def test_bad_rng_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="rng must be"):
        arrivals(Schedule.constant(1, 1), "seed")  # type: ignore[arg-type]
