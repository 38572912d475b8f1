"""What the policy reads and returns: the window it observes, its reasons, its memory, its decision.

:class:`Observation` is what :func:`~autobatch.policy.decide` reads from a window;
:class:`Reason` says why it did what it did, and :attr:`Reason.kind` groups the
reasons (survival, protective, efficiency, manual, hold: see
:mod:`autobatch.policy.core`); :class:`State` is what it remembers between
calls; :class:`Decision` is what one step returns. The knobs are
:class:`~autobatch.policy.settings.PolicySettings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from autobatch.policy.memory import DeviceMemory

__all__ = ["Action", "Decision", "Observation", "Reason", "Recommendation", "State"]


class Observation(Protocol):
    """What the policy reads from a window: :class:`autobatch.signals.Window` fits, checked
    by mypy where the controller and ``autobatch replay`` hand windows to ``decide``.
    Read-only, as a frozen dataclass's fields are; ``None`` where a signal is absent."""

    @property
    def start_s(self) -> float: ...
    @property
    def end_s(self) -> float: ...
    @property
    def inference_rps(self) -> float: ...
    @property
    def exec_rps(self) -> float: ...
    @property
    def arrival_rps(self) -> float: ...
    @property
    def failure_rps(self) -> Mapping[str, float]: ...
    @property
    def mean_batch_size(self) -> float | None: ...
    @property
    def mean_queue_ms(self) -> float | None: ...
    @property
    def mean_request_ms(self) -> float | None: ...
    @property
    def pending_requests(self) -> float | None: ...
    @property
    def pending_delta(self) -> float | None: ...
    @property
    def p95_ms(self) -> float | None: ...
    @property
    def p99_ms(self) -> float | None: ...
    @property
    def batch_curve_ms(self) -> Mapping[int, float]: ...
    @property
    def utilization(self) -> float | None: ...
    @property
    def device_ms_per_request(self) -> float | None: ...
    @property
    def busy_instances(self) -> float | None: ...
    @property
    def busy_share(self) -> float | None: ...
    @property
    def instance_count(self) -> int | None: ...
    @property
    def stretch(self) -> float | None: ...
    @property
    def own_device_share(self) -> float | None: ...
    @property
    def others_share(self) -> float | None: ...
    @property
    def stale(self) -> bool: ...
    @property
    def stale_reason(self) -> str | None: ...


class Action(str, Enum):
    HOLD = "hold"
    SWITCH = "switch"


class Reason(str, Enum):
    """Why the policy did what it did: a metric label and a log field."""

    # holds
    STEADY = "steady"  # inside the band: nothing to do
    NO_DATA = "no_data"  # no window yet, or the window lacks the signals needed
    STALE = "stale"  # the latest window is stale or too old
    SETTLING = "settling"  # the window overlaps the last switch
    DWELL = "dwell"  # minimum dwell after a switch not over
    CONFIRMING = "confirming"  # a move is recommended, not yet by N windows in a row
    STABILIZING = "stabilizing"  # a move toward latency, vetoed by a recent recommendation
    SATURATED = "saturated"  # saturated, and no profile would add capacity
    CAPACITY = "capacity"  # toward latency wanted, but the lower profile cannot carry the load
    AT_LIMIT = "at_limit"  # the move would leave the ladder
    RELIEVED = "relieved"  # p95 over the SLO, but under what it was on the profile relief left
    PINNED = "pinned"  # a manual pin holds the profile
    # survival: the profile cannot carry the load (now, or within the reaction time)
    OVERLOAD = "overload"  # arrivals above capacity, or a backlog growing window after window
    FORECAST = "forecast"  # arrivals projected over the reaction time exceed what it carries
    SATURATION = "saturation"  # queue far above the max delay and the backlog growing
    SHARED = "shared"  # others share the device: the live profile's stretched batches breach the SLO
    # protective
    SLO_BREACH = "slo_breach"  # p95 over the SLO and not saturated: back off
    FAILURES = "failures"  # rejected/timed-out requests: back off
    RELIEF = "relief"  # p95 over the SLO at the bottom: a profile above spends less device time
    # efficiency
    EFFICIENCY = "efficiency"  # the next profile saves device time, p95 stays inside headroom
    SELF_INFLICTED_WAIT = "self_inflicted_wait"  # waiting for batches that never fill
    LOW_LOAD = "low_load"  # device time barely differs: take the lower latency
    NO_GAIN = "no_gain"  # busy, and the batches no longer save device time: the wait only costs
    # manual
    PIN = "pin"  # switching to a manually pinned profile

    @property
    def kind(self) -> str:
        """``survival``, ``protective``, ``efficiency``, ``manual`` or ``hold``."""
        return _KINDS.get(self, "hold")

    @property
    def direct(self) -> bool:
        """Whether a switch for this reason takes the actuator's fast path (the gateway:
        straight to the target weight, judged against the variant the traffic left):
        survival moves, the steps toward latency that cost about nothing (``low_load``,
        ``self_inflicted_wait``, ``no_gain``) and ``relief``, whose live variant breaches
        already. Why, measured: docs/gateway.md."""
        return self.kind == "survival" or self in (
            Reason.LOW_LOAD, Reason.SELF_INFLICTED_WAIT, Reason.NO_GAIN, Reason.RELIEF)


