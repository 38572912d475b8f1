"""Triton's restricted APIs: the header autobatch sends, and the key it reads from a file.

Triton 2.51 locks groups of its API behind a header it checks on every request::

    tritonserver --http-restricted-api=model-repository,model-config,statistics:HEADER=KEY \\
                 --grpc-restricted-protocol=model-repository,model-config,statistics:HEADER=KEY

The groups are health, metadata, inference, shared-memory, model-config,
model-repository, statistics, trace and logging. An HTTP request to a locked group
must carry ``HEADER: KEY``; a gRPC call the metadata ``triton-grpc-protocol-HEADER:
KEY``. What the server answers otherwise, seen on the ``tritonserver`` of
nvidia-pytriton 0.7 (2.51):

* HTTP: 403 ``{"error":"This API is restricted, expecting header 'HEADER'"}``, for a
  missing header and a wrong key alike; the header's name is matched without regard
  to case, the key exactly (``+``, ``/``, ``=``, ``:`` and ``,`` in a key work);
* gRPC: status UNAVAILABLE, ``This protocol is restricted, expecting header
  'triton-grpc-protocol-HEADER'``. A header name with capitals cannot be sent over
  gRPC at all (the client refuses "Illegal header key"), so HEADER is lower case here;
* ``/metrics`` (the metrics port) is not part of any group: it answers without it.
  Neither are the server and model readiness endpoints unless ``health`` is locked,
  which would lock the kubelet's probes out too.

:class:`RestrictedApi` holds the header and the key (read from a file, so it is in
no config file and on no command line) and gives the headers each transport sends;
:func:`refusal` turns Triton's refusal into one line naming the setting to fix. The
key is kept out of every ``repr``, message and log line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from autobatch.errors import ConfigError

__all__ = ["GRPC_PREFIX", "SETTING", "RestrictedApi", "expected_header", "http_headers", "refusal"]

GRPC_PREFIX = "triton-grpc-protocol-"
"""Triton prefixes the header name with this for gRPC metadata."""

SETTING = "triton.restricted_api"
"""Where the sidecar YAML sets the header and the key file; named in every refusal."""

_HEADER = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_REFUSED = re.compile(r"is restricted, expecting header '([^']*)'")


@dataclass(frozen=True)
class RestrictedApi:
    """The header and key Triton's restricted APIs expect.

    Build it with :meth:`from_file`; the key never shows in ``repr`` or ``str``.
    """

    header: str
    """The header name of ``--http-restricted-api=...:HEADER=KEY``: lower-case letters,
    digits and ``-`` (gRPC metadata keys cannot hold capitals)."""
    key: str = field(repr=False)
    """The value Triton expects (``KEY``)."""
    key_file: Path | None = None
    """Where the key was read from (for messages; the key itself is never shown)."""
    setting: str = SETTING
    """The setting a refusal names: ``triton.restricted_api`` in the sidecar YAML, or a
    command's flags (``--restricted-api``: ``--restricted-api-header``, ``-key-file``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.header, str) or not _HEADER.match(self.header):
            where = _field(self.setting, "header")
            raise ConfigError(
                f"{where} = {self.header!r}: must be a header name of lower-case letters, digits "
                "and '-' (at most 63), as given to --http-restricted-api; gRPC cannot send capitals",
                field=where, value=self.header,
            )

    @classmethod
    def from_file(cls, header: str, key_file: str | Path, *, setting: str = SETTING) -> RestrictedApi:
        """Read the key from ``key_file`` (surrounding whitespace stripped). An unreadable,
        empty or unsendable key is a one-line ``ConfigError`` that never quotes the key."""
        path = Path(key_file)
        where = _field(setting, "key_file")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{where} = '{path}': cannot read the key: {exc.strerror or exc}",
                              field=where, value=str(path)) from exc
        try:
            key = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{where} = '{path}': the key is not UTF-8 text (byte {exc.start})",
                              field=where, value=str(path)) from exc
        if not key:
            raise ConfigError(f"{where} = '{path}': the file is empty; put the key Triton was started "
                              "with in it (e.g. `openssl rand -hex 32`)", field=where, value=str(path))
        # A header value is one line of visible ASCII (RFC 9110); say where, never what.
        bad = next((i for i, c in enumerate(key) if not (c.isascii() and c.isprintable()) or c.isspace()),
                   None)
        if bad is not None:
            raise ConfigError(f"{where} = '{path}': character {bad + 1} of the key is not visible ASCII; "
                              "a header cannot carry it", field=where, value=str(path))
        return cls(header, key, path, setting)

    @property
    def http_headers(self) -> dict[str, str]:
        """What an HTTP request to a restricted API sends."""
        return {self.header: self.key}

    @property
    def grpc_headers(self) -> dict[str, str]:
        """What a gRPC call to a restricted protocol sends (tritonclient's ``headers=``)."""
        return {GRPC_PREFIX + self.header: self.key}

    def redact(self, text: str) -> str:
        """``text`` with the key replaced: for messages built from what a server answered."""
        return text.replace(self.key, "<key>") if self.key else text


def _field(setting: str, name: str) -> str:
    """``triton.restricted_api.key_file`` in YAML, ``--restricted-api-key-file`` as a flag."""
    return f"{setting}-{name.replace('_', '-')}" if setting.startswith("--") else f"{setting}.{name}"


def http_headers(api: RestrictedApi | None) -> dict[str, str]:
    """The headers for an HTTP request to Triton's restricted APIs (none without a key)."""
    return api.http_headers if api is not None else {}


def expected_header(text: str) -> str | None:
    """The header Triton's refusal names, if ``text`` is one (HTTP or gRPC), else None."""
    m = _REFUSED.search(text)
    return m.group(1) if m else None


def refusal(what: str, text: str, api: RestrictedApi | None) -> str | None:
    """One line saying that Triton refused ``what`` for want of the restricted-API key and
    naming the setting to fix; None when ``text`` is not such a refusal."""
    wanted = expected_header(text)
    if wanted is None:
        return None
    header = wanted.removeprefix(GRPC_PREFIX)
    setting = api.setting if api is not None else SETTING
    if api is None:
        return (f"Triton refused {what}: the API is restricted and expects the header {header!r}; "
                f"set {setting} (header: {header}, key_file: a file holding Triton's key)")
    if api.header != header.lower():
        return (f"Triton refused {what}: the API is restricted and expects the header {header!r}, "
                f"but {_field(setting, 'header')} is {api.header!r}")
    return (f"Triton refused {what}: the key in {_field(setting, 'key_file')} ({api.key_file}) is not "
            f"the one Triton was started with for the header {header!r}")
