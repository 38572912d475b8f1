"""Reading an endpoint with a deadline and a size cap: the one GET every scrape goes through.

httpx's ``timeout`` is per network operation, so an endpoint that drips one
byte a second never times out, and it reads a body of any size into memory.
A scrape runs inside the controller's tick, so both would stall the sidecar:
:func:`get_bounded` puts one deadline on the whole exchange (connect, headers,
body) and stops reading past ``max_bytes`` (counted after decompression, so a
gzip bomb is cut off too). Either failure is a
:class:`~autobatch.errors.ScrapeError` (``timed_out`` set, or reason
``too_large``), which the caller turns into a stale window.

Parsing the body is the caller's, off the event loop (``asyncio.to_thread``):
even a capped body takes a while to parse, and ``/healthz`` must keep answering
meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from autobatch.errors import ScrapeError

__all__ = ["DEFAULT_MAX_BYTES", "Body", "get_bounded"]

DEFAULT_MAX_BYTES = 8 << 20
"""8 MiB. Triton's ``/metrics`` is about 10 kB per loaded model (a server with a
hundred models stays under 2 MB); a Prometheus instant query of one model's
series is a few kB. An endpoint sending more is broken or hostile."""


@dataclass(frozen=True)
class Body:
    """One answer: its status, bytes and where it came from."""

    status: int
    content: bytes
    url: str

    def text(self, what: str) -> str:
        """The body as UTF-8 text (exposition format and JSON are both UTF-8)."""
        try:
            return self.content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScrapeError(f"{what} at {self.url}: the body is not UTF-8 text (byte {exc.start})",
                              reason="malformed", url=self.url) from exc

    def excerpt(self, limit: int = 200) -> str:
        return self.content[:limit].decode("utf-8", "replace").strip().replace("\n", " ")


async def get_bounded(
    client: httpx.AsyncClient,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    what: str,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Body:
    """GET ``url``, all of it within ``timeout_s`` and at most ``max_bytes`` of body.
    ``headers``: Triton's restricted-API key, for the endpoints that need it."""
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url, params=params, headers=headers, timeout=timeout_s) as r:
                declared = r.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise _too_large(what, url, max_bytes, f"it announces {int(declared)} bytes")
                chunks: list[bytes] = []
                size = 0
                async for chunk in r.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise _too_large(what, url, max_bytes, "its body goes on past that")
                    chunks.append(chunk)
                return Body(r.status_code, b"".join(chunks), str(r.request.url))
    except (TimeoutError, httpx.TimeoutException) as exc:
        raise ScrapeError(f"{what} at {url} did not answer within {timeout_s:g} s", url=url,
                          timed_out=True) from exc
    except httpx.HTTPError as exc:
        raise ScrapeError(f"cannot reach {what} at {url}: {exc or type(exc).__name__}",
                          url=url) from exc


def _too_large(what: str, url: str, max_bytes: int, how: str) -> ScrapeError:
    return ScrapeError(
        f"{what} at {url} sent more than {max_bytes} bytes ({how}); raise "
        "signals.max_scrape_bytes if that endpoint is really this big",
        reason="too_large", url=url,
    )
