"""docs/shared-gpu.md's planner table comes from the newest saved run of benchmarks/shared_plan.py."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ..conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    return load_benchmark(name)


def test_the_docs_table_is_the_newest_saved_run():
    shared_plan = _module("shared_plan")
    doc = shared_plan.newest()
    rows = doc["data"]["rows"]
    assert [(r["rate_rps"], r["cotenants"]) for r in rows] == [
        (rate, k) for rate in (60.0, 150.0, 300.0) for k in (0, 1, 2)]
    assert shared_plan.check(), "run: .venv/bin/python benchmarks/shared_plan.py --docs"
    assert doc["_file"] in (ROOT / "docs" / "shared-gpu.md").read_text(encoding="utf-8")
