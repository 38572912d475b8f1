"""docs/shared-gpu.md's planner table comes from the newest saved run of benchmarks/shared_plan.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_docs_table_is_the_newest_saved_run():
    shared_plan = _module("shared_plan")
    doc = shared_plan.newest()
    rows = doc["data"]["rows"]
    assert [(r["rate_rps"], r["cotenants"]) for r in rows] == [
        (rate, k) for rate in (60.0, 150.0, 300.0) for k in (0, 1, 2)]
    assert shared_plan.check(), "run: .venv/bin/python benchmarks/shared_plan.py --docs"
    assert doc["_file"] in (ROOT / "docs" / "shared-gpu.md").read_text(encoding="utf-8")
