"""The shared device's model: who runs when, by table."""

from __future__ import annotations

import math

import pytest

from autobatch.config import Section
from autobatch.errors import ConfigError
from autobatch.sharing import DeviceScheduler, SharingModel, SharingPolicy, parse_sharing

EX = SharingModel(SharingPolicy.EXCLUSIVE)
TS = SharingModel(SharingPolicy.TIMESLICE, quantum_ms=2.0)
TS_SWITCH = SharingModel(SharingPolicy.TIMESLICE, quantum_ms=2.0, switch_ms=0.5)
CC = SharingModel(SharingPolicy.CONCURRENT, throughput={1: 1.0, 2: 1.5})


def finish_times(model: SharingModel, jobs: list[tuple[float, str, str, float]]) -> dict[str, float]:
    """Submit (at_ms, context, job, work_ms) in order; run to the end; job -> finish time."""
    dev = DeviceScheduler(model)
    done = {}
    for at, ctx, job, work in jobs:
        for c in dev.submit(at, ctx, job, work):
            done[c.job] = c.finished_ms
    for c in dev.advance(1e6):
        done[c.job] = c.finished_ms
    return done


@pytest.mark.parametrize(
    ("model", "jobs", "want"),
    [
        # one job alone takes its work whatever the policy
        (EX, [(0, "a", "a1", 10)], {"a1": 10}),
        (TS, [(0, "a", "a1", 10)], {"a1": 10}),
        (CC, [(0, "a", "a1", 10)], {"a1": 10}),
        # exclusive: first submitted, first served, one at a time
        (EX, [(0, "a", "a1", 10), (0, "b", "b1", 5)], {"a1": 10, "b1": 15}),
        (EX, [(0, "a", "a1", 10), (1, "b", "b1", 5), (2, "a", "a2", 1)], {"a1": 10, "b1": 15, "a2": 16}),
        # timeslice: 2 ms turns; b's 5 ms end in its third turn, a runs on alone
        (TS, [(0, "a", "a1", 10), (0, "b", "b1", 5)], {"b1": 11, "a1": 15}),
        # a context runs its jobs in order and keeps the rest of its slice for the next one
        (TS, [(0, "a", "a1", 3), (0, "a", "a2", 3), (0, "b", "b1", 3)], {"a1": 5, "b1": 7, "a2": 9}),
        # a context switch costs device time that runs no job
        (TS_SWITCH, [(0, "a", "a1", 4), (0, "b", "b1", 4)], {"a1": 7, "b1": 9.5}),
        # an arrival while one runs alone waits for the end of the current slice
        (TS, [(0, "a", "a1", 10), (3, "b", "b1", 2)], {"b1": 6, "a1": 12}),
        # concurrent: two together run 1.5x one alone, 0.75x each
        (CC, [(0, "a", "a1", 10), (0, "b", "b1", 10)], {"a1": 40 / 3, "b1": 40 / 3}),
        (CC, [(0, "a", "a1", 10), (0, "b", "b1", 5)], {"b1": 20 / 3, "a1": 20 / 3 + 5}),
    ],
)
def test_finish_times(model: SharingModel, jobs: list, want: dict[str, float]) -> None:
    got = finish_times(model, jobs)
    assert got == pytest.approx(want)


def sent_late(model: SharingModel, jobs: list[tuple[float, float, str, str, float]],
              advance_to: list[float] = ()) -> dict[str, tuple[float, float, float]]:
    """Jobs that reach the device at ``at_ms``, sent at ``sent_ms``: (at_ms, sent_ms, context,
    job, work_ms) in order (``advance_to``: times the device ran to before the first one);
    job -> (submitted, started, finished)."""
    dev = DeviceScheduler(model)
    for t in advance_to:
        dev.advance(t)
    out = {}
    for at, sent, ctx, job, work in jobs:
        for c in dev.submit(at, ctx, job, work, sent_ms=sent):
            out[c.job] = (c.submitted_ms, c.started_ms, c.finished_ms)
    for c in dev.advance(1e6):
        out[c.job] = (c.submitted_ms, c.started_ms, c.finished_ms)
    return out


@pytest.mark.parametrize("model", [EX, TS, TS_SWITCH, CC], ids=lambda m: m.policy.value)
@pytest.mark.parametrize(
    ("jobs", "advance_to", "want"),
    [
        # idle device: the job starts when it was sent, not when the line arrived
        ([(10.6, 10.0, "a", "a1", 5)], [], {"a1": (10.0, 10.0, 15.0)}),
        # the device ran on (a metrics scrape) while idle: the same
        ([(10.6, 10.0, "a", "a1", 5)], [3.0, 10.3], {"a1": (10.0, 10.0, 15.0)}),
        # a job shorter than the way there completes before it arrived: answered at once
        ([(10.6, 10.0, "a", "a1", 0.25)], [], {"a1": (10.0, 10.0, 10.25)}),
        # sent before the device was free: it starts when the device went idle (a1's end)
        ([(0, 0, "a", "a1", 5), (5.5, 4.0, "a", "a2", 5)], [], {"a1": (0, 0, 5), "a2": (5, 5, 10)}),
        # sent while the device is busy: it queues as it arrives, what ran already stays
        ([(0, 0, "a", "a1", 5), (3, 2, "a", "a2", 1)], [], {"a1": (0, 0, 5), "a2": (3, 5, 6)}),
        # no sent instant, or one after the arrival: the arrival counts
        ([(10.6, None, "a", "a1", 5)], [], {"a1": (10.6, 10.6, 15.6)}),
        ([(10.6, 11.0, "a", "a1", 5)], [], {"a1": (10.6, 10.6, 15.6)}),
    ],
)
def test_a_job_starts_when_sent_on_an_idle_device(model: SharingModel, jobs: list, advance_to: list,
                                                  want: dict) -> None:
    got = sent_late(model, jobs, advance_to)
    assert {k: pytest.approx(v) for k, v in got.items()} == want


