"""The device as the model sees it: the stretch of its batches and who else uses the device (pure).

The arithmetic of :func:`autobatch.signals.stretch.device_view`, and each source's
use of it: the direct source from ``batch_stats``, the PromQL approximation, the
gateway's combined window, ``utilization: none``. The real device and Triton
measure it in tests/integration/test_device_stretch.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from autobatch.curve import BatchCurve
from autobatch.signals.factory import _NoUtilization
from autobatch.signals.prometheus import PromQL, window_from_results
from autobatch.signals.stretch import DeviceView, curve_ms, device_view
from autobatch.signals.triton import window_between
from autobatch.signals.variants import combine_windows
from autobatch.signals.window import Window
from tests.unit.test_signals_window import AFTER, BEFORE

T4 = BatchCurve(points={1: 12.96, 2: 13.18, 4: 12.99, 8: 12.82, 16: 15.8, 32: 29.54}, name="t4")


@pytest.mark.parametrize(
    ("rows", "util", "view"),
    [
        # The device to itself: every batch took its curve time; 40 x 12.82 ms = 51% of 1 s.
        ([(8, 40, 40 * 12.82)], 0.52, DeviceView(1.0, 0.5128, 0.0072)),
        # Two co-tenants' turns: three times the curve time; the others used 49% of it.
        ([(8, 40, 3 * 40 * 12.82)], 1.0, DeviceView(3.0, 0.5128, 0.4872)),
        # Two sizes: observed over expected, summed (not a mean of ratios).
        ([(1, 10, 10 * 12.96 * 2), (32, 10, 10 * 29.54)], None,
         DeviceView((10 * 12.96 * 2 + 10 * 29.54) / (10 * (12.96 + 29.54)), 0.425, None)),
        # The model ran nothing: all the utilisation is the others'.
        ([], 0.8, DeviceView(None, 0.0, 0.8)),
        # Utilisation under the model's own share (DCGM rounds, periods differ): never negative.
        ([(8, 40, 40 * 12.82)], 0.5, DeviceView(1.0, 0.5128, 0.0)),
    ],
)
def test_device_view(rows: list[tuple[float, float, float]], util: float | None, view: DeviceView) -> None:
    got = device_view(rows, 1.0, T4, util)
    for field, want in zip(DeviceView._fields, view):
        value = getattr(got, field)
        assert value == (pytest.approx(want) if want is not None else None), field


def test_without_a_curve_there_is_nothing_to_measure_against() -> None:
    assert device_view([(8, 40, 500.0)], 1.0, None, 0.9) == DeviceView(None, None, None)


def test_curve_ms_is_linear_between_whole_sizes() -> None:
    assert curve_ms(T4, 8) == pytest.approx(12.82)
    assert curve_ms(T4, 12) == pytest.approx(T4.ms(12))
    assert curve_ms(T4, 8.5) == pytest.approx((T4.ms(8) + T4.ms(9)) / 2)
    assert curve_ms(T4, 0.2) == pytest.approx(12.96)


def test_the_direct_source_measures_batch_stats_against_the_curve() -> None:
    # AFTER - BEFORE: 150 batches of 4 in 950 ms, over 2 s, utilisation 42%.
    curve = BatchCurve(points={1: 2.0, 4: 3.0})
    w = window_between(BEFORE, AFTER, curve)
    assert w.stretch == pytest.approx(950 / 450)
    assert w.own_device_share == pytest.approx(0.45 / 2)
    assert w.others_share == pytest.approx(0.42 - 0.225)
    assert Window.from_dict(w.to_dict()) == w
    plain = window_between(BEFORE, AFTER)
    assert (plain.stretch, plain.own_device_share, plain.others_share) == (None, None, None)
    no_util = window_between(BEFORE, replace(AFTER, utilization=None), curve)
    assert no_util.stretch == pytest.approx(950 / 450) and no_util.others_share is None


def _vec(value: float) -> list[dict[str, Any]]:
    return [{"metric": {"model": "m"}, "value": [1000.0, str(value)]}]


def test_promql_approximates_the_stretch_at_the_mean_batch() -> None:
    # 25 executions/s of 4 items, 8 ms each: every request carries its batch's 8 ms.
    values = {"success": 100.0, "count": 100.0, "exec": 25.0, "queue_us": 100_000.0,
              "compute_us": 800_000.0, "request_us": 1_500_000.0, "pending": 0.0,
              "pending_delta": 0.0, "newest_s": 1000.0, "dcgm_util": 0.3}
    results = {k: _vec(v) for k, v in values.items()}
    w = window_from_results(results, queries=PromQL("m", range_s=4.0), evaluated_s=1000.0,
                            curve=BatchCurve(points={1: 2.0, 4: 4.0}))
    assert w.stretch == pytest.approx(2.0)
    assert w.own_device_share == pytest.approx(0.1)
    assert w.others_share == pytest.approx(0.2)


def _w(**kw: Any) -> Window:
    return Window(**{"model": "m", "start_s": 0.0, "end_s": 1.0, **kw})


def test_the_gateway_adds_the_variants_work_on_one_device() -> None:
    a = _w(success_rps=100.0, inference_rps=100.0, utilization=0.9, stretch=2.0, own_device_share=0.3,
           others_share=0.6)
    b = _w(model="m__b", success_rps=50.0, inference_rps=50.0, utilization=0.9, stretch=3.0,
           own_device_share=0.1, others_share=0.8)
    idle = _w(model="m__b", utilization=0.9, own_device_share=0.0, others_share=0.9)
    both = combine_windows({"a": a, "b": b}, "m")
    assert both.own_device_share == pytest.approx(0.4)
    assert both.stretch == pytest.approx((2.0 * 0.3 + 3.0 * 0.1) / 0.4)
    assert both.others_share == pytest.approx(0.5)
    one = combine_windows({"a": a, "b": idle}, "m")
    assert (one.stretch, one.own_device_share, one.others_share) == (
        pytest.approx(2.0), pytest.approx(0.3), pytest.approx(0.6))
    bare = combine_windows({"a": _w(), "b": _w()}, "m")
    assert (bare.stretch, bare.own_device_share, bare.others_share) == (None, None, None)


def test_utilization_none_drops_what_the_others_use_too() -> None:
    class One:
        model, clock = "m", staticmethod(lambda: 0.0)

        async def poll(self) -> Window:
            return _w(utilization=0.9, stretch=2.0, own_device_share=0.3, others_share=0.6)

    w = asyncio.run(_NoUtilization(One()).poll())
    assert w is not None and (w.utilization, w.others_share, w.stretch) == (None, None, 2.0)
