"""Real servers, shared where isolation allows: one Triton for the whole session.

Every test under tests/integration/ is marked ``triton`` (it starts or uses a real
Triton, HAProxy or Prometheus); tests/unit/ never starts a server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import REPOSITORY


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.triton)


@pytest.fixture(scope="session")
def triton() -> Iterator[object]:
    """The embedded Triton with every model of model_repository/ loaded."""
    from autobatch.lab.serve import TritonServer

    with TritonServer.on_free_ports(REPOSITORY) as server:
        yield server
