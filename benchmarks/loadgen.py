"""How fast can `autobatch load` go on this machine before it falls behind?

Starts the embedded Triton with only the emulated accelerator, set to a very
cheap batch curve (0.05 ms at batch 1, 0.2 ms at batch 32) so the model is
never what limits, then drives it open-loop at increasing rates. A rate
passes when the generator keeps to its schedule (no ``behind`` flag: send lag
p99 under the limit and >= 95% of the scheduled rate sent) and no request
fails; each rate gets ``--attempts`` tries (default 2), because on a shared
machine a neighbour's burst can stall one of them. It prints one line per try
and the highest rate that passed.

Both the server and the generator run on this machine, so the number is the
generator's ceiling *next to a Triton it shares the CPU with* — the setting of
every benchmark in this repository. The CPU columns say who used what.

    .venv/bin/python benchmarks/loadgen.py                    # gRPC, 5 s per rate
    .venv/bin/python benchmarks/loadgen.py --protocol http --duration 3
    .venv/bin/python benchmarks/loadgen.py --url 127.0.0.1:8001 --model emulated_accelerator

Each run is saved under benchmarks/results/loadgen/ (record.save_result); the
results table shows the newest gRPC and HTTP ceilings and their range over the
saved runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from record import row, save_result

from autobatch.curve import BatchCurve
from autobatch.lab.process import group_members
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer
from autobatch.load import run_load
from autobatch.schedule import Schedule

CHEAP_CURVE = BatchCurve({1: 0.05, 32: 0.2}, name="cheap")
DEFAULT_RATES = (250, 500, 750, 1000, 1250, 1500, 1750, 2000, 2500, 3000, 4000)


def _cpu_s_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _cpu_s_group(pgid: int | None) -> float:
    """CPU seconds used so far by a process group (the server and its stubs)."""
    if pgid is None:
        return float("nan")
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in group_members(pgid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[str, int | None]]:
    if args.url:
        yield args.url, None
        return
    print("starting Triton with the emulated accelerator on a cheap curve ...", file=sys.stderr)
    with TritonServer.on_free_ports(models=[EMULATOR_MODEL], emulate_curve=CHEAP_CURVE) as server:
        url = server.urls.grpc if args.protocol == "grpc" else server.urls.http
        yield url, server.pid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per rate")
    parser.add_argument("--rates", default=",".join(map(str, DEFAULT_RATES)), help="comma-separated rps")
    parser.add_argument("--url", help="use a running Triton instead of starting one")
    parser.add_argument("--model", default=EMULATOR_MODEL)
    parser.add_argument(
        "--attempts",
        type=int,
        default=2,
        help="tries per rate; it passes if one keeps to schedule (a busy neighbour can stall one)",
    )
    parser.add_argument(
        "--keep-going", action="store_true", help="try every rate, not only up to the first miss"
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r.strip()]

    best = None
    tries: list[dict] = []
    with _server(args) as (url, server_pid):
        print(
            f"{'rate':>7} {'try':>3} {'sent/s':>8} {'ok/s':>8} {'lag p50':>8} {'lag p99':>8} "
            f"{'p50 ms':>8} {'p99 ms':>8} {'fail':>5} {'gen cpu':>8} {'srv cpu':>8}  verdict"
        )
        for rate in rates:
            passed = False
            for attempt in range(1, args.attempts + 1):
                gen0, srv0, t0 = _cpu_s_self(), _cpu_s_group(server_pid), time.monotonic()
                report = run_load(
                    url, args.model, Schedule.constant(rate, args.duration), protocol=args.protocol
                )
                wall = time.monotonic() - t0
                gen_cpu = (_cpu_s_self() - gen0) / wall
                srv_cpu = (_cpu_s_group(server_pid) - srv0) / wall
                t = report.total
                passed = not report.behind and t.failed == 0
                verdict = "ok" if passed else (t.behind_reason or f"failures {dict(t.failures)}")
                print(
                    f"{rate:7.0f} {attempt:3d} {t.achieved_rps:8.1f} {t.throughput_rps:8.1f} "
                    f"{t.lag_p50_ms or 0:8.2f} {t.lag_p99_ms or 0:8.2f} {t.p50_ms or 0:8.2f} "
                    f"{t.p99_ms or 0:8.2f} {t.failed:5d} {gen_cpu:8.0%} {srv_cpu:8.0%}  {verdict}",
                    flush=True,
                )
                tries.append({
                    "rate_rps": rate, "attempt": attempt, "sent_rps": t.achieved_rps,
                    "ok_rps": t.throughput_rps, "lag_p50_ms": t.lag_p50_ms, "lag_p99_ms": t.lag_p99_ms,
                    "p50_ms": t.p50_ms, "p99_ms": t.p99_ms, "failed": t.failed,
                    "generator_cpu": gen_cpu, "server_cpu": srv_cpu, "passed": passed,
                    "verdict": verdict,
                })
                if passed:
                    break
            if passed:
                best = rate
            elif not args.keep_going:
                break
    cores = os.cpu_count()
    _save(args, rates, best, tries)
    if best is None:
        print(f"max sustained rate: none of {rates} ({args.protocol}, {cores} cores)")
        return 1
    print(f"max sustained rate: {best:.0f} rps ({args.protocol}, {cores} cores, server on the same machine)")
    return 0


def _save(args: argparse.Namespace, rates: list[float], best: float | None, tries: list[dict]) -> None:
    data = {"protocol": args.protocol, "duration_s": args.duration, "rates_rps": rates,
            "attempts": args.attempts, "external_server": bool(args.url), "max_sustained_rps": best,
            "tries": tries}
    if args.url or args.model != EMULATOR_MODEL or args.keep_going:
        save_result("loadgen", data)  # not the README's setting: kept, but no row
        return
    proto = "gRPC" if args.protocol == "grpc" else "HTTP"
    what = f"`autobatch load` ceiling over {proto}, next to Triton on the same 2 cores"
    if best is None:
        figure = f"**none** of {', '.join(f'{r:g}' for r in rates)} req/s kept to schedule"
        save_result("loadgen", data, [row(what, figure, key=f"ceiling_{args.protocol}_rps", value=0.0,
                                          unit=" req/s")])
        return
    ok = [x for x in tries if x["passed"] and x["rate_rps"] == best][-1]
    first = [x for x in tries if x["rate_rps"] == best][0]["passed"]
    us_per_request = ok["generator_cpu"] / ok["ok_rps"] * 1e6 if ok["ok_rps"] else float("nan")
    failed = sum(x["failed"] for x in tries if x["passed"])
    figure = (f"**{best:g} req/s** kept to schedule ({'first' if first else 'second'} try; send lag "
              f"p99 {ok['lag_p99_ms']:.1f} ms, {failed} failed); the generator's own CPU "
              f"{us_per_request:.0f} us per request ({ok['generator_cpu']:.0%} of a core)")
    save_result("loadgen", data, [row(what, figure, key=f"ceiling_{args.protocol}_rps", value=best,
                                      unit=" req/s")])


if __name__ == "__main__":
    sys.exit(main())
