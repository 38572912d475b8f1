"""The simulator: how fast it runs, and how close it comes to the real Triton.

    .venv/bin/python benchmarks/simulator.py                 # speed only (~30 s)
    .venv/bin/python benchmarks/simulator.py --fidelity      # + the real Triton (~1 min more)
    .venv/bin/python benchmarks/simulator.py --requests 2000000 --json
    .venv/bin/python benchmarks/simulator.py --against 66abac3   # + that commit's, alternating

Speed: 1 M (``--requests``) Poisson requests through each engine, timed from
drawing the arrivals (numpy) to the finished result, for a curve where
batching pays (many requests per batch) and one where it does not (one batch
per request, the slow case). The target is >= 1 M simulated requests in
<= 10 s. Figures are wall-clock on whatever else runs on the machine: run it
twice and compare ratios, not absolute seconds.

The shared device (issue 27): one more speed row, the ``shared`` engine on the
T4 ResNet-50 curve at 300 req/s with two co-tenants time-slicing the device
(``--shared-requests``, 200,000 by default: each 2 ms turn while two contexts
are active is an event, so it runs far fewer requests a second).

Fidelity (``--fidelity``): the emulated accelerator in the embedded Triton,
loaded with the same curve and profile, under Poisson load at three rates,
against the simulator fed the same sends (``autobatch.lab.fidelity.simulator_fidelity``,
which the CI test also uses).

Against a commit (``--against REV``): that commit's ``speed`` and today's, each
in a fresh process on its own tree (``git archive``), alternating, ``--repeats``
times; the ratio per case is today's time over the commit's in the same round.
A refactor that says "the engines are as fast as before" shows it this way.
With ``--together`` the two processes of a round run at the same time (one per
core), so a machine whose speed drifts within minutes slows both alike.

Each run is saved under benchmarks/results/simulator/ (record.save_result) for the
results table: the speed row from every run, the fidelity row from ``--fidelity`` runs.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import baseline
from record import row, save_result
from rich.console import Console
from rich.table import Table

from autobatch.curve import BatchCurve, load_curve
from autobatch.plan.sessions import simulate_sessions
from autobatch.plan.simulator import ServiceModel, Workload, simulate
from autobatch.profiles import Profile, load_profile

ROOT = Path(__file__).resolve().parents[1]
GAIN = load_curve(ROOT / "curves" / "laptop-256x144-fp16.yaml")
NO_GAIN = load_curve(ROOT / "curves" / "laptop-512x288-fp16.yaml")
FIDELITY_CURVE = BatchCurve({1: 10.0, 2: 12.0, 4: 16.0, 8: 24.0, 16: 40.0, 32: 72.0}, name="fidelity")


def speed(requests: int, with_baseline: bool = True) -> list[dict[str, Any]]:
    cases = [
        # (label, curve, profile, rate): rates near 70-80% of what the profile can do.
        ("batching pays, preferred 4,8 delay 2 ms", GAIN,
         Profile(name="a", max_batch_size=8, preferred_batch_size=(4, 8), max_queue_delay_us=2000),
         350.0),
        ("no gain, batch 1", NO_GAIN,
         Profile(name="b", max_batch_size=8, preferred_batch_size=(1,), max_queue_delay_us=0),
         75.0),
    ]
    old = baseline.load() if with_baseline else None
    rows = []
    for label, curve, profile, rate in cases:
        for engine in ("triton", "rules", "general"):
            # The engine before issue 13 (git), then today's, back to back on the same
            # case: their ratio is the figure, not either time alone.
            before = None
            if old is not None:
                o_start = time.perf_counter()
                o_res = old.simulate(profile, old.ServiceModel(
                    curve, batch_overhead_ms=0.5, request_overhead_ms=0.05, noise_cv=0.1),
                    old.Workload.poisson(rate, requests / rate, seed=1), engine=engine)
                before = (time.perf_counter() - o_start, o_res)
            service = ServiceModel(curve, batch_overhead_ms=0.5, request_overhead_ms=0.05, noise_cv=0.1)
            start = time.perf_counter()
            work = Workload.poisson(rate, requests / rate, seed=1)
            drawn = time.perf_counter()
            res = simulate(profile, service, work, engine=engine)
            end = time.perf_counter()
            rows.append({
                "case": label,
                "engine": engine,
                "requests": res.requests,
                "batches": res.batches,
                "arrivals_s": round(drawn - start, 3),
                "total_s": round(end - start, 3),
                "requests_per_s": round(res.requests / (end - start)),
                "p99_ms": round(res.latency.p99_ms, 2) if res.latency else None,
                "baseline_total_s": None if before is None else round(before[0], 3),
                "ratio_to_baseline": None if before is None else round((end - start) / before[0], 3),
                # Poisson arrivals never share a time: the old and new engines must agree.
                "same_as_baseline": None if before is None else (
                    before[1].batch_counts == res.batch_counts
                    and math.isclose(before[1].latency.p99_ms, res.latency.p99_ms, rel_tol=1e-9)),
            })
    # Rows per request, new in issue 13: the same case with requests of 1-4 rows.
    label, curve, profile, rate = cases[0]
    service = ServiceModel(curve, batch_overhead_ms=0.5, request_overhead_ms=0.05, noise_cv=0.1)
    start = time.perf_counter()
    work = Workload.poisson(rate / 2, requests / (rate / 2), seed=1, rows={1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1})
    drawn = time.perf_counter()
    res = simulate(profile, service, work, engine="triton")
    end = time.perf_counter()
    rows.append({
        "case": "batching pays, requests of 1-4 rows (mean 2), half the rate",
        "engine": "triton",
        "requests": res.requests,
        "batches": res.batches,
        "arrivals_s": round(drawn - start, 3),
        "total_s": round(end - start, 3),
        "requests_per_s": round(res.requests / (end - start)),
        "p99_ms": round(res.latency.p99_ms, 2) if res.latency else None,
        "baseline_total_s": None, "ratio_to_baseline": None, "same_as_baseline": None,
    })
    start = time.perf_counter()
    sess = simulate_sessions(ServiceModel(GAIN), 16, 60.0, policy="batch-waiting", duration_s=1000.0)
    end = time.perf_counter()
    frames = sum(s.frames for s in sess.per_session)
    rows.append({
        "case": "sessions: 16 streams at 60 fps, batch-waiting",
        "engine": "sessions",
        "requests": frames,
        "batches": sess.batches,
        "arrivals_s": None,
        "total_s": round(end - start, 3),
        "requests_per_s": round(frames / (end - start)),
        "p99_ms": round(sess.latency.p99_ms, 2) if sess.latency else None,
        "baseline_total_s": None, "ratio_to_baseline": None, "same_as_baseline": None,
    })
    return rows


def shared_speed(requests: int) -> dict[str, Any]:
    """The shared engine: T4 ResNet-50 (mixed precision), Triton's default, 300 req/s, two
    closed-loop co-tenants (batch 32, duty 0.5) time-slicing the device in 2 ms turns."""
    from autobatch.cotenants import CoTenant
    from autobatch.plan.switching import triton_default
    from autobatch.sharing import SharingModel

    curve = load_curve(ROOT / "curves" / "t4-resnet50-fp16.yaml")
    jobs = [CoTenant(f"train-{i}", curve, 32, duty=0.5) for i in range(2)]
    rate = 300.0
    start = time.perf_counter()
    work = Workload.poisson(rate, requests / rate, seed=1)
    res = simulate(triton_default(32), ServiceModel(curve), work, sharing=SharingModel(), cotenants=jobs)
    end = time.perf_counter()
    assert res.device is not None
    return {
        "case": "shared device: T4 ResNet-50 fp16, Triton's default at 300 req/s, 2 co-tenants "
                "(batch 32, duty 0.5), time-sliced in 2 ms turns",
        "engine": "shared",
        "requests": res.requests,
        "batches": res.batches,
        "total_s": round(end - start, 3),
        "requests_per_s": round(res.requests / (end - start)),
        "p95_ms": round(res.latency.p95_ms, 2) if res.latency else None,
        "busy_share": round(res.device.busy_share, 4),
    }


def fidelity() -> dict[str, Any]:
    import httpx

    from autobatch.lab.fidelity import simulator_fidelity
    from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
    from autobatch.profiles import parse_pbtxt

    profile = load_profile(ROOT / "profiles" / EMULATOR_MODEL / "aggressive.yaml")
    with TritonServer.on_free_ports(ROOT / "model_repository", models=[EMULATOR_MODEL]) as server:
        path = ROOT / "model_repository" / EMULATOR_MODEL / "config.pbtxt"
        config = parse_pbtxt(path.read_text(encoding="utf-8"), str(path))
        config["parameters"] = {**(config.get("parameters") or {}),
                                "curve": {"string_value": json.dumps(FIDELITY_CURVE.to_dict())}}
        r = httpx.post(f"{server.urls.http}/v2/repository/models/{EMULATOR_MODEL}/load",
                       json=profile.to_override(config), timeout=120)
        r.raise_for_status()
        result = simulator_fidelity(server.urls.grpc, server.urls.http, EMULATOR_MODEL,
                                    FIDELITY_CURVE, profile, (40, 100, 160, 220),
                                    runs_per_rate=3, seconds_per_run=5.0)
    return {"profile": profile.summary(), "curve": dict(FIDELITY_CURVE.points), **result.to_dict()}


def _speed_proc(tree: Path, requests: int) -> subprocess.Popen[str]:
    """``speed`` of the simulator in ``tree`` (its src/ and benchmarks/), in a fresh process."""
    code = f"import json, simulator; print(json.dumps(simulator.speed({requests}, with_baseline=False)))"
    env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree / 'benchmarks'}"}
    return subprocess.Popen([sys.executable, "-c", code], cwd=tree / "benchmarks", env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _speed_out(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"speed() failed in a child process: {err.strip()[-2000:]}")
    return json.loads(out)


def _speed_in(tree: Path, requests: int) -> list[dict[str, Any]]:
    return _speed_out(_speed_proc(tree, requests))


def against(rev: str, requests: int, repeats: int, together: bool = False) -> dict[str, Any]:
    """Today's tree and ``rev``'s timed alternately (who goes first swaps each round), or
    at the same time (``together``)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src", "benchmarks", "curves",
                                  "profiles"], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        trees = [("today", ROOT), (rev, Path(tmp))]
        runs: dict[str, list[list[dict[str, Any]]]] = {"today": [], rev: []}
        for i in range(repeats):
            if together:
                procs = [(name, _speed_proc(tree, requests)) for name, tree in trees]
                for name, proc in procs:
                    runs[name].append(_speed_out(proc))
                continue
            for name, tree in (trees if i % 2 == 0 else trees[::-1]):
                runs[name].append(_speed_in(tree, requests))
    rows = []
    for j, r in enumerate(runs["today"][0]):
        today = [run[j]["total_s"] for run in runs["today"]]
        old = [run[j]["total_s"] for run in runs[rev]]
        ratios = [a / b for a, b in zip(today, old)]
        rows.append({"case": r["case"], "engine": r["engine"], "today_s": today, "rev_s": old,
                     "ratio_median": round(statistics.median(ratios), 3),
                     "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
                     "same_p99": all(a[j]["p99_ms"] == b[j]["p99_ms"]
                                     for a, b in zip(runs["today"], runs[rev]))})
    return {"rev": rev, "repeats": repeats, "requests": requests, "together": together, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--fidelity", action="store_true", help="also run against the real Triton")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the pre-issue-13 engines (read from git) timed beside today's")
    ap.add_argument("--against", metavar="REV", help="also time git revision REV's simulator, alternating")
    ap.add_argument("--repeats", type=int, default=3, help="rounds of --against [3]")
    ap.add_argument("--together", action="store_true",
                    help="--against: run today's and REV's processes of a round at the same time")
    ap.add_argument("--shared-requests", type=int, default=200_000,
                    help="requests of the shared-device speed row (0 skips it)")
    args = ap.parse_args()
    console = Console(stderr=args.json, width=160)
    with console.status(f"simulating {args.requests:,} requests per engine ..."):
        rows = speed(args.requests, with_baseline=not args.no_baseline)
    result: dict[str, Any] = {"speed": rows}
    if args.against:
        with console.status(f"today's simulator and {args.against}'s, {args.repeats} rounds ..."):
            result["against"] = against(args.against, args.requests, args.repeats, args.together)
    if args.shared_requests:
        with console.status(f"the shared engine, {args.shared_requests:,} requests ..."):
            result["shared"] = shared_speed(args.shared_requests)
    if args.fidelity:
        with console.status("fidelity against the real Triton ..."):
            result["fidelity"] = fidelity()
    save_result("simulator", {"requests": args.requests, **result}, _rows(result, args.requests))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    t = Table(title=f"Simulator speed ({args.requests:,} requests; target >= 1 M in <= 10 s)")
    for col in ("case", "engine", "requests", "batches", "arrivals s", "total s", "requests/s", "p99 ms",
                "before s", "x before", "same"):
        t.add_column(col, justify="left" if col in ("case", "engine") else "right")
    for r in rows:
        t.add_row(r["case"], r["engine"], f"{r['requests']:,}", f"{r['batches']:,}",
                  "-" if r["arrivals_s"] is None else f"{r['arrivals_s']:.2f}", f"{r['total_s']:.2f}",
                  f"{r['requests_per_s']:,}", str(r["p99_ms"]),
                  "-" if r["baseline_total_s"] is None else f"{r['baseline_total_s']:.2f}",
                  "-" if r["ratio_to_baseline"] is None else f"{r['ratio_to_baseline']:.2f}",
                  "-" if r["same_as_baseline"] is None else ("yes" if r["same_as_baseline"] else "NO"))
    console.print(t)
    if "against" in result:
        a = result["against"]
        at = Table(title=f"Today against {a['rev']}: total s per round, ratio today / {a['rev']}")
        for col in ("case", "engine", "today s", f"{a['rev']} s", "ratio median", "min", "max", "same p99"):
            at.add_column(col, justify="left" if col in ("case", "engine") else "right")
        for r in a["rows"]:
            at.add_row(r["case"], r["engine"], " ".join(f"{x:.2f}" for x in r["today_s"]),
                       " ".join(f"{x:.2f}" for x in r["rev_s"]), f"{r['ratio_median']:.3f}",
                       f"{r['ratio_min']:.3f}", f"{r['ratio_max']:.3f}", "yes" if r["same_p99"] else "NO")
        console.print(at)
    if "shared" in result:
        sh = result["shared"]
        console.print(f"{sh['case']}: {sh['requests']:,} requests in {sh['total_s']:.2f} s "
                      f"({sh['requests_per_s']:,}/s); p95 {sh['p95_ms']} ms, "
                      f"device busy {sh['busy_share']:.0%}")
    if "fidelity" in result:
        f = result["fidelity"]
        ft = Table(title=f"Fidelity: {f['profile']}, curve {f['curve']}; overheads {f['overheads']}")
        for col in ("rate rps", "p50 real", "p50 sim", "err", "p95 real", "p95 sim", "err", "mean batch"):
            ft.add_column(col, justify="right")
        for r in f["rows"]:
            ft.add_row(f"{r['rate_rps']:g}", f"{r['measured_p50_ms']:.1f}", f"{r['predicted_p50_ms']:.1f}",
                       f"{r['p50_error']:+.1%}", f"{r['measured_p95_ms']:.1f}",
                       f"{r['predicted_p95_ms']:.1f}", f"{r['p95_error']:+.1%}",
                       f"{r['predicted_mean_batch']:.2f}")
        console.print(ft)


