"""The shared-GPU schedules (examples/schedules/cotenants-*.yaml) are what they were designed
to be, on the T4 mixed-precision curve, SLO p95 60 ms: over the plan's ladder
(profiles/resnet50) no static profile is right in every phase of -step, -ramp, -day and
-linger and switching pays; over the T4 sidecar's ladder (profiles/sidecar-t4/resnet50,
[triton-default, wait25]) one static is the answer on the first three, and switching pays on
-linger, -ebb and -nightly. docs/ladders.md's tables come from the newest saved run of
benchmarks/shared_schedules.py."""

from __future__ import annotations

from types import ModuleType

import pytest

from autobatch.curve import load_curve
from autobatch.plan.simulator import ServiceModel, load_shared_device
from autobatch.plan.switching import SwitchingKind, SwitchingMap, switching_map
from autobatch.profiles import load_profiles
from autobatch.schedule import load_schedule

from ..conftest import CURVES, PROFILES, ROOT, load_benchmark

SCHEDULES = ROOT / "examples" / "schedules"


def _module(name: str) -> ModuleType:
    return load_benchmark(name)


@pytest.mark.parametrize("name", ["cotenants-step", "cotenants-ramp", "cotenants-day", "cotenants-linger"])
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


def _wait25_map(name: str, folder: str = "experiments") -> SwitchingMap:
    """``name`` over the ladder [triton-default, wait25]: ``profiles/<folder>/resnet50``
    (``experiments`` as it was measured first, ``sidecar-t4`` as the T4 sidecar ships it)."""
    path = SCHEDULES / f"{name}.yaml"
    schedule = load_schedule(path)
    device = load_shared_device(schedule=path)
    assert device is not None
    profiles = load_profiles(PROFILES / folder / "resnet50")
    return switching_map([profiles["triton-default"], profiles["wait25"]],
                         ServiceModel(load_curve(CURVES / "t4-resnet50-fp16.yaml"), fixed_latency_ms=2.0),
                         schedule, slo_ms=60.0, slo_share=0.05, device=device.for_schedule(schedule),
                         label=name)


@pytest.mark.parametrize("name", ["cotenants-step", "cotenants-ramp", "cotenants-day"])
def test_a_25_ms_wait_is_right_in_every_phase_of_the_first_three(name: str) -> None:
    """The first three were designed against the shipped ladder, whose waiting rung waits
    17 ms: a 25 ms wait makes batches big enough to leave room for the co-tenants, and holds
    every phase within a point of the default at about half its device time."""
    m = _wait25_map(name)
    assert m.verdict.kind is SwitchingKind.STATIC and m.verdict.best_static == "wait25", m.verdict.message
    assert m.static("wait25").device_ms < 0.55 * m.static("triton-default").device_ms


def test_cotenants_linger_is_where_the_25_ms_wait_breaks() -> None:
    """Both co-tenants stay as the load falls to 40/s: the batches do not fill, every one is
    stretched, and wait25 goes over by more than a point where the default holds, so
    switching pays over [triton-default, wait25] too."""
    m = _wait25_map("cotenants-linger")
    assert m.verdict.switching_pays, m.verdict.message
    wait25, default = m.static("wait25"), m.static("triton-default")
    over = {p.phase: (p.over_slo, q.over_slo) for p, q in zip(wait25.phases, default.phases, strict=True)}
    assert [ph for ph, (w, d) in over.items() if w > d + 0.01] == ["low-shared"]
    assert {p.phase: p.profile for p in m.oracle.phases}["low-shared"] == "triton-default"
    assert m.oracle.device_ms < 0.65 * default.device_ms


@pytest.mark.parametrize(("name", "breaks"),
                         [("cotenants-ebb", "low-three"), ("cotenants-nightly", "night-jobs")])
def test_the_shipped_ladder_switches_where_three_jobs_meet_a_low_load(name: str, breaks: str) -> None:
    """Designed over the shipped T4 ladder (profiles/sidecar-t4/resnet50): wait25 holds every
    phase within a point of the default but the one where three co-tenants share the GPU at
    40 req/s, where the oracle takes the default; it still costs under 0.6x the default."""
    assert sorted(load_profiles(PROFILES / "sidecar-t4" / "resnet50")) == ["triton-default", "wait25"]
    m = _wait25_map(name, "sidecar-t4")
    assert m.verdict.switching_pays, m.verdict.message
    wait25, default = m.static("wait25"), m.static("triton-default")
    over = {p.phase: (p.over_slo, q.over_slo) for p, q in zip(wait25.phases, default.phases, strict=True)}
    assert [ph for ph, (w, d) in over.items() if w > d + 0.01] == [breaks]
    assert {p.phase: p.profile for p in m.oracle.phases}[breaks] == "triton-default"
    assert {p.profile for p in m.oracle.phases if p.phase != breaks} == {"wait25"}
    assert m.oracle.device_ms < 0.6 * default.device_ms


def test_the_docs_tables_are_the_newest_saved_run() -> None:
    mod = _module("shared_schedules")
    doc = mod.newest()
    data = doc["data"]
    assert [r["profiles"] for r in data["ladders"]] == ["profiles/resnet50", "profiles/resnet50-fp32",
                                                          "profiles/bert-base"]
    shared = [r for r in data["schedules"] if "cotenants-" in r["schedule"]]
    assert len(shared) == 4 and all(r["verdict"]["switching_pays"] for r in shared)
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
