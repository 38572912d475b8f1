"""The sidecar's own Prometheus metrics, on a registry it is handed (``autobatch_`` prefix)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ControllerMetrics"]


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry, model: str, profiles: Sequence[str]) -> None:
        self.registry = registry
        self.model = model
        self.profiles = list(profiles)
        self.active = Gauge(
            "autobatch_active_profile",
            "1 for the batching profile live on the model, 0 for the others.",
            ["model", "profile"],
            registry=registry,
        )
        self.pinned = Gauge(
            "autobatch_pinned", "1 while a manual pin overrides the policy.", ["model"], registry=registry
        )
        self.decisions = Counter(
            "autobatch_decisions_total",
            "Policy decisions by action and reason.",
            ["model", "action", "reason"],
            registry=registry,
        )
        self.switches = Counter(
            "autobatch_switches_total",
            "Profile switches that were applied, by reason.",
            ["model", "reason", "to"],
            registry=registry,
        )
        self.actuation_seconds = Histogram(
            "autobatch_actuation_duration_seconds",
            "Wall time of applying a profile (load, verify, rollback).",
            ["model", "actuator", "outcome"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=registry,
        )
        self.actuation_failures = Counter(
            "autobatch_actuation_failures_total",
            "Profile applications that failed, by reason.",
            ["model", "reason"],
            registry=registry,
        )
        self.errors = Counter(
            "autobatch_errors_total",
            "Errors by stage of the loop: signals, actuate, reconcile, log.",
            ["model", "stage"],
            registry=registry,
        )
        self.window = Gauge(
            "autobatch_window_value",
            "Values of the latest window (NaN when the signal is absent).",
            ["model", "signal"],
            registry=registry,
        )
        self.stale_windows = Counter(
            "autobatch_stale_windows_total",
            "Windows discarded as stale, by reason.",
            ["model", "reason"],
            registry=registry,
        )
        for stage in ("signals", "actuate", "reconcile", "log"):
            self.errors.labels(model, stage)
        self.set_active(None)
        self.pinned.labels(model).set(0)

    def set_active(self, name: str | None) -> None:
        for p in self.profiles:
            self.active.labels(self.model, p).set(1 if p == name else 0)

    def observe_window(self, values: dict[str, float | None]) -> None:
        for key, value in values.items():
            v = math.nan if value is None else float(value)
            self.window.labels(self.model, key).set(v)
