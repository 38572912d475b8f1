"""SessionBatcher's slot and policy logic, on a client whose requests the test releases.

The Triton boundary is faked here (a TritonBatchClient whose ``infer`` waits for
the test); tests/integration/test_sessions_triton.py runs the same batcher against the real server.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from autobatch.errors import BatcherError, ConfigError, InvalidRequestError, TritonError
from autobatch.sdk import SessionBatcher, TritonBatchClient

CONFIG = {
    "name": "echo",
    "max_batch_size": 8,
    "input": [{"name": "INPUT", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "OUTPUT", "data_type": "TYPE_FP32", "dims": [2]}],
}


class HeldClient(TritonBatchClient):
    """Reads CONFIG instead of a server; each ``infer`` waits until the test releases it."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:1", "echo")
        self.sent: list[np.ndarray] = []
        self.held: list[asyncio.Future[BaseException | None]] = []

    async def start(self) -> HeldClient:
        if not self.model_config:
            self._configure(CONFIG)
        return self

    async def infer(self, inputs, **kwargs):  # type: ignore[override]
        self.sent.append(inputs["INPUT"].copy())
        fut = asyncio.get_running_loop().create_future()
        self.held.append(fut)
        error = await fut
        if error is not None:
            raise error
        return {"OUTPUT": inputs["INPUT"] * 2}

    async def release(self, error: BaseException | None = None) -> None:
        self.held.pop(0).set_result(error)
        await settle()


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def frame(tag: float, rows: int = 1) -> dict[str, np.ndarray]:
    return {"INPUT": np.full((rows, 2), tag, np.float32)}


def sent_tags(client: HeldClient) -> list[list[float]]:
    return [batch[:, 0].tolist() for batch in client.sent]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0  # every frame arrives one second after the one before
        return self.now


async def start(policy: str, **kwargs):
    client = HeldClient()
    batcher = SessionBatcher(client, policy=policy, clock=Clock(), **kwargs)
    return client, batcher


async def test_a_newer_frame_overwrites_a_waiting_one():
    client, sb = await start("batch-waiting")
    first = asyncio.ensure_future(sb.submit("cam", frame(1)))
    await settle()
    stale = asyncio.ensure_future(sb.submit("cam", frame(2)))  # 1 is out: 2 waits
    await settle()
    fresh = asyncio.ensure_future(sb.submit("cam", frame(3)))  # 3 takes 2's place
    await settle()
    assert stale.done() and stale.result() is None
    await client.release()
    await client.release()
    assert (await first)["OUTPUT"][0, 0] == 2.0
    assert (await fresh)["OUTPUT"][0, 0] == 6.0
    assert sent_tags(client) == [[1.0], [3.0]]
    counts = sb.statistics().per_session["cam"]
    assert (counts.frames, counts.delivered, counts.overwritten, counts.failed) == (3, 2, 1, 0)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Session a's first frame is out; then b, c, a, d arrive in that order.
        ("batch-waiting", [["a"], ["b", "c", "a", "d"]]),
        ("oldest-first", [["a"], ["b"], ["c"], ["a"], ["d"]]),
        ("round-robin", [["a"], ["b"], ["c"], ["d"], ["a"]]),  # after a: b, c, d, then a again
    ],
)
async def test_the_policy_picks_the_next_request(policy, expected):
    client, sb = await start(policy)
    tag = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    calls = [asyncio.ensure_future(sb.submit("a", frame(tag["a"])))]
    await settle()
    for s in ("b", "c", "a", "d"):
        calls.append(asyncio.ensure_future(sb.submit(s, frame(tag[s]))))
        await settle()
    for _ in expected:
        await client.release()
    outs = await asyncio.gather(*calls)
    assert sent_tags(client) == [[tag[s] for s in batch] for batch in expected]
    # Every caller got its own rows back, doubled.
    for (s, out) in zip(("a", "b", "c", "a", "d"), outs):
        assert out is not None and out["OUTPUT"][0, 0] == 2 * tag[s]
    assert sb.statistics().batches == len(expected)


async def test_batch_waiting_caps_rows_and_never_splits_a_frame():
    client, sb = await start("batch-waiting", max_batch_size=4)
    calls = [asyncio.ensure_future(sb.submit("x", frame(9)))]
    await settle()
    for s, rows in (("a", 3), ("b", 2), ("c", 1)):
        calls.append(asyncio.ensure_future(sb.submit(s, frame(ord(s), rows))))
        await settle()
    for _ in range(3):
        await client.release()
    await asyncio.gather(*calls)
    # a (3 rows) + b (2 rows) > 4: b starts the next request, and c joins it.
    assert [len(b) for b in client.sent] == [1, 3, 3]
    out_b, out_c = calls[2].result(), calls[3].result()
    assert out_b["OUTPUT"].shape == (2, 2) and out_c["OUTPUT"].shape == (1, 2)


async def test_a_failed_request_fails_its_frames_and_the_next_one_goes():
    client, sb = await start("batch-waiting")
    first = asyncio.ensure_future(sb.submit("a", frame(1)))
    await settle()
    second = asyncio.ensure_future(sb.submit("b", frame(2)))
    await settle()
    await client.release(TritonError("model 'echo' failed a batch"))
    with pytest.raises(TritonError, match="failed a batch"):
        await first
    await client.release()
    assert (await second)["OUTPUT"][0, 0] == 4.0
    assert sb.statistics().per_session["a"].failed == 1


async def test_a_bad_frame_fails_alone_and_takes_no_slot():
    client, sb = await start("batch-waiting")
    with pytest.raises(InvalidRequestError, match="INPUT"):
        await sb.submit("a", {"INPUT": np.zeros((1, 3), np.float32)})
    with pytest.raises(InvalidRequestError, match="larger than"):
        await sb.submit("a", frame(1, rows=9))
    assert sb.statistics().waiting == 0 and client.sent == []


async def test_close_without_drain_fails_the_waiting_frames():
    client, sb = await start("oldest-first")
    out = asyncio.ensure_future(sb.submit("a", frame(1)))
    await settle()
    waiting = asyncio.ensure_future(sb.submit("b", frame(2)))
    await settle()
    closing = asyncio.ensure_future(sb.close(drain=False))
    await settle()
    with pytest.raises(BatcherError, match="closed"):
        await waiting
    await client.release()  # the request already out still comes back
    await closing
    assert (await out) is not None
    with pytest.raises(BatcherError, match="closed"):
        await sb.submit("a", frame(3))


async def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="session_policy = 'newest-first'"):
        SessionBatcher(HeldClient(), policy="newest-first")
    with pytest.raises(ConfigError, match="max_batch_size = 0"):
        SessionBatcher(HeldClient(), max_batch_size=0)
    with pytest.raises(ConfigError, match="client = "):
        SessionBatcher("127.0.0.1:8001")  # type: ignore[arg-type]
    sb = SessionBatcher(HeldClient(), max_batch_size=16)
    with pytest.raises(ConfigError, match="max_batch_size = 16: larger than"):
        await sb.submit("a", frame(1))
