"""One mode's own servers: an emulated GPU, a Triton whose model runs on it, HAProxy in front,
and for a controller its sidecar.

Every mode pays the same path (the load generator over HTTP, one HAProxy hop,
Triton, the Python-backend stub, the device), so the modes differ only in what
is compared. The gateway mode's Triton holds one warm variant per rung, all on
the mode's one device, and HAProxy splits between them by weight.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autobatch.config import load_yaml
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.curve import BatchCurve
from autobatch.device.protocol import Address
from autobatch.device.settings import DeviceSettings
from autobatch.lab.closed_loop import SidecarProcess
from autobatch.lab.gpu import DeviceProcess, emulated_repository
from autobatch.lab.haproxy import HAProxyProcess, http_rewrite_config
from autobatch.lab.serve import TritonServer, TritonUrls, free_port
from autobatch.lab.sidebyside.layout import ModeSpec
from autobatch.profiles import Profile, load_profiles

__all__ = ["BACKEND", "ModeStack", "StackSetup", "check_sidecar_configs", "mode_ladder", "sidecar_mapping",
           "variant_model", "variant_server"]

BACKEND = "be_variants"
SERVER = "model"
"""HAProxy's one server of a mode that is not the gateway."""


def variant_model(model: str, profile: str) -> str:
    return f"{model}__{re.sub(r'[^A-Za-z0-9_]', '_', profile)}"


def variant_server(profile: str) -> str:
    return f"v-{re.sub(r'[^A-Za-z0-9_.-]', '_', profile)}"


@dataclass(frozen=True)
class StackSetup:
    """What every mode's stack shares."""

    model: str
    """The model's name, as clients and the sidecar config call it."""
    curve: BatchCurve
    device: DeviceSettings
    """The emulated GPU's settings (its ports are chosen per mode)."""
    ladder: tuple[Profile, ...]
    sidecar_config: Path
    """The reload controller's config (a ``dcgm`` utilisation is pointed at the mode's device)."""
    gateway_config: Path
    """The gateway controller's config (its ``actuator`` is pointed at the mode's HAProxy)."""


def _device_name(mode: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:@/+-]", "_", f"gpu-{mode}")[:128]


class ModeStack:
    """The servers of one mode, entered on ``stack`` (closed with it)."""

    def __init__(self, mode: ModeSpec, setup: StackSetup, workdir: Path,
                 stack: contextlib.ExitStack) -> None:
        self.mode = mode
        self.setup = setup
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        host = setup.device.listen.host
        settings = setup.device.with_(name=_device_name(mode.name), listen=Address(host, 0),
                                      metrics=Address(setup.device.metrics.host, 0))
        self.device = stack.enter_context(DeviceProcess(settings, log_path=workdir / "device.log"))
        gateway = mode.kind == "gateway"
        profiles = mode_ladder(mode, setup) if gateway else (mode.profile,)
        self.models = [variant_model(setup.model, p.name) for p in profiles] if gateway else [setup.model]
        # A gateway's device-context prefix of each variant, to its profile (which variant served).
        self.variants = {prefix: p.name for prefix, p in zip(self.contexts_prefixes, profiles, strict=True)
                         if p is not None} if gateway else {}
        repo = emulated_repository(workdir / "repo", self.models)
        self.triton = _triton(repo, workdir, stack)
        for name, profile in zip(self.models, profiles, strict=True):
            assert profile is not None
            self.triton.load_emulator(setup.curve, profile, device=self.device.address, model=name)
        self.servers = ({variant_server(p.name): m for p, m in zip(profiles, self.models, strict=True)}
                        if gateway else {SERVER: setup.model})
        # A unix socket's path is at most 107 bytes: a short folder of its own, not the workdir.
        sockdir = Path(tempfile.mkdtemp(prefix="ab-sbs-"))
        stack.callback(shutil.rmtree, sockdir, ignore_errors=True)
        self.socket = sockdir / "admin.sock"
        self.url = f"127.0.0.1:{free_port()}"
        first = variant_server(mode.profile.name) if gateway and mode.profile else next(iter(self.servers))
        text = http_rewrite_config(
            listen=self.url, socket_path=self.socket, triton_http=self.triton.urls.http, model=setup.model,
            variants=self.servers, backend=BACKEND, weights={first: 100},
            hop_prefix=f"sbs-{workdir.name}-{free_port()}")
        self.haproxy = stack.enter_context(HAProxyProcess(text, self.socket))
        self.decision_log: Path | None = None
        self.sidecar_url: str | None = None
        if mode.controller:
            path, self.sidecar_url = self._sidecar_config()
            self.decision_log = workdir / "decisions.jsonl"
            self._sidecar = SidecarProcess(path, self.sidecar_url, workdir / "sidecar.log")

    def start_sidecar(self, stack: contextlib.ExitStack) -> None:
        """Start the controller (a no-op for a static mode); stopped with ``stack``."""
        if self.mode.controller:
            stack.enter_context(self._sidecar)

    @property
    def haproxy_pid(self) -> int | None:
        return self.haproxy.pid

    @property
    def sidecar_pid(self) -> int | None:
        return self._sidecar.pid if self.mode.controller else None

    @property
    def contexts_prefixes(self) -> list[str]:
        """The device contexts of this mode's model: its instances are named ``<model>_<group>_<i>``."""
        return [f"{m}_" for m in self.models]

    def _sidecar_config(self) -> tuple[Path, str]:
        listen = f"127.0.0.1:{free_port()}"
        out = self.workdir / "sidecar.yaml"
        data = sidecar_mapping(self.mode, self.setup, triton=self.triton.urls, listen=listen,
                               dcgm_url=self.device.metrics_url, socket=self.socket,
                               decision_log=self.workdir / "decisions.jsonl")
        out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        sidecar_config_from_mapping(data, str(out), base=out.parent)
        return out, f"http://{listen}"


