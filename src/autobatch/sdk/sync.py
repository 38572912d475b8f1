"""The Triton micro-batching client for threaded code.

:class:`SyncTritonBatchClient` wraps :class:`~autobatch.sdk.triton.TritonBatchClient`:
one event loop in a background thread owns the client and its batcher, and
each blocking ``infer`` hands its call to that loop, so any number of threads
may call it at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import numpy as np

from autobatch.errors import BatcherError
from autobatch.sdk.batcher import BatcherStatistics
from autobatch.sdk.triton import TritonBatchClient

__all__ = ["SyncTritonBatchClient"]

_T = TypeVar("_T")


class SyncTritonBatchClient:
    """:class:`TritonBatchClient` for threaded code; safe to call from many threads at once.

    One event loop runs in a background thread and owns the batcher; ``infer``
    hands each call to it and blocks until the answer. The model's config is
    read in the constructor, so a wrong URL or model name fails here.

    >>> with SyncTritonBatchClient("127.0.0.1:8001", "dense_mlp") as client:  # doctest: +SKIP
    ...     out = client.infer({"INPUT": np.zeros((1, 1024), np.float32)})

    Takes the same arguments as :class:`TritonBatchClient` (the clock and sleep
    too, which then run on the background loop).
    """

    def __init__(self, url: str, model: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"autobatch-sdk-{model}", daemon=True
        )
        self._thread.start()
        self._closed = False
        try:
            self._client = self._call(self._make(url, model, kwargs))
        except BaseException:
            self._stop_loop()
            raise

    @staticmethod
    async def _make(url: str, model: str, kwargs: dict[str, Any]) -> TritonBatchClient:
        # Built on the loop so that its locks and connections belong to it.
        return await TritonBatchClient(url, model, **kwargs).start()

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            # KeyboardInterrupt in the calling thread: do not leave the call queued.
            future.cancel()
            raise

    @property
    def model(self) -> str:
        return self._client.model

    @property
    def max_batch_size(self) -> int:
        return self._client.max_batch_size

    def infer(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        priority: int | None = None,
        server_timeout_us: int | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, np.ndarray]:
        """As :meth:`TritonBatchClient.infer`, blocking the calling thread."""
        if self._closed:
            raise BatcherError(f"{self._client.model}: the client is closed")
        return self._call(self._client.infer(
            inputs, priority=priority, server_timeout_us=server_timeout_us, timeout_s=timeout_s
        ))

    def statistics(self) -> BatcherStatistics:
        async def snapshot() -> BatcherStatistics:
            return self._client.statistics()

        if self._closed:
            return self._client.statistics()
        return self._call(snapshot())

    def close(self, *, drain: bool = True) -> None:
        """Drain (or fail) what is queued, close the connection, stop the thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self._client.close(drain=drain))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> SyncTritonBatchClient:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(drain=exc_type is None)
