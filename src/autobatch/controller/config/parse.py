"""The sidecar's YAML config, read into the frozen settings of :mod:`.settings`.

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
    decision_log: decisions.jsonl                  # the state file goes beside it

Every number has a range (:data:`RANGES`, stated in docs/sidecar.md): a value
outside it is a typo or a unit mix-up (``interval_s: 2000`` meant ms), and an
unbounded one can overflow (``history_windows: 1e20``) or stall the loop
(``interval_s: 1e308`` never ticks).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from autobatch.access import RestrictedApi
from autobatch.actuators.gateway.settings import parse_gateway_options
from autobatch.config import MISSING, Section, load_yaml
from autobatch.controller.config.settings import (
    RANGES,
    ActuatorSettings,
    ReplicaSettings,
    ServerSettings,
    SidecarConfig,
    TritonEndpoints,
)
from autobatch.curve import BatchCurve, load_curve
from autobatch.errors import ConfigError
from autobatch.policy import PolicySettings
from autobatch.policy.settings import FLAT, GROUPS
from autobatch.profiles import Profile, load_profiles
from autobatch.signals.factory import SOURCES, UTILIZATION, SignalSettings
from autobatch.signals.http import DEFAULT_MAX_BYTES
from autobatch.signals.parse import failure_reasons

__all__ = ["load_sidecar_config", "parse_listen", "sidecar_config_from_mapping"]

_EXCLUSIVE_MIN = {"slo.p95_ms", "slo.p99_ms", "policy.trust.max_window_age_s", "signals.range_s",
                  "signals.timeout_s", "actuator.timeout_s", "server.request_timeout_s",
                  "policy.capacity.learn_max_step"}
"""Paths whose value must lie above, not at, the low end of their RANGES entry."""


def _path(base: Path, value: str | None) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else (base / p)


def load_sidecar_config(path: str | Path, *, model: str | None = None) -> SidecarConfig:
    """``model``: the model when the file leaves ``model`` out (``autobatch run`` takes it
    from ``AUTOBATCH_MODEL``, which the deploy overlays set from their one setting)."""
    p = Path(path)
    return sidecar_config_from_mapping(load_yaml(p), str(p), base=p.resolve().parent, model=model)


def sidecar_config_from_mapping(
    data: Any, source: str, base: Path, *, model: str | None = None
) -> SidecarConfig:
    """Read each settings group with its own parser, in the file's documented order."""
    top = Section(source, data)
    model = _parse_model(top, model)
    triton = _parse_triton(top.section("triton", {}), base)
    profiles = _parse_profiles(top.section("profiles"), base, model)
    slo = _parse_slo(top.section("slo"))
    policy, loop, deprecations = _parse_policy(top.section("policy", {}), base, profiles, slo)
    signals = replace(_parse_signals(top.section("signals", {}), loop, policy),
                      restricted_api=triton.restricted_api)
    actuator = _parse_actuator(
        top.section("actuator", {}), base, model=model, triton=triton, profiles=profiles, slo=slo
    )
    if actuator.replicas is not None and signals.source != "prometheus":
        # One replica's metrics would decide for all of them.
        raise top.fail("signals.source", signals.source,
                       "must be prometheus with actuator.replicas: the decision reads the whole fleet")
    server = _parse_server(top.section("server", {}), base)
    log, state = _parse_decision_log(top, base)
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
        state_file=state,
        deprecations=deprecations,
    )


def _bounded(sec: Section, key: str, default: Any, *, canonical: str | None = None) -> Any:
    """A number of the config, checked against the :data:`RANGES` entry of its path (or of
    ``canonical``, where a deprecated spelling is read)."""
    path = canonical or sec.field_path(key)
    lo, hi = RANGES[path]
    if isinstance(lo, int) and isinstance(hi, int):
        return sec.int(key, default, min=lo, max=hi)
    return sec.float(key, default, min=lo, max=hi, min_exclusive=path in _EXCLUSIVE_MIN)


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


def _parse_model(top: Section, given: str | None) -> str:
    """``model`` from the file, or from outside it (``given``); both only if they agree."""
    if given is None:
        return top.str("model")
    if not isinstance(given, str) or not given.strip():
        raise top.fail("model", given, "the model given from outside the file (AUTOBATCH_MODEL) is empty")
    written = top.str("model", None)
    if written is not None and written != given:
        raise top.fail("model", written, f"differs from the model given from outside the file ({given!r}, "
                                          "AUTOBATCH_MODEL); set it in one place")
    return given


