"""The one place a signal source is built: from typed settings, for one model or for variants.

The controller, ``autobatch watch`` and the gateway's guard all get their
sources here; nothing else constructs a :class:`~autobatch.signals.TritonSource`
or :class:`~autobatch.signals.PrometheusSource` from settings.

* :class:`SignalSettings`: ``signals:`` of the sidecar YAML (or ``watch``'s options);
* :class:`ReadTarget`: one Triton model to read (the sidecar's, or a gateway variant's);
* :func:`build_source`: the source the policy polls for one target;
* :func:`build_variants_source`: gateway mode, every variant combined into one window;
* :func:`build_step_signals`: gateway mode, each variant on its own, for the guard.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autobatch.access import RestrictedApi
from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError
from autobatch.signals.http import DEFAULT_MAX_BYTES
from autobatch.signals.loop import SignalSource
from autobatch.signals.prometheus import PrometheusSource
from autobatch.signals.triton import TritonSource, normalize_url
from autobatch.signals.variants import (
    PrometheusStepSignals,
    StepSignals,
    TritonStepSignals,
    VariantsSource,
)
from autobatch.signals.window import Window

__all__ = [
    "SOURCES",
    "UTILIZATION",
    "ReadTarget",
    "SignalSettings",
    "build_source",
    "build_step_signals",
    "build_variants_source",
    "make_source",
]

SOURCES = ("triton", "prometheus")
UTILIZATION = ("auto", "triton", "dcgm", "none")


@dataclass(frozen=True)
class SignalSettings:
    """Where the signals come from and how they are read (``signals:`` in the sidecar YAML)."""

    source: str = "triton"
    """``triton`` (scrape this Triton) or ``prometheus`` (PromQL, fleet-wide)."""
    prometheus_url: str | None = None
    """Prometheus base URL for ``source: prometheus``."""
    selector: Mapping[str, str] = field(default_factory=dict)
    """Extra label matchers for the PromQL queries, e.g. ``{job: triton}``."""
    matchers: str = ""
    """Extra PromQL matchers as text (``job="triton"``), for ``watch --selector``."""
    range_s: float = 30.0
    """PromQL range for rate(); the sidecar sets it from its interval (x 2, at least 4 s)."""
    utilization: str = "auto"
    """``auto`` (nv_gpu_utilization if present), ``triton``, ``dcgm`` or ``none``."""
    dcgm_url: str | None = None
    """dcgm-exporter's /metrics URL, for ``utilization: dcgm``."""
    timeout_s: float = 2.0
    """Per-scrape timeout."""
    max_age_s: float | None = None
    """A window whose data ended longer ago than this is stale (None: no limit)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """The most one scrape may send (``max_scrape_bytes``); past it the window is stale
    (``too_large``), so a broken or hostile endpoint cannot fill the sidecar's memory."""
    instances_per_replica: int | None = None
    """Prometheus: the model's execution instances on each replica, for the busy share
    (Prometheus does not carry the model config). The direct source reads it from Triton."""
    restricted_api: RestrictedApi | None = None
    """The direct source: the key of Triton's restricted APIs (``triton.restricted_api``),
    sent with its ``/stats`` and ``/config`` reads. None: no key is sent."""
    curve: BatchCurve | None = None
    """The model's batch curve with the device to itself (``policy.curve``): each window's
    ``stretch`` and device shares are measured against it. None: they are left out."""


@dataclass(frozen=True)
class ReadTarget:
    """One model on one Triton (or, through Prometheus, on the replicas the matchers select)."""

    model: str
    http_url: str
    metrics_url: str | None = None
    """Triton's /metrics; default: the HTTP host on port 8002."""
    selector: Mapping[str, str] = field(default_factory=dict)
    """PromQL matchers of this target's replicas, over :attr:`SignalSettings.selector`."""


