"""One asyncio task that sleeps until the earliest wake-up asked for, then calls back.

The micro-batcher arms it for a group's max delay and for each request's
deadline. The clock and the sleep are injected, so a fake clock drives it in
tests; an earlier wake-up armed during a sleep cuts the sleep short.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any


class WakeupTimer:
    """Calls ``fire()`` at ``next_wakeup()`` (asked again after each firing and each
    :meth:`arm`), for as long as there is one (``math.inf``: none)."""

    def __init__(self, clock: Callable[[], float], sleep: Callable[[float], Awaitable[Any]],
                 next_wakeup: Callable[[], float], fire: Callable[[], None]) -> None:
        self._clock = clock
        self._sleep = sleep
        self._next_wakeup = next_wakeup
        self._fire = fire
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._at = math.inf

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the timer's task runs on (the batcher's)."""
        self._loop = loop
        self._changed = asyncio.Event()

    def arm(self, when: float) -> None:
        """Wake up at ``when`` at the latest; a later time than the one armed changes nothing."""
        if when >= self._at:
            return
        self._at = when
        if self._task is None:
            assert self._loop is not None
            self._task = self._loop.create_task(self._run())
        else:
            assert self._changed is not None
            self._changed.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        assert self._changed is not None
        changed = self._changed
        while True:
            changed.clear()
            when = self._next_wakeup()
            self._at = when
            if when == math.inf:
                await changed.wait()
                continue
            delay = when - self._clock()
            if delay > 0:
                sleeper = asyncio.ensure_future(self._sleep(delay))
                waker = asyncio.ensure_future(changed.wait())
                try:
                    await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    sleeper.cancel()
                    waker.cancel()
                if waker.done() and not waker.cancelled():
                    continue  # an earlier timer was armed: recompute
            self._fire()