def _parse_triton(sec: Section, base: Path) -> TritonEndpoints:
    triton = TritonEndpoints(
        http_url=sec.url("http_url", "http://127.0.0.1:8000"),
        metrics_url=sec.url("metrics_url", "http://127.0.0.1:8002/metrics"),
        grpc_url=_host_port(sec, "grpc_url", "127.0.0.1:8001", "127.0.0.1:8001"),
        restricted_api=_parse_restricted_api(sec, base),
    )
    sec.done()
    return triton


def _parse_restricted_api(triton: Section, base: Path) -> RestrictedApi | None:
    """``triton.restricted_api: {header, key_file}``: the key is read now, so a missing or
    empty file stops the start with one line (that never quotes the key)."""
    if not triton.has("restricted_api") or triton.raw("restricted_api") is None:
        return None
    sec = triton.section("restricted_api")
    if "key" in sec.data:  # refused without echoing the value: it may be the key itself
        field = sec.field_path("key")
        raise sec.error(f"{sec.source}: {field}: the key is read from a file; name it with key_file and "
                        "keep the key out of this config", source=sec.source, field=field)
    header = sec.str("header")
    key_file = _path(base, sec.str("key_file"))
    sec.done()
    assert key_file is not None
    try:
        return RestrictedApi.from_file(header, key_file, setting=sec.path)
    except ConfigError as exc:
        raise sec.error(f"{sec.source}: {exc}", source=sec.source, field=exc.field, value=exc.value) from exc


def _host_port(sec: Section, key: str, default: Any, example: str) -> Any:
    """A gRPC address: HOST:PORT with a port in 1-65535 (no scheme)."""
    value = sec.str(key, default)
    if value is None:
        return None
    host, _, port = value.rpartition(":")
    if "://" in value or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise sec.fail(key, value, f"must be HOST:PORT with a port in 1-65535, e.g. {example}")
    return value


def _parse_profiles(sec: Section, base: Path, model: str) -> _Ladder:
    # By default the model's own folder: a profile belongs to the model its folder names.
    pdir = _path(base, sec.str("dir", f"profiles/{model}"))
    assert pdir is not None
    if not pdir.is_dir():
        problem = "is a file, not a directory" if pdir.exists() else "not found"
        raise sec.fail("dir", sec.data.get("dir", f"profiles/{model}"), f"profile directory {pdir} {problem}")
    available = load_profiles(pdir)
    names = sec.raw("ladder")
    if not isinstance(names, list) or len(names) < 2:
        raise sec.fail("ladder", names, "must list two or more profile names, most latency-oriented first")
    ladder: list[Profile] = []
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise sec.fail(f"ladder[{i}]", name, "must be a profile name (a string)")
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
        p95_ms=_bounded(sec, "p95_ms", MISSING),
        p99_ms=_bounded(sec, "p99_ms", None),
    )
    sec.done()
    return slo


# Fractions of the policy (each a share in [0, 1]); those in _ABOVE_ZERO must be over 0.
_FRACTIONS = {
    "trust.breach_min_mean", "stability.stabilization_drop", "efficiency.headroom",
    "efficiency.util_ceiling", "efficiency.min_saving", "efficiency.latency_tolerance",
    "efficiency.min_freed_share", "efficiency.max_busy", "efficiency.max_p95", "efficiency.max_load",
    "efficiency.wait_max_busy",
    "capacity.busy_ceiling", "capacity.live_min_busy", "capacity.device_alpha", "forecast.alpha",
    "forecast.beta", "device.shared_min", "device.target_p95", "device.act_p95",
    "device.climb_p95", "device.own_queue", "device.wait_tail", "device.change_share", "device.change_rate",
}
_ABOVE_ZERO = {"efficiency.max_busy", "efficiency.max_p95", "efficiency.max_load", "efficiency.wait_max_busy",
               "capacity.busy_ceiling", "capacity.device_alpha", "forecast.alpha", "forecast.beta",
               "device.shared_min", "device.target_p95", "device.act_p95", "device.climb_p95",
               "device.change_share", "device.change_rate"}