def test_a_job_sent_late_counts_its_busy_time_from_its_start() -> None:
    for model in (EX, TS, CC):
        dev = DeviceScheduler(model)
        dev.advance(10.3)
        assert dev.submit(10.6, "a", "a1", 5, sent_ms=10.0) == []
        u = dev.usage()
        assert (u.now_ms, u.busy_ms, u.work_ms["a"]) == pytest.approx((10.6, 0.6, 0.6))
        assert dev.next_completion_ms() == pytest.approx(15.0)


def test_next_completion_is_when_advance_completes() -> None:
    for model in (EX, TS, TS_SWITCH, CC):
        dev = DeviceScheduler(model)
        dev.submit(0, "a", "a1", 10)
        dev.submit(1, "b", "b1", 5)
        dev.submit(1.5, "c", "c1", 7)
        while (t := dev.next_completion_ms()) is not None:
            assert dev.advance(t - 0.01) == []
            done = dev.advance(t)
            assert done and all(c.finished_ms == pytest.approx(t) for c in done)
        assert dev.pending() == 0


def test_usage_counts_busy_time_and_work_per_context() -> None:
    dev = DeviceScheduler(TS_SWITCH)
    dev.submit(0, "a", 1, 4)
    dev.submit(0, "b", 2, 4)
    dev.advance(20)
    u = dev.usage()
    assert u.now_ms == 20
    assert u.busy_ms == pytest.approx(8)  # the two 0.5 ms switches ran no job
    assert u.work_ms == pytest.approx({"a": 4, "b": 4})
    assert u.completed == {"a": 1, "b": 1}


def test_partial_work_is_counted_as_it_runs() -> None:
    dev = DeviceScheduler(CC)
    dev.submit(0, "a", 1, 10)
    dev.submit(0, "b", 2, 10)
    dev.advance(4)
    assert dev.usage().work_ms == pytest.approx({"a": 3, "b": 3})
    assert dev.active_contexts() == ("a", "b")


def test_the_seed_time_slicing_figure_with_busy_co_tenants() -> None:
    """The seeds: 10.5 ms alone. With co-tenants that never idle and the model last in the
    round robin, each of its 2 ms turns waits out one of theirs: 10.5 ms is five full turns
    and a half, so 5 rounds + the others' first turns + 0.5 ms."""
    for others, lo, hi in ((0, 10.5, 10.5), (2, 34.5, 34.5), (3, 46.5, 46.5)):
        dev = DeviceScheduler(TS)
        for k in range(others):
            for j in range(20):
                dev.submit(0, f"co{k}", j, 50.0)
        dev.submit(0, "model", "w", 10.5)
        (t,) = [c.finished_ms for c in dev.advance(1e5) if c.job == "w"]
        assert lo - 1e-6 <= t <= hi + 1e-6


def test_time_never_goes_back_and_work_is_positive() -> None:
    dev = DeviceScheduler(TS)
    dev.advance(5)
    with pytest.raises(ValueError, match="time went back"):
        dev.advance(4)
    with pytest.raises(ValueError, match="work_ms"):
        dev.submit(6, "a", 1, 0)
    with pytest.raises(ValueError, match="work_ms"):
        dev.submit(6, "a", 1, math.nan)


def test_concurrent_speed_holds_past_the_last_point() -> None:
    m = SharingModel(SharingPolicy.CONCURRENT, throughput={1: 1.0, 2: 1.6, 4: 2.0})
    assert [m.speed(k) for k in (0, 1, 2, 3, 4, 8)] == [0.0, 1.0, 1.6, 1.6, 2.0, 2.0]
    assert TS.speed(3) == 1.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"policy": "fair"},
         "dev.yaml: sharing.policy = 'fair': must be one of exclusive, timeslice, concurrent"),
        ({"quantum_ms": 0}, "dev.yaml: sharing.quantum_ms = 0.0: must be > 0"),
        ({"policy": "concurrent", "throughput": {1: 1.0, 2: 2.5}},
         "dev.yaml: sharing.throughput[2] = 2.5: must be >= throughput[1] (1) and <= 2"),
        ({"policy": "concurrent", "throughput": {2: 1.5}},
         "dev.yaml: sharing.throughput = {2: 1.5}: must map 1 to 1.0"),
        ({"policy": "concurrent", "throughput": [1, 2]}, "dev.yaml: sharing.throughput = [1, 2]: must map"),
        ({"quantum": 2}, "dev.yaml: sharing.quantum = 2: unknown field (did you mean quantum_ms?)"),
    ],
)
def test_parse_sharing_errors_name_file_field_value(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_sharing(Section("dev.yaml", data, "sharing"))
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_parse_sharing_defaults_and_round_trip() -> None:
    m = parse_sharing(Section("dev.yaml", {}, "sharing"))
    assert m == SharingModel()
    assert m.policy is SharingPolicy.TIMESLICE
    c = parse_sharing(Section("dev.yaml", {"policy": "concurrent", "throughput": {1: 1, 2: 1.4}}, "sharing"))
    assert c.to_dict() == {"policy": "concurrent", "throughput": {1: 1.0, 2: 1.4}}
