"""Talking to Triton for the load generator: gRPC (default) or HTTP, both asyncio.

A transport checks the server and the model before the run, synthesises the
request once from the model's config, and then sends that same request again
and again. Failures of single requests are classified into short, stable
kinds (see :attr:`autobatch.load.report.RequestRecord.outcome`); failures of
the set-up become :class:`~autobatch.errors.LoadError` or
:class:`~autobatch.errors.ConfigError` with one line saying what to do.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from autobatch.errors import ConfigError, LoadError

__all__ = [
    "PROTOCOLS",
    "SCHEMES",
    "SyntheticInput",
    "Transport",
    "classify_error",
    "normalize_url",
    "open_transport",
    "synthesize_inputs",
]

PROTOCOLS = ("grpc", "http")

# Startup calls (health, config, warm-up) must not hang on a server that
# accepts connections but never answers.
_SETUP_TIMEOUT_S = 10.0

# Triton's messages when its dynamic batcher turns a request away (queue full, or
# the queue policy's timeout); both come back as UNAVAILABLE / 503, which would
# hide them among "server down".
_REJECTION_MARKERS = ("Exceeds maximum queue size", "Request timeout expired")

# Triton's HTTP status codes mapped onto the gRPC names, so one run over HTTP and
# one over gRPC report the same failure kinds.
_HTTP_KINDS = {
    "400": "INVALID_ARGUMENT",
    "404": "NOT_FOUND",
    "409": "ALREADY_EXISTS",
    "429": "RESOURCE_EXHAUSTED",
    "499": "CANCELLED",
    "500": "INTERNAL",
    "501": "UNIMPLEMENTED",
    "503": "UNAVAILABLE",
    "504": "DEADLINE_EXCEEDED",
}


def classify_error(exc: BaseException) -> tuple[str, str]:
    """``(kind, message)`` of a failed request."""
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException):
        message = exc.message() or str(exc)
        status = str(exc.status() or "")
        if any(m in message for m in _REJECTION_MARKERS):
            return "REJECTED", message
        if status.startswith("StatusCode."):
            kind = status.removeprefix("StatusCode.")
            # The gRPC deadline is the client's per-request timeout.
            return ("timeout" if kind == "DEADLINE_EXCEEDED" else kind), message
        if status.isdigit():
            return _HTTP_KINDS.get(status, f"HTTP_{status}"), message
        return "ERROR", message
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout", "no response within the client timeout"
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - tritonclient[http] brings it
        aiohttp = None  # type: ignore[assignment]
    if aiohttp is not None and isinstance(exc, aiohttp.ClientConnectionError):
        return "UNAVAILABLE", str(exc) or type(exc).__name__
    return type(exc).__name__, str(exc)


def _first_line(message: str) -> str:
    lines = (message or "").strip().splitlines()
    return lines[0] if lines else "no message"


# -- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticInput:
    """One input tensor of the synthesised request."""

    name: str
    datatype: str
    """Triton's name for it: FP32, INT64, BYTES, ..."""
    data: np.ndarray


