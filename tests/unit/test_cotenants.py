"""Co-tenant jobs: the file format, their clocks, and a schedule's `cotenants: N` phases."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from autobatch.cotenants import (
    CoTenant,
    load_cotenants,
    load_schedule_with_cotenants,
    parse_cotenants,
    place_in_schedule,
)
from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError
from autobatch.schedule import Phase, Schedule, parse_schedule

CURVE = BatchCurve({1: 12.96, 8: 12.82, 16: 15.8, 32: 29.54}, name="t4")


@pytest.fixture
def curve_file(tmp_path: Path) -> Path:
    p = tmp_path / "t4.yaml"
    p.write_text("name: t4\nunit: ms\npoints: {1: 12.96, 8: 12.82, 16: 15.8, 32: 29.54}\n")
    return p


def test_parse_a_file_of_both_kinds(tmp_path: Path, curve_file: Path) -> None:
    f = tmp_path / "co.yaml"
    f.write_text(
        "cotenants:\n"
        "  - {name: train, curve: t4.yaml, batch_size: 32, duty: 0.9, start_s: 10, stop_s: 30}\n"
        "  - {name: serve, curve: {points: {1: 5.0}}, batch_size: 1, rate_bps: 40, arrival: uniform}\n"
    )
    train, serve = load_cotenants(f)
    assert train.name == "train" and train.curve.name == "t4"
    assert train.work_ms == pytest.approx(29.54)
    assert train.gap_ms == pytest.approx(29.54 * 0.1 / 0.9)
    assert train.windows == ((10.0, 30.0),)
    assert serve.rate_bps == 40 and serve.duty is None and serve.windows == ((0.0, math.inf),)
    assert serve.demand_share == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ("{name: a, curve: nope.yaml, batch_size: 1, duty: 0.5}",
         "cotenants[0].curve = 'nope.yaml': no such curve file"),
        ("{name: a, curve: t4.yaml, batch_size: 1, duty: 0.5, rate_bps: 3}",
         "cotenants[0].duty = 0.5: give rate_bps"),
        ("{name: a, curve: t4.yaml, batch_size: 1}", "cotenants[0].rate_bps = None: give rate_bps"),
        ("{name: a, curve: t4.yaml, batch_size: 1, duty: 1.5}", "cotenants[0].duty = 1.5: must be <= 1"),
        ("{name: a, curve: t4.yaml, batch_size: 0, duty: 0.5}", "cotenants[0].batch_size = 0: must be"),
        ("{name: a, curve: t4.yaml, batch_size: 1, duty: 0.5, batch: 3}",
         "cotenants[0].batch = 3: unknown field"),
        ("{name: a, curve: t4.yaml, batch_size: 1, duty: 0.5, arrival: uniform}",
         "cotenants[0].arrival = 'uniform': only applies to an open-loop job"),
        ("{name: a, curve: t4.yaml, batch_size: 1, duty: 0.5, start_s: 5, stop_s: 5}",
         "cotenants[0].stop_s = 5.0: must be after start_s"),
    ],
)
def test_bad_jobs_are_one_line_naming_file_field_value(tmp_path: Path, curve_file: Path, job: str,
                                                       message: str) -> None:
    f = tmp_path / "co.yaml"
    f.write_text(f"cotenants:\n  - {job}\n")
    with pytest.raises(ConfigError) as err:
        load_cotenants(f)
    assert str(err.value).startswith(f"{f}: {message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_a_file_without_jobs_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "co.yaml"
    f.write_text("jobs: []\n")
    with pytest.raises(ConfigError, match="cotenants: required field is missing"):
        load_cotenants(f)
    assert parse_cotenants({"phases": []}, "x") == ()


def test_closed_loop_clock_waits_its_gap_and_its_windows() -> None:
    job = CoTenant("t", CURVE, 32, duty=0.5, windows=((0.0, 1.0), (2.0, 3.0)))
    assert job.gap_ms == pytest.approx(29.54)
    assert job.closed_loop_next_s(0.5) == pytest.approx(0.52954)
    assert job.closed_loop_next_s(0.99) == 2.0  # the gap ends after its window: the next one
    assert job.closed_loop_next_s(2.99) is None
    assert job.active_at(2.5) and not job.active_at(1.5)


def test_open_loop_submits_inside_windows_and_repeat_by_seed() -> None:
    job = CoTenant("s", CURVE, 1, rate_bps=100.0, windows=((0.0, 1.0), (2.0, 3.0)))
    a = job.open_loop_submits_s(10.0, 7)
    assert np.array_equal(a, job.open_loop_submits_s(10.0, 7))
    assert np.all(((a >= 0) & (a < 1)) | ((a >= 2) & (a < 3)))
    assert 140 < len(a) < 260
    u = CoTenant("u", CURVE, 1, rate_bps=10.0, arrival="uniform").open_loop_submits_s(1.0, 0)
    assert u.tolist() == pytest.approx([i / 10 for i in range(10)])


def test_schedule_phases_place_the_first_n_jobs(tmp_path: Path, curve_file: Path) -> None:
    f = tmp_path / "sched.yaml"
    f.write_text(
        "phases:\n"
        "  - {name: alone, rate_rps: 150, duration_s: 10}\n"
        "  - {name: two, rate_rps: 150, duration_s: 10, cotenants: 2}\n"
        "  - {name: one, rate_rps: 150, duration_s: 5, cotenants: 1}\n"
        "  - {name: none, rate_rps: 150, duration_s: 5, cotenants: 0}\n"
        "cotenants:\n"
        "  - {name: a, curve: t4.yaml, batch_size: 32, duty: 0.9}\n"
        "  - {name: b, curve: t4.yaml, batch_size: 32, duty: 0.9}\n"
    )
    schedule, (a, b) = load_schedule_with_cotenants(f)
    assert [p.cotenants for p in schedule.phases] == [None, 2, 1, 0]
    assert a.windows == ((10.0, 25.0),)
    assert b.windows == ((10.0, 20.0),)
    assert parse_schedule(schedule.to_dict()) == schedule


def test_schedule_counts_beyond_the_jobs_or_beside_job_times_fail() -> None:
    sched = Schedule((Phase("p", 10, 5, cotenants=3),))
    with pytest.raises(ConfigError, match=r"s.yaml: phases\[0\].cotenants = 3: only 1 co-tenant"):
        place_in_schedule([CoTenant("a", CURVE, 1, duty=0.5)], sched, "s.yaml")
    timed = CoTenant("a", CURVE, 1, duty=0.5, windows=((1.0, 2.0),))
    with pytest.raises(ConfigError, match="leave start_s/stop_s out"):
        place_in_schedule([timed], Schedule((Phase("p", 10, 5, cotenants=1),)), "s.yaml")
    plain = Schedule((Phase("p", 10, 5),))
    assert place_in_schedule([timed], plain) == (timed,)


def test_phase_cotenants_must_be_a_count() -> None:
    with pytest.raises(ConfigError, match=r"phases\[0\].cotenants = -1: must be"):
        parse_schedule({"phases": [{"name": "p", "rate_rps": 1, "duration_s": 1, "cotenants": -1}]}, "s")
    with pytest.raises(ConfigError, match="cotenants = True: must be an integer"):
        Phase("p", 1, 1, cotenants=True)
