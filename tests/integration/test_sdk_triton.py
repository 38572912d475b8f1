"""TritonBatchClient and SyncTritonBatchClient against the real embedded Triton.

``emulated_accelerator`` echoes its input, so callers with unique inputs prove
that each got exactly its own rows back; ``dense_mlp`` is checked against
unbatched calls of the plain tritonclient.
"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from autobatch.errors import (
    BatcherError,
    ConfigError,
    DeadlineExceededError,
    InvalidRequestError,
    TritonError,
)
from autobatch.lab.process import poll_until_async
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.profiles import parse_pbtxt
from autobatch.sdk import SyncTritonBatchClient, TritonBatchClient

from ..conftest import REPOSITORY, ROOT

DATA = ROOT / "tests" / "data"

pytestmark = pytest.mark.triton

ECHO = EMULATOR_MODEL
WIDTH = 16  # the emulator's input and output: FP32 [n, 16]


def rows(tag: int, n: int) -> np.ndarray:
    """n rows no other caller sends: row j of caller ``tag`` is filled with tag*100 + j."""
    return (tag * 100 + np.arange(n, dtype=np.float32))[:, None] * np.ones(WIDTH, np.float32)


def inference_count(http_url: str, model: str) -> int:
    stats = httpx.get(f"{http_url}/v2/models/{model}/stats", timeout=10).json()
    return int(stats["model_stats"][0]["inference_count"])


def url_for(triton, protocol: str) -> str:
    return triton.urls.grpc if protocol == "grpc" else triton.urls.http.removeprefix("http://")


async def wait_for(condition, what: str) -> None:
    """Poll ``condition`` on the event loop until it holds; every 1 ms, as the states
    awaited (a batch out, two requests queued behind it) last only ~50 ms."""
    await poll_until_async(condition, timeout_s=10, interval_s=0.001, what=what)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
async def test_every_caller_gets_exactly_its_own_rows(triton, protocol):
    registry = CollectorRegistry()
    sizes = np.random.default_rng(7).integers(1, 5, size=64)
    inputs = [rows(i, int(n)) for i, n in enumerate(sizes)]
    before = inference_count(triton.urls.http, ECHO)
    async with TritonBatchClient(url_for(triton, protocol), ECHO, protocol=protocol,
                                 registry=registry) as client:
        assert client.max_batch_size == 32  # read from the model's config
        outs = await asyncio.gather(*(client.infer({"INPUT": x}) for x in inputs))
        stats = client.statistics()
    for x, out in zip(inputs, outs):
        assert set(out) == {"OUTPUT"}
        np.testing.assert_array_equal(out["OUTPUT"], x)
    assert stats.succeeded == 64
    assert stats.size_sent == int(sizes.sum())
    assert stats.batches < 64  # requests were merged
    assert inference_count(triton.urls.http, ECHO) - before == int(sizes.sum())
    labels = {"batcher": ECHO}
    assert registry.get_sample_value(
        "autobatch_sdk_requests_total", {**labels, "outcome": "ok"}
    ) == 64
    assert registry.get_sample_value("autobatch_sdk_batch_size_sum", labels) == sizes.sum()


async def test_several_rounds_of_concurrent_callers_with_priority_groups(triton):
    """Callers with different priorities are batched apart and still get their own rows."""
    async with TritonBatchClient(triton.urls.grpc, ECHO, max_in_flight=3) as client:

        async def caller(tag: int) -> None:
            for round_ in range(4):
                x = rows(tag * 10 + round_, 1 + (tag + round_) % 3)
                out = await client.infer({"INPUT": x}, priority=tag % 2)
                np.testing.assert_array_equal(out["OUTPUT"], x)

        await asyncio.gather(*(caller(t) for t in range(48)))
        stats = client.statistics()
    assert stats.succeeded == 48 * 4
    assert stats.mean_batch_requests > 1


def test_many_threads_share_one_sync_client(triton):
    errors: list[BaseException] = []
    with SyncTritonBatchClient(triton.urls.grpc, ECHO) as client:
        start = threading.Barrier(16)

        def worker(tag: int) -> None:
            try:
                start.wait()
                for k in range(8):
                    x = rows(tag * 10 + k, 1 + k % 2)
                    out = client.infer({"INPUT": x})
                    np.testing.assert_array_equal(out["OUTPUT"], x)
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        stats = client.statistics()
    assert not errors, errors[0]
    assert stats.succeeded == 16 * 8
    assert stats.batches <= stats.requests_sent == 16 * 8
    with pytest.raises(BatcherError, match="closed"):
        client.infer({"INPUT": rows(1, 1)})


async def test_dense_mlp_batched_outputs_match_unbatched_calls(triton):
    import tritonclient.grpc as grpcclient

    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((int(n), 1024)).astype(np.float32)
              for n in rng.integers(1, 4, size=12)]
    async with TritonBatchClient(triton.urls.grpc, "dense_mlp") as client:
        outs = await asyncio.gather(*(client.infer({"INPUT": x}) for x in inputs))
        assert client.statistics().batches < len(inputs)
    plain = grpcclient.InferenceServerClient(triton.urls.grpc)
    try:
        for x, out in zip(inputs, outs):
            tensor = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            alone = plain.infer("dense_mlp", [tensor]).as_numpy("OUTPUT")
            assert out["OUTPUT"].shape == alone.shape == (x.shape[0], 1000)
            # Batched matmuls may sum in another order: equal up to float rounding.
            np.testing.assert_allclose(out["OUTPUT"], alone, rtol=1e-4, atol=1e-5)
    finally:
        plain.close()


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({}, "input 'INPUT' \\(FP32 \\[n, 16\\]\\) is missing"),
        ({"INPUT": np.zeros((1, WIDTH), np.float64)}, "has dtype float64; the model wants FP32"),
        ({"INPUT": np.zeros((1, 15), np.float32)}, "has shape \\[1, 15\\]; the model wants"),
        ({"INPUT": np.zeros(WIDTH, np.float32)}, "has shape \\[16\\]; the model wants"),
        ({"INPUT": np.zeros((0, WIDTH), np.float32)}, "has 0 rows"),
        ({"INPUT": np.zeros((33, WIDTH), np.float32)},
         "a request of 33 rows is larger than the batch limit of 32 rows"),
        ({"INPUT": [[0.0] * WIDTH]}, "must be a numpy array, not list"),
        ({"INPUT": rows(0, 1), "EXTRA": rows(0, 1)}, "unknown input 'EXTRA'"),
    ],
)
async def test_a_malformed_request_fails_alone_before_batching(triton, inputs, message):
    async with TritonBatchClient(triton.urls.grpc, ECHO, max_in_flight=1) as client:
        good = [asyncio.ensure_future(client.infer({"INPUT": rows(i, 1)})) for i in range(3)]
        with pytest.raises(InvalidRequestError, match=message) as info:
            await client.infer(inputs)
        assert isinstance(info.value, ValueError)
        for i, task in enumerate(good):
            np.testing.assert_array_equal((await task)["OUTPUT"], rows(i, 1))
        assert client.statistics().failed == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
async def test_an_unknown_model_is_a_triton_error(triton, protocol):
    client = TritonBatchClient(url_for(triton, protocol), "no_such_model", protocol=protocol)
    with pytest.raises(TritonError, match="'no_such_model'.*cannot read its config.*not found"):
        await client.infer({"INPUT": rows(0, 1)})
    await client.close()


def test_the_sync_client_fails_in_its_constructor(triton):
    with pytest.raises(TritonError, match="no_such_model"):
        SyncTritonBatchClient(triton.urls.grpc, "no_such_model")
    with pytest.raises(ConfigError, match="max_batch_size = 64: larger than model 'dense_mlp'"):
        SyncTritonBatchClient(triton.urls.grpc, "dense_mlp", max_batch_size=64)


def test_bad_arguments_fail_before_connecting():
    with pytest.raises(ConfigError, match="protocol = 'udp'"):
        TritonBatchClient("127.0.0.1:1", ECHO, protocol="udp")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_batch_size must be an integer >= 1"):
        TritonBatchClient("127.0.0.1:1", ECHO, max_batch_size=0)
    with pytest.raises(ConfigError, match="max_in_flight must be an integer >= 1"):
        TritonBatchClient("127.0.0.1:1", ECHO, max_in_flight=0)
    with pytest.raises(ConfigError, match="priority = -1"):
        TritonBatchClient("127.0.0.1:1", ECHO, priority=-1)
    with pytest.raises(ConfigError, match="client_timeout_s = '5'"):
        TritonBatchClient("127.0.0.1:1", ECHO, client_timeout_s="5")  # type: ignore[arg-type]


async def test_a_smaller_max_batch_size_caps_every_batch(triton):
    async with TritonBatchClient(triton.urls.grpc, ECHO, max_batch_size=4) as client:
        inputs = [rows(i, 3) for i in range(10)]
        outs = await asyncio.gather(*(client.infer({"INPUT": x}) for x in inputs))
        with pytest.raises(InvalidRequestError, match="5 rows is larger than the batch limit of 4"):
            await client.infer({"INPUT": rows(0, 5)})
        stats = client.statistics()
    for x, out in zip(inputs, outs):
        np.testing.assert_array_equal(out["OUTPUT"], x)
    assert stats.batches == 10  # 3 + 3 > 4: no two of these fit one batch


async def test_a_cancelled_request_is_not_sent_to_triton(triton):
    async with TritonBatchClient(triton.urls.grpc, ECHO, max_in_flight=1) as client:
        before = inference_count(triton.urls.http, ECHO)
        first = asyncio.ensure_future(client.infer({"INPUT": rows(1, 32)}))  # ~50 ms on Triton
        await wait_for(lambda: client.statistics().in_flight_batches == 1, "the first batch")
        doomed = asyncio.ensure_future(client.infer({"INPUT": rows(2, 3)}))
        kept = asyncio.ensure_future(client.infer({"INPUT": rows(3, 1)}))
        await wait_for(lambda: client.statistics().queued_requests == 2, "two queued requests")
        doomed.cancel()
        np.testing.assert_array_equal((await kept)["OUTPUT"], rows(3, 1))
        await first
        stats = client.statistics()
    assert doomed.cancelled()
    assert stats.cancelled == 1
    assert inference_count(triton.urls.http, ECHO) - before == 32 + 1  # not the 3 cancelled rows


async def test_deadlines_against_the_real_server(triton):
    async with TritonBatchClient(triton.urls.grpc, ECHO, max_in_flight=1) as client:
        before = inference_count(triton.urls.http, ECHO)
        first = asyncio.ensure_future(client.infer({"INPUT": rows(1, 32)}))  # ~50 ms on Triton
        await wait_for(lambda: client.statistics().in_flight_batches == 1, "the first batch")
        # Queued past its deadline: removed, never sent.
        queued = asyncio.ensure_future(client.infer({"INPUT": rows(2, 2)}, timeout_s=0.001))
        with pytest.raises(DeadlineExceededError, match="never sent"):
            await queued
        np.testing.assert_array_equal((await first)["OUTPUT"], rows(1, 32))
        assert inference_count(triton.urls.http, ECHO) - before == 32
        # Sent, then past its deadline: the caller is released and its batch, wanted by
        # nobody else, is cancelled; the client carries on.
        with pytest.raises(DeadlineExceededError, match="already sent"):
            await client.infer({"INPUT": rows(3, 32)}, timeout_s=0.002)
        await wait_for(lambda: client.statistics().in_flight_batches == 0, "the batch to end")
        out = await client.infer({"INPUT": rows(4, 1)}, timeout_s=30)
        np.testing.assert_array_equal(out["OUTPUT"], rows(4, 1))
        assert client.statistics().expired == 2


# -- a server of our own, whose emulator has queue policies -----------------------------------

QUEUE_DELAY_US = 50_000


@pytest.fixture(scope="module")
def policy_triton():
    """The emulator with queue policies that make priority and timeout visible.

    Requests wait up to 50 ms in Triton's queue for a batch of 32 to form; priority
    level 1 rejects a request that waited 1 ms, and a request's own timeout may
    shorten the default one. So a request that reaches Triton with priority 1,
    or with a 1 ms timeout, is rejected; one without is answered after the delay.
    Its input and output are [n, -1]: any width, echoed.
    """
    path = REPOSITORY / ECHO / "config.pbtxt"
    config = parse_pbtxt(path.read_text(encoding="utf-8"), str(path))
    config["input"][0]["dims"] = [-1]
    config["output"][0]["dims"] = [-1]
    config["dynamic_batching"] = {
        "preferred_batch_size": [32],
        "max_queue_delay_microseconds": QUEUE_DELAY_US,
        "priority_levels": 2,
        "default_priority_level": 2,
        "default_queue_policy": {
            "allow_timeout_override": True,
            "default_timeout_microseconds": 60_000_000,
        },
        "priority_queue_policy": {
            "1": {"timeout_action": "REJECT", "default_timeout_microseconds": 1000},
        },
    }
    with TritonServer.on_free_ports(REPOSITORY, models=[ECHO]) as server:
        r = httpx.post(f"{server.urls.http}/v2/repository/models/{ECHO}/load",
                       json={"parameters": {"config": json.dumps(config)}}, timeout=60)
        assert r.status_code == 200, r.text
        yield server


async def test_a_server_timeout_fails_every_caller_of_the_batch(policy_triton):
    async with TritonBatchClient(policy_triton.urls.grpc, ECHO, max_delay_s=0.005,
                                 adaptive=False) as client:
        calls = [client.infer({"INPUT": rows(i, 1)}, server_timeout_us=1000) for i in range(3)]
        errors = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(e, TritonError) for e in errors), errors
        assert all(e is errors[0] for e in errors)  # one batch, one failure
        assert "failed a batch of 3 requests (3 rows)" in str(errors[0])
        assert "Request timeout expired" in str(errors[0])
        assert type(errors[0].__cause__).__name__ == "InferenceServerException"
        stats = client.statistics()
        assert (stats.batches, stats.failed, stats.batches_failed) == (1, 3, 1)
        # Without the timeout the same request waits out the delay and is answered.
        out = await client.infer({"INPUT": rows(5, 2)})
        np.testing.assert_array_equal(out["OUTPUT"], rows(5, 2))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
async def test_priority_reaches_triton(policy_triton, protocol):
    async with TritonBatchClient(url_for(policy_triton, protocol), ECHO, protocol=protocol,
                                 priority=1) as client:
        with pytest.raises(TritonError, match="failed a batch of 1 request .*Request timeout expired"):
            await client.infer({"INPUT": rows(1, 1)})  # the client's default: level 1
        out = await client.infer({"INPUT": rows(2, 1)}, priority=2)
        np.testing.assert_array_equal(out["OUTPUT"], rows(2, 1))


async def test_requests_of_different_widths_are_batched_apart(policy_triton):
    async with TritonBatchClient(policy_triton.urls.grpc, ECHO, max_delay_s=0.005,
                                 adaptive=False) as client:
        inputs = [rows(i, 2)[:, : (16 if i % 2 else 8)] for i in range(6)]
        outs = await asyncio.gather(*(client.infer({"INPUT": x}) for x in inputs))
        with pytest.raises(InvalidRequestError, match=r"has shape \[1, 2, 8\]; the model wants "
                                                       r"FP32 \[n, -1\]"):
            await client.infer({"INPUT": np.zeros((1, 2, 8), np.float32)})
        stats = client.statistics()
    for x, out in zip(inputs, outs):
        np.testing.assert_array_equal(out["OUTPUT"], x)
    assert stats.batches == 2  # one per width


# -- BYTES and optional inputs (tests/data/sdk_repository/text_length) ------------------------

TEXT_MODEL = "text_length"


@pytest.fixture(scope="module")
def text_triton():
    with TritonServer.on_free_ports(DATA / "sdk_repository", models=[TEXT_MODEL]) as server:
        yield server


def text(tag: int, n: int) -> np.ndarray:
    """n strings of distinct byte lengths (UTF-8 included): caller ``tag``'s row j is tag*10+j bytes."""
    return np.array([[("é" * (tag * 5 + j // 2) + "x" * (j % 2)).encode()] for j in range(n)],
                    dtype=object)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
async def test_bytes_and_optional_inputs_batch_by_kind_and_come_back_to_their_callers(
    text_triton, protocol
):
    # A delay far longer than it takes to submit 12 calls: the two kinds each fill one batch
    # however slow the machine (10 ms gave 4 batches once on a loaded fresh-ci run).
    async with TritonBatchClient(url_for(text_triton, protocol), TEXT_MODEL, protocol=protocol,
                                 max_delay_s=0.5, adaptive=False) as client:
        calls = []
        for tag in range(12):
            inputs = {"TEXT": text(tag, 1 + tag % 3)}
            if tag % 2:  # half the callers send the optional input
                inputs["WEIGHT"] = np.full((1 + tag % 3, 1), float(tag), np.float32)
            calls.append(inputs)
        outs = await asyncio.gather(*(client.infer(x) for x in calls))
        stats = client.statistics()
        with pytest.raises(InvalidRequestError, match="'TEXT' has dtype float32; the model wants BYTES"):
            await client.infer({"TEXT": np.zeros((1, 1), np.float32)})
    for inputs, out in zip(calls, outs):
        lengths = np.array([[len(row[0])] for row in inputs["TEXT"]], np.float32)
        expected = lengths * inputs["WEIGHT"] if "WEIGHT" in inputs else lengths
        np.testing.assert_array_equal(out["LENGTH"], expected)
    # Requests with and without the optional input cannot share a Triton request: two batches.
    assert stats.batches == 2 and stats.succeeded == 12
