"""The default policy's knobs, grouped by concern: :class:`PolicySettings`.

As the Kubernetes HPA's ``behavior`` groups its knobs by direction, each group
here is a frozen dataclass validated when built: :class:`Trust` (which figures
the policy believes), :class:`Stability` (when a recommendation becomes a
switch), :class:`Survival`, :class:`Protective`, :class:`Efficiency`,
:class:`CapacitySettings` and :class:`ForecastSettings`. A new concern is a new
group (a field of :class:`PolicySettings` with a default). Today's flat names
(``min_dwell_s``, ``forecast_alpha``) map onto the groups through :data:`FLAT`,
which :meth:`PolicySettings.from_flat` and the sidecar's YAML use. What each
knob does to the rules: docs/policy.md; their ranges: docs/sidecar.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from autobatch.curve import BatchCurve
from autobatch.profiles import Profile

__all__ = [
    "FIELDS_GROUPED_ONLY",
    "FLAT",
    "GROUPED_ONLY",
    "GROUPS",
    "CapacitySettings",
    "DeviceSettings",
    "Efficiency",
    "ForecastSettings",
    "PolicySettings",
    "Protective",
    "Stability",
    "Survival",
    "Trust",
]


def _fraction(name: str, value: float, *, zero: bool = True, one: bool = True) -> None:
    low_ok = value >= 0 if zero else value > 0
    high_ok = value <= 1 if one else value < 1
    if not (low_ok and high_ok):
        raise ValueError(f"{name} must be in {'[' if zero else '('}0, 1{']' if one else ')'}")


@dataclass(frozen=True)
class Trust:
    """Which windows and figures the policy believes."""

    max_window_age_s: float = 30.0
    """A window that ended longer ago than this is stale (the scraper is stuck)."""
    settle_s: float = 2.0
    """Windows starting less than this after a switch are ignored (reload, warm-up), but for
    an overload: arrivals do not depend on the profile."""
    p95_settle_s: float = 60.0
    """The summary p95 holds up to 60 s of the previous profile; the p95 rules wait this long."""
    breach_min_mean: float = 0.25
    """A p95 over the SLO is a breach only while the window's own mean request time is at
    least this x the SLO: after a peak the summary still reads the peak while the fresh
    windows are quick. 0 trusts the summary alone."""


@dataclass(frozen=True)
class Stability:
    """When a recommendation becomes a switch (survival moves and a pin skip all but the
    dwell after a failed switch)."""

    confirmations: int = 3
    """Consecutive fresh windows that must recommend the same target before a protective or
    efficiency switch. Survival switches act on one window."""
    min_dwell_s: float = 20.0
    """No protective or efficiency switch within this long after the previous one."""
    stabilization_s: float = 30.0
    """A step toward latency for efficiency (self-inflicted waiting, low load) needs every
    recommendation of the last this-many seconds to agree (0 turns stabilization off) ..."""
    stabilization_drop: float = 0.5
    """... but for those made at an arrival rate the load has since fallen below this share
    of: a load that halved is not a dip. 0 lets every recommendation veto."""

    def __post_init__(self) -> None:
        if self.confirmations < 1:
            raise ValueError("stability.confirmations must be >= 1")


@dataclass(frozen=True)
class Survival:
    """When the live profile cannot carry the load (one window decides)."""

    overload_ratio: float = 1.0
    """Overload: arrivals above this x the live profile's capacity, in one window."""
    overload_windows: int = 2
    """Overload also: the backlog grew in this many consecutive windows ..."""
    overload_backlog_ratio: float = 0.5
    """... and draining it at the current capacity takes longer than this x the SLO."""
    saturation_delay_ratio: float = 3.0
    """Saturation: mean queue time > this x the max delay (and the backlog growing)."""
    saturation_min_queue_ms: float = 5.0
    """...and above this floor, so a near-zero max delay does not make every wait saturation."""

    def __post_init__(self) -> None:
        if self.overload_windows < 1:
            raise ValueError("survival.overload_windows must be >= 1")


@dataclass(frozen=True)
class Protective:
    """Which failures count as a breach."""

    failure_rps_threshold: float = 0.0
    """Failures per second above this count as a breach (0: any failure)."""
    failure_reasons: tuple[str, ...] = ("REJECTED", "CANCELED")
    """Triton failure reasons that count: queue rejections and timeouts/cancellations."""


