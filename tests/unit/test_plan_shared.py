"""`plan` and `simulate` on a shared device: the verdicts with co-tenants, the options, bad input."""

from __future__ import annotations

import json

import pytest

from autobatch.cotenants import CoTenant
from autobatch.curve import BatchCurve, load_curve
from autobatch.plan.planner import make_plan
from autobatch.plan.simulator import ServiceModel, SharedDevice, load_shared_device
from autobatch.plan.switching import SwitchingKind, switching_map, triton_default
from autobatch.plan.verdict import SharedKind, SharedOption, shared_verdict
from autobatch.profiles import Profile
from autobatch.schedule import Phase, Schedule
from autobatch.sharing import SharingModel, SharingPolicy

from ..conftest import CURVES, ROOT
from ..helpers import assert_bad_input, run_main


def run_ok(monkeypatch, capsys, *args: str) -> str:
    """A command that succeeds, through ``autobatch.cli.main`` in this process: its stdout."""
    import sys

    import autobatch.cli as cli

    monkeypatch.setattr(sys, "argv", ["autobatch", *args])
    monkeypatch.setenv("COLUMNS", "200")
    try:
        cli.main()
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    return capsys.readouterr().out

T4 = CURVES / "t4-resnet50-fp16.yaml"
TWO = ROOT / "examples" / "cotenants" / "t4-two-jobs.yaml"
ONE = ROOT / "examples" / "cotenants" / "t4-one-job.yaml"


def option(name, *, waits, alone_ok=True, shared_ok=True, share=0.5, items=100.0):
    return SharedOption(name, waits, alone_ok, shared_ok, 30.0, 45.0, 50.0, 0.6, 0.9, share, 1.0, items)


# -- "does batching pay?" with co-tenants -------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "best_alone", "best_shared", "kind", "says"),
    [
        # Nothing keeps the SLO with them: the device is too full.
        ((option("triton-default", waits=False, shared_ok=False),
          option("aggressive", waits=True, shared_ok=False)),
         "aggressive", None, SharedKind.FULL, "the device is too full"),
        # The default no longer keeps up; the waiting profile does.
        ((option("triton-default", waits=False, shared_ok=False), option("aggressive", waits=True)),
         "aggressive", "aggressive", SharedKind.NEEDED, "Triton's default no longer keeps the SLO"),
        # The best alone waits and breaks with them; the default keeps it.
        ((option("triton-default", waits=False), option("aggressive", waits=True, shared_ok=False)),
         "aggressive", "triton-default", SharedKind.BREAKS, "aggressive, the best profile alone"),
        # Waiting keeps the SLO with them and frees device time for them.
        ((option("triton-default", waits=False, share=0.8, items=50.0), option("aggressive", waits=True)),
         "aggressive", "aggressive", SharedKind.FREES, "against Triton's default's 80%"),
        # The best with them does not wait: the waiting one saves too little ...
        ((option("triton-default", waits=False, share=0.55), option("aggressive", waits=True)),
         "triton-default", "triton-default", SharedKind.NO_GAIN, "on 50% of the device against 55%"),
        # ... or breaks the SLO.
        ((option("triton-default", waits=False), option("aggressive", waits=True, shared_ok=False)),
         "triton-default", "triton-default", SharedKind.NO_GAIN, "no profile that waits keeps the SLO"),
    ],
)
def test_shared_verdict(options, best_alone, best_shared, kind, says):
    v = shared_verdict(options, default="triton-default", best_alone=best_alone, best_shared=best_shared,
                       device="2 co-tenants", slo_ms=60.0)
    assert v.kind is kind
    assert says in v.message
    assert v.to_dict()["options"][0]["name"] == "triton-default"


def test_plan_with_co_tenants_runs_every_candidate_alone_and_shared():
    device = load_shared_device(cotenants=TWO)
    plan = make_plan(load_curve(T4), 60.0, 0.0, rate_rps=150.0, duration_s=10.0, sweep_points=3,
                     sweep_requests=1500, device=device)
    assert plan.device is device and plan.shared is not None
    by = {o.name: o for o in plan.shared.options}
    for c in plan.candidates:
        assert c.alone is not None and c.alone.device is not None and not c.alone.cotenants
        assert c.at_load.device is not None
        assert [x.name for x in c.at_load.cotenants] == ["batch-a", "batch-b"]
        # the co-tenants stretch the model's batches: its p95 only grows with them
        assert c.at_load.latency.p95_ms > c.alone.latency.p95_ms
        o = by[c.profile.name]
        assert (o.shared_ok, o.alone_ok) == (c.meets_slo, c.meets_slo_alone)
    default = by["triton-default"]
    best = by.get(plan.shared.best_shared or "")
    if plan.shared.kind is SharedKind.NEEDED:
        assert not default.shared_ok and best is not None and best.waits and best.shared_ok
    assert plan.shared.best_alone == (plan.recommended_alone and plan.recommended_alone.profile.name)
    doc = plan.to_dict()
    assert doc["shared"]["kind"] == plan.shared.kind.value
    assert doc["device"]["sharing"] == {"policy": "timeslice", "quantum_ms": 2.0, "switch_ms": 0.0}
    assert doc["candidates"][0]["at_load"]["device"]["by_tenant"].keys() == {"model", "batch-a", "batch-b"}
    assert doc["switching"]["device"].startswith("2 co-tenant(s)")


