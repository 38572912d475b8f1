"""Every ``shared`` move of the controllers in saved side-by-side runs, against the profiles held.

    .venv/bin/python benchmarks/shared_switches.py [--since 20261205] [--points 1] [--start-s 3]
        [--moves] [--json]

For each ``shared`` switch in the decision logs of the saved runs with co-tenants
under ``benchmarks/results/shared_gpu/`` (from ``--since`` on): the phase it came
in and how far into it, the tick's predicted p95 of the live profile and of the
target, and what the two profiles, held in the same repeat, measured in that
phase (their shares over the SLO, from whichever group held each). A move is
*wanted* where the target held went ``--points`` or more under the live profile
held, the gateway's per-phase target against the best static: below that the
move buys less than the comparison's own noise and spends device time.

Per class (wanted or not; within ``--start-s`` of the phase's start, where a
co-tenant's arrival or a load step lets the rule act on one window, or later):
the moves, the range of the live profile's prediction, and how many had the
target predicted no lower than the live profile (the rule's fallback to the rung
that waits least). ``--moves``: every move. Moves whose two profiles were not
both held are counted apart. Reads only; writes nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from shared_prediction import RESULTS, controller_logs, emit

from autobatch.lab.compare import decision_time_s


def moves(since: str, results: Path = RESULTS) -> Iterator[dict[str, Any]]:
    """Every ``shared`` switch of a controller in a saved run with co-tenants, with the two
    profiles' held shares over the SLO in its phase (None where one was not held)."""
    for c in controller_logs(since, results):
        data, bounds, ran = c.data, c.bounds, c.ran
        held: dict[str, dict[str, float]] = {}
        for g in c.run["groups"]:
            for name, h in g["modes"].items():
                held.setdefault(name, {p["name"]: p["over_slo_share"] for p in h.get("phases", [])})
        with gzip.open(c.log, "rt", encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                d = row.get("decision") or {}
                if d.get("action") != "switch" or d.get("reason") != "shared":
                    continue
                t = decision_time_s(row, ran["t0_wall"], ran.get("t0_mono")) - data["lead_in_s"]
                where = next(((lo, ph) for lo, hi, ph in bounds if lo <= t < hi), None)
                if where is None:
                    continue
                lo, ph = where
                pred = (d.get("signals") or {}).get("p95_predicted_ms") or {}
                frm, to = d["current"], d["target"]
                live, target = held.get(frm, {}).get(ph["name"]), held.get(to, {}).get(ph["name"])
                yield {"result": c.result, "schedule": data["schedule"], "repeat": c.run["repeat"],
                       "mode": c.mode, "phase": ph["name"], "rate_rps": ph["rate_rps"],
                       "cotenants": ph.get("cotenants") or 0, "into_s": round(t - lo, 2),
                       "from": frm, "to": to,
                       "predicted_from_ms": pred.get(frm), "predicted_to_ms": pred.get(to),
                       "held_from": live, "held_to": target,
                       "gain_points": None if live is None or target is None
                       else round(100 * (live - target), 2)}


def classes(rows: Sequence[dict[str, Any]], points: float, start_s: float) -> list[dict[str, Any]]:
    """Per class (wanted or not, at a phase's start or later): the moves, the live profile's
    predicted p95 range and how many had the target predicted no lower than the live one."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["gain_points"] is None:
            key = ("not both held", "-")
        else:
            key = ("wanted" if r["gain_points"] >= points - 1e-9 else "not wanted",
                   "start" if r["into_s"] < start_s else "later")
        by[key].append(r)
    out = []
    for (kind, when), xs in sorted(by.items()):
        pred = [x["predicted_from_ms"] for x in xs if x["predicted_from_ms"] is not None]
        no_lower = sum(1 for x in xs if None not in (x["predicted_from_ms"], x["predicted_to_ms"])
                       and x["predicted_to_ms"] >= x["predicted_from_ms"])
        out.append({"class": kind, "when": when, "moves": len(xs),
                    "predicted_min_ms": min(pred) if pred else None,
                    "predicted_max_ms": max(pred) if pred else None,
                    "target_no_lower": no_lower,
                    "phases": sorted({f"{x['schedule']} {x['phase']}" for x in xs})})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--since", default="20261205", help="the first result's date, YYYYMMDD")
    ap.add_argument("--points", type=float, default=1.0,
                    help="a move is wanted where the target held went this many points under the live one")
    ap.add_argument("--start-s", type=float, default=3.0,
                    help="a move this soon into its phase is at its start")
    ap.add_argument("--moves", action="store_true", help="every move, not the classes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    found = list(moves(args.since))
    if args.moves:
        emit(found, args.json, [
            "result", "schedule, phase", "repeat", "mode", "s into it", "move", "predicted p95 (ms)",
            "held over the SLO", "gain (points)"], lambda r: [
            r["result"], f"{r['schedule']} `{r['phase']}`", r["repeat"], r["mode"], r["into_s"],
            f"{r['from']} -> {r['to']}", f"{r['predicted_from_ms']} -> {r['predicted_to_ms']}",
            "-" if r["gain_points"] is None else f"{100 * r['held_from']:.1f}% -> {100 * r['held_to']:.1f}%",
            "-" if r["gain_points"] is None else f"{r['gain_points']:+.1f}"])
        return
    emit(classes(found, args.points, args.start_s), args.json, [
        "class", "in its phase", "moves", "live profile predicted (ms)", "target predicted no lower",
        "phases"], lambda r: [
        r["class"], r["when"], r["moves"], f"{r['predicted_min_ms']}-{r['predicted_max_ms']}",
        r["target_no_lower"], ", ".join(r["phases"])])


if __name__ == "__main__":
    main()
