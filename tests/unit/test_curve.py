"""Batch curves: loading, validation, interpolation flags (pure, table-driven)."""

from __future__ import annotations

import pytest

from autobatch.curve import BatchCurve, PointKind, load_curve
from autobatch.errors import ConfigError
from autobatch.signals.parse import curve_from_batch_stats

FP16 = {1: 9.82, 2: 20.36, 3: 32.71, 4: 46.15, 8: 103.77, 16: 221.25}


@pytest.mark.parametrize(
    ("batch", "ms", "kind"),
    [
        (1, 9.82, PointKind.MEASURED),
        (4, 46.15, PointKind.MEASURED),
        (6, (46.15 + 103.77) / 2, PointKind.INTERPOLATED),
        (12, (103.77 + 221.25) / 2, PointKind.INTERPOLATED),
        (32, 221.25 + (221.25 - 103.77) / 8 * 16, PointKind.EXTRAPOLATED),
    ],
)
def test_estimate_flags_measured_interpolated_extrapolated(batch, ms, kind):
    est = BatchCurve(FP16).estimate(batch)
    assert est.ms == pytest.approx(ms)
    assert est.kind is kind


def test_single_point_extrapolates_without_gain():
    curve = BatchCurve({3: 20.0})
    assert curve.estimate(6).ms == pytest.approx(40.0)
    assert curve.estimate(6).kind is PointKind.EXTRAPOLATED


def test_extrapolation_can_be_refused():
    with pytest.raises(ConfigError, match="outside the measured sizes"):
        BatchCurve({1: 4.69, 4: 9.29}).ms(8, allow_extrapolation=False)


@pytest.mark.parametrize(
    ("name", "gain_at", "expect_gain"),
    [
        ("laptop-512x288-fp16.yaml", 4, False),
        ("laptop-256x144-fp16.yaml", 4, True),
        ("server-512x288-fp16.yaml", 3, True),
    ],
)
def test_shared_curves_load_and_show_their_gain(curves_dir, name, gain_at, expect_gain):
    curve = load_curve(curves_dir / name)
    assert (curve.gain(gain_at) < 1.0) is expect_gain


# The published T4 tables (curves/README.md): the issue's figures are ResNet-50's
# "Latency Avg" column, and every file names where it comes from.
T4_CURVES = {
    "t4-resnet50-fp16.yaml": ("Latency Avg", {1: 12.96, 8: 12.82, 16: 15.8, 32: 29.54}),
    "t4-resnet50-fp32.yaml": ("Latency Avg", {1: 10.7, 8: 22.41, 32: 77.62}),
    "t4-bert-base-seq128-fp16.yaml": ("Latency-50%(ms)", {1: 10.93, 8: 27.77}),
    "t4-bert-base-seq128-fp32.yaml": ("Latency-50%(ms)", {1: 18.52, 8: 80.98}),
    "t4-bert-large-seq384-fp16.yaml": ("Latency-50%(ms)", {1: 43.72, 8: 208.95}),
}


@pytest.mark.parametrize("name", sorted(T4_CURVES))
def test_published_gpu_curves_hold_their_source_and_figures(curves_dir, name):
    curve = load_curve(curves_dir / name)
    column, figures = T4_CURVES[name]
    assert curve.meta["column"] == column
    assert curve.meta["source"].startswith("https://github.com/NVIDIA/DeepLearningExamples/")
    assert "T4" in curve.meta["device"] and curve.meta["software"] and curve.meta["table"]
    for batch, ms in figures.items():
        assert curve.estimate(batch).kind is PointKind.MEASURED
        assert curve.estimate(batch).ms == ms
    assert curve.gain(8) < 0.65  # batching pays on every one of them, by different amounts


