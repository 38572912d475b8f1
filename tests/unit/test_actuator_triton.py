"""The reload and dry-run actuators against a fake Triton (httpx.MockTransport) and a fake clock.

Every behaviour mocked here is also exercised against the real Triton in
tests/integration/test_actuator_triton.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from autobatch.actuators import (
    REASONS,
    ActuationResult,
    Actuator,
    DryRunActuator,
    TritonReloadActuator,
)
from autobatch.actuators.triton import write_atomic
from autobatch.errors import ConfigError
from autobatch.profiles import load_profiles, parse_pbtxt

from ..conftest import PROFILES, REPOSITORY

MODEL = "dense_mlp"
URL = "http://triton.test:8000"
CONFIG_PATH = f"/v2/models/{MODEL}/config"
LOAD_PATH = f"/v2/repository/models/{MODEL}/load"
LOAD_S = 3.0


@pytest.fixture(scope="module")
def profiles() -> dict[str, Any]:
    return load_profiles(PROFILES / MODEL)


@pytest.fixture(scope="module")
def ladder(profiles) -> list[Any]:
    return [profiles["latency-soft"], profiles["balanced"], profiles["aggressive"]]


def repository_config() -> dict[str, Any]:
    return parse_pbtxt((REPOSITORY / MODEL / "config.pbtxt").read_text())


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class FakeTriton:
    """Just enough of Triton's HTTP API: read the config, load with an override.

    ``on_load(config) -> (status, error)`` decides each load; by default it is
    accepted. Like Triton, a refused load leaves the old config in place.
    """

    def __init__(self, clock: FakeClock, config: dict[str, Any] | None = None) -> None:
        self.clock = clock
        self.config = config if config is not None else repository_config()
        self.requests: list[tuple[str, str]] = []
        self.bodies: list[dict[str, Any]] = []
        self.loaded: list[dict[str, Any]] = []
        self.on_load: Callable[[dict[str, Any]], tuple[int, str]] = lambda cfg: (200, "")
        self.store: Callable[[dict[str, Any]], dict[str, Any]] = lambda cfg: cfg
        self.down = False
        self.hang_loads = 0
        """How many of the next loads outlive the client's timeout."""
        self.late_load_lands = False
        self.read_timeouts_s: list[float] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.method == "GET" and request.url.path == CONFIG_PATH:
            self.read_timeouts_s.append(request.extensions["timeout"]["read"])
            return httpx.Response(200, json=self.config)
        if request.method == "POST" and request.url.path == LOAD_PATH:
            body = json.loads(request.content)
            self.bodies.append(body)
            config = json.loads(body["parameters"]["config"])
            if self.hang_loads > 0:
                self.hang_loads -= 1
                if self.late_load_lands:
                    # Triton does not cancel a load the client gave up on.
                    self.config = copy.deepcopy(config)
                raise httpx.ReadTimeout("timed out", request=request)
            self.loaded.append(config)
            self.clock.now_s += LOAD_S
            status, error = self.on_load(config)
            if status != 200:
                return httpx.Response(status, json={"error": error})
            self.config = self.store(copy.deepcopy(config))
            return httpx.Response(200)
        return httpx.Response(404, json={"error": "not found"})

    def restart(self) -> None:
        """What a Triton restart does to an override: the repository's config is back."""
        self.config = repository_config()

    @property
    def calls(self) -> list[str]:
        return [f"{m} {'config' if p == CONFIG_PATH else 'load'}" for m, p in self.requests]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def triton(clock) -> FakeTriton:
    return FakeTriton(clock)


@pytest.fixture
async def actuator(triton, clock, ladder):
    client = httpx.AsyncClient(transport=httpx.MockTransport(triton.handler))
    act = TritonReloadActuator(URL, MODEL, ladder, client=client, clock=clock)
    yield act
    await act.aclose()
    await client.aclose()


def check(result: ActuationResult) -> ActuationResult:
    assert result.reason in REASONS
    assert result.message
    return result


def batching(config: dict[str, Any]) -> tuple[list[int], int]:
    db = config["dynamic_batching"]
    return list(db["preferred_batch_size"]), int(db["max_queue_delay_microseconds"])


# -- the protocol --------------------------------------------------------------------------


async def test_both_actuators_implement_the_protocol(ladder):
    reload = TritonReloadActuator(URL, MODEL, ladder)
    assert isinstance(reload, Actuator) and reload.name == "triton"
    assert isinstance(DryRunActuator(ladder), Actuator)
    await reload.aclose()


