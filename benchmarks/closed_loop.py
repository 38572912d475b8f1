"""dense_mlp, the real-compute check: the controller against every static profile, in alternating blocks.

    .venv/bin/python benchmarks/closed_loop.py [--schedule step|bursty|ramp|rise-fall|FILE ...]
        [--instances 1,2] [--modes ...] [--blocks 3] [--json]

The modes of this benchmark run torch on the machine's own two cores, so they
cannot run at the same time (each would be the others' load). They take turns
instead, block by block: a block runs every mode once on the same schedule, in
an order rotated by one place per block, and the figures are the medians and
the spreads over ``--blocks`` blocks, so the machine's drift hits each mode
alike. What this can and cannot show: docs/benchmarks.md ("dense_mlp: real
compute, in alternating blocks"). The GPU comparisons, modes at once, are
benchmarks/shared_gpu.py.

One embedded Triton per instance count holds three copies of dense_mlp, each
with that many instances: ``dense_mlp`` (the static profiles and the reload
controller run on it) and one variant per profile of the gateway ladder
(``examples/sidecar-gateway.yaml``). One HAProxy carries every request over
HTTP, so every mode pays the same proxy hop. For each schedule, in each block,
the modes run one after the other:

* ``triton-default`` and every other profile of the reload ladder
  (``examples/sidecar.yaml``), static: loaded, then left alone;
* ``reload``: the sidecar of ``examples/sidecar.yaml``, swapping ``dense_mlp``
  by reload, from the ladder's first profile;
* ``gateway``: the sidecar of ``examples/sidecar-gateway.yaml``, shifting
  HAProxy's weights between the two warm variants, from the first.

Before each controller run its models are unloaded and loaded again, so the
controller does not read the previous run's latencies in Triton's 60 s summary
quantiles. Per phase: the share of requests over the SLO (client side, failed
requests count as over), p50/p95/p99, throughput, device time per request
(Triton's per-batch-size compute times read at every phase boundary,
:mod:`autobatch.lab.device`), the mean batch and the profile in force. Each
schedule ends with one line per controller: against the best static choice
(Triton's default included), on the SLO and on device time, and the issue's
targets: in every phase at most 1 point (gateway) or 3 points (reload) over
the best static choice for that phase; over the schedule device time at most
0.8x Triton's default's; in low phases (at most a quarter of the peak rate)
p95 within 1.1x the default's.

Runnable in parts (one schedule and one instance count at a time): each run
saves its own result file, and ``make results`` shows the newest of each
command line. A slow machine slows every mode alike: no run is refused for it.
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
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autobatch.config import load_yaml
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.lab.closed_loop import ClosedLoopResult, SidecarProcess, run_closed_loop
from autobatch.lab.compare import spread
from autobatch.lab.device import DeviceMeter
from autobatch.lab.haproxy import HAProxyProcess, http_rewrite_config, write_variant
from autobatch.lab.process import poll_until
from autobatch.lab.serve import TritonServer, free_port
from autobatch.profiles import Profile, load_profiles
from autobatch.schedule import Phase, Schedule, load_schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import row, save_logs, save_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "dense_mlp"
EXAMPLES = ROOT / "examples"
SCHEDULES = ("step", "bursty", "ramp", "rise-fall")
BACKEND = "be_variants"
RELOAD_SERVER = "reload"
TARGETS = {"gateway": 0.01, "reload": 0.03}
"""Points over the best static choice a controller may go in a phase (the issue's must-show)."""
DEVICE_TARGET = 0.8
LOW_P95_TARGET = 1.1
LOW_SHARE = 0.25
"""A phase is low when its rate is at most this share of the schedule's peak (and not idle)."""
REACT_S = {"gateway": 2.0, "reload": 5.0}
"""Seconds into a phase before the bound's choice for it takes effect, in its reacting form:
at the shipped 1 s interval an efficiency move needs two windows that saw the new load
(``confirmations: 2``), and a reload another 3 s (its switches took 2.8-3.6 s in these
runs); the gateway's shift is counted as free and at once (the shipped one steps over 4 s)."""


def schedule_path(name: str) -> Path:
    p = Path(name)
    return p if p.suffix in (".yaml", ".yml") else EXAMPLES / "schedules" / f"{name}.yaml"


def variant_server(profile: str) -> str:
    return f"v-{profile}"


def variant_model(profile: str) -> str:
    return f"{MODEL}__{profile.replace('-', '_')}"


def with_count(profile: Profile, n: int) -> Profile:
    return Profile(**{**profile.__dict__, "instance_count": n})


class Bench:
    """One Triton (three copies of dense_mlp), one HAProxy, for one instance count."""

    def __init__(
        self,
        instances: int,
        reload_ladder: list[Profile],
        gateway_ladder: list[Profile],
        workdir: Path,
        stack: contextlib.ExitStack,
        lead_in_s: float = 0.0,
    ) -> None:
        self.instances = instances
        self.lead_in_s = lead_in_s
        self.reload_ladder = reload_ladder
        self.gateway_ladder = gateway_ladder
        self.workdir = workdir
        repo = workdir / "repo"
        repo.mkdir()
        source = ROOT / "model_repository" / MODEL
        write_variant(source, repo, MODEL, with_count(reload_ladder[0], instances))
        for p in gateway_ladder:
            write_variant(source, repo, variant_model(p.name), with_count(p, instances))
        self.triton = stack.enter_context(TritonServer.on_free_ports(repo, startup_timeout_s=600))
        self.sock = workdir / "admin.sock"
        self.listen = f"127.0.0.1:{free_port()}"
        servers = {
            RELOAD_SERVER: MODEL,
            **{variant_server(p.name): variant_model(p.name) for p in gateway_ladder},
        }
        self.servers = servers
        text = http_rewrite_config(
            listen=self.listen,
            socket_path=self.sock,
            triton_http=self.triton.urls.http,
            model=MODEL,
            variants=servers,
            backend=BACKEND,
            weights={RELOAD_SERVER: 100},
            hop_prefix=f"cl-{workdir.name}",
        )
        stack.enter_context(HAProxyProcess(text, self.sock))

    # -- set-up between runs ----------------------------------------------------------------
    async def route_to(self, server: str) -> None:
        from autobatch.actuators.gateway import HAProxyRuntime, HAProxyWeights

        await HAProxyWeights(HAProxyRuntime(str(self.sock)), BACKEND).write(
            {s: (100 if s == server else 0) for s in self.servers}
        )

    async def fresh(self, model: str, profile: Profile) -> None:
        """Unload ``model`` and load it again running ``profile``: new counters, new metrics."""
        base = self.triton.urls.http
        async with httpx.AsyncClient(timeout=600) as client:
            live = (await client.get(f"{base}/v2/models/{model}/config")).json()
            config = with_count(profile, self.instances).merge_into(live)
            r = await client.post(f"{base}/v2/repository/models/{model}/unload")
            r.raise_for_status()

            await asyncio.to_thread(
                poll_until,
                lambda: httpx.get(f"{base}/v2/models/{model}/ready", timeout=10).status_code != 200,
                timeout_s=600,
                what=f"{model} to unload",
            )
            r = await client.post(
                f"{base}/v2/repository/models/{model}/load",
                json={"parameters": {"config": json.dumps(config)}},
            )
            if r.status_code != 200:
                raise RuntimeError(f"loading {model} with {profile.name} failed: {r.text}")
        await asyncio.to_thread(self.warm_up, model)

    def warm_up(self, model: str) -> None:
        """A fresh instance's first batches are slow (allocations, first kernels): run a few
        of every size on each instance before anything is measured."""
        import tritonclient.http as th

        from autobatch.lab.measure import synth_inputs

        client = th.InferenceServerClient(self.triton.urls.http.split("://", 1)[-1], network_timeout=120)
        try:
            config = client.get_model_config(model)
            for b in (1, 2, 4, 8, 16, 32) * (2 * self.instances):
                inputs = []
                for name, arr in synth_inputs(config, b).items():
                    t = th.InferInput(name, list(arr.shape), "FP32")
                    t.set_data_from_numpy(arr)
                    inputs.append(t)
                client.infer(model, inputs)
        finally:
            client.close()

    def sidecar_config(self, path: Path, log: Path, gateway: bool,
                       dry_run: bool = False) -> tuple[Path, str]:
        """The example config pointed at this bench, written as its own file (every path
        absolute); the file and the sidecar's URL. ``dry_run``: the dry-run actuator (the
        sidecar reads and decides, never switches)."""
        data = dict(load_yaml(path))
        data["triton"] = {
            "http_url": self.triton.urls.http,
            "metrics_url": self.triton.urls.metrics,
            "grpc_url": self.triton.urls.grpc,
        }
        listen = f"127.0.0.1:{free_port()}"
        server = dict(data.get("server") or {})
        server["listen"] = listen
        if server.get("token_file"):
            server["token_file"] = str((path.parent / server["token_file"]).resolve())
        data["server"] = server
        profiles = dict(data["profiles"])
        profiles["dir"] = str((path.parent / profiles["dir"]).resolve())
        data["profiles"] = profiles
        policy = dict(data.get("policy") or {})
        if policy.get("curve"):
            policy["curve"] = str((path.parent / policy["curve"]).resolve())
        data["policy"] = policy
        data["decision_log"] = str(log)
        if gateway:
            act = dict(data["actuator"])
            act["socket"] = str(self.sock)
            act["backend"] = BACKEND
            act["variants"] = {
                p.name: {"server": variant_server(p.name), "model": variant_model(p.name)}
                for p in self.gateway_ladder
            }
            data["actuator"] = act
        if dry_run:
            data["actuator"] = {"kind": "dry-run"}
        out = self.workdir / f"{log.stem}.yaml"
        out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        sidecar_config_from_mapping(data, str(out), base=out.parent)  # bad config: fail here, not later
        return out, f"http://{listen}"

    # -- the runs -----------------------------------------------------------------------------
    async def run(
        self, mode: str, schedule: Schedule, slo_ms: float, console: Console, seed: int
    ) -> ClosedLoopResult:
        base = self.triton.urls.http
        log = self.workdir / f"{mode}.jsonl"
        log.unlink(missing_ok=True)
        config: tuple[Path, str] | None = None
        if mode == "gateway":
            first = self.gateway_ladder[0]
            for p in self.gateway_ladder:
                await self.fresh(variant_model(p.name), p)
            await self.route_to(variant_server(first.name))
            models = [variant_model(p.name) for p in self.gateway_ladder]
            config = self.sidecar_config(EXAMPLES / "sidecar-gateway.yaml", log, True)
        else:
            await self.route_to(RELOAD_SERVER)
            profile = (
                self.reload_ladder[0]
                if mode == "reload"
                else next(p for p in self.reload_ladder if p.name == mode)
            )
            await self.fresh(MODEL, profile)
            models = [MODEL]
            if mode == "reload":
                config = self.sidecar_config(EXAMPLES / "sidecar.yaml", log, False)
        console.print(f"  {mode}: {schedule.duration_s:.0f} s of load ...", style="dim")
        meter = DeviceMeter(base, models)
        # The sidecar runs as its own process (`autobatch run`), as in production: in this
        # process it would share the interpreter lock with the load generator.
        with contextlib.ExitStack() as stack:
            url = None
            if config is not None:
                path, url = config
                stack.enter_context(SidecarProcess(path, url, self.workdir / f"{mode}.log"))
            try:
                if url is not None and self.lead_in_s > 0:
                    # A sidecar in production has been running: its start counts as a switch
                    # (it cannot know what its predecessor just did), so its p95 rules wait
                    # p95_settle_s after it. The lead-in, at the first phase's rate and not
                    # measured, lets the schedule meet a running controller.
                    first = schedule.phases[0]
                    lead = Schedule((Phase("lead-in", first.rate_rps or 1.0, self.lead_in_s),))
                    await run_closed_loop(lead, self.listen, MODEL, sidecar=None, sidecar_url=url,
                                          slo_p95_ms=slo_ms, mode=mode, protocol="http", seed=seed)
                return await run_closed_loop(
                    schedule,
                    self.listen,
                    MODEL,
                    sidecar=None,
                    sidecar_url=url,
                    decision_log=log if config is not None else None,
                    slo_p95_ms=slo_ms,
                    mode=mode,
                    protocol="http",
                    device=meter,
                    seed=seed,
                )
            finally:
                await meter.aclose()


# -- the comparison -----------------------------------------------------------------------------


def low_phases(schedule: Schedule) -> list[int]:
    peak = max(p.rate_rps for p in schedule.phases)
    return [i for i, p in enumerate(schedule.phases) if 0 < p.rate_rps <= LOW_SHARE * peak]


def per_phase_bound(
    phases: dict[str, list[dict[str, Any]]],
    low: list[int],
    points: float,
    durations: list[float] | None = None,
    react_s: float = 0.0,
) -> dict[str, Any] | None:
    """The least device time a switcher among the static runs could have spent, and meet the targets.

    ``phases`` maps each static mode (``triton-default`` among them) to its saved phase
    summaries. In each phase it takes, of the static profiles within ``points`` (a share)
    of that phase's best share over the SLO, and in a low phase (``low``) also with p95
    within :data:`LOW_P95_TARGET` of the default's, the one that spent the least device
    time per request there. Switches are free and instant and no backlog carries over, so
    no controller that meets the per-phase and low-phase targets with these profiles does
    better: a device target under this bound is out of reach on that run. None without
    the default's run or device times.

    With the phases' ``durations`` and ``react_s``, ``reacting`` is the same choices'
    device time when each change takes effect ``react_s`` into its phase (the previous
    choice serves that share of the phase's requests, at its own cost there): what a
    controller that must first see the new load gets from the best choices. Short phases
    pay most: a 20 s burst loses a tenth of itself to 2 s.
    """
    default = phases.get("triton-default")
    if default is None:
        return None
    chosen: list[str | None] = []
    spent = late = base = 0.0
    prev: str | None = None  # the choice in force; an idle phase carries it over
    for i, d in enumerate(default):
        if not d["requests"]:
            chosen.append(None)
            continue
        best = min(ph[i]["over_slo_share"] for ph in phases.values())
        fits = {
            m: ph[i] for m, ph in phases.items()
            if ph[i]["device_ms"] is not None and ph[i]["over_slo_share"] <= best + points + 1e-9
            and (i not in low or (ph[i]["p95_ms"] or 0) <= LOW_P95_TARGET * (d["p95_ms"] or 0) + 1e-9)
        }
        if d["device_ms"] is None or not fits:
            return None
        m = min(fits, key=lambda k: fits[k]["device_ms"])
        chosen.append(m)
        cost = fits[m]["device_ms"]
        spent += d["requests"] * cost
        if durations is not None and prev not in (None, m) and phases[prev][i]["device_ms"] is not None:
            lag = min(1.0, react_s / durations[i])
            cost = lag * phases[prev][i]["device_ms"] + (1 - lag) * cost
        late += d["requests"] * cost
        base += d["requests"] * d["device_ms"]
        prev = m
    if base <= 0:
        return None
    out: dict[str, Any] = {"device_vs_default": round(spent / base, 4), "profiles": chosen}
    if durations is not None and react_s > 0:
        out["reacting"] = {"react_s": react_s, "device_vs_default": round(late / base, 4)}
    return out


def compare(
    schedule: Schedule, results: dict[str, ClosedLoopResult], statics: list[str], instances: int
) -> dict[str, Any]:
    """Each controller against the best static choice per phase and over the schedule."""
    n = len(schedule.phases)
    best_share = [min(results[s].phases[i].over_slo_share for s in statics) for i in range(n)]
    best_in_phase = [
        min(
            statics,
            key=lambda s: (results[s].phases[i].over_slo_share, results[s].phases[i].device_ms or 1e9),
        )
        for i in range(n)
    ]

    def misses(name: str) -> int:
        return sum(1 for i in range(n) if results[name].phases[i].over_slo_share > best_share[i] + 0.01)

    best_static = min(statics, key=lambda s: (misses(s), results[s].device_ms or 1e9))
    default = results.get("triton-default")
    lows_i = low_phases(schedule)
    out: dict[str, Any] = {
        "best_static": best_static,
        "best_static_per_phase": best_in_phase,
        "low_phases": [schedule.phases[i].name for i in lows_i],
        "controllers": {},
    }
    static_phases = {s: [p.to_dict() for p in results[s].phases] for s in statics}
    durations = [p.duration_s for p in schedule.phases]
    for mode in ("reload", "gateway"):
        if mode not in results:
            continue
        r = results[mode]
        excess = [r.phases[i].over_slo_share - best_share[i] for i in range(n)]
        worst = max(range(n), key=lambda i: excess[i])
        dev_default = (
            (r.device_ms / default.device_ms) if default and default.device_ms and r.device_ms else None
        )
        best = results[best_static]
        dev_best = (r.device_ms / best.device_ms) if best.device_ms and r.device_ms else None
        lows = []
        for i in lows_i:
            mine, theirs = r.phases[i].p95_ms, default.phases[i].p95_ms if default else None
            if mine is not None and theirs:
                lows.append((mine / theirs, schedule.phases[i].name, mine, theirs))
        low = max(lows) if lows else None
        bound = per_phase_bound(static_phases, lows_i, TARGETS[mode], durations, REACT_S[mode])
        out["controllers"][mode] = {
            "excess_points": [round(100 * e, 3) for e in excess],
            "worst_phase": schedule.phases[worst].name,
            "worst_excess_points": round(100 * excess[worst], 3),
            "target_points": 100 * TARGETS[mode],
            "slo_target_met": excess[worst] <= TARGETS[mode] + 1e-9,
            "over_slo_share": r.over_slo_share,
            "best_static_over_slo_share": best.over_slo_share,
            "device_vs_default": dev_default,
            "device_vs_best_static": dev_best,
            "device_target_met": None if dev_default is None else dev_default <= DEVICE_TARGET,
            "device_bound": bound,
            "low_p95_vs_default": None if low is None else round(low[0], 4),
            "low_p95_phase": None if low is None else low[1],
            "low_p95_target_met": None if low is None else low[0] <= LOW_P95_TARGET,
            "instances": instances,
        }
    return out


def bound_note(c: dict[str, Any]) -> str:
    """``; per-phase bound 0.76x, 0.82x reacting in 5 s``: the least device time the static
    runs allow, and the same choices made that long into each phase (per_phase_bound)."""
    b = c.get("device_bound")
    if not b:
        return ""
    r = b.get("reacting")
    late = "" if not r else f", {r['device_vs_default']:.2f}x reacting in {r['react_s']:g} s"
    return f"; per-phase bound {b['device_vs_default']:.2f}x{late}"


def verdict_line(schedule_name: str, instances: int, mode: str, c: dict[str, Any], best: str) -> str:
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    ok = {True: "met", False: "MISSED", None: "n/a"}
    return (
        f"{schedule_name}, {instances} instance(s), controller by {mode} vs the best static choice "
        f"({best}): {100 * c['over_slo_share']:.1f}% vs {100 * c['best_static_over_slo_share']:.1f}% "
        f"of requests over the SLO, device time {x(c['device_vs_best_static'])} of it; worst phase "
        f"{c['worst_phase']} {c['worst_excess_points']:+.1f} points over that phase's best static "
        f"(target {c['target_points']:g}: "
        f"{ok[c['slo_target_met']]}); device {x(c['device_vs_default'])} Triton's default (target "
        f"{DEVICE_TARGET:g}x: {ok[c['device_target_met']]}{bound_note(c)}); low-phase p95 "
        f"{x(c['low_p95_vs_default'])} the "
        f"default's (target {LOW_P95_TARGET:g}x: {ok[c['low_p95_target_met']]})"
    )


def phase_table(
    schedule_name: str,
    instances: int,
    schedule: Schedule,
    results: dict[str, ClosedLoopResult],
    slo_ms: float,
) -> Table:
    t = Table(
        title=f"{schedule_name}, dense_mlp x {instances} instance(s): share over the SLO ({slo_ms:g} ms) / "
        f"p95 ms / device ms per request [profile in force]",
        show_lines=False,
    )
    t.add_column("phase")
    t.add_column("rate/s", justify="right")
    for mode in results:
        t.add_column(mode, justify="right")
    for i, ph in enumerate(schedule.phases):
        cells = []
        for r in results.values():
            p = r.phases[i]
            dev = "-" if p.device_ms is None else f"{p.device_ms:.2f}"
            cell = f"{p.over_slo_share:.1%} / {p.p95_ms or 0:.0f} / {dev}"
            if r.mode in ("reload", "gateway"):
                top = max(p.profiles.items(), key=lambda kv: kv[1])[0] if p.profiles else "?"
                cell += escape(f" [{top}]")
            cells.append(cell)
        t.add_row(ph.name, f"{ph.rate_rps:g}", *cells)
    totals = []
    for r in results.values():
        dev = "-" if r.device_ms is None else f"{r.device_ms:.2f}"
        totals.append(f"{r.over_slo_share:.1%} / - / {dev}")
    t.add_row("whole", "", *totals)
    return t


def _block_order(modes: list[str], block: int) -> list[str]:
    """The modes' turn in a block: rotated one place per block, so no mode always runs first
    (or last, after the machine has warmed or slowed) and drift within a block evens out."""
    k = block % len(modes)
    return modes[k:] + modes[:k]


async def _one_block(bench: Bench, name: str, schedule: Schedule, block: int, modes: list[str],
                     statics: list[str], slo_ms: float, args: argparse.Namespace, console: Console,
                     logs: dict[str, bytes]) -> dict[str, Any]:
    """Every mode once, in the block's order; the block's comparison."""
    n, tmp = bench.instances, bench.workdir
    results: dict[str, ClosedLoopResult] = {}
    for mode in _block_order(modes, block):
        results[mode] = await bench.run(mode, schedule, slo_ms, console, args.seed)
        log = tmp / f"{mode}.jsonl"
        if log.exists():
            logs[f"{name}-x{n}-b{block}-{mode}"] = log.read_bytes()
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                shutil.copy(log, args.keep_logs / f"{name}-x{n}-b{block}-{mode}.jsonl")
    results = {m: results[m] for m in modes}  # the table's order, not the block's
    ran_statics = [s for s in statics if s in results]
    cmp = compare(schedule, results, ran_statics, n) if ran_statics else {}
    if not args.json:
        console.print(phase_table(f"{name}, block {block + 1}", n, schedule, results, slo_ms))
    for mode, c in cmp.get("controllers", {}).items():
        console.print(verdict_line(f"{name}, block {block + 1}", n, mode, c, cmp["best_static"]))
    return {
        "schedule": name, "instances": n, "block": block, "order": _block_order(modes, block),
        "comparison": cmp, "modes": {m: r.to_dict() for m, r in results.items()},
        "phases": [{"name": p.name, "rate_rps": p.rate_rps, "duration_s": p.duration_s}
                   for p in schedule.phases],
    }


async def main_async(args: argparse.Namespace, console: Console,
                     logs: dict[str, bytes] | None = None) -> dict[str, Any]:
    """Every part asked for, each in ``args.blocks`` alternating blocks; the controller runs'
    decision logs go into ``logs`` (``<schedule>-x<instances>-b<block>-<mode>``)."""
    logs = {} if logs is None else logs
    reload_cfg = load_yaml(EXAMPLES / "sidecar.yaml")
    gateway_cfg = load_yaml(EXAMPLES / "sidecar-gateway.yaml")
    available = load_profiles(ROOT / "profiles" / MODEL)
    reload_ladder = [available[n] for n in reload_cfg["profiles"]["ladder"]]
    gateway_ladder = [available[n] for n in gateway_cfg["profiles"]["ladder"]]
    slo_ms = float(reload_cfg["slo"]["p95_ms"])
    statics = [p.name for p in reload_ladder]
    if "triton-default" not in statics:
        reload_ladder.insert(0, available["triton-default"])
        statics.insert(0, "triton-default")
    modes = args.modes.split(",") if args.modes else [*statics, "reload", "gateway"]
    schedules = {Path(s).stem: load_schedule(schedule_path(s)) for s in args.schedule or SCHEDULES}
    out: dict[str, Any] = {
        "model": MODEL,
        "slo_p95_ms": slo_ms,
        "reload_ladder": [p.name for p in reload_ladder],
        "gateway_ladder": [p.name for p in gateway_ladder],
        "blocks": args.blocks,
        "runs": [],
    }
    for n in [int(x) for x in args.instances.split(",")]:
        tmp = Path(tempfile.mkdtemp(prefix="ab-cl-"))
        try:
            with contextlib.ExitStack() as stack:
                console.print(
                    f"[bold]dense_mlp x {n} instance(s)[/]: starting Triton (3 copies) and HAProxy ..."
                )
                bench = Bench(n, reload_ladder, gateway_ladder, tmp, stack, args.lead_in)
                for name, schedule in schedules.items():
                    console.print(f"[bold]{name}[/] ({schedule.duration_s:.0f} s per mode), "
                                  f"{args.blocks} blocks of: {', '.join(modes)}")
                    for block in range(args.blocks):
                        out["runs"].append(await _one_block(bench, name, schedule, block, modes, statics,
                                                            slo_ms, args, console, logs))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def block_spreads(result: dict[str, Any]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Per schedule, instance count and controller: each figure's median and spread over the
    blocks (a run saved before blocks counts as one)."""
    out: dict[tuple[str, int, str], dict[str, Any]] = {}
    parts: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for run in result["runs"]:
        for mode, c in run["comparison"].get("controllers", {}).items():
            parts.setdefault((run["schedule"], run["instances"], mode), []).append(c)
    for key, cs in parts.items():
        summary = {}
        for k in ("device_vs_default", "worst_excess_points", "low_p95_vs_default"):
            got = spread([c[k] for c in cs])
            summary[k] = None if got is None else got.to_dict()
        summary["target_points"] = cs[0]["target_points"]
        summary["bound"] = [(c.get("device_bound") or {}).get("device_vs_default") for c in cs]
        out[key] = summary
    return out


def rows_for(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []

    def fmt(s: dict[str, Any] | None, f: str) -> str:
        if not s:
            return "-"
        return f.format(s["median"]) + (f" (spread {s['spread']:.2f} over {s['runs']} blocks)"
                                        if s["runs"] > 1 else "")

    for (sched, n, mode), s in block_spreads(result).items():
        bounds = [b for b in s["bound"] if b is not None]
        bound = f"; per-phase bound {statistics.median(bounds):.2f}x" if bounds else ""
        dev = s["device_vs_default"]
        rows.append(row(
            f"closed loop, {sched}, dense_mlp x {n}: controller by {mode}",
            f"worst phase {fmt(s['worst_excess_points'], '{:+.1f}')} points over the best static (target "
            f"{s['target_points']:g}); device {fmt(dev, '{:.2f}x')} Triton's default (target "
            f"{DEVICE_TARGET:g}x{bound}); low-phase p95 {fmt(s['low_p95_vs_default'], '{:.2f}x')} the "
            f"default's; the modes took turns on the CPU, block by block",
            key=f"device_{sched}_{n}_{mode}", value=None if dev is None else dev["median"], unit="x",
            value_name="device"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--schedule",
        action="append",
        help=f"a schedule name ({', '.join(SCHEDULES)}) or YAML file; repeatable (default: all four)",
    )
    ap.add_argument("--instances", default="1,2", help="instance counts of dense_mlp, comma-separated (1,2)")
    ap.add_argument(
        "--modes", default="", help="comma-separated subset of the static profiles, reload, gateway"
    )
    ap.add_argument("--blocks", type=int, default=3,
                    help="alternating blocks: every mode once per block, in a rotated order (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lead-in", type=float, default=60.0, metavar="S",
                    help="seconds the sidecar runs at the first phase's rate before a controller "
                    "mode's schedule starts, unmeasured (default 60: its p95 rules wait that "
                    "long after its start)")
    ap.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                    help="copy each controller mode's decision log into DIR")
    ap.add_argument("--no-save", action="store_true", help="do not write a result file (smoke runs)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    if args.blocks < 1:
        ap.error(f"--blocks {args.blocks}: must be >= 1")
    console = Console(stderr=args.json, width=200)
    logs: dict[str, bytes] = {}
    result = asyncio.run(main_async(args, console, logs))
    result["spreads"] = {f"{s}-x{n}-{m}": v for (s, n, m), v in block_spreads(result).items()}
    for line in rows_for(result):
        console.print(f"{line['what']}: {line['figure']}")
    if not args.no_save:
        # Beside the result, its decision logs: tests/unit/test_results_replay.py replays
        # them through the shipped policy, so the figures on record describe it.
        save_logs(save_result("closed_loop", result, rows_for(result)), logs)
    if args.json:
        print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
