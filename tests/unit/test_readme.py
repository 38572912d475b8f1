"""README.md is a front page: short, in paragraphs a reader takes in at a glance.

At most 200 lines, and no paragraph over 8 lines; code blocks and tables (the
generated headline table) do not count as paragraphs. What does not fit goes
to a page under docs/ (CONTRIBUTING.md, "Docs").
"""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MAX_LINES = 200
MAX_PARAGRAPH_LINES = 8


def paragraphs(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each paragraph: a run of non-blank lines outside code
    fences, tables and HTML comments."""
    out: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = 0
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            line = ""
        skip = fenced or line.startswith(("|", "<!--")) or not line.strip()
        if skip:
            if current:
                out.append((start, current))
            current = []
            continue
        if not current:
            start = n
        current.append(line)
    if current:
        out.append((start, current))
    return out


def test_the_paragraph_reader_skips_code_and_tables() -> None:
    text = "one\ntwo\n\n```\na\nb\n```\n| t |\n|---|\nthree\n"
    assert paragraphs(text) == [(1, ["one", "two"]), (10, ["three"])]


def test_the_readme_is_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines: at most {MAX_LINES}"


def test_no_paragraph_of_the_readme_runs_over_8_lines() -> None:
    long = [f"line {start}: {len(lines)} lines" for start, lines in
            paragraphs(README.read_text(encoding="utf-8")) if len(lines) > MAX_PARAGRAPH_LINES]
    assert not long, f"README.md paragraphs over {MAX_PARAGRAPH_LINES} lines: {long}"


def test_the_readme_reads_in_the_front_page_order() -> None:
    """What it does and for whom (before any heading), the two commands, the quick start on
    your own model, the generated headline table, the tour: in that order (issue 29)."""
    lines = README.read_text(encoding="utf-8").splitlines()
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:4] == ["## Try it", "## Quick start on your own model", "## Results",
                            "## A tour of the three parts"], headings
    first = lines.index(headings[0])
    assert any(line.startswith("autobatch keeps") for line in lines[:first]), "no opening paragraph"
    results = lines.index("## Results")
    assert lines.index("<!-- headline:begin -->") > results
    assert lines.index("<!-- headline:end -->") < lines.index(headings[3])
    quick = "\n".join(lines[lines.index(headings[1]):results])
    assert quick.index("autobatch plan --curve") < quick.index("autobatch run --config")
