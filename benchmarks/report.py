"""``make results``: regenerate the README's results table from ``benchmarks/results/``.

The table sits between ``<!-- results:begin -->`` and ``<!-- results:end -->``
in README.md. For each benchmark the newest saved run gives the rows (in the
order of ``ORDER`` below, then alphabetically); a row whose ``key`` appears
with a numeric ``value`` in several saved runs of that benchmark also shows
the range over them. Nothing in the table is typed by hand.

    .venv/bin/python benchmarks/report.py [--check]

``--check`` exits 1 when the README's table differs from what the files give.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
ORDER = ["closed_loop", "faults", "soak", "trace_fidelity", "sessions", "simulator", "sdk",
         "reload_vs_shift", "footprint", "batch_curves", "loadgen"]


def _runs() -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(RESULTS.glob("*/*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["_file"] = str(path.relative_to(ROOT))
        runs.setdefault(doc["benchmark"], []).append(doc)
    for docs in runs.values():
        docs.sort(key=lambda d: d["date"])
    return runs


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def table() -> str:
    runs = _runs()
    names = sorted(runs, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    lines = ["| what | figure | command | run |", "|---|---|---|---|"]
    for name in names:
        newest = runs[name][-1]
        for r in newest["rows"]:
            figure = r["figure"]
            key = r.get("key")
            if key is not None:
                values = [x["value"] for d in runs[name] for x in d["rows"]
                          if x.get("key") == key and isinstance(x.get("value"), (int, float))]
                if len(values) > 1:
                    figure += (f" (over {len(values)} runs: {_fmt(min(values))}-{_fmt(max(values))}"
                               f"{r.get('unit', '')})")
            cell = figure.replace("|", "\\|")
            run = f"[{newest['date'][:10]}]({newest['_file']})"
            lines.append(f"| {r['what']} | {cell} | `{r['command']}` | {run} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the README is out of date")
    args = ap.parse_args()
    text = README.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        sys.exit(f"{README}: no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if args.check:
        if new != text:
            sys.exit("README.md's results table is out of date: run `make results`")
        return
    README.write_text(new, encoding="utf-8")
    print(f"README.md results table: {table().count(chr(10)) - 1} rows from {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
