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


def _load(path: Path) -> dict[str, Any]:
    """One saved run; a file that is not one stops the report with a line naming it."""
    where = path.relative_to(ROOT)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        sys.exit(f"{where}: not a readable JSON result file: {exc}")
    if not isinstance(doc, dict):
        sys.exit(f"{where}: not a result file: the top level is not an object")
    for key, kind in (("benchmark", str), ("date", str), ("rows", list)):
        if not isinstance(doc.get(key), kind):
            sys.exit(f"{where}: {key} = {doc.get(key)!r}: must be a {kind.__name__} "
                     "(files are written by record.save_result)")
    for i, r in enumerate(doc["rows"]):
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str)
                                              for k in ("what", "figure", "command")):
            sys.exit(f"{where}: rows[{i}] = {r!r}: needs what, figure and command (record.row)")
    doc["_file"] = str(where)
    return doc


def _runs() -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(RESULTS.glob("*/*.json")):
        doc = _load(path)
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
    if len(lines) == 2:
        lines.append("| no saved runs yet | run `make bench`, then `make results` | | |")
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
    runs = _runs()
    rows = sum(len(docs[-1]["rows"]) for docs in runs.values())
    print(f"README.md results table: {rows} rows from {len(runs)} benchmarks in "
          f"{RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