def mode_ladder(mode: ModeSpec, setup: StackSetup) -> tuple[Profile, ...]:
    """The rungs a controller mode switches between: a variant's own (its config may name
    another ``profiles.dir`` and ``profiles.ladder``), else the comparison's. A name its
    folder lacks is left out here; the config's check names it."""
    if mode.config is None:
        return setup.ladder
    section = load_yaml(mode.config).get("profiles") or {}
    names = section.get("ladder")
    if not isinstance(names, list) or not names:
        return setup.ladder
    folder = mode.config.resolve().parent / str(section.get("dir", f"profiles/{setup.model}"))
    available = load_profiles(folder) if folder.is_dir() else {}
    return tuple(available[n] for n in names if isinstance(n, str) and n in available)


def sidecar_mapping(mode: ModeSpec, setup: StackSetup, *, triton: TritonUrls, listen: str, dcgm_url: str,
                    socket: Path, decision_log: Path) -> dict[str, Any]:
    """A controller mode's sidecar config pointed at its own servers: its Triton, the
    device's dcgm metrics, and for a gateway its HAProxy admin ``socket`` and one variant
    per rung of the mode's ladder."""
    gateway = mode.kind == "gateway"
    path = mode.config or (setup.gateway_config if gateway else setup.sidecar_config)
    data = dict(load_yaml(path))
    here = path.resolve().parent
    data["model"] = setup.model
    data["triton"] = {"http_url": triton.http, "metrics_url": triton.metrics, "grpc_url": triton.grpc}
    data["server"] = _server(data.get("server"), listen, here)
    data["profiles"] = _absolute(data["profiles"], "dir", here)
    data["policy"] = _absolute(data.get("policy") or {}, "curve", here)
    data["signals"] = _signals(data.get("signals") or {}, dcgm_url)
    data["decision_log"] = str(decision_log)
    data.pop("state_file", None)
    if gateway:
        act = dict(data["actuator"])
        act.update(socket=str(socket), backend=BACKEND, variants={
            p.name: {"server": variant_server(p.name), "model": variant_model(setup.model, p.name)}
            for p in mode_ladder(mode, setup)})
        data["actuator"] = act
    return data


def check_sidecar_configs(modes: Sequence[ModeSpec], setup: StackSetup) -> None:
    """Every controller mode's sidecar config as its stack will write it (placeholder
    addresses), checked before any server starts: a bad variant is one ConfigError naming
    the variant (or the config file) and the field, not a failed repeat after the servers came
    up."""
    for mode in modes:
        if not mode.controller:
            continue
        path = mode.config or (setup.gateway_config if mode.kind == "gateway" else setup.sidecar_config)
        here = path.resolve().parent
        # a variant's config is a file the run wrote: name the variant, as it was typed
        source = f"variant {mode.name!r}" if mode.config else str(path)
        data = sidecar_mapping(
            mode, setup, triton=TritonUrls("127.0.0.1", 1, 1, 1),
            listen="127.0.0.1:1", dcgm_url="http://127.0.0.1:1/metrics", socket=here / "admin.sock",
            decision_log=here / "decisions.jsonl")
        sidecar_config_from_mapping(data, source, base=here)


def _triton(repo: Path, workdir: Path, stack: contextlib.ExitStack) -> TritonServer:
    """A Triton on free ports, started (new ones if one was taken meanwhile: other
    people's servers start on this machine too)."""
    return stack.enter_context(TritonServer.on_free_ports(
        repo, models=[], log_path=workdir / "tritonserver.log", startup_timeout_s=300))


def _absolute(section: Mapping[str, Any], key: str, here: Path) -> dict[str, Any]:
    out = dict(section)
    if out.get(key):
        out[key] = str((here / out[key]).resolve())
    return out


def _server(section: Any, listen: str, here: Path) -> dict[str, Any]:
    out = _absolute(section or {}, "token_file", here)
    out["listen"] = listen
    return out


def _signals(section: Mapping[str, Any], dcgm_url: str) -> dict[str, Any]:
    """The device's dcgm-exporter metrics as the utilisation signal, as on a GPU node (a
    config that turned utilisation off keeps it off)."""
    out = dict(section)
    if out.get("utilization", "auto") in ("auto", "dcgm"):
        out.update(utilization="dcgm", dcgm_url=dcgm_url)
    return out
