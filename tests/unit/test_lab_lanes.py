"""autobatch.lab.lanes: which waiting batchable requests an urgent one overtook (pure)."""

from __future__ import annotations

from autobatch.lab.lanes import _overtaken
from autobatch.load.report import RequestRecord


def rec(i: int, sent_s: float, done_s: float | None, outcome: str = "ok") -> RequestRecord:
    latency = None if done_s is None else (done_s - sent_s) * 1000.0
    return RequestRecord(i, "p", 0, sent_s, sent_s, latency, outcome)


def test_one_fifo_queue_overtakes_nothing_and_a_lane_overtakes_the_backlog() -> None:
    # A burst of 8 at t=0, answered in turn 0.1 s apart; an urgent request sent at 0.05.
    burst = tuple(rec(i, 0.0, 0.1 * (i + 1)) for i in range(8))
    fifo = (rec(0, 0.05, 0.85),)  # behind all 8: answered last
    assert _overtaken(fifo, burst) == 0.0
    ahead = (rec(0, 0.05, 0.25),)  # after the two in service, ahead of the other six
    assert _overtaken(ahead, burst) == 6 / 8


def test_only_requests_still_waiting_when_it_was_sent_count() -> None:
    burst = tuple(rec(i, 0.0, 0.1 * (i + 1)) for i in range(4))
    later = (rec(9, 1.0, 1.2), rec(10, 0.25, 0.35))  # pooled: 0 of 0, and 1 of the 2 waiting
    assert _overtaken(later, burst + (rec(4, 0.5, 0.6),)) == 1 / 2
    # failed or unanswered requests are no backlog and no urgent request
    assert _overtaken((rec(0, 0.05, 0.15),), (rec(1, 0.0, 0.5, "timeout"), rec(2, 0.0, None))) is None
    assert _overtaken((rec(0, 0.05, None, "unfinished"),), burst) is None
