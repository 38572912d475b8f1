"""Shared fixtures: one real Triton for the whole session, on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CURVES = ROOT / "curves"  # measured batch curves (curves/README.md)
REPOSITORY = ROOT / "model_repository"
PROFILES = ROOT / "profiles"


@pytest.fixture(scope="session")
def triton() -> Iterator[object]:
    """The embedded Triton with every model of model_repository/ loaded."""
    from autobatch.lab.serve import TritonServer

    with TritonServer.on_free_ports(REPOSITORY) as server:
        yield server


@pytest.fixture
def curves_dir() -> Path:
    return CURVES
