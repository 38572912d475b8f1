"""The sidecar against the real Triton under a step load: up to a throughput profile and back.

Its own file (and Triton) beside test_sidecar.py so that the 60 s of paced load runs on a
worker of its own under `pytest -n 3 --dist loadfile` (scripts/test.sh).
"""

from __future__ import annotations

from autobatch.controller.loop import read_decision_log
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.load import run_load
from autobatch.plan.replay import parse_trace, replay
from autobatch.schedule import Phase, Schedule

from ..helpers import Running
from .test_sidecar import config, live_preferred, server  # noqa: F401  (the module's Triton fixture)


def test_step_load_goes_to_throughput_and_back(tmp_path, server):  # noqa: F811
    cfg = config(tmp_path, server)
    schedule = Schedule((Phase("low", 20, 8), Phase("high", 300, 22), Phase("low-again", 20, 30)))
    with Running(cfg) as running:
        running.wait_for(lambda s: s["active_profile"] == "latency-soft", 30, "latency-soft at start")
        report = run_load(server.urls.grpc, EMULATOR_MODEL, schedule, timeout_s=20)
        final = running.wait_for(lambda s: s["ticks"] > 0, 5, "ticks")
    log = read_decision_log(cfg.decision_log)
    switches = [ln for ln in log if ln["decision"]["action"] == "switch" and ln["actuation"]]
    path = [(s["decision"]["target"], s["decision"]["reason"], s["actuation"]["ok"]) for s in switches]
    assert path, f"no switch at all: {[ln['decision']['message'] for ln in log][-10:]}"
    up = [p for p in path if p[0] == "aggressive"]
    down = [p for p in path if p[0] == "latency-soft"]
    assert up and up[0][1] in ("overload", "forecast", "saturation", "efficiency") and up[0][2], path
    assert down and down[-1][1] in ("self_inflicted_wait", "low_load") and down[-1][2], path
    assert path[-1][0] == "latency-soft"
    assert final["active_profile"] == "latency-soft"
    assert live_preferred(server) == [2, 4]
    # every switch was logged with its reason and a human message
    assert all(s["decision"]["message"] for s in switches)
    high = next(p for p in report.phases if p.name == "high")
    assert high.failures == {}, high.failures
    # replay runs the recorded windows through the same policy code: same decisions
    lines = cfg.decision_log.read_text().splitlines()
    steps = replay(parse_trace(lines), cfg.policy)
    assert all(s.agrees for s in steps), [s.decision.message for s in steps if not s.agrees]
