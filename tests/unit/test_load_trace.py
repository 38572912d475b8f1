"""`autobatch load --trace`: a trace's arrivals, rows and priorities go out as given, and
what was sent comes back as a trace (the pure side; the real Triton is in
tests/test_traces_triton.py)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import numpy as np
import pytest

from autobatch.errors import ConfigError
from autobatch.load import run_load, sent_trace, trace_schedule
from autobatch.load.runner import drive
from autobatch.traces import ArrivalTrace


class Sender:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def infer(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        await asyncio.sleep(0)


async def test_a_trace_goes_out_with_its_rows_and_priorities() -> None:
    trace = ArrivalTrace.of([0.0, 0.0, 0.02, 0.05], [2, 1, 4, 1], [1, 0, 2, 0], source="t")
    sender = Sender()
    records, stopped_at, _ = await drive(sender, trace_schedule(trace), trace=trace, drain_s=1.0)
    assert stopped_at is None
    assert sender.calls == [{"rows": 2, "priority": 1}, {"rows": 1, "priority": 0},
                            {"rows": 4, "priority": 2}, {"rows": 1, "priority": 0}]
    assert [(r.scheduled_s, r.rows, r.priority) for r in records] == [
        (0.0, 2, 1), (0.0, 1, 0), (0.02, 4, 2), (0.05, 1, 0)]
    back = sent_trace(records)
    assert back.rows.tolist() == [2, 1, 4, 1] and back.priority.tolist() == [1, 0, 2, 0]
    # The sent times are the scheduled ones plus the generator's lag, from the first send: in
    # the order sent, from 0. How late each went out is the machine's (0.044 s for 0.02 at a
    # load average of 8 on the 2 cores, 2026-12-02), so no tolerance of it is asserted here.
    assert back.t_s[0] == 0.0 and np.all(np.diff(back.t_s) >= 0.0)
    assert back.t_s[-1] > back.t_s[1]


async def test_a_one_row_trace_calls_infer_as_a_schedule_does() -> None:
    trace = ArrivalTrace.of([0.0, 0.01], source="t")
    sender = Sender()
    await drive(sender, trace_schedule(trace), trace=trace, drain_s=1.0)
    assert sender.calls == [{}, {}]


def test_the_report_of_a_trace_is_one_phase_at_its_mean_rate() -> None:
    plan = trace_schedule(ArrivalTrace.of([0.0, 0.5, 1.0, 2.0], source="t"))
    assert [(p.name, p.rate_rps, p.duration_s) for p in plan.phases] == [("trace", 2.0, 2.0)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 4}, "batch_size = 4: a trace gives each request's rows"),
        ({"record_trace": "sent.txt"}, r"record_trace = 'sent.txt': suffix '.txt'"),
        ({"record_trace": "/no/such/dir/sent.csv"}, r"folder '/no/such/dir' does not exist"),
        ({"record_trace": "{tmp}/adir.csv"}, r"record_trace = '{tmp}/adir.csv': is a directory"),
    ],
)
def test_bad_trace_arguments_fail_before_any_connection(kwargs, message, tmp_path) -> None:
    (tmp_path / "adir.csv").mkdir()  # written after the run: a directory is refused before it
    kwargs = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in kwargs.items()}
    # Port 9 (discard) on loopback: nothing listens, and nothing is tried before the check.
    with pytest.raises(ConfigError, match=message.format(tmp=re.escape(str(tmp_path)))):
        run_load("127.0.0.1:9", "m", ArrivalTrace.of([0.0], source="t"), **kwargs)
