"""`autobatch load`: the open-loop generator against the real Triton, plus its pure parts.

The Triton tests keep each load to a few seconds at a modest rate; the only
timing they assert is the rate accounting (sent within 5% of the target).
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autobatch import cli
from autobatch.errors import ConfigError, LoadError
from autobatch.lab.serve import free_port
from autobatch.load import (
    BehindLimits,
    LoadReport,
    RequestRecord,
    run_load,
)
from autobatch.load.report import summarize
from autobatch.load.runner import drive
from autobatch.load.transport import classify_error, normalize_url, synthesize_inputs
from autobatch.schedule import Phase, Schedule, arrivals

from ..helpers import assert_bad_input, run_main

MODEL = "dense_mlp"
RECORD_FIELDS = {"index", "phase", "scheduled_s", "sent_s", "latency_ms", "outcome", "error",
                 "rows", "priority"}



























@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unreachable_server_is_a_one_line_load_error(protocol: str) -> None:
    url = f"127.0.0.1:{free_port()}"
    with pytest.raises(LoadError) as info:
        run_load(url, MODEL, Schedule.constant(1, 1), protocol=protocol)
    message = str(info.value)
    assert message.startswith(f"cannot reach Triton over {protocol} at {url}")
    assert "\n" not in message


# -- the command line without a server -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "10", "--duration", "1", "--schedule", "s.yaml"], "either a rate"),
        ([], "either a rate (with a duration) or a schedule file"),
        (["--rate", "-5", "--duration", "1"], "rate = -5: must be >= 0"),
        (["--rate", "5"], "a rate needs a duration"),
        (["--rate", "5", "--duration", "0"], "duration = 0: must be > 0"),
        (["--schedule", "missing.yaml"], "missing.yaml: file not found"),
        (["--rate", "5", "--duration", "1", "--protocol", "udp"], "protocol = 'udp'"),
        (["--rate", "5", "--duration", "1", "--timeout-ms", "0"], "timeout_ms = 0: must be a number > 0"),
        (["--rate", "5", "--duration", "1", "--out", "/nonexistent/dir/r.jsonl"], "out = "),
        (["--rate", "5", "--duration", "1", "--seed", "-1"], "--seed = -1: must be an integer >= 0"),
        (["--rate", "5", "--duration", "1", "--url", "ftp://x:1"],
         "--url = 'ftp://x:1': scheme 'ftp' is not supported"),
        (["--rate", "5", "--duration", "1", "--url", "https://x:1"],
         "--url = 'https://x:1': scheme 'https' is not supported"),
        (["--rate", "5", "--duration", "1", "--url", "http://"], "--url = '': give host:port"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # Port 9 (discard) is never a Triton: a check that got as far as the network
    # would fail with a different message.
    code, _, err = run_main(monkeypatch, capsys, "load", "--model", MODEL, "--url", "127.0.0.1:9", *args)
    assert_bad_input(code, err, message)


def test_bad_schedule_file_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("phases:\n  - {name: a, rate_rps: 10, duration_s: -2}\n")
    monkeypatch.setattr(sys, "argv", ["autobatch", "load", "--model", MODEL, "--schedule", str(path)])
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 2
    assert f"{path}: phases[0].duration_s = -2.0: must be > 0" in capsys.readouterr().err


def test_help_shows_an_example(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["autobatch", "load", "--help"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 0
    assert "Example: autobatch load" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"protocol": "udp"}, "protocol = 'udp'"),
        ({"batch_size": 0}, "batch_size = 0: must be an integer >= 1"),
        ({"timeout_s": 0}, "timeout_ms = 0: must be a number > 0"),
        ({"drain_s": -1.0}, "drain_s = -1.0: must be a number >= 0"),
        ({"seed": -1}, "seed = -1: must be an integer >= 0"),
        ({"url": "ftp://127.0.0.1:9"}, "url = 'ftp://127.0.0.1:9': scheme 'ftp' is not supported"),
    ],
)
def test_run_load_checks_its_arguments_first(kwargs: dict[str, Any], message: str, tmp_path: Path) -> None:
    # Port 9 (discard) is never a Triton; and the records file is not even created.
    out = tmp_path / "r.jsonl"
    with pytest.raises(ConfigError) as info:
        run_load(kwargs.pop("url", "127.0.0.1:9"), MODEL, Schedule.constant(1, 1), out=out, **kwargs)
    assert message in str(info.value)
    assert not out.exists()


@pytest.mark.parametrize(
    ("url", "taken"),
    [("127.0.0.1:8001", "127.0.0.1:8001"), ("grpc://h:8001/", "h:8001"), ("HTTP://h:8000", "h:8000")],
)
def test_a_url_may_name_http_or_grpc(url: str, taken: str) -> None:
    assert normalize_url(url) == taken


# -- the engine, with injected senders -----------------------------------------------------


class Sender:
    """A stand-in transport: succeeds, raises, hangs or hogs the event loop."""

    def __init__(
        self, *, error: BaseException | None = None, hang: bool = False, block_s: float = 0.0
    ) -> None:
        self.error = error
        self.hang = hang
        self.block_s = block_s
        self.calls = 0

    async def infer(self) -> None:
        self.calls += 1
        if self.block_s:
            time.sleep(self.block_s)  # a client too slow for its schedule, not a wait
        if self.hang:
            await asyncio.Event().wait()
        if self.error is not None:
            raise self.error
        await asyncio.sleep(0)


async def test_drive_records_every_arrival() -> None:
    schedule = Schedule((Phase("a", 100, 0.1), Phase("b", 200, 0.1)))
    records, stopped_at, _ = await drive(Sender(), schedule, seed=1, drain_s=1.0)
    assert stopped_at is None
    assert len(records) == len(arrivals(schedule, np.random.default_rng(1))) == 30
    assert {r.outcome for r in records} == {"ok"}
    assert [r.phase for r in records] == ["a"] * 10 + ["b"] * 20


class StampingSender(Sender):
    """Remembers the event loop's clock at each send."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: list[float] = []

    async def infer(self) -> None:
        self.sent_at.append(asyncio.get_running_loop().time())
        await super().infer()


