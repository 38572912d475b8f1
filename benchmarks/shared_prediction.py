"""The shared rule's prediction of the climbed rung's p95 against that rung held, over saved runs.

    .venv/bin/python benchmarks/shared_prediction.py [--profile wait25] [--since 20261205]
        [--by-phase] [--json]

Reads every saved side-by-side result with co-tenants under
``benchmarks/results/shared_gpu/`` (from ``--since`` on) and its controllers'
decision logs. For each tick of a controller on ``--profile`` while others used
at least ``--others`` of the device (the shared rule's condition), 3 s or more
into its phase, it takes the tick's ``p95_predicted_ms`` of that profile and
the p95 the same profile held measured in the same phase of the same repeat.
Per phase rate and co-tenant count: the ticks, the median prediction and its
10th-90th percentile, the held p95's median, their difference, the stretch,
and how many ticks predicted over the SLO. ``--by-phase``: per schedule and
phase, the held share over the SLO beside how often one window (the rule as it
is), two windows in a row, and the mean of the last three predict over the SLO.
Reads only; writes nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from autobatch.lab.compare import decision_time_s

RESULTS = Path(__file__).resolve().parent / "results" / "shared_gpu"
LOG = re.compile(r"(\d{8}-\d{6})-(.+)-r(\d+)-g(\d+)-(.+)\.jsonl\.gz")


def phase_bounds(data: dict[str, Any]) -> list[tuple[float, float, dict[str, Any]]]:
    """Each measured phase (not the lead-in) as its start and end, in seconds after the lead-in."""
    out, t = [], 0.0
    for ph in data["phases"]:
        if ph["name"] == "lead-in":
            continue
        out.append((t, t + ph["duration_s"], ph))
        t += ph["duration_s"]
    return out


class ControllerLog(NamedTuple):
    """One controller's decision log in a saved side-by-side run with co-tenants."""

    result: str
    """The result's file stem."""
    data: dict[str, Any]
    """The result's ``data``."""
    bounds: list[tuple[float, float, dict[str, Any]]]
    """Its measured phases (:func:`phase_bounds`)."""
    log: Path
    mode: str
    run: dict[str, Any]
    """The repeat the log belongs to."""
    ran: dict[str, Any]
    """The controller's mode in that repeat (its ``t0_wall``, ``t0_mono``)."""


def controller_logs(since: str, results: Path = RESULTS) -> Iterator[ControllerLog]:
    """Every controller's decision log of the runs saved under ``results`` with co-tenants,
    from ``since`` (YYYYMMDD) on, with its run and its mode in it."""
    for res in sorted(results.glob("*.json")):
        if res.stem[:8] < since:
            continue
        data = json.loads(res.read_text(encoding="utf-8"))["data"]
        if not any(p.get("cotenants") for p in data["phases"]):
            continue
        bounds = phase_bounds(data)
        for log in sorted((results / "logs").glob(f"{res.stem}-*.jsonl.gz")):
            m = LOG.fullmatch(log.name)
            if m is None:
                continue
            _, _, repeat, group, mode = m.groups()
            run = next((r for r in data["runs"] if r["repeat"] == int(repeat)), None)
            if run is None or int(group) >= len(run["groups"]):
                continue
            ran = run["groups"][int(group)]["modes"].get(mode)
            if ran is not None:
                yield ControllerLog(res.stem, data, bounds, log, mode, run, ran)


