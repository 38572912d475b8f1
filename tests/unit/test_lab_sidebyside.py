"""The pure parts of the side-by-side harness: modes and groups, the lead-in, the co-tenants'
windows, the device's readings, a run's figures and its verdicts."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from autobatch.cotenants import CoTenant
from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError, TritonError
from autobatch.lab.closed_loop import _switches as closed_loop_switches
from autobatch.lab.sidebyside import run as sbs_run
from autobatch.lab.sidebyside.layout import (
    LEAD_IN,
    ModeSpec,
    cotenant_from_dict,
    cotenant_to_dict,
    group_modes,
    modes_for,
    placed_cotenants,
    statics_of,
    with_lead_in,
)
from autobatch.lab.sidebyside.readings import (
    DeviceReading,
    device_figures,
    parse_device_metrics,
    served_shares,
)
from autobatch.lab.sidebyside.run import (
    HZ,
    Comparison,
    arrivals_s,
    cpu_by_mode,
    decisions_from_log,
    machine_cores,
    whole_run,
)
from autobatch.lab.sidebyside.worker import retried
from autobatch.profiles import Profile
from autobatch.schedule import Phase, Schedule

CURVE = BatchCurve.from_mapping({"name": "t4", "points": {1: 12.96, 8: 12.82, 32: 29.54}})


def prof(name: str) -> Profile:
    return Profile(name=name, max_batch_size=32, preferred_batch_size=(), max_queue_delay_us=0)


LADDER = [prof("triton-default"), prof("balanced"), prof("aggressive")]


def test_the_modes_are_the_default_every_other_rung_and_both_controllers() -> None:
    modes = modes_for(LADDER, LADDER[0], LADDER[0])
    assert [(m.name, m.kind) for m in modes] == [
        ("triton-default", "static"), ("balanced", "static"), ("aggressive", "static"),
        ("reload", "reload"), ("gateway", "gateway")]
    only = modes_for(LADDER, LADDER[0], LADDER[0], ["reload"])
    assert [m.name for m in only] == ["triton-default", "reload"]
    with pytest.raises(ConfigError, match="modes = 'fast'"):
        modes_for(LADDER, LADDER[0], LADDER[0], ["fast"])


def test_a_variant_is_a_controller_with_its_own_config_beside_the_two() -> None:
    modes = modes_for(LADDER, LADDER[0], LADDER[0], None, [("reload-off", "reload", Path("off.yaml"))])
    extra = modes[-1]
    assert (extra.name, extra.kind, extra.controller, extra.config) == ("reload-off", "reload", True,
                                                                        Path("off.yaml"))
    assert [m.name for m in modes_for(LADDER, LADDER[0], LADDER[0], ["reload-off"],
                                      [("reload-off", "reload", Path("off.yaml"))])] == \
        ["triton-default", "reload-off"]
    with pytest.raises(ConfigError, match="kind = 'static'"):
        modes_for(LADDER, LADDER[0], LADDER[0], None, [("x", "static", Path("x.yaml"))])
    with pytest.raises(ConfigError, match="'reload': the name of another mode"):
        modes_for(LADDER, LADDER[0], LADDER[0], None, [("reload", "reload", Path("x.yaml"))])


def test_a_static_off_the_ladder_is_held_beside_the_rungs_and_always_runs() -> None:
    wait = prof("wait25")
    modes = modes_for(LADDER, LADDER[0], LADDER[0], None, (), [wait])
    held = [(m.name, m.kind, m.controller) for m in modes if m.name == "wait25"]
    assert held == [("wait25", "static", False)]
    assert [m.name for m in modes].index("wait25") < [m.name for m in modes].index("reload")
    # Asked for by name: it runs whatever --modes keeps.
    assert [m.name for m in modes_for(LADDER, LADDER[0], LADDER[0], ["reload"], (), [wait])] == \
        ["triton-default", "wait25", "reload"]
    with pytest.raises(ConfigError, match="name = 'aggressive': the name of another mode"):
        modes_for(LADDER, LADDER[0], LADDER[0], None, (), [prof("aggressive")])


@pytest.mark.parametrize(
    ("size", "want"),
    [
        (5, [["triton-default", "balanced", "aggressive", "reload", "gateway"]]),
        (3, [["triton-default", "reload", "gateway"], ["triton-default", "balanced", "aggressive"]]),
        (2, [["triton-default", "reload"], ["triton-default", "gateway"], ["triton-default", "balanced"],
             ["triton-default", "aggressive"]]),
    ],
)
def test_groups_run_the_controllers_first_and_each_holds_the_baseline(size: int,
                                                                     want: list[list[str]]) -> None:
    groups = group_modes(modes_for(LADDER, LADDER[0], LADDER[0]), size)
    assert [[m.name for m in g] for g in groups] == want


def test_a_group_needs_the_baseline_and_room_for_one_more() -> None:
    with pytest.raises(ConfigError, match="group_size = 1"):
        group_modes(modes_for(LADDER, LADDER[0], LADDER[0]), 1)
    with pytest.raises(ConfigError, match="triton-default must be one of them"):
        group_modes([ModeSpec("reload", "reload", LADDER[0])], 3)


def ran(*groups: list[str]) -> list[dict[str, Any]]:
    """Groups as a repeat ran them: each mode's result says which group it came from."""
    return [{"modes": {m: {"group": i} for m in g}} for i, g in enumerate(groups)]


