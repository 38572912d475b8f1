"""Start a real HAProxy (Debian package ``haproxy``) for tests, benchmarks and demos.

Two setups, rendered by :func:`http_rewrite_config` and :func:`grpc_config`
(``examples/haproxy/`` holds the same two, annotated):

* **HTTP to one Triton, the path rewritten per variant.** Clients ask for
  ``/v2/models/M/...``; each variant is a model of its own in the same Triton
  (``M__latency``, ``M__throughput``). HAProxy rewrites paths per frontend or
  backend, never per server, and the weights live on servers; so the splitter
  backend's servers are internal hops (abstract unix sockets, ``abns@``), one
  frontend per variant that rewrites the path to its model and passes the
  request on to Triton. One Triton, both variants loaded side by side.
* **gRPC to two Triton servers with the same model name.** A gRPC request
  names its model inside the protobuf body, which HAProxy cannot rewrite, so
  the variants are two servers (or pods) each serving ``M`` with its own
  profile; HAProxy speaks HTTP/2 on both sides (``proto h2``) and balances each
  call (an HTTP/2 stream) by weight. This setup works for HTTP clients too.

Both use ``balance roundrobin``: its weights change at runtime and take effect
with the next request.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autobatch.errors import ConfigError, ServeError
from autobatch.lab.process import ManagedProcess, Server, poll_until
from autobatch.profiles import Profile

__all__ = [
    "HAProxyProcess",
    "check_config",
    "grpc_config",
    "haproxy_binary",
    "http_rewrite_config",
    "write_variant",
]

_HEADER = """\
global
    stats socket {socket} mode 600 level admin
    # One thread: the gateway's work here is tiny and the cores belong to Triton.
    nbthread 1

defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
"""


def _weights(servers: Mapping[str, Any], weights: Mapping[str, int] | None) -> dict[str, int]:
    if weights is None:
        first = next(iter(servers))
        return {name: (100 if name == first else 0) for name in servers}
    return {name: int(weights.get(name, 0)) for name in servers}


def http_rewrite_config(
    *,
    listen: str,
    socket_path: str | Path,
    triton_http: str,
    model: str,
    variants: Mapping[str, str],
    backend: str = "be_variants",
    weights: Mapping[str, int] | None = None,
    hop_prefix: str = "autobatch",
) -> str:
    """The HTTP setup: one Triton, ``variants`` maps server name -> the variant's model.

    ``listen`` is ``HOST:PORT``; ``triton_http`` Triton's HTTP ``HOST:PORT``;
    ``weights`` the starting weights by server (default: all on the first).
    ``hop_prefix`` names the abstract sockets of the internal hops, which are
    global to the host's network namespace: two HAProxies need different ones.
    """
    w = _weights(variants, weights)
    triton = triton_http.split("://", 1)[-1].rstrip("/")
    out = [_HEADER.format(socket=socket_path)]
    out.append(f"frontend fe_clients\n    bind {listen}\n    default_backend {backend}\n")
    out.append(f"backend {backend}\n    balance roundrobin")
    for server in variants:
        out.append(f"    server {server} abns@{hop_prefix}-{server} weight {w[server]}")
    out.append("")
    for server, variant_model in variants.items():
        out.append(
            f"frontend fe_{server}\n"
            f"    bind abns@{hop_prefix}-{server}\n"
            f"    http-request set-path %[path,regsub(^/v2/models/{model}/,/v2/models/{variant_model}/)]\n"
            f"    default_backend be_triton\n"
        )
    out.append(f"backend be_triton\n    server triton {triton}\n")
    return "\n".join(out)


def grpc_config(
    *,
    listen: str,
    socket_path: str | Path,
    servers: Mapping[str, str],
    backend: str = "be_variants",
    weights: Mapping[str, int] | None = None,
) -> str:
    """The gRPC setup: ``servers`` maps server name -> that Triton's gRPC ``HOST:PORT``."""
    w = _weights(servers, weights)
    out = [_HEADER.format(socket=socket_path)]
    out.append(f"frontend fe_clients\n    bind {listen} proto h2\n    default_backend {backend}\n")
    out.append(f"backend {backend}\n    balance roundrobin")
    for name, address in servers.items():
        out.append(f"    server {name} {address} proto h2 weight {w[name]}")
    out.append("")
    return "\n".join(out)


