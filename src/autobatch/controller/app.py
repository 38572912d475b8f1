"""Wire a sidecar config into a running sidecar: source, actuator, loop, HTTP server.

``run_sidecar(config, stop=..., ready=...)`` is what ``autobatch run`` calls
and what tests and the demo embed: it returns when ``stop`` is set, after
closing everything it opened. If one of its tasks dies, the others are stopped
and the failure is re-raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from autobatch.actuators.base import Actuator
from autobatch.controller.config import SidecarConfig
from autobatch.controller.exposure import EXPOSURE_KINDS, exposure_warnings, read_token
from autobatch.controller.http import ControlServer
from autobatch.controller.loop import Controller, WindowSource, run_controller
from autobatch.errors import ConfigError
from autobatch.signals.factory import build_source as build_signal_source
from autobatch.signals.factory import build_step_signals, build_variants_source

__all__ = ["Sidecar", "build_actuator", "build_source", "run_sidecar"]

log = logging.getLogger("autobatch.controller")


def build_source(config: SidecarConfig, clock: Callable[[], float]) -> WindowSource:
    """What the policy polls: this Triton's model or, in gateway mode, every variant combined
    (:mod:`autobatch.signals.variants` says why)."""
    gateway = config.actuator.gateway
    if gateway is not None:
        return build_variants_source(config.signals, gateway.read_targets(), config.model, clock=clock)
    return build_signal_source(config.signals, config.read_target(), clock=clock)


def build_actuator(config: SidecarConfig, *, dry_run: bool = False) -> Actuator:
    a = config.actuator
    if dry_run or a.kind == "dry-run":
        from autobatch.actuators.dry_run import DryRunActuator

        return DryRunActuator(
            config.profiles, log=lambda line: log.info("%s", line), model=config.model
        )
    if a.kind == "triton" and a.replicas is not None:
        return _build_fleet(config)
    if a.kind == "triton":
        from autobatch.actuators.triton import TritonReloadActuator

        return TritonReloadActuator(
            config.triton.http_url,
            config.model,
            config.profiles,
            repository=a.repository if a.mode == "file" else None,
            load_timeout_s=a.timeout_s,
            request_timeout_s=a.read_timeout_s,
            grpc_url=config.triton.grpc_url if a.load_api == "grpc" else None,
            restricted_api=config.triton.restricted_api,
        )
    if a.kind == "gateway" and a.gateway is not None:
        from autobatch.actuators.gateway import build_gateway_actuator

        gateway = a.gateway
        return build_gateway_actuator(
            gateway,
            config.profiles,
            source=config.source,
            step_signals=lambda: build_step_signals(config.signals, gateway.read_targets()),
        )
    raise ConfigError(f"{config.source}: actuator.kind = {a.kind!r}: unknown")


def _build_fleet(config: SidecarConfig) -> Actuator:
    from autobatch.actuators.fleet import Replica, ServiceEndpoints, StaticReplicas, TritonFleetActuator

    a = config.actuator
    r = a.replicas
    assert r is not None
    source: StaticReplicas | ServiceEndpoints
    if r.service is None:
        source = StaticReplicas([Replica(http, grpc) for http, grpc in r.static])
    else:
        from autobatch.actuators.gateway.kubernetes import InCluster, KubernetesApi

        cluster = InCluster.detect()
        if cluster is None:
            raise ConfigError(
                f"{config.source}: actuator.replicas.service = {r.service!r}: the Service's endpoints "
                "are read through the Kubernetes API, which is reachable from a pod only "
                "(no KUBERNETES_SERVICE_HOST or service-account token here); list the replicas instead"
            )
        source = ServiceEndpoints(
            KubernetesApi(cluster), r.namespace or cluster.namespace or "default", r.service,
            http_port=r.http_port, grpc_port=r.grpc_port if a.load_api == "grpc" else None,
        )
    return TritonFleetActuator(source, config.model, config.profiles, load_api=a.load_api,
                               load_timeout_s=a.timeout_s, ready_timeout_s=r.ready_timeout_s,
                               request_timeout_s=a.read_timeout_s,
                               restricted_api=config.triton.restricted_api)


class Sidecar:
    """A running sidecar: the controller and its HTTP server (for tests and the demo)."""

    def __init__(self, controller: Controller, server: ControlServer) -> None:
        self.controller = controller
        self.server = server

    @property
    def url(self) -> str:
        return self.server.url


async def run_sidecar(
    config: SidecarConfig,
    *,
    stop: asyncio.Event,
    ready: Callable[[Sidecar], Any] | None = None,
    dry_run: bool = False,
    source: WindowSource | None = None,
    actuator: Actuator | None = None,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], float] | None = None,
) -> None:
    """Run until ``stop`` is set. ``ready(sidecar)`` is called once it serves HTTP."""
    import time

    clock = clock or time.time
    token = read_token(config.server.token_file)
    warnings = exposure_warnings(config.server)
    controller = Controller(
        config,
        source or build_source(config, clock),
        actuator or build_actuator(config, dry_run=dry_run),
        clock=clock,
        registry=registry,
    )
    for _, sentence in warnings:
        log.warning("exposure: %s", sentence)
    for line in config.deprecations:
        log.warning("config: %s", line)
    controller.metrics.set_exposure(EXPOSURE_KINDS, [kind for kind, _ in warnings])
    server = ControlServer(
        controller, config.server.host, config.server.port, token,
        protect_reads=config.server.protect_reads, request_timeout_s=config.server.request_timeout_s,
    )
    try:
        await server.start()
    except OSError as exc:
        await controller.aclose()
        raise ConfigError(
            f"{config.source}: server.listen = '{config.server.address}': "
            f"cannot listen there ({exc.strerror or exc})"
        ) from exc
    loop_ready = asyncio.Event()
    loop_task = asyncio.create_task(run_controller(controller, stop=stop, ready=loop_ready))
    try:
        waiter = asyncio.create_task(loop_ready.wait())
        done, _ = await asyncio.wait({loop_task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if loop_task in done:
            waiter.cancel()
            loop_task.result()  # re-raise what killed it
            return
        if ready is not None:
            ready(Sidecar(controller, server))
        await loop_task
    finally:
        stop.set()
        if not loop_task.done():
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
        await server.stop()  # never raises
