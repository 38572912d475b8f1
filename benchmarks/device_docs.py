"""docs/shared-gpu.md's device figures, written from the newest saved run of each device benchmark.

    .venv/bin/python benchmarks/device_docs.py            # write the blocks
    .venv/bin/python benchmarks/device_docs.py --check    # exit 1 if a block is out of date

Each block of "How it measures up" sits between ``<!-- device-NAME:begin -->``
and ``<!-- device-NAME:end -->`` and comes only from the newest saved run of
its benchmark under ``benchmarks/results/`` (for ``device_share``, the newest
of each case), with the file, date, command and the machine's load under it.
Nothing in a block is typed; what the prose around them says of a miss is the
why, not the figure. ``tests/unit/test_device_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import fill_blocks, saved, sync_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs" / "shared-gpu.md"


class NotRun(Exception):
    """No saved run of a benchmark yet: its block says so and how to make one."""


def _saved(benchmark: str, where: Callable[[dict[str, Any]], bool] = lambda d: True) -> dict[str, Any]:
    docs = [d for d in saved(RESULTS / benchmark) if where(d)]
    if not docs:
        raise NotRun(f"No saved run yet: `.venv/bin/python benchmarks/{benchmark}.py`.")
    return max(docs, key=lambda d: d["date"])


def _source(doc: dict[str, Any]) -> str:
    load = doc.get("machine", {}).get("load_average")
    busy = "" if not load else f", load average {load[0]:g} from every session on the 2 cores"
    return f"From `{doc['_file']}` ({doc['date']}{busy}): `{doc['command']}`."


def _verdict(got: float, target: float, unit: str) -> str:
    if got <= target:
        return f"target {target:g}{unit}: **met**"
    return f"target {target:g}{unit}: **missed by {got - target:.1f} points**"


def _pct(x: float) -> str:
    return f"{x:+.0f}%"


NAMES = {"device-idle": "on the device, as the machine was",
         "device-loaded": "on the device, both cores busy",
         "plain-idle": "not on the device, as the machine was",
         "plain-loaded": "not on the device, both cores busy"}


def accuracy() -> str:
    doc = _saved("device_accuracy")
    d = doc["data"]
    modes = d["modes"]
    lines = ["| batch | curve ms | " + " | ".join(NAMES.get(m, m) for m in modes) + " |",
             "|---|---|" + "---|" * len(modes)]
    for b in map(str, d["sizes"]):
        cells = [f"{r['median_ms'][b]:.2f} ({r['error_pct'][b]:+.1f}%)" for r in modes.values()]
        lines.append(f"| {b} | {d['curve_ms'][b]:.2f} | " + " | ".join(cells) + " |")
    lines.append("| median \\|error\\| | | " + " | ".join(
        f"**{r['median_abs_error_pct']:.1f}%**" for r in modes.values()) + " |")
    lines += _own_times(d)
    lines.append("")
    for m in ("device-idle", "device-loaded"):
        r = modes[m]
        late = "" if r["lateness_mean_ms"] is None else (
            f"; the device itself answered {r['lateness_mean_ms']:.3f} ms after each job's exact "
            f"completion time on average ({r['jobs']} jobs)")
        lines.append(f"- {NAMES[m]}: {_verdict(r['median_abs_error_pct'], d['target_pct'], '%')}{late}.")
    judged = f"The target is judged on {d['judged_on']}. " if "judged_on" in d else ""
    lines += ["", f"{d['curve']}, {d['repeats'] * d['blocks']} batches a size and mode, the device at "
                  f"priority {d.get('priority', '?')}. {judged}" + _source(doc)]
    return "\n".join(lines)


def _own_times(d: dict[str, Any]) -> list[str]:
    """The device's own batch times beside the table (runs from 2026-12-02 13:00 have them)."""
    own = {m: r["own"] for m, r in d["modes"].items() if "own" in r}
    if not own:
        return []
    lines = ["", "The device's own batch times, from what it answered (median; reported, not judged): "
                 "`finished - started` on its model clock | `answered - started`, with the answer's delay:",
             "", "| batch | curve ms | " + " | ".join(NAMES.get(m, m) for m in own) + " |",
             "|---|---|" + "---|" * len(own)]
    for b in map(str, d["sizes"]):
        cells = [f"{o['device_ms']['median_ms'][b]:.3f} \\| {o['answered_ms']['median_ms'][b]:.3f} "
                 f"({o['answered_ms']['error_pct'][b]:+.2f}%)" for o in own.values()]
        lines.append(f"| {b} | {d['curve_ms'][b]:.2f} | " + " | ".join(cells) + " |")
    lines.append("| median \\|error\\| | | " + " | ".join(
        f"{o['device_ms']['median_abs_error_pct']:.2f}% \\| {o['answered_ms']['median_abs_error_pct']:.2f}%"
        for o in own.values()) + " |")
    return lines


