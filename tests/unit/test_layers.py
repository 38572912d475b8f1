"""The import-linter layers contract names every module of the package (lint-imports checks
the imports; this checks that no module sits outside the layers, unchecked)."""

from __future__ import annotations

import tomllib

from ..conftest import ROOT


def test_every_top_level_module_is_in_a_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    named = {m.strip() for layer in layers for m in layer.split("|")}
    package = ROOT / "src" / "autobatch"
    modules = {f"autobatch.{p.stem}" for p in package.glob("*.py") if p.name != "__init__.py"}
    modules |= {f"autobatch.{p.parent.name}" for p in package.glob("*/__init__.py")}
    assert modules - named == set(), "modules outside every layer of pyproject.toml's contract"
    assert named - modules == set(), "layers naming modules that do not exist"
