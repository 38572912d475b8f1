"""The actuator contract: make a profile live, say how it went.

An actuator moves one model (or one gateway) to a batching profile. It holds no
policy: the controller decides *which* profile, the actuator only applies it,
verifies it and, when that fails, puts the last good profile back.

``apply`` is idempotent (applying the live profile again is cheap or a no-op)
and does not raise for failures the controller must survive — an unreachable
server, a refused config, a failed verification: those come back as an
``ActuationResult`` with ``ok=False`` and a machine ``reason``. It raises
``ActuationError`` only when it cannot even describe what happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from autobatch.profiles import Profile

__all__ = ["REASONS", "ActuationResult", "Actuator"]

REASONS = (
    "applied",
    "unchanged",
    "reapplied",
    "dry_run",
    "invalid",
    "rejected",
    "verify_failed",
    "timeout",
    "unreachable",
    "unavailable",
    "write_failed",
    "forbidden",
)
"""Every machine reason an actuator reports, a bounded set for metric labels.

ok: ``applied`` (loaded and verified), ``unchanged`` (already live and verified;
nothing sent), ``reapplied`` (``reconcile`` found drift and put the profile
back), ``dry_run`` (nothing changed on purpose). Failures: ``invalid`` (refused
by the local checks against the live config; nothing sent), ``rejected`` (the
server refused the load), ``verify_failed`` (accepted, but the config read back
differs), ``timeout`` (a load or a config read outlived its timeout: the
server hangs), ``unreachable`` (no answer), ``unavailable`` (an answer, but
the model is not loaded), ``write_failed`` (file mode could not write config.pbtxt; nothing sent),
and ``forbidden`` (Triton's restricted API refused the request: its key is missing or wrong,
``triton.restricted_api``; nothing loaded).
"""


@dataclass(frozen=True)
class ActuationResult:
    profile: str
    """The profile that was asked for."""
    ok: bool
    """True when the asked-for profile is live and verified."""
    duration_s: float
    """Wall time of the whole step, including verification and any rollback."""
    reason: str = "applied"
    """Machine reason: applied, unchanged, rejected, unreachable, verify_failed, invalid, dry_run..."""
    message: str = ""
    """One human sentence."""
    active: str | None = None
    """The profile live after the step (the old one after a rollback, None if unknown)."""
    rolled_back: bool = False
    """True when, after a failure, the last good profile is live again and verified:
    re-applied, or (when the server kept the old copy serving) confirmed in place."""
    load_s: float | None = None
    """How long the server took to load the new config (the load request alone), the
    swap itself; None when nothing was loaded."""

    @classmethod
    def since(
        cls, profile: Profile, t0: float, now: float, *, ok: bool, reason: str, message: str, **rest: Any
    ) -> ActuationResult:
        """A result for ``profile`` whose step started at ``t0`` on the actuator's clock."""
        return cls(profile.name, ok, max(0.0, now - t0), reason, message, **rest)


@runtime_checkable
class Actuator(Protocol):
    name: str
    """Short kind, used as a metric label: 'triton', 'gateway', 'dry-run'."""

    async def apply(
        self, profile: Profile, *, urgent: bool = False, saturated: bool = False
    ) -> ActuationResult:
        """Make ``profile`` live, verify it, roll back on failure.

        ``urgent``: the policy moves to survive (the live profile cannot carry the
        load), or steps toward latency where the target costs about the same
        (:attr:`autobatch.policy.Reason.direct`). An actuator with a faster, less
        cautious path takes it (the gateway shifts straight to the target weight);
        the others ignore it. ``saturated`` (with ``urgent``): a survival move, the
        live profile cannot carry the load, so staying is no option to compare with
        (the gateway's guard keeps a receiving variant that keeps up with the load).
        """
        ...

    async def live_profile(self) -> str | None:
        """Which profile is live right now, read from the server/gateway (None if unknown).

        The controller compares it with the profile it wants to notice drift, e.g.
        a Triton restart that dropped a config override.
        """
        ...

    async def reconcile(self, profile: Profile) -> ActuationResult | None:
        """Make sure ``profile`` is still live; re-apply it if the target drifted.

        Called by the controller on every tick with the profile it wants. A
        Triton restart drops a config override (the repository's config is back),
        so the reload actuator notices that here and re-applies. Returns None when
        nothing needed doing.
        """
        ...

    async def aclose(self) -> None:
        ...
