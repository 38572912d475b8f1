"""What a :class:`~autobatch.sdk.batcher.MicroBatcher` reports about itself: a frozen snapshot."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BatcherStatistics"]


@dataclass(frozen=True)
class BatcherStatistics:
    """A snapshot of one :class:`MicroBatcher`, taken by :meth:`MicroBatcher.statistics`.

    "Size" is the sum of ``size_of(item)``: the number of items unless the
    batcher was given ``size_of`` (the Triton client counts rows along the
    batch dimension). Counters are cumulative since the batcher was built.
    """

    queued_requests: int
    """Requests in the queue, not yet sent."""
    queued_size: int
    """Their total size."""
    waiting_for_space: int
    """Callers blocked in ``submit`` by a full queue (backpressure ``"wait"``)."""
    in_flight_batches: int
    """Batches sent whose batch function has not returned yet (<= ``max_in_flight``)."""
    in_flight_requests: int
    """Requests in those batches."""
    submitted: int
    """Requests accepted by ``submit`` (not counting those rejected or refused as invalid)."""
    succeeded: int
    """Requests answered with their result."""
    failed: int
    """Requests failed because their batch failed."""
    expired: int
    """Requests failed with :class:`~autobatch.errors.DeadlineExceededError`."""
    cancelled: int
    """Requests whose caller cancelled them; those cancelled while queued were never sent."""
    rejected: int
    """``submit`` calls turned away with :class:`~autobatch.errors.QueueFullError`."""
    batches: int
    """Batches sent."""
    batches_failed: int
    """Batches whose batch function raised or returned the wrong number of results."""
    requests_sent: int
    """Requests sent, over all batches."""
    size_sent: int
    """Their total size."""
    flushed_full: int
    """Batches sent because they were full."""
    flushed_idle: int
    """Batches sent at once because nothing was in flight (adaptive mode)."""
    flushed_delay: int
    """Batches sent because their oldest request had waited ``max_delay_s``."""
    flushed_drain: int
    """Batches sent while closing."""
    closed: bool
    """``close()`` has been called: ``submit`` refuses new requests."""

    @property
    def mean_batch_size(self) -> float:
        """Mean size of the batches sent (0.0 before the first)."""
        return self.size_sent / self.batches if self.batches else 0.0

    @property
    def mean_batch_requests(self) -> float:
        """Mean number of requests in the batches sent (0.0 before the first)."""
        return self.requests_sent / self.batches if self.batches else 0.0
