"""The gateway actuator's settings in the sidecar YAML, and building it from them.

Everything under ``actuator:`` besides ``kind`` (``actuator: {kind: gateway, ...}``):
``gateway`` (haproxy, httproute, grpcroute, virtualservice), HAProxy's ``socket``,
``backend`` and ``weight_scale`` or the route's ``route``, ``namespace``, ``rule``,
``api_version``, ``apply`` and ``manifest``; then ``steps``, ``step_dwell_s``,
``retry_s``, ``request_timeout_s``, ``guard`` and one entry of ``variants`` per
ladder profile. The reference, with units, defaults and ranges, is
docs/gateway.md#configuration. ``actuator.timeout_s`` (the reload actuator's load
timeout) does not apply here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autobatch.actuators.gateway.actuator import GatewayActuator, Guard
from autobatch.actuators.gateway.steps import DEFAULT_STEPS, GuardSettings, Variant
from autobatch.config import Section
from autobatch.errors import ConfigError
from autobatch.profiles import Profile
from autobatch.signals.factory import ReadTarget
from autobatch.signals.parse import failure_reasons
from autobatch.signals.variants import StepSignals

__all__ = [
    "GATEWAYS",
    "GatewaySettings",
    "HAProxySettings",
    "KubernetesSettings",
    "VariantSettings",
    "build_gateway_actuator",
    "parse_gateway_options",
]

GATEWAYS = ("haproxy", "httproute", "grpcroute", "virtualservice")

_HOUR_S = 3_600.0
_DAY_S = 86_400.0


@dataclass(frozen=True)
class VariantSettings:
    profile: str
    target: str
    """HAProxy server, HTTPRoute backendRef name, or Istio ``host`` / ``host/subset``."""
    model: str
    """Its model name in Triton."""
    http_url: str
    metrics_url: str
    selector: Mapping[str, str] = field(default_factory=dict)
    """Extra PromQL matchers for this variant's replicas (``signals.source: prometheus``)."""

    def read_target(self) -> ReadTarget:
        """Where this variant's signals are read."""
        return ReadTarget(self.model, self.http_url, self.metrics_url, self.selector)


@dataclass(frozen=True)
class HAProxySettings:
    socket: str
    backend: str
    weight_scale: int = 100


@dataclass(frozen=True)
class KubernetesSettings:
    kind: str
    """``httproute``, ``grpcroute`` or ``virtualservice``."""
    route: str
    namespace: str | None
    """None: the pod's own namespace, else ``default``."""
    rule: int = 0
    api_version: str | None = None
    apply: str = "auto"
    """``auto`` (the API server when in a pod, else print), ``api`` or ``print``."""
    manifest: Path | None = None


@dataclass(frozen=True)
class GatewaySettings:
    gateway: str
    variants: tuple[VariantSettings, ...]
    steps: tuple[int, ...] = DEFAULT_STEPS
    step_dwell_s: float = 2.0
    """Seconds each step runs before the guard judges it: long enough for the
    receiving variant to complete a few dozen requests at its share."""
    retry_s: float = 30.0
    request_timeout_s: float = 2.0
    guard: GuardSettings | None = None
    """None: shift without a guard (``guard: false``)."""
    haproxy: HAProxySettings | None = None
    kubernetes: KubernetesSettings | None = None

    def read_targets(self) -> dict[str, ReadTarget]:
        """Each variant's signals target, by profile name."""
        return {v.profile: v.read_target() for v in self.variants}

    def variant(self, profile: str) -> VariantSettings:
        for v in self.variants:
            if v.profile == profile:
                return v
        raise KeyError(profile)


def parse_gateway_options(
    options: Mapping[str, Any],
    *,
    source: str,
    base: Path,
    model: str,
    ladder: Sequence[str],
    http_url: str,
    metrics_url: str,
    slo_p95_ms: float,
) -> GatewaySettings:
    """Validate ``actuator:`` of kind gateway (without ``kind``); one-line ``ConfigError``s."""
    sec = Section(source, dict(options), "actuator")
    gateway = sec.str("gateway", "haproxy", choices=GATEWAYS)
    steps = _steps(sec)
    # Every number has a range (docs/gateway.md): beyond it is a typo or a unit mix-up,
    # and 1e300 s of dwell would hold a shift forever.
    dwell = sec.float("step_dwell_s", 2.0, min=0.0, max=_HOUR_S)
    retry = sec.float("retry_s", 30.0, min=0.0, max=_DAY_S)
    timeout = sec.float("request_timeout_s", 2.0, min=0.0, min_exclusive=True, max=_HOUR_S)
    guard = _guard(sec, slo_p95_ms)
    haproxy = _haproxy(sec) if gateway == "haproxy" else None
    kube = None if gateway == "haproxy" else _kubernetes(sec, gateway, base)
    variants = _variants(sec, _VariantDefaults(model, http_url, metrics_url), gateway, ladder)
    sec.done()
    return GatewaySettings(
        gateway=gateway,
        variants=variants,
        steps=steps,
        step_dwell_s=dwell,
        retry_s=retry,
        request_timeout_s=timeout,
        guard=guard,
        haproxy=haproxy,
        kubernetes=kube,
    )


