"""The emulated device: one GPU that many clients share, in real time.

It runs :class:`~autobatch.sharing.DeviceScheduler` (the model the simulator
runs too) against the clock: the scheduler thread sleeps until the next
completion the model predicts, spins the last fraction of a millisecond, then
advances the model to the time it reads. A late wake-up delays the answers by
the lateness alone: the model's virtual time does not slip, so the next job
starts when it should have. Nothing depends on the CPU's speed except how
promptly the OS wakes the thread.

A job carries when its client sent it (one machine, one CLOCK_MONOTONIC): on
an idle device it starts from then, so the way over loopback, a kernel launch's
microseconds on a GPU, is not device time.

Threads: one accepts connections, one per connection reads its jobs, one runs
the schedule, and the metrics endpoint serves ``/metrics``, ``/status``,
``/jobs`` and ``/healthz``. One lock guards the model; every advance goes through
:meth:`DeviceServer._advance`, which also closes the utilisation periods at
their exact boundaries and sends each completed job's answer.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from autobatch.device import protocol
from autobatch.device.metrics import (
    LATENESS_BUCKETS_MS,
    ContextSnapshot,
    DeviceSnapshot,
    Lateness,
    dcgm_labels,
    families,
)
from autobatch.device.protocol import Address
from autobatch.device.settings import DeviceSettings
from autobatch.errors import ConfigError, DeviceError
from autobatch.sharing import Completion, DeviceScheduler

__all__ = ["DeviceServer", "raise_priority"]

log = logging.getLogger(__name__)

SPIN_S = 0.0003
"""The tail of each wait that is spun rather than slept: a sleep overshoots by tens of
microseconds (more on a loaded machine); the spin yields the GIL at every turn."""
HELLO_TIMEOUT_S = 5.0
IDLE_WAKE_S = 0.5
"""How often an idle scheduler thread looks whether it should stop."""
RECENT_LATENESS = 1000
"""Answers whose lateness /status summarises (p50/p95/max)."""
RECENT_JOBS = 2000
"""Completed jobs ``/jobs`` lists, newest last."""
MAX_TRANSIT_MS = 1000.0
"""A sent instant older than this on arrival is no loopback's delay but a garbled line or a
clock that is not the device's (the client's handshake should have seen that): the arrival
counts instead."""


@dataclass
class _Stats:
    jobs: int = 0
    items: int = 0


class _Conn:
    """One client connection: its socket, and whether it is still there."""

    def __init__(self, sock: socket.socket, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self.context: str | None = None
        self.open = True

    def send(self, data: bytes) -> None:
        """Send without blocking: the scheduler thread sends answers, and a client that
        does not read them must not stall the device. Such a client is dropped."""
        if not self.open:
            return
        try:
            sent = self.sock.send(data, socket.MSG_DONTWAIT)
        except OSError:
            sent = -1
        if sent != len(data):
            self.close()

    def close(self) -> None:
        if self.open:
            self.open = False
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self.sock.close()


REALTIME_PRIORITY = 10
"""SCHED_FIFO priority of the device process: above every ordinary process, below the
kernel's own threads (50 and up); the kernel's RT throttling keeps 5% of each core for the
rest whatever happens."""
NICE_HIGH = -10


def raise_priority(kind: str) -> str:
    """Raise this process's CPU priority as ``kind`` asks (``realtime``, ``high``, ``normal``);
    returns what it got, in words (``SCHED_FIFO 10``, ``nice -10``, ``normal: ...why``). Call it
    before any thread starts: threads inherit their creator's scheduling."""
    if kind == "realtime":
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
            return f"SCHED_FIFO {REALTIME_PRIORITY}"
        except (OSError, AttributeError):
            kind = "high"  # no CAP_SYS_NICE, or not Linux: the next best
    if kind == "high":
        try:
            os.nice(NICE_HIGH - os.nice(0))
            return f"nice {os.nice(0)}"
        except OSError as exc:
            return f"normal (could not raise it: {exc.strerror or exc})"
    return "normal"


