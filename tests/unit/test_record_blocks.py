"""benchmarks/record.py's block writer: the one every generated page block goes through
(report.py, device_docs.py, shared_gpu_report.py, shared_plan.py, shared_schedules.py,
scripts/rule_table.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import load_benchmark

record = load_benchmark("record")
PAGE = ("# Page\n\ntext before\n<!-- a:begin -->\n{a}\n<!-- a:end -->\nbetween\n"
        "<!-- b:begin -->\n{b}\n<!-- b:end -->\nafter\n")


def _blocks(made: list[str]) -> dict[str, object]:
    def make(name: str, body: str):
        def block() -> str:
            made.append(name)
            return body
        return block
    return {"a": make("a", "| fresh a |"), "b": make("b", "fresh b")}


def test_a_fresh_page_is_left_as_it_is(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = PAGE.format(a="| fresh a |", b="fresh b")
    page.write_text(text, encoding="utf-8")
    made: list[str] = []
    assert record.sync_blocks(page, _blocks(made), check=True)
    assert record.sync_blocks(page, _blocks(made), check=False)
    assert page.read_text(encoding="utf-8") == text and made == ["a", "b"] * 2


def test_a_stale_block_is_told_by_check_and_rewritten_by_the_write(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    stale = PAGE.format(a="| old a |\n| more |", b="fresh b")
    page.write_text(stale, encoding="utf-8")
    assert not record.sync_blocks(page, _blocks([]), check=True)
    assert page.read_text(encoding="utf-8") == stale  # --check only tells
    assert not record.sync_blocks(page, _blocks([]), check=False)
    # Only the bodies change, byte for byte: the text around the markers stays.
    assert page.read_text(encoding="utf-8") == PAGE.format(a="| fresh a |", b="fresh b")
    assert record.sync_blocks(page, _blocks([]), check=True)


def test_a_missing_block_names_the_page_and_its_markers_and_writes_nothing(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = PAGE.format(a="old", b="old").replace("<!-- b:end -->\n", "")
    page.write_text(text, encoding="utf-8")
    made: list[str] = []
    with pytest.raises(SystemExit) as exc:
        record.sync_blocks(page, _blocks(made), check=False)
    assert str(exc.value) == f"{page}: no <!-- b:begin --> ... <!-- b:end --> markers"
    assert page.read_text(encoding="utf-8") == text and made == ["a"]