def write_variant(
    source: str | Path,
    repository: str | Path,
    name: str,
    profile: Profile,
    *,
    parameters: Mapping[str, str | None] | None = None,
) -> Path:
    """Copy the model folder ``source`` into ``repository`` as model ``name`` running ``profile``.

    The copy's ``config.pbtxt`` gets ``name`` (Triton requires it to match the
    folder) and the profile's batching fields; ``parameters`` sets string
    parameters (None removes one). Compiled caches are not copied. Returns the
    new folder.
    """
    from autobatch.profiles import parse_pbtxt, render_pbtxt

    src = Path(source)
    folder = Path(repository) / name
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("__pycache__"))
    path = folder / "config.pbtxt"
    config = profile.merge_into(parse_pbtxt(path.read_text(encoding="utf-8"), str(path)))
    config["name"] = name
    if parameters:
        params = dict(config.get("parameters") or {})
        for key, value in parameters.items():
            if value is None:
                params.pop(key, None)
            else:
                params[key] = {"string_value": value}
        config["parameters"] = params
    path.write_text(render_pbtxt(config, str(path)), encoding="utf-8")
    return folder


def haproxy_binary() -> str:
    path = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").is_file() else None)
    if path is None:
        raise ServeError("haproxy is not installed (Debian: apt-get install haproxy)")
    return path


def check_config(path: str | Path) -> None:
    """``haproxy -c``: a config HAProxy would refuse is a ``ConfigError`` naming the file."""
    r = subprocess.run(
        [haproxy_binary(), "-c", "-q", "-f", str(path)], capture_output=True, text=True, timeout=30
    )
    if r.returncode != 0:
        lines = [ln.strip() for ln in (r.stderr + r.stdout).splitlines() if "ALERT" in ln or "rror" in ln]
        raise ConfigError(f"{path}: haproxy refuses the config: {' | '.join(lines[:3]) or r.returncode}",
                          source=str(path))


class HAProxyProcess(Server):
    """A foreground ``haproxy -f CONFIG -db`` in its own process group, as a context manager.

    ``start()`` checks the config, starts HAProxy and waits until the runtime
    socket answers; ``stop()`` ends it (SIGTERM, then SIGKILL). ``start()`` again
    starts a fresh one from the same config: the weights of the file are back,
    as after a restart in production.
    """

    def __init__(self, config_text: str, socket_path: str | Path, *, startup_timeout_s: float = 15.0) -> None:
        self.config_text = config_text
        self.socket_path = Path(socket_path)
        self.startup_timeout_s = startup_timeout_s
        self._tmp = tempfile.TemporaryDirectory(prefix="autobatch-haproxy-")
        self.config_path = Path(self._tmp.name) / "haproxy.cfg"
        self.config_path.write_text(config_text, encoding="utf-8")
        self.log_path = Path(self._tmp.name) / "haproxy.log"
        self._proc = ManagedProcess("haproxy", self.log_path)

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def running(self) -> bool:
        return self._proc.running()

    def start(self) -> HAProxyProcess:
        if self.running():
            return self
        check_config(self.config_path)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a stale socket from a killed run
        self._proc.start([haproxy_binary(), "-f", str(self.config_path), "-db"])
        try:
            poll_until(self._answers, timeout_s=self.startup_timeout_s, interval_s=0.02,
                       what=f"haproxy's socket {self.socket_path} to answer",
                       check=lambda: self._proc.check_alive("at start-up"))
        except ServeError as exc:
            tail = self.log_tail()
            self.stop()
            raise ServeError(f"{exc}: {tail}" if tail not in str(exc) else str(exc)) from None
        return self

    def _answers(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                s.connect(str(self.socket_path))
                s.sendall(b"show info\n")
                return bool(s.recv(64))
        except OSError:
            return False

    def log_tail(self, lines: int = 5) -> str:
        return self._proc.log_tail(lines)

    def stop(self) -> None:
        self._proc.stop(10.0)

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._tmp.cleanup()
