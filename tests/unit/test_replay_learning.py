"""Learning a profile's device cost only at a steady load (``capacity.learn_max_step``).

The demo of 2026-12-02 13:30 (benchmarks/results/demo/20261202-133024.json, its
decision log beside it) flapped in its alone phase: ``no_gain`` moved the
controller from ``aggressive`` back to Triton's default at 72 s because the
default's learned cost (3.88 ms a request) was within 5% of aggressive's seen 3.77;
the default then measured 4.96 and ``efficiency`` climbed back 13 s later. The
default's ratio (measured over estimated) came from the first window with
traffic, where half a second at 150/s read as 67/s: the estimate at 67/s (batches
of one, 13.5 ms) against what batches of 2.4 cost (5.4 ms), 0.40. The tables
here pin the rule that keeps such a window out of the memory; the replays show
the log reproduces the flap as it ran and, with the setting, makes every other
recorded switch and no ``no_gain``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autobatch.config import ConfigError, load_yaml
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.plan.replay import ReplayStep, replay
from autobatch.policy import PolicySettings, Reason, State, decide
from autobatch.policy.context import steady_load
from autobatch.policy.settings import FLAT, CapacitySettings
from autobatch.signals import Window

from ..conftest import config_as_run, read_trace, sidecar_config, while_served
from .test_policy_memory import LADDER, ONE_INSTANCE, win

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "benchmarks" / "results" / "demo" / "20261202-133024.json"
DEMO_LOG = DEMO.parent / "logs" / "20261202-133024-controller.jsonl.gz"


# -- the rule: which window is learned from ---------------------------------------------------


def _w(rate: float) -> Window:
    return win(rate, device=5.0)


@pytest.mark.parametrize(
    ("name", "rates", "max_step", "steady"),
    [
        ("off: every window", [0.0, 67.0], None, True),
        ("off: the first window too", [67.0], None, True),
        ("the first window: the load may have begun within it", [150.0], 1.5, False),
        ("after a window that carried nothing: the load began within it", [0.0, 67.0], 1.5, False),
        ("Poisson noise at 150/s (the demo's 131 -> 172)", [131.0, 172.0], 1.5, True),
        ("a step up within the window", [40.0, 95.0], 1.5, False),
        ("the load fell within it (the demo's last loaded window, 152 -> 89)", [152.0, 89.0], 1.5, False),
        ("exactly the factor", [100.0, 150.0], 1.5, True),
        ("a wider factor lets the step through", [40.0, 95.0], 3.0, True),
        ("a window with no traffic is learned from by nobody", [150.0, 0.0], 1.5, False),
    ],
)
def test_a_window_is_learned_from_only_at_a_steady_load(name: str, rates: list[float],
                                                        max_step: float | None, steady: bool) -> None:
    assert steady_load([_w(r) for r in rates], max_step) is steady


def _learned_ratio(rates: list[float], max_step: float | None) -> float | None:
    """The default's learned ratio after serving ``rates``, one window each, from empty."""
    s = PolicySettings(ladder=LADDER, slo_p95_ms=60.0, curve=ONE_INSTANCE,
                       capacity=CapacitySettings(learn_max_step=max_step))
    state, history = State.initial("triton-default"), []
    for i, r in enumerate(rates):
        history.append(win(r, device=5.0 if r else None, end=100.0 + i))
        _, state = decide(history, state, s, history[-1].end_s + 0.01)
    return state.device.ratio_of("triton-default")


@pytest.mark.parametrize(
    ("name", "rates", "max_step", "learned"),
    [
        ("off: the load's first window teaches the ratio", [0.0, 67.0], None, True),
        ("on: the load's first window teaches nothing", [0.0, 67.0], 1.5, False),
        ("on: the second window at the same load does", [0.0, 67.0, 70.0], 1.5, True),
        ("on: a step of 2.2x teaches nothing", [0.0, 67.0, 150.0], 1.5, False),
    ],
)
def test_the_memory_learns_only_from_the_windows_the_rule_lets_through(
        name: str, rates: list[float], max_step: float | None, learned: bool) -> None:
    assert (_learned_ratio(rates, max_step) is not None) is learned


def test_the_setting_is_off_by_default_above_one_and_has_no_flat_spelling() -> None:
    assert CapacitySettings().learn_max_step is None
    for bad in (1.0, 0.5, -2.0):
        with pytest.raises(ValueError, match=r"^capacity.learn_max_step must be above 1$"):
            CapacitySettings(learn_max_step=bad)
    assert ("capacity", "learn_max_step") not in FLAT.values()