# -- the steps of parse_gateway_options, in the order they read the YAML --------------------------


def _steps(sec: Section) -> tuple[int, ...]:
    steps = sec.int_list("steps", DEFAULT_STEPS, min=1, max=100)
    if not steps or steps[-1] != 100 or any(b <= a for a, b in zip(steps, steps[1:])):
        raise sec.fail("steps", list(steps), "must be increasing percents ending at 100, e.g. [25, 50, 100]")
    return tuple(steps)


def _guard(sec: Section, slo_p95_ms: float) -> GuardSettings | None:
    """``guard: false`` (none), ``true`` (on the SLO's p95) or its own thresholds."""
    raw_guard = sec.raw("guard", True)
    if raw_guard is False:
        return None
    if raw_guard is True:
        return GuardSettings(p95_ms=slo_p95_ms)
    g = sec.section("guard")
    reasons = g.raw("failure_reasons", None)
    if reasons is not None:
        reasons = failure_reasons(g, "failure_reasons", reasons)
    guard = GuardSettings(
        p95_ms=g.float("p95_ms", slo_p95_ms, min=0.0, min_exclusive=True, max=_HOUR_S * 1000),
        mean_ms=g.float("mean_ms", None, min=0.0, min_exclusive=True, max=_HOUR_S * 1000),
        max_failure_rps=g.float("max_failure_rps", 0.0, min=0.0, max=1e9),
        failure_reasons=tuple(reasons) if reasons is not None else None,
        min_requests=g.int("min_requests", 1, min=0, max=1_000_000_000),
    )
    g.done()
    return guard


def _haproxy(sec: Section) -> HAProxySettings:
    socket = sec.str("socket")
    address = socket.strip()
    for prefix in ("ipv4@", "tcp://"):
        address = address.removeprefix(prefix)
    _, sep, port = address.rpartition(":")
    if ("/" not in address and sep and port.isascii() and port.isdigit()
            and not 0 < int(port) < 65536):
        raise sec.fail("socket", socket, "must be a socket path or HOST:PORT with a port in 1-65535")
    return HAProxySettings(
        socket=socket,
        backend=sec.str("backend"),
        weight_scale=sec.int("weight_scale", 100, min=1, max=256),
    )


def _kubernetes(sec: Section, gateway: str, base: Path) -> KubernetesSettings:
    """A route's settings; ``manifest`` is resolved against the config file's folder."""
    manifest = sec.str("manifest", None)
    manifest_path = None
    if manifest is not None:
        p = Path(manifest).expanduser()
        manifest_path = p if p.is_absolute() else base / p
        if manifest_path.is_dir():
            raise sec.fail("manifest", manifest, f"{manifest_path} is a directory, not a file")
        if not manifest_path.is_file():
            raise sec.fail("manifest", manifest, f"file {manifest_path} not found")
    kube = KubernetesSettings(
        kind=gateway,
        route=sec.str("route"),
        namespace=sec.str("namespace", None),
        rule=sec.int("rule", 0, min=0, max=10_000),
        api_version=sec.str("api_version", None),
        apply=sec.str("apply", "auto", choices=("auto", "api", "print")),
        manifest=manifest_path,
    )
    if kube.apply == "print" and manifest_path is None:
        raise sec.fail("manifest", None, "is required when apply is print (the backends' order)")
    return kube


@dataclass(frozen=True)
class _VariantDefaults:
    """What a variant that does not say otherwise inherits from the sidecar's own target."""

    model: str
    http_url: str
    metrics_url: str


def _variants(sec: Section, defaults: _VariantDefaults, gateway: str,
              ladder: Sequence[str]) -> tuple[VariantSettings, ...]:
    """One variant per ladder profile, no more, no fewer, each with a target of its own."""
    target_key = "server" if gateway == "haproxy" else "backend"
    vsec = sec.section("variants")
    for name in vsec.data:
        if name not in ladder:
            raise vsec.fail(name, vsec.data[name], f"is not a profile of the ladder ({', '.join(ladder)})")
    variants = []
    for name in ladder:
        if name not in vsec.data:
            where = vsec.field_path(name)
            raise ConfigError(
                f"{sec.source}: {where}: required field is missing (every ladder profile needs a variant)",
                source=sec.source, field=where,
            )
        variants.append(_variant(vsec.section(name), name, defaults, gateway, target_key))
    vsec.done()
    targets = [v.target for v in variants]
    for i, t in enumerate(targets):
        if t in targets[:i]:
            raise vsec.fail(f"{ladder[i]}.{target_key}", t, "is used by another variant; each needs its own")
    return tuple(variants)


