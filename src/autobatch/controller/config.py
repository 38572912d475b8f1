"""The sidecar's YAML config, read into frozen typed settings.

Paths inside the file (profiles, curve, token, decision log, repository) are
relative to the file itself, so a config and its profiles travel together.
Every bad value is one line naming the file, the field path, the value and
what is allowed (``ConfigError``, exit code 2), before anything starts::

    model: dense_mlp
    triton:
      http_url: http://127.0.0.1:8000
      metrics_url: http://127.0.0.1:8002/metrics
    profiles:
      dir: ../profiles/dense_mlp
      ladder: [latency-soft, balanced, aggressive]   # most latency-oriented first
    slo: {p95_ms: 40}
    policy: {interval_s: 2, confirmations: 3, min_dwell_s: 20}
    signals: {source: triton}                      # or prometheus, see below
    actuator: {kind: triton}                       # triton | dry-run | gateway
    server: {listen: 127.0.0.1:9400, token_file: token}
    decision_log: decisions.jsonl
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autobatch.actuators.gateway.settings import GatewaySettings, parse_gateway_options
from autobatch.config import Section, load_yaml
from autobatch.curve import BatchCurve, load_curve
from autobatch.errors import ConfigError
from autobatch.policy import PolicySettings
from autobatch.profiles import Profile, load_profiles
from autobatch.signals.factory import SOURCES, UTILIZATION, ReadTarget, SignalSettings

__all__ = ["SidecarConfig", "load_sidecar_config", "sidecar_config_from_mapping"]


@dataclass(frozen=True)
class TritonEndpoints:
    http_url: str
    """Triton's HTTP endpoint: config, stats, the repository (load) API."""
    metrics_url: str
    """Triton's Prometheus endpoint (the metrics port)."""
    grpc_url: str = "127.0.0.1:8001"
    """Triton's gRPC endpoint (``host:port``): the reload actuator sends its loads here."""


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
    """How long one load may take before it counts as failed."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Kind-specific settings as written (the gateway's backend, servers, socket, steps, ...)."""
    gateway: GatewaySettings | None = None
    """``kind: gateway``: :attr:`options` validated; None for other kinds."""
    replicas: ReplicaSettings | None = None
    """``kind: triton``: a fleet of Triton replicas, reloaded one at a time; None: ``triton.*`` only."""


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
    port: int = 9400
    token_file: Path | None = None
    """File holding the bearer token for ``POST /profile``; without it pinning is refused."""


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

    def read_target(self) -> ReadTarget:
        """The model the signals read: this sidecar's, on its Triton."""
        return ReadTarget(self.model, self.triton.http_url, self.triton.metrics_url)

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(name)