def _config(tmp_path: Path, capacity: dict[str, Any]) -> Any:
    data = dict(load_yaml(ROOT / "examples" / "sidecar-t4.yaml"))
    data["policy"] = {**data["policy"], "capacity": capacity}
    example = ROOT / "examples" / "sidecar-t4.yaml"
    return sidecar_config_from_mapping(data, str(example), base=example.parent)


@pytest.mark.parametrize(("value", "got", "error"), [
    (1.5, 1.5, None),
    (None, None, None),  # null: off, as left out
    (1.0, None, "policy.capacity.learn_max_step = 1.0: must be > 1"),
    (2000, None, "policy.capacity.learn_max_step = 2000.0: must be <= 1000"),
])
def test_the_sidecar_config_reads_it_grouped(tmp_path: Path, value: Any, got: float | None,
                                             error: str | None) -> None:
    if error is None:
        assert _config(tmp_path, {"learn_max_step": value}).policy.capacity.learn_max_step == got
    else:
        with pytest.raises(ConfigError, match=error.replace(".", r"\.")):
            _config(tmp_path, {"learn_max_step": value})


# -- the demo's log, replayed -------------------------------------------------------------------


def _demo(max_step: float | None) -> tuple[list[ReplayStep], float, tuple[float, float]]:
    """The demo's log replayed through the config it ran, with ``learn_max_step``; the log's
    first tick, and the alone phase's start and end (wall clock)."""
    data = json.loads(DEMO.read_text(encoding="utf-8"))["data"]
    example = config_as_run(data["config"], DEMO.stem)
    cfg = sidecar_config(example)
    policy = replace(cfg.policy, capacity=replace(cfg.policy.capacity, learn_max_step=max_step))
    ticks = read_trace(DEMO_LOG)
    run = data["runs"]["controller"]
    start = run["t0_wall"]
    bounds = {}
    for phase in run["phases"]:
        bounds[phase["name"]] = (start, start + phase["duration_s"])
        start += phase["duration_s"]
    return replay(ticks, policy, history_windows=cfg.history_windows), ticks[0].now_s, bounds["alone"]


def _switches(steps: list[ReplayStep], t0: float) -> list[tuple[int, str, str]]:
    return [(round(s.tick.now_s - t0), s.decision.target, s.decision.reason.value)
            for s in steps if s.decision.switch]


def test_the_demo_log_reproduces_the_flap_as_it_ran() -> None:
    steps, t0, (start, end) = _demo(None)
    served = while_served(steps)
    assert all(s.agrees for s in served)
    # after the load stops the run stepped down to the default; the policy now holds in a lull
    after = steps[len(served):]
    assert [s.tick.recorded["reason"] for s in after if s.tick.recorded["action"] == "switch"] == ["low_load"]
    assert not [s for s in after if s.decision.switch]
    steps = served
    flap = [s for s in steps if s.decision.switch and s.decision.reason is Reason.NO_GAIN]
    assert len(flap) == 1 and start <= flap[0].tick.now_s <= end
    message = flap[0].decision.message
    assert "triton-default spends 3.88 ms of device time per request (learned) vs 3.77" in message
    # the ratio behind it: taught by the first window with traffic, read at 67/s
    first = next(s for s in steps if s.tick.window is not None and s.tick.window.inference_rps > 0)
    assert round(first.tick.window.inference_rps) == 67
    assert first.decision.signals["device_ms_source"]["triton-default"] == "seen"
    assert _switches(steps, t0) == [(10, "aggressive", "efficiency"), (72, "triton-default", "no_gain"),
                                    (85, "aggressive", "efficiency"), (90, "triton-default", "shared"),
                                    (121, "aggressive", "efficiency")]


def test_learning_at_a_steady_load_the_demo_makes_no_no_gain_move_and_every_other_switch() -> None:
    steps, t0, (start, end) = _demo(1.5)
    steps = while_served(steps)
    assert not [s for s in steps if s.decision.reason is Reason.NO_GAIN], "no_gain still fires"
    alone = [s for s in steps if start <= s.tick.now_s <= end]
    assert len(alone) >= 15
    assert not [s for s in alone if s.decision.switch and s.decision.target != "aggressive"]
    # the lead-in's waits toward the default (self_inflicted_wait, held by confirmation) are gone too
    lead_in = [s for s in steps if s.tick.now_s < start]
    assert not [s for s in lead_in if "near max delay" in s.decision.message]
    assert _switches(steps, t0) == [(10, "aggressive", "efficiency"), (90, "triton-default", "shared"),
                                    (121, "aggressive", "efficiency")]


def test_nothing_is_learned_from_the_demos_first_loaded_window_with_the_setting() -> None:
    steps, _, _ = _demo(1.5)
    first = next(s for s in steps if s.tick.window is not None and s.tick.window.inference_rps > 0)
    assert first.decision.signals["device_ms_source"]["triton-default"] == "estimated"
