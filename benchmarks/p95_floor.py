"""What the shared rule's p95 floor reads against the p95 the profile then measured.

    .venv/bin/python benchmarks/p95_floor.py [--hold-s 75]

Where the summary p95 lags, the policy reads the live profile's p95 as no lower than
``device.p95_per_mean`` (1.5) x the window's mean request time, of which
``device.wait_tail`` of the profile's own mean wait for a batch is multiplied and the
rest counted once (docs/shared-gpu.md, "What the p95 floor reads"). This reads every
saved decision log of the side-by-side runs (``benchmarks/results/shared_gpu/logs``)
and, in each fresh window where a profile had served for at least ``--hold-s`` (the
summary p95 has forgotten the profile before it), compares the floor at
``wait_tail`` 1 and 0 with the summary p95 of that window, split by whether others used
at least ``device.shared_min`` of the device. Nothing runs: it measures the saved runs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from autobatch.policy.capacity import mean_wait_ms
from autobatch.policy.context import p95_floor
from autobatch.policy.settings import DeviceSettings
from autobatch.profiles import Profile, load_profiles

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import save_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "benchmarks" / "results" / "shared_gpu" / "logs"
PROFILES = ("profiles/resnet50", "profiles/experiments/resnet50")


def floor(mean_ms: float, wait_ms: float, queue_ms: float, wait_tail: float, per_mean: float) -> float:
    """The policy's floor for the live profile: ``1 - wait_tail`` of its wait for a batch (no
    more than the window's queue time) counted once, as ``_p95_predictions`` gives it."""
    return p95_floor(mean_ms, min((1.0 - wait_tail) * wait_ms, queue_ms), per_mean)


def windows(path: Path, hold_s: float, profiles: dict[str, Profile]) -> list[dict[str, Any]]:
    """The fresh windows of one decision log where the active profile had served ``hold_s``."""
    out, active, since = [], None, 0.0
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            if e.get("active") != active:
                active, since = e.get("active"), e["ts"]
            w = e.get("window") or {}
            sig = (e.get("decision") or {}).get("signals") or {}
            if w.get("stale") or w.get("others_share") is None or e["ts"] - since < hold_s:
                continue
            need = (w.get("p95_ms"), w.get("mean_request_ms"), w.get("mean_queue_ms"), sig.get("demand_rps"))
            if None in need or active not in profiles or not w["p95_ms"]:
                continue
            out.append({"profile": active, "others": w["others_share"], "p95": w["p95_ms"],
                        "mean": w["mean_request_ms"], "queue": w["mean_queue_ms"],
                        "wait": mean_wait_ms(profiles[active], sig["demand_rps"])})
    return out


def alone_over_slo(result: Path, profile: str, slo_ms: float, shared_min: float) -> dict[str, list[int]]:
    """Per phase of one saved side-by-side run: [windows where ``profile`` was live on a device
    of its own (others under ``shared_min``) and its logged ``p95_predicted_ms``, the floor's
    reading, passed ``slo_ms``; all such windows], over its controllers' decision logs."""
    data = json.loads(result.read_text(encoding="utf-8"))["data"]
    starts, t = [], 0.0
    for ph in data["phases"]:
        if ph["name"] != "lead-in":
            starts.append((t, ph["name"]))
            t += ph["duration_s"]
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path in sorted(LOGS.glob(f"{result.stem}-*.jsonl.gz")):
        _, rep, grp, mode = path.name.removesuffix(".jsonl.gz").rsplit("-", 3)
        run = next(r for r in data["runs"] if r["repeat"] == int(rep[1:]))
        t0 = run["groups"][int(grp[1:])]["modes"][mode]["t0_wall"] + data["lead_in_s"]
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                e = json.loads(line)
                sig = (e.get("decision") or {}).get("signals") or {}
                pred = (sig.get("p95_predicted_ms") or {}).get(profile)
                others = sig.get("others_share")
                if e.get("active") != profile or pred is None or others is None or others >= shared_min:
                    continue
                phase = max((s for s in starts if s[0] <= e["ts"] - t0), default=(0.0, "lead-in"))[1]
                out[phase][1] += 1
                out[phase][0] += pred > slo_ms
    return dict(out)


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3),
            "under_share": round(sum(x < 1.0 for x in xs) / len(xs), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hold-s", type=float, default=75.0,
                    help="only windows where the profile had served this long (default 75)")
    ap.add_argument("--alone", metavar="RESULT", type=Path, nargs="+",
                    help="saved side-by-side runs: per phase, the windows where wait25 served on a device "
                         "of its own and the floor read it over the SLO (60 ms); prints, saves nothing")
    args = ap.parse_args()
    d = DeviceSettings()
    if args.alone:
        for result in args.alone:
            counts = alone_over_slo(result, "wait25", 60.0, d.shared_min)
            print(result.stem, ", ".join(f"{ph} {n}/{m}" for ph, (n, m) in counts.items() if ph != "lead-in"))
        return
    profiles: dict[str, Profile] = {}
    for folder in PROFILES:
        profiles.update(load_profiles(ROOT / folder))
    logs = sorted(LOGS.glob("*.jsonl.gz"))
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for path in logs:
        for w in windows(path, args.hold_s, profiles):
            by[(w["profile"], "shared" if w["others"] >= d.shared_min else "own")].append(w)
    groups, rows = [], []
    for (name, device), ws in sorted(by.items()):
        g = {"profile": name, "device": device, "windows": len(ws),
             "p95_per_mean": spread([w["p95"] / w["mean"] for w in ws]),
             "floor_over_p95": {str(k): spread([floor(w["mean"], w["wait"], w["queue"], k, d.p95_per_mean)
                                                / w["p95"] for w in ws]) for k in (1.0, 0.0)},
             "mean_wait_ms": round(statistics.median(w["wait"] for w in ws), 1)}
        groups.append(g)
        one, zero = g["floor_over_p95"]["1.0"], g["floor_over_p95"]["0.0"]
        p = g["p95_per_mean"]["median"]
        print(f"{name:15s} {device:6s} {len(ws):5d} windows: p95 {p:.2f}x the mean; "
              f"floor/p95 at wait_tail 1 {one['median']:.2f} (under {one['under_share']:.0%}), "
              f"at 0 {zero['median']:.2f} (under {zero['under_share']:.0%})")
        if device != "shared" or len(ws) < 20:
            continue
        rows.append({
            "what": f"p95 floor against the measured p95: {name} held on a shared device ({len(ws)} windows "
                    f"of the saved side-by-side runs)",
            "figure": (f"summary p95 {g['p95_per_mean']['median']:.2f}x the mean request (median; "
                       f"{g['p95_per_mean']['min']:.2f}-{g['p95_per_mean']['max']:.2f}); the floor reads "
                       f"{one['median']:.2f}x that p95 at wait_tail 1 (under it in {one['under_share']:.0%} "
                       f"of windows), {zero['median']:.2f}x at 0 (under in {zero['under_share']:.0%})"),
            "key": f"p95_floor_{name}_wait_tail_1", "value": one["median"], "unit": "x",
            "value_name": "floor over measured p95"})
    save_result("p95_floor", {"hold_s": args.hold_s, "logs": len(logs), "p95_per_mean": d.p95_per_mean,
                              "shared_min": d.shared_min, "groups": groups}, rows)


if __name__ == "__main__":
    main()
