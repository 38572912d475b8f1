"""benchmarks/shared_switches.py: each `shared` move against the two profiles held in its phase."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from ..conftest import load_benchmark

T0 = 1000.0  # the run's start, wall and monotonic
LEAD_IN = 60.0


def _held(shares: dict[str, float]) -> dict[str, Any]:
    return {"phases": [{"name": n, "over_slo_share": s} for n, s in shares.items()]}


def _result(tmp: Path, stem: str, cotenants: int = 2) -> None:
    phases = [{"name": "lead-in", "duration_s": LEAD_IN, "rate_rps": 40},
              {"name": "high", "duration_s": 30, "rate_rps": 150, "cotenants": cotenants},
              {"name": "low", "duration_s": 30, "rate_rps": 40, "cotenants": cotenants}]
    ran = {"t0_wall": T0, "t0_mono": T0}
    groups = [{"modes": {"triton-default": _held({"high": 0.001, "low": 0.010}), "gateway": ran}},
              {"modes": {"triton-default": _held({"high": 0.002, "low": 0.012}),
                         "wait25": _held({"high": 0.005, "low": 0.060})}}]
    data = {"schedule": "linger", "lead_in_s": LEAD_IN, "phases": phases,
            "runs": [{"repeat": 0, "groups": groups}]}
    (tmp / f"{stem}.json").write_text(json.dumps({"data": data}))


def _log(tmp: Path, name: str, ticks: list[tuple[float, str, str, str, dict[str, float]]]) -> None:
    """Decision-log lines: (seconds after the lead-in, action, reason, target, predictions)."""
    (tmp / "logs").mkdir(exist_ok=True)
    with gzip.open(tmp / "logs" / name, "wt", encoding="utf-8") as f:
        for t, action, reason, target, pred in ticks:
            at = T0 + LEAD_IN + t
            f.write(json.dumps({"mono": at, "decision": {
                "at_s": at, "action": action, "reason": reason, "current": "wait25", "target": target,
                "signals": {"p95_predicted_ms": pred}}}) + "\n")


def test_each_shared_move_gets_its_phase_and_the_held_profiles_shares(tmp_path: Path) -> None:
    sw = load_benchmark("shared_switches")
    _result(tmp_path, "20261206-100000")
    _result(tmp_path, "20261206-110000", cotenants=0)  # no co-tenants: left out
    _log(tmp_path, "20261206-100000-linger-r0-g0-gateway.jsonl.gz", [
        (5.0, "hold", "steady", "wait25", {"wait25": 55.0}),
        (12.5, "switch", "shared", "triton-default", {"wait25": 61.0, "triton-default": 62.0}),
        (31.5, "switch", "shared", "triton-default", {"wait25": 66.0, "triton-default": 50.0}),
        (45.0, "switch", "efficiency", "wait25", {"wait25": 40.0}),
    ])
    _log(tmp_path, "20261206-110000-linger-r0-g0-gateway.jsonl.gz", [
        (5.0, "switch", "shared", "triton-default", {"wait25": 61.0})])
    rows = list(sw.moves("20261205", tmp_path))
    assert [(r["phase"], r["into_s"], r["from"], r["to"]) for r in rows] == [
        ("high", 12.5, "wait25", "triton-default"), ("low", 1.5, "wait25", "triton-default")]
    # the held shares come from whichever group held each profile: wait25 0.5% -> the default 0.1%
    assert [r["gain_points"] for r in rows] == [0.4, 5.0]
    table = {(c["class"], c["when"]): c for c in sw.classes(rows, points=1.0, start_s=3.0)}
    assert set(table) == {("not wanted", "later"), ("wanted", "start")}
    later = table[("not wanted", "later")]
    assert (later["moves"], later["target_no_lower"], later["predicted_min_ms"]) == (1, 1, 61.0)
    start = table[("wanted", "start")]
    assert (start["moves"], start["target_no_lower"], start["phases"]) == (1, 0, ["linger low"])
