"""The planner: gains, the verdict, candidate profiles, sustained rates, the whole plan."""

from __future__ import annotations

import json

import pytest

from autobatch.curve import BatchCurve, PointKind, load_curve
from autobatch.errors import ConfigError
from autobatch.plan.planner import make_plan
from autobatch.plan.simulator import ServiceModel
from autobatch.plan.sweep import max_sustained_rate
from autobatch.plan.verdict import VerdictKind, batching_verdict, candidate_profiles, gain_table
from autobatch.profiles import Profile, profile_from_mapping

from ..conftest import CURVES

FAST = {"duration_s": 10.0, "sweep_points": 8, "sweep_requests": 3000}
"""Smaller sweeps than the CLI's: the same code, a coarser search."""


@pytest.mark.parametrize(
    ("curve_file", "kind", "best"),
    [
        ("laptop-512x288-fp16.yaml", VerdictKind.LOSES, 1),
        ("laptop-512x288-fp32.yaml", VerdictKind.LOSES, 1),
        ("laptop-256x144-fp16.yaml", VerdictKind.PAYS, 4),
        ("laptop-256x144-fp32.yaml", VerdictKind.MARGINAL, 4),
        ("server-512x288-fp16.yaml", VerdictKind.PAYS, 3),
    ],
)
def test_verdict_of_each_shared_curve(curve_file, kind, best):
    v = batching_verdict(load_curve(CURVES / curve_file), 32)
    assert (v.kind, v.best_batch) == (kind, best)


def test_the_laptop_fp16_curve_gets_the_plain_dont_batch_verdict():
    v = batching_verdict(load_curve(CURVES / "laptop-512x288-fp16.yaml"), 32)
    assert v.message == "batching lowers throughput on this device: serve batch 1, do not wait"
    assert not v.batching_pays


def test_the_256x144_fp16_curve_gets_a_batching_recommendation():
    v = batching_verdict(load_curve(CURVES / "laptop-256x144-fp16.yaml"), 32)
    assert v.batching_pays
    assert v.message.startswith("batching pays on this device: batch 4 takes 0.50x")
    assert "batch up to 4" in v.message


def test_the_verdict_ignores_extrapolated_gains():
    # Two points with a rising per-item time; only a (made-up) extrapolation could gain.
    curve = BatchCurve({2: 10.0, 4: 22.0})
    assert batching_verdict(curve, 32).kind is VerdictKind.LOSES


def test_gain_table_flags_every_estimate():
    rows = {g.batch_size: g for g in gain_table(load_curve(CURVES / "laptop-256x144-fp16.yaml"), 8)}
    assert sorted(rows) == [1, 2, 4, 8]
    assert [rows[b].kind for b in (1, 2, 4, 8)] == [
        PointKind.MEASURED, PointKind.INTERPOLATED, PointKind.MEASURED, PointKind.EXTRAPOLATED,
    ]
    assert rows[4].gain == pytest.approx((9.29 / 4) / 4.69)
    assert rows[4].throughput_rps == pytest.approx(4000 / 9.29)


def test_candidates_when_batching_loses():
    curve = load_curve(CURVES / "laptop-512x288-fp16.yaml")
    soft, aggressive = candidate_profiles(curve, batching_verdict(curve, 32), 7, 12.0)
    assert (soft.name, soft.preferred_batch_size, soft.max_queue_delay_us) == ("latency-soft", (1,), 0)
    assert aggressive.name == "aggressive" and aggressive.max_queue_delay_us == 12_000
    assert aggressive.preferred_batch_size == (4,)  # the largest measured size <= 7


