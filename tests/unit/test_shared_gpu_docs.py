"""docs/shared-gpu.md's table of side-by-side runs comes from benchmarks/shared_gpu.py's saved results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

from ..conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _report() -> ModuleType:
    return load_benchmark("shared_gpu_report")


def test_the_docs_table_is_the_saved_runs() -> None:
    report = _report()
    assert report.check(), "run: .venv/bin/python benchmarks/shared_gpu_report.py --docs"
    docs = (ROOT / "docs" / "shared-gpu.md").read_text(encoding="utf-8")
    for doc in report.newest_runs():
        assert doc["_file"] in docs


def test_a_new_run_makes_the_table_stale(tmp_path: Path) -> None:
    report = _report()
    runs = sorted(report.RESULTS.glob("*.json"))
    assert runs, "no saved shared_gpu run"
    folder = tmp_path / "benchmarks" / "results" / "shared_gpu"
    folder.mkdir(parents=True)
    doc = json.loads(runs[-1].read_text(encoding="utf-8"))
    doc["command"] += " --seed 1"  # another command line: another row
    doc["date"] = "2099-01-01T00:00:00Z"
    shutil.copy(runs[-1], folder / runs[-1].name)
    (folder / "20990101-000000.json").write_text(json.dumps(doc), encoding="utf-8")
    report.ROOT = tmp_path
    page = tmp_path / "shared-gpu.md"
    page.write_text((ROOT / "docs" / "shared-gpu.md").read_text(encoding="utf-8"), encoding="utf-8")
    assert not report.check(folder, page)
    _, new = report._docs_text(folder, page)
    assert "benchmarks/results/shared_gpu/20990101-000000.json" in new
