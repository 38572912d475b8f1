"""The sidecar's settings as frozen dataclasses, and the range of every number.

:mod:`autobatch.controller.config.parse` reads the YAML into these; the loop,
the actuators' builders and the HTTP server read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autobatch.access import RestrictedApi
from autobatch.actuators.gateway.settings import GatewaySettings
from autobatch.policy import PolicySettings
from autobatch.profiles import Profile
from autobatch.signals.factory import ReadTarget, SignalSettings

__all__ = [
    "RANGES",
    "READ_TIMEOUT_S",
    "ActuatorSettings",
    "ReplicaSettings",
    "ServerSettings",
    "SidecarConfig",
    "TritonEndpoints",
]

_DAY_S = 86_400.0

RANGES: dict[str, tuple[float, float]] = {
    # field: (lowest, highest) allowed; a time in seconds unless its name says otherwise.
    "slo.p95_ms": (0.0, 3_600_000.0),
    "slo.p99_ms": (0.0, 3_600_000.0),
    "policy.interval_s": (0.05, 3_600.0),
    "policy.history_windows": (1, 100_000),
    # policy.<group>.<field>: the groups of autobatch.policy.settings
    "policy.trust.max_window_age_s": (0.0, _DAY_S),
    "policy.trust.settle_s": (0.0, _DAY_S),
    "policy.trust.p95_settle_s": (0.0, _DAY_S),
    "policy.trust.breach_min_mean": (0.0, 1.0),
    "policy.stability.confirmations": (1, 1_000),
    "policy.stability.min_dwell_s": (0.0, _DAY_S),
    "policy.stability.stabilization_s": (0.0, _DAY_S),
    "policy.stability.stabilization_drop": (0.0, 1.0),
    "policy.survival.overload_ratio": (0.0, 1_000.0),
    "policy.survival.overload_windows": (1, 1_000),
    "policy.survival.overload_backlog_ratio": (0.0, 1_000.0),
    "policy.survival.saturation_delay_ratio": (0.0, 1_000.0),
    "policy.survival.saturation_min_queue_ms": (0.0, 3_600_000.0),
    "policy.protective.failure_rps_threshold": (0.0, 1e9),
    "policy.efficiency.headroom": (0.0, 1.0),
    "policy.efficiency.util_ceiling": (0.0, 1.0),
    "policy.efficiency.min_saving": (0.0, 1.0),
    "policy.efficiency.latency_tolerance": (0.0, 1.0),
    "policy.efficiency.min_freed_share": (0.0, 1.0),
    "policy.efficiency.max_busy": (0.0, 1.0),
    "policy.efficiency.max_p95": (0.0, 1.0),
    "policy.efficiency.max_load": (0.0, 1.0),
    "policy.efficiency.near_delay_ratio": (0.0, 1_000.0),
    "policy.efficiency.wait_max_busy": (0.0, 1.0),
    "policy.capacity.margin": (0.0, 1_000.0),
    "policy.capacity.min_gain": (0.0, 1_000.0),
    "policy.capacity.busy_ceiling": (0.0, 1.0),
    "policy.capacity.live_min_busy": (0.0, 1.0),
    "policy.capacity.device_alpha": (0.0, 1.0),
    "policy.capacity.learn_max_step": (1.0, 1_000.0),
    "policy.forecast.windows": (3, 1_000),
    "policy.forecast.alpha": (0.0, 1.0),
    "policy.forecast.beta": (0.0, 1.0),
    "policy.forecast.z": (0.0, 1_000.0),
    "policy.forecast.jump_z": (0.0, 1_000.0),
    "policy.forecast.default_actuation_s": (0.0, 3_600.0),
    "policy.device.shared_min": (0.0, 1.0),
    "policy.device.p95_per_mean": (1.0, 100.0),
    "policy.device.target_p95": (0.0, 1.0),
    "policy.device.act_p95": (0.0, 1.0),
    "policy.device.climb_p95": (0.0, 1.0),
    "policy.device.own_queue": (0.0, 1.0),
    "policy.device.steady_windows": (1, 100),
    "policy.device.change_windows": (0, 100),
    "policy.device.change_share": (0.0, 1.0),
    "policy.device.change_rate": (0.0, 1.0),
    "policy.device.wait_tail": (0.0, 1.0),
    "signals.range_s": (0.0, _DAY_S),
    "signals.timeout_s": (0.0, 300.0),
    "signals.max_scrape_bytes": (1_024, 1 << 30),
    "signals.instances_per_replica": (1, 100_000),
    "actuator.timeout_s": (0.0, 3_600.0),
    "server.request_timeout_s": (0.0, 300.0),
}
"""Every number of the sidecar config and its range (inclusive, except a lower bound
of 0 for a time or an SLO, which must be above it)."""

READ_TIMEOUT_S = 5.0
"""The reload actuator's timeout for one config read (or half ``actuator.timeout_s``
if that is shorter): a read is milliseconds; this only gives up on a server that
accepts connections and then hangs."""


@dataclass(frozen=True)
class TritonEndpoints:
    http_url: str
    """Triton's HTTP endpoint: config, stats, the repository (load) API."""
    metrics_url: str
    """Triton's Prometheus endpoint (the metrics port)."""
    grpc_url: str = "127.0.0.1:8001"
    """Triton's gRPC endpoint (``host:port``): the reload actuator sends its loads here."""
    restricted_api: RestrictedApi | None = None
    """``restricted_api: {header, key_file}``: Triton was started with
    ``--http-restricted-api``/``--grpc-restricted-protocol``; every request to its
    model-repository, model-config and statistics APIs carries the header with the key
    read from ``key_file`` (on every replica, in fleet mode). None: no key is sent."""


