"""The emulated device's settings: from a device YAML file or from options.

A device file::

    name: gpu0                      # shown in READY, /status and the metrics' modelName
    listen: 127.0.0.1:9410          # the job port (HOST:PORT; port 0: a free one)
    metrics: 127.0.0.1:9411         # /metrics, /status, /healthz (dcgm-exporter's names)
    util_period_ms: 1000            # DCGM_FI_DEV_GPU_UTIL's sample period
    priority: realtime              # realtime | high | normal: the device process's CPU priority
    sharing:
      policy: timeslice             # exclusive | timeslice | concurrent
      quantum_ms: 2
      switch_ms: 0

Every field is optional; errors name the file, the field and the value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autobatch.config import Section, load_yaml
from autobatch.device.protocol import Address, check_context, parse_address
from autobatch.errors import ConfigError
from autobatch.sharing import SharingModel, parse_sharing

__all__ = [
    "DEFAULT_LISTEN",
    "DEFAULT_METRICS",
    "PRIORITIES",
    "DeviceSettings",
    "device_settings",
    "load_device_config",
    "parse_device",
    "parse_throughput",
]

DEFAULT_LISTEN = "127.0.0.1:9410"
DEFAULT_METRICS = "127.0.0.1:9411"
"""Not dcgm-exporter's 9400: the sidecar listens there by default."""
PRIORITIES = ("realtime", "high", "normal")


@dataclass(frozen=True)
class DeviceSettings:
    """One emulated device."""

    name: str = "gpu0"
    listen: Address = field(default_factory=lambda: parse_address(DEFAULT_LISTEN))
    """Where clients connect to submit jobs."""
    metrics: Address = field(default_factory=lambda: parse_address(DEFAULT_METRICS))
    """Where ``/metrics`` (dcgm-exporter's names), ``/status`` and ``/healthz`` are served."""
    util_period_ms: float = 1000.0
    """The period over which DCGM_FI_DEV_GPU_UTIL is the busy share (NVML's own sample period
    is 1/6 s to 1 s depending on the product; the exporter reports the last one)."""
    sharing: SharingModel = field(default_factory=SharingModel)
    priority: str = "realtime"
    """The device process's CPU scheduling: ``realtime`` (SCHED_FIFO where allowed, else as
    ``high``), ``high`` (nice -10 where allowed), ``normal``. A GPU does not slow down when
    the host's cores are busy; the emulated one only wakes late when the OS runs something
    else first, and a real-time thread is woken before ordinary ones (docs/shared-gpu.md)."""

    def __post_init__(self) -> None:
        check_context(self.name, "name")
        if self.priority not in PRIORITIES:
            raise ConfigError(f"priority = {self.priority!r}: must be one of {', '.join(PRIORITIES)}",
                              field="priority", value=self.priority)
        if not (math.isfinite(self.util_period_ms) and 10 <= self.util_period_ms <= 60_000):
            raise ConfigError(f"util_period_ms = {self.util_period_ms!r}: must be 10-60000 ms",
                              field="util_period_ms", value=self.util_period_ms)
        if self.listen.port != 0 and self.listen == self.metrics:
            raise ConfigError(f"metrics = {self.metrics}: listen is {self.listen} too: give the "
                              "job port and the metrics port each their own", field="metrics",
                              value=str(self.metrics))

    def with_(self, **changes: Any) -> DeviceSettings:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "listen": str(self.listen), "metrics": str(self.metrics),
                "util_period_ms": self.util_period_ms, "priority": self.priority,
                "sharing": self.sharing.to_dict()}


def parse_device(data: Any, source: str) -> DeviceSettings:
    top = Section(source, data)
    name = top.str("name", "gpu0")
    try:
        check_context(name, "name")
    except ConfigError:
        raise top.fail("name", name, "must be 1-128 letters, digits or _.:@/+- (no spaces)") from None
    listen = _address(top, "listen", DEFAULT_LISTEN)
    metrics = _address(top, "metrics", DEFAULT_METRICS)
    period = top.float("util_period_ms", 1000.0, min=10.0, max=60_000.0)
    priority = top.str("priority", "realtime", choices=PRIORITIES)
    sharing = parse_sharing(top.section("sharing", {}))
    top.done()
    try:
        return DeviceSettings(name, listen, metrics, period, sharing, priority)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}", source=source, field=exc.field, value=exc.value) from exc


def _address(sec: Section, key: str, default: str) -> Address:
    raw = sec.raw(key, default)
    try:
        return parse_address(raw, key)
    except ConfigError:
        raise sec.fail(key, raw, "must be HOST:PORT with a port 0-65535 (e.g. 127.0.0.1:9410)") from None


def load_device_config(path: str | Path) -> DeviceSettings:
    p = Path(path)
    return parse_device(load_yaml(p), str(p))


def parse_throughput(text: str, field: str = "throughput") -> dict[int, float]:
    """``1:1,2:1.5,4:2`` (active contexts: the device's total speed) as a mapping."""
    out: dict[int, float] = {}
    try:
        for part in text.split(","):
            k, v = part.split(":")
            out[int(k)] = float(v)
    except ValueError:
        raise ConfigError(f"{field} = {text!r}: must be K:SPEED pairs separated by commas "
                          "(e.g. 1:1,2:1.5,4:2)", field=field, value=text) from None
    return out


def device_settings(
    config: str | Path | None = None,
    *,
    name: str | None = None,
    listen: str | None = None,
    metrics: str | None = None,
    util_period_ms: float | None = None,
    priority: str | None = None,
    policy: str | None = None,
    quantum_ms: float | None = None,
    switch_ms: float | None = None,
    throughput: str | None = None,
) -> DeviceSettings:
    """A device file's settings (or the defaults) with the given fields replaced: what
    ``autobatch device`` runs. Errors name the field and the value."""
    data: dict[str, Any] = {}
    source = "options"
    if config is not None:
        raw = load_yaml(Path(config))
        Section(str(config), raw)  # a file that is not a mapping fails here, naming it
        data = dict(raw or {})
        source = f"{config} (with options)"
    for key, value in (("name", name), ("listen", listen), ("metrics", metrics),
                       ("util_period_ms", util_period_ms), ("priority", priority)):
        if value is not None:
            data[key] = value
    sharing = dict(data.get("sharing") or {}) if isinstance(data.get("sharing") or {}, dict) else None
    if sharing is not None:
        for key, value in (("policy", policy), ("quantum_ms", quantum_ms), ("switch_ms", switch_ms)):
            if value is not None:
                sharing[key] = value
        if throughput is not None:
            sharing["throughput"] = parse_throughput(throughput)
        if sharing:
            data["sharing"] = sharing
    given = any(v is not None for v in (name, listen, metrics, util_period_ms, priority, policy,
                                        quantum_ms, switch_ms, throughput))
    return parse_device(data, source if given or config is None else str(config))
