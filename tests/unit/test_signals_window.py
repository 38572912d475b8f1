"""Pure core of the signals: differencing samples, staleness, the trace format, PromQL."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autobatch.errors import ConfigError, ScrapeError
from autobatch.signals import (
    MetricsSample,
    PromQL,
    StaleReason,
    StatsSample,
    TritonSample,
    Window,
    window_between,
    window_from_results,
)
from autobatch.signals.parse import COUNTERS


def metrics(
    success: float = 0,
    count: float = 0,
    execs: float = 0,
    queue_us: float = 0,
    compute_us: float = 0,
    request_us: float = 0,
    *,
    pending: float | None = 0,
    failures: dict[str, float] | None = None,
    p95_us: float | None = None,
    p99_us: float | None = None,
    drop: tuple[str, ...] = (),
) -> MetricsSample:
    counters = dict(zip(COUNTERS, (success, count, execs, queue_us, compute_us, request_us)))
    for name in drop:
        del counters[name]
    return MetricsSample(
        model="m",
        counters=counters,
        failures={"REJECTED": 0.0, "OTHER": 0.0} if failures is None else failures,
        pending=pending,
        p95_us=p95_us,
        p99_us=p99_us,
    )


def stats(execs: int, items: int, rows: tuple[tuple[int, int, int], ...] = ()) -> StatsSample:
    return StatsSample(model="m", inference_count=items, execution_count=execs,
                       success_count=items, batch_stats=rows)


BEFORE = TritonSample(
    taken_s=100.0,
    metrics=metrics(100, 200, 50, 10_000, 20_000, 40_000, pending=2,
                    failures={"REJECTED": 4.0, "OTHER": 0.0}),
    stats=stats(50, 200, ((1, 10, 10_000_000), (4, 40, 200_000_000))),
)
AFTER = TritonSample(
    taken_s=102.0,
    metrics=metrics(300, 800, 200, 610_000, 1_220_000, 2_240_000, pending=5,
                    failures={"REJECTED": 10.0, "OTHER": 0.0}, p95_us=12_500, p99_us=20_000),
    stats=stats(200, 800, ((1, 10, 10_000_000), (4, 190, 1_150_000_000))),
    utilization=0.42,
)


def test_window_between() -> None:
    w = window_between(BEFORE, AFTER)
    assert not w.stale and w.source == "triton"
    assert (w.start_s, w.end_s, w.interval_s) == (100.0, 102.0, 2.0)
    assert w.success_rps == 100.0
    assert w.failure_rps == {"OTHER": 0.0, "REJECTED": 3.0}
    assert w.request_rps == 103.0
    assert w.inference_rps == 300.0
    assert w.exec_rps == 75.0
    assert w.mean_batch_size == 4.0
    assert w.mean_queue_ms == 3.0  # 600 ms of queueing over 200 requests
    assert w.mean_compute_ms == 6.0
    assert w.mean_request_ms == 11.0
    assert (w.pending_requests, w.pending_delta) == (5, 3)
    assert (w.p95_ms, w.p99_ms) == (12.5, 20.0)
    # batch 1 did not run in the window, so it is not a point of the curve
    assert w.batch_curve_ms == {4: pytest.approx(950 / 150)}
    assert w.utilization == 0.42


def test_an_idle_window_has_no_means_rather_than_zeros() -> None:
    still = replace(BEFORE, taken_s=101.0)
    w = window_between(BEFORE, still)
    assert not w.stale
    assert w.success_rps == 0.0 and w.exec_rps == 0.0
    assert w.mean_batch_size is None and w.mean_queue_ms is None and w.mean_compute_ms is None
    assert w.batch_curve_ms == {}
    assert w.utilization is None


def _with(sample: TritonSample, **changes: Any) -> TritonSample:
    return replace(sample, **changes)


def _counter(sample: TritonSample, name: str, value: float) -> TritonSample:
    counters = dict(sample.metrics.counters)
    counters[name] = value
    return replace(sample, metrics=replace(sample.metrics, counters=counters))


STALE_CASES = {
    # a server restart: every counter back near 0
    "restart": (BEFORE, _with(AFTER, metrics=metrics(3, 3, 3, 10, 10, 10),
                              stats=stats(3, 3, ((1, 3, 3000),))), "counter_reset"),
    **{
        f"{name} fell": (BEFORE, _counter(AFTER, name, 1.0), "counter_reset")
        for name in COUNTERS
    },
    "a failure reason fell": (
        BEFORE, _with(AFTER, metrics=replace(AFTER.metrics, failures={"REJECTED": 1.0,
                                                                        "OTHER": 0.0})),
        "counter_reset"),
    # a reload with a config override: /metrics carries on, /stats restarts
    "stats restarted": (BEFORE, _with(AFTER, stats=stats(20, 40, ((1, 20, 1000),))),
                        "counter_reset"),
    "a batch_stats row fell": (
        BEFORE, _with(AFTER, stats=stats(200, 800, ((1, 2, 1), (4, 198, 2_000_000_000)))),
        "counter_reset"),
    # ... and after the new copy has already run more than the old one had: no
    # counter fell, but the two endpoints no longer agree
    "stats restarted and caught up": (
        BEFORE, _with(AFTER, stats=stats(140, 560, ((4, 140, 1_000_000_000),))), "counter_reset"),
    "missing counter later": (BEFORE, _with(AFTER, metrics=replace(
        AFTER.metrics, counters={k: v for k, v in AFTER.metrics.counters.items()
                                 if k != "nv_inference_exec_count"})), "missing_series"),
    "missing counter earlier": (_with(BEFORE, metrics=metrics(drop=("nv_inference_count",))),
                                AFTER, "missing_series"),
    "missing pending": (BEFORE, _with(AFTER, metrics=replace(AFTER.metrics, pending=None)),
                        "missing_series"),
    "failure reasons changed": (BEFORE, _with(AFTER, metrics=replace(
        AFTER.metrics, failures={"REJECTED": 10.0})), "missing_series"),
    "model unloaded": (BEFORE, _with(AFTER, metrics=MetricsSample(model="m")), "missing_series"),
    "NaN counter": (BEFORE, _counter(AFTER, "nv_inference_count", math.nan), "not_finite"),
    "inf counter": (_counter(BEFORE, "nv_inference_count", math.inf), AFTER, "not_finite"),
    "NaN pending": (BEFORE, _with(AFTER, metrics=replace(AFTER.metrics, pending=math.nan)),
                    "not_finite"),
    "negative counter": (_counter(BEFORE, "nv_inference_count", -5.0), AFTER, "malformed"),
    "same time": (BEFORE, _with(AFTER, taken_s=BEFORE.taken_s), "bad_interval"),
    "clock stepped back": (BEFORE, _with(AFTER, taken_s=99.0), "bad_interval"),
    # the wall clock jumped 12.3 s within a 1-s window (a paused virtual machine, resynced)
    "clock stepped forward": (_with(BEFORE, monotonic_s=500.0),
                              _with(AFTER, taken_s=AFTER.taken_s + 12.3,
                                    monotonic_s=500.0 + AFTER.taken_s - BEFORE.taken_s), "bad_interval"),
    "tiny interval overflows": (_with(BEFORE, taken_s=0.0), _with(AFTER, taken_s=1e-320),
                                "not_finite"),
}


@pytest.mark.parametrize(("before", "after", "reason"), STALE_CASES.values(), ids=STALE_CASES)
def test_stale_windows(before: TritonSample, after: TritonSample, reason: str) -> None:
    w = window_between(before, after)
    assert w.stale
    assert w.stale_reason == reason
    assert w.stale_detail  # a sentence for the log
    # a stale window carries no made-up numbers
    assert w.mean_batch_size is None and w.mean_queue_ms is None and w.p95_ms is None
    assert (w.start_s, w.end_s) == (before.taken_s, after.taken_s)


def test_a_few_executions_between_the_two_reads_are_not_a_reload() -> None:
    # /stats read a moment after /metrics: it already counts one more execution
    after = _with(AFTER, stats=stats(201, 804, ((1, 10, 10_000_000), (4, 191, 1_160_000_000))))
    assert not window_between(BEFORE, after).stale


def test_the_reads_own_time_widens_what_drift_a_busy_server_may_show() -> None:
    # /stats answered 10 executions after /metrics (75 a second: 133 ms apart), as a loaded
    # machine does: more than 5% of the window's 150, so a reload if the reads were quick;
    # reads that took 100 ms each can hold 15 executions (a make test, 2026-12-02: a 1 s
    # gateway step judged stale, "drifted apart by 3", and rolled back).
    after = _with(AFTER, stats=stats(210, 840, ((1, 10, 10_000_000), (4, 200, 1_170_000_000))))
    quick = window_between(BEFORE, after)
    assert quick.stale and "drifted apart by 10" in (quick.stale_detail or "")
    assert not window_between(_with(BEFORE, span_s=0.1), _with(after, span_s=0.1)).stale
    # ... and a copy that caught up is still a reload when the reads took that long
    caught_up = _with(AFTER, stats=stats(140, 560, ((4, 140, 1_000_000_000),)), span_s=0.1)
    assert window_between(_with(BEFORE, span_s=0.1), caught_up).stale_reason == "counter_reset"


def test_without_stats_there_is_no_curve_but_a_window() -> None:
    w = window_between(_with(BEFORE, stats=None), AFTER)
    assert not w.stale and w.batch_curve_ms == {} and w.mean_batch_size == 4.0


def test_samples_of_two_models_are_a_programming_error() -> None:
    other = _with(AFTER, metrics=replace(AFTER.metrics, model="x"))
    with pytest.raises(ValueError):
        window_between(BEFORE, other)


# -- age -----------------------------------------------------------------------------------


def test_aged() -> None:
    w = window_between(BEFORE, AFTER)
    assert w.age_s(110.0) == 8.0
    assert w.aged(110.0, 10.0) is w
    assert w.aged(110.0, None) is w
    old = w.aged(113.0, 10.0)
    assert old.stale and old.stale_reason == StaleReason.TOO_OLD.value
    assert "11.0 s old" in (old.stale_detail or "")
    reset = window_between(BEFORE, _counter(AFTER, "nv_inference_count", 0.0))
    assert reset.aged(1000.0, 1.0).stale_reason == "counter_reset"  # the first reason stays


# -- the trace format ----------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)
optional = st.none() | finite

windows_st = st.builds(
    Window,
    model=st.text(min_size=1, max_size=20),
    start_s=finite,
    end_s=finite,
    success_rps=finite,
    failure_rps=st.dictionaries(st.sampled_from(["REJECTED", "OTHER", "CANCELED"]), finite),
    inference_rps=finite,
    exec_rps=finite,
    mean_batch_size=optional,
    mean_queue_ms=optional,
    mean_compute_ms=optional,
    mean_request_ms=optional,
    pending_requests=optional,
    pending_delta=optional,
    p95_ms=optional,
    p99_ms=optional,
    batch_curve_ms=st.dictionaries(st.integers(1, 128), finite),
    utilization=st.none() | st.floats(0, 1),
    stale=st.booleans(),
    stale_reason=st.none() | st.sampled_from([r.value for r in StaleReason]),
    source=st.sampled_from(["triton", "prometheus"]),
    stale_detail=st.none() | st.text(max_size=50),
)


@settings(max_examples=200, deadline=None)
@given(windows_st)
def test_json_line_round_trip(w: Window) -> None:
    line = json.dumps(w.to_dict(), allow_nan=False)
    back = Window.from_dict(json.loads(line))
    assert back == w


def test_real_window_round_trip_and_fields() -> None:
    w = window_between(BEFORE, AFTER)
    d = json.loads(json.dumps(w.to_dict()))
    assert d["batch_curve_ms"] == {"4": pytest.approx(950 / 150)}
    assert d["interval_s"] == 2.0 and d["request_rps"] == 103.0
    assert d["stale_detail"] is None
    assert Window.from_dict(d) == w
    # an older trace without the newer fields still reads
    del d["stale_detail"]
    assert Window.from_dict(d).stale_detail is None


MINIMAL = {"model": "m", "start_s": 0.0, "end_s": 2.0}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"end_s": float("nan")}, "window.end_s = nan: must be a finite number"),
        ({"start_s": None}, "window.start_s = None: must be a finite number"),
        ({"success_rps": "5"}, "window.success_rps = '5': must be a finite number"),
        ({"p95_ms": float("inf")}, "window.p95_ms = inf: must be a finite number or null"),
        ({"mean_batch_size": True}, "window.mean_batch_size = True: must be a finite number or null"),
        ({"instance_count": 1.5}, "window.instance_count = 1.5: must be an integer or null"),
        ({"failure_rps": [1]}, "window.failure_rps = [1]: must be a JSON object of reason: number"),
        ({"failure_rps": {"OTHER": "x"}}, "window.failure_rps['OTHER'] = 'x': must be a finite number"),
        ({"batch_curve_ms": {"0": 1.0}}, "window.batch_curve_ms = {'0': 1.0}: keys must be batch sizes"),
        ({"batch_curve_ms": {"4": float("nan")}}, "window.batch_curve_ms['4'] = nan: must be a finite"),
        ({"stale": "no"}, "window.stale = 'no': must be true or false"),
        ({"model": 5}, "window.model = 5: must be a string"),
        ({"stale_reason": 5}, "window.stale_reason = 5: must be a string or null"),
    ],
)
def test_from_dict_names_a_bad_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        Window.from_dict({**MINIMAL, **change}, "window")
    assert str(info.value).startswith(message), str(info.value)


def test_from_dict_reads_nulls_and_integers() -> None:
    w = Window.from_dict({**MINIMAL, "failure_rps": None, "batch_curve_ms": None, "p95_ms": None,
                          "success_rps": 3, "instance_count": 2.0})
    assert w.failure_rps == {} and w.batch_curve_ms == {} and w.p95_ms is None
    assert w.success_rps == 3.0 and w.instance_count == 2
    with pytest.raises(ValueError, match="^window = \\[1\\]: must be a JSON object"):
        Window.from_dict([1], "window")  # type: ignore[arg-type]


# -- PromQL --------------------------------------------------------------------------------


def test_promql_queries_use_the_selector_and_range() -> None:
    q = PromQL("dense_mlp", 'job="triton",namespace="prod"', 15).queries()
    assert q["success"] == (
        'sum by (model) (rate(nv_inference_request_success{model="dense_mlp",'
        'job="triton",namespace="prod"}[15000ms]))'
    )
    assert q["failure"].startswith("sum by (reason) (rate(nv_inference_request_failure{")
    assert q["nv_gpu_util"] == 'avg(nv_gpu_utilization{job="triton",namespace="prod"})'
    assert 'quantile="0.95"' in q["p95_us"] and q["p95_us"].startswith("max by (model)")
    assert all("model=\"dense_mlp\"" in v for k, v in q.items() if "util" not in k)


def test_promql_quotes_the_model_name() -> None:
    q = PromQL('we"ird\\', range_s=1).queries()
    assert 'model="we\\"ird\\\\"' in q["success"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"model": ""}, "model"),
        ({"model": "m", "range_s": 0}, "range_s"),
        ({"model": "m", "range_s": math.nan}, "range_s"),
        ({"model": "m", "selector": '{job="x"}'}, "selector"),
        ({"model": "m", "utilization_selector": "{"}, "utilization_selector"),
    ],
)
def test_promql_bad_input(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        PromQL(**kwargs)
    assert info.value.field == field
    assert "\n" not in str(info.value)


def vector(value: float | str, **labels: str) -> list[dict[str, Any]]:
    return [{"metric": labels, "value": [1000.0, str(value)]}]


GOOD = {
    "success": vector(100, model="m"),
    "failure": vector(2, reason="REJECTED") + vector(0, reason="OTHER"),
    "count": vector(300, model="m"),
    "exec": vector(75, model="m"),
    "queue_us": vector(300_000, model="m"),
    "compute_us": vector(600_000, model="m"),
    "request_us": vector(1_100_000, model="m"),
    "pending": vector(5, model="m"),
    "pending_delta": vector(-1, model="m"),
    "p95_us": vector(12_500, model="m"),
    "p99_us": [],
    "resets": vector(0, model="m"),
    "newest_s": vector(998.5, model="m"),
    "nv_gpu_util": [],
    "dcgm_util": vector(0.45),
}
Q = PromQL("m", range_s=10)


def test_window_from_results() -> None:
    w = window_from_results(GOOD, queries=Q, evaluated_s=1000.0)
    assert not w.stale and w.source == "prometheus"
    # the window ends at the newest scrape, not at the query time
    assert (w.start_s, w.end_s) == (988.5, 998.5)
    assert (w.success_rps, w.inference_rps, w.exec_rps) == (100, 300, 75)
    assert w.failure_rps == {"OTHER": 0, "REJECTED": 2}
    assert w.mean_batch_size == 4 and w.mean_queue_ms == 3 and w.mean_compute_ms == 6
    assert (w.pending_requests, w.pending_delta) == (5, -1)
    assert (w.p95_ms, w.p99_ms) == (12.5, None)
    assert w.batch_curve_ms == {}
    assert w.utilization == 0.45


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"success": []}, "missing_series"),
        ({"pending": []}, "missing_series"),
        ({"resets": vector(1, model="m")}, "counter_reset"),
        ({"exec": vector("NaN", model="m")}, "not_finite"),
        ({"failure": vector("+Inf", reason="OTHER")}, "not_finite"),
        ({"count": vector(-3, model="m")}, "counter_reset"),
    ],
)
def test_window_from_results_stale(change: dict[str, Any], reason: str) -> None:
    w = window_from_results({**GOOD, **change}, queries=Q, evaluated_s=1000.0)
    assert w.stale and w.stale_reason == reason and w.stale_detail


def test_window_from_results_idle_and_no_accelerator() -> None:
    idle = {**GOOD, "success": vector(0, model="m"), "exec": vector(0, model="m"),
            "dcgm_util": [], "newest_s": []}
    w = window_from_results(idle, queries=Q, evaluated_s=1000.0)
    assert not w.stale
    assert w.mean_queue_ms is None and w.mean_batch_size is None and w.utilization is None
    assert w.end_s == 1000.0


@pytest.mark.parametrize(
    "result",
    [
        [{"metric": {}, "value": [1.0]}],
        [{"metric": {}}],
        ["x"],
        vector(1, model="m") + vector(2, model="m"),  # two series where one was summed
    ],
)
def test_window_from_results_malformed(result: list[Any]) -> None:
    with pytest.raises(ScrapeError) as info:
        window_from_results({**GOOD, "exec": result}, queries=Q, evaluated_s=1000.0)
    assert info.value.reason == "malformed"


def test_public_names() -> None:
    import autobatch.signals as signals

    assert sorted(signals.__all__) == sorted([
        "MetricsSample", "PromQL", "PrometheusSource", "ReadTarget", "SignalSettings", "SignalSource",
        "StaleReason", "StatsSample", "TritonSample", "TritonSource", "VariantsSource", "Window",
        "build_source", "build_step_signals", "build_variants_source", "combine_windows", "make_source",
        "parse_metrics", "parse_stats", "parse_utilization", "watch", "window_between",
        "window_from_results", "windows",
    ])
    assert all(hasattr(signals, name) for name in signals.__all__)


@pytest.mark.parametrize(("wall_extra_s", "stale"), [(0.0, False), (0.2, False), (-0.2, False), (0.3, True),
                                                     (-0.3, True), (12.3, True)])
def test_a_window_spanning_a_step_of_the_wall_clock_is_stale(wall_extra_s: float, stale: bool) -> None:
    """Within 0.25 s of the monotonic clock's time the wall clock kept time (NTP slews at most
    500 ppm); further, its rates would divide by the wrong time."""
    dt = AFTER.taken_s - BEFORE.taken_s
    w = window_between(_with(BEFORE, monotonic_s=500.0),
                       _with(AFTER, taken_s=AFTER.taken_s + wall_extra_s, monotonic_s=500.0 + dt))
    assert w.stale is stale
    if stale:
        assert w.stale_reason == "bad_interval" and "monotonic clock moved" in (w.stale_detail or "")
    # without a monotonic reading on both sides there is nothing to compare
    assert not window_between(BEFORE, _with(AFTER, monotonic_s=500.0 + dt + 5.0)).stale