def ticks(profile: str, since: str, others: float, settle_s: float = 3.0) -> Iterator[dict[str, Any]]:
    """Every tick on ``profile`` with others at least ``others`` of the device, 3 s into a phase."""
    for c in controller_logs(since):
        data, bounds, log, mode, run, ran = c.data, c.bounds, c.log, c.mode, c.run, c.ran
        held = [g["modes"][profile] for g in run["groups"] if profile in g["modes"]]
        if not held:
            continue
        with gzip.open(log, "rt", encoding="utf-8") as f:
            for index, line in enumerate(f):
                row = json.loads(line)
                d = row.get("decision") or {}
                sig = d.get("signals") or {}
                pred = (sig.get("p95_predicted_ms") or {}).get(profile)
                if (d.get("current") or row.get("active")) != profile or pred is None:
                    continue
                if (sig.get("others_share") or 0.0) < others:
                    continue
                # the run's clock (monotonic where the line carries it), from the lead-in's end
                t = decision_time_s(row, ran["t0_wall"], ran.get("t0_mono")) - data["lead_in_s"]
                phase = next((ph for lo, hi, ph in bounds if lo + settle_s <= t < hi), None)
                if phase is None:
                    continue
                measured = next(p for p in held[0]["phases"] if p["name"] == phase["name"])
                default = next(p for p in run["groups"][0]["modes"]["triton-default"]["phases"]
                               if p["name"] == phase["name"])
                yield {"result": c.result, "log": log.name, "index": index,
                       "schedule": data["schedule"], "mode": mode,
                       "phase": phase["name"], "rate_rps": phase["rate_rps"],
                       "cotenants": phase.get("cotenants") or 0, "predicted_ms": pred,
                       "held_p95_ms": measured["p95_ms"], "held_over_share": measured["over_slo_share"],
                       "default_over_share": default["over_slo_share"],
                       "mean_request_ms": (row.get("window") or {}).get("mean_request_ms"),
                       "stretch": sig.get("stretch"),
                       "action": d.get("action"), "reason": d.get("reason")}


def _q(xs: Sequence[float], f: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]


def table(rows: Sequence[dict[str, Any]], slo_ms: float) -> list[dict[str, Any]]:
    by: dict[tuple[float, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["rate_rps"], r["cotenants"])].append(r)
    out = []
    for (rate, cot), xs in sorted(by.items()):
        pred = [x["predicted_ms"] for x in xs]
        held = statistics.median(x["held_p95_ms"] for x in xs)
        st = [x["stretch"] for x in xs if x["stretch"] is not None]
        out.append({"rate_rps": rate, "cotenants": cot, "ticks": len(xs),
                    "predicted_median_ms": round(statistics.median(pred), 1),
                    "predicted_p10_ms": round(_q(pred, 0.1), 1), "predicted_p90_ms": round(_q(pred, 0.9), 1),
                    "held_p95_median_ms": round(held, 1),
                    "difference_ms": round(statistics.median(pred) - held, 1),
                    "stretch_p10": round(_q(st, 0.1), 2) if st else None,
                    "stretch_p90": round(_q(st, 0.9), 2) if st else None,
                    "over_slo_ticks": sum(1 for p in pred if p > slo_ms),
                    "results": len({x["result"] for x in xs})})
    return out