async def test_a_start_instant_is_time_0_so_generators_in_other_processes_send_together() -> None:
    schedule = Schedule.constant(100, 0.1)
    start = asyncio.get_running_loop().time() + 0.15
    sender = StampingSender()
    records, _, _ = await drive(sender, schedule, seed=2, start_at=start)
    assert len(records) == 10 and min(sender.sent_at) >= start
    # each request's offset is measured from that instant, not from when drive was called
    assert all(r.sent_s is not None and r.sent_s >= r.scheduled_s - 1e-9 for r in records)


async def test_a_start_instant_already_past_keeps_time_0_there_and_the_lateness_shows() -> None:
    start = asyncio.get_running_loop().time() - 0.05
    records, _, _ = await drive(Sender(), Schedule.constant(100, 0.1), seed=2, start_at=start)
    assert min(r.lag_ms for r in records if r.lag_ms is not None) >= 0.0
    assert max(r.lag_ms for r in records if r.lag_ms is not None) >= 20.0  # the first ones went late


async def test_requests_still_running_after_the_drain_are_unfinished() -> None:
    records, _, elapsed_s = await drive(Sender(hang=True), Schedule.constant(50, 0.2), drain_s=0.05)
    assert len(records) == 10
    assert {r.outcome for r in records} == {"unfinished"}
    assert all(r.sent_s is not None and r.latency_ms is None for r in records)
    assert elapsed_s < 5  # bounded, never hangs


async def test_a_generator_that_falls_behind_says_so() -> None:
    schedule = Schedule.constant(100, 0.2)
    records, _, _ = await drive(Sender(block_s=0.02), schedule, drain_s=0.0)
    phases, total = summarize(schedule, records)
    assert total.behind and phases[0].behind
    assert total.ok < 20
    assert set(total.failures) <= {"unsent", "unfinished"} and total.failed > 0
    assert "send lag p99" in (total.behind_reason or "")


