"""The oracle's reaction at a controller's capability, and benchmarks/oracle_react.py on a saved run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autobatch.lab.sidebyside.run import REACT_FALLBACK_S, _react_s, capability_react_s

from ..conftest import ROOT, load_benchmark


def _switch(t_s: float, duration_s: float, ok: bool = True) -> dict[str, Any]:
    return {"t_s": t_s, "action": "switch", "ok": ok, "duration_s": duration_s}


HOLD = {"t_s": 5.0, "action": "hold"}
STARTS = [0.0, 20.0, 50.0]


@pytest.mark.parametrize(
    ("decisions", "mode", "verdict", "capability"),
    [
        # One prompt switch a phase: the two agree but for the decision's own windows.
        ([_switch(1.0, 2.0), _switch(21.0, 2.0)], "gateway", 3.0, 4.0),
        # A late move (28 s into a phase) lengthens the median, not the capability.
        ([_switch(1.0, 2.0), _switch(48.0, 2.0), _switch(78.0, 2.0)], "gateway", 30.0, 4.0),
        # Failed switches and holds are not reactions; a reload takes its actuation.
        ([HOLD, _switch(2.0, 9.0, ok=False), _switch(21.5, 1.5)], "reload", 3.0, 3.5),
        # None made: both fall back to the mode's figure.
        ([HOLD], "reload", REACT_FALLBACK_S["reload"], REACT_FALLBACK_S["reload"]),
        ([], "gateway", REACT_FALLBACK_S["gateway"], REACT_FALLBACK_S["gateway"]),
    ],
)
def test_react_table(decisions: list[dict[str, Any]], mode: str, verdict: float,
                     capability: float) -> None:
    assert _react_s(decisions, STARTS, mode) == pytest.approx(verdict)
    assert capability_react_s(decisions, STARTS, mode) == pytest.approx(capability)


def test_capability_counts_windows_of_the_interval() -> None:
    assert capability_react_s([_switch(1.0, 2.0)], STARTS, "gateway", windows=2, interval_s=5.0) == 12.0


def test_oracle_react_on_a_saved_run() -> None:
    """cotenants-linger at 13:54 on 2026-12-06: a gateway run whose late moves made its oracle
    react 18.3 s into each phase. At the capability its oracle is stricter there."""
    mod = load_benchmark("oracle_react")
    path: Path = ROOT / "benchmarks" / "results" / "shared_gpu" / "20261206-135436.json"
    rows = {r["mode"]: r for r in mod.compare(path)}
    assert set(rows) == {"reload", "gateway"}
    gw = rows["gateway"]
    assert gw["verdict"][2] == pytest.approx(1.149, abs=0.001)  # as saved
    assert gw["capability"][2] == pytest.approx(1.181, abs=0.001)
    assert all(abs(r["median_change"]) < 0.02 and not r["target_flips"] for r in rows.values())
