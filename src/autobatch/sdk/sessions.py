"""Latest-only sessions over a :class:`~autobatch.sdk.TritonBatchClient`.

A video pipeline with K cameras wants each camera's *newest* frame inferred,
not every frame: a frame that is still waiting when the camera's next one
arrives is stale, and the new one takes its place.
:class:`SessionBatcher` keeps one slot per session and one request in flight;
when the request comes back, it picks the next frames by the session policy
(:mod:`autobatch.sessions`: ``oldest-first``, ``batch-waiting``,
``round-robin``) and sends them as one Triton request, their rows
concatenated along the batch dimension.

Why one request in flight: a second one would be chosen a whole batch earlier,
from staler frames, and would only queue behind the first on a device that
is already busy. The simulator (``autobatch simulate --sessions``) models
exactly this loop, and ``autobatch load --sessions`` drives it against a real
server.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autobatch.errors import AutobatchError, BatcherError, ConfigError, InvalidRequestError
from autobatch.sdk.triton import TritonBatchClient
from autobatch.sessions import check_policy, choose

__all__ = ["SessionBatcher", "SessionCounts", "SessionStatistics"]


@dataclass(frozen=True)
class SessionCounts:
    """One session's frames so far."""

    frames: int = 0
    """Frames submitted."""
    delivered: int = 0
    """Frames answered with their result."""
    overwritten: int = 0
    """Frames replaced by a newer one of the same session before they were sent."""
    failed: int = 0
    """Frames whose request failed."""


@dataclass(frozen=True)
class SessionStatistics:
    """A snapshot of one :class:`SessionBatcher` (:meth:`SessionBatcher.statistics`)."""

    policy: str
    waiting: int
    """Sessions with a frame waiting now."""
    in_flight: int
    """Frames in the request out now (0 when none is)."""
    batches: int
    """Requests sent."""
    frames_sent: int
    """Frames over all requests sent."""
    request_s: float
    """Time requests were out in total, sent to answered (or failed), on the clock."""
    per_session: Mapping[Hashable, SessionCounts] = field(default_factory=dict)
    """By session, in the order the sessions first submitted."""

    @property
    def frames(self) -> int:
        return sum(c.frames for c in self.per_session.values())

    @property
    def overwritten(self) -> int:
        return sum(c.overwritten for c in self.per_session.values())

    @property
    def mean_batch(self) -> float:
        return self.frames_sent / self.batches if self.batches else 0.0

    @property
    def mean_request_ms(self) -> float | None:
        """Mean time a request was out: the cycle of the one-in-flight loop."""
        return self.request_s / self.batches * 1000.0 if self.batches else None


class _Frame:
    __slots__ = ("arrived", "future", "inputs", "key", "rows", "session")

    def __init__(self, session: Hashable, inputs: dict[str, np.ndarray], rows: int, key: Any,
                 arrived: float, future: asyncio.Future[Any]) -> None:
        self.session = session
        self.inputs = inputs
        self.rows = rows
        self.key = key
        self.arrived = arrived
        self.future = future


