"""Saving a benchmark's result where the published figures come from.

Every benchmark ends with :func:`save_result`: one JSON file per run under
``benchmarks/results/<benchmark>/<UTC time>.json`` holding the machine, the
date, the command line, the full figures (``data``) and the rows it adds to the
results table, docs/results.md (``rows``: what, figure, command). ``make results``
(:mod:`report`) regenerates that table from the newest run of each benchmark;
where several saved runs hold a row with the same ``key`` and a numeric
``value``, the table gives their range too. Every generated block of a page
(``<!-- NAME:begin -->`` ... ``<!-- NAME:end -->``) is written and checked by
:func:`sync_blocks`, whichever script makes it.

    from record import row, save_result
    save_result("closed_loop", data, [row("step, share over the SLO", "0.4%", key="step_over", value=0.4)])
"""

from __future__ import annotations

import gzip
import json
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parents[1]

__all__ = ["RENAMED_CONFIGS", "RESULTS", "config_as_run", "fill_blocks", "machine", "row", "save_result",
           "sync_blocks"]

RENAMED_CONFIGS = {"examples/sidecar-t4.yaml": (("20261204-181600", "examples/sidecar-t4-aggressive.yaml"),
                                                ("20261206-052000", "examples/sidecar-t4-20261204.yaml"),
                                                ("20261206-091500", "examples/sidecar-t4-20261206.yaml"),
                                                ("20261206-182500", "examples/sidecar-t4-20261206b.yaml"))}
"""A config whose contents changed under its name, oldest cut first: the runs saved before a cut
(and at or after the one before it) ran what that cut's file holds. The T4 sidecar climbed to
``aggressive`` until 2026-12-04 18:16 UTC (the cut falls between the last run of the old
contents, bursty saved 18:15:28, and the first of the new, the demo at 18:17:55), and `no_gain`
could act on a learned cost until 2026-12-06 05:20 (the last run of the old contents,
cotenants-ebb, saved 05:09:20; the first of the new, cotenants-ramp, 05:33:43), and the shared
rule acted on one window in steady state until 2026-12-06 09:15 (the last shipped run of the old
contents, cotenants-step, saved 07:43:08; the side-by-side runs of 08:06-09:50 set
``policy.device.steady_windows`` in each controller's variant, so either file replays them), and
the way back from a shared move waited out the dwell until 2026-12-06 18:25 (the last shipped run of
the old contents, cotenants-ramp, saved 17:02:22; the side-by-side runs of 17:22-18:24 set
``policy.device.release`` in each controller's variant). A result is stamped when it is saved, at
its end."""


def config_as_run(config: str, stamp: str) -> Path:
    """The file holding the config ``config`` (a path from the repository's root, as a saved
    run names it) as it was when the run stamped ``stamp`` (its result's file stem) ran: the
    decision logs replay through it, and verdicts are recomputed with its ladder."""
    old = next((f for cut, f in RENAMED_CONFIGS.get(config, ()) if stamp < cut), config)
    return ROOT / old


def machine() -> dict[str, Any]:
    """What the figures were measured on: cores, CPU model, Python, OS, and how busy it was."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        # 1/5/15-minute load average when the run ended: how busy the shared cores were.
        "load_average": load,
        # How fast this VM ran plain Python when the run ended: its speed moves by 1.4-2.1x
        # from one day to the next (2026-12-01), which moves every absolute figure.
        "speed_probe_ms": speed_probe_ms(),
    }


def speed_probe_ms(repeats: int = 5) -> float:
    """The best of ``repeats`` timings of a fixed pure-Python loop, in ms: a speed reading
    saved with each result, so runs made on a slower day can be told apart (13-16 ms on
    2026-12-01, when `benchmarks/simulator.py` ran 1.3-2.1x slower than on 2026-11-30;
    results before then have none)."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        sum(i * i for i in range(200_000))
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000.0, 2)


def row(what: str, figure: str, *, command: str | None = None, key: str | None = None,
        value: float | None = None, unit: str = "", value_name: str | None = None) -> dict[str, Any]:
    """One line of the results table (docs/results.md); ``key``/``value`` let runs give a range;
    ``value_name`` says what the range is of where the figure holds several numbers."""
    out: dict[str, Any] = {"what": what, "figure": figure}
    if command is not None:
        out["command"] = command
    if key is not None:
        out["key"] = key
        out["value"] = value
        out["unit"] = unit
        if value_name is not None:
            out["value_name"] = value_name
    return out


def _without_keep_logs(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    for prev, a in zip(["", *argv], argv, strict=False):
        if a != "--keep-logs" and prev != "--keep-logs" and not a.startswith("--keep-logs="):
            out.append(a)
    return out


def save_result(benchmark: str, data: Any, rows: Sequence[dict[str, Any]] = (),
                *, command: str | None = None) -> Path:
    """Write this run's result; returns the file. ``command`` defaults to this process's
    argv, less ``--keep-logs DIR``: where the logs were kept is no part of the command that
    reproduces the figures (report.py keys runs by command line)."""
    now = time.gmtime()
    cmd = command or "python " + " ".join(shlex.quote(a) for a in [
        os.path.relpath(sys.argv[0], Path(__file__).resolve().parents[1]), *_without_keep_logs(sys.argv[1:])])
    doc = {
        "benchmark": benchmark,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", now),
        "command": cmd,
        "machine": machine(),
        "rows": [{**r, "command": r.get("command", cmd)} for r in rows],
        "data": data,
    }
    folder = RESULTS / benchmark
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (time.strftime("%Y%m%d-%H%M%S", now) + ".json")
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"result saved: {path.relative_to(RESULTS.parents[1])}", file=sys.stderr)
    return path


def saved(folder: str | Path) -> list[dict[str, Any]]:
    """Every saved result in ``folder`` (a benchmark's name under ``results/``, or a
    directory), oldest first by file name, each with ``_file``: its path from the project
    root where it lies under it."""
    where = RESULTS / folder if isinstance(folder, str) else folder
    docs = []
    for path in sorted(where.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["_file"] = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        docs.append(doc)
    return docs


def save_logs(result: Path, logs: Mapping[str, bytes]) -> None:
    """The run's decision logs beside its result: ``logs/<result stem>-<name>.jsonl.gz``
    (``autobatch replay`` reads them gunzipped; tests/unit/test_results_replay.py replays
    the closed loop's through the shipped policy)."""
    folder = result.parent / "logs"
    folder.mkdir(exist_ok=True)
    for name, text in logs.items():
        with gzip.open(folder / f"{result.stem}-{name}.jsonl.gz", "wb", compresslevel=9) as f:
            f.write(text)


def fill_blocks(page: Path, text: str, blocks: Mapping[str, Callable[[], str]]) -> str:
    """``text`` (``page``'s) with the body of each ``<!-- NAME:begin -->`` ... ``<!-- NAME:end -->``
    block replaced by ``blocks[NAME]()``, in order; exits naming the page and the markers when
    a block's are missing (before making its body)."""
    for name, make in blocks.items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin not in text or end not in text:
            shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            sys.exit(f"{shown}: no {begin} ... {end} markers")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{make()}\n{end}{tail}"
    return text


def sync_blocks(page: Path, blocks: Mapping[str, Callable[[], str]], *, check: bool) -> bool:
    """Whether ``page``'s generated blocks already are what ``blocks`` make; unless ``check``
    (a ``--check`` run only tells), the page is rewritten with them."""
    text = page.read_text(encoding="utf-8")
    new = fill_blocks(page, text, blocks)
    if not check and new != text:
        page.write_text(new, encoding="utf-8")
    return new == text
