"""The sidecar's two files: the decision log and the state file beside it.

**Decision log** (:class:`DecisionLog`): one JSON line per tick, appended. It
survives what disks and operators do to it:

* a write that fails (disk full, quota, the file made read-only) is counted and
  the file is closed; the next tick opens the path again, and the loop never
  stops for it;
* rotation: a file moved or deleted under the sidecar is noticed on the next
  write (the path no longer names the open file) and a new one is started; or
  send SIGHUP, as logrotate's ``postrotate`` does (``autobatch run`` calls
  :meth:`DecisionLog.reopen`: the next write starts a new file);
* a line cut short by a failed write is ended before the next one, so every
  later line parses;
* closing never raises.

**State file** (:class:`StateFile`): the pin and the last switch, so a restarted
sidecar honours a pin and dwells before its first switch. Replaced atomically
(a temporary file, fsync, rename), so a crash leaves the old state or the new,
never half; an unreadable or foreign one is ignored with a warning, never a
reason not to start.

Both write in one worker thread with a deadline (:class:`Writer`): a write that
hangs (a dead network file system) costs the tick at most ``timeout_s`` and
later writes are dropped, counted, until it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from autobatch.actuators.triton import write_atomic
from autobatch.errors import AutobatchError, ConfigError

__all__ = ["DecisionLog", "FileTimeout", "SavedState", "StateFile", "Writer"]


class FileTimeout(AutobatchError):
    """A file write did not return within its deadline (the file system hangs)."""


class Writer:
    """One worker thread for the sidecar's file writes, each awaited with a deadline.

    Writes queue behind one another (a pin's state write may come while a tick
    writes its line). A write that outlives its deadline is left to finish in the
    thread; until it does, later writes fail at once instead of piling up behind it.
    """

    def __init__(self, timeout_s: float = 2.0) -> None:
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autobatch-files")
        self._lock = asyncio.Lock()
        self._stuck: Future[Any] | None = None

    async def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` in the worker; raises :class:`FileTimeout` past the deadline, or while
        an earlier write that timed out has still not returned."""
        async with self._lock:
            if self._stuck is not None and not self._stuck.done():
                raise FileTimeout("an earlier write has not returned yet: the file system hangs")
            fut = self._pool.submit(fn)
            try:
                return await asyncio.wait_for(asyncio.wrap_future(fut), self.timeout_s)
            except TimeoutError as exc:
                self._stuck = fut
                raise FileTimeout(f"a write took longer than {self.timeout_s:g} s") from exc

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class DecisionLog:
    """Append JSON lines to ``path``; failures are returned, never raised, after :meth:`open`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._identity: tuple[int, int] | None = None
        self._torn = False
        self._reopen = False

    def open(self) -> None:
        """Open for appending at start-up; a path that cannot be one is a ``ConfigError``."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._open()
        except OSError as exc:
            raise ConfigError(
                f"decision_log = '{self.path}': cannot open it for appending: {exc.strerror or exc}",
                field="decision_log", value=str(self.path),
            ) from exc

    def write_line(self, record: dict[str, Any]) -> None:
        """Append one line (blocking: call it through a :class:`Writer`). Raises OSError."""
        text = json.dumps(record, default=_jsonable) + "\n"
        if self._file is None or self._reopen or self._moved():
            self._reopen = False
            self.close()
            self._open()
        f = self._file
        assert f is not None
        try:
            if self._torn:
                # The last write may have left half a line: end it so the next parses.
                f.write("\n")
                self._torn = False
            f.write(text)
            f.flush()
        except OSError:
            self._torn = True
            self.close()
            raise

    def reopen(self) -> None:
        """SIGHUP: the next write closes the file and opens the path again.

        Only a flag: the handler runs on the event loop while a write may be running
        in the worker thread, and closing the file under it would fail that write.
        """
        self._reopen = True

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            with contextlib.suppress(OSError, ValueError):
                f.close()

    def _open(self) -> None:
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
        st = os.fstat(self._file.fileno())
        self._identity = (st.st_dev, st.st_ino)
        if st.st_size > 0 and not self._torn:
            self._torn = not _ends_with_newline(self.path)

    def _moved(self) -> bool:
        """Was the file rotated away or deleted since it was opened?"""
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self._identity


def _ends_with_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:
        return True  # not a seekable file (a pipe, /dev/full): nothing to mend


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


@dataclass(frozen=True)
class SavedState:
    """What a restarted sidecar needs from the one before it."""

    model: str
    active: str | None
    """The profile it last made live."""
    pin: str | None
    """The manual pin in force, if any."""
    last_switch_s: float | None
    """Wall-clock time of its last switch (or failed attempt)."""
    saved_s: float


class StateFile:
    """The state file: read once at start, replaced atomically on every change."""

    VERSION = 1

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, model: str) -> tuple[SavedState | None, str | None]:
        """The saved state, or None and why it was not used (None when there is no file)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None, None
        except (OSError, UnicodeDecodeError) as exc:
            return None, f"{self.path}: cannot read the state file ({exc}); starting without it"
        try:
            data = json.loads(text)
            if data.get("version") != self.VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {self.VERSION}")
            saved = SavedState(
                model=str(data["model"]),
                active=_opt_str(data.get("active")),
                pin=_opt_str(data.get("pin")),
                last_switch_s=_opt_float(data.get("last_switch_s")),
                saved_s=float(data["saved_s"]),
            )
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            return None, f"{self.path}: not a state file this sidecar wrote ({exc}); starting without it"
        if saved.model != model:
            return None, (f"{self.path}: holds the state of model {saved.model!r}, not {model!r}; "
                          "starting without it")
        return saved, None

    def save(self, state: SavedState) -> None:
        """Replace the file (blocking: call it through a :class:`Writer`). Raises OSError."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps({"version": self.VERSION, **asdict(state)}, indent=1) + "\n")


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)