def test_reasons_are_a_fixed_set():
    assert len(set(REASONS)) == len(REASONS)
    assert {"applied", "unchanged", "rejected", "verify_failed", "unreachable", "dry_run"} <= set(REASONS)


# -- apply ------------------------------------------------------------------------------------


async def test_apply_reads_loads_then_verifies(actuator, triton, profiles):
    result = check(await actuator.apply(profiles["aggressive"]))
    assert triton.calls == ["GET config", "POST load", "GET config"]
    assert result.ok and result.reason == "applied" and result.active == "aggressive"
    assert result.load_s == LOAD_S and result.duration_s == LOAD_S
    assert not result.rolled_back
    (sent,) = triton.loaded
    assert batching(sent) == ([16, 32], 20000)
    # Everything but the batching fields is the live config, untouched.
    live = repository_config()
    assert sent["input"] == live["input"] and sent["parameters"] == live["parameters"]


async def test_the_override_is_the_load_api_body(actuator, triton, profiles):
    await actuator.apply(profiles["balanced"])
    (body,) = triton.bodies
    assert list(body) == ["parameters"] and list(body["parameters"]) == ["config"]
    assert isinstance(body["parameters"]["config"], str)


async def test_applying_the_live_profile_loads_nothing(actuator, triton, profiles):
    await actuator.apply(profiles["aggressive"])
    triton.requests.clear()
    result = check(await actuator.apply(profiles["aggressive"]))
    assert result.ok and result.reason == "unchanged" and result.active == "aggressive"
    assert result.load_s is None
    assert triton.calls == ["GET config"]


async def test_a_profile_invalid_against_the_live_model_posts_nothing(clock, ladder, profiles):
    no_batching = repository_config()
    no_batching["max_batch_size"] = 0
    triton = FakeTriton(clock, no_batching)
    async with httpx.AsyncClient(transport=httpx.MockTransport(triton.handler)) as client:
        act = TritonReloadActuator(URL, MODEL, ladder, client=client, clock=clock)
        result = check(await act.apply(profiles["aggressive"]))
    assert not result.ok and result.reason == "invalid"
    assert "does not support batching" in result.message
    assert triton.calls == ["GET config"]


async def test_a_profile_of_another_model_posts_nothing(actuator, triton):
    other = load_profiles(PROFILES / "small_cnn")["aggressive"]
    result = check(await actuator.apply(other))
    assert result.reason == "invalid" and "small_cnn" in result.message
    assert triton.calls == ["GET config"]


async def test_a_refused_load_rolls_back_to_the_last_good_profile(actuator, triton, profiles):
    await actuator.apply(profiles["balanced"])
    gpu = dataclasses.replace(profiles["aggressive"], name="aggressive-gpu", instance_kind="KIND_GPU")
    triton.on_load = lambda cfg: (
        (400, "instance group dense_mlp_0 of model dense_mlp has kind KIND_GPU but no GPUs are available")
        if cfg["instance_group"][0].get("kind") == "KIND_GPU"
        else (200, "")
    )
    triton.requests.clear()
    result = check(await actuator.apply(gpu))
    assert not result.ok and result.reason == "rejected"
    assert result.rolled_back and result.active == "balanced"
    assert "no GPUs are available" in result.message
    # Triton kept the old copy: the rollback only had to confirm it.
    assert triton.calls == ["GET config", "POST load", "GET config"]
    assert batching(triton.config) == ([8, 16], 5000)
    assert actuator.last_good == "balanced"


async def test_a_refused_load_reloads_the_last_good_profile_when_it_is_gone(actuator, triton, profiles):
    await actuator.apply(profiles["balanced"])

    def refuse_and_lose(cfg):
        # A load that fails half-way and leaves some other config behind.
        if batching(cfg) == ([16, 32], 20000):
            triton.config = repository_config()
            return 500, "failed to load 'dense_mlp'"
        return 200, ""

    triton.on_load = refuse_and_lose
    triton.requests.clear()
    result = check(await actuator.apply(profiles["aggressive"]))
    assert result.reason == "rejected" and result.rolled_back and result.active == "balanced"
    assert triton.calls == ["GET config", "POST load", "GET config", "POST load", "GET config"]
    assert batching(triton.loaded[-1]) == ([8, 16], 5000)
    assert batching(triton.config) == ([8, 16], 5000)