def timeslice() -> str:
    doc = _saved("device_timeslice")
    d = doc["data"]
    sim = "simulated_ms" in next(iter(d["cases"].values()))
    lines = ["| co-tenants | duty | device ms a window (range over repeats) | vs 34 ms | client p50 ms | "
             + ("simulator ms a window | vs 34 ms |" if sim else "the sharing model predicts |"),
             "|---|---|---|---|---|---|" + ("---|" if sim else "")]
    for c in d["cases"].values():
        alone = c["cotenants"] == 0
        row = (f"| {c['cotenants']} | {'-' if alone else format(c['duty'], 'g')} | "
               f"{c['compute_ms']:.1f} ({c['compute_min_ms']:.1f}-{c['compute_max_ms']:.1f}) | "
               f"{'-' if alone else _pct(c['vs_seed_pct'])} | {c['latency_p50_ms']:.1f} | ")
        if sim:
            row += f"{c['simulated_ms']:.1f} | {'-' if alone else _pct(c['simulated_vs_seed_pct'])} |"
        else:
            row += f"{c['predicted_ms']:.1f} |"
        lines.append(row)
    lines.append("")
    first = d["cotenant"]["duties"][0]
    for k in (2, 3):
        c = d["cases"][f"{k}@{first:g}"]
        parts = [f"the device ({_verdict(abs(c['vs_seed_pct']), 15.0, '%')})"]
        if sim:
            parts.append(f"the simulator ({_verdict(abs(c['simulated_vs_seed_pct']), 15.0, '%')})")
        lines.append(f"- beside {k} co-tenants at duty {first:g}, against 34 ms: " + ", ".join(parts) + ".")
    co = d["cotenant"]
    lines += ["", f"Co-tenants: the seed model at batch {co['batch_size']} ({co['work_ms']:g} ms on "
                  f"{co['curve']}); {d['windows']} windows a run, {d['repeats']} repeats, "
                  f"{d['quantum_ms']:g} ms turns. " + _source(doc)]
    return "\n".join(lines)


def _share_case(doc: dict[str, Any], what: str) -> str:
    d = doc["data"]
    lines = [f"{what} ({d['curve']}, Triton's default batching, {d['runs_per_rate']} runs of "
             f"{d['seconds']:g} s a rate, medians):", "",
             "| req/s | p50 ms measured / simulated | p95 ms measured / simulated (measured range) | "
             "device busy measured / simulated | worst error |", "|---|---|---|---|---|"]
    worst = 0.0
    for r in d["rates"]:
        s, e = r["simulated"], r["error"]
        w = max(abs(x) for x in e.values())
        worst = max(worst, w)
        lo, hi = r["p95_spread_ms"]
        lines.append(
            f"| {r['rate_rps']:g} | {r['p50_ms']:.1f} / {s['p50_ms']:.1f} ({e['p50_ms']:+.0%}) | "
            f"{r['p95_ms']:.1f} / {s['p95_ms']:.1f} ({e['p95_ms']:+.0%}; {lo:.1f}-{hi:.1f}) | "
            f"{r['busy_share']:.1%} / {s['busy_share']:.1%} ({e['busy_share']:+.0%}) | {w:.1%} |")
    o = d["overheads"]
    verdict = _verdict(100 * worst, 100 * d["target"], "%")
    lines += ["", f"Worst over the rates: {100 * worst:.1f}%, {verdict}. "
                  "What the server adds to the curve, calibrated alone at a low rate: "
                  f"{o['batch_overhead_ms']:.2f} ms a batch, "
                  f"{o['fixed_latency_ms']:.2f} ms of fixed latency a request. "
              + _source(doc)]
    return "\n".join(lines)


def share() -> str:
    out = []
    cases = (("instances", "Two instances of one model"), ("models", "Two models, one instance each"))
    for case, what in cases:
        try:
            doc = _saved("device_share", lambda x, c=case: x["data"].get("case") == c)
        except NotRun:
            out.append(f"{what}: no saved run yet: "
                       f"`.venv/bin/python benchmarks/device_share.py --case {case}`.")
            continue
        out.append(_share_case(doc, what))
    return "\n\n".join(out)


def util() -> str:
    doc = _saved("device_util")
    d = doc["data"]
    lines = ["| req/s | sidecar's mean reading | device's busy share | difference | "
             "per window: median \\|diff\\| (max) |", "|---|---|---|---|---|"]
    for c in d["cases"]:
        lines.append(f"| {c['rate_rps']:g} | {100 * c['sidecar_mean']:.1f}% | "
                     f"{100 * c['device_share']:.1f}% | **{c['diff_points']:+.2f} points** | "
                     f"{c['per_window_median_abs_points']:.1f} ({c['per_window_max_abs_points']:.1f}) |")
    windows = statistics.median(c["read"] for c in d["cases"])
    verdict = _verdict(d["worst_diff_points"], d["target_points"], " points")
    lines += ["", f"Worst over the rates: {d['worst_diff_points']:.2f} points, {verdict}; "
                  f"{windows:g} readings a rate, {d['period_ms']:g} ms periods. " + _source(doc)]
    return "\n".join(lines)


BLOCKS: dict[str, Callable[[], str]] = {"accuracy": accuracy, "timeslice": timeslice, "share": share,
                                        "util": util}


def _or_how_to_run(make: Callable[[], str]) -> Callable[[], str]:
    def block() -> str:
        try:
            return make()
        except NotRun as missing:
            return str(missing)
    return block


def _blocks() -> dict[str, Callable[[], str]]:
    return {f"device-{name}": _or_how_to_run(make) for name, make in BLOCKS.items()}


def render(text: str) -> str:
    """``text`` with every device block rewritten from the saved runs."""
    return fill_blocks(DOCS, text, _blocks())


def check() -> bool:
    """Whether docs/shared-gpu.md's device blocks are what the newest saved runs give."""
    return sync_blocks(DOCS, _blocks(), check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a block differs from the saved runs")
    args = ap.parse_args()
    if args.check:
        if not check():
            sys.exit(f"{DOCS.relative_to(ROOT)}: a device block differs from the newest saved run: "
                     "run benchmarks/device_docs.py")
        return
    sync_blocks(DOCS, _blocks(), check=False)
    print(f"wrote {DOCS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
