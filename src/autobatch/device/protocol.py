"""The emulated device's wire protocol: one TCP connection per client context, one line a message.

A client opens a connection, names its context and submits jobs; the device
answers each job when it completes. Jobs of one connection complete in the
order they were sent (a context runs its jobs one after another), so a client
may send several before reading (an open-loop co-tenant does)::

    client: HELLO autobatch-device/1 emulated_accelerator_0_0
    device: READY gpu0 timeslice 8812.402117   # its CLOCK_MONOTONIC reading, s
    client: RUN 1 12.96 8 8813.905011   # job id, work ms of the device alone, items, sent at
    device: DONE 1 1503.211 1503.211 1516.171   # submitted, started, finished (device clock, ms)
    client: RUN 2 -3 1
    device: FAIL 2 work_ms = -3.0: must be a number > 0

A client whose clock read the READY's between sending HELLO and reading READY
shares the device's clock (one machine) and stamps each RUN with when it sent it
(optional field): the device starts it from then, not from when the line came.

A malformed line or a refused HELLO gets ``ERROR <message>`` and the connection
closes. Text, not a binary format: a job is milliseconds of emulated work, and
a line costs microseconds to parse.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autobatch.errors import ConfigError

__all__ = [
    "MAX_LINE",
    "PROTOCOL",
    "Address",
    "Done",
    "check_context",
    "parse_address",
]

PROTOCOL = "autobatch-device/1"
MAX_LINE = 4096
"""The longest line either side sends; a longer one is a broken peer."""

CONTEXT_RE = re.compile(r"^[A-Za-z0-9_.:@/+-]{1,128}$")


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str, field: str = "device") -> Address:
    """``HOST:PORT`` (``127.0.0.1:9410``) as an :class:`Address`; a ConfigError naming
    ``field`` and the value otherwise. Port 0 is allowed where a server picks a free one."""
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"{field} = {text!r}: must be HOST:PORT (e.g. 127.0.0.1:9410)",
                          field=field, value=text)
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not host or not 0 <= port <= 65535:
        raise ConfigError(f"{field} = {text!r}: must be HOST:PORT with a port 0-65535 "
                          "(e.g. 127.0.0.1:9410)", field=field, value=text)
    return Address(host, port)


def check_context(name: str, field: str = "context") -> str:
    """A context name as the protocol carries it: 1-128 of letters, digits and ``_.:@/+-``."""
    if not isinstance(name, str) or not CONTEXT_RE.match(name):
        raise ConfigError(f"{field} = {name!r}: must be 1-128 letters, digits or _.:@/+- "
                          "(no spaces)", field=field, value=name)
    return name


@dataclass(frozen=True)
class Done:
    """One job as the device ran it (times on the device's clock, ms since it started)."""

    job: int
    submitted_ms: float
    started_ms: float
    finished_ms: float

    @property
    def device_ms(self) -> float:
        """From submission to completion on the device: the work stretched by whatever shared
        the device, plus any wait behind the context's own earlier jobs."""
        return self.finished_ms - self.submitted_ms


def hello(context: str) -> bytes:
    return f"HELLO {PROTOCOL} {context}\n".encode()


def run(job: int, work_ms: float, items: int, sent_s: float | None = None) -> bytes:
    at = "" if sent_s is None else f" {sent_s:.6f}"
    return f"RUN {job} {work_ms!r} {items}{at}\n".encode()


def done(job: int, submitted_ms: float, started_ms: float, finished_ms: float) -> bytes:
    return f"DONE {job} {submitted_ms:.4f} {started_ms:.4f} {finished_ms:.4f}\n".encode()


def fail(job: int, message: str) -> bytes:
    return f"FAIL {job} {_one_line(message)}\n".encode()


def error(message: str) -> bytes:
    return f"ERROR {_one_line(message)}\n".encode()


def ready(name: str, policy: str, clock_s: float) -> bytes:
    return f"READY {name} {policy} {clock_s:.6f}\n".encode()


def parse_ready(rest: str) -> tuple[str, str, float | None]:
    """(name, policy, clock_s) of what follows READY; a device that sends no clock reading
    gives None (its clients then send no instants)."""
    parts = rest.split()
    if len(parts) not in (2, 3):
        raise ValueError(f"malformed READY line from the device: {rest[:80]!r}")
    try:
        clock = float(parts[2]) if len(parts) == 3 else None
    except ValueError:
        raise ValueError(f"malformed READY line from the device: {rest[:80]!r}") from None
    return parts[0], parts[1], clock


def _one_line(text: str) -> str:
    return " ".join(text.split())[:MAX_LINE - 64]


def parse_hello(line: str) -> str:
    """The context a HELLO line names; ValueError saying what is wrong otherwise."""
    parts = line.split()
    if len(parts) != 3 or parts[0] != "HELLO":
        raise ValueError(f"expected 'HELLO {PROTOCOL} CONTEXT', got {line[:80]!r}")
    if parts[1] != PROTOCOL:
        raise ValueError(f"protocol {parts[1]!r} is not spoken here (this device speaks {PROTOCOL})")
    try:
        return check_context(parts[2])
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def parse_run(line: str) -> tuple[int, float, int, float | None]:
    """(job, work_ms, items, sent_s) of a RUN line (``sent_s`` None where the client sent no
    instant); ValueError naming what is wrong otherwise. A ``work_ms`` that parses but is
    not > 0 comes back as is: the device refuses that job alone (FAIL), the connection stays."""
    parts = line.split()
    if len(parts) not in (4, 5) or parts[0] != "RUN":
        raise ValueError(f"expected 'RUN JOB WORK_MS ITEMS [SENT_S]', got {line[:80]!r}")
    try:
        job, work_ms, items = int(parts[1]), float(parts[2]), int(parts[3])
        sent_s = float(parts[4]) if len(parts) == 5 else None
    except ValueError:
        raise ValueError(f"expected 'RUN JOB WORK_MS ITEMS [SENT_S]' with numbers, "
                         f"got {line[:80]!r}") from None
    if items < 1:
        raise ValueError(f"items = {items}: must be >= 1")
    if sent_s is not None and not math.isfinite(sent_s):
        raise ValueError(f"sent_s = {parts[4]}: must be a finite number of seconds")
    return job, work_ms, items, sent_s


def work_problem(work_ms: float) -> str | None:
    if not (math.isfinite(work_ms) and work_ms > 0):
        return f"work_ms = {work_ms!r}: must be a number > 0"
    return None


def parse_reply(line: str) -> tuple[str, int | None, str]:
    """(kind, job, rest) of a device line: ``READY``, ``DONE``, ``FAIL`` or ``ERROR``."""
    kind, _, rest = line.partition(" ")
    if kind in ("DONE", "FAIL"):
        job_text, _, rest = rest.partition(" ")
        try:
            return kind, int(job_text), rest
        except ValueError:
            raise ValueError(f"malformed {kind} line from the device: {line[:80]!r}") from None
    if kind in ("READY", "ERROR"):
        return kind, None, rest
    raise ValueError(f"unexpected line from the device: {line[:80]!r}")


def parse_done(job: int, rest: str) -> Done:
    try:
        submitted, started, finished = (float(x) for x in rest.split())
    except ValueError:
        raise ValueError(f"malformed DONE line from the device: {rest[:80]!r}") from None
    return Done(job, submitted, started, finished)