def _parse_policy(sec: Section, base: Path, profiles: _Ladder, slo: _Slo,
                  ) -> tuple[PolicySettings, _Loop, tuple[str, ...]]:
    """``policy``: the loop's interval and history, the curve, and the policy's groups
    (``policy.<group>.<field>``); a field of a group written the old way, flat
    (``policy.min_dwell_s``), still loads, with a one-line deprecation."""
    loop = _Loop(
        interval_s=_bounded(sec, "interval_s", 1.0),
        history_windows=_bounded(sec, "history_windows", 30),
    )
    curve: BatchCurve | None = None
    curve_path = _path(base, sec.str("curve", None))
    if curve_path is not None:
        try:
            curve = load_curve(curve_path)
        except ConfigError as exc:  # the curve's own error, said of this config's field
            raise sec.fail("curve", sec.data["curve"], str(exc)) from exc
    values, written = _policy_groups(sec)
    deprecations = _policy_flat(sec, values, written)
    sec.done()
    _policy_cross_checks(values, written)
    groups = {g: GROUPS[g](**values[g]) for g in GROUPS}
    policy = PolicySettings(ladder=profiles.ladder, slo_p95_ms=slo.p95_ms, slo_p99_ms=slo.p99_ms, curve=curve,
                            **groups)
    return policy, loop, deprecations


_Written = dict[str, tuple[Section, str]]
"""Where each policy field given was written: its section and key, for error messages."""


def _is_group(sec: Section, group: str) -> bool:
    """Whether ``policy.<group>`` is written as a group (a mapping): ``policy.forecast: true``
    is the old spelling of ``policy.forecast.enabled`` (and ``null`` there needs a value)."""
    return group != "forecast" or group not in sec.data or isinstance(sec.data[group], Mapping)


def _policy_groups(sec: Section) -> tuple[dict[str, dict[str, Any]], _Written]:
    """The fields given in the ``policy.<group>`` sections."""
    values: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
    written: _Written = {}
    for group, cls in GROUPS.items():
        if not _is_group(sec, group):
            continue
        gsec = sec.section(group, {})
        for f in fields(cls):
            if gsec.has(f.name):
                values[group][f.name] = _policy_value(gsec, f.name, f"{group}.{f.name}")
                written[f"{group}.{f.name}"] = (gsec, f.name)
            else:
                gsec.raw(f.name, None)  # a known field: a typo's hint may name it
        gsec.done()
    return values, written


def _policy_flat(sec: Section, values: dict[str, dict[str, Any]], written: _Written) -> tuple[str, ...]:
    """The fields written the old, flat way (``policy.min_dwell_s``): read into ``values``,
    each with a one-line deprecation naming its new place."""
    out = []
    for old, (group, name) in FLAT.items():
        if not sec.has(old):
            sec.raw(old, None)  # a known field: a typo's hint may name it
            continue
        if old == group and _is_group(sec, group):
            continue  # policy.forecast, written as the group
        if name in values[group]:
            raise sec.fail(old, sec.data[old], f"is given as policy.{group}.{name} too: keep that one")
        values[group][name] = _policy_value(sec, old, f"{group}.{name}")
        written[f"{group}.{name}"] = (sec, old)
        out.append(f"{sec.source}: policy.{old} is deprecated: write policy.{group}.{name} "
                   "(docs/sidecar.md#policy)")
    return tuple(out)


def _policy_value(sec: Section, key: str, path: str) -> Any:
    """``sec[key]``, the policy field ``path`` (``group.field``), checked by its kind."""
    group, name = path.split(".")
    default = getattr(GROUPS[group](), name)
    if isinstance(default, bool):  # forecast.enabled, device.floor_alone
        return sec.bool(key, default)
    if path == "protective.failure_reasons":
        return failure_reasons(sec, key, sec.raw(key, list(default)))
    if path not in _FRACTIONS:
        return _bounded(sec, key, default, canonical=f"policy.{path}")
    value = sec.float(key, default, min=0.0)
    if value is None:  # a fraction whose default is None (off): null keeps it off
        return value
    if value > 1.0:
        raise sec.fail(key, value, "must be a fraction in [0, 1]")
    if path in _ABOVE_ZERO and value <= 0.0:
        raise sec.fail(key, value, "must be a fraction in (0, 1]")
    if path == "efficiency.min_freed_share" and value >= 1.0:
        raise sec.fail(key, value, "must be a fraction in [0, 1)")
    return value


