"""The default policy's knobs: :class:`PolicySettings`, validated when built."""

from __future__ import annotations

from dataclasses import dataclass

from autobatch.curve import BatchCurve
from autobatch.profiles import Profile

__all__ = ["PolicySettings"]


@dataclass(frozen=True)
class PolicySettings:
    """Knobs of the default policy. Every time is in seconds unless its name says otherwise."""

    ladder: tuple[Profile, ...]
    """Profiles, most latency-oriented first. At least two."""
    slo_p95_ms: float
    """The latency objective the p95 rules compare against."""
    slo_p99_ms: float | None = None
    """Optional p99 objective; a breach of it counts like a p95 breach."""
    headroom: float = 0.7
    """An efficiency step toward throughput needs p95, and the p95 predicted on the next
    profile, under headroom x SLO (the reference article's 0.7)."""
    util_ceiling: float = 0.6
    """...and accelerator utilisation < this. Ignored when the signal is absent (CPU)."""
    confirmations: int = 3
    """Consecutive fresh windows that must recommend the same target before a protective or
    efficiency switch. Survival switches act on one window."""
    min_dwell_s: float = 20.0
    """No protective or efficiency switch within this long after the previous one. Survival
    switches (toward more capacity) and a manual pin are exempt."""
    settle_s: float = 2.0
    """Windows starting less than this after a switch are ignored (reload, warm-up), but for
    an overload: arrivals do not depend on the profile."""
    p95_settle_s: float = 60.0
    """The summary p95 holds up to 60 s of the previous profile; p95 rules wait this long."""
    breach_min_mean: float = 0.25
    """A p95 over the SLO is a breach only while the window's own mean request time is at
    least this x the SLO: the summary p95 remembers up to 60 s, and after a peak it still
    reads the peak while the fresh windows are quick (a ramp's way down stepped back on a
    p95 that held the 380/s peak). 0 trusts the summary alone."""
    stabilization_s: float = 30.0
    """A step toward latency for efficiency (self-inflicted waiting, low load) needs every
    recommendation of the last this-many seconds to agree (0 turns stabilization off) ..."""
    stabilization_drop: float = 0.5
    """... but for those made at an arrival rate the load has since fallen below this
    share of: a load that halved is not a dip, and what paid at twice the load says
    nothing of this one (a 10 s low phase after a fall otherwise waited out the whole
    stabilization on the higher profile). A recommendation counts as made at the higher of
    its window's rate and the previous window's (the window straddling a fall saw both).
    0 lets every recommendation veto."""
    max_window_age_s: float = 30.0
    """A window that ended longer ago than this is stale (the scraper is stuck)."""
    near_delay_ratio: float = 0.5
    """Self-inflicted waiting: mean queue time >= this x the profile's max delay ..."""
    wait_max_busy: float = 0.75
    """...while the instances are busy less than this share of the time: busier, the queue
    comes from the load, not from the wait (dense_mlp x 2 on efficient at 300 req/s queued
    7-12 ms behind a 5 ms delay with its instances 87-93% busy), and it is no low load
    either (the low-load step needs it too). Ignored without a busy share."""
    saturation_delay_ratio: float = 3.0
    """Saturation: mean queue time > this x the max delay (and the backlog growing)."""
    saturation_min_queue_ms: float = 5.0
    """...and above this floor, so a near-zero max delay does not make every wait saturation."""
    capacity_margin: float = 1.25
    """A profile 'carries' a load when its capacity >= load x this."""
    min_gain: float = 1.1
    """With no profile that carries the load, switch to the highest-capacity one only if it
    carries at least this x the current capacity (the curve shows a gain)."""
    failure_rps_threshold: float = 0.0
    """Failures per second above this count as a breach (0: any failure)."""
    failure_reasons: tuple[str, ...] = ("REJECTED", "CANCELED")
    """Triton failure reasons that count: queue rejections and timeouts/cancellations."""
    curve: BatchCurve | None = None
    """A measured batch curve (``autobatch measure``), the prior for capacity; live points win."""
    overload_ratio: float = 1.0
    """Overload: arrivals above this x the current profile's capacity, in one window."""
    overload_windows: int = 2
    """Overload also: the backlog grew in this many consecutive windows ..."""
    overload_backlog_ratio: float = 0.5
    """... and draining it at the current capacity takes longer than this x the SLO."""
    busy_ceiling: float = 0.9
    """The busy share at which a profile is full on this machine (executions never follow
    each other without a gap): the live capacity is what the curve predicts, scaled by the
    measured busy time and this. 1 trusts the curve's back-to-back batches."""
    live_min_busy: float = 0.3
    """Windows whose instances were busy less than this share say too little about
    capacity; the last one above it sets the live factor."""
    forecast: bool = True
    """Move before saturation on the projected arrival rate (False: only on what is seen)."""
    forecast_windows: int = 10
    """Holt's forecast runs over this many latest fresh windows (at least 3 to say anything)."""
    forecast_alpha: float = 0.5
    """Holt's level smoothing: the weight of the newest window."""
    forecast_beta: float = 0.3
    """Holt's trend smoothing."""
    forecast_z: float = 3.5
    """A trend counts only above this many standard deviations of the trend Poisson noise
    (or the observed noise, if larger) would produce: steady load must not trip it."""
    forecast_jump_z: float = 4.0
    """A window more than this many Poisson standard deviations above Holt's projection is
    a step (a level shift), not a trend: the trend restarts after it (0: never)."""
    default_actuation_s: float = 3.0
    """The reaction time's actuation part before the first switch measures it (a reload of
    dense_mlp here takes about 3 s; a gateway shift a fraction of a second)."""
    min_saving: float = 0.15
    """An efficiency step toward throughput needs the next profile's device time per request
    at most (1 - this) x the current one's: a smaller saving is not worth the latency."""
    latency_tolerance: float = 0.05
    """An efficiency step toward latency is taken when the lower profile costs at most
    (1 + this) x the current device time per request (at low load they all cost the same).
    Less than ``min_saving``, so the two rules leave a band where neither moves."""
    min_freed_share: float = 0.1
    """An efficiency step toward throughput must also free at least this share of the
    instances' time (saved device ms per request x arrivals / instances): at low load a
    large relative saving frees almost nothing and still costs the wait. A step toward
    latency is taken when it costs less than half of this (the band again)."""
    efficiency_max_busy: float = 1.0
    """An efficiency step toward throughput is not taken while the instances are busier than
    this share of the time (1: never held back). For a reload, whose new copy loads on
    the devices and host that serve: near saturation the load itself costs the SLO (dense_mlp
    x 2 on this CPU, 85% busy at 335/s: the reload took 5.5 s and sent 5.2 points more of
    that phase over the SLO). Survival moves are never held back; the gateway's variants
    are warm, so its shift costs nothing and it needs no limit. Ignored without a busy share."""
    efficiency_max_p95: float = 1.0
    """... nor while the window's p95 is over this share of the SLO (1: never held back). For
    a reload: while the new copy loads, the instances serve on shared devices and the tail
    grows; a p95 already near the headroom leaves that no room (dense_mlp x 2 on this CPU,
    bursts at 150/s: the move came at p95 36 ms, 60% of the SLO, and the 3.6 s reload sent
    3.3 points more of the burst over the SLO than the best static profile; every move that
    paid came at 12-15 ms)."""
    device_alpha: float = 0.5
    """The newest window's weight in the device time each profile is remembered to cost."""

    def __post_init__(self) -> None:
        if len(self.ladder) < 2:
            raise ValueError("the profile ladder needs at least two profiles")
        names = [p.name for p in self.ladder]
        if len(set(names)) != len(names):
            raise ValueError(f"profile names in the ladder must be unique: {names}")
        if self.confirmations < 1:
            raise ValueError("confirmations must be >= 1")
        if self.overload_windows < 1:
            raise ValueError("overload_windows must be >= 1")
        if not 0 < self.busy_ceiling <= 1:
            raise ValueError("busy_ceiling must be in (0, 1]")
        if not (0 < self.forecast_alpha <= 1 and 0 < self.forecast_beta <= 1):
            raise ValueError("forecast_alpha and forecast_beta must be in (0, 1]")
        if not 0 < self.wait_max_busy <= 1:
            raise ValueError("wait_max_busy must be in (0, 1]")
        if not 0 <= self.min_freed_share < 1:
            raise ValueError("min_freed_share must be in [0, 1)")
        if not 0 < self.efficiency_max_busy <= 1:
            raise ValueError("efficiency_max_busy must be in (0, 1]")
        if not 0 < self.efficiency_max_p95 <= 1:
            raise ValueError("efficiency_max_p95 must be in (0, 1]")
        if not 0 < self.device_alpha <= 1:
            raise ValueError("device_alpha must be in (0, 1]")
        if self.latency_tolerance >= self.min_saving:
            raise ValueError("latency_tolerance must be below min_saving, or the ladder flaps")

    def index(self, name: str) -> int:
        for i, p in enumerate(self.ladder):
            if p.name == name:
                return i
        raise KeyError(name)