@dataclass(frozen=True)
class Efficiency:
    """When a step saves device time, or latency for nothing."""

    headroom: float = 0.7
    """A step toward throughput needs p95, and the p95 predicted on the next profile, under
    headroom x SLO (the reference article's 0.7)."""
    util_ceiling: float = 0.6
    """...and accelerator utilisation < this. Ignored when the signal is absent (CPU)."""
    min_saving: float = 0.15
    """A step toward throughput needs the next profile's device time per request at most
    (1 - this) x the current one's: a smaller saving is not worth the latency."""
    latency_tolerance: float = 0.05
    """A step toward latency is taken when the lower profile costs at most (1 + this) x the
    current device time per request. Below ``min_saving``: the two leave a band."""
    min_freed_share: float = 0.1
    """A step toward throughput must also free this share of the instances' time: at low
    load a large relative saving frees almost nothing. A step toward latency is taken when
    it costs less than half of this (the band again)."""
    max_busy: float = 1.0
    """No step toward throughput while the instances are busier than this share (1: never
    held back): a reload's new copy loads on the devices that serve. The gateway needs none.
    Ignored without a busy share."""
    max_p95: float = 1.0
    """... nor while the window's p95 is over this share of the SLO (1: never held back):
    while a reload's copy loads, the tail grows and needs room."""
    max_load: float | None = None
    """... nor while the demand is over this share of what the live profile carries (its
    capacity, stretched on a shared device; None: never held back): near saturation a reload
    has no room. The busy share misleads here: the default keeps a GPU 90% busy with small
    batches far below its capacity (docs/policy.md, "Room for a reload")."""
    near_delay_ratio: float = 0.5
    """Self-inflicted waiting: mean queue time >= this x the profile's max delay ..."""
    wait_max_busy: float = 0.75
    """...while the instances are busy less than this share of the time: busier, the queue
    comes from the load, not from the wait (the low-load step needs it too)."""
    no_gain_needs_seen: bool = False
    """``no_gain`` steps toward latency only on the lower profile's device time seen at this
    load, not learned (its estimate times the error it showed at other rates). On the T4
    curve the default's error learned in the lead-in at 1-55/s (where its estimate ignores the
    batches Poisson arrivals form) carried to 200/s beside three co-tenants put it within 4%
    of the instances' time of ``wait25``, where it measured 31-33% more device time a request
    (docs/policy.md, "A wait that buys nothing, on a learned cost")."""

    def __post_init__(self) -> None:
        _fraction("efficiency.wait_max_busy", self.wait_max_busy, zero=False)
        _fraction("efficiency.min_freed_share", self.min_freed_share, one=False)
        _fraction("efficiency.max_busy", self.max_busy, zero=False)
        _fraction("efficiency.max_p95", self.max_p95, zero=False)
        if self.max_load is not None:
            _fraction("efficiency.max_load", self.max_load, zero=False)
        if self.latency_tolerance >= self.min_saving:
            raise ValueError("efficiency.latency_tolerance must be below efficiency.min_saving, "
                             "or the ladder flaps")


@dataclass(frozen=True)
class CapacitySettings:
    """What a profile carries and costs on this machine."""

    margin: float = 1.25
    """A profile 'carries' a load when its capacity >= load x this."""
    min_gain: float = 1.1
    """With no profile that carries the load, switch to the highest-capacity one only if it
    carries at least this x the current capacity (the curve shows a gain)."""
    busy_ceiling: float = 0.9
    """The busy share at which a profile is full on this machine: the live capacity is what
    the curve predicts, scaled by the measured busy time and this. 1 trusts the curve."""
    live_min_busy: float = 0.3
    """Windows whose instances were busy less than this share say too little about
    capacity; the last one above it sets the live factor."""
    device_alpha: float = 0.5
    """The newest window's weight in the device time each profile is remembered to cost."""
    learn_max_step: float | None = None
    """Learn what a profile costs only from a window whose demand is within this factor of the
    previous window's, never from the first window or one after a window that carried
    nothing: the load changed within it, so its mean rate is not the rate its batches formed
    at (None: learn from every window; docs/policy.md, "Learning at a steady load")."""

    def __post_init__(self) -> None:
        _fraction("capacity.busy_ceiling", self.busy_ceiling, zero=False)
        _fraction("capacity.device_alpha", self.device_alpha, zero=False)
        if self.learn_max_step is not None and not self.learn_max_step > 1.0:
            raise ValueError("capacity.learn_max_step must be above 1")


