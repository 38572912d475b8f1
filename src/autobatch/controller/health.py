"""Liveness and readiness: what ``/healthz`` and ``/readyz`` answer, and why.

**Liveness** is "the loop is not stuck". ``/healthz`` is 503 when no tick has
*completed* for longer than the bound (:attr:`SidecarConfig.liveness_bound_s
<autobatch.controller.config.SidecarConfig.liveness_bound_s>`: one interval,
one scrape timeout and one actuation). A tick in which a call ran into its
timeout (a scrape, a config read, a load, a file write) does not count as
completed: the loop moves on at the timeout, but a peer that hangs (a Triton
stopped with SIGSTOP, an endpoint that never finishes its answer, a dead file
system) keeps ``/healthz`` at 503 until it answers again. Nor does a tick that
raised (a bug outside the stages that catch their own errors). A peer that refuses
(Triton killed: connection refused) does not: ticks complete with errors,
``/healthz`` stays 200 and readiness goes false. A tick still running within
its own hard limit, none of whose calls has timed out yet (a long reload), is
progress too, but only when the tick before it completed: while a peer hangs,
each new tick would otherwise read as progress until its first call times out,
and ``/healthz`` would flap 200/503 for as long as the hang lasts.

**Readiness** is "the controller sees the model": ``/readyz`` is 503 while the
signals are stale: the latest read failed, no fresh window has come in yet,
or the newest fresh one ended longer than ``policy.trust.max_window_age_s`` ago. A
window that is stale because of a reload (its counters restarted) does not
make the sidecar unready by itself: the read worked.

Pure bookkeeping: the controller calls :meth:`Health.tick_started`,
:meth:`Health.timed_out`, :meth:`Health.tick_ended` and
:meth:`Health.signals`; the HTTP handlers call :meth:`Health.live` and
:meth:`Health.ready` with the time.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Health", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str
    """One sentence: why (shown by the endpoint and in ``/status``)."""


class Health:
    def __init__(self, *, bound_s: float, tick_limit_s: float, max_age_s: float, started_s: float) -> None:
        self.bound_s = bound_s
        """No completed tick for longer than this: not live."""
        self.tick_limit_s = tick_limit_s
        """A tick running longer than this is stuck whatever its calls say."""
        self.max_age_s = max_age_s
        self.started_s = started_s
        self.last_completed_s: float | None = None
        self.tick_started_s: float | None = None
        self._tick_timeouts: list[str] = []
        self._last_tick_completed = True
        """Whether the last tick that ended completed (True before the first ends)."""
        self.last_timeout: str | None = None
        self.last_fresh_end_s: float | None = None
        self.signals_error: str | None = None

    # -- what the loop reports -------------------------------------------------------
    def tick_started(self, now: float) -> None:
        self.tick_started_s = now
        self._tick_timeouts = []

    def timed_out(self, stage: str, message: str) -> None:
        """A call of the running tick hit its timeout."""
        self._tick_timeouts.append(stage)
        self.last_timeout = f"{stage}: {message}"

    def tick_ended(self, now: float, *, failed: bool = False) -> bool:
        """The tick is over; True when it counts as completed (it did not fail, no call
        timed out). A failed tick is not progress: a bug that raises on every tick ends
        in ``/healthz`` 503 (left as running, each tick would look like progress)."""
        self.tick_started_s = None
        self._last_tick_completed = not (failed or self._tick_timeouts)
        if self._last_tick_completed:
            self.last_completed_s = now
        return self._last_tick_completed

    def signals(self, *, fresh_end_s: float | None, error: str | None) -> None:
        """The latest read: the end of a fresh window it gave (if any), or its error."""
        self.signals_error = error
        if fresh_end_s is not None:
            self.last_fresh_end_s = fresh_end_s

    # -- what the endpoints answer ---------------------------------------------------
    def live(self, now: float) -> Verdict:
        since = self.last_completed_s if self.last_completed_s is not None else self.started_s
        gap = now - since
        what = ("the last tick completed" if self.last_completed_s is not None
                else "no tick has completed since the start")
        if gap <= self.bound_s:
            return Verdict(True, f"ok: {what} {gap:.1f} s ago (bound {self.bound_s:g} s)")
        running = self.tick_started_s
        if (running is not None and self._last_tick_completed and not self._tick_timeouts
                and now - running <= self.tick_limit_s):
            return Verdict(True, f"ok: a tick has been running for {now - running:.1f} s "
                                 "and none of its calls has timed out")
        why = f"; last timeout: {self.last_timeout}" if self.last_timeout else ""
        if running is not None and now - running > self.tick_limit_s:
            why = f"; a tick has been running for {now - running:.1f} s (limit {self.tick_limit_s:g} s)"
        return Verdict(False, f"stalled: {what} {gap:.1f} s ago (bound {self.bound_s:g} s){why}")

    def ready(self, now: float) -> Verdict:
        if self.signals_error is not None:
            return Verdict(False, f"signals stale: the latest read failed: {self.signals_error}")
        if self.last_fresh_end_s is None:
            return Verdict(False, "signals stale: no fresh window yet")
        age = now - self.last_fresh_end_s
        if age > self.max_age_s:
            return Verdict(False, f"signals stale: the newest fresh window ended {age:.1f} s ago "
                                  f"(> policy.trust.max_window_age_s = {self.max_age_s:g} s)")
        return Verdict(True, f"ok: the newest fresh window ended {age:.1f} s ago")
