"""From exposition text and stats JSON to samples, and on to windows: pure, table and property tests."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autobatch.errors import ScrapeError, SignalError
from autobatch.signals import (
    TritonSample,
    parse_metrics,
    parse_stats,
    parse_utilization,
    window_between,
)
from autobatch.signals.parse import COUNTERS

M = "emulated_accelerator"

# Shape copied from Triton 2.51's /metrics (summary_latencies=true), with a second
# version and a second model added.
TRITON_TEXT = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="emulated_accelerator",version="1"} 5
nv_inference_request_success{model="emulated_accelerator",version="2"} 7
nv_inference_request_success{model="dense_mlp",version="1"} 1000
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="emulated_accelerator",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="emulated_accelerator",reason="REJECTED",version="1"} 2
nv_inference_request_failure{model="emulated_accelerator",reason="REJECTED",version="2"} 1
# TYPE nv_inference_count counter
nv_inference_count{model="emulated_accelerator",version="1"} 10
nv_inference_count{model="emulated_accelerator",version="2"} 14
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="emulated_accelerator",version="1"} 5
nv_inference_exec_count{model="emulated_accelerator",version="2"} 3
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{model="emulated_accelerator",version="1"} 70377
nv_inference_request_duration_us{model="emulated_accelerator",version="2"} 1000
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="emulated_accelerator",version="1"} 12433
nv_inference_queue_duration_us{model="emulated_accelerator",version="2"} 100
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="emulated_accelerator",version="1"} 57189
nv_inference_compute_infer_duration_us{model="emulated_accelerator",version="2"} 800
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="emulated_accelerator",version="1"} 3
nv_inference_pending_request_count{model="emulated_accelerator",version="2"} 1
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0
# TYPE nv_inference_request_summary_us summary
nv_inference_request_summary_us_count{model="emulated_accelerator",version="1"} 5
nv_inference_request_summary_us_sum{model="emulated_accelerator",version="1"} 70377
nv_inference_request_summary_us{model="emulated_accelerator",version="1",quantile="0.5"} 8729
nv_inference_request_summary_us{model="emulated_accelerator",version="1",quantile="0.95"} 8800
nv_inference_request_summary_us{model="emulated_accelerator",version="1",quantile="0.99"} 9100
nv_inference_request_summary_us{model="emulated_accelerator",version="2",quantile="0.95"} 9900
nv_inference_request_summary_us{model="emulated_accelerator",version="2",quantile="0.99"} Nan
"""


def test_parse_metrics_sums_versions_and_ignores_other_models() -> None:
    s = parse_metrics(TRITON_TEXT, M)
    assert s.counters["nv_inference_request_success"] == 12
    assert s.counters["nv_inference_count"] == 24
    assert s.counters["nv_inference_exec_count"] == 8
    assert s.counters["nv_inference_queue_duration_us"] == 12533
    assert s.failures == {"OTHER": 0, "REJECTED": 3}
    assert s.pending == 4
    # quantiles of different versions cannot be added: the worst one, NaN ignored
    assert s.p95_us == 9900
    assert s.p99_us == 9100
    assert s.utilization is None  # CPU server: absent, not 0


def test_parse_metrics_one_version() -> None:
    s = parse_metrics(TRITON_TEXT, M, version="2")
    assert s.counters["nv_inference_request_success"] == 7
    assert s.failures == {"REJECTED": 1}
    assert s.p99_us is None  # only a NaN quantile: no observation in the summary window


def test_parse_metrics_unknown_model_has_no_series() -> None:
    s = parse_metrics(TRITON_TEXT, "no_such_model")
    assert s.counters == {} and s.pending is None and s.failures == {}


@pytest.mark.parametrize(
    "text",
    [
        "nv_inference_count{model=",  # cut mid-line (a partial scrape)
        '{"model_stats": []}',  # JSON where exposition text was expected
        'nv_inference_count{model="m",model="m"} 1',  # duplicate label
        "nv_inference_count{model=\"m\"} one",  # not a number
    ],
)
def test_malformed_exposition_is_a_scrape_error(text: str) -> None:
    with pytest.raises(ScrapeError) as info:
        parse_metrics(text, "m")
    assert info.value.reason == "malformed"


def test_a_series_twice_is_malformed_not_double_counted() -> None:
    text = 'nv_inference_count{model="m",version="1"} 1\nnv_inference_count{model="m",version="1"} 1\n'
    with pytest.raises(ScrapeError, match="twice"):
        parse_metrics(text, "m")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('nv_gpu_utilization{gpu_uuid="a"} 0.5\nnv_gpu_utilization{gpu_uuid="b"} 0.7\n', 0.6),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 45\n', 0.45),
        # Triton's own gauge wins over dcgm-exporter's
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 45\nnv_gpu_utilization{gpu_uuid="a"} 0.9\n', 0.9),
        ("nv_cpu_utilization 0.3\n", None),
        ('nv_gpu_utilization{gpu_uuid="a"} NaN\n', None),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 250\n', None),  # out of range: ignored, not clamped
        ("", None),
    ],
)
def test_utilization(text: str, expected: float | None) -> None:
    got = parse_utilization(text)
    assert got == pytest.approx(expected) if expected is not None else got is None


STATS = {
    "model_stats": [
        {
            "name": M,
            "version": "1",
            "inference_count": 10,
            "execution_count": 5,
            "inference_stats": {"success": {"count": 5, "ns": 70380523}},
            "batch_stats": [
                {"batch_size": 2, "compute_infer": {"count": 5, "ns": 57191523}},
            ],
        },
        {
            "name": M,
            "version": "2",
            "inference_count": 4,
            "execution_count": 3,
            "inference_stats": {"success": {"count": 4, "ns": 1}},
            "batch_stats": [
                {"batch_size": 1, "compute_infer": {"count": 2, "ns": 2000000}},
                {"batch_size": 2, "compute_infer": {"count": 1, "ns": 3000000}},
            ],
        },
    ]
}


