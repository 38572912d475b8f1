"""The sidecar's HTTP endpoints (aiohttp, default 127.0.0.1:9400).

``GET /metrics``  own registry, ``autobatch_`` prefix
``GET /healthz``  200 while the loop ticks, 503 when it has stalled
``GET /status``   JSON: active profile, last window, last decision and reason
``POST /profile`` ``{"profile": "aggressive"}`` pins, ``{"profile": null}`` unpins;
                  needs ``Authorization: Bearer <token>`` (the token file's content)
"""

from __future__ import annotations

import hmac
import json
from typing import Any

import httpx
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from autobatch.config import http_url
from autobatch.controller.loop import Controller
from autobatch.errors import AutobatchError, ConfigError

__all__ = ["ControlServer", "fetch_status"]


class ControlServer:
    def __init__(self, controller: Controller, host: str, port: int, token: str | None) -> None:
        self.controller = controller
        self.host = host
        self.port = port
        self.token = token
        self._runner: web.AppRunner | None = None
        self.url = f"http://{host}:{port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/status", self.status)
        app.router.add_post("/profile", self.profile)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
            self.url = f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.controller.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        c = self.controller
        if c.state is None:
            return web.Response(status=503, text="starting\n")
        return web.Response(text="ok\n")

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(self.controller.status.to_dict())

    async def profile(self, request: web.Request) -> web.Response:
        if self.token is None:
            return _error(403, "pinning is disabled: set server.token_file in the sidecar config")
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), self.token):
            return _error(401, "a valid bearer token is required", bearer=True)
        try:
            body: Any = await request.json()
        except (json.JSONDecodeError, ValueError):
            return _error(400, 'body must be JSON: {"profile": "<name>"} or {"profile": null}')
        if not isinstance(body, dict) or "profile" not in body:
            return _error(400, 'body must be {"profile": "<name>"} or {"profile": null}')
        name = body["profile"]
        if name is not None and not isinstance(name, str):
            return _error(400, "profile must be a string or null")
        try:
            self.controller.pin(name)
        except KeyError:
            names = ", ".join(p.name for p in self.controller.config.profiles)
            return _error(400, f"unknown profile {name!r}; the ladder is {names}")
        return web.json_response({"pinned": name, "active_profile": self.controller.status.active})


def _error(status: int, message: str, *, bearer: bool = False) -> web.Response:
    headers = {"WWW-Authenticate": 'Bearer realm="autobatch"'} if bearer else None
    return web.json_response({"error": message}, status=status, headers=headers)


def fetch_status(url: str, *, client: httpx.Client | None = None, timeout_s: float = 5.0) -> dict[str, Any]:
    """A running sidecar's ``/status`` JSON (``url`` is its address, ``host:port`` or a URL)."""
    base = http_url(url)
    if base is None:
        raise ConfigError(f"url = {url!r}: must be an http:// URL or HOST:PORT, e.g. 127.0.0.1:9400",
                          field="url", value=url)
    try:
        if client is None:
            r = httpx.get(base + "/status", timeout=timeout_s)
        else:
            r = client.get(base + "/status", timeout=timeout_s)
        r.raise_for_status()
        data = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise AutobatchError(f"cannot read {base}/status: {exc}") from exc
    if not isinstance(data, dict):
        raise AutobatchError(f"{base}/status did not answer a JSON object")
    return data