def test_candidates_when_batching_pays_go_from_no_wait_to_the_whole_delay():
    curve = load_curve(CURVES / "laptop-256x144-fp16.yaml")
    profiles = candidate_profiles(curve, batching_verdict(curve, 32), 4, 48.0, model="m")
    assert [p.name for p in profiles] == ["latency-soft", "balanced", "aggressive"]
    delays = [p.max_queue_delay_us for p in profiles]
    assert delays == sorted(delays) and delays[0] == 0 and delays[-1] == 48_000
    assert profiles[1].preferred_batch_size == (2, 4)
    for p in profiles:
        # The sidecar's loader accepts what the planner builds.
        again = profile_from_mapping(p.to_dict(), "round-trip", model="m")
        assert again.preferred_batch_size == p.preferred_batch_size
        assert again.max_queue_delay_us == p.max_queue_delay_us


def test_max_sustained_rate_is_where_p99_crosses_the_slo():
    service = ServiceModel(BatchCurve({1: 10.0}), fixed_latency_ms=10.0)
    p = Profile(name="b1", max_batch_size=1, preferred_batch_size=(1,), max_queue_delay_us=0)
    top, sweep = max_sustained_rate(p, service, 100.0, points=10, requests=5000)
    assert 50 < top < 100  # below the 100 rps the device can do at all
    ok = [pt for pt in sweep if pt.within_slo]
    bad = [pt for pt in sweep if not pt.within_slo]
    assert max(pt.rate_rps for pt in ok) == pytest.approx(top)
    assert min(pt.rate_rps for pt in bad) > top
    assert all(pt.p99_ms <= 100 for pt in ok)


def test_plan_for_the_no_gain_curve_recommends_batch_one():
    plan = make_plan(load_curve(CURVES / "laptop-512x288-fp16.yaml"), 100, 10, rate_rps=50, **FAST)
    assert plan.verdict.kind is VerdictKind.LOSES
    assert plan.recommended is not None and plan.recommended.profile.name == "latency-soft"
    default, soft, aggressive = plan.candidates
    assert default.profile.name == "triton-default" and default.profile.preferred_batch_size == ()
    assert soft.max_rate_rps > aggressive.max_rate_rps
    assert soft.at_load.mean_batch == 1.0
    assert plan.largest_fit is not None and plan.largest_fit.batch_size == 7


def test_plan_for_the_gain_curve_batches_and_reports_every_candidate():
    plan = make_plan(load_curve(CURVES / "laptop-256x144-fp16.yaml"), 100, 10, rate_rps=300, **FAST)
    assert plan.verdict.batching_pays
    assert len(plan.candidates) >= 2
    batch1_capacity = 1000 / 4.69
    for c in plan.candidates:
        lat = c.at_load.latency
        assert lat is not None and lat.p50_ms <= lat.p95_ms <= lat.p99_ms
        assert c.at_load.throughput_rps == pytest.approx(300, rel=0.03)
        # 300 rps is past what batch 1 can do: every candidate must batch to keep up.
        assert c.at_load.mean_batch > 1.2
        assert c.max_rate_rps > batch1_capacity
    # Batches are capped at the last measured size (sizes past it are guesses) through
    # the preferred sizes; max_batch_size stays the model's, so clients keep working.
    # Triton's default comes first: no preferred sizes (read as [max_batch_size]), no wait.
    default, *profiles = plan.candidates
    assert default.profile.name == "triton-default"
    assert default.profile.effective_preferred == (32,) and default.profile.max_queue_delay_us == 0
    assert {max(c.profile.preferred_batch_size) for c in profiles} == {4}
    assert {c.profile.max_batch_size for c in plan.candidates} == {32}
    assert plan.budget.batch_size == 4
    d = plan.to_dict()
    json.dumps(d)
    assert d["article_example"]["budget_ms"] == pytest.approx(40.0)
    assert d["equation"]["budget_ms"] == pytest.approx(100 - 9.29 - 10)
    assert d["recommended"] in {c.profile.name for c in plan.candidates}


def test_plan_with_extrapolation_allowed_uses_larger_batches():
    curve = load_curve(CURVES / "laptop-256x144-fp16.yaml")
    plan = make_plan(curve, 100, 10, rate_rps=300, allow_extrapolation=True, max_batch_size=16, **FAST)
    assert max(c.profile.max_batch_size for c in plan.candidates) == 16


