"""Polling a source on a fixed interval: the async iterator the controller and ``watch`` share.

A failed read does not end the stream: it becomes a stale window that says why
(``unreachable``, ``malformed``, ``missing_series``), so a Triton restart shows
up as a few stale windows and then data again. Only the very first read may
raise, so a wrong URL or model name fails at once instead of printing stale
rows forever.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from autobatch.errors import ConfigError, ScrapeError, SignalError
from autobatch.signals.window import StaleReason, Window

__all__ = ["SignalSource", "check_polling", "watch", "windows"]


class SignalSource(Protocol):
    """What :func:`windows` polls: a :class:`~autobatch.signals.TritonSource`, a
    :class:`~autobatch.signals.PrometheusSource` or a
    :class:`~autobatch.signals.variants.VariantsSource` (built by :mod:`autobatch.signals.factory`)."""

    model: str
    clock: Callable[[], float]

    async def poll(self) -> Window | None: ...

    async def aclose(self) -> None: ...


def _error_window(source: SignalSource, exc: SignalError, since_s: float) -> Window:
    now = source.clock()
    reason = getattr(exc, "reason", StaleReason.UNREACHABLE.value)
    return Window(
        model=source.model,
        start_s=min(since_s, now),
        end_s=now,
        stale=True,
        stale_reason=reason,
        stale_detail=str(exc),
        source=type(source).__name__.removesuffix("Source").lower(),
    )


def check_polling(interval_s: float, count: int | None = None) -> None:
    """Refuse an interval that is not a positive number of seconds, or a count < 1."""
    if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s > 0):
        raise ConfigError(f"interval_s = {interval_s!r}: must be a number of seconds > 0",
                          field="interval", value=interval_s)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ConfigError(f"count = {count!r}: must be an integer >= 1", field="count", value=count)


async def windows(
    source: SignalSource,
    interval_s: float,
    *,
    count: int | None = None,
    strict_first: bool = True,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncIterator[Window]:
    """Poll ``source`` every ``interval_s`` and yield each window (``count`` of them, or forever).

    Polls are paced on ``monotonic`` from the first one, so a slow scrape does
    not push every later window back. A :class:`~autobatch.errors.SignalError`
    after the first successful poll is yielded as a stale window; with
    ``strict_first`` one before it is raised.
    """
    check_polling(interval_s, count)
    start = monotonic()
    tick = 0
    produced = 0
    ever_ok = False
    last_end_s = source.clock()
    while count is None or produced < count:
        try:
            window = await source.poll()
        except ScrapeError as exc:
            if strict_first and not ever_ok:
                raise
            window = _error_window(source, exc, last_end_s)
        else:
            ever_ok = True
        if window is not None:
            last_end_s = window.end_s
            produced += 1
            yield window
            if count is not None and produced >= count:
                return
        tick += 1
        # Skip ticks already missed rather than firing a burst of polls.
        now = monotonic()
        tick = max(tick, math.ceil((now - start) / interval_s))
        await sleep(max(0.0, start + tick * interval_s - now))


def watch(
    source: SignalSource,
    interval_s: float,
    on_window: Callable[[Window], object],
    *,
    count: int | None = None,
) -> int:
    """Blocking front-end of :func:`windows` for the CLI: call ``on_window`` per window.

    Returns the number of windows; closes the source at the end.
    """

    async def run() -> int:
        n = 0
        try:
            async for window in windows(source, interval_s, count=count):
                on_window(window)
                n += 1
        finally:
            await source.aclose()
        return n

    return asyncio.run(run())