def synthesize_inputs(
    config: Mapping[str, Any], *, batch_size: int = 1, seed: int = 0, model: str = "model"
) -> tuple[SyntheticInput, ...]:
    """Random inputs that fit a model config (the JSON of ``GET /v2/models/M/config``).

    Variable dimensions (-1) get size 1; optional inputs are left out. The batch
    dimension is ``batch_size`` if the model batches, and there is none if it
    does not (then ``batch_size`` must be 1).
    """
    from tritonclient.utils import triton_to_np_dtype

    max_batch_size = int(config.get("max_batch_size") or 0)
    if max_batch_size == 0 and batch_size != 1:
        raise ConfigError(
            f"batch_size = {batch_size}: model {model!r} does not batch (max_batch_size 0); "
            f"use batch_size 1"
        )
    if max_batch_size and batch_size > max_batch_size:
        raise ConfigError(
            f"batch_size = {batch_size}: must be <= the max_batch_size of model {model!r} "
            f"({max_batch_size})"
        )
    inputs = [i for i in config.get("input") or () if not i.get("optional")]
    if not inputs:
        raise LoadError(f"model {model!r} declares no inputs in its config; cannot build a request")
    rng = np.random.default_rng(seed)
    out = []
    for spec in inputs:
        name = spec["name"]
        datatype = str(spec.get("data_type", "")).removeprefix("TYPE_")
        if datatype == "STRING":
            datatype = "BYTES"
        dims = [int(d) for d in spec.get("dims") or ()]
        shape = tuple(1 if d < 0 else d for d in dims)
        if max_batch_size:
            shape = (batch_size, *shape)
        dtype = triton_to_np_dtype(datatype)
        if dtype is None:
            raise LoadError(
                f"model {model!r}: input {name!r} has data type {spec.get('data_type')!r}, "
                f"which autobatch load cannot synthesise"
            )
        out.append(SyntheticInput(name, datatype, _random_array(rng, shape, np.dtype(dtype))))
    return tuple(out)


def _random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype == np.object_:
        return np.full(shape, b"autobatch", dtype=np.object_)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        # Small non-negative values are valid as ids, indices and lengths alike.
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# -- transports ----------------------------------------------------------------------------


class Transport:
    """One protocol's client, set up for one model. Use :func:`open_transport`."""

    protocol = "?"

    def __init__(self, url: str, model: str, timeout_s: float) -> None:
        self.url = url
        self.model = model
        self.timeout_s = timeout_s
        self.client: Any = None
        self.inputs: list[Any] = []
        self.config: Mapping[str, Any] = {}
        self.seed = 0
        self._by_rows: dict[int, list[Any]] = {}

    async def infer(
        self, timeout_s: float | None = None, *, rows: int | None = None, priority: int = 0
    ) -> None:
        """Send the request once (``timeout_s`` defaults to the run's); raise on failure.

        ``rows``: this request's batch dimension instead of the run's; ``priority``:
        Triton's request priority (0: the model's default level)."""
        raise NotImplementedError

    def inputs_for(self, rows: int | None) -> list[Any]:
        """The synthesised inputs with ``rows`` rows (built once per row count)."""
        if rows is None:
            return self.inputs
        got = self._by_rows.get(rows)
        if got is None:
            data = synthesize_inputs(self.config, batch_size=rows, seed=self.seed, model=self.model)
            got = self._by_rows[rows] = [self._make_input(d) for d in data]
        return got

    @property
    def max_batch_size(self) -> int:
        return int(self.config.get("max_batch_size") or 0)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    # -- set-up, shared ---------------------------------------------------------------
    def _unreachable(self, exc: BaseException) -> LoadError:
        _, message = classify_error(exc)
        port = "8001" if self.protocol == "grpc" else "8000"
        return LoadError(
            f"cannot reach Triton over {self.protocol} at {self.url}: {_first_line(message)}; "
            f"is it running? (`autobatch serve` starts one; {self.protocol} listens on "
            f"port {port} by default)"
        )

    async def _check(self, batch_size: int, seed: int) -> None:
        try:
            live = await self._live()
        except Exception as exc:
            raise self._unreachable(exc) from exc
        if not live:
            raise LoadError(f"Triton at {self.url} answers but is not live; check its log")
        try:
            ready = await self._model_ready()
            if not ready:
                raise await self._model_missing()
            config = await self._config()
        except (LoadError, ConfigError):
            raise
        except Exception as exc:
            kind, message = classify_error(exc)
            raise LoadError(
                f"reading the config of model {self.model!r} from {self.url} failed "
                f"({kind}: {_first_line(message)})"
            ) from exc
        self.config, self.seed = config, seed
        data = synthesize_inputs(config, batch_size=batch_size, seed=seed, model=self.model)
        self.inputs = [self._make_input(d) for d in data]

    async def _model_missing(self) -> ConfigError:
        try:
            index = await self._index()
        except Exception:
            index = []  # only feeds the hint about other models; the error stands without it
        ready = sorted(m["name"] for m in index if m.get("state") == "READY")
        mine = [m for m in index if m.get("name") == self.model]
        if mine:
            state = mine[0].get("state") or "not ready"
            reason = mine[0].get("reason")
            detail = f"it is {state}" + (f" ({reason})" if reason else "")
        else:
            detail = "the server has no such model"
        ready_txt = ", ".join(ready) if ready else "none"
        return ConfigError(
            f"model = {self.model!r}: not ready on Triton at {self.url}: {detail}; "
            f"ready models: {ready_txt}",
            field="model",
            value=self.model,
        )

    async def warm_up(self) -> None:
        """Send one request outside the clock: a request the model rejects is a set-up
        error, not thousands of identical failures."""
        try:
            # Its own generous timeout: a first request is often slow (lazy
            # initialisation in the model), and a tight timeout_ms is for the run.
            await self.infer(max(_SETUP_TIMEOUT_S, self.timeout_s))
        except Exception as exc:
            kind, message = classify_error(exc)
            raise LoadError(
                f"model {self.model!r} failed the first (warm-up) request ({kind}: "
                f"{_first_line(message)}); nothing was measured"
            ) from exc

    async def _live(self) -> bool:
        raise NotImplementedError

    async def _model_ready(self) -> bool:
        raise NotImplementedError

    async def _config(self) -> Mapping[str, Any]:
        raise NotImplementedError

    async def _index(self) -> list[Mapping[str, Any]]:
        raise NotImplementedError

    def _make_input(self, data: SyntheticInput) -> Any:
        raise NotImplementedError


