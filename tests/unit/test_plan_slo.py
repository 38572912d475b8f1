"""The SLO equation: the queue-delay budget, its margin, and the largest batch that fits."""

from __future__ import annotations

import pytest

from autobatch.curve import BatchCurve, PointKind, load_curve
from autobatch.errors import ConfigError
from autobatch.plan.slo import ARTICLE_EXAMPLE, largest_fitting_batch, queue_budget

from ..conftest import CURVES


def test_the_article_example_gives_a_40_ms_budget_and_a_delay_in_its_20_to_30_ms():
    budget = queue_budget(100, 10, 50.0, 8)
    assert budget.budget_ms == pytest.approx(40.0)
    assert 20.0 <= budget.delay_ms <= 30.0
    assert budget.delay_us == round(budget.delay_ms * 1000)
    assert budget.equation().endswith("= 40 ms")
    assert ARTICLE_EXAMPLE.budget_ms == pytest.approx(40.0)


def test_the_example_through_a_curve_names_the_point_kind():
    curve = BatchCurve({1: 9.0, 8: 50.0})
    assert queue_budget(100, 10, curve, 8).budget_ms == pytest.approx(40.0)
    assert queue_budget(100, 10, curve, 8).batch_kind is PointKind.MEASURED
    interpolated = queue_budget(100, 10, curve, 4)
    assert interpolated.batch_kind is PointKind.INTERPOLATED
    assert "interpolated" in interpolated.equation()


@pytest.mark.parametrize(
    ("slo", "network", "batch_ms", "margin", "budget", "delay"),
    [
        (100, 10, 50, 0.0, 40, 40),
        (100, 10, 50, 0.5, 40, 20),
        (200, 0, 50, 0.4, 150, 90),
        (100, 10, 95, 0.4, -5, 0),  # the batch alone breaks the SLO: no waiting at all
        (100, 10, 90, 0.4, 0, 0),
    ],
)
def test_budget_and_delay_table(slo, network, batch_ms, margin, budget, delay):
    b = queue_budget(slo, network, float(batch_ms), 8, margin_frac=margin)
    assert b.budget_ms == pytest.approx(budget)
    assert b.delay_ms == pytest.approx(delay)
    assert b.fits is (budget >= 0)


@pytest.mark.parametrize(
    ("curve_file", "slo", "network", "max_batch", "expect_batch", "expect_kind"),
    [
        # 512x288 fp16: batch 8 takes 103.77 ms, so 7 (interpolated, 89.4 ms) is the last to fit in 90.
        ("laptop-512x288-fp16.yaml", 100, 10, 32, 7, PointKind.INTERPOLATED),
        ("laptop-512x288-fp16.yaml", 60, 10, 32, 4, PointKind.MEASURED),
        ("laptop-512x288-fp16.yaml", 19, 10, 32, None, None),  # not even batch 1 (9.82 ms) fits
        ("laptop-256x144-fp16.yaml", 100, 10, 32, 32, PointKind.EXTRAPOLATED),
        ("laptop-256x144-fp16.yaml", 100, 10, 8, 8, PointKind.EXTRAPOLATED),
    ],
)
def test_largest_fitting_batch(curve_file, slo, network, max_batch, expect_batch, expect_kind):
    fit = largest_fitting_batch(load_curve(CURVES / curve_file), slo, network, max_batch)
    if expect_batch is None:
        assert fit is None
        return
    assert fit is not None
    assert (fit.batch_size, fit.batch_kind) == (expect_batch, expect_kind)
    assert fit.budget_ms >= 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 10, 50.0, 8), "slo_p99_ms = 0"),
        ((100, -1, 50.0, 8), "network_ms = -1"),
        ((100, 10, 50.0, 0), "max_batch_size = 0"),
        ((100, 10, -3.0, 8), "batch time = -3.0"),
    ],
)
def test_bad_inputs_name_the_flag(args, message):
    with pytest.raises(ConfigError, match=message):
        queue_budget(*args)


def test_a_margin_of_one_or_more_is_refused():
    with pytest.raises(ConfigError, match=r"margin = 1.0: must be a fraction in \[0, 1\)"):
        queue_budget(100, 10, 50.0, 8, margin_frac=1.0)
