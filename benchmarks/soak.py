"""A long run of the real sidecar under oscillating and bursty load: does anything leak or flap?

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--json]

The real ``autobatch run`` (a child process, ``policy.interval_s: 1``) against
the real Triton serving the emulated accelerator (on a curve shaped like
dense_mlp's on this CPU), under an open-loop gRPC load that cycles every two
minutes through a quiet spell, a bursty overload, a bursty middle and quiet
again, for ``--minutes``. Every 10 s it samples the sidecar's RSS and open
file descriptors (``/proc``) and its ``/healthz``; at the end it reads the
decision log: every switch and the spacing between them, against
``policy.stability.min_dwell_s``.

What it reports: RSS and FDs at the start (after a minute of warm-up) and at
the end, and their peaks; switches, the smallest and median gap between
them, and whether any came closer than the dwell; ticks, errors by stage,
failed requests, and the share of /healthz polls that answered 200. Saved
with ``record.save_result("soak", ...)``.

Not a timing benchmark: it needs no quiet machine, only one that is not overloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from record import row, save_result

from autobatch.curve import BatchCurve
from autobatch.lab.process import ManagedProcess, poll_until
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer, free_port
from autobatch.load import RequestRecord, run_load
from autobatch.schedule import Phase, Schedule

ROOT = Path(__file__).resolve().parents[1]
MODEL = EMULATOR_MODEL
CURVE = BatchCurve({1: 10.0, 2: 18.0, 4: 20.0, 8: 24.0, 16: 32.0, 32: 48.0}, name="dense-like")
DWELL_S = 10.0
SAMPLE_EVERY_S = 10.0
WARMUP_S = 60.0


def cycle(i: int) -> tuple[Phase, ...]:
    """Two minutes: quiet, a bursty overload of latency-soft (200/s), a bursty middle, quiet."""
    return (
        Phase(f"quiet-{i}", 20, 40),
        Phase(f"burst-high-{i}", 300, 30, arrival="bursty", burst_size=10),
        Phase(f"burst-mid-{i}", 120, 30, arrival="bursty", burst_size=5),
        Phase(f"quiet-again-{i}", 20, 20),
    )


def proc_sample(pid: int) -> dict[str, float]:
    rss_kb = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return {"rss_mb": round(rss_kb / 1024, 1), "fds": fds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--no-save", action="store_true", help="do not write benchmarks/results (a smoke run)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cycles = max(1, round(args.minutes / 2))
    schedule = Schedule(tuple(p for i in range(cycles) for p in cycle(i)))

    repository = ROOT / "model_repository"
    with tempfile.TemporaryDirectory(prefix="autobatch-soak-") as tmp, \
            TritonServer.on_free_ports(repository, models=[MODEL], emulate_curve=CURVE) as triton:
        work = Path(tmp)
        (work / "curve.yaml").write_text(CURVE.to_yaml())
        port = free_port()
        decisions = work / "decisions.jsonl"
        config = {
            "model": MODEL,
            "triton": {"http_url": triton.urls.http, "metrics_url": triton.urls.metrics,
                       "grpc_url": triton.urls.grpc},
            "profiles": {"dir": str(ROOT / "profiles" / MODEL), "ladder": ["latency-soft", "aggressive"]},
            "slo": {"p95_ms": 150},
            "policy": {"interval_s": 1, "curve": str(work / "curve.yaml"), "trust": {"settle_s": 1.5},
                       "stability": {"confirmations": 2, "min_dwell_s": DWELL_S, "stabilization_s": 4}},
            "actuator": {"kind": "triton", "timeout_s": 30},
            "server": {"listen": f"127.0.0.1:{port}"},
            "decision_log": str(decisions),
        }
        (work / "sidecar.yaml").write_text(yaml.safe_dump(config))
        url = f"http://127.0.0.1:{port}"
        sidecar = ManagedProcess("sidecar", work / "sidecar.log")
        sidecar.start([sys.executable, "-m", "autobatch", "run", "--config", str(work / "sidecar.yaml")])
        try:
            poll_until(lambda: _get(url + "/readyz") == 200, timeout_s=90, what="the sidecar ready",
                       check=lambda: sidecar.check_alive("at start"))
            pid = sidecar.pid
            assert pid is not None
            samples: list[dict[str, Any]] = []
            healthz: list[int | None] = []
            stop = threading.Event()
            t_start = time.time()

            def sample() -> None:
                while not stop.wait(SAMPLE_EVERY_S):
                    with contextlib.suppress(OSError):
                        samples.append({"t_s": round(time.time() - t_start, 1), **proc_sample(pid)})
                    healthz.append(_get(url + "/healthz"))

            failures: dict[str, int] = {}
            sent = 0

            def on_record(rec: RequestRecord) -> None:
                nonlocal sent
                sent += 1
                if not rec.ok:
                    failures[rec.outcome] = failures.get(rec.outcome, 0) + 1

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            report = run_load(triton.urls.grpc, MODEL, schedule, timeout_s=20, on_record=on_record, seed=30)
            stop.set()
            sampler.join(SAMPLE_EVERY_S + 5)
            end = proc_sample(pid)
            status = httpx.get(url + "/status", timeout=5).json()
        finally:
            sidecar.signal(15)
            poll_until(lambda: not sidecar.running(), timeout_s=30, what="the sidecar to stop")
            code = sidecar.returncode
            sidecar.stop()
        lines = [json.loads(x) for x in decisions.read_text().splitlines() if x.strip()]

    landed = [ln["state_after"]["last_switch_s"] for ln in lines
              if ln["decision"]["action"] == "switch" and (ln.get("actuation") or {}).get("ok")]
    gaps = [b - a for a, b in zip(landed, landed[1:])]
    reasons: dict[str, int] = {}
    for ln in lines:
        if ln["decision"]["action"] == "switch":
            reasons[ln["decision"]["reason"]] = reasons.get(ln["decision"]["reason"], 0) + 1
    warm = [s for s in samples if s["t_s"] >= WARMUP_S]
    start = warm[0] if warm else (samples[0] if samples else end)
    data = {
        "minutes": args.minutes,
        "interval_s": 1,
        "min_dwell_s": DWELL_S,
        "schedule": schedule.to_dict(),
        "rss_mb": {"start": start["rss_mb"], "end": end["rss_mb"],
                   "peak": max((s["rss_mb"] for s in samples), default=end["rss_mb"])},
        "fds": {"start": start["fds"], "end": end["fds"],
                "peak": max((s["fds"] for s in samples), default=end["fds"])},
        "start_at_s": start.get("t_s", 0),
        "samples": samples,
        "switches": len(landed),
        "switch_reasons": reasons,
        "gaps_s": [round(g, 1) for g in gaps],
        "min_gap_s": round(min(gaps), 1) if gaps else None,
        "median_gap_s": round(statistics.median(gaps), 1) if gaps else None,
        "closer_than_dwell": sum(1 for g in gaps if g < DWELL_S - 1e-6),
        "ticks": status.get("ticks"),
        "errors": status.get("errors"),
        "requests": sent,
        "failed": failures,
        "load_elapsed_s": round(report.elapsed_s, 1),
        "healthz_200_share": (round(sum(1 for h in healthz if h == 200) / len(healthz), 4)
                              if healthz else None),
        "sigterm_exit": code,
    }
    rows = [
        row("soak: sidecar RSS, start -> end",
            f"{data['rss_mb']['start']} -> {data['rss_mb']['end']} MB (peak {data['rss_mb']['peak']}) over "
            f"{args.minutes:g} min at a 1 s interval", key="soak_rss_growth_mb",
            value=round(data["rss_mb"]["end"] - data["rss_mb"]["start"], 1), unit=" MB"),
        row("soak: sidecar open file descriptors, start -> end",
            f"{data['fds']['start']} -> {data['fds']['end']} (peak {data['fds']['peak']})",
            key="soak_fd_growth", value=data["fds"]["end"] - data["fds"]["start"]),
        row("soak: switches and their spacing",
            f"{data['switches']} switches, gaps min {data['min_gap_s']} s, median {data['median_gap_s']} s "
            f"(dwell {DWELL_S:g} s, {data['closer_than_dwell']} closer); {sum(failures.values())} of {sent} "
            f"requests failed", key="soak_min_gap_s", value=data["min_gap_s"], unit=" s"),
    ]
    path = None if args.no_save else save_result("soak", data, rows)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        for r in rows:
            print(f"{r['what']}: {r['figure']}")
    if path is not None:
        print(f"saved {path.relative_to(ROOT)}", file=sys.stderr)


def _get(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return None


if __name__ == "__main__":
    main()