CTRL = ["triton-default", "reload", "gateway"]
STAT = ["triton-default", "balanced", "aggressive"]


@pytest.mark.parametrize(
    ("groups", "want"),
    [
        # The groups rotate per repeat: the default comes from the statics' group either way.
        (ran(CTRL, STAT), {"triton-default": 1, "balanced": 1, "aggressive": 1}),
        (ran(STAT, CTRL), {"triton-default": 0, "balanced": 0, "aggressive": 0}),
        # Two groups of statics as large: the later of the two.
        (ran(["triton-default", "reload"], ["triton-default", "balanced"], ["triton-default", "aggressive"]),
         {"triton-default": 2, "balanced": 1, "aggressive": 2}),
        (ran(["triton-default", "aggressive"], ["triton-default", "balanced"], ["triton-default", "reload"]),
         {"triton-default": 1, "balanced": 1, "aggressive": 0}),
        # One group: everything from it.
        (ran(CTRL + ["balanced"]), {"triton-default": 0, "balanced": 0}),
    ],
)
def test_the_statics_come_from_the_group_they_ran_in_together(groups: list[dict[str, Any]],
                                                              want: dict[str, int]) -> None:
    got = statics_of(groups, {"reload", "gateway"})
    assert {name: r["group"] for name, r in got.items()} == want


SCHEDULE = Schedule((Phase("alone", 150, 30, cotenants=0), Phase("shared", 150, 30, cotenants=2),
                     Phase("alone-again", 150, 30, cotenants=0)))
JOBS = (CoTenant("a", CURVE, 32, duty=0.9), CoTenant("b", CURVE, 32, duty=0.9))


def test_the_lead_in_runs_the_first_phase_unmeasured_and_the_jobs_move_with_the_phases() -> None:
    run = with_lead_in(SCHEDULE, 60)
    assert [p.name for p in run.phases] == [LEAD_IN, "alone", "shared", "alone-again"]
    assert run.phases[0].rate_rps == 150 and run.phases[0].cotenants == 0
    placed = placed_cotenants(JOBS, run, 60)
    assert [j.windows for j in placed] == [((90.0, 120.0),), ((90.0, 120.0),)]
    assert arrivals_s(placed) == [90.0]
    assert with_lead_in(SCHEDULE, 0) is SCHEDULE


def test_jobs_with_their_own_times_move_back_by_the_lead_in() -> None:
    timed = Schedule((Phase("a", 100, 30), Phase("b", 100, 30)))
    job = CoTenant("x", CURVE, 8, rate_bps=10.0, windows=((20.0, 40.0),))
    (moved,) = placed_cotenants((job,), with_lead_in(timed, 10), 10)
    assert moved.windows == ((30.0, 50.0),)
    assert placed_cotenants((), timed, 10) == ()


