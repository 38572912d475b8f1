"""The sidecar's own failure modes, injected one at a time against the real Triton under load.

    .venv/bin/python benchmarks/faults.py [--only NAME ...] [--json]

Each fault gets a fresh sidecar (the real ``autobatch run``, a child process),
an open-loop gRPC load on the model (40 requests/s; HTTP through HAProxy in
gateway mode), a poller of the model's ``/v2/models/M/ready`` every 100 ms, and
a watcher of the sidecar's ``/healthz`` and ``/readyz`` every 250 ms. Then the
fault, then what happened:

* **what the sidecar did**: its errors and timeouts by stage, switches, what
  ``/healthz`` and ``/readyz`` said, from its ``/status`` and ``/metrics``;
* **requests failed because of the sidecar**: failed requests whose life did
  not overlap the fault's own outage (Triton killed or stopped, until requests
  succeed again); in every other fault Triton never went down, so every failed
  request counts against the sidecar;
* **model READY throughout**: every ready poll outside that outage answered 200;
* **time to recover**: from the end of the fault to the sidecar back at work,
  as each fault defines it (printed with the result).

The faults: Triton killed and restarted; Triton stopped (SIGSTOP) for 20 s;
Triton's metrics endpoint slow, garbage, huge (a proxy in front of the real
one); a reload Triton refuses (a ``KIND_GPU`` profile on this CPU); a reload
that outlives ``actuator.timeout_s``; the sidecar SIGKILLed in the middle of a
switch and started again; the decision log unwritable (``RLIMIT_FSIZE`` on the
sidecar: every write fails as on a full disk) and SIGTERM meanwhile; HAProxy's
runtime socket gone in gateway mode; Prometheus down in fleet mode.

The model is the emulated accelerator (it holds the instance for its curve's
time without burning CPU), on a curve shaped like dense_mlp's on this CPU, so
the two cores stay with Triton, the load and the sidecar. Saved with
``record.save_result("faults", ...)``: one row per fault in the results table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from record import row, save_result
from rich.console import Console
from rich.table import Table

from autobatch.curve import BatchCurve
from autobatch.errors import ServeError
from autobatch.lab import haproxy as launch
from autobatch.lab.haproxy import HAProxyProcess, http_rewrite_config
from autobatch.lab.process import ManagedProcess, poll_until
from autobatch.lab.prometheus import PrometheusServer
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer, free_port
from autobatch.load import RequestRecord, run_load
from autobatch.profiles import load_profiles
from autobatch.schedule import Schedule

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "model_repository"
PROFILES = ROOT / "profiles"
MODEL = EMULATOR_MODEL
# latency-soft ([2, 4]) carries 4/20 ms = 200/s; aggressive ([8, 16, 32]) 667/s.
CURVE = BatchCurve({1: 10.0, 2: 18.0, 4: 20.0, 8: 24.0, 16: 32.0, 32: 48.0}, name="dense-like")
TOKEN = "faults-token"
RATE_RPS = 40.0
REQUEST_TIMEOUT_S = 5.0

console = Console(stderr=True)


def log(message: str) -> None:
    console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}")


# -- what runs alongside every fault ---------------------------------------------------------


class Load:
    """Open-loop load in a thread; every finished request as (sent, done, outcome), wall clock."""

    def __init__(self, url: str, *, protocol: str = "grpc", rate_rps: float = RATE_RPS,
                 max_s: float = 600.0) -> None:
        self.url, self.protocol, self.rate, self.max_s = url, protocol, rate_rps, max_s
        self.done: list[tuple[float, float, str]] = []
        self.stop = threading.Event()
        self.first = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _on(self, rec: RequestRecord) -> None:
        now = time.time()
        latency = (rec.latency_ms or 0.0) / 1000.0
        self.done.append((now - latency, now, rec.outcome))
        if rec.ok:
            self.first.set()

    def _run(self) -> None:
        try:
            run_load(self.url, MODEL, Schedule.constant(self.rate, self.max_s), protocol=self.protocol,
                     timeout_s=REQUEST_TIMEOUT_S, drain_s=REQUEST_TIMEOUT_S + 1, on_record=self._on,
                     stop=self.stop, seed=15)
        except BaseException as exc:  # surfaced in the report
            self.error = exc
        finally:
            self.first.set()

    def first_success_after(self, t: float) -> float | None:
        return min((done for _, done, outcome in list(self.done) if outcome == "ok" and done > t),
                   default=None)

    def __enter__(self) -> Load:
        self.thread.start()
        if not self.first.wait(60) or self.error is not None:
            raise RuntimeError(f"the load never got an answer: {self.error}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(REQUEST_TIMEOUT_S + 30)


class Poller:
    """Polls ``fn() -> value`` every ``interval_s`` in a thread, keeping (time, value, seconds)."""

    def __init__(self, fn: Callable[[], Any], interval_s: float) -> None:
        self.fn, self.interval_s = fn, interval_s
        self.samples: list[tuple[float, Any, float]] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.time()
            value = self.fn()
            self.samples.append((t0, value, time.time() - t0))
            self._stop.wait(self.interval_s)

    def between(self, t0: float, t1: float) -> list[tuple[float, Any, float]]:
        return [s for s in list(self.samples) if t0 <= s[0] <= t1]

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(10)


def status_code(url: str, timeout_s: float = 2.0) -> int | None:
    try:
        return httpx.get(url, timeout=timeout_s).status_code
    except httpx.HTTPError:
        return None


class Sidecar:
    """``autobatch run --config FILE`` as a child process, its output in a log file."""

    def __init__(self, workdir: Path, config: dict[str, Any], name: str, *, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        config = dict(config)
        config["server"] = {**config.get("server", {}), "listen": f"127.0.0.1:{self.port}"}
        self.config = config
        self.path = workdir / f"{name}.yaml"
        self.path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = ManagedProcess(f"sidecar {name}", workdir / f"{name}.log")
        self.exit_code: int | None = None

    @property
    def decision_log(self) -> Path:
        return Path(self.config["decision_log"])

    def start(self) -> Sidecar:
        self.proc.start([sys.executable, "-m", "autobatch", "run", "--config", str(self.path)])
        poll_until(lambda: (self.status() or {}).get("active_profile"), timeout_s=90, interval_s=0.1,
                   what=f"{self.proc.name} to come up", check=lambda: self.proc.check_alive("at start"))
        return self

    def status(self) -> dict[str, Any] | None:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return httpx.get(self.url + "/status", timeout=3).json()
        return None

    def metric(self, name: str, **labels: str) -> float:
        with contextlib.suppress(httpx.HTTPError):
            text = httpx.get(self.url + "/metrics", timeout=3).text
            for family in text_string_to_metric_families(text):
                for s in family.samples:
                    if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                        return float(s.value)
        return float("nan")

    def pin(self, profile: str | None) -> int:
        r = httpx.post(self.url + "/profile", json={"profile": profile},
                       headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        return r.status_code

    def rss_mb(self) -> float | None:
        pid = self.proc.pid
        with contextlib.suppress(OSError, TypeError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return None

    def stop(self) -> int | None:
        """SIGTERM, wait; the exit code (None if it had to be killed)."""
        if self.proc.pid is None:
            return self.exit_code
        raw = self.proc._proc  # noqa: SLF001 - the exit code is what is measured
        if raw is not None and raw.poll() is None:
            raw.send_signal(signal.SIGTERM)
            with contextlib.suppress(Exception):
                raw.wait(30)
        self.exit_code = raw.returncode if raw is not None else None
        self.proc.stop(5)
        return self.exit_code

    def kill(self) -> None:
        self.proc.signal(signal.SIGKILL)
        self.proc.stop(5)

    def log_text(self) -> str:
        return self.proc.log_path.read_text(encoding="utf-8", errors="replace")


# -- a fault's measurements --------------------------------------------------------------------


@dataclass
class Outcome:
    fault: str
    did: str = ""
    recovery_s: float | None = None
    recovery_means: str = ""
    outage: list[tuple[float, float]] = field(default_factory=list)
    """When the fault itself took Triton down (failures then are the fault's)."""
    details: dict[str, Any] = field(default_factory=dict)
    survived: bool = True


def judge(out: Outcome, load: Load | None, ready: Poller, t0: float, t1: float) -> dict[str, Any]:
    def in_outage(a: float, b: float) -> bool:
        return any(a < end and b > start for start, end in out.outage)

    done = [d for d in (load.done if load else []) if t0 <= d[1] <= t1 + REQUEST_TIMEOUT_S + 2]
    failed = [d for d in done if d[2] != "ok"]
    by_sidecar = [d for d in failed if not in_outage(d[0], d[1])]
    polls = [s for s in ready.between(t0, t1) if not in_outage(s[0], s[0] + s[2])]
    not_ready = [s for s in polls if s[1] != 200]
    kinds: dict[str, int] = {}
    for d in by_sidecar:
        kinds[d[2]] = kinds.get(d[2], 0) + 1
    return {
        "fault": out.fault,
        "did": out.did,
        "survived": out.survived,
        "requests": len(done),
        "failed": len(failed),
        "failed_by_sidecar": len(by_sidecar),
        "failed_by_sidecar_kinds": kinds,
        "ready_polls": len(polls),
        "ready_throughout": not not_ready,
        "not_ready_polls": len(not_ready),
        "recovery_s": None if out.recovery_s is None else round(out.recovery_s, 2),
        "recovery_means": out.recovery_means,
        "outage_s": round(sum(b - a for a, b in out.outage), 2),
        "details": out.details,
        "load_error": repr(load.error) if load and load.error else None,
    }


def counters(sc: Sidecar) -> dict[str, float]:
    st = sc.status() or {}
    out = {f"errors.{k}": float(v) for k, v in (st.get("errors") or {}).items()}
    for stage in ("signals", "actuate", "reconcile", "log", "state"):
        out[f"timeouts.{stage}"] = sc.metric("autobatch_timeouts_total", stage=stage)
    out["switches"] = float(st.get("switches", 0))
    out["ticks"] = float(st.get("ticks", 0))
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}


