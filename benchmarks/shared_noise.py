"""Triton's default against itself: how far one profile's share over the SLO moves between groups.

    .venv/bin/python benchmarks/shared_noise.py [--since 20261205] [--json]
    .venv/bin/python benchmarks/shared_noise.py --beside low-three --beside night-jobs [--since 20261206]

In every repeat of a side-by-side run (``benchmarks/shared_gpu.py``) each group
holds Triton's default beside its other modes, on the same arrival trace and the
same co-tenants, each on its own emulated GPU. The two defaults of a repeat
differ only by what the groups do not share: their devices' and co-tenants'
timing, their servers, their machine time. Per run, the largest difference of
the two defaults' share over the SLO over the phases, in points; per schedule,
its median, 90th percentile and maximum over the runs, and how many runs it
exceeds 1 and 3 points (the gateway's and the reload's per-phase targets against
the best static, which sits in the other group as often as not), with the phase
lengths in requests.

With ``--beside PHASE``: what a controller's moves cost in that phase against the
noise. Per schedule holding the phase and per controller of the runs as shipped
(no ``--variant``), the phase's requests over the SLO less those of the default
held in the controller's own group, in requests: median, least and most over the
repeats. Reads only; writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shared_prediction import emit

RESULTS = Path(__file__).resolve().parent / "results" / "shared_gpu"


def runs(since: str, results: Path = RESULTS) -> list[dict[str, Any]]:
    """One row a repeat with two defaults: the schedule, the result, the repeat, the largest
    phase difference (points) and where."""
    out = []
    for res in sorted(results.glob("*.json")):
        if res.stem[:8] < since:
            continue
        data = json.loads(res.read_text(encoding="utf-8"))["data"]
        for run in data["runs"]:
            held = [g["modes"]["triton-default"] for g in run["groups"] if "triton-default" in g["modes"]]
            if len(held) < 2:
                continue
            second = {p["name"]: p for p in held[1]["phases"]}
            diffs = [(100 * abs(p["over_slo_share"] - second[p["name"]]["over_slo_share"]), p["name"],
                      p.get("requests")) for p in held[0]["phases"]
                     if p["name"] in second and p.get("measured", True)]
            points, phase, requests = max(diffs, key=lambda d: d[0])
            out.append({"schedule": data["schedule"], "result": res.stem, "repeat": run["repeat"],
                        "points": round(points, 2), "phase": phase, "requests": requests,
                        "phase_requests": sorted({d[2] for d in diffs if d[2] is not None})})
    return out


def by_schedule(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per schedule: the runs, the median, 90th percentile and largest of their largest phase
    differences, how many exceed 1 and 3 points, and the phases' lengths in requests."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["schedule"]].append(r)
    out = []
    for schedule, rs in sorted(groups.items()):
        pts = sorted(r["points"] for r in rs)
        worst = max(rs, key=lambda r: r["points"])
        lengths = sorted({n for r in rs for n in r["phase_requests"]})
        out.append({
            "schedule": schedule, "runs": len(rs), "median": round(statistics.median(pts), 2),
            "p90": round(pts[min(len(pts) - 1, int(0.9 * len(pts)))], 2), "max": worst["points"],
            "max_at": f"{worst['result']} r{worst['repeat']} {worst['phase']}",
            "over_1": sum(p > 1 for p in pts), "over_3": sum(p > 3 for p in pts),
            "phase_requests": f"{lengths[0]}-{lengths[-1]}" if lengths else "-"})
    return out


def beside(since: str, phase: str, results: Path = RESULTS) -> list[dict[str, Any]]:
    """Per schedule holding ``phase`` and per controller of its shipped runs from ``since`` on:
    the repeats, and the median, least and most of the controller's requests over the SLO in
    ``phase`` less the default's beside it, with the phase's lengths in requests."""
    diffs: dict[tuple[str, str], list[int]] = defaultdict(list)
    lengths: dict[tuple[str, str], set[int]] = defaultdict(set)
    for res in sorted(results.glob("*.json")):
        if res.stem[:8] < since:
            continue
        data = json.loads(res.read_text(encoding="utf-8"))["data"]
        if data.get("variants"):
            continue
        kinds = data.get("controllers") or {"reload": "reload", "gateway": "gateway"}
        for run in data["runs"]:
            for group in run["groups"]:
                at = {m: p for m, r in group["modes"].items()
                      for p in r.get("phases", ()) if p["name"] == phase}
                if "triton-default" not in at:
                    continue
                for mode in sorted(set(at) & set(kinds)):
                    key = (data["schedule"], mode)
                    diffs[key].append(at[mode]["over_slo"] - at["triton-default"]["over_slo"])
                    lengths[key].add(at[mode]["requests"])
    return [{"schedule": schedule, "phase": phase, "controller": mode, "repeats": len(d),
             "median": statistics.median(d), "min": min(d), "max": max(d),
             "phase_requests": sorted(lengths[(schedule, mode)])}
            for (schedule, mode), d in sorted(diffs.items())]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--since", default="20261205", help="the first result's date, YYYYMMDD")
    ap.add_argument("--beside", action="append", metavar="PHASE",
                    help="a controller's requests over the SLO in PHASE less its group's default's")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.beside:
        emit([r for phase in args.beside for r in beside(args.since, phase)], args.json, [
            "schedule", "phase", "controller", "repeats", "over the SLO less the default beside it: median",
            "least", "most", "phase requests"], lambda r: [
            r["schedule"], r["phase"], r["controller"], r["repeats"], f"{r['median']:+g}", f"{r['min']:+d}",
            f"{r['max']:+d}", ", ".join(map(str, r["phase_requests"]))])
        return
    emit(by_schedule(runs(args.since)), args.json, [
        "schedule", "runs", "largest phase difference a run: median", "90th", "max (where)",
        "runs over 1 point", "over 3", "phase lengths (requests)"], lambda r: [
        r["schedule"], r["runs"], f"{r['median']:.2f}", f"{r['p90']:.2f}", f"{r['max']:.2f} ({r['max_at']})",
        r["over_1"], r["over_3"], r["phase_requests"]])


if __name__ == "__main__":
    main()
