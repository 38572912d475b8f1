"""A micro-batching Triton client: many small ``infer`` calls, few large Triton requests.

:class:`TritonBatchClient` puts a :class:`~autobatch.sdk.MicroBatcher` in front
of ``tritonclient.grpc.aio`` (or ``tritonclient.http.aio``). Each call's inputs
are checked against the model's config before they are queued, so a malformed
request fails alone and never poisons a batch. Compatible requests (same input
names, dtypes and non-batch shapes, same priority and server timeout) are
concatenated along the batch dimension into one Triton request of at most the
model's ``max_batch_size`` rows, and the outputs are split back by row.

:class:`~autobatch.sdk.sync.SyncTritonBatchClient` (``sdk/sync.py``) is the same for
threaded code: one event loop in a background thread, safe to call from any number
of threads at once.

tritonclient's, grpc's and aiohttp's exceptions are translated into
:class:`~autobatch.errors.TritonError` here, with the original as ``__cause__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import numpy as np

from autobatch.errors import (
    BatcherError,
    ConfigError,
    InvalidRequestError,
    TritonError,
)
from autobatch.sdk.batcher import BatcherStatistics, MicroBatcher

__all__ = ["PROTOCOLS", "TritonBatchClient"]

PROTOCOLS = ("grpc", "http")

# Start-up calls (config read) must not hang on a server that accepts
# connections and never answers.
_SETUP_TIMEOUT_S = 10.0


class _InputSpec:
    __slots__ = ("datatype", "dims", "dtype", "fixed", "name", "optional")

    def __init__(self, name: str, datatype: str, dtype: np.dtype[Any], dims: tuple[int, ...],
                 optional: bool) -> None:
        self.name = name
        self.datatype = datatype
        self.dtype = dtype
        self.dims = dims
        self.optional = optional
        # The non-batch shape when no dimension is variable (-1): one tuple compare per call.
        self.fixed = dims if all(d >= 0 for d in dims) else None

    def describe(self) -> str:
        shape = ", ".join("-1" if d < 0 else str(d) for d in self.dims)
        return f"{self.datatype} [n, {shape}]" if shape else f"{self.datatype} [n]"


class _Item:
    """One validated ``infer`` call waiting for its batch."""

    __slots__ = ("inputs", "key", "priority", "rows", "server_timeout_us")

    def __init__(self, inputs: dict[str, np.ndarray], rows: int, priority: int,
                 server_timeout_us: int | None, varying: tuple[Any, ...]) -> None:
        self.inputs = inputs
        self.rows = rows
        self.priority = priority
        self.server_timeout_us = server_timeout_us
        # Requests merge when everything that can differ between valid ones matches:
        # optional inputs left out, variable dimensions, BYTES dtypes, and (one
        # Triton request has one of each) priority and timeout.
        self.key = (varying, priority, server_timeout_us)


def _strip_scheme(url: str) -> str:
    """``host:port`` from ``url``; ``http://`` and ``grpc://`` are dropped, any other scheme
    refused: the client speaks no TLS, so ``https://`` would reach a TLS port in clear."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"url = {url!r}: must be host:port of Triton's gRPC or HTTP endpoint")
    scheme, sep, rest = url.partition("://")
    if sep:
        if scheme.lower() not in ("grpc", "http"):
            raise ConfigError(
                f"url = {url!r}: scheme {scheme}:// is not supported: give host:port, http:// "
                "or grpc:// (the client speaks no TLS)"
            )
        url = rest
    return url.rstrip("/")


def _np_dtype(datatype: str) -> np.dtype[Any] | None:
    from tritonclient.utils import triton_to_np_dtype

    dt = triton_to_np_dtype(datatype)
    return None if dt is None else np.dtype(dt)