def _policy_cross_checks(values: dict[str, dict[str, Any]], written: _Written) -> None:
    """What the groups' own fields cannot check alone: the efficiency band."""
    eff, default = values["efficiency"], GROUPS["efficiency"]()
    tolerance = eff.get("latency_tolerance", default.latency_tolerance)
    saving = eff.get("min_saving", default.min_saving)
    if tolerance < saving:
        return
    if "efficiency.latency_tolerance" in written:
        sec, key = written["efficiency.latency_tolerance"]
        raise sec.fail(key, tolerance, f"must be below min_saving ({saving:g}), or the ladder flaps")
    sec, key = written["efficiency.min_saving"]
    raise sec.fail(key, saving, f"must be above latency_tolerance ({tolerance:g}), or the ladder flaps")


def _parse_signals(sec: Section, loop: _Loop, policy: PolicySettings) -> SignalSettings:
    selector = sec.raw("selector", {})
    if not isinstance(selector, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
    ):
        raise sec.fail("selector", selector, "must map label names to string values")
    range_s = _bounded(sec, "range_s", None)
    signals = SignalSettings(
        source=sec.str("source", "triton", choices=SOURCES),
        prometheus_url=sec.url("prometheus_url", None),
        selector=dict(selector),
        # rate() over at least two scrapes of the interval, and never under 4 s.
        range_s=range_s or max(2.0 * loop.interval_s, 4.0),
        utilization=sec.str("utilization", "auto", choices=UTILIZATION),
        dcgm_url=sec.url("dcgm_url", None),
        timeout_s=_bounded(sec, "timeout_s", 2.0),
        max_age_s=policy.trust.max_window_age_s,
        max_bytes=_bounded(sec, "max_scrape_bytes", DEFAULT_MAX_BYTES),
        instances_per_replica=_bounded(sec, "instances_per_replica", None),
        curve=policy.curve,
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
    timeout = _bounded(sec, "timeout_s", 120.0)
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
        sec.raw(k, None)  # read by the kind's parser below, which checks a null
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
            grpc = _host_port(item, "grpc_url", None, "10.0.0.5:8001")
            if grpc is None and load_api == "grpc":
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


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


def parse_listen(value: str) -> tuple[str, int] | None:
    """``HOST:PORT`` or ``[IPV6]:PORT`` as (host, port); None if it is neither."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        return None
    if host.startswith("[") and host.endswith("]"):
        try:
            return str(ipaddress.IPv6Address(host[1:-1])), int(port_text)
        except ValueError:
            return None
    if ":" in host:  # a bare IPv6 address: its last group and the port cannot be told apart
        return None
    try:
        return str(ipaddress.IPv4Address(host)), int(port_text)
    except ValueError:
        pass
    if len(host) > 253 or not _HOST_NAME.match(host):
        return None
    return host, int(port_text)


def _parse_server(sec: Section, base: Path) -> ServerSettings:
    listen = sec.str("listen", "127.0.0.1:9400")
    parsed = parse_listen(listen)
    if parsed is None:
        raise sec.fail("listen", listen, "must be HOST:PORT or [IPV6]:PORT, e.g. 127.0.0.1:9400, [::1]:9400")
    host, port = parsed
    token_file = _path(base, sec.str("token_file", None))
    if token_file is not None and not token_file.is_file():
        problem = "is a directory, not a file" if token_file.is_dir() else (
            "is not a regular file" if token_file.exists() else "file not found")
        raise sec.fail("token_file", str(token_file), problem)
    protect = sec.bool("protect_reads", False)
    if protect and token_file is None:
        raise sec.fail("protect_reads", True, "needs server.token_file (the token the reads must send)")
    timeout = _bounded(sec, "request_timeout_s", 10.0)
    sec.done()
    return ServerSettings(
        host=host, port=port, token_file=token_file, protect_reads=protect, request_timeout_s=timeout
    )


def _parse_decision_log(top: Section, base: Path) -> tuple[Path | None, Path | None]:
    """The decision log and the state file beside it, checked before anything starts:
    the loop would otherwise find out at its first write, with a traceback."""
    log = _path(base, top.str("decision_log", None))
    state = _path(base, top.str("state_file", None))
    if state is None and log is not None:
        state = log.with_name(log.name + ".state.json")
    for key, path in (("decision_log", log), ("state_file", state)):
        if path is None:
            continue
        problem = _unwritable(path)
        if problem is not None:
            raise top.fail(key, str(path), problem)
    return log, state


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be a file appended to or replaced, or None."""
    if path.is_dir():
        return "is a directory; give a file path"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a directory"
    if path.exists() and not os.access(path, os.W_OK):
        return "is not writable"
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: {parent} is not writable"
    return None
