"""The micro-batcher's queue: per group key a FIFO of requests, and the callers waiting for room.

Bookkeeping only, no event loop of its own: :class:`~autobatch.sdk.batcher.MicroBatcher`
decides when a group goes out; this keeps counts and sizes right as requests
come, leave (cancelled, expired) and are taken into a batch.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autobatch.sdk.metrics import BatcherMetrics

# A request's life: waiting for room in the queue, queued, sent in a batch, done.
WAITING, QUEUED, SENT, DONE = range(4)


@dataclass(slots=True, eq=False)  # eq=False: a request is itself, whatever it holds
class Request:
    item: Any
    size: int
    key: Hashable
    seq: int
    """Its place in the order of submission."""
    future: asyncio.Future[Any]
    timeout_s: float | None
    deadline: float
    enqueued_at: float = 0.0
    state: int = WAITING
    batch: Batch | None = None


@dataclass(slots=True, eq=False)
class Batch:
    """A batch in flight: its requests and the task running it."""

    requests: list[Request]
    task: asyncio.Task[Any]


@dataclass(slots=True, eq=False)
class Group:
    """The queue of one group key: FIFO, with its total size kept up to date."""

    queue: deque[Request] = field(default_factory=deque)
    size: int = 0


class RequestQueue:
    """The queued requests by group key, their count and total size, and the waiters."""

    __slots__ = ("count", "groups", "max_size", "metrics", "size", "waiters")

    def __init__(self, max_size: int, metrics: BatcherMetrics | None) -> None:
        self.max_size = max_size
        self.metrics = metrics
        self.groups: dict[Hashable, Group] = {}
        self.count = 0
        """Requests queued (not the waiters)."""
        self.size = 0
        """Their total size."""
        self.waiters: deque[Request] = deque()
        """Callers waiting for room (backpressure ``"wait"``), first come first in."""

    def has_room(self) -> bool:
        return self.count < self.max_size

    def add(self, req: Request) -> bool:
        """Queue ``req`` at the back of its group; True when it is the group's first."""
        group = self.groups.get(req.key)
        if group is None:
            group = self.groups[req.key] = Group()
        group.queue.append(req)
        group.size += req.size
        self.count += 1
        self.size += req.size
        req.state = QUEUED
        if self.metrics:
            self.metrics.set_queued(self.count)
        return len(group.queue) == 1

    def remove(self, req: Request) -> None:
        """Take a request out of the waiters or the queue (not out of a sent batch)."""
        if req.state == WAITING:
            self.waiters.remove(req)
        elif req.state == QUEUED:
            group = self.groups[req.key]
            group.queue.remove(req)
            self._unqueue(group, req)
        req.state = DONE

    def take(self, key: Hashable, max_batch_size: int) -> tuple[list[Request], int, int]:
        """From the head of ``key``'s group, the requests that fit ``max_batch_size``:
        ``(requests, their size, how many were found cancelled on the way)``."""
        group = self.groups[key]
        batch: list[Request] = []
        size = cancelled = 0
        while group.queue and size + group.queue[0].size <= max_batch_size:
            req = group.queue.popleft()
            self._unqueue(group, req)
            if req.future.done():
                # Cancelled a moment ago; its done-callback has not run yet.
                req.state = DONE
                cancelled += 1
                continue
            batch.append(req)
            size += req.size
        return batch, size, cancelled

    def oldest_enqueued_at(self) -> float:
        """When the oldest queued request (of any group) was queued; there must be one."""
        return min(g.queue[0].enqueued_at for g in self.groups.values())

    def everyone(self) -> list[Request]:
        """The waiters, then every queued request."""
        return [*self.waiters, *(r for g in self.groups.values() for r in g.queue)]

    def _unqueue(self, group: Group, req: Request) -> None:
        group.size -= req.size
        self.count -= 1
        self.size -= req.size
        if not group.queue:
            del self.groups[req.key]
        if self.metrics:
            self.metrics.set_queued(self.count)