# -- "does switching pay?" with co-tenants ------------------------------------------------------


CURVE = BatchCurve({1: 4.0, 16: 4.0, 32: 8.0}, name="flat-to-16")
WAIT = Profile(name="wait", max_batch_size=32, preferred_batch_size=(16,), max_queue_delay_us=40000)
SCHEDULE = Schedule((Phase("busy-alone", 400.0, 20.0, cotenants=0),
                     Phase("shared-low", 20.0, 20.0, cotenants=2)))
BUSY = (CoTenant("a", CURVE, 1, duty=1.0), CoTenant("b", CURVE, 1, duty=1.0))


def test_co_tenants_make_switching_pay_where_one_profile_was_right():
    """Alone, 'wait' (16 at a time, up to 40 ms) is right in both phases. With two busy
    co-tenants in the second, each 4 ms batch takes about 12 ms: 40 ms of waiting plus
    that breaks a 50 ms SLO, while the default, which never waits, keeps it; and the
    default spends 6x the device time in the first phase. No static profile is right in
    both: switching pays."""
    args = dict(slo_ms=50.0, slo_share=0.01, reaction_s=0.5)
    alone = switching_map([triton_default(32), WAIT], ServiceModel(CURVE), SCHEDULE, **args)
    assert alone.verdict.kind is SwitchingKind.STATIC and alone.verdict.best_static == "wait"
    device = SharedDevice(SharingModel(SharingPolicy.TIMESLICE, quantum_ms=2.0), BUSY).for_schedule(SCHEDULE)
    shared = switching_map([triton_default(32), WAIT], ServiceModel(CURVE), SCHEDULE, device=device, **args)
    assert shared.verdict.switching_pays, shared.verdict.message
    wait, default = shared.static("wait"), shared.static("triton-default")
    assert wait.phases[1].over_slo > 0.3 and default.phases[1].over_slo == 0.0
    assert [p.profile for p in shared.oracle.phases] == ["wait", "triton-default"]
    assert shared.oracle.device_ms < 0.5 * default.device_ms
    # each strategy reports the co-tenants' throughput (batches per second while active)
    for s in (*shared.statics, shared.oracle):
        assert set(s.cotenants_bps) == {"a", "b"} and all(v > 50 for v in s.cotenants_bps.values())
    assert shared.to_dict()["oracle"]["cotenants_bps"].keys() == {"a", "b"}


def test_a_shared_device_cut_into_stretches_keeps_the_co_tenants_windows():
    device = SharedDevice(SharingModel(), BUSY).for_schedule(SCHEDULE)
    assert device.cotenants[0].windows == ((20.0, 40.0),)
    part = device.between(15.0, 30.0)
    assert part.cotenants[0].windows == ((5.0, 15.0),)
    assert device.between(0.0, 10.0).cotenants[0].windows == ((0.0, 0.0),)  # not active then


# -- options and bad input ----------------------------------------------------------------------