@dataclass(frozen=True)
class ActuatorSettings:
    kind: str = "triton"
    """``triton`` (reload with a config override), ``dry-run`` (log only) or ``gateway``."""
    mode: str = "override"
    """Triton actuator: ``override`` (load API only) or ``file`` (also write config.pbtxt)."""
    load_api: str = "grpc"
    """Triton actuator: send loads over ``grpc`` (default) or ``http``. A load running on
    Triton's HTTP endpoint stalls some HTTP inference requests for its whole duration."""
    repository: Path | None = None
    """Model repository for ``mode: file``."""
    timeout_s: float = 120.0
    """How long one load may take before it counts as failed (reload actuator)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Kind-specific settings as written (the gateway's backend, servers, socket, steps, ...)."""
    gateway: GatewaySettings | None = None
    """``kind: gateway``: :attr:`options` validated; None for other kinds."""
    replicas: ReplicaSettings | None = None
    """``kind: triton``: a fleet of Triton replicas, reloaded one at a time; None: ``triton.*`` only."""

    @property
    def read_timeout_s(self) -> float:
        """The reload actuator's timeout for one config read."""
        return min(READ_TIMEOUT_S, self.timeout_s / 2)


@dataclass(frozen=True)
class ReplicaSettings:
    """``actuator.replicas``: a static list, or the ready endpoints of a Kubernetes Service."""

    static: tuple[tuple[str, str | None], ...] = ()
    """(http_url, grpc_url) of each replica, in the order they are changed."""
    service: str | None = None
    """The Service whose ready endpoints are the replicas (read from its EndpointSlices)."""
    namespace: str | None = None
    """The Service's namespace; None: the pod's own."""
    http_port: str | int = "http"
    """The EndpointSlice port (name or number) of Triton's HTTP endpoint."""
    grpc_port: str | int = "grpc"
    """... and of its gRPC endpoint (loads go there with ``load_api: grpc``)."""
    ready_timeout_s: float = 120.0
    """How long a replica may take to answer READY on the new profile before the next starts."""


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    """An IPv4 or IPv6 address (written ``[::1]:9400`` in ``listen``) or a host name."""
    port: int = 9400
    token_file: Path | None = None
    """File holding the bearer token for ``POST /profile``; without it pinning is refused."""
    protect_reads: bool = False
    """Also require the token for ``/status`` and ``/metrics`` (the probes ``/healthz``
    and ``/readyz`` never need it). Off by default: fine on loopback or a pod IP."""
    request_timeout_s: float = 10.0
    """How long a client may take to send one request (headers and body); a
    half-sent request is dropped after this."""

    @property
    def address(self) -> str:
        """``host:port``, with an IPv6 host in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class SidecarConfig:
    source: str
    model: str
    triton: TritonEndpoints
    profiles: tuple[Profile, ...]
    policy: PolicySettings
    interval_s: float
    history_windows: int
    initial_profile: str | None
    signals: SignalSettings
    actuator: ActuatorSettings
    server: ServerSettings
    decision_log: Path | None
    state_file: Path | None = None
    """The pin and the last switch, kept across restarts (beside the decision log)."""
    deprecations: tuple[str, ...] = ()
    """One line for each field the file spells the old way (it still loads): the sidecar
    logs them at start, ``autobatch replay`` prints them."""

    def read_target(self) -> ReadTarget:
        """The model the signals read: this sidecar's, on its Triton."""
        return ReadTarget(self.model, self.triton.http_url, self.triton.metrics_url)

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def actuation_s(self) -> float:
        """How long one actuator call takes at most when nothing it waits on hangs:
        a load and its config reads (reload), or every weight step (gateway)."""
        a = self.actuator
        if a.gateway is not None:
            g = a.gateway
            return len(g.steps) * (g.step_dwell_s + 3 * g.request_timeout_s) + 2 * g.request_timeout_s
        if a.kind == "triton" and a.replicas is not None:
            # One replica at a time: its load, its reads and its wait for READY. A running
            # tick whose calls have not timed out is progress, so one replica's worth is
            # enough here; actuation_limit_s covers the whole fleet.
            return a.timeout_s + a.replicas.ready_timeout_s + 3 * a.read_timeout_s
        if a.kind == "triton":
            # reconcile's read, then apply's read, load and read-back
            return a.timeout_s + 3 * a.read_timeout_s
        return 0.0

    @property
    def actuation_limit_s(self) -> float:
        """The hard limit on one actuator call, rollback included: the reload actuator's
        worst case is a load that times out (T), a read that waits for the stray load (T)
        and a rollback load queued behind it (2 T), plus four config reads. The
        controller cancels a call that outlives it (an actuator bug, not a slow server)."""
        a = self.actuator
        if a.gateway is not None:
            return 2 * self.actuation_s + 10.0
        one = 4 * a.timeout_s + 4 * a.read_timeout_s
        if a.kind == "triton" and a.replicas is not None:
            # Every replica changed and rolled back; a Service's fleet is counted as 32.
            n = len(a.replicas.static) or 32
            return 2 * n * (one + a.replicas.ready_timeout_s) + 10.0
        if a.kind == "triton":
            return one + 10.0
        return 10.0

    @property
    def liveness_bound_s(self) -> float:
        """``/healthz`` is 503 when no tick has completed for longer than this: one
        interval, one scrape (``signals.timeout_s``) and one actuation (:attr:`actuation_s`)."""
        return self.interval_s + self.signals.timeout_s + self.actuation_s
