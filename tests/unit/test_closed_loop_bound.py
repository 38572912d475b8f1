"""The per-phase bound of benchmarks/closed_loop.py: the least device time the static runs allow.

A table of small runs, then every current result file: its saved bound is what the
function gives from the same file's phases, so the README's "per-phase bound" is
the function's.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from autobatch.schedule import Phase, Schedule

from ..conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "closed_loop"


def _bench() -> ModuleType:
    return load_benchmark("closed_loop", "closed_loop_bench")


cl = _bench()


def ph(requests: int, over: float, p95: float, dev: float | None) -> dict[str, Any]:
    return {"requests": requests, "over_slo_share": over, "p95_ms": p95, "device_ms": dev}


LOW, HIGH, IDLE = (100, 0.0, 10.0, 8.0), (1000, 0.0, 30.0, 4.0), (0, 0.0, 0.0, None)


@pytest.mark.parametrize(
    ("name", "efficient", "points", "low", "want_ratio", "want"),
    [
        # efficient's low-phase p95 is 1.2x the default's: the default there, efficient when busy
        ("low p95 too slow", [(100, 0.0, 12.0, 7.5), (1000, 0.005, 40.0, 3.0), (100, 0.0, 12.0, 7.5)],
         0.01, [0, 2], (800 + 3000 + 800) / 5600, ["triton-default", "efficient", "triton-default"]),
        # within 1.1x it is eligible in the low phases too, and cheaper
        ("low p95 close", [(100, 0.0, 10.5, 7.0), (1000, 0.005, 40.0, 3.0), (100, 0.0, 10.5, 7.0)],
         0.01, [0, 2], (700 + 3000 + 700) / 5600, ["efficient", "efficient", "efficient"]),
        # 3 points over the phase's best: out at 1 point, in at 3
        ("over by 3 points, gateway", [(100, 0.0, 12.0, 7.5), (1000, 0.03, 40.0, 3.0), (100, 0.0, 12.0, 7.5)],
         0.01, [0, 2], 1.0, ["triton-default", "triton-default", "triton-default"]),
        ("over by 3 points, reload", [(100, 0.0, 12.0, 7.5), (1000, 0.03, 40.0, 3.0), (100, 0.0, 12.0, 7.5)],
         0.03, [0, 2], (800 + 3000 + 800) / 5600, ["triton-default", "efficient", "triton-default"]),
    ],
)
def test_bound_picks_the_cheapest_profile_that_meets_the_phase_targets(
    name: str, efficient: list[tuple[int, float, float, float]], points: float, low: list[int],
    want_ratio: float, want: list[str],
) -> None:
    phases = {"triton-default": [ph(*LOW), ph(*HIGH), ph(*LOW)], "efficient": [ph(*p) for p in efficient]}
    got = cl.per_phase_bound(phases, low, points)
    assert got is not None, name
    assert got["profiles"] == want, name
    assert got["device_vs_default"] == pytest.approx(want_ratio, abs=1e-4), name


def test_bound_skips_idle_phases_and_needs_the_default() -> None:
    phases = {"triton-default": [ph(*LOW), ph(*IDLE), ph(*HIGH)],
              "efficient": [ph(100, 0.0, 20.0, 6.0), ph(*IDLE), ph(1000, 0.0, 40.0, 2.0)]}
    got = cl.per_phase_bound(phases, [0], 0.01)
    assert got is not None
    assert got["profiles"] == ["triton-default", None, "efficient"]
    assert got["device_vs_default"] == pytest.approx((800 + 2000) / 4800, abs=1e-4)
    assert cl.per_phase_bound({"efficient": phases["efficient"]}, [0], 0.01) is None


def test_reacting_bound_runs_the_previous_choice_for_the_first_seconds_of_a_phase() -> None:
    # 10 s low, 20 s high, 10 s low again; efficient in the high phase only
    phases = {"triton-default": [ph(*LOW), ph(2000, 0.0, 30.0, 4.0), ph(*LOW)],
              "efficient": [ph(100, 0.0, 20.0, 6.0), ph(2000, 0.0, 35.0, 2.0), ph(100, 0.0, 20.0, 6.0)]}
    got = cl.per_phase_bound(phases, [0, 2], 0.01, [10.0, 20.0, 10.0], 2.0)
    assert got is not None
    assert got["profiles"] == ["triton-default", "efficient", "triton-default"]
    base = 800 + 8000 + 800
    assert got["device_vs_default"] == pytest.approx((800 + 4000 + 800) / base, abs=1e-4)
    # the first 2 s of the high phase on the default (a tenth), of the low again on efficient (a fifth)
    late = 800 + 2000 * (0.1 * 4.0 + 0.9 * 2.0) + 100 * (0.2 * 6.0 + 0.8 * 8.0)
    assert got["reacting"] == {"react_s": 2.0, "device_vs_default": pytest.approx(late / base, abs=1e-4)}
    # a reaction as long as the phase: the previous choice throughout it
    whole = cl.per_phase_bound(phases, [0, 2], 0.01, [10.0, 20.0, 10.0], 30.0)
    assert whole is not None and whole["reacting"]["device_vs_default"] == pytest.approx(
        (800 + 8000 + 600) / base, abs=1e-4)
    # no durations, no reacting form
    assert "reacting" not in cl.per_phase_bound(phases, [0, 2], 0.01)


def current_files() -> list[Path]:
    return sorted(RESULTS.glob("*.json"))


@pytest.mark.parametrize("path", current_files(), ids=lambda p: p.stem)
def test_saved_bound_is_the_functions(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    for run in doc["data"]["runs"]:
        modes = run["modes"]
        statics = {m: r["phases"] for m, r in modes.items() if m not in ("reload", "gateway")}
        schedule = Schedule(tuple(Phase(p["name"], p["rate_rps"], p["duration_s"]) for p in run["phases"]))
        low = cl.low_phases(schedule)
        durations = [p.duration_s for p in schedule.phases]
        for mode, c in run["comparison"]["controllers"].items():
            want = cl.per_phase_bound(statics, low, cl.TARGETS[mode], durations, cl.REACT_S[mode])
            assert c["device_bound"] == want, (path.name, mode)


# -- alternating blocks: the modes take turns on the CPU ---------------------------------------


def test_each_block_rotates_the_modes_turn() -> None:
    modes = ["triton-default", "efficient", "reload", "gateway"]
    orders = [cl._block_order(modes, b) for b in range(4)]
    assert orders[1] == ["efficient", "reload", "gateway", "triton-default"]
    assert [o[0] for o in orders] == modes  # each mode runs first once in four blocks
    assert cl._block_order(modes, 4) == modes


def controllers(dev: float, worst: float) -> dict[str, Any]:
    c = {"device_vs_default": dev, "worst_excess_points": worst, "low_p95_vs_default": 1.0,
         "target_points": 3.0, "device_bound": {"device_vs_default": 0.8}}
    return {"comparison": {"controllers": {"reload": c}}}


def test_the_blocks_give_a_median_and_a_spread_per_controller() -> None:
    runs = [{"schedule": "step", "instances": 2, "block": b, **controllers(d, w)}
            for b, (d, w) in enumerate([(0.80, 0.5), (0.86, 0.1), (0.82, 2.0)])]
    got = cl.block_spreads({"runs": runs})[("step", 2, "reload")]
    assert got["device_vs_default"]["median"] == pytest.approx(0.82)
    assert got["device_vs_default"]["spread"] == pytest.approx(0.06)
    assert got["worst_excess_points"]["median"] == pytest.approx(0.5)
    (row,) = cl.rows_for({"runs": runs})
    assert row["value"] == pytest.approx(0.82) and "spread 0.06 over 3 blocks" in row["figure"]