class TritonBatchClient:
    """Micro-batch ``infer`` calls to one Triton model.

    >>> async with TritonBatchClient("127.0.0.1:8001", "dense_mlp") as client:  # doctest: +SKIP
    ...     out = await client.infer({"INPUT": np.zeros((1, 1024), np.float32)})
    ...     out["OUTPUT"].shape
    (1, 1000)

    The model's config is read on :meth:`start` (or ``async with``, or the first
    ``infer``). Batching arguments are those of
    :class:`~autobatch.sdk.MicroBatcher`; ``max_batch_size`` defaults to the
    model's own and may not exceed it.

    Args:
        url: ``host:port`` of Triton's gRPC (or HTTP) endpoint; ``http://`` or ``grpc://`` is
            dropped, another scheme (``https://``: no TLS here) refused.
        model: the model's name; ``model_version`` "" is the server's choice.
        protocol: ``"grpc"`` (default) or ``"http"``.
        priority: Triton request priority for calls that do not give one (0: the
            model's default level).
        server_timeout_us: Triton's per-request timeout (microseconds) for calls
            that do not give one; None leaves it to the model's queue policy.
        client_timeout_s: how long one batch may take on the wire before it
            fails with :class:`~autobatch.errors.TritonError`.
        registry: a ``prometheus_client.CollectorRegistry`` to export the
            client-side metrics to (:mod:`autobatch.sdk.metrics`); None: no metrics.
        clock, sleep: injected time, as in :class:`~autobatch.sdk.MicroBatcher`.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        protocol: Literal["grpc", "http"] = "grpc",
        model_version: str = "",
        max_batch_size: int | None = None,
        max_delay_s: float | None = None,
        adaptive: bool = True,
        max_in_flight: int = 2,
        max_queue_size: int = 4096,
        backpressure: Literal["wait", "raise"] = "wait",
        priority: int = 0,
        server_timeout_us: int | None = None,
        client_timeout_s: float = 60.0,
        registry: Any = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ConfigError(f"protocol = {protocol!r}: must be one of {', '.join(PROTOCOLS)}")
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model = {model!r}: must be a model name")
        if max_batch_size is not None and (
            isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int)
            or max_batch_size < 1
        ):
            raise ConfigError(
                f"max_batch_size = {max_batch_size!r}: max_batch_size must be an integer >= 1, "
                "or None for the model's own"
            )
        if (isinstance(client_timeout_s, bool) or not isinstance(client_timeout_s, (int, float))
                or not client_timeout_s > 0):
            raise ConfigError(f"client_timeout_s = {client_timeout_s!r}: must be > 0 seconds")
        self.url = _strip_scheme(url)
        self.model = model
        self.protocol = protocol
        self.model_version = model_version
        self.client_timeout_s = float(client_timeout_s)
        self.default_priority = _check_priority(priority, ConfigError)
        self.default_server_timeout_us = _check_timeout_us(server_timeout_us, ConfigError)
        self._requested_max = max_batch_size
        self._batcher_args: dict[str, Any] = {
            "max_delay_s": max_delay_s,
            "adaptive": adaptive,
            "max_in_flight": max_in_flight,
            "max_queue_size": max_queue_size,
            "backpressure": backpressure,
            "clock": clock,
            "sleep": sleep,
        }
        metrics = None
        if registry is not None:
            from autobatch.sdk.metrics import BatcherMetrics

            metrics = BatcherMetrics.for_registry(registry)
        self._metrics = metrics
        # Checks the batching arguments now, not at the first call.
        MicroBatcher(self._run_batch, max_batch_size=max_batch_size or 1, **self._batcher_args)
        self._client: Any = None
        self._batcher: MicroBatcher[_Item, dict[str, np.ndarray]] | None = None
        self._start_lock = asyncio.Lock()
        self._closed = False
        self.model_config: dict[str, Any] = {}
        self.max_batch_size = 0
        self._inputs: dict[str, _InputSpec] = {}
        self._outputs: list[str] = []

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> TritonBatchClient:
        """Connect and read the model's config; raises TritonError or ConfigError."""
        async with self._start_lock:
            if self._closed:
                raise BatcherError(f"{self.model}: the client is closed")
            if self._batcher is not None:
                return self
            client = self._make_client()
            try:
                config = await self._read_config(client)
                self._configure(config)
            except BaseException:
                await _close_quietly(client)
                raise
            self._client = client
            self._batcher = MicroBatcher(
                self._run_batch,
                max_batch_size=self.max_batch_size,
                size_of=_rows,
                key_of=_key,
                name=self.model,
                metrics=self._metrics,
                **self._batcher_args,
            )
        return self

    async def close(self, *, drain: bool = True) -> None:
        """Send (``drain``) or fail what is queued, then close the connection."""
        self._closed = True
        if self._batcher is not None:
            await self._batcher.close(drain=drain)
        if self._client is not None:
            client, self._client = self._client, None
            await _close_quietly(client)

    async def __aenter__(self) -> TritonBatchClient:
        return await self.start()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.close(drain=exc_type is None)

    def statistics(self) -> BatcherStatistics:
        """The batcher's snapshot (sizes are rows along the batch dimension)."""
        if self._batcher is None:
            return MicroBatcher(self._run_batch, max_batch_size=1).statistics()
        return self._batcher.statistics()

    # -- calls ----------------------------------------------------------------------------
    async def infer(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        priority: int | None = None,
        server_timeout_us: int | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, np.ndarray]:
        """Infer ``inputs`` (name -> array of n >= 1 rows); returns name -> array of n rows.

        ``priority`` and ``server_timeout_us`` go to Triton with the batch this
        call is sent in (calls that differ in them are never batched together).
        ``timeout_s`` is this call's own deadline on the client: past it the call
        raises :class:`~autobatch.errors.DeadlineExceededError`, and is not sent if
        it was still queued.

        Raises :class:`~autobatch.errors.InvalidRequestError` for inputs that do
        not fit the model (before any batching), :class:`~autobatch.errors.TritonError`
        when Triton fails the batch, :class:`~autobatch.errors.QueueFullError`
        under backpressure ``"raise"``.
        """
        if self._batcher is None:
            await self.start()
        assert self._batcher is not None
        item = self._prepare(
            inputs,
            self.default_priority if priority is None else _check_priority(priority),
            self.default_server_timeout_us if server_timeout_us is None
            else _check_timeout_us(server_timeout_us),
        )
        return await self._batcher.submit(item, timeout_s=timeout_s)

    def _prepare(self, inputs: Mapping[str, np.ndarray], priority: int,
                 server_timeout_us: int | None) -> _Item:
        where = f"model {self.model!r}"
        if not isinstance(inputs, Mapping):
            raise InvalidRequestError(
                f"{where}: inputs must be a dict of input name -> numpy array, "
                f"not {type(inputs).__name__}"
            )
        unknown = [name for name in inputs if name not in self._inputs]
        if unknown:
            raise InvalidRequestError(
                f"{where}: unknown input {unknown[0]!r}; the model's inputs are "
                f"{', '.join(self._inputs)}"
            )
        checked: dict[str, np.ndarray] = {}
        varying: list[Any] = []
        rows = None
        for name, spec in self._inputs.items():
            arr = inputs.get(name)
            if arr is None:
                if spec.optional:
                    varying.append((name, None))
                    continue
                raise InvalidRequestError(f"{where}: input {name!r} ({spec.describe()}) is missing")
            if not isinstance(arr, np.ndarray):
                raise InvalidRequestError(
                    f"{where}: input {name!r} must be a numpy array, not {type(arr).__name__}"
                )
            if spec.datatype == "BYTES":
                if arr.dtype.kind not in "OSU":
                    raise InvalidRequestError(
                        f"{where}: input {name!r} has dtype {arr.dtype}; the model wants BYTES "
                        "(an object or bytes array)"
                    )
                varying.append((name, arr.dtype.str))
            elif arr.dtype != spec.dtype:
                raise InvalidRequestError(
                    f"{where}: input {name!r} has dtype {arr.dtype}; the model wants "
                    f"{spec.datatype} ({spec.dtype}); convert it with .astype(np.{spec.dtype})"
                )
            shape = arr.shape
            if spec.fixed is not None:
                bad_shape = shape[1:] != spec.fixed or not shape
            else:
                bad_shape = arr.ndim != len(spec.dims) + 1 or any(
                    d >= 0 and d != s for d, s in zip(spec.dims, shape[1:])
                )
                varying.append((name, shape[1:]))
            if bad_shape:
                raise InvalidRequestError(
                    f"{where}: input {name!r} has shape {list(shape)}; the model wants "
                    f"{spec.describe()}, with a leading batch dimension n >= 1"
                )
            n = arr.shape[0]
            if n < 1:
                raise InvalidRequestError(f"{where}: input {name!r} has 0 rows; send n >= 1")
            if rows is None:
                rows = n
            elif n != rows:
                raise InvalidRequestError(
                    f"{where}: inputs disagree on the batch dimension ({rows} rows vs {n} rows "
                    f"in {name!r}); every input needs the same n"
                )
            checked[name] = arr
        if rows is None:
            raise InvalidRequestError(f"{where}: no inputs given")
        if rows > self.max_batch_size:
            raise InvalidRequestError(
                f"{where}: a request of {rows} rows is larger than the batch limit of "
                f"{self.max_batch_size} rows; split it"
            )
        return _Item(checked, rows, priority, server_timeout_us, tuple(varying))

    async def _run_batch(self, items: list[_Item]) -> list[dict[str, np.ndarray]]:
        first = items[0]
        rows = sum(item.rows for item in items)
        if len(items) == 1:
            arrays = first.inputs
        else:
            arrays = {
                name: np.concatenate([item.inputs[name] for item in items], axis=0)
                for name in first.inputs
            }
        mod = self._module()
        tensors = []
        for name, arr in arrays.items():
            tensor = mod.InferInput(name, list(arr.shape), self._inputs[name].datatype)
            tensor.set_data_from_numpy(arr)
            tensors.append(tensor)
        kwargs: dict[str, Any] = {
            "model_version": self.model_version,
            "priority": first.priority,
            "timeout": first.server_timeout_us,
        }
        if self.protocol == "grpc":
            kwargs["client_timeout"] = self.client_timeout_s
        client = self._client
        if client is None:
            raise BatcherError(f"{self.model}: the client is closed")
        try:
            result = await client.infer(self.model, tensors, **kwargs)
        except Exception as exc:
            raise TritonError(
                f"model {self.model!r} at {self.url} failed a batch of {_count(len(items), 'request')} "
                f"({_count(rows, 'row')}): {_error_text(exc)}"
            ) from exc
        outputs: dict[str, np.ndarray] = {}
        for name in self._outputs:
            arr = result.as_numpy(name)
            if arr is None or arr.ndim < 1 or arr.shape[0] != rows:
                got = "no such output" if arr is None else f"shape {list(arr.shape)}"
                raise TritonError(
                    f"model {self.model!r}: output {name!r} came back with {got} for a batch "
                    f"of {rows} rows; cannot split it back to the callers"
                )
            outputs[name] = arr
        if len(items) == 1:
            return [outputs]
        split = []
        start = 0
        for item in items:
            stop = start + item.rows
            split.append({name: arr[start:stop] for name, arr in outputs.items()})
            start = stop
        return split

    # -- set-up -----------------------------------------------------------------------------
    def _module(self) -> Any:
        if self.protocol == "grpc":
            import tritonclient.grpc.aio as mod
        else:
            import tritonclient.http.aio as mod
        return mod

    def _make_client(self) -> Any:
        mod = self._module()
        try:
            if self.protocol == "grpc":
                return mod.InferenceServerClient(self.url)
            return mod.InferenceServerClient(self.url, conn_timeout=self.client_timeout_s)
        except Exception as exc:
            raise ConfigError(f"url = {self.url!r}: {_error_text(exc)}") from exc

    async def _read_config(self, client: Any) -> dict[str, Any]:
        where = f"model {self.model!r} at {self.url} ({self.protocol})"
        try:
            if self.protocol == "grpc":
                reply = await client.get_model_config(
                    self.model, self.model_version, as_json=True, client_timeout=_SETUP_TIMEOUT_S
                )
                return dict(reply.get("config", {}))
            return dict(await asyncio.wait_for(
                client.get_model_config(self.model, self.model_version), _SETUP_TIMEOUT_S
            ))
        except Exception as exc:
            raise TritonError(f"{where}: cannot read its config: {_error_text(exc)}") from exc

    def _configure(self, config: Mapping[str, Any]) -> None:
        where = f"model {self.model!r}"
        model_max = int(config.get("max_batch_size") or 0)
        if model_max < 1:
            raise ConfigError(
                f"{where} has max_batch_size 0: it takes no batch dimension, so there is "
                "nothing to micro-batch; call tritonclient directly"
            )
        if config.get("sequence_batching") is not None:
            raise ConfigError(f"{where} is a sequence model: its requests cannot be merged")
        if (config.get("model_transaction_policy") or {}).get("decoupled"):
            raise ConfigError(f"{where} is decoupled: the SDK needs one response per request")
        if self._requested_max is not None and self._requested_max > model_max:
            raise ConfigError(
                f"max_batch_size = {self._requested_max}: larger than {where}'s own "
                f"max_batch_size ({model_max})"
            )
        self.max_batch_size = self._requested_max or model_max
        inputs = {}
        for tensor in config.get("input") or ():
            datatype = str(tensor.get("data_type", "")).removeprefix("TYPE_")
            if datatype == "STRING":
                datatype = "BYTES"
            dtype = _np_dtype(datatype)
            if dtype is None:
                raise ConfigError(
                    f"{where}: input {tensor.get('name')!r} has type {tensor.get('data_type')}, "
                    "which the SDK cannot batch"
                )
            name = str(tensor["name"])
            dims = tuple(int(d) for d in tensor.get("dims") or ())
            inputs[name] = _InputSpec(name, datatype, dtype, dims, bool(tensor.get("optional")))
        if not inputs:
            raise ConfigError(f"{where} declares no inputs")
        self._inputs = inputs
        self._outputs = [str(t["name"]) for t in config.get("output") or ()]
        self.model_config = dict(config)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _rows(item: _Item) -> int:
    return item.rows


def _key(item: _Item) -> Any:
    return item.key


def _check_priority(value: Any, error: type[Exception] = InvalidRequestError) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise error(f"priority = {value!r}: must be an integer >= 0 (0: the model's default)")
    return value


def _check_timeout_us(value: Any, error: type[Exception] = InvalidRequestError) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise error(f"server_timeout_us = {value!r}: must be an integer >= 0 microseconds")
    return value


def _error_text(exc: BaseException) -> str:
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException):
        message = exc.message() or str(exc)
        status = exc.status()
        return f"{message} ({status})" if status else message
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time (client timeout)"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        await client.close()
