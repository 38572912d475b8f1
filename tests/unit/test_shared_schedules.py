"""The shared-GPU schedules (examples/schedules/cotenants-*.yaml) are what they were designed
to be: on the T4 mixed-precision curve with the shipped ladder (profiles/resnet50), SLO p95
60 ms, no static profile is right in every phase and switching pays; docs/ladders.md's
tables come from the newest saved run of benchmarks/shared_schedules.py."""

from __future__ import annotations

from types import ModuleType

import pytest

from autobatch.curve import load_curve
from autobatch.plan.simulator import ServiceModel, load_shared_device
from autobatch.plan.switching import switching_map
from autobatch.profiles import load_profiles
from autobatch.schedule import load_schedule

from ..conftest import CURVES, PROFILES, ROOT, load_benchmark

SCHEDULES = ROOT / "examples" / "schedules"


def _module(name: str) -> ModuleType:
    return load_benchmark(name)


@pytest.mark.parametrize("name", ["cotenants-step", "cotenants-ramp", "cotenants-day"])
def test_no_static_profile_is_right_in_every_phase_and_switching_pays(name: str) -> None:
    path = SCHEDULES / f"{name}.yaml"
    schedule = load_schedule(path)
    device = load_shared_device(schedule=path)
    assert device is not None
    m = switching_map(list(load_profiles(PROFILES / "resnet50").values()),
                      ServiceModel(load_curve(CURVES / "t4-resnet50-fp16.yaml"), fixed_latency_ms=2.0),
                      schedule, slo_ms=60.0, slo_share=0.05, device=device.for_schedule(schedule),
                      label=name)
    assert m.verdict.switching_pays, m.verdict.message
    crowded = {p.name for p in schedule.phases if (p.cotenants or 0) >= 2}
    alone = {p.name for p in schedule.phases if (p.cotenants or 0) <= 1}
    # The waiting rung goes over the SLO (more than 1 point beyond the best) in a phase
    # with co-tenants, and the oracle picks the default there ...
    aggressive, default = m.static("aggressive"), m.static("triton-default")
    best = {p.phase: min(s.phases[i].over_slo for s in m.statics)
            for i, p in enumerate(default.phases)}
    assert any(p.over_slo > best[p.phase] + 0.01 for p in aggressive.phases if p.phase in crowded)
    assert "triton-default" in {p.profile for p in m.oracle.phases if p.phase in crowded}
    # ... while without them the oracle waits, and the default spends over 1.25x its device time.
    assert {p.profile for p in m.oracle.phases if p.phase in alone} == {"aggressive"}
    assert default.device_ms > 1.25 * m.oracle.device_ms
    assert "aggressive uses" in m.verdict.message and "goes over the SLO in" in m.verdict.message


def test_the_docs_tables_are_the_newest_saved_run() -> None:
    mod = _module("shared_schedules")
    doc = mod.newest()
    data = doc["data"]
    assert [r["profiles"] for r in data["ladders"]] == ["profiles/resnet50", "profiles/resnet50-fp32",
                                                          "profiles/bert-base"]
    shared = [r for r in data["schedules"] if "cotenants-" in r["schedule"]]
    assert len(shared) == 3 and all(r["verdict"]["switching_pays"] for r in shared)
    assert mod.check(), "run: .venv/bin/python benchmarks/shared_schedules.py --docs"
    assert doc["_file"] in (ROOT / "docs" / "ladders.md").read_text(encoding="utf-8")


def test_each_shipped_gpu_ladder_is_what_plan_wrote() -> None:
    # The profiles' own descriptions say which plan wrote them: the SLO and the curve.
    for folder, curve in (("resnet50", "t4-resnet50-fp16"), ("resnet50-fp32", "t4-resnet50-fp32"),
                          ("bert-base", "t4-bert-base-seq128-fp16")):
        profiles = load_profiles(PROFILES / folder)
        assert "triton-default" in profiles
        for p in profiles.values():
            text = (PROFILES / folder / f"{p.name}.yaml").read_text(encoding="utf-8")
            assert f"curve ''{curve}'', SLO p95 60 ms" in text.replace("\n  ", " "), (folder, p.name)
