"""The sidecar's HTTP endpoints (aiohttp, default 127.0.0.1:9400).

``GET /metrics``  own registry, ``autobatch_`` prefix
``GET /healthz``  liveness: 200 while ticks complete, 503 (and why) when the loop is stuck
``GET /readyz``   readiness: 200 while the signals are fresh, 503 (and why) while stale
``GET /status``   JSON: active profile, last window, last decision and reason, health
``POST /profile`` ``{"profile": "aggressive"}`` pins, ``{"profile": null}`` unpins;
                  needs ``Authorization: Bearer <token>`` (the token file's content)

With ``server.protect_reads``, ``/status`` and ``/metrics`` need the token too;
the probes never do (a kubelet sends none).

Whatever a client sends, the answer is a 2xx or a 4xx with a one-line JSON
error, never a 500 or a traceback in the log: the token is compared as bytes,
a body is at most :data:`MAX_BODY_BYTES` and :data:`MAX_JSON_DEPTH` deep and
must arrive within ``server.request_timeout_s`` (so must the headers: a
half-sent request is dropped), and what is echoed back is cut to
:data:`ECHO_CHARS`. A handler bug still answers 500 in one log line, not a
traceback per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from autobatch.config import http_url
from autobatch.controller.exposure import token_matches
from autobatch.controller.loop import Controller
from autobatch.errors import AutobatchError, ConfigError

__all__ = ["ECHO_CHARS", "MAX_BODY_BYTES", "MAX_JSON_DEPTH", "ControlServer", "fetch_status"]

log = logging.getLogger("autobatch.controller.http")

MAX_BODY_BYTES = 4096
"""``{"profile": "<name>"}`` is tens of bytes; anything near this is not a pin."""
MAX_JSON_DEPTH = 4
"""The pin body is one flat object."""
ECHO_CHARS = 80
"""The longest piece of a request an error message repeats."""

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ControlServer:
    def __init__(
        self,
        controller: Controller,
        host: str,
        port: int,
        token: bytes | str | None,
        *,
        protect_reads: bool = False,
        request_timeout_s: float = 10.0,
    ) -> None:
        self.controller = controller
        self.host = host
        self.port = port
        self.token = token.encode("utf-8") if isinstance(token, str) else token
        self.protect_reads = protect_reads
        self.request_timeout_s = request_timeout_s
        self._runner: web.AppRunner | None = None
        self.url = _url(host, port)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_never_throw])
        app.router.add_get("/metrics", self._reads(self.metrics))
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/status", self._reads(self.status))
        app.router.add_post("/profile", self.profile)
        return app

    async def start(self) -> None:
        # keepalive_timeout also closes a connection that has not sent a whole request by
        # then (aiohttp arms it at connect): half-sent headers are not held open. A body
        # that stops coming is the handler's timeout; lingering_time bounds how long the
        # rest of it is then drained before the connection closes.
        self._runner = web.AppRunner(
            self.app(), access_log=None, keepalive_timeout=self.request_timeout_s,
            lingering_time=self.request_timeout_s, handle_signals=False, logger=_ServerLog(),
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await self.stop()
            raise
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
            self.url = _url(self.host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            try:
                await runner.cleanup()
            except Exception as exc:  # shutdown never throws
                log.warning("stopping the HTTP server: %s", exc)

    # -- handlers --------------------------------------------------------------------
    def _reads(self, handler: _Handler) -> _Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if self.protect_reads and (
                self.token is None or not token_matches(request.headers.get("Authorization"), self.token)
            ):
                return _error(401, "a valid bearer token is required (server.protect_reads)", bearer=True)
            return await handler(request)

        return guarded

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.controller.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        c = self.controller
        if c.state is None:
            return web.Response(status=503, text="starting: reading the live profile\n")
        verdict = c.health.live(c.clock())
        return web.Response(status=200 if verdict.ok else 503, text=verdict.message + "\n")

    async def readyz(self, request: web.Request) -> web.Response:
        c = self.controller
        verdict = c.health.ready(c.clock())
        return web.Response(status=200 if verdict.ok else 503, text=verdict.message + "\n")

    async def status(self, request: web.Request) -> web.Response:
        c = self.controller
        now = c.clock()
        data = c.status.to_dict()
        live, ready = c.health.live(now), c.health.ready(now)
        data["health"] = {
            "live": live.ok, "live_detail": live.message,
            "ready": ready.ok, "ready_detail": ready.message,
            "liveness_bound_s": c.health.bound_s,
            "last_completed_tick_s": c.health.last_completed_s,
        }
        return web.json_response(data)

    async def profile(self, request: web.Request) -> web.Response:
        if self.token is None:
            return _error(403, "pinning is disabled: set server.token_file in the sidecar config")
        if not token_matches(request.headers.get("Authorization"), self.token):
            return _error(401, "a valid bearer token is required", bearer=True)
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return _error(413, f"the body is over {MAX_BODY_BYTES} bytes; send {{\"profile\": \"<name>\"}}")
        try:
            async with asyncio.timeout(self.request_timeout_s):
                raw = await request.read()
        except TimeoutError:
            return _error(408, f"the body did not arrive within {self.request_timeout_s:g} s")
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"the body is over {MAX_BODY_BYTES} bytes; send {{\"profile\": \"<name>\"}}")
        body, problem = _parse_body(raw)
        if problem is not None:
            return _error(400, problem)
        name = body["profile"]
        try:
            await self.controller.set_pin(name)
        except KeyError:
            names = ", ".join(p.name for p in self.controller.config.profiles)
            return _error(400, f"unknown profile {_echo(name)}; the ladder is {names}")
        return web.json_response({"pinned": name, "active_profile": self.controller.status.active})


def _parse_body(raw: bytes) -> tuple[Any, str | None]:
    """``{"profile": <str or null>}`` from the raw body, or why not."""
    usage = 'body must be {"profile": "<name>"} or {"profile": null}'
    if _depth(raw) > MAX_JSON_DEPTH:
        return None, f"{usage}; this one is nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None, f"{usage}; this one is not JSON"
    if not isinstance(body, dict) or "profile" not in body:
        return None, usage
    extra = [k for k in body if k != "profile"]
    if extra:
        return None, f"{usage}; unknown field {_echo(extra[0])}"
    name = body["profile"]
    if name is not None and not isinstance(name, str):
        return None, f"profile must be a string or null, not {_echo(name)}"
    return body, None


def _depth(raw: bytes) -> int:
    """How deep the brackets of a JSON text nest, strings skipped (before parsing it)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def _echo(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else text[: ECHO_CHARS - 3] + "..."


def _error(status: int, message: str, *, bearer: bool = False) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="autobatch"'} if bearer else None
    return web.json_response({"error": message}, status=status, headers=headers)


@web.middleware
async def _never_throw(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """aiohttp's own 4xx pass through; any other exception is one log line and a 500."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        log.error("%s %s failed: %s: %s", request.method, request.path[:ECHO_CHARS],
                  type(exc).__name__, str(exc)[:200])
        return _error(500, "internal error; the sidecar's log has one line about it")


class _ServerLog:
    """aiohttp's server logger, one line per problem instead of a traceback per request.

    aiohttp logs a malformed request (a bad header byte, a broken request line)
    with ``logger.exception``: a traceback for every request any local caller
    cares to send. Those are the client's fault, a debug line; anything else
    aiohttp reports is a warning, still one line.
    """

    def exception(self, msg: str, *args: Any, exc_info: Any = None, **kw: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        text = msg % args if args else msg
        detail = " ".join(str(exc).split())[:200] if exc is not None else ""
        level = logging.DEBUG if isinstance(exc, HttpProcessingError) else logging.WARNING
        log.log(level, "%s: %s %s", text, type(exc).__name__ if exc else "", detail)

    def debug(self, msg: str, *args: Any, **kw: Any) -> None:
        kw.pop("exc_info", None)
        log.debug(msg, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(log, name)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def fetch_status(
    url: str, *, client: httpx.Client | None = None, timeout_s: float = 5.0, token: bytes | None = None
) -> dict[str, Any]:
    """A running sidecar's ``/status`` JSON (``url`` is its address, ``host:port`` or a URL);
    ``token`` for a sidecar with ``server.protect_reads``."""
    base = http_url(url)
    if base is None:
        raise ConfigError(f"url = {url!r}: must be an http:// URL or HOST:PORT, e.g. 127.0.0.1:9400",
                          field="url", value=url)
    headers = {"Authorization": b"Bearer " + token} if token else None
    try:
        if client is None:
            r = httpx.get(base + "/status", timeout=timeout_s, headers=headers)
        else:
            r = client.get(base + "/status", timeout=timeout_s, headers=headers)
        if r.status_code == 401:
            given = "the token given was refused" if token else "no token was given"
            raise ConfigError(f"{base}/status needs the bearer token (server.protect_reads): {given}",
                              field="token")
        r.raise_for_status()
        data = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise AutobatchError(f"cannot read {base}/status: {exc}") from exc
    if not isinstance(data, dict):
        raise AutobatchError(f"{base}/status did not answer a JSON object")
    return data