def probe_story(watch: Poller, t0: float, t1: float) -> dict[str, Any]:
    """What /healthz and /readyz said between t0 and t1: when each first turned 503, and
    the slowest /healthz answer."""
    samples = watch.between(t0, t1)
    first_hz = next((s[0] - t0 for s in samples if s[1][0] == 503), None)
    first_rz = next((s[0] - t0 for s in samples if s[1][1] == 503), None)
    unanswered = sum(1 for s in samples if s[1][0] is None)
    return {
        "healthz_503_after_s": None if first_hz is None else round(first_hz, 1),
        "readyz_503_after_s": None if first_rz is None else round(first_rz, 1),
        "healthz_slowest_s": round(max((s[1][2] for s in samples), default=0.0), 3),
        "healthz_unanswered": unanswered,
    }


def describe(d: dict[str, float], story: dict[str, Any]) -> str:
    parts = []
    errors = {k.split(".", 1)[1]: int(v) for k, v in d.items() if k.startswith("errors.")}
    timeouts = {k.split(".", 1)[1]: int(v) for k, v in d.items() if k.startswith("timeouts.") and v == v}
    if errors:
        parts.append("errors " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    if timeouts:
        parts.append("timeouts " + ", ".join(f"{k} {v}" for k, v in sorted(timeouts.items())))
    parts.append(f"{int(d.get('switches', 0))} switches")
    hz, rz = story["healthz_503_after_s"], story["readyz_503_after_s"]
    parts.append("/healthz 200 throughout" if hz is None else f"/healthz 503 after {hz:g} s")
    parts.append("/readyz 200 throughout" if rz is None else f"/readyz 503 after {rz:g} s")
    return "; ".join(parts)


# -- the rig -------------------------------------------------------------------------------------


class MetricsProxy:
    """Triton's /metrics passed through, or made slow, garbage or huge, on demand."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.mode = "pass"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        line = b'nv_inference_count{model="other_%06d",version="1"} 12345\n'
        # 400k series, about 20 MB: the size the probe used.
        self.huge = b"# TYPE nv_inference_count counter\n" + b"".join(line % i for i in range(400_000))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.mode == "slow":
            resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await resp.prepare(request)
            with contextlib.suppress(ConnectionResetError):  # the sidecar gave up: as it should
                for _ in range(600):  # a byte every 100 ms: only a deadline on the whole read ends it
                    await resp.write(b"#")
                    await asyncio.sleep(0.1)
            return resp
        if self.mode == "garbage":
            return web.Response(body=os.urandom(4096) + b'\nnv_inference_count{model=" 1 2 3\n',
                                content_type="text/plain")
        if self.mode == "huge":
            return web.Response(body=self.huge, content_type="text/plain")
        async with httpx.AsyncClient() as client:
            r = await client.get(self.upstream, timeout=5)
        return web.Response(body=r.content, status=r.status_code, content_type="text/plain")

    def __enter__(self) -> MetricsProxy:
        self._thread.start()

        async def start() -> None:
            app = web.Application()
            app.router.add_get("/metrics", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

        asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class Rig:
    """One Triton with the emulated accelerator, and what every reload-mode fault needs."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.triton = TritonServer.on_free_ports(REPOSITORY, models=[MODEL], emulate_curve=CURVE)
        self.curve_file = workdir / "curve.yaml"
        self.curve_file.write_text(CURVE.to_yaml())
        (workdir / "token").write_text(TOKEN + "\n")
        (workdir / "token").chmod(0o600)
        self.profiles = workdir / "profiles" / MODEL
        self.profiles.mkdir(parents=True)
        for p in (PROFILES / MODEL).glob("*.yaml"):
            shutil.copy(p, self.profiles / p.name)
        # Passes every local check; a CPU-only Triton refuses it in milliseconds.
        (self.profiles / "gpu.yaml").write_text(
            "name: gpu\nmax_batch_size: 32\ndynamic_batching: {preferred_batch_size: [8, 16]}\n"
            "instance_group: {kind: KIND_GPU}\n")
        self._n = 0

    def ready(self) -> int | None:
        return status_code(f"{self.triton.urls.http}/v2/models/{MODEL}/ready", timeout_s=1.0)

    def config(self, **over: Any) -> dict[str, Any]:
        self._n += 1
        data: dict[str, Any] = {
            "model": MODEL,
            "triton": {"http_url": self.triton.urls.http, "metrics_url": self.triton.urls.metrics,
                       "grpc_url": self.triton.urls.grpc},
            "profiles": {"dir": str(self.profiles), "ladder": ["latency-soft", "aggressive"]},
            "slo": {"p95_ms": 150},
            "policy": {"interval_s": 1, "curve": str(self.curve_file), "trust": {"settle_s": 1.5},
                       "stability": {"confirmations": 2, "min_dwell_s": 6}},
            "signals": {"timeout_s": 1},
            "actuator": {"kind": "triton", "timeout_s": 6},
            "server": {"token_file": str(self.workdir / "token")},
            "decision_log": str(self.workdir / f"decisions-{self._n}.jsonl"),
        }
        for key, value in over.items():
            data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
        return data

    def loads_started(self) -> int:
        """How many loads of the model Triton's log shows begun."""
        try:
            text = self.triton.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return 0
        return text.count(f'loading: {MODEL}:')

    def live_preferred(self) -> list[int] | None:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            cfg = httpx.get(f"{self.triton.urls.http}/v2/models/{MODEL}/config", timeout=5).json()
            return cfg["dynamic_batching"]["preferred_batch_size"]
        return None

    @contextlib.contextmanager
    def running(self, name: str, config: dict[str, Any]) -> Iterator[tuple[Sidecar, Load, Poller, Poller]]:
        """A fresh sidecar with load, the ready poller and the probe watcher around it."""
        sc = Sidecar(self.workdir, config, name).start()
        watch = Poller(lambda: probes(sc.url), 0.25)
        try:
            with Poller(self.ready, 0.1) as ready, watch, Load(self.triton.urls.grpc) as load:
                poll_until(lambda: status_code(sc.url + "/readyz") == 200, timeout_s=30,
                           what=f"{name}: /readyz 200 before the fault")
                yield sc, load, ready, watch
        finally:
            sc.stop()


def probes(url: str) -> tuple[int | None, int | None, float]:
    """(/healthz status, /readyz status, seconds /healthz took to answer)."""
    t = time.time()
    healthz = status_code(url + "/healthz")
    took = time.time() - t
    return healthz, status_code(url + "/readyz"), took


def wait_s(seconds: float) -> None:
    """Let a fault last: the measurements run in their own threads meanwhile."""
    threading.Event().wait(seconds)


# -- the faults -------------------------------------------------------------------------------------


def fault_triton_killed(rig: Rig) -> dict[str, Any]:
    out = Outcome("Triton killed and restarted")
    with rig.running("killed", rig.config()) as (sc, load, ready, watch):
        assert sc.pin("aggressive") == 200
        poll_until(lambda: (sc.status() or {}).get("active_profile") == "aggressive", timeout_s=60,
                   what="aggressive live before the kill")
        before, t0 = counters(sc), time.time()
        rig.triton.kill()
        wait_s(5)
        rig.triton.start()
        rig.triton.load_emulator(CURVE)
        up = time.time()
        ok = load.first_success_after(up) or poll_until(lambda: load.first_success_after(up), timeout_s=60,
                                                       what="requests succeeding again")
        out.outage = [(t0, ok)]
        poll_until(lambda: rig.live_preferred() == [8, 16, 32] and status_code(sc.url + "/readyz") == 200,
                   timeout_s=90, what="aggressive re-applied and /readyz 200")
        out.recovery_s = time.time() - up
        out.recovery_means = "Triton ready again -> the sidecar re-applied its profile and /readyz 200"
        t1 = time.time()
        st = sc.status() or {}
        d = delta(before, counters(sc))
        story = probe_story(watch, t0, t1)
        out.did = (f"held while Triton was down, then re-applied aggressive "
                   f"({(st.get('last_actuation') or {}).get('reason')}); " + describe(d, story))
        out.details = {"counters": d, "probes": story, "last_actuation": st.get("last_actuation")}
        sc.pin(None)
    return judge(out, load, ready, t0, t1)


def fault_triton_stopped(rig: Rig) -> dict[str, Any]:
    out = Outcome("Triton stopped (SIGSTOP) 20 s")
    with rig.running("stopped", rig.config()) as (sc, load, ready, watch):
        bound = (sc.status() or {}).get("health", {}).get("liveness_bound_s")
        before, t0 = counters(sc), time.time()
        rig.triton.signal(signal.SIGSTOP)
        try:
            wait_s(20)
        finally:
            rig.triton.signal(signal.SIGCONT)
        cont = time.time()
        poll_until(lambda: status_code(sc.url + "/healthz") == 200 and status_code(sc.url + "/readyz") == 200,
                   timeout_s=90, interval_s=0.1, what="/healthz and /readyz 200 after SIGCONT")
        out.recovery_s = time.time() - cont
        out.recovery_means = "SIGCONT -> /healthz and /readyz 200"
        ok = poll_until(lambda: load.first_success_after(cont), timeout_s=60, what="requests again")
        out.outage = [(t0, ok)]
        wait_s(3)
        t1 = time.time()
        d = delta(before, counters(sc))
        story = probe_story(watch, t0, t1)
        out.did = f"held; liveness bound {bound:g} s; " + describe(d, story)
        out.details = {"counters": d, "probes": story, "liveness_bound_s": bound}
        out.survived = story["healthz_503_after_s"] is not None and story["healthz_503_after_s"] <= bound + 3
    return judge(out, load, ready, t0, t1)


def fault_metrics(rig: Rig, mode: str) -> dict[str, Any]:
    names = {"slow": "metrics endpoint slow (a byte per 100 ms)",
             "garbage": "metrics endpoint garbage (random bytes)",
             "huge": "metrics endpoint huge (20 MB, 400k series)"}
    out = Outcome(names[mode])
    with MetricsProxy(rig.triton.urls.metrics) as proxy:
        cfg = rig.config(triton={"http_url": rig.triton.urls.http, "metrics_url": proxy.url,
                                 "grpc_url": rig.triton.urls.grpc})
        with rig.running(f"metrics-{mode}", cfg) as (sc, load, ready, watch):
            rss0 = sc.rss_mb()
            rss = Poller(sc.rss_mb, 0.2)
            before, t0 = counters(sc), time.time()
            with rss:
                proxy.mode = mode
                wait_s(15)
                proxy.mode = "pass"
                healed = time.time()
                poll_until(lambda: status_code(sc.url + "/readyz") == 200, timeout_s=60, interval_s=0.1,
                           what="/readyz 200 after the endpoint healed")
                out.recovery_s = time.time() - healed
            out.recovery_means = "the endpoint healthy again -> /readyz 200"
            wait_s(2)
            t1 = time.time()
            d = delta(before, counters(sc))
            story = probe_story(watch, t0, t1)
            peak = max((s[1] for s in rss.samples if s[1] is not None), default=None)
            out.did = (f"held; RSS {rss0:.0f} -> peak {peak:.0f} MB; slowest /healthz "
                       f"{story['healthz_slowest_s'] * 1000:.0f} ms; " + describe(d, story))
            out.details = {"counters": d, "probes": story, "rss_start_mb": rss0, "rss_peak_mb": peak,
                           "last_error": (sc.status() or {}).get("last_error")}
            out.survived = story["healthz_unanswered"] == 0
    return judge(out, load, ready, t0, t1)


def fault_reload_refused(rig: Rig) -> dict[str, Any]:
    out = Outcome("reload refused (KIND_GPU on a CPU server)")
    cfg = rig.config(profiles={"dir": str(rig.profiles), "ladder": ["latency-soft", "gpu"]})
    with rig.running("refused", cfg) as (sc, load, ready, watch):
        before, t0 = counters(sc), time.time()
        assert sc.pin("gpu") == 200
        poll_until(lambda: (sc.status() or {}).get("errors", {}).get("actuate", 0) >= 1
                   and (sc.status() or {}).get("pinned") is None, timeout_s=60, what="the refusal")
        poll_until(lambda: status_code(sc.url + "/readyz") == 200, timeout_s=30, what="/readyz 200")
        out.recovery_s = time.time() - t0
        out.recovery_means = "the pin -> refused, rolled back, pin dropped, /readyz 200"
        wait_s(5)
        t1 = time.time()
        st = sc.status() or {}
        act = st.get("last_actuation") or {}
        d = delta(before, counters(sc))
        out.did = (f"rolled back to {act.get('active')} ({act.get('reason')}, rolled_back="
                   f"{act.get('rolled_back')}), pin dropped; " + describe(d, probe_story(watch, t0, t1)))
        out.details = {"counters": d, "last_actuation": act, "live_preferred": rig.live_preferred()}
        out.survived = rig.live_preferred() == [2, 4] and st.get("active_profile") == "latency-soft"
    return judge(out, load, ready, t0, t1)


def fault_reload_timeout(rig: Rig) -> dict[str, Any]:
    """A load that takes longer than actuator.timeout_s: a profile with 12 instances took 3.7 s
    to load here where the usual one takes 1.7-2.2 s, and the timeout (2.5 s) sits between."""
    out = Outcome("reload outlives actuator.timeout_s")
    (rig.profiles / "wide.yaml").write_text(
        "name: wide\nmax_batch_size: 32\ndynamic_batching: {preferred_batch_size: [8, 16, 32], "
        "max_queue_delay_microseconds: 10000}\ninstance_group: {count: 12, kind: KIND_CPU}\n")
    cfg = rig.config(profiles={"dir": str(rig.profiles), "ladder": ["latency-soft", "wide"]},
                     actuator={"kind": "triton", "timeout_s": WIDE_TIMEOUT_S})
    with rig.running("timeout", cfg) as (sc, load, ready, watch):
        before, t0 = counters(sc), time.time()
        assert sc.pin("wide") == 200
        poll_until(lambda: ((sc.status() or {}).get("last_actuation") or {}).get("profile") == "wide",
                   timeout_s=120, what="the timed-out load's result")
        poll_until(lambda: rig.live_preferred() == [2, 4] and status_code(sc.url + "/readyz") == 200,
                   timeout_s=120, what="latency-soft live again and /readyz 200")
        out.recovery_s = time.time() - t0
        out.recovery_means = "the pin -> timed out, rolled back, latency-soft live and verified"
        wait_s(5)
        t1 = time.time()
        st = sc.status() or {}
        act = st.get("last_actuation") or {}
        d = delta(before, counters(sc))
        out.did = (f"{act.get('reason')} after {float(act.get('duration_s') or 0):.1f} s, rolled_back="
                   f"{act.get('rolled_back')}, back on {act.get('active')}; "
                   + describe(d, probe_story(watch, t0, t1)))
        out.details = {"counters": d, "last_actuation": act, "timeout_s": WIDE_TIMEOUT_S}
        out.survived = act.get("reason") == "timeout" and rig.live_preferred() == [2, 4]
    (rig.profiles / "wide.yaml").unlink()
    return judge(out, load, ready, t0, t1)


def fault_sidecar_killed(rig: Rig) -> dict[str, Any]:
    out = Outcome("sidecar SIGKILLed mid-switch, restarted")
    cfg = rig.config(policy={"stability": {"confirmations": 2, "min_dwell_s": 20}})
    with rig.running("killed-sidecar", cfg) as (sc, load, ready, watch):
        t0 = time.time()
        loads = rig.loads_started()
        # The pin wakes the loop at once; a reload of this model takes a second or more.
        assert sc.pin("aggressive") == 200
        in_flight = False
        with contextlib.suppress(ServeError):
            in_flight = bool(poll_until(lambda: rig.loads_started() > loads, timeout_s=10, interval_s=0.01,
                                        what="Triton to start the load"))
        wait_s(0.3)  # well inside the load (1.7-2.2 s here)
        sc.kill()
        killed = time.time()
        state = json.loads((Path(cfg["decision_log"] + ".state.json")).read_text())
        again = Sidecar(rig.workdir, cfg, "killed-sidecar-2", port=sc.port)  # a restarted container
        started = time.time()
        again.start()
        poll_until(lambda: status_code(again.url + "/readyz") == 200
                   and (again.status() or {}).get("active_profile") == "aggressive",
                   timeout_s=60, what="the restarted sidecar on the pin, /readyz 200")
        out.recovery_s = time.time() - started
        out.recovery_means = "restart -> pin restored, live profile adopted, /readyz 200"
        wait_s(8)
        st = again.status() or {}
        lines = [json.loads(x) for x in again.decision_log.read_text().splitlines() if x.strip()]
        after = [ln for ln in lines if ln["ts"] > started and ln.get("actuation")]
        t1 = time.time()
        restored = st.get("restored") or {}
        seen = "load in flight" if in_flight else "load not seen"
        out.did = (f"killed {killed - t0:.1f} s after the pin ({seen}); "
                   f"the state file held pin {state.get('pin')!r} and the switch's start; restarted: pin "
                   f"{restored.get('pin')!r} restored, {st.get('active_profile')} live, {len(after)} load(s) "
                   f"after the restart, dwelling from its start")
        out.details = {"state_at_kill": state, "restored": st.get("restored"), "load_in_flight": in_flight,
                       "actuations_after_restart": [ln["actuation"] for ln in after],
                       "killed_s_after_pin": round(killed - t0, 2), "live_preferred": rig.live_preferred()}
        out.survived = st.get("pinned") == "aggressive" and rig.live_preferred() == [8, 16, 32]
        again.pin(None)
        again.stop()
    return judge(out, load, ready, t0, t1)


def fault_log_unwritable(rig: Rig) -> dict[str, Any]:
    out = Outcome("decision log unwritable (disk full), SIGTERM meanwhile")
    with rig.running("log", rig.config()) as (sc, load, ready, watch):
        pid = sc.proc.pid
        assert pid is not None
        before, t0 = counters(sc), time.time()
        size = sc.decision_log.stat().st_size
        # Every write past the file's current size fails (EFBIG), as on a full disk. Only the
        # soft limit moves: raising a hard limit again needs CAP_SYS_RESOURCE.
        hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, hard))
        wait_s(10)
        st = sc.status() or {}
        mid = {"ticks": st.get("ticks"), "log_errors": (st.get("errors") or {}).get("log"),
               "healthz": status_code(sc.url + "/healthz")}
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        healed = time.time()
        grown = poll_until(lambda: sc.decision_log.stat().st_size > size, timeout_s=30,
                           what="a new decision log line")
        out.recovery_s = time.time() - healed if grown else None
        out.recovery_means = "space again -> the next decision-log line written"
        lines = sc.decision_log.read_text().splitlines()
        parse_ok = all(_parses(x) for x in lines if x.strip())
        # Full again, and SIGTERM meanwhile: the shutdown must not throw.
        size = sc.decision_log.stat().st_size
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, hard))
        wait_s(3)
        t1 = time.time()
        d = delta(before, counters(sc))
        story = probe_story(watch, t0, t1)
        code = sc.stop()
        tail = sc.log_text()[-4000:]
        out.did = (f"kept ticking ({mid['ticks']} ticks, {mid['log_errors']} log errors while full, "
                   f"/healthz {mid['healthz']}); every line parses after: {parse_ok}; SIGTERM while "
                   f"full: exit {code}; " + describe(d, story))
        out.details = {"counters": d, "while_full": mid, "lines_parse": parse_ok, "sigterm_exit": code,
                       "traceback_in_log": "Traceback" in tail}
        out.survived = code == 0 and parse_ok and mid["healthz"] == 200
    return judge(out, load, ready, t0, t1)


