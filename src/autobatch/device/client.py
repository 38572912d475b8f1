"""A client context of the emulated device: one connection, jobs submitted and awaited.

>>> with DeviceClient("127.0.0.1:9410", "my-model") as dev:   # doctest: +SKIP
...     done = dev.run(12.96, items=1)   # blocks until the device has run it
...     done.device_ms

Every wait is bounded: connecting by ``connect_timeout_s``, each job by
``timeout_s``. A device that is gone, closes the connection or does not answer
in time raises :class:`~autobatch.errors.DeviceError` naming the address and
the context, and the connection is dropped (a late answer would pair with the
wrong job); the next call connects again, so a restarted device is picked up.

One thread may submit while another waits (an open-loop client); a single
thread calls :meth:`run`. Imports nothing heavy: the Python-backend stub of
the emulated model loads it.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from autobatch.device import protocol
from autobatch.device.protocol import Address, Done, check_context, parse_address
from autobatch.errors import DeviceError

__all__ = ["DeviceClient", "DeviceInfo", "check_device", "next_read"]

CONNECT_TIMEOUT_S = 2.0
"""Long enough for a device on a loaded machine to accept; short enough that a model load
pointed at a dead address fails at once."""
JOB_TIMEOUT_S = 30.0
"""The longest a job may take from submission to its answer. A batch of tens of ms stretched
by a few co-tenants takes well under a second; only a stopped or hung device takes this."""
SPIN_S = 0.0003
"""From this long before a job can first complete, :meth:`DeviceClient.run` polls for its
answer instead of sleeping in a read: a thread woken on an idle (virtual) core comes a
fraction of a millisecond late (2026-12-02: 0.6 ms more through Triton with the cores idle
than busy). CUDA's default wait on a GPU spins likewise (``cudaDeviceScheduleAuto``)."""
SPIN_LIMIT_S = 0.001
"""How long past that earliest completion it keeps polling before it reads blocking again: a
job stretched by other contexts ends later, and a spinning client would take their core."""
TIMEOUT_GRAIN_S = 0.001
"""A socket's timeout waits whole milliseconds, rounded up (CPython's ``poll()``): a read
before the poll is given this much less than the way there, and the rest is slept exactly."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the device said when the context connected."""

    name: str
    policy: str
    shared_clock: bool = False
    """Whether the device reads the client's clock (CLOCK_MONOTONIC is one per machine): its
    reading in READY fell between the HELLO's sending and the READY's arrival. Then each
    job carries when it was sent, and the device starts it from then."""


