"""Paths every test uses. Real servers are started only under tests/integration/."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CURVES = ROOT / "curves"  # measured batch curves (curves/README.md)
REPOSITORY = ROOT / "model_repository"
PROFILES = ROOT / "profiles"
DATA = Path(__file__).resolve().parent / "data"  # fixtures of the tests themselves


@pytest.fixture
def curves_dir() -> Path:
    return CURVES


def load_benchmark(name: str, module_name: str | None = None) -> ModuleType:
    """Import benchmarks/<name>.py (a script, not a package) as a module, for tests of its pure parts."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import their siblings (record, ...)
    spec = importlib.util.spec_from_file_location(module_name or name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module by name
    spec.loader.exec_module(mod)
    return mod


def config_as_run(config: str, stamp: str) -> Path:
    """The file holding the config a saved run names as it was when the run ran
    (benchmarks/record.py, ``config_as_run``)."""
    return load_benchmark("record").config_as_run(config, stamp)


def read_trace(path: Path) -> list[Any]:
    """The ticks of a gzipped trace or decision log (``autobatch.plan.replay.parse_trace``)."""
    from autobatch.plan.replay import parse_trace

    with gzip.open(path, "rt", encoding="utf-8") as f:
        return parse_trace(f, path.name)


def sidecar_config(example: Path, data: dict[str, Any] | None = None) -> Any:
    """The sidecar config of ``example`` (or of ``data``, read from it), as the sidecar loads it."""
    from autobatch.config import load_yaml
    from autobatch.controller.config import sidecar_config_from_mapping

    mapping = dict(load_yaml(example)) if data is None else data
    return sidecar_config_from_mapping(mapping, str(example), base=example.parent)


def while_served(steps: list[Any]) -> list[Any]:
    """The replayed steps up to the last whose window carried a request. The ticks after it
    decide for a run that is over: no request follows, so no figure depends on them (the
    policy holds in a lull since 6c6aeee; runs saved before stepped down there)."""
    windows = [s.tick.window for s in steps]
    served = [i for i, w in enumerate(windows) if w is not None and max(w.arrival_rps, w.inference_rps) > 0]
    return steps[:served[-1] + 1] if served else []
