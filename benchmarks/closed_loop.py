"""The controller against Triton's default and every static profile, side by side on one server.

    .venv/bin/python benchmarks/closed_loop.py [--schedule step|bursty|ramp|rise-fall|FILE ...]
        [--instances 1,2] [--modes ...] [--json]

One embedded Triton per instance count holds three copies of dense_mlp, each
with that many instances: ``dense_mlp`` (the static profiles and the reload
controller run on it) and one variant per profile of the gateway ladder
(``examples/sidecar-gateway.yaml``). One HAProxy carries every request over
HTTP, so every mode pays the same proxy hop. For each schedule the modes run
one after the other:

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
command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
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
RESULTS_DIR = ROOT / "benchmarks" / "results" / "closed_loop"
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


CHECK_SLOWER = 1.1
"""The machine check fails when Triton's default spends more than this times the
slowest saved run's device time a request in any phase ..."""
CHECK_OVER_POINTS = 2.0
"""... or sends this many points more of a phase over the SLO than the worst saved run."""


Saved = dict[str, list[tuple[str, dict[str, Any]]]]
"""Phase name -> (result file stem, Triton's default's figures in that phase) per saved run."""


def saved_runs(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(file stem, run) for every run in the current (not superseded) saved files."""
    out = []
    for f in sorted(folder.glob("*.json")):
        doc = json.loads(f.read_text(encoding="utf-8"))
        out += [(f.stem, run) for run in doc.get("data", {}).get("runs", [])]
    return out


def saved_default_phases(runs: list[tuple[str, dict[str, Any]]], schedule: str, instances: int) -> Saved:
    """Triton's default's phases in the saved ``runs`` (:func:`saved_runs`) of ``schedule``
    with ``instances``, by phase name: what :func:`machine_check` compares a run against."""
    out: Saved = {}
    for stem, run in runs:
        mode = run.get("modes", {}).get("triton-default")
        if run.get("schedule") != schedule or run.get("instances") != instances or not mode:
            continue
        for ph in mode["phases"]:
            out.setdefault(ph["name"], []).append((stem, ph))
    return out


def machine_check(phases: list[dict[str, Any]], saved: Saved) -> tuple[bool, str]:
    """Whether this machine ran dense_mlp as fast as it did for the saved runs: Triton's
    default's ``phases`` in this run against the same phases in the saved runs of the same
    schedule and instance count (:func:`saved_default_phases`).

    The VM's speed for torch moves by 1.4-2.4x within a day (2026-12-01), invisibly to a
    pure-Python probe, and a run on a slow hour measures the machine, not the controller.
    The worst phase decides: its device time a request over :data:`CHECK_SLOWER` x the
    slowest saved run's, or its share over the SLO :data:`CHECK_OVER_POINTS` points over
    the worst saved run's. Phases without a saved reading (idle ones) are not judged."""
    judged = [(ph, saved[ph["name"]]) for ph in phases if saved.get(ph["name"])]
    if not judged:
        raise ValueError("no saved run of these phases to compare with")
    slowest = None  # (ratio, phase, this device ms, saved lo, saved hi, runs)
    worst_over = None  # (points, phase, this share, saved hi)
    for ph, runs in judged:
        devs = [p["device_ms"] for _, p in runs if p.get("device_ms")]
        if devs:
            ratio = math.inf if ph.get("device_ms") is None else ph["device_ms"] / max(devs)
            if slowest is None or ratio > slowest[0]:
                slowest = (ratio, ph["name"], ph.get("device_ms"), min(devs), max(devs), len(runs))
        hi = max(p["over_slo_share"] for _, p in runs)
        points = 100 * (ph["over_slo_share"] - hi)
        if worst_over is None or points > worst_over[0]:
            worst_over = (points, ph["name"], ph["over_slo_share"], hi)
    parts = []
    if slowest is not None:
        ratio, name, dev, lo, hi, n = slowest
        dev_txt = "no reading" if dev is None else f"{dev:.2f} ms a request"
        parts.append(f"its slowest phase against the saved runs, {name}: {dev_txt}, {ratio:.2f}x the "
                     f"slowest of {n} ({lo:.2f}-{hi:.2f} ms)")
    assert worst_over is not None
    points, name, share, hi = worst_over
    parts.append(f"over the SLO, {name}: {share:.1%} against at most {hi:.1%} ({points:+.1f} points)")
    slow = (slowest is not None and slowest[0] > CHECK_SLOWER) or points > CHECK_OVER_POINTS
    text = "machine check, Triton's default: " + "; ".join(parts) + ": "
    if slow:
        return False, text + (
            f"SLOWER than when the saved runs were made (limits {CHECK_SLOWER:g}x and "
            f"+{CHECK_OVER_POINTS:g} points); closed-loop figures measured now do not compare "
            "with them")
    return True, text + "as fast as for the saved runs"


CHECK_DRIFT = 1.15
"""The most the first phase's device time a request may differ between the modes that
served it on Triton's default (the default itself and the controllers, which start
there) before the run is taken to have changed machine speed between its modes.
The saved runs: 1.01-1.09x (1.12x on the slow morning of 2026-12-01)."""


def drift_check(modes: dict[str, dict[str, Any]]) -> tuple[bool, str] | None:
    """Whether the machine kept its speed from one mode of a run to the next: the first
    phase's device time a request in every mode that served all of it on Triton's default
    (the same work, at the same rate, on the same profile). None when fewer than two did.

    The modes run one after the other for 5-11 minutes, and the VM's speed for torch can
    move by 1.4x within one (2026-12-01 19:02: the default's first phase 6.50 ms a request,
    the controllers' 8.37-8.90), and then the side-by-side comparison is not one."""
    readings = {
        mode: r["phases"][0]["device_ms"] for mode, r in modes.items()
        if r["phases"] and r["phases"][0].get("device_ms")
        and r["phases"][0].get("profiles") == {"triton-default": 1.0}
    }
    if len(readings) < 2:
        return None
    lo, hi = min(readings, key=readings.__getitem__), max(readings, key=readings.__getitem__)
    drift = readings[hi] / readings[lo]
    text = (f"drift check, the first phase on Triton's default: {hi} {readings[hi]:.2f} ms a request, "
            f"{lo} {readings[lo]:.2f}: {drift:.2f}x (limit {CHECK_DRIFT:g}x)")
    if drift > CHECK_DRIFT:
        return False, text + ": the machine changed speed between the modes of this run"
    return True, text


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


async def main_async(args: argparse.Namespace, console: Console,
                     logs: dict[str, bytes] | None = None) -> dict[str, Any]:
    """Every part asked for; the controller runs' decision logs go into ``logs``
    (``<schedule>-x<instances>-<mode>``)."""
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
                    console.print(
                        f"[bold]{name}[/] ({schedule.duration_s:.0f} s per mode): {', '.join(modes)}"
                    )
                    results: dict[str, ClosedLoopResult] = {}
                    for mode in modes:
                        results[mode] = await bench.run(mode, schedule, slo_ms, console, args.seed)
                        log = tmp / f"{mode}.jsonl"
                        if log.exists():
                            logs[f"{name}-x{n}-{mode}"] = log.read_bytes()
                            if args.keep_logs:
                                args.keep_logs.mkdir(parents=True, exist_ok=True)
                                shutil.copy(log, args.keep_logs / f"{name}-x{n}-{mode}.jsonl")
                    ran_statics = [s for s in statics if s in results]
                    cmp = compare(schedule, results, ran_statics, n) if ran_statics else {}
                    out["runs"].append(
                        {
                            "schedule": name,
                            "instances": n,
                            "comparison": cmp,
                            "modes": {m: r.to_dict() for m, r in results.items()},
                            "phases": [
                                {"name": p.name, "rate_rps": p.rate_rps, "duration_s": p.duration_s}
                                for p in schedule.phases
                            ],
                        }
                    )
                    if not args.json:
                        console.print(phase_table(name, n, schedule, results, slo_ms))
                    for mode, c in cmp.get("controllers", {}).items():
                        console.print(verdict_line(name, n, mode, c, cmp["best_static"]))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def rows_for(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for run in result["runs"]:
        cmp = run["comparison"]
        for mode, c in cmp.get("controllers", {}).items():
            dev = c["device_vs_default"]
            low = c["low_p95_vs_default"]
            rows.append(
                row(
                    f"closed loop, {run['schedule']}, dense_mlp x {run['instances']}: controller by {mode}",
                    f"worst phase {c['worst_excess_points']:+.1f} points over the best static "
                    f"(target {c['target_points']:g}); device "
                    f"{'-' if dev is None else f'{dev:.2f}x'} Triton's default (target {DEVICE_TARGET:g}x"
                    f"{bound_note(c)}); "
                    f"low-phase p95 {'-' if low is None else f'{low:.2f}x'} the default's",
                    key=f"device_{run['schedule']}_{run['instances']}_{mode}",
                    value=dev,
                    unit="x",
                    value_name="device",
                )
            )
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
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lead-in", type=float, default=60.0, metavar="S",
                    help="seconds the sidecar runs at the first phase's rate before a controller "
                    "mode's schedule starts, unmeasured (default 60: its p95 rules wait that "
                    "long after its start)")
    ap.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                    help="copy each controller mode's decision log into DIR")
    ap.add_argument("--no-save", action="store_true", help="do not write a result file (smoke runs)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--check-machine", action="store_true",
                    help="about a minute: Triton's default alone on the bursts with two instances, "
                    "against the saved runs of the same; exit 1 if this machine is slower than it "
                    "was for them (run it before measuring; saves nothing)")
    ap.add_argument("--save-anyway", action="store_true",
                    help="save the result although Triton's default in it ran slower than in the "
                    "saved runs of its schedule, or the machine's speed moved between its modes "
                    "(the checks' verdicts are saved with it)")
    args = ap.parse_args()
    console = Console(stderr=args.json, width=200)
    on_record = saved_runs(RESULTS_DIR)  # read before this run saves its own
    if args.check_machine:
        if not saved_default_phases(on_record, "bursty", 2):
            print(f"closed_loop: --check-machine: no saved run of the bursts with two instances "
                  f"under {RESULTS_DIR.relative_to(ROOT)} to compare with", file=sys.stderr)
            raise SystemExit(2)
        args.schedule, args.instances, args.modes, args.no_save = ["bursty"], "2", "triton-default", True
    logs: dict[str, bytes] = {}
    result = asyncio.run(main_async(args, console, logs))
    # Every run with the default in it is checked against the saved runs of its schedule
    # before it may replace them: a machine that slowed down during the run shows here.
    checks = []
    for run in result["runs"]:
        default = run["modes"].get("triton-default")
        saved = saved_default_phases(on_record, run["schedule"], run["instances"])
        drift = drift_check(run["modes"])
        if drift is not None:
            checks.append(drift[0])
            run["drift_check"] = {"ok": drift[0], "message": drift[1]}
            console.print(f"{run['schedule']} x {run['instances']}: {drift[1]}")
        if not default or not any(saved.get(p["name"]) for p in default["phases"]):
            continue  # a new schedule, or a run without the default: nothing to compare
        ok, text = machine_check(default["phases"], saved)
        checks.append(ok)
        run["machine_check"] = {"ok": ok, "message": text}
        console.print(f"{run['schedule']} x {run['instances']}: {text}")
    slow = not all(checks)
    if args.check_machine:
        if args.json:
            print(json.dumps(result["runs"][0]["machine_check"], indent=1))
        raise SystemExit(1 if slow else 0)
    if not args.no_save:
        if slow and not args.save_anyway:
            console.print("closed_loop: not saved: a machine or drift check failed (above); run again "
                          "when `closed_loop.py --check-machine` passes, or pass --save-anyway")
            raise SystemExit(1)
        # Beside the result, its decision logs: tests/unit/test_results_replay.py replays
        # them through the shipped policy, so the figures on record describe it.
        save_logs(save_result("closed_loop", result, rows_for(result)), logs)
    if args.json:
        print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