def test_parse_stats_sums_versions() -> None:
    s = parse_stats(STATS, M)
    assert (s.inference_count, s.execution_count, s.success_count) == (14, 8, 9)
    assert s.batch_stats == ((1, 2, 2000000), (2, 6, 60191523))
    assert parse_stats(STATS, M, version="2").execution_count == 3


def test_parse_stats_missing_model() -> None:
    with pytest.raises(ScrapeError) as info:
        parse_stats(STATS, "other")
    assert info.value.reason == "missing_series"


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"model_stats": {}},
        {"model_stats": [{"name": M}]},
        {"model_stats": [{"name": M, "inference_count": "10", "execution_count": 1,
                          "inference_stats": {"success": {"count": 1}}}]},
        {"model_stats": [{"name": M, "inference_count": 1, "execution_count": 1,
                          "inference_stats": {"success": {"count": 1}},
                          "batch_stats": [{"batch_size": 1}]}]},
        {"model_stats": [{"name": M, "inference_count": -1, "execution_count": 1,
                          "inference_stats": {"success": {"count": 1}}}]},
    ],
)
def test_parse_stats_malformed(data: object) -> None:
    with pytest.raises(ScrapeError) as info:
        parse_stats(data, M)
    assert info.value.reason == "malformed"


# -- properties ----------------------------------------------------------------------------

exposition_alphabet = st.sampled_from(
    list('nv_inference_countrequestsuccexmodl{}="\',.# \n\t\\-+0123456789eENaIfTYPEHLPquantile')
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.text(alphabet=exposition_alphabet, max_size=300)))
def test_arbitrary_text_raises_nothing_but_signal_error(text: str) -> None:
    try:
        sample = parse_metrics(text, "m")
    except SignalError:
        return
    # Whatever parsed must also difference without raising.
    a = TritonSample(taken_s=0.0, metrics=sample)
    b = TritonSample(taken_s=1.0, metrics=sample)
    window_between(a, b)


counts = st.integers(min_value=0, max_value=10**9).map(float)
odd = st.floats(allow_nan=True, allow_infinity=True)


@st.composite
def values(draw: st.DrawFn) -> float:
    """Mostly a plausible count; one time in 40 any float (NaN, inf, negative, huge)."""
    return draw(odd) if draw(st.integers(0, 39)) == 0 else draw(counts)


def _render(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    text = repr(value).replace("nan", "NaN").replace("inf", "Inf")
    return f"{name}{{{inner}}} {text}\n"


@st.composite
def intervals(draw: st.DrawFn) -> float:
    """Seconds between the scrapes: mostly forward, sometimes zero or backward (clock step)."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.floats(min_value=-5, max_value=0))
    return draw(st.floats(min_value=1e-6, max_value=60))


@st.composite
def scrape_pairs(draw: st.DrawFn) -> tuple[str, str]:
    """Two Triton-like scrapes: mostly a later one that grew from the earlier one, with
    series dropped, values NaN/inf/negative, resets and reason sets changing now and then."""
    before: list[str] = []
    after: list[str] = []
    versions = draw(st.sampled_from([("1",), ("1", "2")]))
    reasons = sorted(draw(st.sets(st.sampled_from(["REJECTED", "OTHER", "BACKEND"]))))
    series: list[tuple[str, dict[str, str]]] = []
    for name in (*COUNTERS, "nv_inference_pending_request_count"):
        series += [(name, {"model": "m", "version": v}) for v in versions]
    series += [("nv_inference_request_failure", {"model": "m", "reason": r, "version": "1"})
               for r in reasons]
    series += [("nv_inference_request_summary_us", {"model": "m", "version": "1", "quantile": q})
               for q in ("0.95", "0.99")]
    series.append(("nv_gpu_utilization", {"gpu_uuid": "a"}))
    for name, labels in series:
        v0 = draw(values())
        grown = v0 + draw(counts) if math.isfinite(v0) else v0
        v1 = draw(values()) if draw(st.integers(0, 39)) == 0 else grown
        if draw(st.integers(0, 49)) > 0:  # mostly present: most windows are good
            before.append(_render(name, labels, v0))
        if draw(st.integers(0, 49)) > 0:
            after.append(_render(name, labels, v1))
    return "".join(draw(st.permutations(before))), "".join(draw(st.permutations(after)))


@settings(max_examples=300, deadline=None)
@given(scrape_pairs(), intervals())
def test_window_from_any_two_scrapes_is_finite_or_stale(pair: tuple[str, str], dt: float) -> None:
    a, b = pair
    before = TritonSample(taken_s=1000.0, metrics=parse_metrics(a, "m"))
    after = TritonSample(taken_s=1000.0 + dt, metrics=parse_metrics(b, "m"))
    w = window_between(before, after)
    if w.stale:
        assert w.stale_reason and w.stale_detail
        return
    numbers = [w.success_rps, w.inference_rps, w.exec_rps, *w.failure_rps.values(),
               *w.batch_curve_ms.values()]
    numbers += [v for v in (w.mean_batch_size, w.mean_queue_ms, w.mean_compute_ms,
                            w.mean_request_ms, w.pending_requests, w.pending_delta, w.p95_ms,
                            w.p99_ms, w.utilization) if v is not None]
    assert all(math.isfinite(v) for v in numbers)
    assert w.success_rps >= 0 and w.exec_rps >= 0 and w.inference_rps >= 0
    assert w.interval_s > 0
    assert w.utilization is None or 0 <= w.utilization <= 1
