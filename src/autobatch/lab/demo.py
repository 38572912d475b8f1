"""``autobatch demo``: the embedded Triton, the sidecar and a step load, closing the loop.

It starts Triton with dense_mlp on free loopback ports, the sidecar from
``examples/sidecar.yaml`` (pointed at that Triton), and the step load of
``examples/schedules/step.yaml`` (low -> high -> low, about two minutes). A live
table shows the phase, the load, the latency the clients see and what the
controller decided; at the end a table per phase says what each phase got and
which profile was in force, and ``--plot`` draws the timeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autobatch.config import load_yaml
from autobatch.controller.config import SidecarConfig, sidecar_config_from_mapping
from autobatch.errors import ConfigError
from autobatch.lab.closed_loop import ClosedLoopResult, Sample, run_closed_loop
from autobatch.lab.serve import TritonServer, project_root
from autobatch.schedule import Schedule, load_schedule

__all__ = ["DemoObserver", "DemoResult", "DemoSetup", "demo_sidecar_config", "run_demo"]

MODEL = "dense_mlp"


def examples_dir() -> Path:
    here = Path.cwd() / "examples"
    return here if (here / "sidecar.yaml").is_file() else project_root() / "examples"


def demo_sidecar_config(
    server: TritonServer, workdir: Path, config_path: Path | None = None
) -> SidecarConfig:
    """The example sidecar config, pointed at ``server`` and logging into ``workdir``."""
    path = config_path or examples_dir() / "sidecar.yaml"
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping")
    data = dict(data)
    data["triton"] = {
        "http_url": server.urls.http,
        "metrics_url": server.urls.metrics,
        "grpc_url": server.urls.grpc,
    }
    server_section = dict(data.get("server") or {})
    server_section["listen"] = "127.0.0.1:0"
    data["server"] = server_section
    data["decision_log"] = str(workdir / "decisions.jsonl")
    return sidecar_config_from_mapping(data, str(path), base=path.resolve().parent)


@dataclass(frozen=True)
class DemoSetup:
    """What the demo is about to run, for its header line."""

    triton_http: str
    triton_grpc: str
    config: SidecarConfig
    schedule: Schedule


class DemoObserver(Protocol):
    """What the demo reports while it runs (the CLI draws it; tests may ignore it)."""

    def starting(self) -> AbstractContextManager[Any]:
        """Entered while the embedded Triton starts."""
        ...

    def running(self, setup: DemoSetup) -> AbstractContextManager[Callable[[Sample, Any], None]]:
        """Entered for the closed loop; yields the callback each sample goes to."""
        ...


class _Quiet:
    def starting(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def running(self, setup: DemoSetup) -> AbstractContextManager[Callable[[Sample, Any], None]]:
        return contextlib.nullcontext(lambda sample, status: None)


@dataclass(frozen=True)
class DemoResult:
    result: ClosedLoopResult
    config: SidecarConfig
    decision_log: Path | None
    """The decision log, when it was kept (``workdir`` given); None if it was temporary."""


def run_demo(
    *,
    schedule_path: Path | None = None,
    config_path: Path | None = None,
    workdir: Path | None = None,
    observer: DemoObserver | None = None,
) -> DemoResult:
    """Start Triton with dense_mlp, the sidecar and the step load; return what each phase got."""
    observer = observer or _Quiet()
    schedule = load_schedule(schedule_path or examples_dir() / "schedules" / "step.yaml")
    with tempfile.TemporaryDirectory(prefix="autobatch-demo-") as tmp:
        work = workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        with observer.starting():
            server = TritonServer.on_free_ports(models=[MODEL])
            server.start()
        try:
            cfg = demo_sidecar_config(server, work, config_path)
            setup = DemoSetup(server.urls.http, server.urls.grpc, cfg, schedule)
            with observer.running(setup) as on_sample:
                result = asyncio.run(
                    run_closed_loop(schedule, server.urls.grpc, MODEL, sidecar=cfg,
                                    slo_p95_ms=cfg.policy.slo_p95_ms, on_sample=on_sample)
                )
        finally:
            server.close()
    return DemoResult(result, cfg, cfg.decision_log if workdir else None)