async def test_a_config_that_reads_back_different_is_rolled_back(actuator, triton, profiles):
    await actuator.apply(profiles["balanced"])

    def halve_delay(cfg):
        if batching(cfg) == ([16, 32], 20000):
            cfg["dynamic_batching"]["max_queue_delay_microseconds"] = 10000
        return cfg

    triton.store = halve_delay
    result = check(await actuator.apply(profiles["aggressive"]))
    assert not result.ok and result.reason == "verify_failed"
    assert "max_queue_delay_microseconds = 10000, expected 20000" in result.message
    assert result.rolled_back and result.active == "balanced"
    assert batching(triton.config) == ([8, 16], 5000)


async def test_without_a_last_good_profile_the_previous_config_is_restored(clock, ladder, profiles):
    odd = repository_config()
    odd["dynamic_batching"]["max_queue_delay_microseconds"] = 777  # no ladder profile
    triton = FakeTriton(clock, odd)

    def drop_preferred(cfg):
        if batching(cfg) == ([16, 32], 20000):
            cfg["dynamic_batching"]["preferred_batch_size"] = [32]
        return cfg

    triton.store = drop_preferred
    async with httpx.AsyncClient(transport=httpx.MockTransport(triton.handler)) as client:
        act = TritonReloadActuator(URL, MODEL, ladder, client=client, clock=clock)
        result = check(await act.apply(profiles["aggressive"]))
    assert result.reason == "verify_failed" and result.rolled_back and result.active is None
    assert triton.config["dynamic_batching"]["max_queue_delay_microseconds"] == 777


async def test_an_unreachable_server_is_a_result_not_an_exception(actuator, triton, profiles):
    triton.down = True
    result = check(await actuator.apply(profiles["aggressive"]))
    assert not result.ok and result.reason == "unreachable"
    assert result.active is None and not result.rolled_back
    assert "is it running?" in result.message
    assert await actuator.live_profile() is None


async def test_an_unloaded_model_is_unavailable(clock, ladder, profiles):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": "Request for unknown model: 'dense_mlp' is not found"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        act = TritonReloadActuator(URL, MODEL, ladder, client=client, clock=clock)
        result = check(await act.apply(profiles["aggressive"]))
    assert result.reason == "unavailable" and "unknown model" in result.message


async def test_a_load_that_outlives_its_timeout_is_rolled_back(actuator, triton, profiles):
    await actuator.apply(profiles["balanced"])
    triton.hang_loads = 1
    triton.requests.clear()
    result = check(await actuator.apply(profiles["aggressive"]))
    assert result.reason == "timeout" and result.rolled_back and result.active == "balanced"
    assert "load_timeout_s" in result.message
    # Even though the config still reads "balanced", it is loaded again: the stray
    # load may land later, and Triton runs loads of one model in order.
    assert triton.calls == ["GET config", "POST load", "GET config", "POST load", "GET config"]
    assert batching(triton.loaded[-1]) == ([8, 16], 5000)


async def test_a_timed_out_load_that_lands_late_is_undone(actuator, triton, profiles):
    await actuator.apply(profiles["balanced"])
    triton.hang_loads, triton.late_load_lands = 1, True
    triton.read_timeouts_s.clear()
    result = check(await actuator.apply(profiles["aggressive"]))
    assert result.reason == "timeout" and result.rolled_back and result.active == "balanced"
    # The rollback read waited as long as a load may take: Triton answers it after the load.
    assert triton.read_timeouts_s[1] == actuator.load_timeout_s
    assert batching(triton.loaded[-1]) == ([8, 16], 5000)
    assert batching(triton.config) == ([8, 16], 5000)


async def test_a_failed_rollback_says_so(actuator, triton, profiles):
    await actuator.apply(profiles["balanced"])

    def refuse_and_die(cfg):
        triton.config = repository_config()
        triton.down = True
        return 500, "model crashed"

    triton.on_load = refuse_and_die
    result = check(await actuator.apply(profiles["aggressive"]))
    assert not result.ok and result.reason == "rejected"
    assert not result.rolled_back and result.active is None
    assert "rolling back to balanced failed too" in result.message


# -- Triton's normalisations ---------------------------------------------------------------------


