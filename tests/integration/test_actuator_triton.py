"""The reload actuator against the real Triton: swaps, swaps under load, a refused
profile, a restart, file mode.

One server for the module, of its own (these tests reload the model and restart
the server), on a copy of dense_mlp's repository folder so file mode can write
its config.pbtxt.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from autobatch.actuators import TritonReloadActuator
from autobatch.actuators.triton_config import batching_view
from autobatch.errors import ServeError
from autobatch.lab.process import poll_until, poll_until_async
from autobatch.profiles import load_profiles, parse_pbtxt
from autobatch.signals import TritonSource

from ..conftest import PROFILES, REPOSITORY
from ..helpers import BackgroundLoad

pytestmark = pytest.mark.triton

MODEL = "dense_mlp"
SWAPS = 12  # four rounds of the three profiles (benchmarks/faults.py and reload_vs_shift.py swap more)
LOAD_RPS = 25.0
STEADY_S = 4.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPOSITORY / MODEL, root / MODEL, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def server(repo) -> Iterator[Any]:
    from autobatch.lab.serve import TritonServer

    with TritonServer.on_free_ports(repo, models=[MODEL]) as srv:
        yield srv


@pytest.fixture(scope="module")
def profiles() -> dict[str, Any]:
    return load_profiles(PROFILES / MODEL)


@pytest.fixture(scope="module")
def ladder(profiles) -> list[Any]:
    """Every profile of the model, most latency-oriented (shortest wait) first."""
    return sorted(profiles.values(), key=lambda p: (p.max_queue_delay_us, max(p.effective_preferred)))


@pytest.fixture
async def actuator(server, ladder):
    act = TritonReloadActuator(server.urls.http, MODEL, ladder)
    yield act
    await act.aclose()


def live_config(server) -> dict[str, Any]:
    """The config as Triton reports it, read without the actuator."""
    r = httpx.get(f"{server.urls.http}/v2/models/{MODEL}/config", timeout=10)
    r.raise_for_status()
    return r.json()


def batching(config: dict[str, Any]) -> tuple[list[int], int]:
    db = config["dynamic_batching"]
    return sorted(db["preferred_batch_size"]), int(db["max_queue_delay_microseconds"])


def expected(profile) -> tuple[list[int], int]:
    """What Triton reads back for ``profile``: an empty preferred list as [max_batch_size]."""
    return sorted(profile.effective_preferred), profile.max_queue_delay_us


def p99_ms(latencies: list[float]) -> float | None:
    return float(np.percentile(latencies, 99)) if latencies else None


# -- swaps ---------------------------------------------------------------------------------


async def test_every_profile_swaps_in_under_load_and_no_request_fails(actuator, server, ladder, capsys):
    """Zero failed requests over a dozen reload swaps under sustained load.

    The swaps cycle through every profile of dense_mlp, each read back from
    Triton independently of the actuator's own verification.
    """
    first = await actuator.apply(ladder[0])
    assert first.ok, first.message
    order = [ladder[(i + 1) % len(ladder)] for i in range(SWAPS)]
    results = []
    windows: list[tuple[float, float]] = []
    with BackgroundLoad(server.urls.grpc, MODEL, LOAD_RPS, max_s=240.0, seed=4) as load:
        # A few seconds without swaps, for the steady-state tail to compare with.
        steady_until = time.monotonic() + STEADY_S
        while time.monotonic() < steady_until:
            await asyncio.sleep(0.1)
        for profile in order:
            start = time.monotonic()
            result = await actuator.apply(profile)
            windows.append((start, time.monotonic()))
            results.append(result)
            if not result.ok:
                break
            live = live_config(server)
            assert batching(live) == expected(profile)
            assert live["max_batch_size"] == profile.max_batch_size
            assert await actuator.live_profile() == profile.name
    report = load.report
    assert report is not None

    assert [r.reason for r in results] == ["applied"] * SWAPS, [r.message for r in results if not r.ok]
    assert report.total.sent > 0 and report.total.failures == {}, dict(report.total.failures)
    assert report.total.ok == report.total.sent
    # Requests were in flight across every swap, so the zero above means something.
    for start, end in windows:
        assert any(sent < end and done > start for sent, done, _ in load.done)

    during, steady = [], []
    for sent, done, _ in load.done:
        inside = any(sent < end and done > start for start, end in windows)
        (during if inside else steady).append((done - sent) * 1000.0)
    again = await actuator.apply(order[-1])
    assert again.ok and again.reason == "unchanged" and again.load_s is None

    loads = [r.load_s for r in results]
    with capsys.disabled():
        print(
            f"\n[actuator] {SWAPS} swaps under {LOAD_RPS:g} req/s: load_s median "
            f"{statistics.median(loads):.2f} max {max(loads):.2f}; whole apply median "
            f"{statistics.median(r.duration_s for r in results):.2f} s; requests "
            f"{report.total.sent}, failed {report.total.failed}; p50/p99/max during swaps "
            f"{np.percentile(during, 50):.1f}/{p99_ms(during):.1f}/{max(during):.1f} ms (n={len(during)}), "
            f"steady {np.percentile(steady, 50):.1f}/{p99_ms(steady):.1f}/{max(steady):.1f} ms "
            f"(n={len(steady)})"
        )


async def test_triton_normalisations_read_back_as_the_profile(actuator, server, profiles):
    """Each normalisation the actuator's comparison knows, seen on the real server.

    Two raw loads (not through the actuator) carry every case: the raw read-back
    shows Triton changed the field, and the actuator's view of what was sent equals
    its view of what came back. Then Triton's default goes through the actuator as
    a rung: applied, verified, named, and a second apply loads nothing.
    """
    base = live_config(server)

    async def load_raw(config: dict[str, Any]) -> dict[str, Any]:
        body = {"parameters": {"config": json.dumps(config)}}
        async with httpx.AsyncClient(timeout=120) as client:
            r = await client.post(f"{server.urls.http}/v2/repository/models/{MODEL}/load", json=body)
        assert r.status_code == 200, r.text
        return live_config(server)

    first = {**base, "dynamic_batching": {"preferred_batch_size": [],
                                          "max_queue_delay_microseconds": "0"},
             "instance_group": [{"kind": "KIND_AUTO"}]}
    back = await load_raw(first)
    db = back["dynamic_batching"]
    assert db["preferred_batch_size"] == [base["max_batch_size"]]   # [] -> [max_batch_size]
    assert db["max_queue_delay_microseconds"] == 0                  # "0" -> 0
    assert db["preserve_ordering"] is False and db["priority_levels"] == 0  # defaults printed
    assert "default_queue_policy" not in db                         # unset: omitted
    assert back["instance_group"][0]["count"] == 1                  # no count -> 1
    assert back["instance_group"][0]["kind"] == "KIND_CPU"          # KIND_AUTO resolved
    assert batching_view(first, count=True, kind=False) == batching_view(back, count=True, kind=False)

    second = {**base, "dynamic_batching": {"preferred_batch_size": [16, 4],
                                           "max_queue_delay_microseconds": "5000",
                                           "default_queue_policy": {}},
              "instance_group": [{"count": 1, "kind": "KIND_CPU"}]}
    back = await load_raw(second)
    db = back["dynamic_batching"]
    assert sorted(db["preferred_batch_size"]) == [4, 16]
    assert db["max_queue_delay_microseconds"] == 5000                # "5000" -> 5000
    assert db["default_queue_policy"]["timeout_action"] == "REJECT"  # set: defaults filled in
    assert batching_view(second, count=True, kind=True) == batching_view(back, count=True, kind=True)

    default = profiles["triton-default"]
    assert default.preferred_batch_size == ()
    result = await actuator.apply(default)
    assert result.ok and result.reason == "applied", result.message
    assert batching(live_config(server)) == ([default.max_batch_size], 0)
    assert await actuator.live_profile() == "triton-default"
    again = await actuator.apply(default)
    assert again.ok and again.reason == "unchanged" and again.load_s is None


async def test_a_profile_triton_refuses_is_rolled_back_and_the_model_keeps_serving(
    actuator, server, profiles
):
    """The must-show: passes the local checks, refused by Triton -> back to the last good."""
    good = profiles["balanced"]
    assert (await actuator.apply(good)).ok
    gpu = dataclasses.replace(profiles["aggressive"], name="aggressive-gpu", instance_kind="KIND_GPU")
    gpu.check()
    gpu.validate_against(live_config(server))  # the local checks pass: only Triton knows there is no GPU

    with BackgroundLoad(server.urls.grpc, MODEL, 20.0, max_s=120.0, seed=5) as load:
        result = await actuator.apply(gpu)
        refused_at = time.monotonic()
        # The model keeps serving: wait for requests sent after the refusal to come back
        # (the load runs in its own thread; the asserts below say what is missing).
        with contextlib.suppress(ServeError):
            await asyncio.to_thread(
                poll_until, lambda: sum(sent > refused_at for sent, _, _ in load.done) >= 20,
                timeout_s=60.0,
                what="20 requests sent after the refusal to come back",
            )
        after = [outcome for sent, _, outcome in load.done if sent > refused_at]
    assert not result.ok and result.reason == "rejected", result.message
    assert "no GPUs are available" in result.message
    assert result.rolled_back and result.active == "balanced"
    assert batching(live_config(server)) == expected(good)
    assert live_config(server)["instance_group"][0]["kind"] == "KIND_CPU"
    assert await actuator.live_profile() == "balanced"
    assert len(after) >= 20 and set(after) == {"ok"}
    assert load.report.total.failures == {}


async def test_the_source_reads_while_a_grpc_load_is_in_flight(server, ladder):
    """Measured (/tmp/stall/stall.py, issue 11): while a load sent over HTTP runs, most
    stats and config reads on kept-alive HTTP connections wait for it (Triton's HTTP
    server runs the load on the thread those connections are pinned to). A load sent
    over gRPC, the sidecar's default ``load_api``, left every such read alone; this pins
    that: the source's kept-alive connections answer a whole sample before the load ends."""
    act = TritonReloadActuator(server.urls.http, MODEL, ladder, grpc_url=server.urls.grpc)
    source = TritonSource(server.urls.http, MODEL, metrics_url=server.urls.metrics)
    try:
        live = await act.live_profile()
        target = next(p for p in ladder if p.name != live)
        await source.sample()  # opens the connections the reads below reuse
        offset = server.log_path.stat().st_size
        apply = asyncio.ensure_future(act.apply(target))
        # In flight: Triton has logged that it is loading the new copy.
        await poll_until_async(
            lambda: b"loading: " + MODEL.encode() in server.log_path.read_bytes()[offset:] or apply.done(),
            timeout_s=60.0, what="Triton to log the load of the new copy",
        )
        assert not apply.done(), "the load ended before the read could be sent"
        sample = await source.sample()
        assert not apply.done(), "the sample waited for the load"
        assert sample.stats is not None and sample.instance_count is not None  # config read answered
        result = await apply
        assert result.ok and result.reason == "applied", result.message
    finally:
        await source.aclose()
        await act.aclose()