def test_a_cotenant_crosses_to_the_worker_as_json_and_back() -> None:
    job = CoTenant("x", CURVE, 8, rate_bps=10.0, arrival="uniform", windows=((5.0, math.inf),))
    back = cotenant_from_dict(json.loads(json.dumps(cotenant_to_dict(job))))
    assert back == job


METRICS = """\
autobatch_device_uptime_seconds {up}
autobatch_device_busy_seconds_total {busy}
autobatch_device_context_busy_seconds_total{{context="resnet50_0_0"}} {m}
autobatch_device_context_busy_seconds_total{{context="train-a"}} {a}
autobatch_device_context_busy_seconds_total{{context="autobatch-check"}} 0.0
autobatch_device_context_items_total{{context="resnet50_0_0"}} {items}
autobatch_device_context_items_total{{context="train-a"}} 320.0
autobatch_device_answer_lateness_seconds_bucket{{le="0.001"}} {fast}
autobatch_device_answer_lateness_seconds_bucket{{le="0.002"}} {fast}
autobatch_device_answer_lateness_seconds_bucket{{le="+Inf"}} {n}
autobatch_device_answer_lateness_seconds_count {n}
autobatch_device_answer_lateness_seconds_sum {late}
"""


def reading(**kw: float) -> DeviceReading:
    return parse_device_metrics(METRICS.format(**kw))


def test_the_device_reading_gives_the_models_work_per_item_busy_by_tenant_and_lateness() -> None:
    a = reading(up=10.0, busy=2.0, m=1.0, a=1.0, items=100, fast=90, n=100, late=0.05)
    b = reading(up=20.0, busy=9.0, m=4.0, a=5.0, items=1100, fast=280, n=300, late=0.25)
    assert a.context_busy_s["resnet50_0_0"] == 1.0 and a.late_answers == 10
    got = device_figures(a, b, ["resnet50_"], ["train-a"])
    assert got["device_ms"] == pytest.approx(3.0)  # 3 s of work over 1000 items
    assert got["device_items"] == 1000 and got["device_busy_ms"] == pytest.approx(3000.0)
    assert got["busy_share"] == pytest.approx(0.7)
    assert got["busy_by_tenant"] == {"model": 0.3, "train-a": 0.4}  # the check connection is nobody's
    assert got["answers"] == 200 and got["lateness_mean_ms"] == pytest.approx(1.0)
    assert got["late_share"] == pytest.approx(0.05)  # 10 more of 200 answers over 2 ms late (20 - 10)
    idle = device_figures(b, b, ["resnet50_"], ["train-a"])
    assert idle["device_ms"] is None and idle["busy_share"] is None and idle["lateness_mean_ms"] is None


def items(**by_context: float) -> DeviceReading:
    return DeviceReading(uptime_s=0.0, busy_s=0.0, context_items=by_context)


VARIANTS = {"resnet50__triton_default_": "triton-default", "resnet50__wait25_": "wait25",
            "resnet50__wait25_soft_": "wait25-soft"}


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        # every item on one variant: that profile served the stretch, whatever /status said
        (items(resnet50__wait25_0_0=10), items(resnet50__wait25_0_0=110), {"wait25": 1.0}),
        # a shift mid-stretch: shares of the items, both instances of a variant counted
        (items(resnet50__triton_default_0_0=50, resnet50__wait25_0_0=0),
         items(resnet50__triton_default_0_0=80, resnet50__triton_default_0_1=10, resnet50__wait25_0_0=60),
         {"wait25": 0.6, "triton-default": 0.4}),
        # the longest prefix wins: wait25-soft's contexts are not wait25's
        (items(), items(resnet50__wait25_soft_0_0=30, resnet50__wait25_0_0=10),
         {"wait25-soft": 0.75, "wait25": 0.25}),
        # a context new since ``a`` counts from zero; co-tenants and other models are nobody's
        (items(), items(**{"resnet50__wait25_0_0": 4, "train-a": 500, "bert_0_0": 9}), {"wait25": 1.0}),
        # nothing ran: no answer rather than a share of nothing
        (items(resnet50__wait25_0_0=7), items(resnet50__wait25_0_0=7), None),
    ],
)
def test_served_shares_are_the_items_each_variant_ran(a: DeviceReading, b: DeviceReading, want: Any) -> None:
    assert served_shares(a, b, VARIANTS) == want


