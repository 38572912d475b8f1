"""HAProxy as the gateway: weights through its Runtime API (the stats socket).

Commands used, each on a connection of its own (HAProxy answers one command
line and closes, unless told to stay interactive):

* ``set server <backend>/<server> weight <0..256>``: answered with an empty
  line on success, a sentence on failure (``No such server.``, ``Permission
  denied``); several commands go in one line, separated by ``;``.
* ``show servers state <backend>``: a version line (``1``), a ``#`` header naming
  the columns, and one line per server. ``srv_uweight`` is the weight in force.
* ``show stat <backend> 4 -1``: per-server CSV counters; ``econ``, ``eresp``,
  ``srv_abrt`` and ``hrsp_5xx`` count the requests to that server that failed,
  ``wretr`` and ``wredis`` the connection attempts HAProxy retried or sent
  elsewhere. The retries matter: after a refused connection HAProxy waits a
  second before each of its ``retries`` (3), so a request to a dead server
  fails (``econ``) only seconds later, after a short guard step has ended,
  while each retry is counted at once.

What HAProxy 2.6 does with a new weight (it takes effect for the next request;
a restart starts from the config file's weights; ``set server`` needs ``level
admin``): docs/gateway.md, "What HAProxy does".

The socket's errors are translated here (``OSError``, timeouts -> reason
``unreachable``; an error sentence from HAProxy -> ``rejected``), so the
actuator only ever sees :class:`~autobatch.actuators.gateway.backend.GatewayFailure`.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass

from autobatch.actuators.gateway.backend import GatewayFailure
from autobatch.errors import ConfigError

__all__ = [
    "HAProxyRuntime",
    "HAProxyWeights",
    "ServerState",
    "parse_servers_state",
    "parse_stat_failures",
]

MAX_WEIGHT = 256
"""HAProxy's largest absolute server weight."""

_OP_STATES_SERVING = (1, 2)
"""srv_op_state: 0 stopped, 1 starting, 2 running, 3 stopping."""
_ADMIN_NOT_SERVING = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40
"""srv_admin_state bits: forced/inherited/config maintenance, forced/inherited
drain, resolution and hostname maintenance; each keeps new requests away."""

_FAILURE_COLUMNS = ("econ", "eresp", "srv_abrt", "hrsp_5xx", "wretr", "wredis")


@dataclass(frozen=True)
class ServerState:
    """One server's line of ``show servers state``."""

    backend: str
    server: str
    weight: int
    """``srv_uweight``: the weight in force (set at runtime or from the config)."""
    initial_weight: int
    """``srv_iweight``: the weight of the config file."""
    op_state: int
    admin_state: int

    @property
    def serving(self) -> bool:
        """Whether HAProxy sends it new requests at all (up, not in maintenance or drain)."""
        return self.op_state in _OP_STATES_SERVING and not self.admin_state & _ADMIN_NOT_SERVING

    @property
    def effective_weight(self) -> int:
        return self.weight if self.serving else 0