@dataclass(frozen=True)
class ForecastSettings:
    """Moving before saturation, on the projected arrival rate."""

    enabled: bool = True
    """False: move only on what is seen."""
    windows: int = 10
    """Holt's forecast runs over this many latest fresh windows (at least 3 to say anything)."""
    alpha: float = 0.5
    """Holt's level smoothing: the weight of the newest window."""
    beta: float = 0.3
    """Holt's trend smoothing."""
    z: float = 3.5
    """A trend counts only above this many standard deviations of the trend Poisson noise
    (or the observed noise, if larger) would produce: steady load must not trip it."""
    jump_z: float = 4.0
    """A window more than this many Poisson standard deviations above Holt's projection is
    a step (a level shift), not a trend: the trend restarts after it (0: never)."""
    default_actuation_s: float = 3.0
    """The reaction time's actuation part before the first switch measures it."""

    def __post_init__(self) -> None:
        if not (0 < self.alpha <= 1 and 0 < self.beta <= 1):
            raise ValueError("forecast.alpha and forecast.beta must be in (0, 1]")


@dataclass(frozen=True)
class DeviceSettings:
    """A device others share, read where a window carries the stretch of its batches against
    ``policy.curve`` and the device's utilisation (docs/policy.md, "A shared device")."""

    shared_min: float = 0.2
    """The device counts as shared while others use at least this share of it
    (``others_share``). Below, a stretch is the model's own (its instances' turns, what the
    backend adds): its load rose, and the load rules answer. Alone on the emulated T4 the
    share read 0-0.08 (the utilisation's period is not the window's); two co-tenants 0.45-0.63."""
    p95_per_mean: float = 1.5
    """The window's mean request time times this stands for the live profile's p95 where
    the summary's lags a minute: the simulated p95 of the T4 curve's profiles was 1.25-1.7x
    their mean, alone and with one to three co-tenants."""
    target_p95: float = 0.85
    """The shared rule moves to the profile nearest the live one predicted under this x the
    SLO (else to the most latency-oriented): a margin under the SLO it acts at."""
    act_p95: float = 1.0
    """The shared rule acts once the live profile's predicted p95 passes this x the SLO, and
    a climb on a shared device is refused where the profile's p95 would read above it once
    serving. 1: at the SLO itself. Lower acts on a co-tenant's arrival that leaves the live
    profile's prediction just under the SLO (cotenants-step, 2026-12-04: 58-59 ms for two
    windows), at the price of the climbs it refuses."""
    climb_p95: float = 0.95
    """A climb on a shared device is refused where the profile's p95 would read above the
    lower of this and ``act_p95``, x the SLO, once serving: a band under where the shared rule
    acts, so that a profile read just under it in one window is not climbed to and moved back
    from in the next. The check reads the profile before the climb from the live profile's
    requests, the shared rule after it from its own: on cotenants-linger's 40/s with two
    co-tenants (2026-12-05) the first read wait25 at 57-70 ms, the second 61-63, and wait25
    held measured a p95 of 57-58 (1-2% of its requests over the SLO, the default's none).
    1: no band (before 2026-12-05; with ``own_queue`` 1 it climbed there and was moved back
    5 s later, in 2 of 3 runs)."""
    own_queue: float = 1.0
    """The share of the live window's queue time, beyond its profile's own wait for a batch,
    that the climb check counts as the live profile's own: its requests waiting for its busy
    instances (the run of the batch ahead), which a profile forming bigger batches keeps less
    busy. 0 carries all of it to the other profiles as delay they would meet too (before
    2026-12-05): on cotenants-day's afternoon the default queued ~10 ms on instances ~90%
    busy, and the check read wait25 at 61-66 ms once serving where wait25 held measured a
    p95 of 51.5; at 1 it reads 46-53 ms there (docs/shared-gpu.md)."""

    wait_tail: float = 1.0
    """The share of a profile's own mean wait for a batch that the ``p95_per_mean`` floor
    multiplies; the rest of the wait counts once. 1: the whole mean request is multiplied.
    A wait bounded by the max delay varies less than the queue for busy instances and the
    stretched run: held on a shared device (others at least ``shared_min``), wait25's summary
    p95 was 1.24x its windows' mean request (median of 644 windows of the saved runs, 1.00-1.67)
    and the floor at 1 read it 1.21x over that p95 (under it in 2%); 0 reads it 1.04x over, but
    under it in a quarter of the windows (docs/shared-gpu.md, "What the p95 floor reads")."""
    floor_alone: bool = False
    """The shared rule and the climb check read the p95 floor on a device the model has to
    itself too (others under ``shared_min``), where the window says what the device does.
    False: only while shared (as before). Over the latest shipped run of every T4 schedule
    (2026-12-05), wait25's floor passed the SLO alone in 75 of `bursty`'s 120 burst windows
    (bursts of 8: measured p95 56 ms, the summary's lagging at 50-52) and in none of the 5241
    windows it served alone on the nine others. On ``[triton-default, wait25]`` it moves the
    bursts to the default: 0.89-0.92x the default's device time against 0.69x off, for at most
    0.6 points (docs/shared-gpu.md). With ``aggressive`` between, it never acted: the
    ``self_inflicted_wait`` rule had moved ``wait25`` down at 15/s before the bursts came."""

    steady_windows: int = 1
    """Windows in a row a ``shared`` move needs where nothing changed over as many windows:
    others' share rose by less than ``device.change_share`` and the arrivals moved by less
    than ``device.change_rate`` of their rate. Where either changed (a co-tenant arrives,
    the load steps) it acts on one window, as a survival move. 1: always on one window
    (examples/sidecar-t4.yaml sets 2 from 2026-12-06). In steady state one window's
    prediction spreads ~9 ms (10th-90th) around the rung's p95, so where that p95 runs
    52-58 ms one window in 13-55 reads over 60 and the controller switches; at 150-200/s
    the default held there went as far over the SLO as wait25 held (-1.3 to +2.3 points),
    so those switches spent device time for no share over the SLO (docs/shared-gpu.md,
    "Two windows where nothing changed")."""
    change_share: float = 0.1
    """With ``device.steady_windows`` over 1: others' share of the device rising by at
    least this over the last ``steady_windows`` windows is a change (a co-tenant arrives).
    An arrival read 0.1-0.3 in its first window and 0.3-0.55 once shared; steady, the share
    moved 0.02-0.08 from one window to the next."""
    change_rate: float = 0.4
    """With ``device.steady_windows`` over 1: the arrivals of this window and of the one
    ``steady_windows`` back differing by at least this share of the higher is a change (a
    load step: 150 -> 40/s is 0.73, 50 -> 100/s 0.5). Poisson arrivals at 40/s differ
    between two 1 s windows by ~9/s (one standard deviation), a fifth of the rate: a
    steady 40/s reads as a change in ~3% of its windows (two Poisson counts), a steady 150/s in none."""

    change_windows: int = 0
    """With ``device.steady_windows`` over 1: how many windows back :func:`steady` looks for a
    change (this window against the one that many back). 0: ``steady_windows`` (as before
    2026-12-06 15:30). Set apart so that a longer steady-state wait does not widen the span
    after an arrival in which one window acts: at ``steady_windows`` 3 a window 2-3 s after a
    co-tenant came still read as a change, and on cotenants-linger all six controllers left
    ``wait25`` then, where at 2 four of six had left on two windows mid-phase. At
    ``steady_windows`` 3 with this at 2 they still left at the arrival (linger 1.11-1.12x the
    oracle's device time, as shipped; step 0.57-0.60x the default's, the shipped gateway 0.52x),
    so no config sets it (docs/shared-gpu.md, "Three windows where nothing changed")."""

    release: bool = False
    """A step toward throughput back to the profile a ``shared`` move left, once others use
    under ``shared_min`` of the device, need not wait out ``stability.min_dwell_s`` (its
    confirmations still count): the co-tenants left, and the move's cause with them. Off: as
    before 2026-12-06 17:30, when a ``shared`` move made up to 10 s before the co-tenants left
    kept the default 8-15 s into the next phase in 13 of the day's co-tenant runs
    (cotenants-step at 16:42: 3.91 ms a request in ``high-alone`` against ``wait25``'s 2.68).
    examples/sidecar-t4.yaml sets it since 18:25 (docs/shared-gpu.md, "The way back without
    the dwell")."""

    def __post_init__(self) -> None:
        _fraction("device.shared_min", self.shared_min, zero=False)
        _fraction("device.target_p95", self.target_p95, zero=False)
        _fraction("device.act_p95", self.act_p95, zero=False)
        _fraction("device.climb_p95", self.climb_p95, zero=False)
        _fraction("device.own_queue", self.own_queue, zero=True)
        _fraction("device.wait_tail", self.wait_tail, zero=True)
        if not self.p95_per_mean >= 1.0:
            raise ValueError("device.p95_per_mean must be >= 1")
        if self.steady_windows < 1:
            raise ValueError("device.steady_windows must be >= 1")
        if self.change_windows < 0:
            raise ValueError("device.change_windows must be >= 0")
        _fraction("device.change_share", self.change_share, zero=False)
        _fraction("device.change_rate", self.change_rate, zero=False)