def _rows(result: dict[str, Any], requests: int) -> list[dict[str, Any]]:
    """The results table's lines: seconds per 1 M requests by engine, and the error against Triton."""
    per_m = {(r["case"], r["engine"]): r["total_s"] * 1_000_000 / max(r["requests"], 1)
             for r in result["speed"] if r["engine"] != "sessions"}
    pays, one = list(dict.fromkeys(case for case, _ in per_m))[:2]  # the case where batching pays first
    frames = next(r["requests_per_s"] for r in result["speed"] if r["engine"] == "sessions")
    out = [row(
        f"simulator speed, {requests:,} Poisson requests (arrivals drawn included), per 1 M requests",
        f"**{per_m[pays, 'triton']:.2f} s** (`triton` engine, batching pays), "
        f"{per_m[one, 'triton']:.2f} s (batch 1: one batch per request); `rules` "
        f"{per_m[pays, 'rules']:.2f} / {per_m[one, 'rules']:.2f} s; `general` (priorities) "
        f"{per_m[pays, 'general']:.2f} / {per_m[one, 'general']:.2f} s; sessions "
        f"{frames / 1e6:.1f} M frames/s. Target: 1 M in <= 10 s",
        key="triton_engine_s_per_1m", value=round(per_m[pays, "triton"], 3), unit=" s")]
    ratios = [r["ratio_to_baseline"] for r in result["speed"] if r["ratio_to_baseline"] is not None]
    if ratios:
        same = all(r["same_as_baseline"] for r in result["speed"] if r["same_as_baseline"] is not None)
        out.append(row(
            "simulator speed against its engines before issue 13 (rows, simultaneous arrivals, "
            "timeouts; git 8399142), same cases timed back to back",
            f"worst **{max(ratios):.2f}x** the old time (best {min(ratios):.2f}x) over 3 engines x 2 "
            f"cases; results {'identical' if same else 'DIFFERENT'} on Poisson arrivals. Target: <= 2x",
            key="simulator_worst_ratio_to_baseline", value=round(max(ratios), 3), unit="x"))
    f = result.get("fidelity")
    if f:
        p50 = max(abs(r["p50_error"]) for r in f["rows"])
        p95 = max(abs(r["p95_error"]) for r in f["rows"])
        rates = ", ".join(f"{r['rate_rps']:g}" for r in f["rows"])
        out.append(row(
            "simulator vs the real Triton (emulated accelerator, aggressive profile, Poisson at "
            f"{rates} req/s, medians of 3 runs each), client latency",
            f"worst error p50 **{p50:.1%}**, p95 **{p95:.1%}** over the rates",
            key="fidelity_worst_p95_error_pct", value=round(100 * p95, 2), unit="%"))
    a = result.get("against")
    if a:
        medians = [r["ratio_median"] for r in a["rows"]]
        how = "at the same time" if a.get("together") else "alternately"
        same = all(r["same_p99"] for r in a["rows"])
        out.append(row(
            f"simulator speed today against {a['rev']} (each in its own process, {how}, "
            f"{a['repeats']} rounds; the flat engines' cases above)",
            f"median today / {a['rev']} per case {min(medians):.2f}-**{max(medians):.2f}x**; p99 "
            f"{'identical' if same else 'DIFFERENT'} in every round",
            key="simulator_worst_median_ratio_against_rev", value=round(max(medians), 3), unit="x"))
    sh = result.get("shared")
    if sh:
        out.append(row(
            "simulator speed on a shared device (`shared` engine: T4 ResNet-50 at 300 req/s, two "
            "co-tenants time-slicing it in 2 ms turns)",
            f"**{sh['requests_per_s']:,}** requests/s ({sh['requests']:,} in {sh['total_s']:.1f} s); "
            f"device busy {sh['busy_share']:.0%}",
            key="shared_engine_requests_per_s", value=sh["requests_per_s"], unit=" req/s"))
    return out


if __name__ == "__main__":
    main()
