"""The SDK: a client-side micro-batcher in front of Triton's own dynamic batcher.

* :class:`MicroBatcher` -- the generic asyncio batcher: ``await submit(item)``,
  flushed on size, on delay, or at once when nothing is in flight (adaptive);
* :class:`TritonBatchClient` -- ``await client.infer({name: array})`` against one
  Triton model over gRPC or HTTP, requests merged along the batch dimension;
* :class:`SyncTritonBatchClient` -- the same for threads;
* :class:`SessionBatcher` -- latest-only frames from many sessions (video streams)
  over a :class:`TritonBatchClient`: one request in flight, a newer frame
  overwrites a waiting one, the next request picked by a session policy;
* :class:`BatcherMetrics` -- optional Prometheus metrics on an injected registry.

Errors are :class:`~autobatch.errors.BatcherError` and its subclasses
(``QueueFullError``, ``DeadlineExceededError``, ``InvalidRequestError``) and,
for what Triton answers, :class:`~autobatch.errors.TritonError`.
"""

from autobatch.sdk.batcher import BACKPRESSURE_MODES, FLUSH_REASONS, BatcherStatistics, MicroBatcher
from autobatch.sdk.metrics import BatcherMetrics
from autobatch.sdk.sessions import SessionBatcher, SessionCounts, SessionStatistics
from autobatch.sdk.sync import SyncTritonBatchClient
from autobatch.sdk.triton import PROTOCOLS, TritonBatchClient

__all__ = [
    "BACKPRESSURE_MODES",
    "FLUSH_REASONS",
    "PROTOCOLS",
    "BatcherMetrics",
    "BatcherStatistics",
    "MicroBatcher",
    "SessionBatcher",
    "SessionCounts",
    "SessionStatistics",
    "SyncTritonBatchClient",
    "TritonBatchClient",
]
