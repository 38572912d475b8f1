"""The dry-run actuator: say what would change, change nothing.

``autobatch run --dry-run`` puts this in place of the reload actuator, so the
controller's decisions can be watched on a production server before it is
allowed to touch it. Each ``apply`` logs the profile it would load and how its
batching fields differ from the profile the dry run is pretending is live, and
reports reason ``dry_run``. It sends nothing to any server.

It keeps its own idea of what is live (the last profile it was asked to apply),
so a controller running on top of it moves through the ladder as it would for
real: ``ok`` is True, ``active`` is the pretend-live profile, and
:meth:`DryRunActuator.reconcile` never finds drift.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from autobatch.actuators.base import ActuationResult
from autobatch.errors import ConfigError
from autobatch.profiles import Profile

__all__ = ["DryRunActuator"]

_log = logging.getLogger(__name__)


def _fields(profile: Profile) -> dict[str, Any]:
    out: dict[str, Any] = {"max_batch_size": profile.max_batch_size}
    for key, value in profile.dynamic_batching().items():
        out[f"dynamic_batching.{key}"] = value
    if profile.instance_count is not None:
        out["instance_group.count"] = profile.instance_count
    if profile.instance_kind is not None:
        out["instance_group.kind"] = profile.instance_kind
    return out


def describe_change(old: Profile | None, new: Profile) -> str:
    """The fields that would change from ``old`` to ``new``, one ``field: a -> b`` each."""
    after = _fields(new)
    if old is None:
        return ", ".join(f"{k}: {json.dumps(v)}" for k, v in after.items())
    before = _fields(old)
    changed = [
        f"{k}: {json.dumps(before.get(k))} -> {json.dumps(v)}" for k, v in after.items() if before.get(k) != v
    ]
    changed += [f"{k}: {json.dumps(before[k])} -> (unset)" for k in before if k not in after]
    return ", ".join(changed) if changed else "no batching field changes"


class DryRunActuator:
    """Logs the change each ``apply`` would make and makes none.

    Args:
        ladder: the controller's profiles, most latency-oriented first.
        log: where the lines go, one string each; ``logging.info`` on this
            module's logger by default (pass ``print`` or ``list.append``).
        model: named in the lines; by default the ladder's model.
        current: the profile to pretend is live at the start; None (default)
            means unknown, and the first ``apply`` lists every field.
        clock: seconds, for ``duration_s``.
    """

    name = "dry-run"

    def __init__(
        self,
        ladder: Sequence[Profile],
        *,
        log: Callable[[str], Any] | None = None,
        model: str | None = None,
        current: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ladder = tuple(ladder)
        self.model = model or next((p.model for p in self.ladder if p.model), None) or "model"
        self._log = log if log is not None else _log.info
        self.clock = clock
        names = {p.name: p for p in self.ladder}
        if current is not None and current not in names:
            raise ConfigError(
                f"current = {current!r}: not in the ladder ({', '.join(names)})",
                field="current",
                value=current,
            )
        self._current: Profile | None = names.get(current) if current is not None else None

    async def apply(
        self, profile: Profile, *, urgent: bool = False, saturated: bool = False
    ) -> ActuationResult:
        t0 = self.clock()
        old = self._current
        if old is not None and old.name == profile.name and old == profile:
            line = f"dry run: {self.model}: {profile.name} is already live (pretend); would load nothing"
        else:
            line = (
                f"dry run: {self.model}: would load {profile.name} "
                f"(from {old.name if old else 'unknown'}): {describe_change(old, profile)}"
            )
        self._emit(line)
        self._current = profile
        return ActuationResult(
            profile=profile.name,
            ok=True,
            duration_s=max(0.0, self.clock() - t0),
            reason="dry_run",
            message=line,
            active=profile.name,
        )

    async def live_profile(self) -> str | None:
        """The profile the dry run pretends is live (None before the first ``apply``)."""
        return self._current.name if self._current else None

    async def reconcile(self, profile: Profile) -> ActuationResult | None:
        """Nothing ever drifts in a dry run: the pretend-live profile becomes ``profile``."""
        if self._current is None or self._current.name != profile.name:
            self._emit(f"dry run: {self.model}: taking {profile.name} as live")
            self._current = profile
        return None

    async def aclose(self) -> None:
        return None

    def _emit(self, line: str) -> None:
        self._log(line)
