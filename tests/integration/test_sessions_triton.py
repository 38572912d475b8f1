"""Sessions for real: `autobatch load --sessions` and the SDK's SessionBatcher against Triton.

The emulated accelerator runs ``laptop-512x288-fp16`` (batching *lowers* its
throughput) under Triton's default batching (no preferred sizes, no delay), so
4 streams at 30 fps overload it and the session policy decides who gets served.
The agreement with the simulator is the issue's criterion with a looser bound
for CI (20% on mean per-session fps and p50, one 4 s run per case);
benchmarks/sessions.py measures the 10% target with longer, repeated runs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autobatch.curve import load_curve
from autobatch.lab.process import poll_until_async
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.lab.sessions import SessionsCase, sessions_fidelity
from autobatch.profiles import Profile
from autobatch.sdk import SessionBatcher, TritonBatchClient

from ..conftest import CURVES, REPOSITORY

pytestmark = pytest.mark.triton

CURVE = load_curve(CURVES / "laptop-512x288-fp16.yaml")
TRITON_DEFAULT = Profile(name="triton-default", max_batch_size=32, preferred_batch_size=(),
                         max_queue_delay_us=0)
TOLERANCE = 0.20


@pytest.fixture
def emulator(triton: Any):
    triton.load_emulator(CURVE, TRITON_DEFAULT)
    yield triton
    # The repository's own config and curve, for the tests after this one.
    triton.load_emulator(load_curve(REPOSITORY / EMULATOR_MODEL / "curve.yaml"))


def autobatch(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("autobatch")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.serial
def test_load_sessions_agrees_with_simulate_sessions(emulator: Any) -> None:
    cases = [SessionsCase("batch-waiting", 4, 30.0), SessionsCase("round-robin", 4, 30.0)]
    result = sessions_fidelity(emulator.urls.grpc, emulator.urls.http, EMULATOR_MODEL, CURVE, cases,
                               duration_s=4.0)
    print(f"\noverheads: {result.overheads.to_dict()}, request {result.mean_request_ms:.2f} ms")
    for row in result.rows:
        print(row.case, {w: (row.figure("measured", w), row.figure("predicted", w))
                         for w in ("fps", "slowest", "p50", "p99", "overwritten", "mean_batch")})
    batch, rr = result.rows
    # What each policy does, measured: batch-waiting sends the 4 sessions together and
    # serves them alike; round-robin sends one frame at a time and serves them alike too.
    assert batch.figure("measured", "mean_batch") > 3.5
    assert rr.figure("measured", "mean_batch") == 1.0
    for row in result.rows:
        run = row.measured[0]
        assert max(run.per_session_fps) - min(run.per_session_fps) < 0.1 * max(run.per_session_fps)
        assert run.overwritten_frac > 0.1  # 120 frames/s offered, ~100/s served at best
        assert abs(row.error("fps")) <= TOLERANCE, row.to_dict()["figures"]
        assert abs(row.error("p50")) <= TOLERANCE, row.to_dict()["figures"]
    # The server's and client's costs are small next to ~10-46 ms batches, but not zero.
    assert 0 < result.overheads.batch_overhead_ms + result.overheads.fixed_latency_ms < 10


def test_cli_load_sessions_reports_every_frame(emulator: Any, tmp_path: Path) -> None:
    out = tmp_path / "frames.jsonl"
    proc = autobatch("load", "--url", emulator.urls.grpc, "--model", EMULATOR_MODEL,
                     "--sessions", "3", "--fps", "20", "--session-policy", "round-robin",
                     "--duration", "2", "--json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["measured"] is True and d["policy"] == "round-robin" and d["sessions"] == 3
    assert len(d["per_session"]) == len(d["per_session_fps"]) == 3
    # The same fields as `simulate --sessions`.
    sim = autobatch("simulate", "--curve", str(CURVES / "laptop-512x288-fp16.yaml"), "--sessions",
                    "3", "--fps", "20", "--session-policy", "round-robin", "--duration", "2", "--json")
    assert sim.returncode == 0, sim.stderr
    assert set(json.loads(sim.stdout)) == set(d)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    frames = sum(s["frames"] for s in d["per_session"])
    assert len(records) == frames == 3 * 40  # 20 fps for 2 s, three streams
    assert {r["outcome"] for r in records} <= {"ok", "overwritten"}
    delivered = [r for r in records if r["outcome"] == "ok"]
    assert len(delivered) == sum(s["delivered"] for s in d["per_session"])
    assert all(r["latency_ms"] >= CURVE.estimate(1).ms for r in delivered)


def test_cli_table_for_people(emulator: Any) -> None:
    proc = autobatch("load", "--url", emulator.urls.grpc, "--model", EMULATOR_MODEL,
                     "--sessions", "2", "--fps", "10", "--duration", "1")
    assert proc.returncode == 0, proc.stderr
    assert "Sessions (measured): 2 streams at 10 fps" in proc.stdout
    assert "delivered fps" in proc.stdout and "overwritten" in proc.stdout


async def test_session_batcher_gives_every_frame_its_own_rows(emulator: Any) -> None:
    # While the first frame is out, six sessions offer theirs; batch-waiting sends them
    # as one request, and the echo model proves each caller got its own rows back.
    def frame(tag: int) -> dict[str, np.ndarray]:
        return {"INPUT": np.full((1, 16), tag, np.float32)}

    async with TritonBatchClient(emulator.urls.grpc, EMULATOR_MODEL) as client:
        sessions = SessionBatcher(client, policy="batch-waiting")
        first = asyncio.ensure_future(sessions.submit("s0", frame(0)))
        # Every 1 ms: the others must be offered while this one frame is out.
        await poll_until_async(lambda: sessions.statistics().in_flight > 0, timeout_s=10,
                               interval_s=0.001, what="the first frame to be sent")
        rest = [asyncio.ensure_future(sessions.submit(f"s{k}", frame(k))) for k in range(1, 7)]
        outs = await asyncio.gather(first, *rest)
        stats = sessions.statistics()
    for k, out in enumerate(outs):
        assert out is not None
        np.testing.assert_array_equal(out["OUTPUT"], frame(k)["INPUT"])
    assert stats.batches == 2 and stats.frames_sent == 7
    assert stats.mean_request_ms is not None and stats.mean_request_ms >= CURVE.estimate(1).ms