def test_served_shares_need_variants() -> None:
    # one model whose profile changes in place (reload, static): the device cannot tell the profiles apart
    assert served_shares(items(resnet50_0_0=0), items(resnet50_0_0=9), {}) is None


def mode(*phases: tuple[str, int, int, float, int]) -> dict[str, Any]:
    return {"phases": [{"name": n, "measured": n != LEAD_IN, "requests": r, "over_slo": o,
                        "over_slo_share": o / r, "device_busy_ms": busy, "device_items": items,
                        "failures": {"timeout": 1} if n == "b" else {}}
                       for n, r, o, busy, items in phases]}


def test_a_runs_figures_leave_the_lead_in_out() -> None:
    got = whole_run(mode((LEAD_IN, 100, 50, 500.0, 100), ("a", 100, 1, 300.0, 100),
                         ("b", 300, 3, 300.0, 300)))
    assert [p["name"] for p in got["phases"]] == ["a", "b"]
    assert got["device_ms"] == pytest.approx(1.5) and got["over_slo_share"] == pytest.approx(0.01)
    assert got["failed"] == 1


def test_decisions_are_read_on_the_runs_clock(tmp_path: Path) -> None:
    log = tmp_path / "d.jsonl"
    rows = [{"decision": {"at_s": 1000.5, "action": "hold", "reason": "settling", "target": "x"}},
            {"decision": {"at_s": 1012.0, "action": "switch", "reason": "efficiency", "target": "aggressive"},
             "actuation": {"ok": True, "duration_s": 1.4}}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = decisions_from_log(log, t0_wall=1000.0)
    assert [(d["t_s"], d["action"], d["ok"], d["duration_s"]) for d in got] == [
        (0.5, "hold", None, None), (12.0, "switch", True, 1.4)]
    assert decisions_from_log(tmp_path / "missing.jsonl", 0.0) == []


def test_a_step_of_the_wall_clock_mid_run_moves_no_decision(tmp_path: Path) -> None:
    """The wall clock jumped 12.3 s between the lines (a paused virtual machine, resynced): by
    ``ts`` the switch is 12.3 s late; by ``mono`` it is where it happened."""
    log = tmp_path / "d.jsonl"
    rows = [{"mono": 500.5,
             "decision": {"at_s": 1000.5, "action": "hold", "reason": "steady", "target": "x"}},
            {"mono": 512.0, "decision": {"at_s": 1024.3, "action": "switch", "reason": "shared",
                                         "target": "triton-default"}}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [d["t_s"] for d in decisions_from_log(log, t0_wall=1000.0)] == [0.5, 24.3]
    assert [d["t_s"] for d in decisions_from_log(log, t0_wall=1000.0, t0_mono=500.0)] == [0.5, 12.0]
    # the closed loop's switches likewise
    rows[1]["actuation"] = {"ok": True, "duration_s": 2.3}
    rows[1]["decision"]["message"] = "shared"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [s.t_s for s in closed_loop_switches(log, t0_wall=1000.0, t0_mono=500.0)] == [12.0]
    assert [s.t_s for s in closed_loop_switches(log, t0_wall=1000.0)] == [24.3]


# -- the whole machine's CPUs, beside our processes' ----------------------------------------------

@pytest.mark.parametrize(("delta", "ours", "want", "why"), [
    # user nice system idle iowait irq softirq steal, over 10 s
    ([5, 0, 3, 10, 0, 1, 1, 0], 0.6, {"busy": 1.0, "others": 0.4, "steal": 0.0},
     "busy is user+nice+system+irq+softirq; the rest of the machine is busy less ours"),
    ([4, 0, 2, 8, 2, 0, 0, 4], 0.6, {"busy": 0.6, "others": 0.0, "steal": 0.4},
     "steal is counted apart; idle and iowait are not busy"),
    ([1, 0, 1, 18, 0, 0, 0, 0], 0.6, {"busy": 0.2, "others": 0.0, "steal": 0.0},
     "our processes' own count can exceed the machine's (different clocks): others never negative"),
])
def test_machine_cores_reads_the_cpu_line(delta: list[int], ours: float, want: dict[str, float],
                                          why: str) -> None:
    before = [1000] * 10
    after = [b + d * HZ for b, d in zip(before, delta + [0, 0], strict=True)]
    assert machine_cores(before, after, 10.0, ours) == pytest.approx(want), why


@pytest.mark.parametrize(("before", "after", "wall"), [
    (None, [1] * 10, 1.0), ([1] * 10, None, 1.0), ([1] * 10, [2] * 10, 0.0), ([1] * 5, [2] * 5, 1.0)])
def test_machine_cores_without_two_readings_is_none(before: list[int] | None, after: list[int] | None,
                                                   wall: float) -> None:
    assert machine_cores(before, after, wall, 0.5) is None


_REAPS_A_BURNER = """
import subprocess, sys
sys.stdin.readline()
subprocess.run([sys.executable, "-c",
                "import time\\nwhile time.process_time() < 0.3: pass"], check=True)
print("reaped", flush=True)
sys.stdin.readline()
"""


def test_a_process_groups_cpu_counts_a_child_it_reaped_between_readings() -> None:
    """A reload replaces Triton's stub: the old one's CPU must not vanish with it."""
    import subprocess
    import sys

    from autobatch.lab.process import cpu_seconds, group_members

    proc = subprocess.Popen([sys.executable, "-c", _REAPS_A_BURNER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        before = cpu_seconds(group_members(proc.pid))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "reaped"
        members = group_members(proc.pid)
        assert members == [proc.pid]  # the burner is gone: only its parent's cutime holds it
        assert cpu_seconds(members) - before >= 0.29
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(("before", "after", "generators", "want", "why"), [
    ({"a": {"triton": 1.0, "sidecar": 0.0}}, {"a": {"triton": 6.0, "sidecar": 2.0}}, {"a": 3.0},
     {"a": {"triton": 0.5, "sidecar": 0.2, "load": 0.3, "all": 1.0}},
     "each kind's seconds over the wall, the generator's own report as load, and their sum"),
    ({"a": {"triton": 0.0}, "b": {"triton": 0.0, "sidecar": 0.0}},
     {"a": {"triton": 4.0}, "b": {"triton": 5.0, "sidecar": 1.0}}, {"b": 2.0},
     {"a": {"triton": 0.4, "load": 0.0, "all": 0.4},
      "b": {"triton": 0.5, "sidecar": 0.1, "load": 0.2, "all": 0.8}},
     "a mode without a sidecar has no sidecar row; a generator that reported nothing is 0"),
    ({"a": {}}, {"a": {"device": 2.0}}, {"a": 0.0}, {"a": {"device": 0.2, "load": 0.0, "all": 0.2}},
     "a process first read at the end counts from zero"),
])
def test_cpu_by_mode_splits_the_cores_by_mode_and_kind(before: dict[str, dict[str, float]],
                                                       after: dict[str, dict[str, float]],
                                                       generators: dict[str, float], want: dict[str, Any],
                                                       why: str) -> None:
    got = cpu_by_mode(before, after, generators, 10.0)
    assert set(got) == set(want), why
    for mode, row in want.items():
        assert got[mode] == pytest.approx(row), (mode, why)


# -- a repeat whose server stopped answering is run again ------------------------------------------

def _fails_at(*calls: int) -> tuple[list[str], Any]:
    """A group runner that raises as a server that stopped answering would at the given calls
    (0-based), and the work folders it was given."""
    seen: list[str] = []

    def run(cmp: Any, group: Any, workdir: Path, event: Any) -> dict[str, Any]:
        seen.append(workdir.name)
        if len(seen) - 1 in calls:
            raise TritonError("stats of 'resnet50' at http://127.0.0.1:1: ConnectError: refused")
        return {"modes": {m.name: {} for m in group}}

    return seen, run


def _cmp(repeats: int, retries: int) -> Comparison:
    return Comparison(name="s", schedule=SCHEDULE, setup=None, modes=(), slo_p95_ms=60.0,  # type: ignore[arg-type]
                      repeats=repeats, retries=retries)


G2 = [[ModeSpec("triton-default", "static", LADDER[0]), ModeSpec("reload", "reload", LADDER[0])],
      [ModeSpec("triton-default", "static", LADDER[0]), ModeSpec("aggressive", "static", LADDER[2])]]


@pytest.mark.parametrize(("fail", "retries", "want_dirs", "want_repeats", "want_failed"), [
    ((), 1, ["r0-g0", "r0-g1", "r1-g1", "r1-g0", "r2-g0", "r2-g1"], 3, []),
    # Repeat 2's second group fails: the whole repeat runs again (its first group too).
    ((3,), 1, ["r0-g0", "r0-g1", "r1-g1", "r1-g0", "r1-g1-retry1", "r1-g0-retry1", "r2-g0", "r2-g1"], 3,
     [(1, 0, ["triton-default", "reload"])]),
    # A second failure with one retry: the comparison ends with the repeats it has.
    ((1, 2), 1, ["r0-g0", "r0-g1", "r0-g0-retry1"], 0, None),
    ((2, 4), 1, ["r0-g0", "r0-g1", "r1-g1", "r1-g1-retry1", "r1-g0-retry1"], 1,
     [(1, 0, ["triton-default", "aggressive"]), (1, 1, ["triton-default", "reload"])]),
])
def test_a_failed_repeat_is_run_again_and_kept(monkeypatch: pytest.MonkeyPatch, fail: tuple[int, ...],
                                               retries: int, want_dirs: list[str], want_repeats: int,
                                               want_failed: list[tuple[int, int, list[str]]] | None) -> None:
    monkeypatch.setattr(sbs_run, "verdicts", lambda cmp, done: {"groups": len(done)})
    seen, run = _fails_at(*fail)
    events: list[str] = []
    if want_failed is None:  # nothing completed: the failure itself
        with pytest.raises(TritonError, match="ConnectError"):
            sbs_run.run_repeats(_cmp(3, retries), G2, Path("/nowhere"), events.append, run)
        assert seen == want_dirs
        return
    runs, failed = sbs_run.run_repeats(_cmp(3, retries), G2, Path("/nowhere"), events.append, run)
    assert seen == want_dirs
    assert [r["repeat"] for r in runs] == list(range(want_repeats))
    assert all(r["verdicts"] == {"groups": 2} for r in runs)
    assert [(f["repeat"], f["retry"], f["group"]) for f in failed] == want_failed
    assert all("ConnectError" in f["error"] for f in failed)
    assert sum("failed in group" in e for e in events) == len(fail)


def test_a_boundary_read_is_tried_again_after_a_failed_answer() -> None:
    answers: list[Any] = [httpx.ConnectError("refused"), TritonError("HTTP 503"), 7]

    async def read() -> int:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return int(a)

    assert asyncio.run(retried(read, "stats", tries=3, first_wait_s=0.0)) == 7
    answers[:] = [httpx.ConnectError("refused")] * 3
    with pytest.raises(TritonError, match=r"^stats: 3 tries failed, the last: ConnectError: refused"):
        asyncio.run(retried(read, "stats", tries=3, first_wait_s=0.0))
    answers[:] = [ValueError("a bug is not retried"), 1]
    with pytest.raises(ValueError):
        asyncio.run(retried(read, "stats", tries=3, first_wait_s=0.0))


@pytest.mark.parametrize(("models", "interval_s"), [(1, 0.25), (2, 0.5), (3, 0.75), (0, 0.25)])
def test_every_mode_reads_triton_stats_as_often_in_all(models: int, interval_s: float) -> None:
    from autobatch.lab.sidebyside.worker import STATS_PER_S, stats_interval_s

    got = stats_interval_s(models)
    assert got == pytest.approx(interval_s)
    assert max(1, models) / got == pytest.approx(STATS_PER_S)  # one reload mode's rate, a gateway's too
