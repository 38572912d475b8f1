"""``make results``: regenerate the README's results table from ``benchmarks/results/``.

The table sits between ``<!-- results:begin -->`` and ``<!-- results:end -->``
in README.md. For each benchmark (in the order of ``ORDER`` below, then
alphabetically) the newest saved run of each command line gives the rows, so
a benchmark run in two modes shows both; a row whose ``key`` appears with a
numeric ``value`` in several saved runs of that benchmark also shows the range
over them. Nothing in the table is typed by hand.

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
ORDER = ["closed_loop", "demo", "reaction", "steady", "faults", "soak", "trace_fidelity", "sessions",
         "simulator", "device_timeslice", "device_share", "device_util", "device_accuracy", "sdk",
         "reload_vs_shift", "footprint", "overhead", "reload_cost", "batch_curves", "loadgen"]


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _load(path: Path) -> dict[str, Any]:
    """One saved run; a file that is not one stops the report with a line naming it."""
    where = _rel(path)
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
    doc["_file"] = where
    return doc


def _runs(results: Path = RESULTS) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(results.glob("*/*.json")):
        doc = _load(path)
        runs.setdefault(doc["benchmark"], []).append(doc)
    for docs in runs.values():
        docs.sort(key=lambda d: d["date"])
    return runs


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def _shown(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, row) pairs to show for one benchmark, whose runs are sorted oldest first.

    A benchmark run in several modes (``loadgen.py --protocol http``, ``simulator.py
    --fidelity``) saves each mode's rows: the newest run of each command line gives
    rows, newest first, and a row (by ``key``, else by ``what``) is shown once, from
    the newest run holding it.
    """
    newest_by_command: dict[str, dict[str, Any]] = {}
    for doc in docs:
        newest_by_command[doc.get("command", "")] = doc
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    seen: set[str] = set()
    for doc in sorted(newest_by_command.values(), key=lambda d: d["date"], reverse=True):
        for r in doc["rows"]:
            ident = r.get("key") or r["what"]
            if ident not in seen:
                seen.add(ident)
                out.append((doc, r))
    return out


def table(results: Path = RESULTS) -> str:
    """The results table, in Markdown, from the saved runs under ``results``."""
    runs = _runs(results)
    names = sorted(runs, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    lines = ["| what | figure | command | run |", "|---|---|---|---|"]
    for name in names:
        for doc, r in _shown(runs[name]):
            figure = r["figure"]
            key = r.get("key")
            if key is not None:
                values = [x["value"] for d in runs[name] for x in d["rows"]
                          if x.get("key") == key and isinstance(x.get("value"), (int, float))]
                if len(values) > 1:
                    low, high, unit = _fmt(min(values)), _fmt(max(values)), r.get("unit", "")
                    spread = f"{low}-{high}{unit}" if low != high else f"{low}{unit} in each"
                    of = f"{r['value_name']} " if r.get("value_name") else ""
                    figure += f" ({of}over {len(values)} runs: {spread})"
            cell = figure.replace("|", "\\|")
            run = f"[{doc['date'][:10]}]({doc['_file']})"
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
    rows = sum(len(_shown(docs)) for docs in runs.values())
    print(f"README.md results table: {rows} rows from {len(runs)} benchmarks in "
          f"{RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
