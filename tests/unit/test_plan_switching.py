"""Does switching pay here? The objective's pick as a table, and the verdict on curves
where the answer is known from the curve alone."""

from __future__ import annotations

import json

import pytest

from autobatch.curve import BatchCurve, load_curve
from autobatch.errors import ConfigError
from autobatch.plan.simulator import ServiceModel
from autobatch.plan.switching import (
    DEFAULT_PROFILE,
    SwitchingKind,
    pick_profile,
    switching_map,
    triton_default,
)
from autobatch.profiles import Profile
from autobatch.schedule import Phase, Schedule

from ..conftest import CURVES


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # (name, share over the SLO, p95 ms, device ms per request)
        # low load: device time barely differs, the lowest latency wins
        ([("default", 0.0, 16, 7.9), ("aggressive", 0.0, 36, 7.2)], "default"),
        # moderate load: a 33% saving within the SLO wins over latency
        ([("default", 0.0, 30, 6.0), ("aggressive", 0.0, 38, 4.0)], "aggressive"),
        # the SLO first: a saving is no use when it goes over
        ([("default", 0.0, 30, 6.0), ("aggressive", 0.05, 58, 4.0)], "default"),
        # within the tolerance (1 point) of the best share, device time decides
        ([("default", 0.001, 45, 3.0), ("aggressive", 0.009, 50, 2.4)], "aggressive"),
        # nobody keeps the SLO: the least over it
        ([("soft", 0.9, 900, 4.0), ("default", 0.3, 90, 3.0)], "default"),
        # a tie goes to the earlier option
        ([("default", 0.0, 8, 7.9), ("soft", 0.0, 8, 7.9)], "default"),
    ],
)
def test_pick_profile_is_the_controllers_objective(options, expected):
    assert pick_profile(options) == expected


def test_pick_profile_needs_options():
    with pytest.raises(ConfigError, match="at least one option"):
        pick_profile([])


def profile(name: str, preferred: tuple[int, ...], delay_us: int) -> Profile:
    return Profile(name=name, max_batch_size=32, preferred_batch_size=preferred, max_queue_delay_us=delay_us)


STEP = Schedule((Phase("low", 30, 20), Phase("high", 350, 30), Phase("low-again", 30, 20)))
DENSE = ServiceModel(load_curve(CURVES / "dense_mlp-cpu.yaml"))
LADDER = [triton_default(32), profile("aggressive", (16, 32), 20_000)]


def test_switching_pays_with_two_instances_on_a_curve_where_batching_pays():
    sw = switching_map(LADDER, DENSE, STEP, slo_ms=60, instances=2)
    # the oracle: the default at low load (lowest latency), aggressive at high load
    assert [p.profile for p in sw.oracle.phases] == ["triton-default", "aggressive", "triton-default"]
    default = sw.static(DEFAULT_PROFILE)
    assert sw.oracle.device_ms < 0.8 * default.device_ms
    # low phases keep the default's latency
    assert sw.oracle.phases[0].p95_ms <= 1.1 * default.phases[0].p95_ms
    assert sw.verdict.switching_pays
    json.dumps(sw.to_dict())


def test_with_one_instance_the_default_batches_enough_and_is_the_answer():
    sw = switching_map(LADDER, DENSE, STEP, slo_ms=60, instances=1)
    assert sw.verdict.kind is SwitchingKind.DEFAULT
    assert "leave Triton alone" in sw.verdict.message
    assert {p.profile for p in sw.oracle.phases} == {DEFAULT_PROFILE}


def test_a_latency_rung_that_cannot_carry_the_peak_makes_the_reaction_delay_an_emergency():
    soft = profile("latency-soft", (1, 2, 4), 0)
    slow = switching_map([soft, LADDER[1]], DENSE, STEP, slo_ms=60, instances=1, reaction_s=3.0)
    fast = switching_map([soft, LADDER[1]], DENSE, STEP, slo_ms=60, instances=1, reaction_s=0.0)
    # the default was added to the ladder; latency-soft saturates at 350/s
    assert slow.static(DEFAULT_PROFILE).phases[1].over_slo == 0.0
    assert slow.static("latency-soft").phases[1].over_slo > 0.5
    assert slow.oracle.phases[1].over_slo > fast.oracle.phases[1].over_slo


def test_where_batching_hurts_one_static_profile_is_the_answer():
    curve = load_curve(CURVES / "laptop-512x288-fp16.yaml")
    ladder = [profile("latency-soft", (1,), 0), profile("aggressive", (4,), 12_000)]
    sw = switching_map(ladder, ServiceModel(curve), Schedule((Phase("low", 5, 20), Phase("high", 50, 30))),
                       slo_ms=100, instances=1)
    assert sw.verdict.kind in (SwitchingKind.DEFAULT, SwitchingKind.STATIC)
    assert not sw.verdict.switching_pays and "one static profile is the answer" in sw.verdict.message


def test_a_load_no_profile_carries_is_overloaded_not_a_reason_to_switch():
    sw = switching_map(LADDER, ServiceModel(BatchCurve({1: 10.0, 4: 40.0})),
                       Schedule((Phase("low", 10, 10), Phase("high", 300, 10))), slo_ms=100)
    assert sw.verdict.kind is SwitchingKind.OVERLOADED and sw.verdict.missed_phases == ("high",)
    assert "more instances or replicas" in sw.verdict.message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slo_ms": 0}, "slo_ms = 0: must be a number > 0"),
        ({"slo_ms": 60, "reaction_s": -1}, "reaction_s = -1: must be a number >= 0"),
        ({"slo_ms": 60, "instances": 0}, "instances = 0: must be an integer >= 1"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        switching_map(LADDER, DENSE, STEP, **kwargs)
