"""benchmarks/report.py: the README's headline and docs/results.md come from the saved runs only."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from ..conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    return load_benchmark(name)


report = _module("report")


def _save(folder: Path, bench: str, date: str, command: str, rows: list[dict]) -> None:
    d = folder / bench
    d.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": bench, "date": date, "command": command, "machine": {}, "data": {},
           "rows": [{**r, "command": r.get("command", command)} for r in rows]}
    (d / f"{date.replace(':', '')}.json").write_text(json.dumps(doc), encoding="utf-8")


def _body(table: str) -> list[str]:
    return table.splitlines()[2:]


def test_no_saved_runs_gives_a_placeholder_and_no_figure(tmp_path: Path) -> None:
    rows = _body(report.table(tmp_path))
    assert rows == ["| no saved runs yet | run `make bench`, then `make results` | | |"]


def test_a_range_needs_several_saved_runs(tmp_path: Path) -> None:
    row = {"what": "ceiling", "figure": "2000 rps", "key": "ceiling", "value": 2000, "unit": " rps"}
    _save(tmp_path, "loadgen", "2026-11-30T10:00:00Z", "python benchmarks/loadgen.py", [row])
    assert "over" not in report.table(tmp_path)
    _save(tmp_path, "loadgen", "2026-11-30T11:00:00Z", "python benchmarks/loadgen.py",
          [{**row, "figure": "2500 rps", "value": 2500}])
    (line,) = _body(report.table(tmp_path))
    assert "2500 rps (over 2 runs: 2000-2500 rps)" in line
    assert "[2026-11-30](" in line and line.endswith("2026-11-30T110000Z.json) |")  # the newest run
    _save(tmp_path, "loadgen", "2026-11-30T12:00:00Z", "python benchmarks/loadgen.py",
          [{**row, "figure": "2500 rps", "value": 2500}])
    (line,) = _body(report.table(tmp_path))
    assert "2500 rps (over 3 runs: 2000-2500 rps)" in line


def test_runs_that_agree_say_so(tmp_path: Path) -> None:
    row = {"what": "ceiling", "figure": "3000", "key": "ceiling", "value": 3000, "unit": " rps"}
    for hour in ("10", "11"):
        _save(tmp_path, "loadgen", f"2026-11-30T{hour}:00:00Z", "python benchmarks/loadgen.py", [row])
    assert "3000 (over 2 runs: 3000 rps in each)" in report.table(tmp_path)


def test_a_range_says_what_it_is_of_where_the_row_names_its_value(tmp_path: Path) -> None:
    row = {"what": "loop", "figure": "device 0.90x; p95 1.20x", "key": "dev", "value": 0.9,
           "unit": "x", "value_name": "device"}
    _save(tmp_path, "closed_loop", "2026-11-30T10:00:00Z", "python benchmarks/closed_loop.py", [row])
    _save(tmp_path, "closed_loop", "2026-11-30T11:00:00Z", "python benchmarks/closed_loop.py",
          [{**row, "figure": "device 0.80x; p95 1.30x", "value": 0.8}])
    assert "device 0.80x; p95 1.30x (device over 2 runs: 0.8-0.9x)" in report.table(tmp_path)


def test_each_mode_of_a_benchmark_keeps_its_newest_rows(tmp_path: Path) -> None:
    grpc = {"what": "ceiling over gRPC", "figure": "2000", "key": "grpc", "value": 2000}
    http = {"what": "ceiling over HTTP", "figure": "1750", "key": "http", "value": 1750}
    _save(tmp_path, "loadgen", "2026-11-30T10:00:00Z", "python benchmarks/loadgen.py", [grpc])
    _save(tmp_path, "loadgen", "2026-11-30T11:00:00Z", "python benchmarks/loadgen.py --protocol http",
          [http])
    _save(tmp_path, "loadgen", "2026-11-30T12:00:00Z", "python benchmarks/loadgen.py",
          [{**grpc, "figure": "2500", "value": 2500}])
    body = _body(report.table(tmp_path))
    assert [line.split(" | ")[1] for line in body] == ["2500 (over 2 runs: 2000-2500)", "1750"]


def test_benchmarks_follow_the_fixed_order_and_pipes_are_escaped(tmp_path: Path) -> None:
    _save(tmp_path, "sdk", "2026-11-30T10:00:00Z", "python benchmarks/sdk.py",
          [{"what": "sdk", "figure": "a | b"}])
    _save(tmp_path, "closed_loop", "2026-11-30T09:00:00Z", "python benchmarks/closed_loop.py",
          [{"what": "closed loop", "figure": "x"}])
    body = _body(report.table(tmp_path))
    assert body[0].startswith("| closed loop |") and "a \\| b" in body[1]


@pytest.mark.parametrize("content, field", [
    ("not json", "not a readable JSON result file"),
    ('{"benchmark": "x", "date": "2026-11-30", "rows": [{"what": "w"}]}', "rows[0]"),
    ('{"benchmark": 3, "date": "2026-11-30", "rows": []}', "benchmark = 3"),
])
def test_a_malformed_result_file_is_one_line_naming_it(tmp_path: Path, content: str, field: str) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "bad.json").write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        report.table(tmp_path)
    assert "bad.json" in str(exc.value) and field in str(exc.value)


def test_record_row_and_save_result_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _module("record")
    monkeypatch.setattr(record, "RESULTS", tmp_path)
    path = record.save_result("demo", {"x": 1}, [record.row("what", "fig", key="k", value=1.5, unit="ms")],
                              command="python benchmarks/demo.py")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["benchmark"] == "demo" and doc["rows"][0]["command"] == "python benchmarks/demo.py"
    assert doc["machine"]["cores"] and doc["data"] == {"x": 1}
    assert _body(report.table(tmp_path))[0].startswith("| what | fig |")


def _block(page: Path, name: str) -> str:
    text = page.read_text(encoding="utf-8")
    return text.split(f"<!-- {name}:begin -->", 1)[1].split(f"<!-- {name}:end -->", 1)[0].strip()


def test_the_results_page_is_what_the_saved_runs_give() -> None:
    assert _block(report.RESULTS_PAGE, "results") == report.table().strip()
    assert _block(report.RESULTS_PAGE, "closed-loop") == report.closed_loop_table().strip()


def test_the_readme_headline_is_what_the_saved_runs_give() -> None:
    body = _body(_block(report.README, "headline"))
    assert body == _body(report.headline())
    assert 1 <= len(body) <= report.MAX_HEADLINE == 8


def test_a_stale_table_is_caught(tmp_path: Path) -> None:
    text = report.README.read_text(encoding="utf-8")
    row = _body(_block(report.README, "headline"))[0]
    stale = text.replace(row, row.replace(" | ", " | 1.00x ", 1))
    assert stale != text and report.render(report.README, stale) == text


def test_headline_rows_come_in_the_declared_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _save(tmp_path, "loadgen", "2026-11-30T10:00:00Z", "python benchmarks/loadgen.py",
          [{"what": "ceiling", "figure": "3000", "key": "grpc", "value": 3000},
           {"what": "lag", "figure": "2 ms", "key": "lag", "value": 2}])
    _save(tmp_path, "sdk", "2026-11-30T11:00:00Z", "python benchmarks/sdk.py",
          [{"what": "sdk over plain", "figure": "12x"}])
    monkeypatch.setattr(report, "HEADLINE", [("sdk", "sdk over plain"), ("loadgen", "grpc")])
    body = _body(report.headline(tmp_path))
    assert [line.split(" | ")[0] for line in body] == ["| sdk over plain", "| ceiling"]


def test_a_headline_row_no_saved_run_holds_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _save(tmp_path, "loadgen", "2026-11-30T10:00:00Z", "python benchmarks/loadgen.py",
          [{"what": "ceiling", "figure": "3000", "key": "grpc", "value": 3000}])
    monkeypatch.setattr(report, "HEADLINE", [("loadgen", "http")])
    with pytest.raises(SystemExit) as exc:
        report.headline(tmp_path)
    assert "'loadgen'" in str(exc.value) and "'http'" in str(exc.value)


def test_the_headline_holds_at_most_8_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(report.HEADLINE) <= report.MAX_HEADLINE
    monkeypatch.setattr(report, "HEADLINE", [("loadgen", f"k{i}") for i in range(9)])
    with pytest.raises(SystemExit) as exc:
        report.headline(tmp_path)
    assert "at most 8" in str(exc.value)


def test_the_closed_loop_table_reads_each_runs_comparison(tmp_path: Path) -> None:
    run = {"schedule": "step", "instances": 2,
           "modes": {"triton-default": {"over_slo_share": 0.01, "device_ms": 8.0},
                     "efficient": {"over_slo_share": 0.002, "device_ms": 6.0}},
           "comparison": {"best_static": "efficient", "controllers": {"reload": {
               "over_slo_share": 0.003, "best_static_over_slo_share": 0.002, "device_vs_default": 0.8,
               "device_bound": {"device_vs_default": 0.75}, "low_p95_vs_default": 1.2}}}}
    d = tmp_path / "closed_loop"
    d.mkdir()
    (d / "a.json").write_text(json.dumps({
        "benchmark": "closed_loop", "date": "2026-11-30T10:00:00Z", "command": "c", "rows": [],
        "data": {"runs": [run]}}), encoding="utf-8")
    (line,) = _body(report.closed_loop_table(tmp_path))
    assert line.startswith("| step | 2 | reload | 0.3% / 1.0% / 0.2% (efficient) | **0.80x** / 0.75x | "
                           "0.75x | 1.20x |")


def test_a_range_covers_only_the_runs_of_the_same_config_contents(tmp_path: Path) -> None:
    """examples/sidecar-t4.yaml changed its ladder at 2026-12-04 18:16: a row's range over the
    saved runs does not mix the runs before (record.RENAMED_CONFIGS) with those after."""
    d = tmp_path / "demo"
    d.mkdir()
    row = {"what": "demo", "figure": "device 0.65x", "key": "dev", "value": 0.65, "unit": "x"}
    for stem, value in (("20261202-133024", 0.91), ("20261204-181755", 0.65), ("20261204-190000", 0.7)):
        date = f"{stem[:4]}-{stem[4:6]}-{stem[6:8]}T{stem[9:11]}:{stem[11:13]}:00Z"
        doc = {"benchmark": "demo", "date": date,
               "command": "python benchmarks/demo.py", "machine": {},
               "data": {"config": "examples/sidecar-t4.yaml"},
               "rows": [{**row, "value": value, "command": "python benchmarks/demo.py"}]}
        (d / f"{stem}.json").write_text(json.dumps(doc), encoding="utf-8")
    assert "device 0.65x (over 2 runs: 0.65-0.7x)" in report.table(tmp_path)