class SessionBatcher:
    """Keep only each session's latest frame; send the next request when the last is back.

    >>> async with TritonBatchClient("127.0.0.1:8001", "detector") as client:  # doctest: +SKIP
    ...     sessions = SessionBatcher(client, policy="round-robin")
    ...     out = await sessions.submit("camera-7", {"INPUT": frame})
    ...     if out is None:
    ...         pass  # a newer frame of camera-7 replaced this one before it was sent

    Args:
        client: the :class:`TritonBatchClient` to send through (started on first
            use if it is not yet). The batcher does not close it.
        policy: ``oldest-first`` (one frame, the oldest waiting), ``batch-waiting``
            (every waiting session's frame as one request, oldest first, up to
            ``max_batch_size`` rows) or ``round-robin`` (one frame, the sessions
            in turn).
        max_batch_size: rows per request under ``batch-waiting``; default the
            client's ``max_batch_size``, and never above it.
        clock: seconds, monotonic; orders the frames by arrival.
    """

    def __init__(
        self,
        client: TritonBatchClient,
        *,
        policy: str = "batch-waiting",
        max_batch_size: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(client, TritonBatchClient):
            raise ConfigError(f"client = {client!r}: must be a TritonBatchClient")
        self.policy = check_policy(policy)
        if max_batch_size is not None and (
            isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int)
            or max_batch_size < 1
        ):
            raise ConfigError(
                f"max_batch_size = {max_batch_size!r}: must be an integer >= 1, or None for "
                "the client's own"
            )
        self.client = client
        self._requested_max = max_batch_size
        self._clock = clock
        self._slots: dict[Hashable, _Frame] = {}
        self._number: dict[Hashable, int] = {}
        self._counts: dict[Hashable, list[int]] = {}  # frames, delivered, overwritten, failed
        self._last = -1
        self._sending: list[_Frame] = []
        self._task: asyncio.Task[None] | None = None
        self._batches = 0
        self._frames_sent = 0
        self._request_s = 0.0
        self._closed = False
        self._started = False

    @property
    def max_batch_size(self) -> int:
        """Rows per request (known once the client has read the model's config)."""
        return self._requested_max or self.client.max_batch_size

    # -- public ---------------------------------------------------------------------------
    async def submit(
        self, session: Hashable, inputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray] | None:
        """Offer ``session``'s newest frame; returns its outputs, or None if a newer
        frame of the same session replaced it before it was sent.

        Raises :class:`~autobatch.errors.InvalidRequestError` for inputs that do not
        fit the model (checked here, before the frame takes its slot),
        :class:`~autobatch.errors.TritonError` when the request carrying it fails.
        """
        if self._closed:
            raise BatcherError(f"{self.client.model}: the session batcher is closed")
        if not self._started:
            await self.client.start()
            self._check_max()
            self._started = True
        # The client's own checks (names, dtypes, shapes, rows): a bad frame fails alone.
        item = self.client._prepare(inputs, self.client.default_priority,
                                    self.client.default_server_timeout_us)
        if item.rows > self.max_batch_size:
            raise InvalidRequestError(
                f"model {self.client.model!r}: a frame of {item.rows} rows is larger than the "
                f"session batcher's max_batch_size ({self.max_batch_size})"
            )
        loop = asyncio.get_running_loop()
        frame = _Frame(session, item.inputs, item.rows, item.key, self._clock(), loop.create_future())
        counts = self._counts.get(session)
        if counts is None:
            self._number[session] = len(self._number)
            counts = self._counts[session] = [0, 0, 0, 0]
        counts[0] += 1
        old = self._slots.pop(session, None)
        if old is not None:
            counts[2] += 1
            if not old.future.done():
                old.future.set_result(None)
        self._slots[session] = frame
        self._pump()
        try:
            return await frame.future
        except asyncio.CancelledError:
            # The caller gave up on this frame: it leaves its slot (a sent one is dropped).
            if self._slots.get(session) is frame:
                del self._slots[session]
            raise

    def statistics(self) -> SessionStatistics:
        return SessionStatistics(
            policy=self.policy,
            waiting=len(self._slots),
            in_flight=len(self._sending),
            batches=self._batches,
            frames_sent=self._frames_sent,
            request_s=self._request_s,
            per_session={s: SessionCounts(*c) for s, c in self._counts.items()},
        )

    async def close(self, *, drain: bool = True) -> None:
        """Take no more frames; send what waits (``drain``) or fail it, then wait for
        the request in flight. Safe to call twice; the client stays open."""
        self._closed = True
        if not drain:
            err = BatcherError(f"{self.client.model}: the session batcher was closed before this "
                               "frame was sent")
            for frame in self._slots.values():
                if not frame.future.done():
                    frame.future.set_exception(err)
                    self._counts[frame.session][3] += 1
            self._slots.clear()
        while self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    async def __aenter__(self) -> SessionBatcher:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.close(drain=exc_type is None)

    # -- the loop ---------------------------------------------------------------------------
    def _check_max(self) -> None:
        model_max = self.client.max_batch_size
        if self._requested_max is not None and self._requested_max > model_max:
            raise ConfigError(
                f"max_batch_size = {self._requested_max}: larger than the client's "
                f"max_batch_size ({model_max})"
            )

    def _pump(self) -> None:
        """Send the next request if none is out and a frame waits."""
        if self._task is not None or not self._slots:
            return
        frames = self._slots
        if self.policy == "batch-waiting":
            # Only frames whose inputs can share one request (same shapes and dtypes).
            first = min(frames.values(), key=lambda f: (f.arrived, self._number[f.session]))
            candidates = [f for f in frames.values() if f.key == first.key]
        else:
            candidates = list(frames.values())
        by_number = {self._number[f.session]: f for f in candidates}
        waiting = [(f.arrived, n, f.rows) for n, f in by_number.items()]
        chosen = [by_number[n] for n in choose(self.policy, waiting, max_rows=self.max_batch_size,
                                               last=self._last)]
        for f in chosen:
            del frames[f.session]
        self._last = self._number[chosen[-1].session]
        self._sending = chosen
        self._batches += 1
        self._frames_sent += len(chosen)
        self._task = asyncio.get_running_loop().create_task(self._send(chosen))

    async def _send(self, chosen: list[_Frame]) -> None:
        try:
            if len(chosen) == 1:
                arrays = chosen[0].inputs
            else:
                arrays = {name: np.concatenate([f.inputs[name] for f in chosen], axis=0)
                          for name in chosen[0].inputs}
            sent = self._clock()
            try:
                try:
                    outputs = await self.client.infer(arrays)
                finally:
                    self._request_s += self._clock() - sent
            except (AutobatchError, asyncio.CancelledError) as exc:
                error: BaseException = exc
            except Exception as exc:  # translated once, like the client's own batches
                error = BatcherError(f"{self.client.model}: a session request failed: {exc}")
                error.__cause__ = exc
            else:
                start = 0
                for f in chosen:
                    stop = start + f.rows
                    if not f.future.done():
                        f.future.set_result({k: v[start:stop] for k, v in outputs.items()})
                    self._counts[f.session][1] += 1
                    start = stop
                return
            for f in chosen:
                if not f.future.done():
                    if isinstance(error, asyncio.CancelledError):
                        f.future.cancel()
                    else:
                        f.future.set_exception(error)
                self._counts[f.session][3] += 1
        finally:
            self._sending = []
            self._task = None
            self._pump()
