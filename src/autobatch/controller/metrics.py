"""The sidecar's own Prometheus metrics, on a registry it is handed (``autobatch_`` prefix).

Besides what the loop counts, the settings a dashboard or an alert compares the
live signals with are exported as gauges, so no panel hard-codes a figure of the
config: the SLO, the dwell, the staleness limit, and each profile's batching
(max queue delay, preferred and max batch size). deploy/grafana/autobatch.json and
deploy/prometheus/rules.yaml read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autobatch.actuators.base import REASONS
from autobatch.policy import Reason
from autobatch.profiles import Profile

__all__ = ["FAILURE_REASONS", "STAGES", "ControllerMetrics"]

_OK_REASONS = ("applied", "unchanged", "reapplied", "dry_run")
FAILURE_REASONS = (*[r for r in REASONS if r not in _OK_REASONS], "error")
"""Every reason ``autobatch_actuation_failures_total`` counts (``error``: the actuator raised)."""

SWITCH_REASONS = tuple(r.value for r in Reason if r.kind != "hold")
"""The policy's reasons that switch (:class:`autobatch.policy.Reason`): each, toward each
profile, starts at 0, so ``increase(autobatch_switches_total[...])`` counts a first switch."""

STAGES = ("signals", "actuate", "reconcile", "log", "state", "tick")
"""The stages of a tick errors and timeouts are counted by (``tick``: ``tick()`` itself
raised, a bug outside the stages that catch their own errors)."""


class ControllerMetrics:
    """Every ``autobatch_`` metric, each series a dashboard reads present from the start."""

    def __init__(self, registry: CollectorRegistry, model: str, profiles: Sequence[str]) -> None:
        self.registry = registry
        self.model = model
        self.profiles = list(profiles)
        self._decisions(registry)
        self._actuations(registry)
        self._windows(registry)
        self._settings(registry)
        self._health(registry)
        # Every failure reason and every switch at 0 from the start: increase() does not
        # count the first sample of a series, so a series born at 1 would hide its event.
        for reason in FAILURE_REASONS:
            self.actuation_failures.labels(model, reason)
        for reason in SWITCH_REASONS:
            for p in self.profiles:
                self.switches.labels(model, reason, p)
        for stage in STAGES:
            self.errors.labels(model, stage)
            self.timeouts.labels(model, stage)
        self.set_active(None)
        self.pinned.labels(model).set(0)

    def _decisions(self, registry: CollectorRegistry) -> None:
        """What the policy decided and what is live."""
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

    def _actuations(self, registry: CollectorRegistry) -> None:
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

    def _windows(self, registry: CollectorRegistry) -> None:
        """What the signals read: the latest window, stale ones, each profile's capacity."""
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
        self.last_fresh_window = Gauge(
            "autobatch_last_fresh_window_timestamp_seconds",
            "When the latest window the policy could use ended (the sidecar's start until the first).",
            ["model"],
            registry=registry,
        )
        self.capacity = Gauge(
            "autobatch_capacity_rps",
            "What each profile of the ladder carries on this machine now, in requests/s: its "
            "batch curve's capacity scaled by the live busy share (NaN without a curve).",
            ["model", "profile"],
            registry=registry,
        )

    def _settings(self, registry: CollectorRegistry) -> None:
        """The config's figures a panel or an alert compares the signals with (:meth:`describe`)."""
        self.slo_p95_ms = Gauge(
            "autobatch_slo_p95_ms", "The p95 latency objective (slo.p95_ms).", ["model"], registry=registry
        )
        self.min_dwell_s = Gauge(
            "autobatch_min_dwell_seconds",
            "No policy switch within this long after the previous one (policy.stability.min_dwell_s).",
            ["model"],
            registry=registry,
        )
        self.max_window_age_s = Gauge(
            "autobatch_max_window_age_seconds",
            "A window older than this is stale and the policy holds (policy.trust.max_window_age_s).",
            ["model"],
            registry=registry,
        )
        self.profile_max_queue_delay_ms = Gauge(
            "autobatch_profile_max_queue_delay_ms",
            "Each profile's dynamic_batching.max_queue_delay, in milliseconds.",
            ["model", "profile"],
            registry=registry,
        )
        self.profile_preferred_batch_size = Gauge(
            "autobatch_profile_preferred_batch_size",
            "Each profile's largest preferred batch size "
            "(max_batch_size when it lists none, as Triton reads it).",
            ["model", "profile"],
            registry=registry,
        )
        self.profile_max_batch_size = Gauge(
            "autobatch_profile_max_batch_size",
            "Each profile's max_batch_size.",
            ["model", "profile"],
            registry=registry,
        )

    def _health(self, registry: CollectorRegistry) -> None:
        """Is the loop alive, where does it fail, and is the sidecar exposed."""
        self.errors = Counter(
            "autobatch_errors_total",
            "Errors by stage of the loop: signals, actuate, reconcile, log, state, tick (a bug).",
            ["model", "stage"],
            registry=registry,
        )
        self.last_tick = Gauge(
            "autobatch_last_tick_timestamp_seconds",
            "When the loop last completed a tick (one none of whose calls timed out), Unix time.",
            ["model"],
            registry=registry,
        )
        self.timeouts = Counter(
            "autobatch_timeouts_total",
            "Calls of a tick that ran into their timeout (a peer or a disk that hangs), by stage.",
            ["model", "stage"],
            registry=registry,
        )
        self.exposure = Gauge(
            "autobatch_exposure_warnings",
            "1 when the sidecar is more exposed than loopback-only: kind token_file (readable by "
            "every user) or listen (an address beyond loopback).",
            ["kind"],
            registry=registry,
        )

    def describe(
        self,
        *,
        slo_p95_ms: float,
        min_dwell_s: float,
        max_window_age_s: float,
        ladder: Sequence[Profile],
        started_s: float,
    ) -> None:
        """Export the settings the signals are compared with (once, at start)."""
        m = self.model
        self.slo_p95_ms.labels(m).set(slo_p95_ms)
        self.min_dwell_s.labels(m).set(min_dwell_s)
        self.max_window_age_s.labels(m).set(max_window_age_s)
        self.last_fresh_window.labels(m).set(started_s)
        for p in ladder:
            self.profile_max_queue_delay_ms.labels(m, p.name).set(p.max_queue_delay_us / 1000.0)
            preferred = max(p.preferred_batch_size) if p.preferred_batch_size else p.max_batch_size
            self.profile_preferred_batch_size.labels(m, p.name).set(preferred)
            self.profile_max_batch_size.labels(m, p.name).set(p.max_batch_size)

    def window_fresh(self, end_s: float) -> None:
        self.last_fresh_window.labels(self.model).set(end_s)

    def set_active(self, name: str | None) -> None:
        for p in self.profiles:
            self.active.labels(self.model, p).set(1 if p == name else 0)

    def observe_capacity(self, capacities: dict[str, float | None]) -> None:
        for p in self.profiles:
            value = capacities.get(p)
            self.capacity.labels(self.model, p).set(math.nan if value is None else float(value))

    def observe_window(self, values: dict[str, float | None]) -> None:
        for key, value in values.items():
            v = math.nan if value is None else float(value)
            self.window.labels(self.model, key).set(v)

    def health(self, bound_s: float, *, live: Callable[[], bool], ready: Callable[[], bool]) -> None:
        """The liveness bound, and live/ready as 0/1 computed when scraped."""
        Gauge(
            "autobatch_liveness_bound_seconds",
            "/healthz turns 503 when no tick has completed for longer than this.",
            ["model"],
            registry=self.registry,
        ).labels(self.model).set(bound_s)
        Gauge("autobatch_live", "1 while /healthz answers 200.", ["model"],
              registry=self.registry).labels(self.model).set_function(lambda: float(live()))
        Gauge("autobatch_ready", "1 while /readyz answers 200 (the signals are fresh).", ["model"],
              registry=self.registry).labels(self.model).set_function(lambda: float(ready()))

    def set_exposure(self, kinds: Sequence[str], warned: Sequence[str]) -> None:
        for kind in kinds:
            self.exposure.labels(kind).set(1 if kind in warned else 0)
