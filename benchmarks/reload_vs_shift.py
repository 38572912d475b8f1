"""The tail during a profile change: a Triton reload swap vs a gateway weight shift.

    .venv/bin/python benchmarks/reload_vs_shift.py [--protocol http|grpc] [--rate 25] [--rounds 5] [--json]

Three copies of dense_mlp (the heavy torch model, where reloads hurt most):
one that the reload actuator swaps between latency-soft and aggressive with a
config override, and two variants loaded once with those two profiles, between
which the gateway actuator shifts the traffic (25 -> 50 -> 100 %, guarded).
One HAProxy carries all requests, with a server for each copy, so both ways
pay the same proxy hop. ``--grpc-load-api`` adds a third way: the same
reload, its load request sent over Triton's gRPC endpoint instead of HTTP.

* ``--protocol http`` (default): one Triton holds ``dense_mlp``,
  ``dense_mlp__latency`` and ``dense_mlp__throughput``; HAProxy rewrites the path
  per copy (the HTTP setup of ``autobatch.lab.haproxy``);
* ``--protocol grpc``: three Triton servers each serve ``dense_mlp``; HAProxy
  speaks HTTP/2 to them (the gRPC setup).

One open-loop HTTP load runs through the whole benchmark. The rounds
interleave the two ways, so a noisy neighbour hurts both alike: each round
moves all traffic onto ``dense_mlp`` (unmeasured), lets it settle, swaps it by
reload; then moves all traffic onto the live variant, lets it settle, and
shifts it to the other variant. Both start from the same profile and go to the
same one. For each change, the requests in flight during it (sent before it
ended, answered after it began) are pooled per way: p50/p95/p99/max, next to
the requests in flight during no change at all.

Each run is saved under benchmarks/results/reload_vs_shift/ (record.save_result)
for the results table, one row per mode (protocol, and --grpc-load-api).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
from record import row, save_result
from rich.console import Console
from rich.table import Table

from autobatch.actuators.gateway import (
    GatewayActuator,
    Guard,
    GuardSettings,
    HAProxyRuntime,
    HAProxyWeights,
    Variant,
)
from autobatch.actuators.triton import TritonReloadActuator
from autobatch.lab.haproxy import HAProxyProcess, grpc_config, http_rewrite_config, write_variant
from autobatch.lab.serve import TritonServer, free_port
from autobatch.load import run_load
from autobatch.profiles import load_profiles
from autobatch.schedule import Schedule
from autobatch.signals.triton import TritonSource
from autobatch.signals.variants import TritonStepSignals

ROOT = Path(__file__).resolve().parents[1]
MODEL = "dense_mlp"
SERVERS = {"reload": MODEL, "latency": f"{MODEL}__latency", "throughput": f"{MODEL}__throughput"}
PROFILE_OF = {"latency-soft": "latency", "aggressive": "throughput"}


class Load:
    """The open-loop load in a thread; every answered request as (sent, done, outcome)."""

    def __init__(self, url: str, rate_rps: float, max_s: float, protocol: str) -> None:
        self.url, self.rate, self.max_s, self.protocol = url, rate_rps, max_s, protocol
        self.stop = threading.Event()
        self.first = threading.Event()
        self.done: list[tuple[float, float, str]] = []
        self.report: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _record(self, rec: Any) -> None:
        now = time.monotonic()
        if rec.latency_ms is not None:
            self.done.append((now - rec.latency_ms / 1000.0, now, rec.outcome))
        self.first.set()

    def _run(self) -> None:
        try:
            self.report = run_load(self.url, MODEL, Schedule.constant(self.rate, self.max_s),
                                   protocol=self.protocol, seed=7, on_record=self._record, stop=self.stop)
        except BaseException as exc:
            self.error = exc
        finally:
            self.first.set()

    def __enter__(self) -> Load:
        self.thread.start()
        if not self.first.wait(120) or self.error:
            raise RuntimeError(f"the load did not start: {self.error}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(120)


class GrpcLoad:
    """The reload actuator's load, sent over Triton's gRPC endpoint instead of HTTP.

    Only the load (read the live config, merge the profile, ``RepositoryModelLoad``
    with the config override): no verification, no rollback. It is here to
    show whether the tail of HTTP clients during a swap comes from the reload
    itself or from the load request occupying Triton's HTTP server.
    """

    def __init__(self, triton: Any) -> None:
        self.triton = triton

    async def apply(self, profile: Any) -> Any:
        import httpx
        import tritonclient.grpc.aio as grpcclient

        t0 = time.monotonic()
        async with httpx.AsyncClient() as http:
            live = (await http.get(f"{self.triton.urls.http}/v2/models/{MODEL}/config", timeout=30)).json()
        client = grpcclient.InferenceServerClient(self.triton.urls.grpc)
        try:
            await client.load_model(MODEL, config=json.dumps(profile.merge_into(live)), client_timeout=300)
            ok, reason = True, "applied"
        except Exception as exc:  # reported in the table, not raised: the run goes on
            ok, reason = False, type(exc).__name__
        finally:
            await client.close()
        return types.SimpleNamespace(ok=ok, reason=reason, duration_s=time.monotonic() - t0)


def tail(latencies_ms: list[float]) -> dict[str, float | int | None]:
    if not latencies_ms:
        return {"n": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None}
    a = np.asarray(latencies_ms)
    return {
        "n": int(a.size),
        "p50_ms": float(np.percentile(a, 50)),
        "p95_ms": float(np.percentile(a, 95)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
    }


Done = list[tuple[float, float, str]]


def in_flight(done: Done, windows: list[tuple[float, float]]) -> list[tuple[float, str]]:
    """(latency ms, outcome) of the requests sent before a window ended and answered after it began."""
    return [((d - s) * 1000.0, o) for s, d, o in done if any(s < b and d > a for a, b in windows)]


async def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    profiles = load_profiles(ROOT / "profiles" / MODEL)
    ladder = [profiles["latency-soft"], profiles["aggressive"]]
    tmp = Path(tempfile.mkdtemp(prefix="autobatch-rvs-"))
    try:
        source = ROOT / "model_repository" / MODEL
        start = {"reload": "latency-soft", "latency": "latency-soft", "throughput": "aggressive"}
        sock = tmp / "admin.sock"
        listen = f"127.0.0.1:{free_port()}"
        with contextlib.ExitStack() as stack:
            if args.protocol == "http":
                repo = tmp / "repo"
                repo.mkdir()
                for server, model in SERVERS.items():
                    write_variant(source, repo, model, profiles[start[server]])
                console.print("starting Triton with three copies of dense_mlp ...", style="dim")
                triton = stack.enter_context(TritonServer.on_free_ports(repo, startup_timeout_s=300))
                copies = {server: (triton, model) for server, model in SERVERS.items()}
                config = http_rewrite_config(
                    listen=listen, socket_path=sock, triton_http=triton.urls.http, model=MODEL,
                    variants=SERVERS, hop_prefix=f"rvs-{tmp.name}", weights={"reload": 100},
                )
            else:
                copies = {}
                console.print("starting three Triton servers with dense_mlp ...", style="dim")
                for server in SERVERS:
                    repo = tmp / f"repo-{server}"
                    repo.mkdir()
                    write_variant(source, repo, MODEL, profiles[start[server]])
                    triton = stack.enter_context(TritonServer.on_free_ports(repo, startup_timeout_s=300))
                    copies[server] = (triton, MODEL)
                config = grpc_config(
                    listen=listen, socket_path=sock, weights={"reload": 100},
                    servers={server: t.urls.grpc for server, (t, _) in copies.items()},
                )
            stack.enter_context(HAProxyProcess(config, sock))
            return await measure(args, console, copies, sock, listen, ladder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def measure(args, console, copies, sock, listen, ladder) -> dict[str, Any]:
    """``copies``: HAProxy server name -> (the Triton serving it, its model name there)."""
    weights = HAProxyWeights(HAProxyRuntime(str(sock)), "be_variants")
    reload_triton, _ = copies["reload"]
    reload = TritonReloadActuator(reload_triton.urls.http, MODEL, ladder)
    variants = {p: Variant(p, server, copies[server][1]) for p, server in PROFILE_OF.items()}
    guard = Guard(
        {p: TritonStepSignals(TritonSource(copies[v.target][0].urls.http, v.model,
                                           metrics_url=copies[v.target][0].urls.metrics))
         for p, v in variants.items()},
        GuardSettings(p95_ms=args.guard_p95_ms),
    )
    shift = GatewayActuator(ladder, variants, weights, guard=guard, step_dwell_s=args.step_dwell_s)
    ways: list[tuple[str, Any]] = [("reload", reload)]
    if args.grpc_load_api:
        ways.append(("reload-grpc", GrpcLoad(reload_triton)))
    ways.append(("shift", shift))
    changes: dict[str, list[tuple[float, float]]] = {w: [] for w, _ in ways}
    results: dict[str, list[Any]] = {w: [] for w, _ in ways}
    unmeasured: list[tuple[float, float]] = []

    async def route_all_to(server: str) -> None:
        await weights.write({s: (100 if s == server else 0) for s in SERVERS})
        await asyncio.sleep(args.settle_s)

    try:
        with Load(listen, args.rate, max_s=args.rounds * 120 + 120, protocol=args.protocol) as load:
            await asyncio.sleep(args.settle_s)  # warm-up: first requests of each copy
            for server in ("latency", "throughput", "reload"):
                await route_all_to(server)
            live = "latency-soft"
            for i in range(args.rounds):
                target = ladder[1] if live == "latency-soft" else ladder[0]
                for way, actuator in ways:
                    if way == "reload-grpc":
                        # The reload way moved this copy already: back to where the round began
                        # (a reload too, kept out of every figure).
                        t0 = time.monotonic()
                        await reload.apply(next(p for p in ladder if p.name == live))
                        unmeasured.append((t0, time.monotonic()))
                    await route_all_to(PROFILE_OF[live] if way == "shift" else "reload")
                    t0 = time.monotonic()
                    result = await actuator.apply(target)
                    changes[way].append((t0, time.monotonic()))
                    results[way].append(result)
                    console.print(
                        f"round {i + 1}/{args.rounds} {way:11s} {live} -> {target.name}: "
                        f"{'ok' if result.ok else result.reason} in {result.duration_s:.2f} s",
                        style="dim",
                    )
                live = target.name
            await asyncio.sleep(args.settle_s)
    finally:
        await reload.aclose()
        await shift.aclose()

    every_window = [w for way in changes.values() for w in way] + unmeasured
    out: dict[str, Any] = {
        "protocol": args.protocol, "rate_rps": args.rate, "rounds": args.rounds, "ways": {}
    }
    for way in changes:
        during = in_flight(load.done, changes[way])
        out["ways"][way] = {
            **tail([ms for ms, o in during if o == "ok"]),
            "failed": sum(1 for _, o in during if o != "ok"),
            "changes": len(changes[way]),
            "ok_changes": sum(1 for r in results[way] if r.ok),
            "change_s_median": statistics.median(b - a for a, b in changes[way]),
        }
    flight = {(s, d) for s, d, _ in load.done if any(s < b and d > a for a, b in every_window)}
    steady = [(d - s) * 1000.0 for s, d, o in load.done if o == "ok" and (s, d) not in flight]
    out["ways"]["steady"] = {**tail(steady), "failed": sum(1 for s, d, o in load.done
                                                           if o != "ok" and (s, d) not in flight)}
    report = load.report
    out["requests"] = report.total.sent if report else None
    out["failed"] = report.total.failed if report else None
    r, s = out["ways"]["reload"], out["ways"]["shift"]
    out["ratio_reload_over_shift"] = {
        k: (r[k] / s[k] if r[k] and s[k] else None) for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")
    }
    return out


def print_table(result: dict[str, Any], console: Console) -> None:
    table = Table(title=f"dense_mlp at {result['rate_rps']:g} req/s over {result['protocol']} through "
                        f"HAProxy, {result['rounds']} changes each way")
    for col in ("requests in flight", "n", "p50 ms", "p95 ms", "p99 ms", "max ms", "failed",
                "changes ok", "change s (median)"):
        table.add_column(col, justify="right")
    labels = {
        "reload": "during a reload swap",
        "reload-grpc": "during a reload, load API over gRPC",
        "shift": "during a weight shift",
        "steady": "during no change",
    }
    for way, label in labels.items():
        if way not in result["ways"]:
            continue
        w = result["ways"][way]

        def f(v: Any) -> str:
            return "-" if v is None else f"{v:.1f}"

        changes = f"{w['ok_changes']}/{w['changes']}" if "changes" in w else "-"
        median = f"{w['change_s_median']:.2f}" if "change_s_median" in w else "-"
        table.add_row(label, str(w["n"]), f(w["p50_ms"]), f(w["p95_ms"]), f(w["p99_ms"]), f(w["max_ms"]),
                      str(w["failed"]), changes, median)
    console.print(table)
    ratio = result["ratio_reload_over_shift"]
    console.print(
        "reload / shift: " + ", ".join(f"{k.removesuffix('_ms')} {v:.1f}x" for k, v in ratio.items() if v)
        + f"; {result['requests']} requests, {result['failed']} failed"
    )


def _rows(result: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The results line for this mode: the p99 of the requests in flight during each kind of change."""
    ways = result["ways"]

    def p99(way: str) -> str:
        v = ways[way]["p99_ms"]
        return "-" if v is None else f"{v:.1f} ms"

    clients = "HTTP" if args.protocol == "http" else "gRPC"
    setup = "one Triton" if args.protocol == "http" else "three Triton servers"
    parts = [f"reload with the load request over HTTP **{p99('reload')}**"]
    if "reload-grpc" in ways:
        parts.append(f"over gRPC **{p99('reload-grpc')}**")
    parts.append(f"weight shift **{p99('shift')}**")
    parts.append(f"no change {p99('steady')}")
    failed_in = [f"{ways[w]['failed']} during {w}" for w in ("reload", "reload-grpc", "shift", "steady")
                 if w in ways and ways[w].get("failed")]
    parts.append(f"{result['failed']} failed of {result['requests']}"
                 + (f" ({', '.join(failed_in)})" if failed_in else ""))
    mode = args.protocol + ("-grpc-load" if args.grpc_load_api else "")
    return [row(
        f"reload swap vs gateway weight shift, dense_mlp at {args.rate:g} req/s through HAProxy, "
        f"{clients} clients, {setup}: p99 of the requests in flight during the change "
        f"({args.rounds} changes each)",
        "; ".join(parts),
        key=f"{mode}_shift_p99_ms", value=ways["shift"]["p99_ms"], unit=" ms")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--protocol", choices=("http", "grpc"), default="http",
                    help="http: one Triton, paths rewritten; grpc: three Triton servers")
    ap.add_argument("--rate", type=float, default=25.0, help="open-loop requests/s (default 25)")
    ap.add_argument("--rounds", type=int, default=5, help="changes of each kind (default 5)")
    ap.add_argument("--step-dwell-s", type=float, default=1.0, help="each shift step's guard window")
    ap.add_argument("--guard-p95-ms", type=float, default=500.0, help="the guard's latency limit")
    ap.add_argument("--settle-s", type=float, default=3.0, help="pause around each change")
    ap.add_argument("--grpc-load-api", action="store_true",
                    help="also swap with the load request sent over gRPC, as the sidecar does by default "
                         "(actuator.load_api: grpc); the plain reload way sends it over HTTP")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    console = Console(stderr=args.json, width=140)
    result = asyncio.run(run(args, console))
    result["grpc_load_api"] = args.grpc_load_api
    save_result("reload_vs_shift", result, _rows(result, args))
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_table(result, console)


if __name__ == "__main__":
    main()
