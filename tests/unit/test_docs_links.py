"""The docs stay walkable: every relative link resolves, and nothing points outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def _text(path: Path) -> str:
    """The page without code: links inside code blocks and spans are examples, not links."""
    return CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_text(path))]


@pytest.mark.parametrize("heading, expected", [
    ("The demo: `autobatch demo`", "the-demo-autobatch-demo"),
    ("Reload or shift: measured side by side", "reload-or-shift-measured-side-by-side"),
    ("One tick, from the scrape to the reload", "one-tick-from-the-scrape-to-the-reload"),
    ("`model`, `triton`, `profiles`, `slo`", "model-triton-profiles-slo"),
])
def test_slug_follows_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_the_front_page_reaches_every_docs_page() -> None:
    linked = {(ROOT / t.split("#")[0]).resolve() for t in links(ROOT / "README.md")}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if ROOT.resolve() not in (dest, *dest.parents):
            broken.append(f"{target}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_nothing_points_at_the_design_folder_outside_the_repository() -> None:
    outside = "../" + "shared"  # split, so this file does not match itself
    suffixes = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".pbtxt", ".cfg", ".txt"}
    hits = []
    for folder in ("src", "tests", "benchmarks", "docs", "scripts", "examples", "model_repository",
                   "curves", "profiles"):
        for path in (ROOT / folder).rglob("*"):
            if (path.is_file() and path.suffix in suffixes
                    and outside in path.read_text(encoding="utf-8", errors="replace")):
                hits.append(str(path.relative_to(ROOT)))
    for name in ("README.md", "CONTRIBUTING.md", "pyproject.toml", "Makefile"):
        if outside in (ROOT / name).read_text(encoding="utf-8"):
            hits.append(name)
    assert not hits, f"files pointing outside the repository: {hits}"


def test_no_file_names_a_path_of_the_machine_it_was_written_on() -> None:
    """A fresh clone has none of this machine's shared folders: commands run from the checkout."""
    machine = "/" + "work/"  # split, so this file does not match itself
    suffixes = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".cfg", ".txt"}
    hits = []
    for folder in ("src", "tests", "benchmarks", "docs", "scripts", "examples", "deploy"):
        for path in (ROOT / folder).rglob("*"):
            if (path.is_file() and path.suffix in suffixes
                    and machine in path.read_text(encoding="utf-8", errors="replace")):
                hits.append(str(path.relative_to(ROOT)))
    for name in ("README.md", "CONTRIBUTING.md", "pyproject.toml", "Makefile", "Dockerfile"):
        if machine in (ROOT / name).read_text(encoding="utf-8"):
            hits.append(name)
    assert not hits, f"files naming a path of this machine: {hits}"


def _contract_layers() -> list[str]:
    """The `layers` contract of pyproject.toml, top first, as `a | b` lines without `autobatch.`."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r'type = "layers"\s*(?:#[^\n]*\n\s*)*layers = \[(.*?)\]', text, re.S)
    assert block, "pyproject.toml has no layers contract"
    layers = [s.replace("autobatch.", "") for s in re.findall(r'"([^"]+)"', block.group(1))]
    return [x for x in layers if x != "__main__"]


def test_the_architecture_page_draws_the_layers_of_the_contract() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## The layers", 1)[1]
    blocks = re.findall(r"^```\n(.*?)^```", section, re.S | re.M)
    drawn = next(([re.split(r"\s{2,}", line)[0] for line in b.splitlines()] for b in blocks
                  if b.startswith("cli ")), None)
    assert drawn == _contract_layers(), "docs/architecture.md's layer diagram differs from pyproject.toml"


TOP = ("src/", "tests/", "benchmarks/", "docs/", "deploy/", "examples/", "profiles/", "curves/",
       "scripts/", "model_repository/")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_a_page_names_exists(page: Path) -> None:
    """`tests/integration/test_x.py` in backticks is a promise too: it must not go stale."""
    spans = CODE.findall(FENCE.sub("", page.read_text(encoding="utf-8")))  # inline code, not examples
    named = {m.group(1).rstrip(".") for span in spans
             for m in re.finditer(r"(?<![\w./-])([A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*)", span)}
    missing = sorted(p for p in named if p.startswith(TOP) and not any(c in p for c in "<>*")
                     and not (ROOT / p).exists())
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"