def _variant(v: Section, name: str, defaults: _VariantDefaults, gateway: str,
             target_key: str) -> VariantSettings:
    target = v.str(target_key)
    if gateway == "virtualservice":
        subset = v.str("subset", None)
        if "/" in target:
            raise v.fail(target_key, target, "must be a host name (put the subset in `subset`)")
        target = f"{target}/{subset}" if subset else target
    selector = v.raw("selector", {})
    if not isinstance(selector, Mapping) or not all(
        isinstance(k, str) and isinstance(s, str) for k, s in selector.items()
    ):
        raise v.fail("selector", selector, "must map label names to string values")
    variant = VariantSettings(
        profile=name,
        target=target,
        model=v.str("model", defaults.model),
        http_url=v.url("http_url", defaults.http_url),
        metrics_url=v.url("metrics_url", defaults.metrics_url),
        selector=dict(selector),
    )
    v.done()
    return variant


def build_gateway_actuator(
    settings: GatewaySettings,
    profiles: Sequence[Profile],
    *,
    source: str,
    step_signals: Callable[[], Mapping[str, StepSignals]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    out: Callable[[str], Any] = print,
    env: Mapping[str, str] | None = None,
    service_account_dir: Path | None = None,
    client_factory: Any = None,
) -> GatewayActuator:
    """The gateway actuator ``settings`` describe (``autobatch run`` builds it through the controller).

    ``step_signals`` builds each variant's signals for the guard (the controller
    passes :func:`autobatch.signals.build_step_signals`); it is called only when
    the guard is on and the backend moves traffic. ``source`` is the config file,
    for error messages. ``env``, ``service_account_dir`` and ``client_factory``
    locate the API server (tests point them at a fake one); ``out`` receives
    printed patches.
    """
    variants = {
        v.profile: Variant(profile=v.profile, target=v.target, model=v.model) for v in settings.variants
    }
    backend: Any
    if settings.haproxy is not None:
        from autobatch.actuators.gateway.haproxy import HAProxyRuntime, HAProxyWeights

        backend = HAProxyWeights(
            HAProxyRuntime(settings.haproxy.socket, timeout_s=settings.request_timeout_s),
            settings.haproxy.backend,
            weight_scale=settings.haproxy.weight_scale,
        )
    else:
        backend = _kubernetes_backend(source, settings, out, env, service_account_dir, client_factory)
    guard = None
    if settings.guard is not None and backend.changes_traffic:
        if step_signals is None:
            raise ConfigError(f"{source}: actuator.guard: on, but no signals were given to judge steps by",
                              source=source, field="actuator.guard")
        guard = Guard(step_signals(), settings.guard)
    return GatewayActuator(
        profiles,
        variants,
        backend,
        guard=guard,
        steps=settings.steps,
        step_dwell_s=settings.step_dwell_s,
        retry_s=settings.retry_s,
        clock=clock,
        sleep=sleep,
    )


def _kubernetes_backend(
    source: str,
    settings: GatewaySettings,
    out: Callable[[str], Any],
    env: Mapping[str, str] | None,
    sa_dir: Path | None,
    client_factory: Any,
) -> Any:
    from autobatch.actuators.gateway.kubernetes import (
        KINDS,
        SERVICE_ACCOUNT_DIR,
        InCluster,
        KubernetesApi,
        KubernetesRoute,
        RouteRef,
        load_manifest,
    )

    k = settings.kubernetes
    assert k is not None
    cluster = InCluster.detect(env, sa_dir or SERVICE_ACCOUNT_DIR) if k.apply != "print" else None
    if k.apply == "api" and cluster is None:
        raise ConfigError(
            f"{source}: actuator.apply = 'api': not running in a Kubernetes pod "
            "(no KUBERNETES_SERVICE_HOST or no service-account token); use apply: print or auto",
            source=source, field="actuator.apply", value="api",
        )
    namespace = k.namespace or (cluster.namespace if cluster else None) or "default"
    ref = RouteRef(KINDS[k.kind], namespace, k.route, k.rule, k.api_version)
    manifest = load_manifest(k.manifest, ref) if k.manifest is not None else None
    if cluster is None:
        if manifest is None:
            raise ConfigError(
                f"{source}: actuator.manifest: required outside a Kubernetes pod, where the "
                "patch is printed and the route's backends are read from the manifest",
                source=source, field="actuator.manifest",
            )
        return KubernetesRoute(ref, manifest=manifest, out=out)
    kwargs: dict[str, Any] = {"timeout_s": settings.request_timeout_s}
    if client_factory is not None:
        kwargs["client_factory"] = client_factory
    return KubernetesRoute(ref, api=KubernetesApi(cluster, **kwargs))
