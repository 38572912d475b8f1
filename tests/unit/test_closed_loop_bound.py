"""The per-phase bound of benchmarks/closed_loop.py: the least device time the static runs allow.

A table of small runs, then every current result file: its saved bound is what the
function gives from the same file's phases, so the README's "per-phase bound" is
the function's.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from autobatch.schedule import Phase, Schedule

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "closed_loop"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("closed_loop_bench", ROOT / "benchmarks" / "closed_loop.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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


# -- the machine check: the default's phases against the saved runs' -----------------------

SAVED = {
    "low": [("a", {"name": "low", "device_ms": 7.9, "over_slo_share": 0.0}),
            ("b", {"name": "low", "device_ms": 8.0, "over_slo_share": 0.0})],
    "idle": [("a", {"name": "idle", "device_ms": None, "over_slo_share": 0.0})],
    "burst": [("a", {"name": "burst", "device_ms": 3.65, "over_slo_share": 0.002}),
              ("b", {"name": "burst", "device_ms": 3.75, "over_slo_share": 0.008})],
}


def phases(burst_ms: float | None, burst_share: float, low_ms: float = 7.8) -> list[dict[str, Any]]:
    return [{"name": "low", "device_ms": low_ms, "over_slo_share": 0.0},
            {"name": "idle", "device_ms": None, "over_slo_share": 0.0},
            {"name": "burst", "device_ms": burst_ms, "over_slo_share": burst_share},
            {"name": "tail", "device_ms": 9.9, "over_slo_share": 0.5}]  # no saved reading: not judged


@pytest.mark.parametrize(
    ("run", "ok", "worst"),
    [
        (phases(3.70, 0.005), True, "burst: 3.70 ms a request, 0.99x"),  # as the saved runs
        (phases(4.10, 0.020), True, "burst: 4.10 ms a request, 1.09x"),  # 1.2 points more over
        (phases(4.20, 0.005), False, "burst: 4.20 ms a request, 1.12x"),  # 15:37 read 4.38
        (phases(3.70, 0.030), False, "+2.2 points"),  # as fast, but more over the SLO
        (phases(3.70, 0.005, low_ms=11.7), False, "low: 11.70 ms a request, 1.46x"),  # 18:07
        (phases(None, 0.005), False, "burst: no reading"),  # nothing to tell the speed by
    ],
)
def test_machine_check(run: list[dict[str, Any]], ok: bool, worst: str) -> None:
    passed, text = cl.machine_check(run, SAVED)
    assert passed is ok, text
    assert ("SLOWER" in text) is (not ok) and worst in text


def test_the_machine_check_reads_the_current_runs() -> None:
    runs = cl.saved_runs(RESULTS)
    saved = cl.saved_default_phases(runs, "bursty", 2)
    assert len(saved["burst"]) >= 3 and all(p["device_ms"] for _, p in saved["burst"])
    assert cl.saved_default_phases(runs, "bursty", 7) == {}
    with pytest.raises(ValueError):
        cl.machine_check([{"name": "burst", "device_ms": 3.7, "over_slo_share": 0.0}], {})


def modes(**first: tuple[float | None, dict[str, float]]) -> dict[str, dict[str, Any]]:
    return {m: {"phases": [{"name": "low", "device_ms": dev, "profiles": prof}]}
            for m, (dev, prof) in first.items()}


DEFAULT = {"triton-default": 1.0}


@pytest.mark.parametrize(
    ("run", "ok"),
    [
        # 2026-11-30 20:57: the same work within 2%; efficient batches, so it does not count
        (modes(**{"triton-default": (8.00, DEFAULT), "efficient": (7.25, {"efficient": 1.0}),
                  "reload": (8.14, DEFAULT), "gateway": (8.01, DEFAULT)}), True),
        # 2026-12-01 19:02: the machine slowed down between the default and the controllers
        (modes(**{"triton-default": (6.50, DEFAULT), "reload": (8.90, DEFAULT),
                  "gateway": (8.37, DEFAULT)}), False),
        # a controller that moved during the first phase served part of it elsewhere
        (modes(**{"triton-default": (6.50, DEFAULT),
                  "gateway": (8.90, {"triton-default": 0.6, "efficient": 0.4})}), None),
        (modes(**{"triton-default": (6.50, DEFAULT), "reload": (None, DEFAULT)}), None),
    ],
)
def test_drift_check(run: dict[str, dict[str, Any]], ok: bool | None) -> None:
    verdict = cl.drift_check(run)
    assert (None if verdict is None else verdict[0]) is ok, verdict


@pytest.mark.parametrize("path", current_files(), ids=lambda p: p.stem)
def test_every_saved_run_passes_the_drift_check(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    for run in doc["data"]["runs"]:
        verdict = cl.drift_check(run["modes"])
        assert verdict is None or verdict[0], (path.name, verdict)