async def test_a_restart_drops_an_override_and_keeps_a_file_mode_profile(
    actuator, server, ladder, profiles, repo
):
    """One restart shows both: file mode's profile survives it, an override does not.

    The file-mode actuator writes ``balanced`` into config.pbtxt; the override
    actuator then loads ``aggressive`` on top. After the restart Triton runs the
    file, ``balanced``: the file-mode actuator finds nothing to do, the override
    actuator notices its profile is gone and puts it back.
    """
    path = repo / MODEL / "config.pbtxt"
    original = path.read_text()
    file_act = TritonReloadActuator(server.urls.http, MODEL, ladder, repository=repo)
    try:
        result = await file_act.apply(profiles["balanced"])
        assert result.ok, result.message
        assert batching(parse_pbtxt(path.read_text())) == expected(profiles["balanced"])
        assert batching(live_config(server)) == expected(profiles["balanced"])

        # Refused by Triton in file mode: the file is put back as it was.
        written = path.read_text()
        gpu = dataclasses.replace(profiles["aggressive"], name="aggressive-gpu", instance_kind="KIND_GPU")
        refused = await file_act.apply(gpu)
        assert refused.reason == "rejected" and refused.rolled_back and refused.active == "balanced"
        assert path.read_text() == written

        wanted = profiles["aggressive"]
        assert (await actuator.apply(wanted)).ok
        assert await actuator.reconcile(wanted) is None

        server.stop()
        down = await actuator.reconcile(wanted)
        assert down is not None and not down.ok and down.reason == "unreachable"
        server.start()

        assert batching(live_config(server)) == expected(profiles["balanced"])
        assert await file_act.reconcile(profiles["balanced"]) is None
        assert await actuator.live_profile() == "balanced"
        result = await actuator.reconcile(wanted)
        assert result is not None and result.ok and result.reason == "reapplied", result
        assert batching(live_config(server)) == expected(wanted)
        assert await actuator.reconcile(wanted) is None
    finally:
        await file_act.aclose()
        path.write_text(original)