async def test_failures_are_classified() -> None:
    from tritonclient.utils import InferenceServerException

    err = InferenceServerException("Exceeds maximum queue size", status="StatusCode.UNAVAILABLE")
    records, _, _ = await drive(Sender(error=err), Schedule.constant(50, 0.1))
    assert {r.outcome for r in records} == {"REJECTED"}
    assert records[0].error == "Exceeds maximum queue size"
    assert records[0].latency_ms is not None


async def test_stop_flag_ends_the_run_early() -> None:
    stop = threading.Event()
    count = 0

    def on_record(rec: RequestRecord) -> None:
        nonlocal count
        count += 1
        if count == 5:
            stop.set()

    schedule = Schedule((Phase("a", 100, 30), Phase("b", 100, 30)))
    records, stopped_at, _ = await drive(Sender(), schedule, on_record=on_record, stop=stop)
    assert stopped_at is not None and stopped_at < 30
    assert 5 <= len(records) < 3000
    assert {r.outcome for r in records} == {"ok"}
    # Stopping early must not read as sending too few. The send-lag half of the check is
    # off here: on a loaded machine the event loop itself can lag (test_behind_flag_* has it).
    no_lag_check = BehindLimits(max_lag_p99_ms=math.inf)
    phases, total = summarize(schedule, records, ran_s=stopped_at, limits=no_lag_check)
    assert phases[0].duration_s == pytest.approx(stopped_at)
    assert phases[1].duration_s == 0 and phases[1].scheduled == 0
    assert not total.behind, total.behind_reason


async def test_a_failing_callback_stops_the_run_and_is_raised() -> None:
    def on_record(rec: RequestRecord) -> None:
        raise RuntimeError("display broke")

    with pytest.raises(RuntimeError, match="display broke"):
        await drive(Sender(), Schedule.constant(100, 30), on_record=on_record)


async def test_cancelling_a_run_cancels_its_requests() -> None:
    sender = Sender(hang=True)
    run = asyncio.ensure_future(drive(sender, Schedule.constant(100, 30)))
    for _ in range(500):  # poll until requests are in flight (bounded)
        if sender.calls >= 3:
            break
        await asyncio.sleep(0.01)
    assert sender.calls >= 3
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await asyncio.sleep(0)  # one turn for the cancelled requests to unwind
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert leftovers == []


# -- pure parts ----------------------------------------------------------------------------


def _ise(message: str, status: str) -> BaseException:
    from tritonclient.utils import InferenceServerException

    return InferenceServerException(message, status=status)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: _ise("failed to connect", "StatusCode.UNAVAILABLE"), "UNAVAILABLE"),
        (lambda: _ise("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED"), "timeout"),
        (lambda: _ise("Exceeds maximum queue size", "StatusCode.UNAVAILABLE"), "REJECTED"),
        (lambda: _ise("Request timeout expired", "503"), "REJECTED"),
        (lambda: _ise("unknown model", "StatusCode.NOT_FOUND"), "NOT_FOUND"),
        (lambda: _ise("unknown model", "404"), "NOT_FOUND"),
        (lambda: _ise("bad shape", "400"), "INVALID_ARGUMENT"),
        (lambda: _ise("server busy", "503"), "UNAVAILABLE"),
        (lambda: _ise("teapot", "418"), "HTTP_418"),
        (lambda: asyncio.TimeoutError(), "timeout"),
        (lambda: __import__("aiohttp").ServerDisconnectedError(), "UNAVAILABLE"),
        (lambda: ValueError("odd"), "ValueError"),
    ],
)
def test_classify_error(make: Any, kind: str) -> None:
    assert classify_error(make())[0] == kind


