"""Steady Poisson load on the real Triton, replayed through the policy: no switch.

``tests/data/steady-aggressive.jsonl.gz`` holds the windows of a
``benchmarks/steady.py --trace`` run (benchmarks/results/steady/20261201-000204.json):
five minutes of Poisson arrivals at 70% of what aggressive carried under an
overload probe on dense_mlp, read from the embedded Triton every second by the
sidecar of examples/sidecar.yaml on the ladder latency-soft -> balanced ->
aggressive. Replayed through ``decide`` with that config, the policy must hold
from the first window to the last: the noise of real one-second windows
(arrivals, the pending gauge, busy time) does not trip the overload or
forecast rules. (At that rate aggressive sent 2.75% of its requests over
the SLO on this machine; on 6 windows the policy wanted a step toward latency
and held, because no lower rung carries the load: reason ``capacity``.)
"""

from __future__ import annotations

from pathlib import Path

from autobatch.config import load_yaml
from autobatch.plan.replay import replay

from ..conftest import read_trace, sidecar_config

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "data" / "steady-aggressive.jsonl.gz"
EXAMPLE = ROOT / "examples" / "sidecar.yaml"
LADDER = ["latency-soft", "balanced", "aggressive"]  # benchmarks/steady.py's default --ladder


def test_steady_load_on_the_real_triton_replays_without_a_switch() -> None:
    data = dict(load_yaml(EXAMPLE))
    data["profiles"] = {**data["profiles"], "ladder": LADDER}
    cfg = sidecar_config(EXAMPLE, data)
    ticks = read_trace(TRACE)
    assert len(ticks) >= 250  # about five minutes of 1 s windows
    steps = replay(ticks, cfg.policy, initial="aggressive", history_windows=cfg.history_windows)
    switches = [s.decision for s in steps if s.decision.switch]
    assert switches == [], [(d.reason.value, d.target, d.message) for d in switches]
    # ... and the fast rules did look: every fresh window had a capacity and a forecast.
    fresh = [s.decision for s in steps if s.decision.signals.get("capacity_rps")]
    assert len(fresh) >= 200
    assert all(d.signals.get("forecast_rps") is not None for d in fresh[10:])
