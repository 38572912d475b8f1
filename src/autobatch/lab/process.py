"""One way to start, wait for and stop the real servers the lab runs (Triton, HAProxy, Prometheus).

* :func:`poll_until`: call a condition until it returns something truthy, with
  a deadline and an optional liveness check; the one poll loop of the lab.
  :func:`poll_until_async` is the same on an event loop (it awaits between
  tries, so the tasks it waits for run).
* :class:`ManagedProcess`: a child in its own process group with its output in
  a log file; ``stop()`` sends SIGTERM to the group, waits, then SIGKILLs
  whatever is left and waits until the group is empty, so no helper process
  (a Python-backend stub, say) outlives the server.
* :class:`Server`: ``with`` support for a server with ``start()`` and
  ``close()``: a start that fails closes what it had begun.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from autobatch.errors import ServeError

__all__ = [
    "ManagedProcess",
    "Server",
    "cpu_seconds",
    "describe_exit",
    "group_members",
    "log_tail",
    "poll_until",
    "poll_until_async",
]

T = TypeVar("T")
S = TypeVar("S", bound="Server")


class Server:
    """A server the lab starts and stops: subclasses define ``start()`` (returning
    ``self``) and ``close()`` (safe to call on a half-started server)."""

    def start(self: S) -> S:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: S) -> S:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def poll_until(
    condition: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    check: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = time.sleep,
) -> T:
    """Call ``condition()`` every ``interval_s`` until it returns a truthy value, and return it.

    ``check()`` runs before each try and may raise (a server that exited while
    we waited for it should fail at once, not at the deadline). After
    ``timeout_s`` without success a :class:`~autobatch.errors.ServeError` names
    ``what`` was awaited.
    """
    deadline = clock() + timeout_s
    while True:
        if check is not None:
            check()
        value = condition()
        if value:
            return value
        if clock() > deadline:
            raise ServeError(f"timed out after {timeout_s:g} s waiting for {what}")
        sleep(interval_s)


async def poll_until_async(
    condition: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    check: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> T:
    """:func:`poll_until` for a coroutine: the same contract, but it awaits ``sleep``
    between tries (a blocking sleep would stall the loop the awaited tasks run on)."""
    deadline = clock() + timeout_s
    while True:
        if check is not None:
            check()
        value = condition()
        if value:
            return value
        if clock() > deadline:
            raise ServeError(f"timed out after {timeout_s:g} s waiting for {what}")
        await sleep(interval_s)


def describe_exit(returncode: int) -> str:
    """A process's end in words, from :attr:`subprocess.Popen.returncode` (negative: the
    signal that killed it)."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    signum = -returncode
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"was killed by signal {signum}"
    return f"was killed by signal {signum} ({name})"


def log_tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` non-blank lines of a log file on one line, joined by `` | ``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    # Whitespace runs collapsed: Triton pads its start-up tables to 200 columns.
    tail = [" ".join(ln.split()) for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail) if tail else "(empty log)"


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in a process group, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[1].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def cpu_seconds(pids: Sequence[int]) -> float:
    """The CPU seconds of ``pids`` and of the children they have reaped (/proc's utime, stime,
    cutime and cstime); a pid gone since it was listed counts nothing. Read the members afresh
    (:func:`group_members`) at each reading: a Python-backend stub replaced by a model reload is
    then counted while it lives and, once Triton has reaped it, in Triton's cutime, so a reload
    mode's Triton is not under-read by its old stub's lifetime."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


class ManagedProcess:
    """A server process in its own session, its stdout and stderr appended to ``log_path``."""

    def __init__(self, name: str, log_path: str | Path) -> None:
        self.name = name
        self.log_path = Path(log_path)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, cmd: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            self._proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            self._log = None
            raise ServeError(f"cannot start {self.name} ({cmd[0]}): {exc}") from exc

    def exit_status(self) -> str | None:
        """How the process ended (``exited with code 1``, ``was killed by signal 11
        (SIGSEGV)``); None while it runs, and once :meth:`stop` or :meth:`kill` ended it
        on purpose."""
        if self._proc is None or self._proc.poll() is None:
            return None
        return describe_exit(self._proc.returncode)

    def check_alive(self, during: str, *, lines: int = 5) -> None:
        """Raise if the process has exited (use as :func:`poll_until`'s ``check``): the
        error names the exit code or signal and the last ``lines`` lines of its log."""
        status = self.exit_status()
        if status is not None:
            raise ServeError(
                f"{self.name} (pid {self.pid}) {status} {during}; "
                f"last log lines: {self.log_tail(lines)}"
            )

    def log_tail(self, lines: int = 5) -> str:
        return log_tail(self.log_path, lines)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the whole group (SIGSTOP/SIGCONT in fault tests, say)."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signum)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process, wait up to ``timeout_s``, then SIGKILL its group and reap it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            self._reap(proc.pid)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL the whole group at once (a crash, for tests) and reap it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            self._reap(proc.pid)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _reap(self, pgid: int, timeout_s: float = 10.0) -> None:
        def gone() -> bool:
            if not group_members(pgid):
                return True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            return False

        try:
            poll_until(gone, timeout_s=timeout_s, what=f"the processes of {self.name}'s group to exit")
        except ServeError:
            raise ServeError(f"processes of {self.name} group {pgid} survived SIGKILL") from None
