"""`autobatch load --sessions`: its bad input, and how frame records become the result.

The runs against the real Triton are in tests/integration/test_sessions_triton.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from autobatch.load.sessions import FrameRecord, _summarize
from autobatch.sdk import SessionStatistics

from ..helpers import assert_bad_input, run_main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sessions", "0", "--fps", "30"], "sessions = 0: must be an integer >= 1"),
        (["--sessions", "2", "--fps", "0"], "fps = 0.0: must be a number > 0"),
        (["--sessions", "2", "--fps", "30", "--session-policy", "newest"],
         "session_policy = 'newest': must be one of oldest-first, batch-waiting, round-robin"),
        (["--sessions", "2"], "--sessions and --fps go together"),
        (["--sessions", "2", "--fps", "3", "--rate", "5"], "give one load"),
        (["--sessions", "2", "--fps", "3", "--duration", "-1"], "duration_s = -1.0: must be a number > 0"),
        (["--sessions", "2", "--fps", "3", "--protocol", "udp"], "protocol = 'udp'"),
        (["--sessions", "2", "--fps", "3", "--out", "/nonexistent/dir/f.jsonl"], "out = "),
        (["--sessions", "2", "--fps", "3", "--seed", "-1"], "--seed = -1: must be an integer >= 0"),
        (["--sessions", "2", "--fps", "3", "--url", "ftp://x:1"], "--url = 'ftp://x:1': scheme 'ftp'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Port 9 (discard) is never a Triton: a check that got as far as the network
    # would fail with a different message.
    code, _, err = run_main(monkeypatch, capsys, "load", "--model", "m", "--url", "127.0.0.1:9", *args)
    assert_bad_input(code, err, message)


def stats(batches: int, frames_sent: int, request_s: float) -> SessionStatistics:
    return SessionStatistics(policy="round-robin", waiting=0, in_flight=0, batches=batches,
                             frames_sent=frames_sent, request_s=request_s)


def test_records_become_the_simulators_result_type() -> None:
    records = [
        FrameRecord(0, 0, 0.00, 0.0005, 12.0, "ok"),
        FrameRecord(1, 1, 0.01, 0.0105, None, "overwritten"),
        FrameRecord(2, 1, 0.04, 0.0402, 20.0, "ok"),
        FrameRecord(3, 0, 0.05, 0.0501, None, "timeout", "no answer in time"),
        FrameRecord(4, 0, 0.10, 0.1001, 14.0, "ok"),
    ]
    res = _summarize(records, "round-robin", 2, 20.0, 0.2, stats(4, 4, 0.05))
    assert res.measured and res.policy == "round-robin"
    assert [s.frames for s in res.per_session] == [3, 2]
    assert [s.delivered for s in res.per_session] == [2, 1]
    assert [s.overwritten for s in res.per_session] == [0, 1]
    assert [s.failed for s in res.per_session] == [1, 0]
    assert res.per_session_fps == [10.0, 5.0]
    assert res.mean_request_ms == pytest.approx(12.5)
    assert res.latency is not None and res.latency.p50_ms == 14.0
    assert res.warnings == ("1 frames failed (timeout 1)",)


def test_a_late_frame_clock_is_a_warning() -> None:
    records = [FrameRecord(k, 0, k * 0.01, k * 0.01 + 0.02, 10.0, "ok") for k in range(50)]
    res = _summarize(records, "oldest-first", 1, 100.0, 0.5, stats(50, 50, 0.5))
    assert len(res.warnings) == 1 and "frame clock fell behind: p99 lag 20.0 ms" in res.warnings[0]