def triton_normalise(config: dict[str, Any]) -> dict[str, Any]:
    """What Triton 2.51 does to a config it loads (core model_config_utils.cc
    NormalizeModelConfig / NormalizeInstanceGroup, and its JSON printer), as far as
    profiles go; tests/integration/test_actuator_triton.py checks each one on the real server."""
    out = copy.deepcopy(config)
    db = out.get("dynamic_batching")
    if db is not None:
        if not db.get("preferred_batch_size") and out.get("max_batch_size", 0) > 0:
            db["preferred_batch_size"] = [out["max_batch_size"]]
        db["max_queue_delay_microseconds"] = int(db.get("max_queue_delay_microseconds", 0))
        for key, default in (("preserve_ordering", False), ("priority_levels", 0),
                             ("default_priority_level", 0)):
            db.setdefault(key, default)
    for i, group in enumerate(out.get("instance_group") or []):
        group.setdefault("name", f"{out.get('name', MODEL)}_{i}")
        if int(group.get("count", 0) or 0) < 1:
            group["count"] = 1
        if group.get("kind", "KIND_AUTO") == "KIND_AUTO":
            group["kind"] = "KIND_CPU"
    return out


@pytest.mark.parametrize(
    ("sent", "read_back"),
    [
        # Triton's default: an empty preferred list is filled with max_batch_size
        ({"max_batch_size": 32, "dynamic_batching": {"preferred_batch_size": []}},
         {"max_batch_size": 32, "dynamic_batching": {"preferred_batch_size": [32]}}),
        ({"max_batch_size": 8, "dynamic_batching": {}},
         {"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [8]}}),
        # the order of preferred sizes is kept, and ignored by the batcher
        ({"max_batch_size": 32, "dynamic_batching": {"preferred_batch_size": [16, 4]}},
         {"max_batch_size": 32, "dynamic_batching": {"preferred_batch_size": [4, 16]}}),
        # 64-bit fields: strings in proto JSON, numbers in Triton's
        ({"max_batch_size": 32, "dynamic_batching": {"max_queue_delay_microseconds": "5000"}},
         {"max_batch_size": 32, "dynamic_batching": {"max_queue_delay_microseconds": 5000,
                                                     "preferred_batch_size": [32]}}),
        # defaults printed; an all-default queue policy is no policy
        ({"max_batch_size": 32, "dynamic_batching": {"default_queue_policy": {}}},
         {"max_batch_size": 32, "dynamic_batching": {"preserve_ordering": False, "priority_levels": 0,
                                                     "default_priority_level": 0}}),
        # an instance group without a count gets 1; KIND_AUTO is resolved
        ({"max_batch_size": 32, "dynamic_batching": {}, "instance_group": [{"kind": "KIND_AUTO"}]},
         {"max_batch_size": 32, "dynamic_batching": {},
          "instance_group": [{"name": "dense_mlp_0", "count": 1, "kind": "KIND_CPU"}]}),
    ],
)
def test_the_view_of_a_config_is_the_view_of_what_triton_reads_back(sent, read_back):
    from autobatch.actuators.triton_config import batching_view

    for flags in ({"count": False, "kind": False}, {"count": True, "kind": False}):
        assert batching_view(sent, **flags) == batching_view(read_back, **flags)
        assert batching_view(sent, **flags) == batching_view(triton_normalise(sent), **flags)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # a filled-in default is max_batch_size, not any one preferred size
        ({"max_batch_size": 32, "dynamic_batching": {"preferred_batch_size": []}},
         {"max_batch_size": 32, "dynamic_batching": {"preferred_batch_size": [16]}}),
        # without dynamic batching there is nothing to fill in
        ({"max_batch_size": 32},
         {"max_batch_size": 32, "dynamic_batching": {"preferred_batch_size": [32]}}),
        ({"max_batch_size": 32, "dynamic_batching": {"max_queue_delay_microseconds": 0}},
         {"max_batch_size": 32, "dynamic_batching": {"max_queue_delay_microseconds": 100}}),
        ({"max_batch_size": 32, "dynamic_batching": {}, "instance_group": [{"count": 1}]},
         {"max_batch_size": 32, "dynamic_batching": {}, "instance_group": [{"count": 2}]}),
    ],
)
def test_configs_triton_runs_differently_keep_different_views(a, b):
    from autobatch.actuators.triton_config import batching_view

    assert batching_view(a, count=True, kind=False) != batching_view(b, count=True, kind=False)


