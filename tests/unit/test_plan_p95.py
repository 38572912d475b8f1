"""`autobatch plan --slo-p95-ms`: the candidates, their sweep and "does switching pay?" judge
at the SLO's own percentile (the sidecar's SLO is a p95)."""

from __future__ import annotations

import pytest

from autobatch.curve import load_curve
from autobatch.errors import ConfigError
from autobatch.plan.planner import make_plan

from ..conftest import CURVES

FAST = {"duration_s": 10.0, "sweep_points": 4, "sweep_requests": 2000}
CURVE = load_curve(CURVES / "t4-bert-base-seq128-fp32.yaml")


def test_a_latency_between_p95_and_p99_meets_a_p95_slo_and_misses_a_p99_one():
    loose = make_plan(CURVE, 500.0, 2.0, rate_rps=27.0, **FAST)
    lat = loose.candidates[0].at_load.latency
    assert lat is not None and lat.p95_ms + 2 < lat.p99_ms
    slo = (lat.p95_ms + lat.p99_ms) / 2
    p95 = make_plan(CURVE, slo, 2.0, slo_percentile=95, rate_rps=27.0, **FAST)
    p99 = make_plan(CURVE, slo, 2.0, slo_percentile=99, rate_rps=27.0, **FAST)
    assert p95.candidates[0].profile.name == p99.candidates[0].profile.name == "triton-default"
    assert p95.candidates[0].meets_slo and not p99.candidates[0].meets_slo
    # The sweep judges at the same percentile: it carries more within a p95 SLO.
    assert p95.candidates[0].max_rate_rps > p99.candidates[0].max_rate_rps
    assert p95.recommended is not None
    assert p95.slo_label == "p95" and p99.slo_label == "p99"


def test_the_plan_names_its_percentile_in_json_in_the_profiles_and_in_the_equation():
    plan = make_plan(CURVE, 60.0, 2.0, slo_percentile=95, rate_rps=20.0, **FAST)
    d = plan.to_dict()
    assert d["slo"] == {"percentile": 95, "ms": 60.0} and d["slo_p95_ms"] == 60.0 and "slo_p99_ms" not in d
    assert plan.budget.equation().startswith("budget = SLO p95 60 ms")
    assert all("SLO p95 60 ms" in doc["description"] for doc in plan.profile_documents())
    assert make_plan(CURVE, 60.0, 2.0, rate_rps=20.0, **FAST).to_dict()["slo_p99_ms"] == 60.0


def test_switching_allows_the_share_over_the_slo_its_percentile_allows():
    # The same schedule is overloaded for a p99 SLO (more than 1% over it whatever the
    # profile) and not for a p95 one at the latency that p95 keeps.
    plan99 = make_plan(CURVE, 52.0, 2.0, slo_percentile=99, rate_rps=30.0, **FAST)
    plan95 = make_plan(CURVE, 52.0, 2.0, slo_percentile=95, rate_rps=30.0, **FAST)
    assert plan99.switching is not None and plan95.switching is not None
    high99 = plan99.switching.oracle.phases[1]
    assert 0.01 < high99.over_slo < 0.05
    assert plan99.switching.verdict.kind.value == "overloaded"
    assert plan95.switching.verdict.kind.value != "overloaded"


@pytest.mark.parametrize(("percentile", "ms", "message"), [
    (90, 60.0, "slo_percentile = 90: must be 95 or 99"),
    (95, -5.0, "slo_p95_ms = -5.0: must be a number > 0"),
])
def test_a_bad_slo_is_named_as_given(percentile, ms, message):
    with pytest.raises(ConfigError, match=message):
        make_plan(CURVE, ms, 2.0, slo_percentile=percentile, rate_rps=10.0, **FAST)
