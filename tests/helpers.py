"""Shared test helpers: the CLI as a user runs it, and a background load on the real servers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from autobatch.controller.app import run_sidecar
from autobatch.errors import ServeError
from autobatch.lab.process import poll_until
from autobatch.load import RequestRecord, run_load
from autobatch.schedule import Schedule


def autobatch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The installed ``autobatch`` console script, run as a user runs it (wide, plain output)."""
    exe = Path(sys.executable).with_name("autobatch")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: Any, *args: str) -> tuple[int, str, str]:
    """``autobatch ARGS`` through ``autobatch.cli.main`` in this process: (exit code, stdout,
    stderr). The code under test is the one the test imports (the installed script that
    :func:`autobatch` runs may be another checkout's); a stand-in patched in is seen."""
    import autobatch.cli as cli

    monkeypatch.setattr(sys, "argv", ["autobatch", *args])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as info:
        cli.main()
    captured = capsys.readouterr()
    code = info.value.code
    return (0 if code is None else int(code)), captured.out, captured.err


def assert_bad_input(code: int, err: str, message: str) -> None:
    """The rule for bad input: exit 2 and one line on stderr, holding ``message``."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert message in lines[0], err


class BackgroundLoad:
    """``autobatch load``'s engine in a thread, open-loop, until stopped (bounded by ``max_s``).

    Each finished request is kept in ``done`` as (sent, done, outcome) on
    ``time.monotonic`` (the clock the actuators report on), and each success's
    wall-clock completion time in ``done_at`` (the clock of Triton's windows).
    Entering waits for the first completion; leaving stops the load and
    re-raises what the generator raised.
    """

    def __init__(
        self,
        url: str,
        model: str,
        rate_rps: float,
        *,
        max_s: float,
        protocol: str = "grpc",
        seed: int = 0,
        batch_size: int = 1,
        drain_s: float | None = None,
    ) -> None:
        self.url, self.model, self.protocol = url, model, protocol
        self.schedule = Schedule.constant(rate_rps, max_s)
        self.seed, self.batch_size, self.drain_s = seed, batch_size, drain_s
        self.stop = threading.Event()
        self.first = threading.Event()
        self.done: list[tuple[float, float, str]] = []
        self.done_at: list[float] = []
        self.report: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _on_record(self, rec: RequestRecord) -> None:
        now = time.monotonic()
        if rec.latency_ms is not None:
            self.done.append((now - rec.latency_ms / 1000.0, now, rec.outcome))
        if rec.ok:
            self.done_at.append(time.time())
        self.first.set()

    def _run(self) -> None:
        try:
            self.report = run_load(
                self.url, self.model, self.schedule, protocol=self.protocol, seed=self.seed,
                batch_size=self.batch_size, drain_s=self.drain_s, on_record=self._on_record,
                stop=self.stop,
            )
        except BaseException as exc:  # re-raised in the test's thread
            self.error = exc
        finally:
            self.first.set()

    def wait_for(self, completions: int, timeout_s: float = 60.0) -> None:
        """Wait for ``completions`` successes; re-raise what the generator raised meanwhile."""
        def done_or_failed() -> bool:
            return len(self.done_at) >= completions or self.error is not None

        try:
            poll_until(done_or_failed, timeout_s=timeout_s, interval_s=0.02,
                       what=f"{completions} successes of the background load")
        except ServeError as exc:
            raise AssertionError(f"{exc}: only {len(self.done_at)} of {completions} done") from None
        if len(self.done_at) < completions and self.error is not None:
            raise self.error

    def completed_between(self, start_s: float, end_s: float) -> int:
        """Successes that completed in (start_s, end_s], wall clock."""
        return sum(1 for t in list(self.done_at) if start_s < t <= end_s)

    def __enter__(self) -> BackgroundLoad:
        self.thread.start()
        assert self.first.wait(120), "the load generator sent nothing in 120 s"
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the load generator did not stop"
        if self.error is not None and exc[0] is None:
            raise self.error


class Running:
    """The sidecar on a background event loop; stopped and joined on exit."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.sidecar = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._stop = asyncio.Event()

            def ready(sidecar) -> None:
                self.sidecar = sidecar
                self._ready.set()

            await run_sidecar(self.cfg, stop=self._stop, ready=ready)

        try:
            self._loop.run_until_complete(main())
        except BaseException as exc:  # surfaced by the test through .error
            self.error = exc
        finally:
            self._ready.set()

    def __enter__(self) -> Running:
        self._thread.start()
        assert self._ready.wait(120), "the sidecar did not start"
        if self.error:
            raise self.error
        return self

    def __exit__(self, *exc) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the sidecar did not stop"
        if self.error and not isinstance(self.error, asyncio.CancelledError):
            raise self.error

    @property
    def url(self) -> str:
        return self.sidecar.url

    def status(self) -> dict:
        return httpx.get(self.url + "/status", timeout=5).json()

    def wait_for(self, predicate, timeout_s: float, what: str) -> dict:
        """The first ``/status`` for which ``predicate`` holds; a timeout shows the last one seen."""
        last: dict = {}

        def holds() -> dict | None:
            nonlocal last
            last = self.status()
            return last if predicate(last) else None

        try:
            return poll_until(holds, timeout_s=timeout_s, interval_s=0.2, what=what)
        except ServeError as exc:
            raise AssertionError(f"{exc}; status: {last}") from None