class _NoUtilization:
    """``utilization: none``: drop the accelerator signal (e.g. a shared card's is misleading)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = inner.model
        self.clock = inner.clock

    async def poll(self) -> Window | None:
        w = await self.inner.poll()
        return None if w is None else replace(w, utilization=None, others_share=None)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _promql_selector(settings: SignalSettings, target: ReadTarget) -> str:
    matchers = {**settings.selector, **target.selector}
    parts = [f'{k}="{v}"' for k, v in sorted(matchers.items())]
    if settings.matchers:
        parts.append(settings.matchers)
    return ",".join(parts)


def _raw_source(settings: SignalSettings, target: ReadTarget, clock: Callable[[], float]) -> Any:
    if settings.source == "prometheus":
        return PrometheusSource(
            settings.prometheus_url or "",
            target.model,
            selector=_promql_selector(settings, target),
            range_s=settings.range_s,
            clock=clock,
            timeout_s=settings.timeout_s,
            max_age_s=settings.max_age_s,
            max_bytes=settings.max_bytes,
            instances_per_replica=settings.instances_per_replica,
            curve=settings.curve,
        )
    return TritonSource(
        target.http_url,
        target.model,
        metrics_url=target.metrics_url,
        utilization_url=settings.dcgm_url if settings.utilization == "dcgm" else None,
        clock=clock,
        timeout_s=settings.timeout_s,
        max_age_s=settings.max_age_s,
        max_bytes=settings.max_bytes,
        restricted_api=settings.restricted_api,
        curve=settings.curve,
    )


def build_source(
    settings: SignalSettings, target: ReadTarget, *, clock: Callable[[], float] = time.time
) -> SignalSource:
    """The source the policy polls for one target."""
    source = _raw_source(settings, target, clock)
    return _NoUtilization(source) if settings.utilization == "none" else source


def build_variants_source(
    settings: SignalSettings,
    targets: Mapping[str, ReadTarget],
    model: str,
    *,
    clock: Callable[[], float] = time.time,
) -> SignalSource:
    """Gateway mode: every variant (by profile name) read at once and combined into one
    window named ``model`` (:mod:`autobatch.signals.variants` says why)."""
    source = VariantsSource({p: _raw_source(settings, t, clock) for p, t in targets.items()}, model,
                            clock=clock)
    return _NoUtilization(source) if settings.utilization == "none" else source


def build_step_signals(
    settings: SignalSettings,
    targets: Mapping[str, ReadTarget],
    *,
    clock: Callable[[], float] = time.time,
) -> dict[str, StepSignals]:
    """Gateway mode: each variant's own signals around a step, for the guard. Each gets a
    source of its own (a step's baseline must not move the policy's samples)."""
    wrap = PrometheusStepSignals if settings.source == "prometheus" else TritonStepSignals
    return {p: wrap(_raw_source(settings, t, clock)) for p, t in targets.items()}


def make_source(
    source: str,
    url: str,
    model: str,
    *,
    metrics_url: str | None = None,
    utilization_url: str | None = None,
    selector: str | None = None,
    range_s: float | None = None,
    max_age_s: float | None = None,
    restricted_api: RestrictedApi | None = None,
    curve: BatchCurve | None = None,
) -> SignalSource:
    """``autobatch watch``'s options as settings and a target; errors name the field and value.
    ``restricted_api``: the key of Triton's restricted APIs (the direct source only);
    ``curve``: the reference of each window's stretch."""
    if source not in SOURCES:
        raise ConfigError(f"source = {source!r}: must be one of {', '.join(SOURCES)}",
                          field="source", value=source)
    if max_age_s is not None and not (math.isfinite(max_age_s) and max_age_s > 0):
        raise ConfigError(f"max_age = {max_age_s!r}: must be a number of seconds > 0",
                          field="max_age", value=max_age_s)
    url = normalize_url(url, "url")
    if source == "triton":
        for name, value in (("selector", selector), ("range", range_s)):
            if value is not None:
                raise ConfigError(f"{name} = {value!r}: only applies with source prometheus",
                                  field=name, value=value)
        settings = SignalSettings(
            source="triton",
            utilization="dcgm" if utilization_url else "auto",
            dcgm_url=normalize_url(utilization_url, "utilization_url") if utilization_url else None,
            timeout_s=2.0,
            max_age_s=max_age_s,
            restricted_api=restricted_api,
            curve=curve,
        )
        target = ReadTarget(
            model, url, normalize_url(metrics_url, "metrics_url") if metrics_url else None
        )
        return build_source(settings, target)
    if restricted_api is not None:
        raise ConfigError(f"{restricted_api.setting}: only applies with source triton "
                          "(Prometheus holds no restricted API of Triton's)", field=restricted_api.setting)
    for name, value in (("metrics_url", metrics_url), ("utilization_url", utilization_url)):
        if value is not None:
            raise ConfigError(f"{name} = {value!r}: only applies with source triton "
                              "(Prometheus already scrapes those endpoints)", field=name, value=value)
    if range_s is not None and not (math.isfinite(range_s) and range_s > 0):
        raise ConfigError(f"range = {range_s!r}: must be a number of seconds > 0",
                          field="range", value=range_s)
    settings = SignalSettings(
        source="prometheus", prometheus_url=url, matchers=selector or "", range_s=range_s or 30.0,
        timeout_s=4.0, max_age_s=max_age_s, curve=curve,
    )
    return build_source(settings, ReadTarget(model, url))
