"""The one exception tree of autobatch.

Library errors (httpx, grpc, yaml, OSError, ...) are translated into these at
the boundary where they happen, with ``raise ... from exc``, so callers only
ever catch ``AutobatchError`` subclasses::

    AutobatchError
     +-- ConfigError          bad input: a file, a field, a flag (CLI exit code 2)
     |    +-- ProfileError    a batching profile that fails validation
     +-- ServeError           the embedded Triton could not start or stop
     +-- TritonError          the Triton server answered with an error or not at all
     +-- SignalError          metrics could not be turned into a trustworthy window
     |    +-- ScrapeError     an endpoint could not be read or parsed (``reason`` says how)
     +-- ActuationError       a profile could not be applied (``reason`` says how)
     |    +-- ReloadFailure   a Triton reload step (autobatch.actuators.triton)
     |    +-- GatewayFailure  a gateway weight step (autobatch.actuators.gateway)
     +-- BatcherError         the SDK micro-batcher
     |    +-- QueueFullError  the batcher's queue is full and backpressure is "raise"
     |    +-- DeadlineExceededError  a request's timeout passed (also a TimeoutError)
     |    +-- InvalidRequestError    refused before batching: malformed (also a ValueError)
     +-- LoadError            the load generator could not run
     +-- DeviceError          the emulated device could not be reached, or failed a job

Every message is a sentence that says what is wrong and, where it can, what to
do about it. ``ConfigError`` messages name the file, the field path, the value
and what is allowed.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActuationError",
    "AutobatchError",
    "BatcherError",
    "ConfigError",
    "DeadlineExceededError",
    "DeviceError",
    "InvalidRequestError",
    "LoadError",
    "ProfileError",
    "QueueFullError",
    "ScrapeError",
    "ServeError",
    "SignalError",
    "TritonError",
    "short_repr",
]


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: the VALUE of a one-line ``FIELD = VALUE``
    message, however large the input that carried it."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class AutobatchError(Exception):
    """Base of every error autobatch raises on purpose."""


class ConfigError(AutobatchError):
    """Bad input: a config file, a profile, a curve, a schedule or a flag.

    Build with :meth:`field` to get the house format
    ``FILE: FIELD: VALUE: what is allowed``.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        field: str | None = None,
        value: Any = None,
    ) -> None:
        super().__init__(message)
        self.source = source
        self.field = field
        self.value = value

    @classmethod
    def field_error(cls, source: str, field: str, value: Any, allowed: str) -> ConfigError:
        """``<source>: <field> = <value!r>: <allowed>`` as one line."""
        return cls(
            f"{source}: {field} = {value!r}: {allowed}",
            source=source,
            field=field,
            value=value,
        )


class ProfileError(ConfigError):
    """A batching profile that fails validation (locally or against the live model)."""


class ServeError(AutobatchError):
    """The embedded Triton server could not be started, reached or stopped."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        """The setting at fault, when one is (``http_port``): a CLI maps it to its flag."""


class TritonError(AutobatchError):
    """A Triton endpoint answered with an error, or could not be reached."""


class SignalError(AutobatchError):
    """Metrics could not be read or turned into a trustworthy window."""


class ScrapeError(SignalError):
    """A metrics endpoint could not be read or parsed.

    ``reason`` is the machine reason a stale window records for it (a value of
    ``autobatch.signals.StaleReason``: ``unreachable``, ``malformed``,
    ``missing_series``, ``too_large``, ``forbidden``); ``url`` is the endpoint, when there is one.
    ``timed_out`` is True when the endpoint did not answer in time (a hung peer,
    as against one that refused): the controller's liveness counts those.
    """

    def __init__(
        self, message: str, *, reason: str = "unreachable", url: str | None = None, timed_out: bool = False
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.url = url
        self.timed_out = timed_out


class ActuationError(AutobatchError):
    """A profile could not be applied to the server or the gateway.

    ``reason`` is the machine reason an actuation result records for it (an
    entry of ``autobatch.actuators.base.REASONS``). Every actuator's own
    failures are subclasses of this one.
    """

    reason = "unreachable"


class BatcherError(AutobatchError):
    """The SDK micro-batcher failed a request."""


class QueueFullError(BatcherError):
    """The micro-batcher's queue is full and its backpressure mode is ``raise``."""


class DeadlineExceededError(BatcherError, TimeoutError):
    """A micro-batcher request got no result within its ``timeout_s``.

    Also a :class:`TimeoutError`, so ``except TimeoutError`` catches it as well.
    """


class InvalidRequestError(BatcherError, ValueError):
    """A request refused before batching (missing input, wrong dtype or shape, too
    large a batch), so one malformed caller cannot fail a whole batch.

    Also a :class:`ValueError`.
    """


class LoadError(AutobatchError):
    """The load generator could not run."""


class DeviceError(AutobatchError):
    """The emulated device (``autobatch device``) could not be reached, closed the
    connection, did not answer in time, or refused a job.

    ``timed_out`` is True when it did not answer within the client's timeout (a stopped or
    hung device, as against one that refused or closed the connection).
    """

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