async def test_triton_default_is_a_rung_despite_reading_back_as_max_batch_size(clock, profiles):
    """The bug of issue 11: "preferred_batch_size = [32], expected []; rolled back"."""
    ladder = [profiles["triton-default"], profiles["aggressive"]]
    triton = FakeTriton(clock)
    triton.store = triton_normalise
    async with httpx.AsyncClient(transport=httpx.MockTransport(triton.handler)) as client:
        act = TritonReloadActuator(URL, MODEL, ladder, client=client, clock=clock)
        result = check(await act.apply(profiles["triton-default"]))
        assert result.ok and result.reason == "applied", result.message
        assert batching(triton.config) == ([32], 0)
        assert await act.live_profile() == "triton-default"
        triton.requests.clear()
        again = check(await act.apply(profiles["triton-default"]))
        assert again.ok and again.reason == "unchanged"
        assert triton.calls == ["GET config"]
        assert await act.reconcile(profiles["triton-default"]) is None
        assert (await act.apply(profiles["aggressive"])).ok
        assert await act.live_profile() == "aggressive"


# -- live_profile and reconcile ----------------------------------------------------------------


async def test_live_profile_names_the_matching_ladder_profile(actuator, triton, profiles):
    # the repository's config is dense_mlp's latency-soft profile
    assert await actuator.live_profile() == "latency-soft"
    await actuator.apply(profiles["balanced"])
    assert await actuator.live_profile() == "balanced"
    triton.config["dynamic_batching"]["preferred_batch_size"] = [16, 8]  # order does not matter
    assert await actuator.live_profile() == "balanced"
    triton.config["dynamic_batching"]["max_queue_delay_microseconds"] = 1
    assert await actuator.live_profile() is None


async def test_reconcile_does_nothing_while_the_profile_is_live(actuator, triton, profiles):
    await actuator.apply(profiles["aggressive"])
    triton.requests.clear()
    assert await actuator.reconcile(profiles["aggressive"]) is None
    assert triton.calls == ["GET config"]


async def test_reconcile_reapplies_after_a_restart(actuator, triton, profiles):
    await actuator.apply(profiles["aggressive"])
    triton.restart()
    triton.requests.clear()
    result = check(await actuator.reconcile(profiles["aggressive"]))
    assert result.ok and result.reason == "reapplied" and result.active == "aggressive"
    assert "Triton restarted" in result.message
    assert triton.calls == ["GET config", "POST load", "GET config"]
    assert batching(triton.config) == ([16, 32], 20000)


async def test_reconcile_while_triton_is_down_reports_and_holds(actuator, triton, profiles):
    await actuator.apply(profiles["aggressive"])
    triton.down = True
    result = check(await actuator.reconcile(profiles["aggressive"]))
    assert not result.ok and result.reason == "unreachable"


async def test_a_refused_reapply_keeps_what_runs(actuator, triton, profiles):
    await actuator.apply(profiles["aggressive"])
    triton.restart()
    triton.on_load = lambda cfg: (400, "refused")
    result = check(await actuator.reconcile(profiles["aggressive"]))
    # The last good profile is the refused one itself: what runs now is kept.
    assert result.reason == "rejected" and result.rolled_back
    assert len(triton.loaded) == 2  # the first apply and the refused re-apply, no third
    assert triton.config == repository_config()


# -- file mode ----------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path) -> Path:
    dest = tmp_path / "repo" / MODEL
    dest.mkdir(parents=True)
    shutil.copy(REPOSITORY / MODEL / "config.pbtxt", dest / "config.pbtxt")
    return tmp_path / "repo"


@pytest.fixture
async def file_actuator(triton, clock, ladder, repo):
    client = httpx.AsyncClient(transport=httpx.MockTransport(triton.handler))
    act = TritonReloadActuator(URL, MODEL, ladder, client=client, clock=clock, repository=repo)
    yield act
    await client.aclose()


async def test_file_mode_writes_the_profile_then_loads_it(file_actuator, triton, repo, profiles):
    path = repo / MODEL / "config.pbtxt"
    inode = path.stat().st_ino
    result = check(await file_actuator.apply(profiles["aggressive"]))
    assert result.ok and result.reason == "applied"
    written = parse_pbtxt(path.read_text())
    assert batching(written) == ([16, 32], 20000)
    assert written["parameters"] == repository_config()["parameters"]
    # A new file renamed over the old one, not the old one rewritten in place.
    assert path.stat().st_ino != inode
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.pbtxt"]
    # Triton gets the file's config as an override too (a plain load would not reread it).
    assert batching(triton.loaded[-1]) == ([16, 32], 20000)
    assert triton.loaded[-1]["input"] == written["input"]


