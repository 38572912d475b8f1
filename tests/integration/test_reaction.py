"""The sidecar against the real Triton: a step of load is answered within two windows.

The sidecar polls every second; the load steps from 30 to 400 requests/s, twice
what latency-soft carries on the emulated accelerator's curve. The survival
decision (``overload``, ``forecast`` or ``saturation``) must come in one of the
first two windows that end after the step. Windows are counted from the
decision log, not seconds measured: this is a test of the rule, and the
timing itself is benchmarks/reaction.py's.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from autobatch.controller.loop import read_decision_log
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.load import run_load
from autobatch.schedule import Phase, Schedule

from .test_sidecar import Running, config, server  # noqa: F401  (the module's Triton fixture)

pytestmark = pytest.mark.triton

LOW_S = 6.0


class _Start:
    """The wall-clock time the load's schedule started, from its completed requests:
    each callback comes after its request completed, so the earliest estimate wins."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.start_s: float | None = None

    def __call__(self, rec) -> None:
        if rec.sent_s is None or rec.latency_ms is None:
            return
        estimate = time.time() - rec.sent_s - rec.latency_ms / 1000.0
        with self.lock:
            if self.start_s is None or estimate < self.start_s:
                self.start_s = estimate


def test_a_step_is_answered_within_two_windows(tmp_path: Path, server) -> None:  # noqa: F811
    cfg = config(tmp_path, server, policy={"min_dwell_s": 6})
    schedule = Schedule((Phase("low", 30, LOW_S), Phase("high", 400, 6)))
    start = _Start()
    with Running(cfg) as running:
        running.wait_for(lambda s: s["active_profile"] == "latency-soft", 30, "latency-soft at start")
        # Let the sidecar see a few calm windows first (its forecast needs three).
        report = run_load(server.urls.grpc, EMULATOR_MODEL, schedule, timeout_s=20, on_record=start)
    assert start.start_s is not None
    step_s = start.start_s + LOW_S
    log = read_decision_log(cfg.decision_log)
    after = [ln for ln in log if ln["window"] and ln["window"]["end_s"] > step_s]
    first = next((i for i, ln in enumerate(after)
                  if ln["decision"]["action"] == "switch"
                  and ln["decision"]["kind"] == "survival"), None)
    print(f"step at {step_s:.2f}; windows after it until the decision: "
          + ", ".join(f"{ln['window']['end_s'] - step_s:+.2f} s {ln['decision']['reason']}"
                      for ln in after[: (first or 3) + 1]))
    assert first is not None, [ln["decision"]["message"] for ln in after][:6]
    assert first + 1 <= 2, f"decided in window {first + 1} after the step"
    decision = after[first]["decision"]
    assert decision["target"] == "aggressive"
    # The log carries what the decision rested on. The first window after the step also
    # holds calm seconds (CI 2026-12-06: saturation at +0.31 s read 118/s), so its demand
    # is checked against the calm rate, and the reason's own figure against its threshold.
    sig, s = decision["signals"], cfg.policy
    assert sig["demand_rps"] > 2 * schedule.phases[0].rate_rps, sig
    assert sig["capacity_rps"]["aggressive"] > sig["capacity_rps"]["latency-soft"], sig
    if decision["reason"] == "saturation":
        assert sig["mean_queue_ms"] > max(s.survival.saturation_delay_ratio * sig["max_queue_delay_ms"],
                                          s.survival.saturation_min_queue_ms), sig
    elif decision["reason"] == "forecast":
        assert sig["forecast_rps"] * s.capacity.margin > sig["capacity_rps"]["latency-soft"], sig
    assert after[first]["actuation"]["ok"], after[first]["actuation"]
    assert report.phases[1].failures == {}, report.phases[1].failures