_KINDS = {
    Reason.OVERLOAD: "survival",
    Reason.FORECAST: "survival",
    Reason.SATURATION: "survival",
    Reason.SHARED: "survival",
    Reason.SLO_BREACH: "protective",
    Reason.FAILURES: "protective",
    Reason.RELIEF: "protective",
    Reason.EFFICIENCY: "efficiency",
    Reason.SELF_INFLICTED_WAIT: "efficiency",
    Reason.NO_GAIN: "efficiency",
    Reason.LOW_LOAD: "efficiency",
    Reason.PIN: "manual",
}


@dataclass(frozen=True)
class Recommendation:
    """What a rule answers: a target on the ladder (the live profile's index for a hold),
    why, and what it saw."""

    target: int
    """The target's index on the ladder."""
    reason: Reason
    message: str
    notes: Mapping[str, Any] = field(default_factory=dict)
    """Figures the rule adds to the decision's signals."""


@dataclass(frozen=True)
class State:
    """What the policy remembers between calls. Start with :meth:`initial`."""

    active: str
    """The profile the policy believes is live."""
    last_switch_s: float | None = None
    """When the last switch (or failed attempt) happened; None before the first."""
    streak_target: str | None = None
    """The target recommended by the latest consecutive windows ..."""
    streak: int = 0
    """... and how many windows in a row."""
    last_window_end_s: float | None = None
    """End of the latest window counted, so one window is never counted twice."""
    recommendations: tuple[tuple[float, int, float], ...] = ()
    """(time, ladder index, arrival rate) of recent recommendations, for the stabilization
    window."""
    pin: str | None = None
    """A manually pinned profile; overrides everything."""
    last_actuation_s: float | None = None
    """How long the last switch took to apply (the forecast's horizon includes it)."""
    last_switch_failed: bool = False
    """The last switch failed: every move dwells, survival too (retrying a refused
    profile every window would hammer the server)."""
    device: DeviceMemory = DeviceMemory()
    """Device time per request each profile was seen to spend, by arrival rate."""
    efficiency_up_rps: float | None = None
    """The arrival rate the last switch was decided at, when it was an efficiency (or
    relief) step toward throughput (None after any other): once the load has fallen well
    below it, a step back toward latency need not wait out the dwell."""
    shared_from: str | None = None
    """The profile the last switch left when it was a ``shared`` move (None after any other):
    with ``device.release``, the step back to it once others leave skips the dwell."""
    relief_from: tuple[str, float] | None = None
    """The profile a relief move left and the p95 it read there (None after any other
    switch): a breach on the profile it reached steps back only once its p95 is worse."""
    relief_worse: tuple[str, float] | None = None
    """A profile a relief move reached whose p95 then read worse than the one it left,
    and the arrival rate it was left at: no relief into it again near that rate."""

    @classmethod
    def initial(cls, active: str) -> State:
        return cls(active=active)

    def pinned(self, name: str | None) -> State:
        return replace(self, pin=name, streak_target=None, streak=0)

    def switched(self, to: str, at_s: float, duration_s: float | None = None) -> State:
        """The switch to ``to`` happened (the controller calls this after the actuator
        succeeds); ``duration_s`` is how long applying it took."""
        took = self.last_actuation_s if duration_s is None else duration_s
        return replace(self, active=to, last_switch_s=at_s, streak_target=None, streak=0,
                       last_actuation_s=took, last_switch_failed=False)

    def switch_failed(self, active: str, at_s: float, tried: str | None = None) -> State:
        """The switch to ``tried`` failed and ``active`` is live again: dwell before trying
        anything else.

        When the switch was a relief move (``relief_from`` is set by the relief decision
        alone; every other switch decision clears it), one that did not take (a gateway
        guard saw its p95 read worse than the one it left, or the server refused it) is
        not tried again near the rate it was decided at, as for one whose p95 read worse
        after it took (``relief_worse``); else a lasting breach retries it after every
        dwell."""
        worse = self.relief_worse
        if tried is not None and self.relief_from is not None and self.efficiency_up_rps is not None:
            worse = (tried, self.efficiency_up_rps)
        return replace(self, active=active, last_switch_s=at_s, streak_target=None, streak=0,
                       last_switch_failed=True, relief_from=None, efficiency_up_rps=None,
                       relief_worse=worse, shared_from=None)


@dataclass(frozen=True)
class Decision:
    action: Action
    current: str
    target: str
    reason: Reason
    message: str
    at_s: float
    signals: Mapping[str, Any] = field(default_factory=dict)
    """The figures the decision rested on (for logs, /status and replay)."""

    @property
    def switch(self) -> bool:
        return self.action is Action.SWITCH

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_s": self.at_s,
            "action": self.action.value,
            "current": self.current,
            "target": self.target,
            "reason": self.reason.value,
            "kind": self.reason.kind,
            "message": self.message,
            "signals": dict(self.signals),
        }