def test_load_shared_device_reads_the_file_and_the_options(tmp_path):
    assert load_shared_device() is None
    dev = load_shared_device(cotenants=ONE, quantum_ms=5)
    assert dev is not None and [j.name for j in dev.cotenants] == ["batch-a"]
    assert dev.sharing.quantum_ms == 5.0 and dev.sharing.policy is SharingPolicy.TIMESLICE
    only = load_shared_device(policy="exclusive")
    assert only is not None and only.cotenants == () and only.sharing.policy is SharingPolicy.EXCLUSIVE
    sched = tmp_path / "s.yaml"
    sched.write_text(
        "phases: [{name: a, rate_rps: 10, duration_s: 5, cotenants: 0}, "
        "{name: b, rate_rps: 10, duration_s: 5, cotenants: 1}]\n"
        f"cotenants: [{{name: j, curve: {T4}, batch_size: 8, duty: 0.5}}]\n")
    declared = load_shared_device(schedule=sched)
    placed = load_shared_device(schedule=sched, placed=True)
    assert declared.cotenants[0].windows == ((0.0, float("inf")),)
    assert placed.cotenants[0].windows == ((5.0, 10.0),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cotenants: [{name: j, curve: CURVE, batch_size: 8, dutty: 0.5}]",
         "cotenants[0].dutty = 0.5: unknown field (did you mean duty?)"),
        ("cotenants: [{name: j, curve: nowhere.yaml, batch_size: 8, duty: 0.5}]",
         "cotenants[0].curve = 'nowhere.yaml': no such curve file"),
        ("cotenants: [{name: j, curve: CURVE, batch_size: 8, duty: 1.5}]", "cotenants[0].duty = 1.5"),
        ("sharing: {policy: fair}\ncotenants: [{name: j, curve: CURVE, batch_size: 8, duty: 0.5}]",
         "sharing.policy = 'fair': must be one of exclusive, timeslice, concurrent"),
        ("sharing: {quantum_ms: 0}\ncotenants: [{name: j, curve: CURVE, batch_size: 8, duty: 0.5}]",
         "sharing.quantum_ms = 0.0: must be > 0"),
    ],
)
def test_a_bad_co_tenant_file_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("CURVE", str(T4)))
    for command in (["simulate", "--curve", str(T4), "--rate", "10", "--duration", "1"],
                    ["plan", "--curve", str(T4), "--slo-p99-ms", "60", "--network-ms", "0", "--rate", "10"]):
        code, _, err = run_main(monkeypatch, capsys, *command, "--cotenants", str(path))
        assert_bad_input(code, err, message)
        assert str(path) in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--curve", "nowhere.yaml", "--rate", "10", "--cotenants", str(TWO)], "nowhere.yaml"),
        (["--curve", str(T4), "--rate", "10", "--cotenants", str(TWO), "--quantum-ms", "-1"],
         "sharing.quantum_ms = -1.0: must be > 0"),
        (["--curve", str(T4), "--rate", "10", "--sharing", "fair"], "sharing.policy = 'fair'"),
        (["--curve", str(T4), "--rate", "10", "--cotenants", str(TWO), "--engine", "rules"],
         "triton engine only"),
        (["--curve", str(T4), "--sessions", "2", "--fps", "30", "--cotenants", str(TWO)],
         "--sessions does not go with --cotenants"),
    ],
)
def test_bad_shared_device_options_are_one_line_and_exit_2(capsys, monkeypatch, args, message):
    code, _, err = run_main(monkeypatch, capsys, "simulate", *args)
    assert_bad_input(code, err, message)


def test_simulate_with_co_tenants_reports_the_device_and_each_job(capsys, monkeypatch):
    base = ["simulate", "--curve", str(T4), "--rate", "150", "--duration", "5", "--instances", "2",
            "--cotenants", str(TWO)]
    doc = json.loads(run_ok(monkeypatch, capsys, *base, "--json"))
    assert doc["engine"] == "shared" and doc["instances"] == 2
    assert set(doc["device"]["by_context"]) == {"model/0", "model/1", "batch-a", "batch-b"}
    assert 0 < doc["device"]["model_share"] < doc["device"]["busy_share"] <= 1
    assert [c["name"] for c in doc["cotenants"]] == ["batch-a", "batch-b"]
    assert all(c["throughput_bps"] > 0 and c["stretch"] > 1 for c in doc["cotenants"])
    out = run_ok(monkeypatch, capsys, *base)
    assert "Shared device" in out and "Co-tenants" in out and "batch-b" in out


def test_a_schedule_with_co_tenant_phases_places_them(tmp_path, capsys, monkeypatch):
    sched = tmp_path / "s.yaml"
    sched.write_text(
        "phases: [{name: alone, rate_rps: 100, duration_s: 4, cotenants: 0}, "
        "{name: shared, rate_rps: 100, duration_s: 4, cotenants: 2}]\n"
        f"cotenants: [{{name: x, curve: {T4}, batch_size: 32, duty: 0.5}}, "
        f"{{name: y, curve: {T4}, batch_size: 32, duty: 0.5}}]\n")
    out = run_ok(monkeypatch, capsys, "simulate", "--curve", str(T4), "--schedule", str(sched), "--json")
    alone, shared = json.loads(out)["device"]["phases"]
    assert alone["by_tenant"]["x"] == 0.0 and shared["by_tenant"]["x"] > 0.2
    code, _, err = run_main(monkeypatch, capsys, "simulate", "--curve", str(T4), "--schedule", str(sched),
                            "--cotenants", str(ONE))
    assert_bad_input(code, err, "phases[1].cotenants = 2: only 1 co-tenant job(s) are declared")


def test_plan_without_a_device_is_unchanged():
    plan = make_plan(load_curve(T4), 60.0, 0.0, rate_rps=150.0, duration_s=5.0, sweep_points=2,
                     sweep_requests=500)
    assert plan.device is None and plan.shared is None
    assert all(c.alone is None and c.at_load.device is None for c in plan.candidates)
    assert plan.switching is not None and plan.switching.device is None