class DeviceClient:
    """One context of an emulated device (see the module docstring)."""

    def __init__(
        self,
        address: str | Address,
        context: str,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        timeout_s: float = JOB_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address if isinstance(address, Address) else parse_address(address)
        self.context = check_context(context)
        self.connect_timeout_s = float(connect_timeout_s)
        self.timeout_s = float(timeout_s)
        self.clock = clock
        self.info: DeviceInfo | None = None
        self._sock: socket.socket | None = None
        self._buf = b""
        self._next_job = 1
        self._send_lock = threading.Lock()

    # -- connection --------------------------------------------------------------------
    def _where(self) -> str:
        return f"the device at {self.address} (context {self.context})"

    def connect(self) -> DeviceInfo:
        """Connect and introduce the context (again, after a failure); returns what the
        device said. Raises :class:`DeviceError` if nobody answers."""
        self.close()
        try:
            sock = socket.create_connection((self.address.host, self.address.port),
                                            timeout=self.connect_timeout_s)
        except OSError as exc:
            raise DeviceError(f"cannot connect to {self._where()}: {exc.strerror or exc}; "
                              "is `autobatch device` running there?") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buf = sock, b""
        try:
            hello_s = self.clock()
            sock.sendall(protocol.hello(self.context))
            line = self._read_line(self.connect_timeout_s)
            ready_s = self.clock()
            kind, _, rest = protocol.parse_reply(line)
            if kind == "READY":
                name, policy, clock_s = protocol.parse_ready(rest)
        except (OSError, ValueError) as exc:
            self.close()
            raise DeviceError(f"{self._where()} did not greet back: {exc}") from exc
        except DeviceError:
            self.close()
            raise
        if kind != "READY":
            self.close()
            raise DeviceError(f"{self._where()} refused the connection: {rest}")
        # 1 us either side: the line carries the reading to the microsecond
        shared = clock_s is not None and hello_s - 1e-6 <= clock_s <= ready_s + 1e-6
        self.info = DeviceInfo(name, policy, shared)
        return self.info

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> DeviceClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs --------------------------------------------------------------------------
    def submit(self, work_ms: float, items: int = 1) -> int:
        """Send a job of ``work_ms`` (ms of the device alone) for a batch of ``items``; returns
        its id. Its answer comes, in submission order, from :meth:`wait`."""
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        job = self._next_job
        self._next_job += 1
        shared = self.info is not None and self.info.shared_clock
        try:
            with self._send_lock:
                sent = self.clock() if shared else None
                self._sock.sendall(protocol.run(job, float(work_ms), int(items), sent))
        except OSError as exc:
            self.close()
            raise DeviceError(f"{self._where()} closed the connection: {exc.strerror or exc}") from exc
        return job

    def wait(self, timeout_s: float | None = None, *, due_s: float | None = None) -> Done:
        """The next job's answer, in submission order, within ``timeout_s`` (default: the
        client's). A job the device refused raises :class:`DeviceError` with its reason.
        ``due_s``: the earliest the answer can come (on the client's clock): from
        :data:`SPIN_S` before it to :data:`SPIN_LIMIT_S` after, the wait polls."""
        if self._sock is None:
            raise DeviceError(f"{self._where()}: not connected (a previous error dropped the "
                              "connection; submit again)")
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            line = self._read_line(limit, due_s)
            kind, job, rest = protocol.parse_reply(line)
        except ValueError as exc:
            self.close()
            raise DeviceError(f"{self._where()}: {exc}") from exc
        except DeviceError:
            self.close()
            raise
        if kind == "DONE" and job is not None:
            try:
                return protocol.parse_done(job, rest)
            except ValueError as exc:
                self.close()
                raise DeviceError(f"{self._where()}: {exc}") from exc
        if kind == "FAIL":
            raise DeviceError(f"{self._where()} refused job {job}: {rest}")
        self.close()
        raise DeviceError(f"{self._where()} ended the connection: {rest}")

    def run(self, work_ms: float, items: int = 1) -> Done:
        """Submit one job and wait for it: what a model instance does for each batch. A
        connection that broke since the last job is made again first."""
        sent = self.clock()
        self.submit(work_ms, items)
        return self.wait(due_s=sent + float(work_ms) / 1000.0)  # no job ends before its work

    def _read_line(self, limit_s: float, due_s: float | None = None) -> str:
        assert self._sock is not None
        sock = self._sock
        deadline = self.clock() + limit_s
        while b"\n" not in self._buf:
            now = self.clock()
            left = deadline - now
            if left <= 0:
                raise DeviceError(f"{self._where()} did not answer within "
                                  f"{limit_s:g} s: it may be stopped or hung", timed_out=True)
            how, wait_s = next_read(now, deadline, due_s)
            if how == "sleep":
                time.sleep(wait_s)
                continue
            sock.settimeout(wait_s)
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                if how == "poll":
                    time.sleep(0)  # lets the other threads of this process run
                continue
            except OSError as exc:
                raise DeviceError(f"{self._where()} dropped the connection: "
                                  f"{exc.strerror or exc}") from exc
            if not chunk:
                raise DeviceError(f"{self._where()} closed the connection (did it stop?)")
            self._buf += chunk
            if len(self._buf) > protocol.MAX_LINE and b"\n" not in self._buf:
                raise DeviceError(f"{self._where()} sent a line longer than {protocol.MAX_LINE} bytes")
        sock.settimeout(self.timeout_s)  # not left non-blocking for the next sendall
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode(errors="replace").strip()


def next_read(now_s: float, deadline_s: float, due_s: float | None) -> tuple[str, float]:
    """How :meth:`DeviceClient.wait` waits next, at ``now_s`` (before ``deadline_s``), for an
    answer that cannot come before ``due_s`` (None: unknown): ``("poll", 0.0)``, a read that
    does not block; ``("read", s)``, a read blocking at most ``s``; ``("sleep", s)``, a sleep of
    exactly ``s``, where a read would overshoot the poll's start (:data:`TIMEOUT_GRAIN_S`)."""
    left = deadline_s - now_s
    spin_from = math.inf if due_s is None else due_s - SPIN_S
    if spin_from <= now_s < spin_from + SPIN_S + SPIN_LIMIT_S:
        return "poll", 0.0
    until = spin_from - now_s
    if until <= 0 or left <= until:
        return "read", left
    if until <= TIMEOUT_GRAIN_S:
        return "sleep", until  # no answer comes meanwhile, only a refusal: read right after
    return "read", until - TIMEOUT_GRAIN_S


def check_device(address: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> DeviceInfo:
    """Whether an emulated device answers at ``address``: its name and policy, or a
    :class:`DeviceError` (a ConfigError for an address that is not HOST:PORT). Called before
    anything points a server at it, so a dead address changes nothing."""
    addr = parse_address(address)
    client = DeviceClient(addr, "autobatch-check", connect_timeout_s=timeout_s, timeout_s=timeout_s)
    try:
        return client.connect()
    finally:
        client.close()