GROUPS: dict[str, type[Any]] = {
    "trust": Trust,
    "stability": Stability,
    "survival": Survival,
    "protective": Protective,
    "efficiency": Efficiency,
    "capacity": CapacitySettings,
    "forecast": ForecastSettings,
    "device": DeviceSettings,
}
"""Each group's name (its field of :class:`PolicySettings`, its YAML section) and class."""

_RENAMED = {
    "capacity_margin": ("capacity", "margin"),
    "efficiency_max_busy": ("efficiency", "max_busy"),
    "efficiency_max_p95": ("efficiency", "max_p95"),
    "forecast": ("forecast", "enabled"),
    "forecast_windows": ("forecast", "windows"),
    "forecast_alpha": ("forecast", "alpha"),
    "forecast_beta": ("forecast", "beta"),
    "forecast_z": ("forecast", "z"),
    "forecast_jump_z": ("forecast", "jump_z"),
    "default_actuation_s": ("forecast", "default_actuation_s"),
}

GROUPED_ONLY = {"device"}
"""Groups added after the flat names were retired: they have none."""
FIELDS_GROUPED_ONLY = {("efficiency", "max_load"), ("efficiency", "no_gain_needs_seen"),
                       ("capacity", "learn_max_step")}
"""Fields added to older groups after the flat names were retired: they have none either."""

