"""The objective's signals: device time per request, busy share, arrival rate (pure).

Each source's arithmetic on its own input: ``parse_stats``' busy time,
``parse_instance_count``, ``Window.arrival_rps`` and ``with_instance_count``,
the gateway's combined window, and the PromQL approximation. The real servers'
figures are compared in tests/integration/test_signals_prometheus.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from autobatch.signals.parse import parse_instance_count, parse_stats
from autobatch.signals.prometheus import PromQL, window_from_results
from autobatch.signals.variants import combine_windows
from autobatch.signals.window import Window

M = "m"


def _row(b: int, count: int, infer_ns: int, io_ns: int | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"batch_size": b, "compute_infer": {"count": count, "ns": infer_ns}}
    if io_ns is not None:
        row["compute_input"] = {"count": count, "ns": io_ns}
        row["compute_output"] = {"count": count, "ns": io_ns}
    return row


@pytest.mark.parametrize(
    ("rows", "busy_ns"),
    [
        ([], 0),
        ([_row(1, 3, 3_000_000)], 3_000_000),  # no input/output rows (older servers): infer alone
        ([_row(1, 3, 3_000_000, 100_000)], 3_200_000),
        ([_row(1, 3, 3_000_000, 100_000), _row(4, 2, 8_000_000, 50_000)], 11_300_000),
    ],
)
def test_parse_stats_busy_time_is_input_infer_and_output_of_every_execution(
    rows: list[dict[str, Any]], busy_ns: int
) -> None:
    data = {"model_stats": [{
        "name": M, "version": "1", "inference_count": 11, "execution_count": 5,
        "inference_stats": {"success": {"count": 11, "ns": 1}}, "batch_stats": rows,
    }]}
    assert parse_stats(data, M).busy_ns == busy_ns


@pytest.mark.parametrize(
    ("config", "count"),
    [
        ({"instance_group": [{"kind": "KIND_CPU", "count": 2, "gpus": []}]}, 2),
        ({"instance_group": [{"kind": "KIND_CPU", "count": 1}, {"kind": "KIND_CPU", "count": 3}]}, 4),
        ({"instance_group": [{"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}]}, 4),
        ({"instance_group": [{"kind": "KIND_GPU", "count": 2, "gpus": []}]}, 2),
        ({"instance_group": []}, None),
        ({"name": M}, None),
        ({"instance_group": [{"count": -1}]}, None),
        ({"instance_group": [{"count": True}]}, None),
        ([], None),
    ],
)
def test_parse_instance_count(config: Any, count: int | None) -> None:
    assert parse_instance_count(config) == count


def _w(**kw: Any) -> Window:
    base: dict[str, Any] = {"model": M, "start_s": 0.0, "end_s": 1.0}
    base.update(kw)
    return Window(**base)


@pytest.mark.parametrize(
    ("inference_rps", "pending_delta", "interval_s", "arrival"),
    [
        (100.0, None, 1.0, 100.0),
        (100.0, 0.0, 1.0, 100.0),
        (240.0, 110.0, 1.0, 350.0),  # overloaded: completions capped, the backlog grows
        (240.0, 55.0, 0.5, 350.0),
        (240.0, -200.0, 1.0, 40.0),  # draining a backlog: fewer arrive than complete
        (10.0, -50.0, 1.0, 0.0),  # never negative
    ],
)
def test_arrival_rate_is_completions_plus_backlog_growth(
    inference_rps: float, pending_delta: float | None, interval_s: float, arrival: float
) -> None:
    w = _w(end_s=interval_s, inference_rps=inference_rps, pending_delta=pending_delta)
    assert w.arrival_rps == pytest.approx(arrival)
    assert w.to_dict()["arrival_rps"] == pytest.approx(arrival)


@pytest.mark.parametrize(
    ("busy", "count", "share"),
    [(0.5, 1, 0.5), (1.5, 2, 0.75), (None, 2, None), (0.5, None, None), (0.5, 0, None)],
)
def test_busy_share_is_busy_instances_over_instances(
    busy: float | None, count: int | None, share: float | None
) -> None:
    w = _w(busy_instances=busy).with_instance_count(count)
    assert w.busy_share == (pytest.approx(share) if share is not None else None)
    assert Window.from_dict(w.to_dict()) == w


def test_combined_window_weights_device_time_by_items_and_counts_only_serving_variants() -> None:
    live = _w(success_rps=300.0, inference_rps=300.0, device_ms_per_request=2.0,
              busy_instances=0.6).with_instance_count(1)
    idle = _w(model="m__b", device_ms_per_request=None, busy_instances=0.0).with_instance_count(2)
    both = _w(model="m__b", success_rps=100.0, inference_rps=100.0, device_ms_per_request=4.0,
              busy_instances=0.4).with_instance_count(2)
    one = combine_windows({"a": live, "b": idle}, M)
    assert one.device_ms_per_request == pytest.approx(2.0)
    # The idle variant's two instances are not capacity the live profile can use.
    assert (one.busy_instances, one.instance_count, one.busy_share) == (
        pytest.approx(0.6), 1, pytest.approx(0.6))
    two = combine_windows({"a": live, "b": both}, M)
    assert two.device_ms_per_request == pytest.approx((300 * 2.0 + 100 * 4.0) / 400)
    assert (two.instance_count, two.busy_share) == (3, pytest.approx(1.0 / 3))


def _vec(value: float) -> list[dict[str, Any]]:
    return [{"metric": {"model": M}, "value": [1000.0, str(value)]}]


def _results(**over: float) -> dict[str, list[dict[str, Any]]]:
    # 100 requests/s of one item in batches of 4 (25 executions/s) of 8 ms each:
    # every request carries its batch's 8 ms, so compute_us grows 800 000 us/s.
    values = {
        "success": 100.0, "count": 100.0, "exec": 25.0, "queue_us": 100_000.0,
        "compute_us": 800_000.0, "request_us": 1_500_000.0, "pending": 0.0, "pending_delta": 0.0,
        "compute_input_us": 40_000.0, "compute_output_us": 40_000.0, "replicas": 2.0,
        "newest_s": 1000.0,
    }
    values.update(over)
    return {k: _vec(v) for k, v in values.items()}


@pytest.mark.parametrize(
    ("instances", "share"), [(None, None), (1, 0.11), (2, 0.055)],
)
def test_promql_approximates_device_time_and_busy_time_from_per_request_counters(
    instances: int | None, share: float | None
) -> None:
    w = window_from_results(_results(), queries=PromQL(M, range_s=4.0), evaluated_s=1000.0,
                            instances_per_replica=instances)
    assert not w.stale
    assert w.device_ms_per_request == pytest.approx(8.0 / 4)
    # 25 executions/s x (8 + 0.4 + 0.4) ms = 0.22 instance-s/s, over 2 replicas x instances.
    assert w.busy_instances == pytest.approx(0.22)
    assert w.busy_share == (pytest.approx(share) if share is not None else None)


def test_promql_without_executions_has_no_device_time_and_idle_instances() -> None:
    w = window_from_results(
        _results(success=0.0, count=0.0, exec=0.0, compute_us=0.0, compute_input_us=0.0,
                 compute_output_us=0.0),
        queries=PromQL(M, range_s=4.0), evaluated_s=1000.0,
    )
    assert (w.device_ms_per_request, w.busy_instances) == (None, 0.0)
