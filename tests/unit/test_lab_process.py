"""poll_until and poll_until_async with an injected clock and sleep (no real waiting); how a
ManagedProcess reports a child that ended on its own (real short-lived children)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from autobatch.errors import ServeError
from autobatch.lab.process import ManagedProcess, describe_exit, poll_until, poll_until_async


class FakeTime:
    """A clock that only moves when slept on; records the sleeps."""

    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s

    async def asleep(self, s: float) -> None:
        self.sleep(s)
        await asyncio.sleep(0)  # let the loop's other tasks run, as a real sleep would


async def test_async_returns_the_first_truthy_value():
    fake = FakeTime()
    values = iter([0, None, "", {"ready": True}])
    got = await poll_until_async(lambda: next(values), timeout_s=10, what="x", interval_s=0.5,
                                 clock=fake.clock, sleep=fake.asleep)
    assert got == {"ready": True}
    assert fake.slept == [0.5, 0.5, 0.5]


async def test_async_lets_the_awaited_task_run():
    # The condition turns true only because another task ran while poll_until_async slept.
    done: list[int] = []

    async def worker() -> None:
        done.append(1)

    fake = FakeTime()
    task = asyncio.ensure_future(worker())
    assert await poll_until_async(lambda: len(done), timeout_s=10, what="the worker",
                                  clock=fake.clock, sleep=fake.asleep) == 1
    await task


async def test_async_timeout_names_what_was_awaited():
    fake = FakeTime()
    with pytest.raises(ServeError, match=r"timed out after 2 s waiting for the first batch"):
        await poll_until_async(lambda: False, timeout_s=2, what="the first batch", interval_s=0.5,
                               clock=fake.clock, sleep=fake.asleep)
    assert fake.t > 102.0  # it gave up past the deadline, not before


async def test_async_check_fails_at_once():
    fake = FakeTime()

    def dead() -> None:
        raise ServeError("triton exited with code 1")

    with pytest.raises(ServeError, match="exited with code 1"):
        await poll_until_async(lambda: False, timeout_s=60, what="x", check=dead,
                               clock=fake.clock, sleep=fake.asleep)
    assert fake.slept == []


def test_sync_and_async_time_out_alike():
    fake = FakeTime()
    with pytest.raises(ServeError) as sync_err:
        poll_until(lambda: False, timeout_s=1, what="the server", interval_s=0.25,
                   clock=fake.clock, sleep=fake.sleep)
    sync_slept = list(fake.slept)
    fake = FakeTime()
    with pytest.raises(ServeError) as async_err:
        asyncio.run(poll_until_async(lambda: False, timeout_s=1, what="the server", interval_s=0.25,
                                     clock=fake.clock, sleep=fake.asleep))
    assert str(sync_err.value) == str(async_err.value)
    assert fake.slept == sync_slept


@pytest.mark.parametrize(
    ("returncode", "words"),
    [(0, "exited with code 0"), (1, "exited with code 1"),
     (-11, "was killed by signal 11 (SIGSEGV)"), (-9, "was killed by signal 9 (SIGKILL)"),
     (-200, "was killed by signal 200")],
)
def test_describe_exit_names_the_code_or_the_signal(returncode, words):
    assert describe_exit(returncode) == words


def _dead(tmp_path, script: str) -> ManagedProcess:
    """A real child that prints a few lines and ends as ``script`` says; waited for."""
    proc = ManagedProcess("child", tmp_path / "child.log")
    proc.start([sys.executable, "-c", script])
    poll_until(lambda: not proc.running(), timeout_s=30, what="the child to end")
    return proc


def test_check_alive_names_the_signal_and_the_last_log_lines(tmp_path):
    # SIGTERM, not SIGSEGV: the same path, and no core file wherever core dumps are on.
    proc = _dead(tmp_path, "import os, signal\n"
                           "for i in range(20): print('line', i, flush=True)\n"
                           "os.kill(os.getpid(), signal.SIGTERM)")
    try:
        assert proc.exit_status() == "was killed by signal 15 (SIGTERM)"
        with pytest.raises(ServeError) as info:
            proc.check_alive("during the test", lines=3)
        assert str(info.value) == (f"child (pid {proc.pid}) was killed by signal 15 (SIGTERM) "
                                   "during the test; last log lines: line 17 | line 18 | line 19")
    finally:
        proc.stop()
    # stopped on purpose: nothing to report any more
    assert proc.exit_status() is None
    proc.check_alive("after stop")


def test_check_alive_passes_while_running_and_names_the_exit_code(tmp_path):
    proc = ManagedProcess("child", tmp_path / "child.log")
    proc.start([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.exit_status() is None
        proc.check_alive("while running")
    finally:
        proc.stop()
    proc = _dead(tmp_path, "raise SystemExit(3)")
    try:
        with pytest.raises(ServeError, match=r"^child \(pid \d+\) exited with code 3 at start-up; "
                                             r"last log lines: \(empty log\)$"):
            proc.check_alive("at start-up")
    finally:
        proc.stop()