async def test_file_mode_restores_the_file_when_triton_refuses(file_actuator, triton, repo, profiles):
    path = repo / MODEL / "config.pbtxt"
    await file_actuator.apply(profiles["balanced"])
    good_text = path.read_text()
    triton.on_load = lambda cfg: (400, "refused") if batching(cfg)[1] == 20000 else (200, "")
    result = check(await file_actuator.apply(profiles["aggressive"]))
    assert result.reason == "rejected" and result.rolled_back and result.active == "balanced"
    assert path.read_text() == good_text


async def test_file_mode_write_failure_loads_nothing(file_actuator, triton, repo, profiles, monkeypatch):
    path = repo / MODEL / "config.pbtxt"
    before = path.read_text()

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    result = check(await file_actuator.apply(profiles["aggressive"]))
    assert not result.ok and result.reason == "write_failed" and "No space left" in result.message
    assert triton.calls == ["GET config"]
    assert path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.pbtxt"]


async def test_file_mode_rewrites_a_file_that_lags_the_live_config(file_actuator, triton, repo, profiles):
    # Live already runs aggressive (an override from before file mode); the file does not.
    triton.config = profiles["aggressive"].merge_into(triton.config)
    result = check(await file_actuator.apply(profiles["aggressive"]))
    assert result.ok and result.reason == "applied"
    assert batching(parse_pbtxt((repo / MODEL / "config.pbtxt").read_text())) == ([16, 32], 20000)
    again = check(await file_actuator.apply(profiles["aggressive"]))
    assert again.reason == "unchanged"


async def test_file_mode_checks_the_file_against_the_live_model(file_actuator, triton, repo, profiles):
    triton.config["input"][0]["dims"] = [512]
    result = check(await file_actuator.apply(profiles["aggressive"]))
    assert result.reason == "invalid" and "inputs of the base config differ" in result.message
    assert triton.calls == ["GET config"]


def test_write_atomic_keeps_the_mode_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text("old")
    path.chmod(0o644)
    write_atomic(path, "new")
    assert path.read_text() == "new"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["config.pbtxt"]


# -- dry run --------------------------------------------------------------------------------------


async def test_dry_run_logs_the_change_and_touches_nothing(ladder, profiles):
    lines: list[str] = []
    act = DryRunActuator(ladder, log=lines.append, current="latency-soft")
    assert await act.live_profile() == "latency-soft"
    result = check(await act.apply(profiles["aggressive"]))
    assert result.ok and result.reason == "dry_run" and result.active == "aggressive"
    assert not result.rolled_back and result.load_s is None
    assert lines == [result.message]
    assert "would load aggressive (from latency-soft)" in lines[0]
    assert "dynamic_batching.preferred_batch_size: [1, 2, 4] -> [16, 32]" in lines[0]
    assert "dynamic_batching.max_queue_delay_microseconds: 0 -> 20000" in lines[0]
    assert "max_batch_size" not in lines[0]  # unchanged fields are not listed
    assert await act.live_profile() == "aggressive"
    again = await act.apply(profiles["aggressive"])
    assert again.reason == "dry_run" and "would load nothing" in again.message
    assert await act.reconcile(profiles["aggressive"]) is None


def test_dry_run_refuses_an_unknown_starting_profile(ladder):
    with pytest.raises(ConfigError, match="current = 'turbo': not in the ladder"):
        DryRunActuator(ladder, current="turbo")


def test_actuator_refuses_nonsense_settings(ladder):
    with pytest.raises(ConfigError, match="load_timeout_s = 0: must be > 0 seconds"):
        TritonReloadActuator(URL, MODEL, ladder, load_timeout_s=0)
    other = load_profiles(PROFILES / "small_cnn")["aggressive"]
    with pytest.raises(ConfigError, match="model = 'small_cnn': the ladder of 'dense_mlp'"):
        TritonReloadActuator(URL, MODEL, [*ladder, other])


def test_public_names():
    import autobatch.actuators as actuators

    assert sorted(actuators.__all__) == sorted(
        ["REASONS", "ActuationResult", "Actuator", "DryRunActuator", "TritonReloadActuator"]
    )
