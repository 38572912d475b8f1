"""Launch the real ``tritonserver`` binary shipped in the ``nvidia-pytriton`` wheel.

What it takes to run that binary with Python-backend models on this machine:

* a backend folder holding ``libtriton_python.so``, ``triton_python_backend_utils.py``
  and the stub built for this Python version. The stub is *symlinked* from the
  wheel's ``python_backend_stubs/3.X/``: a copy loses its RPATH to the wheel's
  bundled libraries.
* the stub embeds ``libpython3.X.so`` and computes ``sys.prefix`` from the
  ``python3`` it finds on ``PATH``. The embedded interpreter ignores
  ``PYTHONPATH``, so this environment's ``bin/`` goes first on ``PATH`` (a venv's
  ``pyvenv.cfg`` then puts its site-packages, with numpy and torch, on
  ``sys.path``) and the interpreter's ``LIBDIR`` goes on ``LD_LIBRARY_PATH``.
* the stub of nvidia-pytriton 0.7 needs NumPy 1.x: with NumPy 2 every output
  tensor comes back empty.

:class:`TritonServer` is a context manager used by the CLI, the tests, the
demo and the benchmarks. It starts the server in its own process group, waits
for readiness and on exit stops it and every stub process it spawned.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from autobatch.errors import ConfigError, ServeError
from autobatch.lab.process import ManagedProcess, Server, group_members, log_tail, poll_until

__all__ = [
    "EMULATOR_MODEL",
    "TritonServer",
    "TritonUrls",
    "check_host",
    "check_port",
    "default_repository",
    "free_port",
    "list_models",
]

EMULATOR_MODEL = "emulated_accelerator"
"""The Python-backend model whose batch times follow a batch curve."""

DEATH_LOG_LINES = 15
"""Log lines quoted when the server died on its own: enough for the model or
backend error that preceded the end (five, the start-up default, often hold only
the end of a stack trace)."""


@dataclass(frozen=True)
class TritonUrls:
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int

    @property
    def http(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def grpc(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


def project_root() -> Path:
    """The source checkout this package runs from (an editable install), if any."""
    return Path(__file__).resolve().parents[3]


def default_repository() -> Path:
    """``./model_repository`` if there is one, else the project's own."""
    here = Path.cwd() / "model_repository"
    if here.is_dir():
        return here
    return project_root() / "model_repository"


def list_models(repository: Path) -> list[str]:
    """Model names in a repository: folders holding a ``config.pbtxt``."""
    return sorted(p.parent.name for p in repository.glob("*/config.pbtxt"))


_HANDED_OUT: set[int] = set()
"""Ports :func:`free_port` returned in this process. A port is free only until somebody
binds it: the demo picks Triton's three ports, then the sidecar's, and starts Triton
after. The kernel may offer a released port again (CI's demo run got Triton's HTTP
port for the sidecar, which then could not listen), so a port is handed out once."""

