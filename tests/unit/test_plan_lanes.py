"""`plan --priority-mix`: the two-lane profile and each lane's predicted latency."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autobatch.curve import load_curve
from autobatch.errors import ConfigError
from autobatch.plan.lanes import check_lane_mix, lanes_profile, plan_lanes
from autobatch.plan.planner import make_plan
from autobatch.plan.simulator import ServiceModel
from autobatch.profiles import Profile, load_profile

ROOT = Path(__file__).resolve().parents[2]
CURVE = load_curve(ROOT / "model_repository" / "emulated_accelerator" / "curve.yaml")
BASE = Profile(name="aggressive", max_batch_size=32, preferred_batch_size=(4,), max_queue_delay_us=50_000)
FAST = {"sweep_points": 4, "sweep_requests": 2000, "duration_s": 20.0}


@pytest.mark.parametrize(
    ("mix", "message"),
    [
        ({}, "give the shares of levels 1 and 2"),
        ({1: 1.0}, "needs urgent (level 1) and batchable (level 2) requests both"),
        ({2: 1.0}, "needs urgent (level 1) and batchable (level 2) requests both"),
        ({1: 0.1, 3: 0.9}, "priority_mix level 3: a two-lane plan has levels 1 (urgent) and 2"),
        ({1: -0.1, 2: 1.0}, "priority_mix share of level 1 = -0.1: must be a number >= 0"),
    ],
)
def test_bad_mixes(mix, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_lane_mix(mix)


def test_level_0_counts_as_batchable():
    assert check_lane_mix({1: 0.2, 0: 0.8}) == {1: 0.2, 0: 0.8}


def test_the_lanes_profile_keeps_the_batching_and_adds_two_levels():
    prof = lanes_profile(BASE)
    assert (prof.name, prof.priority_levels, prof.default_priority_level) == ("lanes", 2, 2)
    assert prof.preferred_batch_size == BASE.preferred_batch_size
    assert prof.max_queue_delay_us == BASE.max_queue_delay_us
    assert prof.max_batch_size == BASE.max_batch_size
    assert prof.priority_queue_policy == {}  # the urgent level: never timed out, never moved back
    with pytest.raises(ConfigError, match="already has priority_levels = 2"):
        lanes_profile(prof)


def test_under_load_urgent_requests_skip_the_queue_and_the_batching_stays():
    # 380 rps on batches of 4 (~430/s at best): a queue forms behind every batch.
    lanes = plan_lanes(BASE, ServiceModel(CURVE), 380.0, {1: 0.1, 2: 0.9}, duration_s=30.0)
    urgent, batchable = lanes.lanes
    assert urgent.share == pytest.approx(0.1, abs=0.02) and urgent.requests + batchable.requests > 10_000
    assert urgent.with_lanes and urgent.without_lanes and batchable.with_lanes and batchable.without_lanes
    assert urgent.with_lanes.p99_ms < 0.7 * urgent.without_lanes.p99_ms
    # What the urgent lane gains, the batchable lane pays a little of; both batch about the preferred 4.
    assert batchable.with_lanes.p99_ms >= batchable.without_lanes.p99_ms * 0.98
    assert lanes.mean_batch_with == pytest.approx(lanes.mean_batch_without, rel=0.1)


def test_make_plan_proposes_lanes_on_the_candidate_that_waits():
    plan = make_plan(CURVE, 100, 2, rate_rps=330, priority_mix={1: 0.1, 2: 0.9}, **FAST)
    assert plan.lanes is not None
    aggressive = next(c.profile for c in plan.candidates if c.profile.name == "aggressive")
    assert plan.lanes.base == aggressive and aggressive.max_queue_delay_us > 0
    docs = plan.profile_documents()
    assert docs[-1]["name"] == "lanes" and "priority 1" in docs[-1]["description"]
    assert plan.to_dict()["lanes"]["profile"]["dynamic_batching"]["priority_levels"] == 2
    assert make_plan(CURVE, 100, 2, rate_rps=330, **FAST).lanes is None


def test_lanes_need_a_rate_not_sessions():
    with pytest.raises(ConfigError, match="lanes are planned for a Poisson rate"):
        make_plan(CURVE, 100, 2, sessions=4, fps=30, priority_mix={1: 0.1, 2: 0.9}, **FAST)


def test_cli_writes_the_lanes_profile(tmp_path):
    exe = Path(sys.executable).with_name("autobatch")
    out = tmp_path / "p"
    proc = subprocess.run(
        [str(exe), "plan", "--curve", str(ROOT / "model_repository/emulated_accelerator/curve.yaml"),
         "--slo-p99-ms", "100", "--network-ms", "2", "--rate", "330", "--priority-mix", "1:0.1,2:0.9",
         "--model", "emulated_accelerator", "--write-profiles", str(out), "--json"],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)["written"]
    assert str(out / "lanes.yaml") in written
    prof = load_profile(out / "lanes.yaml")
    assert (prof.priority_levels, prof.default_priority_level) == (2, 2)


def test_the_shipped_lanes_profile_is_what_plan_writes():
    shipped = load_profile(ROOT / "profiles" / "emulated_accelerator" / "lanes.yaml")
    plan = make_plan(CURVE, 100, 2, rate_rps=330, batch_overhead_ms=1.2, request_overhead_ms=0.1,
                     priority_mix={1: 0.1, 2: 0.9}, model="emulated_accelerator", **FAST)
    assert plan.lanes is not None
    assert plan.lanes.profile.dynamic_batching() == shipped.dynamic_batching()
    assert plan.lanes.profile.max_batch_size == shipped.max_batch_size