def test_best_batch_and_throughput():
    curve = BatchCurve({1: 4.69, 4: 9.29})
    assert curve.best_batch() == 4
    assert curve.throughput_rps(4) == pytest.approx(4000 / 9.29)
    assert BatchCurve(FP16).best_batch() == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("points: {}", "points = {}: must be a non-empty mapping"),
        ("points: {0: 1.0}", "batch sizes must be integers >= 1"),
        ("points: {x: 1.0}", "batch sizes must be integers >= 1"),
        ("points: {1: -2}", "points[1] = -2.0: must be > 0"),
        ("points: {1: 2}\nunit: hours", "unit = 'hours': must be one of ms, us, s"),
        ("name: a", "points: required field is missing"),
        ("[1, 2]", "(top level) = [1, 2]: must be a mapping"),
        # One batch size in two spellings: which time holds was the loader's guess.
        ("points: {1: 10, '1': 99}", "points.1 = '1': batch size 1 is given twice (also as 1)"),
        ("points: {'1': 10, ' 1': 99}", "batch size 1 is given twice (also as '1')"),
        ("points: {2147483648: 10}", "points.2147483648 = 2147483648: batch sizes must be integers >= 1 "
                                     "and <= 2147483647"),
        # A repeated CSV row: which time holds was the last row's.
        ("batch_size,ms\n1,5\n1,500\n2,6\n", "row 2: batch_size = 1: given twice (row 1 has it too)"),
        ("batch_size,ms\n4294967296,5\n", "batch sizes must be integers >= 1 and <= 2147483647"),
    ],
)
def test_bad_curve_files_name_the_field(tmp_path, text, message):
    path = tmp_path / ("c.csv" if text.startswith("batch_size") else "c.yaml")
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_curve(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_units_are_converted_to_ms(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("unit: us\npoints: {1: 1500, 2: 2500}\n")
    assert load_curve(path).points == {1: 1.5, 2: 2.5}


def test_csv_round_trip(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("batch_size,ms\n1,4.0\n8,12.5\n")
    assert load_curve(path).points == {1: 4.0, 8: 12.5}
    bad = tmp_path / "bad.csv"
    bad.write_text("batch_size,ms\n1,fast\n")
    with pytest.raises(ConfigError, match="row 1: ms = 'fast'"):
        load_curve(bad)


def test_yaml_round_trip(tmp_path):
    curve = BatchCurve(FP16, name="fp16", meta={"device": "laptop"})
    path = tmp_path / "c.yaml"
    path.write_text(curve.to_yaml())
    again = load_curve(path)
    assert again.points == curve.points
    assert again.meta["device"] == "laptop"


def _stats(rows):
    return [
        {"batch_size": b, "compute_infer": {"count": c, "ns": ns}} for b, (c, ns) in rows.items()
    ]


def test_curve_from_batch_stats_uses_the_delta():
    before = _stats({1: (10, 50_000_000), 4: (2, 20_000_000)})
    after = _stats({1: (20, 100_000_000), 4: (2, 20_000_000), 8: (5, 75_000_000)})
    curve = curve_from_batch_stats(after, before)
    assert curve is not None
    assert curve.points == {1: 5.0, 8: 15.0}  # batch 4 did not run in between


def test_curve_from_batch_stats_none_without_traffic():
    rows = _stats({1: (10, 50_000_000)})
    assert curve_from_batch_stats(rows, rows) is None


@pytest.mark.parametrize(
    "points",
    [{1: 7.9, 2: 15.5, 4: 15.7, 32: 33.2}, {1: 10.0}, {4: 2.0, 8: 30.0}, {10: 50.0, 20: 5.0},
     {3: 9.0, 5: 1.0, 9: 20.0}],
)
def test_the_sizes_to_try_hold_the_best_throughput_of_every_size(points):
    # Past `every_up_to` only the sizes where the estimate changes formula are tried
    # (a max_batch_size of 2**31-1 was 2**31 estimates); the best is the same.
    from autobatch.plan.simulator import ServiceModel

    curve = BatchCurve(points)
    for over in (0.0, 0.5):
        service = ServiceModel(curve, batch_overhead_ms=over, request_overhead_ms=over / 10)
        for top in (1, 7, 40, 333):
            best = max(service.capacity_rps(b) for b in range(1, top + 1))
            assert max(service.capacity_rps(b) for b in curve.sizes_to_try(top, every_up_to=0)) == best
    assert len(curve.sizes_to_try(2**31 - 1)) < 100_100
    assert curve.sizes_to_try(50) == list(range(1, 51))