FREE_PORT_TRIES = 1000
_HANDING_OUT = threading.Lock()
"""Threads that start servers side by side (the side-by-side harness) ask at once."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, and one this process has not been given before."""
    for _ in range(FREE_PORT_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        with _HANDING_OUT:
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise ServeError(f"{host}: no free port that this process was not given already "
                     f"in {FREE_PORT_TRIES} tries")


PORT_TRIES = 3
"""Starts of a server on :meth:`TritonServer.on_free_ports`: a port another process took
between the pick and Triton's bind (an outgoing connection's ephemeral port, another test
worker's server) gets the server new ports, this many times in all."""

PORT_RULE = "must be a port number 1-65535 (or 0: a free one)"


def check_port(port: Any, field: str) -> int:
    """``port`` if it is a TCP port number or 0 (pick a free one), else a ConfigError naming
    ``field`` (the socket calls would raise OverflowError on it)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{field} = {port!r}: {PORT_RULE}", field=field, value=port)
    return port


def check_host(host: str) -> None:
    """A ConfigError (``field="host"``) unless ``host`` is an IPv4 address of this machine
    (or a name of one): a name that does not resolve is not a port "already in use"."""
    try:
        socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(
            f"host = {host!r}: does not resolve to an IPv4 address ({reason}); "
            "give an address of this machine such as 127.0.0.1 or 0.0.0.0",
            field="host", value=host,
        ) from exc
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError as exc:
            raise ConfigError(
                f"host = {host!r}: cannot listen there ({exc.strerror or exc}); "
                "give an address of this machine such as 127.0.0.1 or 0.0.0.0",
                field="host", value=host,
            ) from exc


def _port_taken(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` (checked by :func:`check_host` first) is in use."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _pytriton_dir() -> Path:
    try:
        spec = importlib.util.find_spec("pytriton")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ServeError(
            "the embedded Triton needs the 'triton' extra: pip install 'autobatch[triton]' "
            "(it provides the tritonserver binary from nvidia-pytriton)"
        )
    root = Path(list(spec.submodule_search_locations)[0]) / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise ServeError(f"nvidia-pytriton is installed but {root}/bin/tritonserver is missing")
    return root


def _prepare_backends(triton_root: Path, into: Path) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = triton_root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServeError(
            f"nvidia-pytriton ships no Python-backend stub for Python {version} ({stub} missing)"
        )
    py = into / "backends" / "python"
    py.mkdir(parents=True, exist_ok=True)
    src = triton_root / "backends" / "python"
    for name, target in (
        ("libtriton_python.so", src / "libtriton_python.so"),
        ("triton_python_backend_utils.py", src / "triton_python_backend_utils.py"),
        ("triton_python_backend_stub", stub),
    ):
        link = py / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return into / "backends"


def _environment() -> dict[str, str]:
    env = os.environ.copy()
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    parts = [p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(parts)
    # Pin BLAS/OpenMP pools inside the stubs; the models set torch's own threads.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    # Not honoured by the embedded interpreter, kept for tools the models spawn.
    site = sysconfig.get_paths()["purelib"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
    return env


SHM_DIR = Path("/dev/shm")
STUB_REGION_PREFIX = "triton_python_backend_shm_region_"


def _stub_regions(pgid: int) -> list[str]:
    """The shared-memory regions of the Python-backend stubs in a process group. Each stub
    runs as ``triton_python_backend_stub MODEL_PY REGION ...``; the server unlinks REGION
    when it unloads the model, so a server killed or crashed leaves it (1 MB) in /dev/shm."""
    regions = []
    for pid in group_members(pgid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 2 and argv[0].endswith(b"triton_python_backend_stub"):
            name = argv[2].decode(errors="replace")
            if name.startswith(STUB_REGION_PREFIX) and "/" not in name:
                regions.append(name)
    return regions


def _unlink_regions(regions: Sequence[str]) -> None:
    for name in regions:
        with contextlib.suppress(FileNotFoundError):
            (SHM_DIR / name).unlink()


class TritonServer(Server):
    """The embedded Triton, as a context manager.

    >>> with TritonServer.on_free_ports() as server:   # doctest: +SKIP
    ...     httpx.get(server.urls.http + "/v2/health/ready")
    """

    def __init__(
        self,
        repository: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        http_port: int = 8000,
        grpc_port: int = 8001,
        metrics_port: int = 8002,
        models: Sequence[str] | None = None,
        emulate_curve: Any = None,
        emulate_device: str | None = None,
        startup_timeout_s: float = 180.0,
        stop_timeout_s: float = 15.0,
        log_path: str | Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.repository = Path(repository) if repository else default_repository()
        self.urls = TritonUrls(host, http_port, grpc_port, metrics_port)
        self.models = list(models) if models is not None else None
        self.emulate_curve = emulate_curve
        self.emulate_device = emulate_device
        """HOST:PORT of an emulated GPU the emulated model's instances submit to (with
        ``emulate_curve``); None: each instance is a device of its own."""
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = list(extra_args)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._log_path = Path(log_path) if log_path else None
        self._proc: ManagedProcess | None = None
        self._repick = False
        """Ports of :meth:`on_free_ports`: on one taken meanwhile, :meth:`start` picks others."""

    @staticmethod
    def _three_free_ports(host: str = "127.0.0.1") -> tuple[int, int, int]:
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(free_port(host))
        http_port, grpc_port, metrics_port = sorted(ports)
        return http_port, grpc_port, metrics_port

    @classmethod
    def on_free_ports(cls, repository: str | Path | None = None, **kwargs: Any) -> TritonServer:
        """A server on three free ports; if another process takes one before Triton binds
        it, :meth:`start` tries new ones (:data:`PORT_TRIES` starts in all)."""
        http_port, grpc_port, metrics_port = cls._three_free_ports(kwargs.get("host", "127.0.0.1"))
        server = cls(
            repository,
            http_port=http_port,
            grpc_port=grpc_port,
            metrics_port=metrics_port,
            **kwargs,
        )
        server._repick = True
        return server

    # -- lifecycle ------------------------------------------------------------------
    @property
    def log_path(self) -> Path:
        assert self._log_path is not None, "server not started"
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.running()

    def exit_status(self) -> str | None:
        """How the server ended when it ended on its own (``was killed by signal 11
        (SIGSEGV)``, ``exited with code 1``); None while it runs or after :meth:`stop`."""
        return self._proc.exit_status() if self._proc else None

    def check_alive(self, during: str) -> None:
        """Raise :class:`~autobatch.errors.ServeError` if the server died on its own,
        naming its exit status and the last lines of its log (which :meth:`close`
        deletes with the work directory unless ``log_path`` was given). A server
        stopped on purpose passes."""
        if self._proc is not None:
            self._proc.check_alive(during, lines=DEATH_LOG_LINES)

    def _check_inputs(self) -> list[str]:
        repo = self.repository
        if not repo.is_dir():
            raise ConfigError(
                f"repository = {str(repo)!r}: model repository not found (no such directory)",
                source=str(repo), field="repository", value=str(repo),
            )
        available = list_models(repo)
        if not available:
            raise ConfigError(f"{repo}: no models found (no */config.pbtxt)", source=str(repo))
        models = self.models if self.models is not None else available
        for name in models:
            if name not in available:
                raise ConfigError(
                    f"{repo}: model {name!r} not found; the repository holds "
                    f"{', '.join(available)}",
                    source=str(repo),
                )
        host = self.urls.host
        check_host(host)
        ports = {label: check_port(getattr(self.urls, f"{label}_port"), f"{label}_port")
                 for label in ("http", "grpc", "metrics")}
        taken = {p for p in ports.values() if p}
        for label in ports:
            while ports[label] == 0:  # a free one, other than the ports given
                port = free_port(host)
                if port not in taken:
                    ports[label] = port
                    taken.add(port)
        self.urls = TritonUrls(host, ports["http"], ports["grpc"], ports["metrics"])
        for label, port in ports.items():
            same = [other for other, p in ports.items() if p == port and other != label]
            if same:
                raise ConfigError(
                    f"{label}_port = {port}: {same[0]}_port is {port} too: give each endpoint its own port",
                    field=f"{label}_port", value=port,
                )
        for label, port in ports.items():
            if _port_taken(host, port):
                raise ServeError(
                    f"{self.urls.host}:{port} ({label} port) is already in use; "
                    f"{label}_port = {port}: pick another",
                    field=f"{label}_port",
                )
        return models

    def start(self) -> TritonServer:
        for attempt in range(PORT_TRIES if self._repick else 1):
            try:
                return self._start()
            except ServeError as exc:
                if not self._repick or "already in use" not in str(exc) or attempt == PORT_TRIES - 1:
                    raise
                self.urls = TritonUrls(self.urls.host, *self._three_free_ports(self.urls.host))
        raise AssertionError("unreachable")

    def _start(self) -> TritonServer:
        if self.running():
            return self
        models = self._check_inputs()
        triton_root = _pytriton_dir()
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="autobatch-triton-")
        workdir = Path(self._tmp.name)
        backends = _prepare_backends(triton_root, workdir)
        if self._log_path is None:
            self._log_path = workdir / "tritonserver.log"
        emulate = self.emulate_curve is not None and EMULATOR_MODEL in models
        startup_models = [m for m in models if not (emulate and m == EMULATOR_MODEL)]
        cmd = [
            str(triton_root / "bin" / "tritonserver"),
            f"--model-repository={self.repository.resolve()}",
            f"--backend-directory={backends}",
            "--model-control-mode=explicit",
            f"--http-address={self.urls.host}",
            f"--http-port={self.urls.http_port}",
            f"--grpc-address={self.urls.host}",
            f"--grpc-port={self.urls.grpc_port}",
            f"--metrics-address={self.urls.host}",
            f"--metrics-port={self.urls.metrics_port}",
            "--metrics-config=summary_latencies=true",
            # The per-interval series (nv_gpu_*, nv_cpu_*) refresh every half of this;
            # Triton's 2000 ms default makes them a second old or more in a 1 s window.
            # The per-model counters, pending gauge and summaries are per request.
            "--metrics-interval-ms=500",
            "--allow-gpu-metrics=false",
            f"--exit-timeout-secs={max(1, min(5, int(self.stop_timeout_s) - 5))}",
            "--log-verbose=0",
        ]
        cmd += [f"--load-model={m}" for m in startup_models]
        cmd += self.extra_args
        self._proc = ManagedProcess("tritonserver", self._log_path)
        self._proc.start(cmd, env=_environment())
        try:
            self._wait_ready(startup_models)
            if emulate:
                self.load_emulator(self.emulate_curve, device=self.emulate_device)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, models: Sequence[str]) -> None:
        assert self._proc is not None
        proc = self._proc
        with httpx.Client(base_url=self.urls.http, timeout=2.0) as client:

            def ready() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return client.get("/v2/health/ready").status_code == 200 and all(
                        client.get(f"/v2/models/{m}/ready").status_code == 200 for m in models
                    )
                return False

            try:
                poll_until(ready, timeout_s=self.startup_timeout_s, interval_s=0.2,
                           what="tritonserver to be ready",
                           check=lambda: proc.check_alive("during start-up"))
            except ServeError as exc:
                if not proc.running():
                    raise
                raise ServeError(f"{exc}: {self.log_tail()}") from None

    def load_emulator(self, curve: Any, profile: Any = None, *, device: str | None = None,
                      device_timeout_s: float | None = None, model: str = EMULATOR_MODEL,
                      device_context: str | None = None) -> None:
        """(Re)load the emulated accelerator with ``curve`` as its batch curve, and
        ``profile``'s batching (a :class:`~autobatch.profiles.Profile`) if given.

        ``device``: HOST:PORT of an emulated GPU its instances run their batches on (checked
        first: a device nobody answers is a DeviceError and nothing is loaded). ``model``: a
        copy of the emulated model under another name in the repository (another model on
        the same device). ``device_context``: one context for all its instances (default:
        one each)."""
        from autobatch.profiles import parse_pbtxt

        if device is not None:
            from autobatch.device.client import check_device

            check_device(device)
        cfg_path = self.repository / model / "config.pbtxt"
        config = parse_pbtxt(cfg_path.read_text(encoding="utf-8"), str(cfg_path))
        params = dict(config.get("parameters") or {})
        params["curve"] = {"string_value": json.dumps(curve.to_dict())}
        for key, value in (("device", device), ("device_context", device_context),
                           ("device_timeout_s", device_timeout_s)):
            if value is not None:
                params[key] = {"string_value": str(value)}
            else:
                params.pop(key, None)
        config["parameters"] = params
        if profile is not None:
            config = profile.merge_into(config)
        body = {"parameters": {"config": json.dumps(config)}}
        with httpx.Client(base_url=self.urls.http, timeout=120.0) as client:
            r = client.post(f"/v2/repository/models/{model}/load", json=body)
        if r.status_code != 200:
            raise ServeError(f"loading {model} with the curve failed: {r.text}")

    def log_tail(self, lines: int = 5) -> str:
        if self._log_path is None:
            return "(no log)"
        return log_tail(self._log_path, lines)

    def stop(self) -> None:
        """SIGTERM the server, wait, then SIGKILL whatever is left of its process group;
        then remove the shared memory of its stubs, which a server that exits cleanly
        removes itself but one that crashed or had to be killed leaves behind."""
        if self._proc is not None:
            regions = _stub_regions(self._proc.pid) if self._proc.pid else []
            self._proc.stop(self.stop_timeout_s)
            self._proc = None
            _unlink_regions(regions)

    def kill(self) -> None:
        """SIGKILL the server and its stubs at once (a crash, for tests); their shared
        memory is removed as :meth:`stop` does."""
        if self._proc is not None:
            regions = _stub_regions(self._proc.pid) if self._proc.pid else []
            self._proc.kill()
            self._proc = None
            _unlink_regions(regions)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the server's process group: SIGSTOP and SIGCONT freeze and
        thaw it (a hung server that still accepts connections), for fault tests."""
        if self._proc is not None:
            self._proc.signal(signum)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