class GrpcTransport(Transport):
    protocol = "grpc"

    def __init__(self, url: str, model: str, timeout_s: float) -> None:
        import tritonclient.grpc.aio as grpcclient

        super().__init__(url, model, timeout_s)
        self._mod = grpcclient
        self.client = grpcclient.InferenceServerClient(url)

    async def infer(
        self, timeout_s: float | None = None, *, rows: int | None = None, priority: int = 0
    ) -> None:
        await self.client.infer(
            self.model, self.inputs_for(rows), priority=priority,
            client_timeout=timeout_s or self.timeout_s,
        )

    async def _live(self) -> bool:
        return bool(await self.client.is_server_live(client_timeout=_SETUP_TIMEOUT_S))

    async def _model_ready(self) -> bool:
        return bool(await self.client.is_model_ready(self.model, client_timeout=_SETUP_TIMEOUT_S))

    async def _config(self) -> Mapping[str, Any]:
        cfg = await self.client.get_model_config(self.model, as_json=True, client_timeout=_SETUP_TIMEOUT_S)
        return cfg.get("config", cfg)

    async def _index(self) -> list[Mapping[str, Any]]:
        idx = await self.client.get_model_repository_index(as_json=True, client_timeout=_SETUP_TIMEOUT_S)
        return list(idx.get("models", []))

    def _make_input(self, data: SyntheticInput) -> Any:
        inp = self._mod.InferInput(data.name, list(data.data.shape), data.datatype)
        inp.set_data_from_numpy(data.data)
        return inp