def test_plan_with_sessions_reports_every_policy():
    plan = make_plan(load_curve(CURVES / "laptop-512x288-fp16.yaml"), 100, 10, sessions=4, fps=30,
                     **FAST)
    assert plan.load.offered_rps == 120
    assert [s.policy for s in plan.sessions] == ["oldest-first", "batch-waiting", "round-robin"]
    assert all(len(s.per_session_fps) == 4 for s in plan.sessions)


def test_without_a_load_half_the_batch1_capacity_is_assumed():
    plan = make_plan(load_curve(CURVES / "laptop-512x288-fp16.yaml"), 100, 10, **FAST)
    assert plan.load.assumed
    assert plan.load.rate_rps == pytest.approx(1000 / 9.82 / 2, abs=0.1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate_rps": 10, "sessions": 2, "fps": 5}, "give one load"),
        ({"sessions": 2}, "sessions and fps go together"),
        ({"rate_rps": -1}, "rate = -1"),
        ({"max_batch_size": 0}, "max_batch_size = 0"),
        # Triton's max_batch_size is an int32; past it a plan's tables hung.
        ({"max_batch_size": 100_000_000_000},
         r"max_batch_size = 100000000000: must be an integer >= 1 and <= 2147483647 \(Triton's field"),
        ({"instances": 0}, "instances = 0"),
        ({"seed": -1}, "seed = -1: must be an integer >= 0"),
    ],
)
def test_bad_plan_inputs(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        make_plan(load_curve(CURVES / "laptop-512x288-fp16.yaml"), 100, 10, **{**FAST, **kwargs})


@pytest.mark.parametrize("extrapolate", [False, True])
def test_a_plan_at_tritons_largest_max_batch_size_runs(extrapolate):
    # Its sweeps looked at every batch size up to it (2**31 estimates): the test's timeout is
    # the assertion.
    plan = make_plan(load_curve(CURVES / "dense_mlp-cpu.yaml"), 60, 2, rate_rps=50, max_batch_size=2**31 - 1,
                     allow_extrapolation=extrapolate, **FAST)
    assert plan.candidates[0].profile.max_batch_size == 2**31 - 1 and plan.candidates[0].max_rate_rps > 0


def test_a_negative_network_overhead_is_named_as_the_slo_names_it():
    # It was "fixed_latency_ms = -2.0", the simulator's name for it.
    with pytest.raises(ConfigError, match=r"^network_ms = -2: must be a number >= 0$"):
        make_plan(load_curve(CURVES / "laptop-512x288-fp16.yaml"), 100, -2, rate_rps=10, **FAST)


def test_the_recommendation_is_the_objective_least_device_time_within_the_slo():
    plan = make_plan(load_curve(CURVES / "laptop-256x144-fp16.yaml"), 100, 10, rate_rps=300, **FAST)
    ok = [c for c in plan.candidates if c.meets_slo]
    assert plan.recommended is not None and len(ok) >= 2
    cheapest = min(ok, key=lambda c: c.device_ms)
    fastest = min(ok, key=lambda c: c.at_load.latency.p99_ms)
    # batches of 4 take half the per-item time of batch 1 here: well over the 15% bar
    assert cheapest.device_ms < 0.85 * fastest.device_ms
    assert plan.recommended is cheapest
    assert plan.to_dict()["candidates"][0]["at_load"]["device_ms_per_request"] > 0


def test_the_plan_says_whether_switching_pays_over_an_assumed_step():
    plan = make_plan(load_curve(CURVES / "laptop-512x288-fp16.yaml"), 100, 10, rate_rps=50, **FAST)
    sw = plan.switching
    assert sw is not None and "assumed step, 5 -> 50 -> 5 rps" in sw.schedule
    assert [p.phase for p in sw.oracle.phases] == ["low", "high", "low-again"]
    # batching loses on this curve: one static profile is the answer
    assert not sw.verdict.switching_pays
    assert plan.to_dict()["switching"]["verdict"]["kind"] in ("default", "static")
