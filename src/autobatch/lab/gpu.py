"""The emulated GPU as a process of its own: what ``autobatch serve --device``, the tests and
the benchmarks start.

The device runs in its own process (``autobatch device``), not a thread of the
caller: its timing must not wait on the caller's interpreter lock, and a test
must be able to kill it, or freeze it, mid-run.

>>> with DeviceProcess(DeviceSettings()) as dev:      # doctest: +SKIP
...     dev.address, dev.metrics_url
"""

from __future__ import annotations

import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import httpx
import yaml

from autobatch.device.client import check_device
from autobatch.device.protocol import Address
from autobatch.device.settings import DeviceSettings
from autobatch.errors import DeviceError, ServeError
from autobatch.lab.process import ManagedProcess, Server, poll_until
from autobatch.lab.serve import EMULATOR_MODEL, default_repository, free_port

__all__ = ["DeviceProcess", "emulated_repository"]


class DeviceProcess(Server):
    """``autobatch device`` with ``settings`` (ports 0 become free ones), started and stopped."""

    def __init__(self, settings: DeviceSettings | None = None, *, startup_timeout_s: float = 30.0,
                 stop_timeout_s: float = 10.0, log_path: str | Path | None = None) -> None:
        s = settings or DeviceSettings()
        listen = s.listen if s.listen.port else Address(s.listen.host, free_port(s.listen.host))
        metrics = s.metrics if s.metrics.port else Address(s.metrics.host, free_port(s.metrics.host))
        self.settings = s.with_(listen=listen, metrics=metrics)
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._log_path = Path(log_path) if log_path else None
        self._proc: ManagedProcess | None = None

    @property
    def address(self) -> str:
        """HOST:PORT of the job port: what clients (the emulated model's ``device``) are given."""
        return str(self.settings.listen)

    @property
    def metrics_url(self) -> str:
        return f"http://{self.settings.metrics}/metrics"

    @property
    def status_url(self) -> str:
        return f"http://{self.settings.metrics}/status"

    @property
    def jobs_url(self) -> str:
        """The last completed jobs as the device answered them (``?after=N``: numbered over N)."""
        return f"http://{self.settings.metrics}/jobs"

    @property
    def log_path(self) -> Path:
        assert self._log_path is not None, "not started"
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.running()

    def check_alive(self, during: str) -> None:
        if self._proc is not None:
            self._proc.check_alive(during)

    def start(self) -> DeviceProcess:
        if self.running():
            return self
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="autobatch-device-")
        work = Path(self._tmp.name)
        config = work / "device.yaml"
        config.write_text(yaml.safe_dump(self.settings.to_dict(), sort_keys=False), encoding="utf-8")
        if self._log_path is None:
            self._log_path = work / "device.log"
        self._proc = ManagedProcess("autobatch device", self._log_path)
        self._proc.start([sys.executable, "-m", "autobatch", "device", "--config", str(config)])
        proc = self._proc

        def up() -> bool:
            try:
                check_device(self.address, timeout_s=1.0)
                return httpx.get(f"http://{self.settings.metrics}/healthz", timeout=1.0).status_code == 200
            except (DeviceError, httpx.HTTPError):
                return False

        try:
            poll_until(up, timeout_s=self.startup_timeout_s, interval_s=0.05,
                       what=f"the emulated device at {self.address}",
                       check=lambda: proc.check_alive("during start-up"))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop(self.stop_timeout_s)
            self._proc = None

    def kill(self) -> None:
        """SIGKILL the device at once (a crash, for tests)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc = None

    def freeze(self) -> None:
        """SIGSTOP it: a hung device that still holds its connections open."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        if self._proc is None:
            raise ServeError("the emulated device is not running")
        self._proc.signal(signum)

    def close(self) -> None:
        if self._proc is not None and self._proc.running():
            self.thaw()  # a frozen process would ignore SIGTERM until the timeout
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def emulated_repository(path: str | Path, names: Sequence[str] = (EMULATOR_MODEL,),
                        source: str | Path | None = None) -> Path:
    """A model repository at ``path`` holding the emulated model under each of ``names``:
    several models of one Triton, to be pointed at one device. Returns ``path``."""
    src = Path(source) if source else default_repository()
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        dest = root / name
        shutil.copytree(src / EMULATOR_MODEL, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        cfg = dest / "config.pbtxt"
        text = re.sub(r'^name: "[^"]*"', f'name: "{name}"', cfg.read_text(encoding="utf-8"), flags=re.M)
        cfg.write_text(text, encoding="utf-8")
    return root
