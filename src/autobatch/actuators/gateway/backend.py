"""What the gateway actuator needs from a gateway: :class:`WeightsBackend`, and its failure.

Backends (:mod:`.haproxy`, :mod:`.kubernetes`) translate their own errors into
:class:`GatewayFailure` at their boundary, so the actuator sees only that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from autobatch.errors import ActuationError

__all__ = ["GatewayFailure", "WeightsBackend"]


class GatewayFailure(ActuationError):
    """A gateway step that failed; ``reason`` is a :data:`~autobatch.actuators.base.REASONS` entry."""

    def __init__(self, message: str, *, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason



class WeightsBackend(Protocol):
    """Reads and writes the weights of a gateway's servers (HAProxy, an HTTPRoute, ...).

    Targets are the gateway's names for the variants (HAProxy server names,
    HTTPRoute backendRef names). Failures raise :class:`GatewayFailure`.
    """

    kind: str
    """'haproxy', 'httproute', 'virtualservice': a log and message label."""
    changes_traffic: bool
    """False when writes only print what would change (nothing to guard)."""

    async def read(self) -> dict[str, float]:
        """Effective weight of every target: 0 for one the gateway does not send to."""
        ...

    async def write(self, weights: Mapping[str, int]) -> None:
        """Set every target's weight, given as percent of the traffic (summing to <= 100)."""
        ...

    async def failure_count(self, target: str) -> float | None:
        """The gateway's own cumulative count of failed requests to ``target``, or None
        when it keeps none (then the guard relies on the variant's signals alone)."""
        ...

    async def aclose(self) -> None: ...

