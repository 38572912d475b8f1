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

# Seconds each of the longest files takes (calls, set-up and teardown summed), from
# `pytest -n 3 --dist loadfile tests/integration --durations=0`. scripts/test.sh runs the files
# in this order, longest first (--no-loadscope-reorder), so that no long file starts last and
# holds the run up while the other workers idle; files not named follow in their usual order.
# A stale figure only costs speed, never a result.
LONGEST_FIRST = {  # measured 2026-12-04 on this project's 2-core machine
    "test_actuator_triton.py": 190,
    "test_gateway_haproxy.py": 125,
    "test_sidecar_oscillation.py": 67,
    "test_sidecar_step.py": 66,
    "test_sidecar.py": 63,
    "test_device_triton.py": 59,
    "test_sidebyside.py": 52,
    "test_fleet.py": 50,
    "test_demo.py": 48,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.triton)
    items.sort(key=lambda item: -LONGEST_FIRST.get(Path(str(item.fspath)).name, 0))  # stable


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
