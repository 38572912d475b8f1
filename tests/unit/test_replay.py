"""Replay: recorded windows through the sidecar's own policy code."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from autobatch.actuators.base import ActuationResult
from autobatch.controller.loop import Controller
from autobatch.errors import ConfigError, SignalError
from autobatch.plan.replay import parse_trace, replay
from autobatch.policy import Reason

from ..conftest import DATA, PROFILES
from .test_controller import SATURATED, Clock, FakeActuator, ScriptedSource, make_config, ticks

SELF_WAIT = dict(inference_rps=20.0, mean_batch_size=1.2, mean_queue_ms=19.0, p95_ms=30.0)


async def record_a_run(tmp_path, **policy):
    """A controller run with a switch, a failed switch, a pin, a scrape error and a restart."""
    clock = Clock()
    cfg = make_config(tmp_path, confirmations=2, min_dwell_s=4, **policy)
    script = ([{}] * 2 + [SATURATED] * 6 + [SignalError("refused")] + [SELF_WAIT] * 12
              + [SATURATED] * 3 + [{}] * 6)
    act = FakeActuator(live="latency-soft", fail={"aggressive"})
    c = Controller(cfg, ScriptedSource(clock, script), act, clock=clock)
    await c.start()
    await ticks(c, clock, 10)
    live = c.state.active
    act.reconcile_result = ActuationResult(live, True, 2.0, "reapplied", "restart", live)
    await ticks(c, clock, 10)
    c.pin("balanced")
    await ticks(c, clock, 3)
    c.pin(None)
    await ticks(c, clock, 5)
    await c.aclose()
    return cfg


async def test_a_decision_log_replays_to_the_same_decisions(tmp_path):
    cfg = await record_a_run(tmp_path)
    lines = cfg.decision_log.read_text().splitlines()
    recorded = [json.loads(x)["decision"]["reason"] for x in lines]
    assert {"overload", "pin", "no_data"} <= set(recorded)  # the run exercised the paths
    outcomes = {json.loads(x)["actuation"]["ok"] for x in lines if json.loads(x)["actuation"]}
    assert outcomes == {True, False}
    steps = replay(parse_trace(lines), cfg.policy)
    assert [s.agrees for s in steps] == [True] * len(lines), [
        (s.tick.recorded["reason"], s.decision.reason.value) for s in steps if not s.agrees
    ]


async def test_another_config_decides_differently_and_says_so(tmp_path):
    cfg = await record_a_run(tmp_path)
    other = make_config(tmp_path, confirmations=5, min_dwell_s=60)
    steps = replay(parse_trace(cfg.decision_log.read_text().splitlines()), other.policy)
    assert not all(s.agrees for s in steps)
    assert sum(s.decision.switch for s in steps) < sum(
        json.loads(x)["decision"]["action"] == "switch" for x in cfg.decision_log.read_text().splitlines()
    )


def test_watch_lines_replay_like_the_policy(tmp_path):
    from autobatch.signals import Window

    cfg = make_config(tmp_path, confirmations=2)
    windows = []
    for i in range(8):
        end = 1000.0 + 2 * i
        fields = SATURATED if 2 <= i < 6 else {}
        windows.append(Window(model="dense_mlp", start_s=end - 2, end_s=end, **{
            "inference_rps": 20.0, "mean_batch_size": 1.0, "mean_queue_ms": 0.2,
            "pending_requests": 0.0, "pending_delta": 0.0, "p95_ms": 10.0, **fields}))
    lines = [json.dumps(w.to_dict()) for w in windows]
    steps = replay(parse_trace(lines), cfg.policy)
    # Survival acts on the first overloaded window, confirmations or not.
    assert [s.decision.reason for s in steps][:3] == [Reason.STEADY, Reason.STEADY, Reason.OVERLOAD]
    assert steps[2].active_after == "balanced"
    assert all(s.agrees is None for s in steps)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], "line 1: not JSON"),
        (["", "[1, 2]"], "line 2: expected a JSON object"),
        (['{"model": "m"}'], "line 1: not a window or a decision-log line"),
        ([""], "the trace holds no lines"),
        (['{"decision": {}}'], "line 1: not a window or a decision-log line (no decision.at_s or ts)"),
        # a field of the wrong type or a number that is not finite: its name and value
        (['{"decision": 5, "ts": 1}'], "line 1: decision = 5: must be a JSON object or null"),
        (['{"decision": [1], "ts": 1}'], "line 1: decision = [1]: must be a JSON object or null"),
        (['{"decision": {"at_s": 1}, "window": [1]}'], "line 1: window = [1]: must be a JSON object or null"),
        (['{"decision": {"at_s": NaN}, "window": null}'],
         "line 1: decision.at_s = nan: must be a finite number"),
        (['{"decision": null, "ts": Infinity}'], "line 1: ts = inf: must be a finite number"),
        (['{"decision": {"at_s": "1"}}'], "line 1: decision.at_s = '1': must be a finite number"),
        (['{"decision": {"at_s": 1, "target": 3}}'], "line 1: decision.target = 3: must be a string or null"),
        (['{"decision": {"at_s": 1}, "pin": ["a"]}'], "line 1: pin = ['a']: must be a string or null"),
        (['{"decision": {"at_s": 1}, "actuation": {"ok": true, "duration_s": "x"}}'],
         "line 1: actuation.duration_s = 'x': must be a finite number"),
        (['{"decision": {"at_s": 1}, "state_after": {"last_switch_s": NaN}}'],
         "line 1: state_after.last_switch_s = nan: must be a finite number"),
        (['{"decision": {"at_s": 1}, "window": {"model": "m", "start_s": 0, "end_s": "1"}}'],
         "line 1: window.end_s = '1': must be a finite number"),
        (['{"model": "m", "start_s": 0, "end_s": 1, "p95_ms": NaN}'],
         "line 1: p95_ms = nan: must be a finite number or null"),
    ],
)
def test_bad_traces_name_the_line(lines, message):
    with pytest.raises(ConfigError) as info:
        parse_trace(lines, "t.jsonl")
    assert str(info.value).startswith(f"t.jsonl: {message}"), str(info.value)
    assert "\n" not in str(info.value)


async def test_cli_replays_a_log_and_rejects_a_bad_trace(tmp_path):
    cfg = await record_a_run(tmp_path)
    config_file = tmp_path / "sidecar.yaml"
    config_file.write_text(json.dumps({
        "model": "dense_mlp",
        "profiles": {"dir": str(PROFILES / "dense_mlp"),
                     "ladder": ["latency-soft", "balanced", "aggressive"]},
        "slo": {"p95_ms": 50},
        "policy": {"interval_s": 1, "curve": str(DATA / "dense_mlp_curve.yaml"),
                   "stability": {"confirmations": 2, "min_dwell_s": 4, "stabilization_s": 0}},
    }))
    run = [sys.executable, "-m", "autobatch", "replay", "--config", str(config_file)]
    res = subprocess.run(run + ["--trace", str(cfg.decision_log)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    n = len(cfg.decision_log.read_text().splitlines())
    assert f"agrees with the recorded decisions on {n}/{n} ticks" in res.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"decision": {}}\nnope\n')
    res = subprocess.run(run + ["--trace", str(bad)], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "line" in res.stderr
    # a gzipped log (rotated, or as the benchmarks keep theirs) reads the same
    packed = tmp_path / "decisions.jsonl.gz"
    packed.write_bytes(gzip.compress(cfg.decision_log.read_bytes()))
    res = subprocess.run(run + ["--trace", str(packed)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"agrees with the recorded decisions on {n}/{n} ticks" in res.stdout
    torn = tmp_path / "torn.jsonl.gz"
    torn.write_bytes(packed.read_bytes()[:40])
    res = subprocess.run(run + ["--trace", str(torn)], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "not a readable gzip file" in res.stderr, res.stderr


async def test_cli_replay_warns_of_an_old_spelling_in_one_line_each(tmp_path):
    cfg = await record_a_run(tmp_path)
    config_file = tmp_path / "old.yaml"
    config_file.write_text(json.dumps({
        "model": "dense_mlp",
        "profiles": {"dir": str(PROFILES / "dense_mlp"),
                     "ladder": ["latency-soft", "balanced", "aggressive"]},
        "slo": {"p95_ms": 50},
        "policy": {"interval_s": 1, "confirmations": 2, "min_dwell_s": 4, "stabilization_s": 0,
                   "curve": str(DATA / "dense_mlp_curve.yaml")},
    }))
    res = subprocess.run([sys.executable, "-m", "autobatch", "replay", "--config", str(config_file),
                          "--trace", str(cfg.decision_log)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"autobatch: warning: {config_file}: policy.{old} is deprecated: write policy.stability.{old} "
        "(docs/sidecar.md#policy)" for old in ("confirmations", "min_dwell_s", "stabilization_s")]
    n = len(cfg.decision_log.read_text().splitlines())
    assert f"agrees with the recorded decisions on {n}/{n} ticks" in res.stdout


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"decision": 5, "ts": 1}', "line 2: decision = 5: must be a JSON object or null"),
        ('{"decision": [1], "ts": 1}', "line 2: decision = [1]: must be a JSON object or null"),
        ('{"decision": {"at_s": 1}, "window": [1]}', "line 2: window = [1]: must be a JSON object or null"),
        ('{"decision": {"at_s": NaN}, "window": null}',
         "line 2: decision.at_s = nan: must be a finite number"),
    ],
)
def test_cli_rejects_a_field_of_the_wrong_type_in_one_line(tmp_path, line, message):
    config_file = tmp_path / "sidecar.yaml"
    config_file.write_text(json.dumps({
        "model": "dense_mlp",
        "profiles": {"dir": str(PROFILES / "dense_mlp"), "ladder": ["latency-soft", "balanced"]},
        "slo": {"p95_ms": 50},
    }))
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"decision": {"at_s": 1}, "window": null}\n' + line + "\n")
    res = subprocess.run([sys.executable, "-m", "autobatch", "replay", "--config", str(config_file),
                          "--trace", str(trace)], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert res.stderr == f"autobatch: error: {trace}: {message}\n"