def _error_text(text: str) -> str | None:
    """HAProxy's error sentence in an answer, or None for an answer that is data or empty."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join(lines) if lines else None


def parse_servers_state(text: str, backend: str) -> dict[str, ServerState]:
    """The servers of ``backend`` from the answer to ``show servers state <backend>``.

    Columns are found by the header's names, so a later format with more
    columns still parses. Raises :class:`GatewayFailure` on an error answer.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header = next((ln for ln in lines if ln.startswith("#")), None)
    if not lines or header is None or lines[0].strip() != "1":
        err = _error_text(text) or "an empty answer"
        reason = "unavailable" if "find backend" in err else "rejected"
        raise GatewayFailure(
            f"HAProxy answered `show servers state {backend}` with {err!r}"
            + (f"; is {backend!r} a backend in its config?" if reason == "unavailable" else ""),
            reason=reason,
        )
    columns = header.lstrip("#").split()
    need = ("be_name", "srv_name", "srv_op_state", "srv_admin_state", "srv_uweight", "srv_iweight")
    missing = [c for c in need if c not in columns]
    if missing:
        raise GatewayFailure(
            f"`show servers state` has no column {missing[0]!r}; this HAProxy's format is not "
            f"understood (columns: {' '.join(columns)})",
            reason="rejected",
        )
    at = {c: columns.index(c) for c in need}
    out: dict[str, ServerState] = {}
    for ln in lines:
        if ln.startswith("#") or ln.strip() == "1":
            continue
        fields = ln.split()
        if len(fields) <= max(at.values()):
            raise GatewayFailure(f"`show servers state` line {ln!r} is too short", reason="rejected")
        if fields[at["be_name"]] != backend:
            continue
        try:
            state = ServerState(
                backend=backend,
                server=fields[at["srv_name"]],
                weight=int(fields[at["srv_uweight"]]),
                initial_weight=int(fields[at["srv_iweight"]]),
                op_state=int(fields[at["srv_op_state"]]),
                admin_state=int(fields[at["srv_admin_state"]]),
            )
        except ValueError as exc:
            raise GatewayFailure(
                f"`show servers state` line {ln!r} has a non-number where a number belongs",
                reason="rejected",
            ) from exc
        out[state.server] = state
    return out


def parse_stat_failures(text: str, backend: str) -> dict[str, int]:
    """Failed requests and retried connections per server of ``backend`` (``show stat`` CSV).

    The sum of ``econ`` (connection errors), ``eresp`` (response errors),
    ``srv_abrt`` (aborted by the server), ``hrsp_5xx``, ``wretr`` (retried
    connections) and ``wredis`` (redispatched away); empty cells count 0.
    """
    lines = text.splitlines()
    header_at = next((i for i, ln in enumerate(lines) if ln.startswith("# ")), None)
    if header_at is None:
        raise GatewayFailure(
            f"HAProxy answered `show stat` with {_error_text(text) or 'nothing'!r}", reason="rejected"
        )
    body = "\n".join([lines[header_at][2:], *lines[header_at + 1 :]])
    out: dict[str, int] = {}
    for row in csv.DictReader(io.StringIO(body)):
        if row.get("pxname") != backend or row.get("svname") in (None, "FRONTEND", "BACKEND"):
            continue
        total = 0
        for col in _FAILURE_COLUMNS:
            value = (row.get(col) or "").strip()
            if value.isdigit():
                total += int(value)
        out[str(row["svname"])] = total
    return out


class HAProxyRuntime:
    """A client of HAProxy's Runtime API: one command line per connection.

    Args:
        address: the ``stats socket``: a path (``/run/haproxy/admin.sock``, or
            ``unix@PATH``) or ``HOST:PORT`` (``ipv4@HOST:PORT`` in HAProxy's config).
        timeout_s: for connecting and for the whole answer. HAProxy answers in
            milliseconds; a socket that accepts and then says nothing is broken.
    """

    def __init__(self, address: str, *, timeout_s: float = 2.0) -> None:
        if not isinstance(address, str) or not address.strip():
            raise ConfigError(f"socket = {address!r}: must be a socket path or HOST:PORT", field="socket")
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s = {timeout_s!r}: must be > 0 seconds", field="timeout_s")
        a = address.strip()
        self.address = a
        self.timeout_s = float(timeout_s)
        self._path: str | None = None
        self._host: str | None = None
        self._port: int | None = None
        for prefix in ("unix@", "unix://"):
            if a.startswith(prefix):
                self._path = a[len(prefix):]
                return
        for prefix in ("ipv4@", "tcp://"):
            if a.startswith(prefix):
                a = a[len(prefix):]
                break
        host, sep, port = a.rpartition(":")
        if "/" not in a and sep and port.isdigit():
            self._host, self._port = host.strip("[]"), int(port)
        else:
            self._path = a

    def __repr__(self) -> str:
        return f"HAProxyRuntime({self.address!r})"

    async def execute(self, command: str) -> str:
        """Send one command line, return the whole answer. Raises :class:`GatewayFailure`."""
        if "\n" in command:
            raise ValueError("one command line only; separate several commands with ';'")
        try:
            return await asyncio.wait_for(self._exchange(command), self.timeout_s)
        except asyncio.TimeoutError as exc:
            raise GatewayFailure(
                f"the HAProxy runtime API at {self.address} did not answer within {self.timeout_s:g} s",
                reason="timeout",  # it hangs, as against refusing: the sidecar's liveness counts it
            ) from exc
        except FileNotFoundError as exc:
            raise GatewayFailure(
                f"no HAProxy runtime socket at {self.address}: is haproxy running with "
                f"`stats socket {self.address} level admin` in its global section?",
                reason="unreachable",
            ) from exc
        except PermissionError as exc:
            raise GatewayFailure(
                f"permission denied on the HAProxy socket {self.address} (its `mode` allows only "
                "its owner or group): run autobatch as that user",
                reason="unreachable",
            ) from exc
        except ConnectionRefusedError as exc:
            raise GatewayFailure(
                f"nothing listens on the HAProxy socket {self.address} (haproxy stopped?)",
                reason="unreachable",
            ) from exc
        except OSError as exc:
            raise GatewayFailure(
                f"the HAProxy runtime API at {self.address} failed: {exc.strerror or exc}",
                reason="unreachable",
            ) from exc

    async def _exchange(self, command: str) -> str:
        if self._path is not None:
            reader, writer = await asyncio.open_unix_connection(self._path)
        else:
            reader, writer = await asyncio.open_connection(self._host, self._port)
        try:
            writer.write(command.encode() + b"\n")
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return data.decode("utf-8", errors="replace")


