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
