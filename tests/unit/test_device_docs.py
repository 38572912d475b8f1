"""docs/shared-gpu.md's device figures come from the newest saved run of each device benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from ..conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def device_docs() -> ModuleType:
    return load_benchmark("device_docs")


def test_the_docs_blocks_are_the_newest_saved_runs(device_docs: ModuleType) -> None:
    assert device_docs.check(), "run: .venv/bin/python benchmarks/device_docs.py"


def test_each_saved_run_named_in_a_block_is_the_newest(device_docs: ModuleType) -> None:
    text = (ROOT / "docs" / "shared-gpu.md").read_text(encoding="utf-8")
    for name in ("device_accuracy", "device_timeslice", "device_util"):
        files = sorted((ROOT / "benchmarks" / "results" / name).glob("*.json"))
        if files:
            assert str(files[-1].relative_to(ROOT)) in text, name


def test_a_block_with_no_saved_run_says_how_to_make_one(device_docs: ModuleType, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_docs, "RESULTS", tmp_path)
    text = "<!-- device-util:begin -->\nold\n<!-- device-util:end -->"
    for name in ("accuracy", "timeslice", "share"):
        text += f"\n<!-- device-{name}:begin -->\n<!-- device-{name}:end -->"
    out = device_docs.render(text)
    assert "old" not in out
    assert "No saved run yet: `.venv/bin/python benchmarks/device_util.py`." in out
    assert "`.venv/bin/python benchmarks/device_share.py --case models`" in out


def test_a_miss_is_said_with_by_how_much(device_docs: ModuleType, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_docs, "RESULTS", tmp_path)
    (tmp_path / "device_util").mkdir()
    case = {"rate_rps": 70.0, "sidecar_mean": 0.6165, "device_share": 0.5909, "diff_points": 2.56,
            "per_window_median_abs_points": 3.0, "per_window_max_abs_points": 9.0, "read": 20}
    doc = {"benchmark": "device_util", "date": "2026-12-02T09:11:48Z",
           "command": "python benchmarks/device_util.py",
           "machine": {"load_average": [17.0, 15.0, 14.0]},
           "data": {"cases": [case], "worst_diff_points": 2.56, "target_points": 2.0, "period_ms": 1000.0}}
    (tmp_path / "device_util" / "20261202-091148.json").write_text(json.dumps(doc))
    out = device_docs.util()
    assert "**+2.56 points**" in out
    assert "target 2 points: **missed by 0.6 points**" in out
    assert "load average 17 from every session" in out