def _path(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else (base / p)


def load_sidecar_config(path: str | Path) -> SidecarConfig:
    p = Path(path)
    return sidecar_config_from_mapping(load_yaml(p), str(p), base=p.resolve().parent)


def sidecar_config_from_mapping(data: Any, source: str, base: Path) -> SidecarConfig:
    """Read each settings group with its own parser, in the file's documented order."""
    top = Section(source, data)
    model = top.str("model")
    triton = _parse_triton(top.section("triton", {}))
    profiles = _parse_profiles(top.section("profiles"), base, model)
    slo = _parse_slo(top.section("slo"))
    policy, loop = _parse_policy(top.section("policy", {}), base, profiles, slo)
    signals = _parse_signals(top.section("signals", {}), loop, policy)
    actuator = _parse_actuator(
        top.section("actuator", {}), base, model=model, triton=triton, profiles=profiles, slo=slo
    )
    if actuator.replicas is not None and signals.source != "prometheus":
        # One replica's metrics would decide for all of them.
        raise top.fail("signals.source", signals.source,
                       "must be prometheus with actuator.replicas: the decision reads the whole fleet")
    server = _parse_server(top.section("server", {}), base)
    log = _parse_decision_log(top, base)
    top.done()
    return SidecarConfig(
        source=source,
        model=model,
        triton=triton,
        profiles=profiles.ladder,
        policy=policy,
        interval_s=loop.interval_s,
        history_windows=loop.history_windows,
        initial_profile=profiles.initial,
        signals=signals,
        actuator=actuator,
        server=server,
        decision_log=log,
    )


# -- one parser per settings group ------------------------------------------------------
# Each reads its section field by field and ends with ``done()`` (no unknown keys), so a
# section's checks sit together and the order of errors is the order of the file.


@dataclass(frozen=True)
class _Ladder:
    ladder: tuple[Profile, ...]
    initial: str | None


@dataclass(frozen=True)
class _Slo:
    p95_ms: float
    p99_ms: float | None


@dataclass(frozen=True)
class _Loop:
    interval_s: float
    history_windows: int


def _parse_triton(sec: Section) -> TritonEndpoints:
    triton = TritonEndpoints(
        http_url=sec.url("http_url", "http://127.0.0.1:8000"),
        metrics_url=sec.url("metrics_url", "http://127.0.0.1:8002/metrics"),
        grpc_url=sec.str("grpc_url", "127.0.0.1:8001"),
    )
    host, _, port = triton.grpc_url.rpartition(":")
    if "://" in triton.grpc_url or not host or not port.isdigit():
        raise sec.fail("grpc_url", triton.grpc_url, "must be HOST:PORT, e.g. 127.0.0.1:8001")
    sec.done()
    return triton


def _parse_profiles(sec: Section, base: Path, model: str) -> _Ladder:
    pdir = _path(base, sec.str("dir"))
    assert pdir is not None
    if not pdir.is_dir():
        raise sec.fail("dir", sec.data.get("dir"), f"profile directory {pdir} not found")
    available = load_profiles(pdir)
    names = sec.raw("ladder")
    if not isinstance(names, list) or len(names) < 2:
        raise sec.fail("ladder", names, "must list two or more profile names, most latency-oriented first")
    ladder: list[Profile] = []
    for i, name in enumerate(names):
        if name not in available:
            raise sec.fail(
                f"ladder[{i}]", name, f"no such profile in {pdir} (found: {', '.join(sorted(available))})"
            )
        if name in [q.name for q in ladder]:
            raise sec.fail(f"ladder[{i}]", name, "is listed twice")
        ladder.append(available[name])
    for prof in ladder:
        if prof.model and prof.model != model and pdir.name == prof.model:
            raise sec.fail("dir", str(pdir), f"holds profiles of model {prof.model!r}, not {model!r}")
    initial = sec.str("initial", None)
    if initial is not None and initial not in names:
        raise sec.fail("initial", initial, f"must be one of the ladder: {', '.join(names)}")
    sec.done()
    return _Ladder(tuple(ladder), initial)


def _parse_slo(sec: Section) -> _Slo:
    slo = _Slo(
        p95_ms=sec.float("p95_ms", min=0.0, min_exclusive=True),
        p99_ms=sec.float("p99_ms", None, min=0.0, min_exclusive=True),
    )
    sec.done()
    return slo


_POLICY_FLOATS = (
    "headroom", "util_ceiling", "min_dwell_s", "settle_s", "p95_settle_s", "stabilization_s",
    "max_window_age_s", "near_delay_ratio", "saturation_delay_ratio", "saturation_min_queue_ms",
    "capacity_margin", "min_gain", "failure_rps_threshold",
)


def _parse_policy(sec: Section, base: Path, profiles: _Ladder, slo: _Slo) -> tuple[PolicySettings, _Loop]:
    loop = _Loop(
        interval_s=sec.float("interval_s", 2.0, min=0.05),
        history_windows=sec.int("history_windows", 30, min=1),
    )
    curve: BatchCurve | None = None
    curve_path = _path(base, sec.str("curve", None))
    if curve_path is not None:
        curve = load_curve(curve_path)
    defaults = PolicySettings.__dataclass_fields__
    kwargs: dict[str, Any] = {key: sec.float(key, defaults[key].default, min=0.0) for key in _POLICY_FLOATS}
    for key in ("headroom", "util_ceiling"):
        if kwargs[key] > 1.0:
            raise sec.fail(key, kwargs[key], "must be a fraction in [0, 1]")
    kwargs["confirmations"] = sec.int("confirmations", defaults["confirmations"].default, min=1)
    reasons = sec.raw("failure_reasons", list(defaults["failure_reasons"].default))
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise sec.fail("failure_reasons", reasons, "must be a list of Triton failure reasons")
    kwargs["failure_reasons"] = tuple(reasons)
    sec.done()
    policy = PolicySettings(
        ladder=profiles.ladder, slo_p95_ms=slo.p95_ms, slo_p99_ms=slo.p99_ms, curve=curve, **kwargs
    )
    return policy, loop


def _parse_signals(sec: Section, loop: _Loop, policy: PolicySettings) -> SignalSettings:
    selector = sec.raw("selector", {})
    if not isinstance(selector, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
    ):
        raise sec.fail("selector", selector, "must map label names to string values")
    range_s = sec.float("range_s", None, min=0.0, min_exclusive=True)
    signals = SignalSettings(
        source=sec.str("source", "triton", choices=SOURCES),
        prometheus_url=sec.url("prometheus_url", None),
        selector=dict(selector),
        # rate() over at least two scrapes of the interval, and never under 4 s.
        range_s=range_s or max(2.0 * loop.interval_s, 4.0),
        utilization=sec.str("utilization", "auto", choices=UTILIZATION),
        dcgm_url=sec.url("dcgm_url", None),
        timeout_s=sec.float("timeout_s", 2.0, min=0.0, min_exclusive=True),
        max_age_s=policy.max_window_age_s,
    )
    if signals.source == "prometheus" and not signals.prometheus_url:
        raise sec.fail("prometheus_url", None, "is required when source is prometheus")
    if signals.utilization == "dcgm" and not signals.dcgm_url:
        raise sec.fail("dcgm_url", None, "is required when utilization is dcgm")
    sec.done()
    return signals


_ACTUATOR_COMMON = ("kind", "mode", "repository", "timeout_s", "load_api", "replicas")


def _parse_actuator(
    sec: Section, base: Path, *, model: str, triton: TritonEndpoints, profiles: _Ladder, slo: _Slo
) -> ActuatorSettings:
    kind = sec.str("kind", "triton", choices=("triton", "dry-run", "gateway"))
    mode = sec.str("mode", "override", choices=("override", "file"))
    load_api = sec.str("load_api", "grpc", choices=("grpc", "http"))
    repo = _path(base, sec.str("repository", None))
    if mode == "file" and repo is None:
        raise sec.fail("repository", None, "is required when mode is file")
    if repo is not None and not (repo / model / "config.pbtxt").is_file():
        raise sec.fail("repository", str(repo), f"has no {model}/config.pbtxt")
    timeout = sec.float("timeout_s", 120.0, min=0.0, min_exclusive=True)
    replicas = None
    if sec.has("replicas"):
        if kind != "triton":
            raise sec.fail("replicas", sec.raw("replicas"), "only kind triton reloads a fleet of replicas")
        if mode == "file":
            raise sec.fail("replicas", sec.raw("replicas"),
                           "mode file writes one repository; a fleet takes mode override")
        replicas = _parse_replicas(sec, load_api, timeout)
    # Whatever is not common belongs to the kind (only the gateway takes any).
    options = {k: v for k, v in sec.data.items() if k not in _ACTUATOR_COMMON}
    for k in options:
        sec.raw(k)
    if kind != "gateway" and options:
        first = next(iter(options))
        raise sec.fail(first, options[first], f"unknown field for kind {kind}")
    gateway = None
    if kind == "gateway":
        gateway = parse_gateway_options(
            options,
            source=sec.source,
            base=base,
            model=model,
            ladder=[p.name for p in profiles.ladder],
            http_url=triton.http_url,
            metrics_url=triton.metrics_url,
            slo_p95_ms=slo.p95_ms,
        )
    sec.done()
    return ActuatorSettings(
        kind=kind, mode=mode, repository=repo, timeout_s=timeout, options=options, gateway=gateway,
        load_api=load_api, replicas=replicas,
    )


def _parse_replicas(act: Section, load_api: str, timeout_s: float) -> ReplicaSettings:
    """``replicas: [{http_url, grpc_url}, ...]`` or ``replicas: {service, namespace, ...}``."""
    value = act.raw("replicas")
    if isinstance(value, list):
        static = []
        for item in act.sections("replicas"):
            http = item.url("http_url")
            grpc = item.str("grpc_url", None)
            if grpc is not None:
                host, _, port = grpc.rpartition(":")
                if "://" in grpc or not host or not port.isdigit():
                    raise item.fail("grpc_url", grpc, "must be HOST:PORT, e.g. 10.0.0.5:8001")
            elif load_api == "grpc":
                raise item.fail("grpc_url", None, "is required when load_api is grpc (the default)")
            item.done()
            static.append((http, grpc))
        if len({h for h, _ in static}) != len(static):
            raise act.fail("replicas", value, "lists a replica twice")
        return ReplicaSettings(static=tuple(static), ready_timeout_s=timeout_s)
    sec = act.section("replicas")
    if not sec.has("service"):
        raise act.fail("replicas", value,
                       "must be a list of {http_url, grpc_url} or {service: NAME} (a Kubernetes Service)")
    ports = []
    for key, default in (("http_port", "http"), ("grpc_port", "grpc")):
        v = sec.raw(key, default)
        if isinstance(v, bool) or not isinstance(v, (str, int)) or (isinstance(v, int) and not 0 < v < 65536):
            raise sec.fail(key, v, "must be the port's name in the Service or its number")
        ports.append(v)
    settings = ReplicaSettings(
        service=sec.str("service"), namespace=sec.str("namespace", None), http_port=ports[0],
        grpc_port=ports[1], ready_timeout_s=timeout_s,
    )
    sec.done()
    return settings


def _parse_server(sec: Section, base: Path) -> ServerSettings:
    listen = sec.str("listen", "127.0.0.1:9400")
    host, _, port_text = listen.rpartition(":")
    if not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise sec.fail("listen", listen, "must be HOST:PORT, e.g. 127.0.0.1:9400")
    token_file = _path(base, sec.str("token_file", None))
    if token_file is not None and not token_file.is_file():
        raise sec.fail("token_file", str(token_file), "file not found")
    sec.done()
    return ServerSettings(host=host, port=int(port_text), token_file=token_file)


def _parse_decision_log(top: Section, base: Path) -> Path | None:
    return _path(base, top.str("decision_log", None))


def read_token(path: Path | None) -> str | None:
    """The bearer token, stripped; a file that exists but is empty is an error."""
    if path is None:
        return None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the token file: {exc}") from exc
    if not token:
        raise ConfigError(f"{path}: the token file is empty")
    return token
