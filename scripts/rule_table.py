"""docs/policy.md's rule table, generated from the policy's own table (``RULES``).

The table sits between ``<!-- rules:begin -->`` and ``<!-- rules:end -->`` in
docs/policy.md: one row per rule of ``autobatch.policy.rules.RULES``, in
priority order, with its kind, when it answers (the first paragraph of its
docstring) and what it reads (its ``reads``); then ``steady``, the answer when
no rule does. Nothing in it is typed by hand.

    .venv/bin/python scripts/rule_table.py [--check]

``--check`` (``make test``) exits 1 when the page's table differs from the code's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autobatch.policy.rules import RULES, steady

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "policy.md"
sys.path.insert(0, str(ROOT / "benchmarks"))  # the one writer of generated blocks
from record import sync_blocks  # noqa: E402


def _md(text: str) -> str:
    """Docstring text as a Markdown table cell: reST's ``code`` as `code`, no bare pipes."""
    return text.replace("``", "`").replace("|", "\\|")


def _first_paragraph(fn: Callable[..., Any]) -> str:
    return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())


def table() -> str:
    lines = ["| # | rule | kind | answers when | reads |", "|---|---|---|---|---|"]
    for i, rule in enumerate(RULES, start=1):
        reads = ", ".join(f"`{name}`" for name in rule.reads)
        lines.append(f"| {i} | `{rule.name}` | {rule.kind} | {_md(rule.fires)} | {reads} |")
    lines.append(f"| | `steady` | hold | {_md(_first_paragraph(steady))} | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/policy.md's table is out of date")
    args = ap.parse_args()
    fresh = sync_blocks(PAGE, {"rules": table}, check=args.check)
    if args.check:
        if not fresh:
            sys.exit("docs/policy.md's rule table is out of date: "
                     "run `.venv/bin/python scripts/rule_table.py`")
        return
    print(f"docs/policy.md rule table: {len(RULES)} rules and steady, from autobatch.policy.rules.RULES")


if __name__ == "__main__":
    main()
