"""What the sidecar exposes and to whom: the bearer token, and warnings about exposure.

The token is read and compared as bytes (:func:`read_token`,
:func:`token_matches`), so no header and no file content can make a
comparison throw. :func:`exposure_warnings` names what a reader of the
sidecar's start-up log should know: a token file others can read, and a
listen address beyond loopback (``/status`` and ``/metrics`` answer anyone
who can reach it unless ``server.protect_reads`` is on).
"""

from __future__ import annotations

import hmac
import ipaddress
import stat
from pathlib import Path

from autobatch.controller.config import ServerSettings
from autobatch.errors import ConfigError

__all__ = ["EXPOSURE_KINDS", "exposure_warnings", "is_loopback", "read_token", "token_matches"]

EXPOSURE_KINDS = ("token_file", "listen")
"""Label values of ``autobatch_exposure_warnings{kind}``."""


def read_token(path: Path | None) -> bytes | None:
    """The bearer token as bytes, surrounding whitespace stripped (None without a file).

    Read as bytes and compared as bytes, so no content can make a comparison
    throw. Unusable content is a one-line ``ConfigError``: an empty file, text
    that is not UTF-8 (no client could type it), or whitespace or control
    characters inside the token (no ``Authorization`` header can carry them).
    """
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the token file: {exc.strerror or exc}",
                          source=str(path)) from exc
    token = raw.strip()
    if not token:
        raise ConfigError(f"{path}: the token file is empty; put a random token in it, "
                          "e.g. `openssl rand -hex 32 > token`", source=str(path))
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the token is not UTF-8 text (byte {exc.start}); "
                          "use printable characters, e.g. `openssl rand -hex 32`",
                          source=str(path)) from exc
    bad = next((c for c in text if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        raise ConfigError(f"{path}: the token holds {bad!r}, which an Authorization header "
                          "cannot carry; use one line of printable characters", source=str(path))
    return token


def token_matches(header: str | None, token: bytes) -> bool:
    """Does ``Authorization: Bearer <token>`` carry ``token``? Constant-time, on bytes.

    aiohttp hands header values over as ``str`` decoded with surrogate escapes, so
    encoding back the same way gives the bytes the client sent, whatever they are.
    """
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    sent = given.strip().encode("utf-8", "surrogateescape")
    return hmac.compare_digest(sent, token)


def is_loopback(host: str) -> bool:
    """Is ``host`` (an address or ``localhost``) reachable from this machine only?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def exposure_warnings(server: ServerSettings) -> list[tuple[str, str]]:
    """``(kind, sentence)`` for each way the sidecar is more exposed than loopback-only."""
    out: list[tuple[str, str]] = []
    path = server.token_file
    if path is not None:
        try:
            mode = path.stat().st_mode
        except OSError:
            mode = 0
        if mode & (stat.S_IROTH | stat.S_IWOTH):
            out.append((
                "token_file",
                f"{path} is readable by every user of this machine (mode {stat.S_IMODE(mode):04o}); "
                f"anyone can pin profiles with it: chmod 600 {path}",
            ))
    if not is_loopback(server.host):
        reads = ("need the token (server.protect_reads)" if server.protect_reads
                 else "answer anyone who can reach it; set server.protect_reads to require the token")
        out.append((
            "listen",
            f"listening on {server.address}, beyond loopback: /status and /metrics {reads}",
        ))
    return out