CONFIG = {
    "max_batch_size": 32,
    "input": [
        {"name": "IMG", "data_type": "TYPE_FP32", "dims": ["3", "8"]},
        {"name": "IDS", "data_type": "TYPE_INT64", "dims": [-1]},
        {"name": "TXT", "data_type": "TYPE_STRING", "dims": [2]},
        {"name": "OPT", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
    ],
}


def test_synthesized_inputs_follow_the_config() -> None:
    inputs = synthesize_inputs(CONFIG, batch_size=4, seed=1)
    assert [(i.name, i.datatype, i.data.shape) for i in inputs] == [
        ("IMG", "FP32", (4, 3, 8)),
        ("IDS", "INT64", (4, 1)),
        ("TXT", "BYTES", (4, 2)),
    ]
    assert inputs[0].data.dtype == np.float32 and inputs[1].data.dtype == np.int64
    again = synthesize_inputs(CONFIG, batch_size=4, seed=1)
    np.testing.assert_array_equal(inputs[0].data, again[0].data)


@pytest.mark.parametrize(
    ("config", "batch_size", "message"),
    [
        ({**CONFIG, "max_batch_size": 0}, 2, "does not batch (max_batch_size 0)"),
        (CONFIG, 33, "must be <= the max_batch_size of model 'm' (32)"),
    ],
)
def test_synthesis_rejects_impossible_batches(config: dict, batch_size: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        synthesize_inputs(config, batch_size=batch_size, model="m")


def test_non_batching_model_gets_no_batch_dimension() -> None:
    inputs = synthesize_inputs({**CONFIG, "max_batch_size": 0}, batch_size=1)
    assert inputs[0].data.shape == (3, 8)


def _rec(k: int, phase: int, sched: float, lag_ms: float, outcome: str = "ok") -> RequestRecord:
    return RequestRecord(k, "ab"[phase], phase, sched, sched + lag_ms / 1000, 10.0 + k, outcome)


@pytest.mark.parametrize(
    ("lag_ms", "limits", "behind"),
    [
        (1.0, BehindLimits(), False),
        (8.0, BehindLimits(), True),
        (8.0, BehindLimits(max_lag_p99_ms=10.0), False),
    ],
)
def test_behind_flag_follows_the_lag_limit(lag_ms: float, limits: BehindLimits, behind: bool) -> None:
    schedule = Schedule((Phase("a", 10, 1), Phase("b", 10, 1)))
    records = [_rec(k, 0, k / 10, lag_ms) for k in range(10)]
    records += [_rec(10 + k, 1, 1 + k / 10, 0.5) for k in range(10)]
    phases, _ = summarize(schedule, records, limits=limits)
    assert phases[0].behind is behind
    assert phases[1].behind is False


def test_sending_too_few_is_behind() -> None:
    schedule = Schedule.constant(10, 1)
    # Ten scheduled, only eight went out (and the last one two seconds late).
    records = [_rec(k, 0, k / 10, 0.5) for k in range(7)]
    records.append(_rec(7, 0, 0.7, 2000.0))
    records += [RequestRecord(k, "a", 0, k / 10, None, None, "unsent") for k in (8, 9)]
    (phase,), _ = summarize(schedule, records, limits=BehindLimits(max_lag_p99_ms=float("inf")))
    assert phase.sent == 8 and phase.scheduled == 10
    assert phase.achieved_rps == pytest.approx(8 / 2.7)
    assert phase.behind
    assert "of the 10.0 rps scheduled" in (phase.behind_reason or "")
    assert phase.failures == {"unsent": 2}


def test_report_to_dict_and_jsonl() -> None:
    from autobatch.load.report import write_jsonl

    schedule = Schedule.constant(10, 1)
    records = tuple(_rec(k, 0, k / 10, 0.3) for k in range(10))
    phases, total = summarize(schedule, records)
    report = LoadReport(
        url="h:1", model="m", protocol="grpc", seed=0, batch_size=1, timeout_s=1.0,
        schedule=schedule, phases=phases, total=total, records=records, elapsed_s=1.0,
    )  # fmt: skip
    d = report.to_dict()
    assert "records" not in d and len(report.to_dict(records=True)["records"]) == 10
    assert d["total"]["p50_ms"] == pytest.approx(14.5)
    assert d["behind"] is False and d["warnings"] == []
    buf = io.StringIO()
    assert write_jsonl(records, buf) == 10
    assert json.loads(buf.getvalue().splitlines()[3])["index"] == 3
