"""poll_until and poll_until_async with an injected clock and sleep (no real waiting)."""

from __future__ import annotations

import asyncio

import pytest

from autobatch.errors import ServeError
from autobatch.lab.process import poll_until, poll_until_async


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