FLAT: dict[str, tuple[str, str]] = {
    **{f.name: (group, f.name) for group, cls in GROUPS.items() if group not in GROUPED_ONLY
       for f in fields(cls)
       if (group, f.name) not in _RENAMED.values() and (group, f.name) not in FIELDS_GROUPED_ONLY},
    **_RENAMED,
}
"""Each flat name (the policy's settings before they were grouped, and the sidecar YAML's
old keys) and the (group, field) it now is."""


@dataclass(frozen=True)
class PolicySettings:
    """Knobs of the default policy. Every time is in seconds unless its name says otherwise."""

    ladder: tuple[Profile, ...]
    """Profiles, most latency-oriented first. At least two."""
    slo_p95_ms: float
    """The latency objective the p95 rules compare against."""
    slo_p99_ms: float | None = None
    """Optional p99 objective; a breach of it counts like a p95 breach."""
    curve: BatchCurve | None = None
    """A measured batch curve (``autobatch measure``), the prior for capacity; live points win."""
    trust: Trust = field(default_factory=Trust)
    stability: Stability = field(default_factory=Stability)
    survival: Survival = field(default_factory=Survival)
    protective: Protective = field(default_factory=Protective)
    efficiency: Efficiency = field(default_factory=Efficiency)
    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    device: DeviceSettings = field(default_factory=DeviceSettings)

    def __post_init__(self) -> None:
        if len(self.ladder) < 2:
            raise ValueError("the profile ladder needs at least two profiles")
        names = [p.name for p in self.ladder]
        if len(set(names)) != len(names):
            raise ValueError(f"profile names in the ladder must be unique: {names}")

    @classmethod
    def from_flat(cls, *, ladder: tuple[Profile, ...], slo_p95_ms: float, slo_p99_ms: float | None = None,
                  curve: BatchCurve | None = None, **flat: Any) -> PolicySettings:
        """Settings from the flat names of :data:`FLAT` (``min_dwell_s=10``), each put in its
        group; every other knob keeps its default."""
        unknown = sorted(set(flat) - set(FLAT))
        if unknown:
            raise TypeError(f"unknown policy settings: {', '.join(unknown)}")
        groups: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            group, key = FLAT[name]
            groups.setdefault(group, {})[key] = value
        try:
            built = {g: GROUPS[g](**kw) for g, kw in groups.items()}
        except ValueError as exc:  # named as the caller spelled it
            message = str(exc)
            for name in flat:
                message = message.replace(".".join(FLAT[name]), name)
            raise ValueError(message) from exc
        return cls(ladder=ladder, slo_p95_ms=slo_p95_ms, slo_p99_ms=slo_p99_ms, curve=curve, **built)

    def index(self, name: str) -> int:
        for i, p in enumerate(self.ladder):
            if p.name == name:
                return i
        raise KeyError(name)
