"""The sidecar against the real Triton under a load oscillating at a profile's capacity.

Its own file (and Triton) beside test_sidecar.py so that the 60 s of paced load runs on a
worker of its own under `pytest -n 3 --dist loadfile` (scripts/test.sh).
"""

from __future__ import annotations

from autobatch.controller.loop import read_decision_log
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.load import run_load
from autobatch.schedule import Phase, Schedule

from ..helpers import Running
from .test_sidecar import config, server  # noqa: F401  (the module's Triton fixture)


def test_load_oscillating_at_the_threshold_steps_back_at_most_once_per_dwell(tmp_path, server):  # noqa: F811
    """300 and 20 req/s alternating every 4 s (around latency-soft's capacity and far below),
    then 20 s at 20 req/s: it switches both ways, and never steps back toward latency
    within a dwell of the previous switch (a survival move up does not wait)."""
    dwell_s = 10.0
    cfg = config(tmp_path, server, policy={"min_dwell_s": dwell_s})
    phases = tuple(Phase(f"{'high' if i % 2 else 'low'}-{i}", 300 if i % 2 else 20, 4) for i in range(10))
    # ... then a quiet spell long enough to step back, so the run has to switch both ways.
    phases += (Phase("low-final", 20, 20),)
    with Running(cfg) as running:
        running.wait_for(lambda s: s["active_profile"] is not None, 30, "a live profile")
        report = run_load(server.urls.grpc, EMULATOR_MODEL, Schedule(phases), timeout_s=20)
    log = read_decision_log(cfg.decision_log)
    landed = [(ln["state_after"]["last_switch_s"], ln["decision"]) for ln in log
              if ln["decision"]["action"] == "switch" and (ln["actuation"] or {}).get("ok")]
    gaps = [(b - a, d["kind"]) for (a, _), (b, d) in zip(landed, landed[1:])]
    reasons = [ln["decision"]["reason"] for ln in log if ln["decision"]["action"] == "switch"]
    print(f"\n[oscillation] {len(landed)} switches {reasons}, "
          f"gaps {[(round(g, 1), k) for g, k in gaps]} s")
    # It must have moved at all (twice: up and back) ...
    assert len(landed) >= 2, (landed, reasons)
    # ... and never back toward latency faster than the dwell allows.
    assert all(g >= dwell_s - 1e-6 for g, kind in gaps if kind != "survival"), gaps
    assert len(landed) <= 1 + 2 * (report.elapsed_s // dwell_s)
    assert report.total.failures == {}
