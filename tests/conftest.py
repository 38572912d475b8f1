"""Paths every test uses. Real servers are started only under tests/integration/."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CURVES = ROOT / "curves"  # measured batch curves (curves/README.md)
REPOSITORY = ROOT / "model_repository"
PROFILES = ROOT / "profiles"
DATA = Path(__file__).resolve().parent / "data"  # fixtures of the tests themselves


@pytest.fixture
def curves_dir() -> Path:
    return CURVES