class DeviceServer:
    """An emulated device on two ports (jobs, metrics), as a context manager.

    >>> with DeviceServer(DeviceSettings()) as dev:   # doctest: +SKIP
    ...     dev.job_address, dev.metrics_url
    """

    def __init__(self, settings: DeviceSettings, *, clock: Callable[[], float] = time.monotonic,
                 hostname: str | None = None, priority: str = "as started") -> None:
        self.settings = settings
        self.priority = priority
        """What :func:`raise_priority` got for this process (shown in /status)."""
        self._clock = clock
        self._t0 = clock()
        self._cond = threading.Condition()
        self._sched = DeviceScheduler(settings.sharing)
        self._generation = 0
        self._stopping = threading.Event()
        self._conns: set[_Conn] = set()
        self._stats: dict[str, _Stats] = {}
        """By context, from its first job (a connection that only checks the device adds none)."""
        self._connections: dict[str, int] = {}
        self._period_ms = settings.util_period_ms
        self._next_boundary_ms = self._period_ms
        self._last_util: float | None = None
        self._busy_at_boundary = 0.0
        # How late each answer went out after its job's exact completion time: what the OS's
        # wake-ups cost the emulation (the device's accuracy, as a live signal).
        self._late_buckets = [0] * (len(LATENESS_BUCKETS_MS) + 1)
        self._late_sum_ms = 0.0
        self._late_recent: deque[float] = deque(maxlen=RECENT_LATENESS)
        self._jobs_seen = 0
        self._recent_jobs: deque[tuple[Any, ...]] = deque(maxlen=RECENT_JOBS)
        self._labels = dcgm_labels(settings.name, hostname)
        self._listener: socket.socket | None = None
        self._http: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self.job_address: Address | None = None
        self.metrics_address: Address | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> DeviceServer:
        """Bind both ports and start serving; a port in use is a DeviceError naming it."""
        s = self.settings
        listener = _bind(s.listen, "listen")
        try:
            self._http = _bind_http(s.metrics, self)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self.job_address = Address(s.listen.host, listener.getsockname()[1])
        self.metrics_address = Address(s.metrics.host, self._http.server_address[1])
        self._t0 = self._clock()
        for target, name in ((self._accept_loop, "accept"), (self._schedule_loop, "schedule"),
                             (self._http.serve_forever, "metrics")):
            t = threading.Thread(target=target, name=f"device-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    @property
    def metrics_url(self) -> str:
        assert self.metrics_address is not None, "not started"
        return f"http://{self.metrics_address}/metrics"

    def stop(self) -> None:
        """Stop accepting, drop every connection (their clients see the device close), stop
        the threads."""
        self._stopping.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._cond:
            for conn in list(self._conns):
                conn.close()
            self._cond.notify_all()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5.0)
        self._threads.clear()

    def __enter__(self) -> DeviceServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def request_stop(self) -> None:
        """Make :meth:`wait` return (safe in a signal handler); :meth:`stop` then stops."""
        self._stopping.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until :meth:`stop` (from another thread or a signal handler); True if stopped."""
        return self._stopping.wait(timeout_s)

    # -- the model, in real time -----------------------------------------------------------
    def now_ms(self) -> float:
        return (self._clock() - self._t0) * 1000.0

    def _advance(self, now_ms: float) -> None:
        """Run the model to ``now_ms`` (lock held): close the utilisation periods on the way
        at their exact boundaries, and answer every job completed."""
        done: list[Completion] = []
        while self._next_boundary_ms <= now_ms:
            done += self._sched.advance(self._next_boundary_ms)
            busy = self._sched.usage().busy_ms
            self._last_util = min(1.0, max(0.0, (busy - self._busy_at_boundary) / self._period_ms))
            self._busy_at_boundary = busy
            self._next_boundary_ms += self._period_ms
        done += self._sched.advance(now_ms)
        self._answer(done, now_ms)

    def _answer(self, done: list[Completion], now_ms: float) -> None:
        """Send each completed job's answer and count how late it went out (lock held)."""
        for c in done:
            conn, job, items = c.job  # type: ignore[misc]
            st = self._stats[c.context]
            st.jobs += 1
            st.items += items
            conn.send(protocol.done(job, c.submitted_ms, c.started_ms, c.finished_ms))
            late = max(0.0, now_ms - c.finished_ms)
            self._late_buckets[bisect.bisect_left(LATENESS_BUCKETS_MS, late)] += 1
            self._late_sum_ms += late
            self._late_recent.append(late)
            self._jobs_seen += 1
            self._recent_jobs.append((self._jobs_seen, c.context, items, c.work_ms, c.submitted_ms,
                                      c.started_ms, c.finished_ms, max(now_ms, c.finished_ms)))

    def _submit(self, conn: _Conn, job: int, work_ms: float, items: int, sent_s: float | None) -> None:
        with self._cond:
            now = self.now_ms()
            self._advance(now)
            assert conn.context is not None
            key: Hashable = (conn, job, items)
            self._stats.setdefault(conn.context, _Stats())
            sent = self._sent_ms(sent_s, now)
            self._answer(self._sched.submit(now, conn.context, key, work_ms, sent_ms=sent), now)
            self._generation += 1
            self._cond.notify_all()

    def _sent_ms(self, sent_s: float | None, now_ms: float) -> float | None:
        """A client's sent instant (its CLOCK_MONOTONIC, s) on the model's clock, where it
        is believable: the way over loopback is not device time (a kernel launch costs
        microseconds), so a job reaching an idle device starts from then. Never before the
        utilisation period already reported (lock held)."""
        if sent_s is None:
            return None
        sent = (sent_s - self._t0) * 1000.0
        if not now_ms - MAX_TRANSIT_MS <= sent <= now_ms + 0.01:  # + the line's rounding
            return None
        return max(min(sent, now_ms), self._next_boundary_ms - self._period_ms)

    def _schedule_loop(self) -> None:
        with self._cond:
            while not self._stopping.is_set():
                nxt = self._sched.next_completion_ms()
                if nxt is None:
                    self._cond.wait(IDLE_WAKE_S)
                    self._advance(self.now_ms())  # close the idle periods as they pass
                    continue
                left_s = (nxt - self.now_ms()) / 1000.0
                if left_s > SPIN_S:
                    # A submission wakes this early: the next completion may have moved.
                    self._cond.wait(left_s - SPIN_S)
                    continue
                generation = self._generation
                self._cond.release()
                try:
                    while self.now_ms() < nxt and self._generation == generation:
                        time.sleep(0)  # yields the GIL: connection threads keep submitting
                finally:
                    self._cond.acquire()
                self._advance(self.now_ms())

    # -- connections -----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, peer = self._listener.accept()
            except OSError:
                return  # closed by stop()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, f"{peer[0]}:{peer[1]}")
            with self._cond:
                if self._stopping.is_set():
                    conn.close()
                    return
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name=f"device-conn-{peer[1]}",
                             daemon=True).start()

    def _serve(self, conn: _Conn) -> None:
        try:
            self._serve_lines(conn)
        except OSError:
            pass  # the client went away, or stop() closed the socket
        finally:
            with self._cond:
                conn.close()
                self._conns.discard(conn)
                if conn.context is not None:
                    self._connections[conn.context] -= 1

    def _serve_lines(self, conn: _Conn) -> None:
        sock = conn.sock
        sock.settimeout(HELLO_TIMEOUT_S)
        reader = sock.makefile("rb")
        first = reader.readline(protocol.MAX_LINE + 1)
        try:
            context = protocol.parse_hello(first.decode(errors="replace").strip())
        except ValueError as exc:
            conn.send(protocol.error(str(exc)))
            return
        sock.settimeout(None)  # blocking from here: answers are sent with MSG_DONTWAIT
        with self._cond:
            conn.context = context
            self._connections[context] = self._connections.get(context, 0) + 1
        conn.send(protocol.ready(self.settings.name, self.settings.sharing.policy.value, self._clock()))
        while conn.open:
            raw = reader.readline(protocol.MAX_LINE + 1)
            if not raw:
                return
            if not raw.endswith(b"\n"):
                conn.send(protocol.error(f"a line longer than {protocol.MAX_LINE} bytes"))
                return
            try:
                job, work_ms, items, sent_s = protocol.parse_run(raw.decode(errors="replace").strip())
            except ValueError as exc:
                conn.send(protocol.error(str(exc)))
                return
            problem = protocol.work_problem(work_ms)
            if problem:
                with self._cond:
                    conn.send(protocol.fail(job, problem))
                continue
            self._submit(conn, job, work_ms, items, sent_s)

    # -- what it reports -------------------------------------------------------------------
    def snapshot(self) -> DeviceSnapshot:
        with self._cond:
            now = self.now_ms()
            self._advance(now)
            usage = self._sched.usage()
            contexts = {
                c: ContextSnapshot(st.jobs, st.items, usage.work_ms.get(c, 0.0), self._sched.pending(c),
                                   self._connections.get(c, 0))
                for c, st in self._stats.items()
            }
            lateness = Lateness(tuple(self._late_buckets), self._late_sum_ms, tuple(self._late_recent))
            return DeviceSnapshot(self.settings.name, self.settings.sharing.to_dict(), now,
                                  usage.busy_ms, self._period_ms, self._last_util, contexts, lateness,
                                  self.priority)

    def recent_jobs(self, after: int = 0) -> list[dict[str, Any]]:
        """The last completed jobs (up to :data:`RECENT_JOBS`) numbered from 1 since the start,
        those numbered over ``after``: what each DONE line said, and when it went out."""
        keys = ("n", "context", "items", "work_ms", "submitted_ms", "started_ms", "finished_ms",
                "answered_ms")
        with self._cond:
            rows = [r for r in self._recent_jobs if r[0] > after]
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def metrics_text(self) -> bytes:
        snap = self.snapshot()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(lambda: families(snap, self._labels)))
        return generate_latest(registry)