def by_phase(rows: Sequence[dict[str, Any]], slo_ms: float, least: int = 20) -> list[dict[str, Any]]:
    """Per schedule and phase (``least`` ticks or more): what ``profile`` held measured there, the
    windows' mean request and prediction, and how often the shared rule's condition would
    hold on one window (as now), on two windows in a row, and on the mean of the last three."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["schedule"], r["phase"])].append(r)
    out = []
    for (schedule, phase), xs in sorted(by.items()):
        if len(xs) < least:
            continue
        runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for x in xs:
            runs[x["log"]].append(x)
        two = three = pairs = triples = 0
        for ticks_ in runs.values():
            for i, x in enumerate(ticks_):
                # consecutive ticks of one log: a run of windows the rule reads in a row
                if i >= 1 and x["index"] - ticks_[i - 1]["index"] == 1:
                    pairs += 1
                    two += x["predicted_ms"] > slo_ms and ticks_[i - 1]["predicted_ms"] > slo_ms
                    if i >= 2 and ticks_[i - 1]["index"] - ticks_[i - 2]["index"] == 1:
                        triples += 1
                        three += sum(t["predicted_ms"] for t in ticks_[i - 2:i + 1]) / 3 > slo_ms
        held = [x["held_p95_ms"] for x in xs]
        over = [x["held_over_share"] for x in xs]
        mean = [x["mean_request_ms"] for x in xs if x["mean_request_ms"] is not None]
        gap = [x["held_over_share"] - x["default_over_share"] for x in xs]
        out.append({"schedule": schedule, "phase": phase, "rate_rps": xs[0]["rate_rps"],
                    "cotenants": xs[0]["cotenants"], "ticks": len(xs), "logs": len(runs),
                    "held_p95_min_ms": round(min(held), 1), "held_p95_max_ms": round(max(held), 1),
                    "held_over_min": round(min(over), 4), "held_over_max": round(max(over), 4),
                    "over_default_min": round(min(gap), 4), "over_default_max": round(max(gap), 4),
                    "mean_request_median_ms": round(statistics.median(mean), 1) if mean else None,
                    "predicted_median_ms": round(statistics.median(x["predicted_ms"] for x in xs), 1),
                    "one_window": round(sum(x["predicted_ms"] > slo_ms for x in xs) / len(xs), 3),
                    "two_in_a_row": round(two / pairs, 3) if pairs else None,
                    "mean_of_three": round(three / triples, 3) if triples else None})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="wait25")
    ap.add_argument("--since", default="20261205", help="the first result's date, YYYYMMDD")
    ap.add_argument("--others", type=float, default=0.2, help="the others' least share of the device")
    ap.add_argument("--slo", type=float, default=60.0, help="the SLO's p95, ms")
    ap.add_argument("--by-phase", action="store_true",
                    help="per schedule and phase: the held share over the SLO and how often one window, "
                         "two in a row and the mean of three predict over it")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    found = list(ticks(args.profile, args.since, args.others))
    if args.by_phase:
        emit(by_phase(found, args.slo), args.json, [
            "schedule, phase", "rate", "co-tenants", "ticks (logs)", f"{args.profile} held p95",
            "held over the SLO", "less the default's", "window's mean request", "predicted p95",
            f"over {args.slo:g} ms: one window", "two in a row", "mean of three"], lambda r: [
            f"{r['schedule']} `{r['phase']}`", f"{r['rate_rps']:g}/s", r["cotenants"],
            f"{r['ticks']} ({r['logs']})", f"{r['held_p95_min_ms']}-{r['held_p95_max_ms']}",
            f"{100 * r['held_over_min']:.1f}-{100 * r['held_over_max']:.1f}%",
            f"{100 * r['over_default_min']:+.1f} to {100 * r['over_default_max']:+.1f}",
            r["mean_request_median_ms"], r["predicted_median_ms"], _share(r["one_window"]),
            _share(r["two_in_a_row"]), _share(r["mean_of_three"])])
        return
    emit(table(found, args.slo), args.json, [
        "phase's rate", "co-tenants", "ticks", "predicted p95, median (10th-90th)", "held p95, median",
        "difference", "stretch (10th-90th)", f"ticks over {args.slo:g} ms"], lambda r: [
        f"{r['rate_rps']:g}/s", r["cotenants"], r["ticks"],
        f"{r['predicted_median_ms']} ({r['predicted_p10_ms']}-{r['predicted_p90_ms']})",
        r["held_p95_median_ms"], f"{r['difference_ms']:+.1f}", f"{r['stretch_p10']}-{r['stretch_p90']}",
        r["over_slo_ticks"]])


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def emit(rows: Sequence[dict[str, Any]], as_json: bool, header: Sequence[str],
          cells: Callable[[dict[str, Any]], Sequence[Any]]) -> None:
    """``rows`` as JSON, or as a markdown table of ``header`` and each row's ``cells``."""
    if as_json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in cells(r)) + " |")


if __name__ == "__main__":
    main()