class HAProxyWeights:
    """The weights of some servers of one HAProxy backend, as a
    :class:`~autobatch.actuators.gateway.backend.WeightsBackend`.

    Args:
        runtime: the Runtime API client.
        backend: the backend whose servers are the variants (``balance roundrobin``
            or ``random``: algorithms whose weights can change at runtime).
        weight_scale: the HAProxy weight meaning 100 % (1..256). 100 makes the
            weights read as percents in ``show servers state``.
    """

    kind = "haproxy"
    changes_traffic = True

    def __init__(self, runtime: HAProxyRuntime, backend: str, *, weight_scale: int = 100) -> None:
        if not isinstance(weight_scale, int) or not 1 <= weight_scale <= MAX_WEIGHT:
            raise ConfigError(
                f"weight_scale = {weight_scale!r}: must be an integer in [1, {MAX_WEIGHT}]",
                field="weight_scale", value=weight_scale,
            )
        self.runtime = runtime
        self.backend = backend
        self.weight_scale = weight_scale

    async def servers(self) -> dict[str, ServerState]:
        text = await self.runtime.execute(f"show servers state {self.backend}")
        return parse_servers_state(text, self.backend)

    async def read(self) -> dict[str, float]:
        return {name: float(s.effective_weight) for name, s in (await self.servers()).items()}

    async def write(self, weights: Mapping[str, int]) -> None:
        current = await self.servers()
        unknown = [t for t in weights if t not in current]
        if unknown:
            raise GatewayFailure(
                f"backend {self.backend!r} has no server {unknown[0]!r} (it has: "
                f"{', '.join(sorted(current)) or 'none'})",
                reason="unavailable",
            )
        wanted = {t: round(p * self.weight_scale / 100) for t, p in weights.items()}
        # Raise weights before lowering others: the other order can leave every
        # server at 0 for a moment, and a request arriving then gets a 503.
        order = sorted(wanted, key=lambda t: wanted[t] <= current[t].weight)
        line = "; ".join(f"set server {self.backend}/{t} weight {wanted[t]}" for t in order)
        answer = await self.runtime.execute(line)
        err = _error_text(answer)
        if err is not None:
            hint = " (the stats socket needs `level admin`)" if "ermission" in err else ""
            raise GatewayFailure(f"HAProxy refused `{line}`: {err}{hint}", reason="rejected")

    async def failure_count(self, target: str) -> float | None:
        text = await self.runtime.execute(f"show stat {self.backend} 4 -1")
        counts = parse_stat_failures(text, self.backend)
        return float(counts[target]) if target in counts else None

    async def aclose(self) -> None:
        return None
