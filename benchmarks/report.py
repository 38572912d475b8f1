"""``make results``: regenerate the results tables from ``benchmarks/results/``.

Each table sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in its page:

* README.md, ``headline``: the rows named in :data:`HEADLINE` (at most
  :data:`MAX_HEADLINE`), in that order: what a reader of the front page needs;
* docs/results.md, ``results``: every benchmark's rows. For each benchmark (in
  the order of :data:`ORDER`, then alphabetically) the newest saved run of each
  command line gives the rows, so a benchmark run in two modes shows both; a
  row whose ``key`` appears with a numeric ``value`` in several saved runs of
  that benchmark also shows the range over them;
* docs/results.md, ``closed-loop``: every saved closed-loop run side by side, one
  row per schedule, instance count, run and controller, from the run's own comparison.

Nothing in a table is typed by hand.

    .venv/bin/python benchmarks/report.py [--check]

``--check`` exits 1 when a table differs from what the files give, naming it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import config_as_run, fill_blocks, sync_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
RESULTS_PAGE = ROOT / "docs" / "results.md"
ORDER = ["shared_gpu", "closed_loop", "demo", "reaction", "steady", "faults", "soak", "trace_fidelity",
         "sessions", "simulator", "device_timeslice", "device_share", "device_util", "device_accuracy", "sdk",
         "reload_vs_shift", "footprint", "overhead", "reload_cost", "batch_curves", "loadgen"]

HEADLINE: list[tuple[str, str]] = [
    ("demo", "demo_shared_device_vs_triton-default"),
    ("shared_gpu", "shared_gpu_cotenants-ebb_reload"),
    ("shared_gpu", "shared_gpu_cotenants-nightly_gateway"),
    ("reaction", "step_decision_s"),
    ("steady", "steady_switches_aggressive"),
    ("faults", "faults_triton_killed_failed_by_sidecar"),
    ("simulator", "fidelity_worst_p95_error_pct"),
    ("footprint", "cpu_percent_of_one_core"),
]
"""The README's headline rows, in order: (benchmark, the row's ``key``, or its ``what``
for a row without one). The newest saved run holding the row gives it, with its
range over the runs as in the full table. To add a row, add its pair here and
say in the commit which row it replaces if the list is full (CONTRIBUTING.md)."""
MAX_HEADLINE = 8
"""The front page shows at most this many rows; the rest are in docs/results.md."""


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


def _newest_by_command(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest run of each command line, newest first."""
    newest: dict[str, dict[str, Any]] = {}
    for doc in docs:
        newest[doc.get("command", "")] = doc
    return sorted(newest.values(), key=lambda d: d["date"], reverse=True)


