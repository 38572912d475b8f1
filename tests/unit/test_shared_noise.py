"""benchmarks/shared_noise.py: the two groups' defaults of one repeat, phase by phase."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..conftest import load_benchmark


def _phase(name: str, over: float, requests: int = 400, measured: bool = True) -> dict[str, Any]:
    return {"name": name, "over_slo_share": over, "requests": requests, "measured": measured}


def _save(tmp: Path, stem: str, schedule: str, repeats: list[list[list[dict[str, Any]]]]) -> None:
    """One result: a repeat per item, a group per phase list (each holding triton-default)."""
    runs = [{"repeat": i, "groups": [{"modes": {"triton-default": {"phases": phases}, "wait25": {}}}
                                     for phases in groups]} for i, groups in enumerate(repeats)]
    (tmp / f"{stem}.json").write_text(json.dumps({"data": {"schedule": schedule, "runs": runs}}))


def test_each_run_gives_its_largest_phase_difference_and_a_schedule_counts_them(tmp_path: Path) -> None:
    noise = load_benchmark("shared_noise")
    _save(tmp_path, "20261206-100000", "ebb", [
        [[_phase("lead-in", 0.30, measured=False), _phase("up", 0.010), _phase("low", 0.020, 300)],
         [_phase("lead-in", 0.00, measured=False), _phase("up", 0.012), _phase("low", 0.005, 300)]],
        [[_phase("up", 0.000), _phase("low", 0.010, 300)],
         [_phase("up", 0.004), _phase("low", 0.011, 300)]],
    ])
    _save(tmp_path, "20261204-100000", "ebb", [  # before --since: left out
        [[_phase("up", 0.5)], [_phase("up", 0.0)]]])
    _save(tmp_path, "20261206-110000", "step", [  # one group holds the default: no pair
        [[_phase("up", 0.5)]]])
    rows = noise.runs("20261205", tmp_path)
    # the unmeasured lead-in's 30 points do not count; the first repeat differs most at `low`
    assert [(r["repeat"], r["points"], r["phase"]) for r in rows] == [(0, 1.5, "low"), (1, 0.4, "up")]
    [ebb] = noise.by_schedule(rows)
    assert (ebb["schedule"], ebb["runs"], ebb["over_1"], ebb["over_3"]) == ("ebb", 2, 1, 0)
    assert (ebb["median"], ebb["max"], ebb["max_at"]) == (0.95, 1.5, "20261206-100000 r0 low")
    assert ebb["phase_requests"] == "300-400"


def test_beside_takes_each_controller_against_its_own_group_s_default(tmp_path: Path) -> None:
    noise = load_benchmark("shared_noise")

    def group(default: int, **modes: int) -> dict[str, Any]:
        at = {"triton-default": default, **modes}
        return {"modes": {m: {"phases": [{"name": "up", "over_slo": 0, "requests": 100},
                                         {"name": "three", "over_slo": n, "requests": 1000}]}
                          for m, n in at.items()}}

    def save(stem: str, runs: list[list[dict[str, Any]]], **extra: Any) -> None:
        data = {"schedule": "ebb", "runs": [{"repeat": i, "groups": g} for i, g in enumerate(runs)], **extra}
        (tmp_path / f"{stem}.json").write_text(json.dumps({"data": data}))

    save("20261206-100000", [[group(20, reload=30, gateway=25), group(10, wait25=90)],
                             [group(5, wait25=80), group(30, reload=28, gateway=31)]])
    save("20261206-110000", [[group(0, reload=99)]], variants=["rr=reload:policy.x=1"])  # a variant: out
    save("20261205-100000", [[group(0, reload=99)]])  # before --since: out
    rows = {r["controller"]: r for r in noise.beside("20261206", "three", tmp_path)}
    # each against the default of its own group (20, then 30), not the other group's
    assert (rows["reload"]["min"], rows["reload"]["max"], rows["reload"]["repeats"]) == (-2, 10, 2)
    assert (rows["gateway"]["min"], rows["gateway"]["max"], rows["gateway"]["median"]) == (1, 5, 3)
    assert rows["reload"]["phase_requests"] == [1000] and noise.beside("20261206", "none", tmp_path) == []