class HttpTransport(Transport):
    protocol = "http"

    # aiohttp queues requests beyond its connection limit inside the client, where
    # the wait would be counted as server latency; open loop needs a high limit.
    CONNECTION_LIMIT = 1024

    def __init__(self, url: str, model: str, timeout_s: float) -> None:
        import tritonclient.http.aio as httpclient

        super().__init__(url, model, timeout_s)
        self._mod = httpclient
        # No session-wide timeout: each call below sets its own.
        self.client = httpclient.InferenceServerClient(
            url, conn_limit=self.CONNECTION_LIMIT, conn_timeout=None
        )

    if sys.version_info >= (3, 11):

        async def infer(
            self, timeout_s: float | None = None, *, rows: int | None = None, priority: int = 0
        ) -> None:
            # asyncio.timeout arms a timer; wait_for (below) would wrap every request
            # in one more task.
            async with asyncio.timeout(timeout_s or self.timeout_s):
                await self.client.infer(self.model, self.inputs_for(rows), priority=priority)

    else:  # pragma: no cover - Python 3.10

        async def infer(
            self, timeout_s: float | None = None, *, rows: int | None = None, priority: int = 0
        ) -> None:
            await asyncio.wait_for(
                self.client.infer(self.model, self.inputs_for(rows), priority=priority),
                timeout_s or self.timeout_s,
            )

    async def _live(self) -> bool:
        return bool(await asyncio.wait_for(self.client.is_server_live(), _SETUP_TIMEOUT_S))

    async def _model_ready(self) -> bool:
        return bool(await asyncio.wait_for(self.client.is_model_ready(self.model), _SETUP_TIMEOUT_S))

    async def _config(self) -> Mapping[str, Any]:
        return await asyncio.wait_for(self.client.get_model_config(self.model), _SETUP_TIMEOUT_S)

    async def _index(self) -> list[Mapping[str, Any]]:
        idx = await asyncio.wait_for(self.client.get_model_repository_index(), _SETUP_TIMEOUT_S)
        return list(idx)

    def _make_input(self, data: SyntheticInput) -> Any:
        inp = self._mod.InferInput(data.name, list(data.data.shape), data.datatype)
        inp.set_data_from_numpy(data.data, binary_data=True)
        return inp


SCHEMES = ("http", "grpc")
"""What a ``--url`` may start with (then ``://``); the load generator speaks plain
gRPC and HTTP, so ``https://`` is refused rather than sent in the clear."""


def normalize_url(url: str, field: str = "url") -> str:
    """``host:port`` as tritonclient wants it, from ``host:port``, ``http://host:port`` or
    ``grpc://host:port`` (a trailing slash dropped); any other scheme is a
    :class:`~autobatch.errors.ConfigError` naming ``field``."""
    if "://" in url:
        scheme, url = url.split("://", 1)
        if scheme.lower() not in SCHEMES:
            given = f"{scheme}://{url}"
            raise ConfigError(
                f"{field} = {given!r}: scheme {scheme!r} is not supported: give host:port "
                f"(or {' or '.join(s + '://host:port' for s in SCHEMES)}; TLS is not supported)",
                field=field, value=given,
            )
    url = url.rstrip("/")
    if not url:
        raise ConfigError(f"{field} = {url!r}: give host:port", field=field, value=url)
    return url


async def open_transport(
    url: str,
    model: str,
    *,
    protocol: str = "grpc",
    timeout_s: float = 10.0,
    batch_size: int = 1,
    seed: int = 0,
) -> Transport:
    """Connect, check the server and the model, build the request and warm it up."""
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"protocol = {protocol!r}: must be one of {', '.join(PROTOCOLS)}",
            field="protocol",
            value=protocol,
        )
    url = normalize_url(url)
    cls = GrpcTransport if protocol == "grpc" else HttpTransport
    transport = cls(url, model, timeout_s)
    try:
        await transport._check(batch_size, seed)
        await transport.warm_up()
    except BaseException:
        await transport.close()
        raise
    return transport


def default_url(protocol: str) -> str:
    """Triton's default port on loopback for ``protocol``: 8001 for gRPC, 8000 for HTTP."""
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"protocol = {protocol!r}: must be one of {', '.join(PROTOCOLS)}",
            field="protocol",
            value=protocol,
        )
    return "127.0.0.1:8001" if protocol == "grpc" else "127.0.0.1:8000"