def _parses(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def fault_haproxy_socket(rig: Rig) -> dict[str, Any]:
    """Gateway mode: HAProxy in front of two variants on their own Triton; its runtime socket
    renamed away for 15 s (HAProxy keeps routing), a pin sent meanwhile, then put back."""
    out = Outcome("HAProxy runtime socket gone (gateway mode)")
    root = rig.workdir / "variants"
    profiles = load_profiles(PROFILES / MODEL)
    for name, profile in ((f"{MODEL}__latency", "latency-soft"), (f"{MODEL}__throughput", "aggressive")):
        launch.write_variant(REPOSITORY / MODEL, root, name, profiles[profile],
                             parameters={"curve_file": None, "curve": json.dumps(CURVE.to_dict())})
    sockdir = Path(tempfile.mkdtemp(prefix="ab-faults-"))
    sock = sockdir / "admin.sock"
    listen = f"127.0.0.1:{free_port()}"
    servers = {"latency": f"{MODEL}__latency", "throughput": f"{MODEL}__throughput"}
    with TritonServer.on_free_ports(root) as triton, HAProxyProcess(http_rewrite_config(
            listen=listen, socket_path=sock, triton_http=triton.urls.http, model=MODEL, variants=servers,
            hop_prefix=f"abf{os.getpid()}"), sock):
        cfg = rig.config(
            triton={"http_url": triton.urls.http, "metrics_url": triton.urls.metrics},
            profiles={"dir": str(PROFILES / MODEL), "ladder": ["latency-soft", "aggressive"],
                      "initial": "aggressive"},
            policy={"stability": {"confirmations": 1000, "min_dwell_s": 3600}},
            actuator={"kind": "gateway", "socket": str(sock), "backend": "be_variants", "step_dwell_s": 0.5,
                      "retry_s": 0, "variants": {
                          "latency-soft": {"server": "latency", "model": f"{MODEL}__latency"},
                          "aggressive": {"server": "throughput", "model": f"{MODEL}__throughput"}}},
        )
        cfg["actuator"].pop("timeout_s", None)
        sc = Sidecar(rig.workdir, cfg, "gateway").start()
        ready_url = f"{triton.urls.http}/v2/models/{MODEL}__throughput/ready"
        watch = Poller(lambda: probes(sc.url), 0.25)
        try:
            with Poller(lambda: status_code(ready_url, 1.0), 0.1) as ready, watch, \
                    Load(listen, protocol="http") as load:
                poll_until(lambda: (sc.status() or {}).get("active_profile") == "aggressive"
                           and status_code(sc.url + "/readyz") == 200, timeout_s=60, what="aggressive")
                before, t0 = counters(sc), time.time()
                gone = sock.with_name("admin.sock.gone")
                os.rename(sock, gone)
                wait_s(5)
                pin = sc.pin("latency-soft")
                wait_s(10)
                os.rename(gone, sock)
                back = time.time()
                ticks = (sc.status() or {}).get("ticks", 0)
                errs = (sc.status() or {}).get("errors", {}).get("reconcile", 0)

                def clean_tick() -> bool:
                    st = sc.status() or {}
                    return (st.get("ticks", 0) >= ticks + 2
                            and st.get("errors", {}).get("reconcile", 0) <= errs + 1)

                poll_until(clean_tick, timeout_s=30, what="a reconcile that passes")
                out.recovery_s = time.time() - back
                out.recovery_means = "socket back -> ticks reconcile without error"
                wait_s(3)
                t1 = time.time()
                st = sc.status() or {}
                d = delta(before, counters(sc))
                out.did = (f"pin answered {pin}, shift failed (unreachable) and was dropped; weights "
                           f"kept, active {st.get('active_profile')}; "
                           + describe(d, probe_story(watch, t0, t1)))
                out.details = {"counters": d, "last_actuation": st.get("last_actuation")}
                out.survived = st.get("active_profile") == "aggressive"
        finally:
            sc.stop()
            shutil.rmtree(sockdir, ignore_errors=True)
    return judge(out, load, ready, t0, t1)


def fault_prometheus_down(rig: Rig) -> dict[str, Any]:
    out = Outcome("Prometheus down 15 s (fleet mode)")
    target = rig.triton.urls.metrics.split("://", 1)[-1].rsplit("/metrics", 1)[0]
    with PrometheusServer({"r0": target}, scrape_interval_s=1.0) as prom:
        cfg = rig.config(signals={"source": "prometheus", "prometheus_url": prom.url, "selector": {},
                                  "timeout_s": 1})
        with rig.running("prometheus", cfg) as (sc, load, ready, watch):
            before, t0 = counters(sc), time.time()
            prom.stop()
            wait_s(15)
            prom.start()
            up = time.time()
            poll_until(lambda: status_code(sc.url + "/readyz") == 200, timeout_s=90, interval_s=0.1,
                       what="/readyz 200 after Prometheus came back")
            out.recovery_s = time.time() - up
            out.recovery_means = "Prometheus ready again -> /readyz 200"
            wait_s(2)
            t1 = time.time()
            d = delta(before, counters(sc))
            out.did = "held; " + describe(d, probe_story(watch, t0, t1))
            out.details = {"counters": d}
    return judge(out, load, ready, t0, t1)


WIDE_TIMEOUT_S = 2.5

FAULTS: dict[str, Callable[[Rig], dict[str, Any]]] = {
    "triton_killed": fault_triton_killed,
    "triton_stopped": fault_triton_stopped,
    "metrics_slow": lambda rig: fault_metrics(rig, "slow"),
    "metrics_garbage": lambda rig: fault_metrics(rig, "garbage"),
    "metrics_huge": lambda rig: fault_metrics(rig, "huge"),
    "reload_refused": fault_reload_refused,
    "reload_timeout": fault_reload_timeout,
    "sidecar_killed": fault_sidecar_killed,
    "log_unwritable": fault_log_unwritable,
    "haproxy_socket": fault_haproxy_socket,
    "prometheus_down": fault_prometheus_down,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=list(FAULTS), help="run these faults only")
    ap.add_argument("--no-save", action="store_true", help="do not write benchmarks/results (a smoke run)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    names = args.only or list(FAULTS)
    started = time.time()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="autobatch-faults-") as tmp:
        rig = Rig(Path(tmp))
        with rig.triton:
            for name in names:
                log(f"fault: {name}")
                try:
                    result = FAULTS[name](rig)
                except Exception as exc:  # a fault the rig could not run is a result too
                    result = {"fault": name, "survived": False, "error": f"{type(exc).__name__}: {exc}"}
                    if not rig.triton.running():
                        rig.triton.start()
                        rig.triton.load_emulator(CURVE)
                result["name"] = name
                results.append(result)
                keys = ("survived", "failed_by_sidecar", "ready_throughout", "recovery_s")
                log(f"  {json.dumps({k: result.get(k) for k in keys})}")
    data = {"rate_rps": RATE_RPS, "request_timeout_s": REQUEST_TIMEOUT_S, "faults": results,
            "elapsed_s": round(time.time() - started, 1)}
    rows = []
    for r in results:
        if "error" in r:
            rows.append(row(f"fault: {r['fault']}", f"not run: {r['error']}"))
            continue
        rows.append(row(
            f"fault: {r['fault']}",
            f"{r['did']}. Failed by the sidecar: {r['failed_by_sidecar']} of {r['requests']} requests; "
            f"model READY throughout: {'yes' if r['ready_throughout'] else 'no'}; recovered in "
            f"{r['recovery_s']} s ({r['recovery_means']})",
            key=f"faults_{r['name']}_failed_by_sidecar", value=r["failed_by_sidecar"]))
    path = None if args.no_save else save_result("faults", data, rows)
    if args.json:
        print(json.dumps(data, indent=1, default=str))
    else:
        table = Table(title=f"faults ({data['elapsed_s']} s)")
        for col in ("fault", "survived", "failed by sidecar", "READY", "recovery s", "what the sidecar did"):
            table.add_column(col)
        for r in results:
            table.add_row(r["fault"], str(r.get("survived")),
                          f"{r.get('failed_by_sidecar')}/{r.get('requests')}", str(r.get("ready_throughout")),
                          str(r.get("recovery_s")), r.get("did") or r.get("error", ""))
        Console(width=200).print(table)
    if path is not None:
        print(f"saved {path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