def _shown(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(run, row) pairs to show for one benchmark, whose runs are sorted oldest first.

    A benchmark run in several modes (``loadgen.py --protocol http``, ``simulator.py
    --fidelity``) saves each mode's rows: the newest run of each command line gives
    rows, newest first, and a row (by ``key``, else by ``what``) is shown once, from
    the newest run holding it.
    """
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    seen: set[str] = set()
    for doc in _newest_by_command(docs):
        for r in doc["rows"]:
            ident = r.get("key") or r["what"]
            if ident not in seen:
                seen.add(ident)
                out.append((doc, r))
    return out


def _ran(doc: dict[str, Any]) -> Path | None:
    """The config a run ran, as it was then (record.config_as_run): a row's range covers only
    the runs of the same contents (the T4 sidecar's ladder changed under its name)."""
    data = doc.get("data")
    config = data.get("config") if isinstance(data, dict) else None
    return config_as_run(config, Path(doc["_file"]).stem) if isinstance(config, str) else None


def _line(docs: list[dict[str, Any]], doc: dict[str, Any], r: dict[str, Any], page: Path) -> str:
    """One table line: the row, its range over the benchmark's runs of the same config, the run
    it comes from."""
    figure = r["figure"]
    key = r.get("key")
    if key is not None:
        values = [x["value"] for d in docs if _ran(d) == _ran(doc) for x in d["rows"]
                  if x.get("key") == key and isinstance(x.get("value"), (int, float))]
        if len(values) > 1:
            low, high, unit = _fmt(min(values)), _fmt(max(values)), r.get("unit", "")
            spread = f"{low}-{high}{unit}" if low != high else f"{low}{unit} in each"
            of = f"{r['value_name']} " if r.get("value_name") else ""
            figure += f" ({of}over {len(values)} runs: {spread})"
    cell = figure.replace("|", "\\|")
    link = Path("../" * (len(page.relative_to(ROOT).parts) - 1) + doc["_file"]).as_posix()
    return f"| {r['what']} | {cell} | `{r['command']}` | [{doc['date'][:10]}]({link}) |"


_HEADER = ["| what | figure | command | run |", "|---|---|---|---|"]


def table(results: Path = RESULTS, page: Path = RESULTS_PAGE) -> str:
    """Every benchmark's rows, in Markdown, from the saved runs under ``results``."""
    runs = _runs(results)
    names = sorted(runs, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    lines = list(_HEADER)
    for name in names:
        lines += [_line(runs[name], doc, r, page) for doc, r in _shown(runs[name])]
    if len(lines) == 2:
        lines.append("| no saved runs yet | run `make bench`, then `make results` | | |")
    return "\n".join(lines)


def headline(results: Path = RESULTS, page: Path = README) -> str:
    """The rows of :data:`HEADLINE`, in its order."""
    if len(HEADLINE) > MAX_HEADLINE:
        sys.exit(f"benchmarks/report.py: HEADLINE has {len(HEADLINE)} rows: at most {MAX_HEADLINE}")
    runs = _runs(results)
    lines = list(_HEADER)
    for name, ident in HEADLINE:
        found = [(doc, r) for doc, r in _shown(runs.get(name, [])) if (r.get("key") or r["what"]) == ident]
        if not found:
            sys.exit(f"benchmarks/report.py: HEADLINE row ({name!r}, {ident!r}) is in no saved run "
                     f"under {_rel(results)}/{name}/")
        lines.append(_line(runs[name], *found[0], page))
    return "\n".join(lines)


def _share(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ratio(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}x"


def closed_loop_table(results: Path = RESULTS, page: Path = RESULTS_PAGE) -> str:
    """The closed-loop runs side by side: per schedule, instances and controller, the share
    over the SLO and the device time per request against Triton's default and the best
    static profile of the same run, the bound the run's own static phases allow, and the
    low phases' p95."""
    lines = ["| schedule | instances | controller | over the SLO: controller / default / best static "
             "| device time vs the default: controller / best static | bound | low-phase p95 vs "
             "the default | run |", "|---|---|---|---|---|---|---|---|"]
    keyed = []
    for doc in _runs(results).get("closed_loop", []):
        for run in (doc.get("data") or {}).get("runs", []):
            keyed.append(((run.get("instances", 0), run.get("schedule", ""), doc["date"]), doc, run))
    for (instances, schedule, _), doc, run in sorted(keyed, key=lambda k: k[0]):
        comp, modes = run.get("comparison") or {}, run.get("modes") or {}
        default, best = modes.get("triton-default") or {}, comp.get("best_static")
        static = modes.get(best) or {}
        static_device = (static["device_ms"] / default["device_ms"]
                         if static.get("device_ms") and default.get("device_ms") else None)
        link = Path("../" * (len(page.relative_to(ROOT).parts) - 1) + doc["_file"]).as_posix()
        for name, c in (comp.get("controllers") or {}).items():
            bound = (c.get("device_bound") or {}).get("device_vs_default")
            lines.append(
                f"| {schedule} | {instances} | {name} | {_share(c.get('over_slo_share'))} / "
                f"{_share(default.get('over_slo_share'))} / {_share(c.get('best_static_over_slo_share'))} "
                f"({best}) | **{_ratio(c.get('device_vs_default'))}** / {_ratio(static_device)} | "
                f"{_ratio(bound)} | {_ratio(c.get('low_p95_vs_default'))} | "
                f"[{doc['date'][:10]}]({link}) |")
    if len(lines) == 2:
        lines.append("| no saved closed-loop runs yet | | | | | | | |")
    return "\n".join(lines)


BLOCKS: dict[Path, list[tuple[str, Callable[[], str]]]] = {
    README: [("headline", headline)],
    RESULTS_PAGE: [("results", table), ("closed-loop", closed_loop_table)],
}
"""Each page and the generated tables in it, by marker name."""


def render(page: Path, text: str) -> str:
    """``text`` with every generated table of ``page`` regenerated."""
    return fill_blocks(page, text, dict(BLOCKS[page]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a table is out of date")
    args = ap.parse_args()
    stale = [_rel(page) for page, blocks in BLOCKS.items()
             if not sync_blocks(page, dict(blocks), check=args.check)]
    if args.check:
        if stale:
            sys.exit(f"results tables out of date in {', '.join(stale)}: run `make results`")
        return
    runs = _runs()
    rows = sum(len(_shown(docs)) for docs in runs.values())
    print(f"README.md: {len(HEADLINE)} headline rows; docs/results.md: {rows} rows from "
          f"{len(runs)} benchmarks in {_rel(RESULTS)}")


if __name__ == "__main__":
    main()