class _Collector:
    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def collect(self) -> Any:
        return self.make()


def _bind(addr: Address, field: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr.host, addr.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise _bind_error(addr, field, exc) from exc
    return sock


def _bind_error(addr: Address, field: str, exc: OSError) -> Exception:
    if isinstance(exc, socket.gaierror):
        return ConfigError(f"{field} = {str(addr)!r}: {addr.host!r} does not resolve "
                           f"({exc.strerror}); give an address of this machine such as 127.0.0.1",
                           field=field, value=str(addr))
    return DeviceError(f"{field} = {addr}: cannot listen there ({exc.strerror or exc}); "
                       "pick another port (0: a free one)")


class _Handler(BaseHTTPRequestHandler):
    device: DeviceServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, self.device.metrics_text(), CONTENT_TYPE_LATEST)
        elif path == "/status":
            body = json.dumps(self.device.snapshot().to_dict()).encode()
            self._reply(200, body, "application/json")
        elif path == "/jobs":
            after = parse_qs(urlsplit(self.path).query).get("after", ["0"])[0]
            if not after.isdigit():
                self._reply(400, f"after = {after!r}: must be a job number >= 0\n".encode(), "text/plain")
                return
            body = json.dumps({"jobs": self.device.recent_jobs(int(after))}).encode()
            self._reply(200, body, "application/json")
        elif path == "/healthz":
            self._reply(200, b"ok\n", "text/plain")
        else:
            self._reply(404, b"not found: /metrics, /status, /jobs or /healthz\n", "text/plain")

    def _reply(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass  # a scrape a second is not news


def _bind_http(addr: Address, device: DeviceServer) -> ThreadingHTTPServer:
    handler = type("DeviceHandler", (_Handler,), {"device": device})
    try:
        server = ThreadingHTTPServer((addr.host, addr.port), handler)
    except OSError as exc:
        raise _bind_error(addr, "metrics", exc) from exc
    server.daemon_threads = True
    return server
