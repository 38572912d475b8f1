"""`autobatch load`: the open-loop generator against the real Triton, plus its pure parts.

The Triton tests keep each load to a few seconds at a modest rate; the only
timing they assert is the rate accounting (sent within 5% of the target).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autobatch.errors import ConfigError
from autobatch.load import (
    RequestRecord,
    run_load,
    run_load_async,
)
from autobatch.schedule import Phase, Schedule, arrivals

from ..helpers import autobatch

MODEL = "dense_mlp"
RECORD_FIELDS = {"index", "phase", "scheduled_s", "sent_s", "latency_ms", "outcome", "error",
                 "rows", "priority"}


def test_cli_load_over_grpc_reports_every_request(triton: Any, tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    proc = autobatch(
        "load",
        "--url", triton.urls.grpc,
        "--model", MODEL,
        "--rate", "40",
        "--duration", "3",
        "--json",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    total = report["total"]
    assert total["failed"] == 0 and total["failures"] == {}
    assert total["ok"] == total["sent"] == total["scheduled"] == 120
    assert_on_rate(total, 40)
    assert report["protocol"] == "grpc" and report["model"] == MODEL
    assert [p["name"] for p in report["phases"]] == ["constant"]
    assert report["phases"][0]["p50_ms"] > 0

    lines = out.read_text().splitlines()
    assert len(lines) == 120
    records = [json.loads(line) for line in lines]
    assert all(set(r) == RECORD_FIELDS for r in records)
    assert [r["index"] for r in records] == list(range(120))
    assert {r["outcome"] for r in records} == {"ok"}
    assert all(r["phase"] == "constant" and r["latency_ms"] > 0 for r in records)
    assert all(0 <= r["scheduled_s"] < 3 and r["sent_s"] >= r["scheduled_s"] for r in records)


def test_cli_table_for_people(triton: Any) -> None:
    proc = autobatch("load", "--url", triton.urls.grpc, "--model", MODEL, "--rate", "20", "--duration", "1")
    assert proc.returncode == 0, proc.stderr
    assert "target/s" in proc.stdout and "p99 ms" in proc.stdout
    assert "20 requests sent, 20 ok, 0 failed" in proc.stdout


def test_http_works_too(triton: Any) -> None:
    report = run_load(triton.urls.http, MODEL, Schedule.constant(30, 2), protocol="http", seed=3)
    assert report.protocol == "http"
    assert report.total.failures == {}
    assert report.total.ok == 60
    assert_on_rate(report.total, 30)


def test_two_phase_schedule_counts_requests_in_their_phase(triton: Any) -> None:
    schedule = Schedule((Phase("calm", 15, 1.5), Phase("busy", 60, 1.5)))
    report = run_load(triton.urls.grpc, MODEL, schedule, seed=9)
    expected = arrivals(schedule, np.random.default_rng(9)).counts(2).tolist()
    assert [p.name for p in report.phases] == ["calm", "busy"]
    assert [p.scheduled for p in report.phases] == expected
    assert [p.ok for p in report.phases] == expected
    assert report.total.scheduled == sum(expected)
    for rec in report.records:
        in_calm = rec.scheduled_s < 1.5
        assert rec.phase == ("calm" if in_calm else "busy")
        assert rec.phase_index == (0 if in_calm else 1)
    for p, target in zip(report.phases, (15, 60)):
        assert p.failures == {}
        assert p.target_rps == target
        assert_on_rate(p, target)
    json.dumps(report.to_dict(records=True))  # JSON all the way down


async def test_async_variant_with_batches(triton: Any) -> None:
    seen: list[RequestRecord] = []
    report = await run_load_async(
        triton.urls.grpc, MODEL, Schedule.constant(20, 1), batch_size=4, on_record=seen.append
    )
    assert report.batch_size == 4
    assert report.total.ok == 20
    assert sorted(r.index for r in seen) == list(range(20))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_client_timeouts_are_counted_not_raised(triton: Any, protocol: str) -> None:
    # dense_mlp needs ~5 ms per batch: a 1 ms client timeout fails every request.
    url = triton.urls.grpc if protocol == "grpc" else triton.urls.http
    report = run_load(url, MODEL, Schedule.constant(20, 1), protocol=protocol, timeout_s=0.001)
    assert report.total.failures == {"timeout": 20}
    assert report.total.ok == 0 and report.total.p50_ms is None


def test_unknown_model_is_exit_code_2_and_one_line(triton: Any) -> None:
    proc = autobatch("load", "--url", triton.urls.grpc, "--model", "nope", "--rate", "5", "--duration", "1")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "'nope'" in lines[0] and "ready models:" in lines[0] and MODEL in lines[0]
    assert proc.stdout == ""


def test_unknown_model_over_http_is_a_config_error(triton: Any) -> None:
    with pytest.raises(ConfigError, match="the server has no such model"):
        run_load(triton.urls.http, "nope", Schedule.constant(1, 1), protocol="http")


def test_batch_size_above_the_models_max_is_a_config_error(triton: Any) -> None:
    with pytest.raises(ConfigError, match=r"batch_size = 64: must be <= the max_batch_size"):
        run_load(triton.urls.grpc, MODEL, Schedule.constant(1, 1), batch_size=64)




def assert_on_rate(report_total: dict[str, Any] | Any, target_rps: float) -> None:
    achieved = report_total["achieved_rps"] if isinstance(report_total, dict) else report_total.achieved_rps
    assert abs(achieved - target_rps) <= 0.05 * target_rps, (achieved, target_rps)


