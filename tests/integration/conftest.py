"""Real servers, shared where isolation allows: one Triton for the whole session.

Every test under tests/integration/ is marked ``triton`` (it starts or uses a real
Triton, HAProxy or Prometheus); tests/unit/ never starts a server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autobatch.lab.serve import TritonServer

from ..conftest import REPOSITORY


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.triton)


def _tritons(value: Any) -> list[TritonServer]:
    """The servers a fixture value holds: a TritonServer, or a tuple, list or dict of them."""
    if isinstance(value, TritonServer):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, TritonServer)]
    return []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A Triton a test was given that died on its own fails the test with its exit status and
    the last lines of its log (which its close() deletes). Without this, a crash shows as the
    requests a load lost (UNAVAILABLE) and every later test on that module's server times out
    on connection errors. The test's own failure, if any, stays in the report above this one."""
    servers = [s for v in getattr(item, "funcargs", {}).values() for s in _tritons(v)]
    for server in servers:
        server.check_alive("before this test started")
    try:
        return (yield)
    finally:
        for server in servers:
            server.check_alive("during this test")


@pytest.fixture(scope="session")
def triton() -> Iterator[TritonServer]:
    """The embedded Triton with every model of model_repository/ loaded."""
    with TritonServer.on_free_ports(REPOSITORY) as server:
        yield server
