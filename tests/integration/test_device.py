"""The emulated device as a process of its own: its clients, what it reports, how it fails.

Each test starts the device it needs (a second or less); the Triton tests are in
test_device_triton.py.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autobatch.cotenants import CoTenant
from autobatch.curve import BatchCurve
from autobatch.device import protocol
from autobatch.device.client import DeviceClient, check_device
from autobatch.device.protocol import parse_address
from autobatch.device.runner import CoTenantRunner
from autobatch.device.settings import DeviceSettings
from autobatch.errors import DeviceError
from autobatch.lab.gpu import DeviceProcess
from autobatch.lab.process import poll_until
from autobatch.lab.serve import free_port
from autobatch.sharing import DeviceScheduler, SharingModel, SharingPolicy
from autobatch.signals.parse import parse_utilization

from ..conftest import CURVES
from ..helpers import assert_bad_input, autobatch

FREE = parse_address("127.0.0.1:0")


def settings(**kw: object) -> DeviceSettings:
    return DeviceSettings(listen=FREE, metrics=FREE, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "model",
    [SharingModel(SharingPolicy.TIMESLICE, quantum_ms=2.0, switch_ms=0.25),
     SharingModel(SharingPolicy.EXCLUSIVE),
     SharingModel(SharingPolicy.CONCURRENT, throughput={1: 1.0, 2: 1.5})],
    ids=lambda m: m.policy.value,
)
def test_the_device_runs_what_the_sharing_model_says(model: SharingModel) -> None:
    """Three contexts submit at once; the times the device answers are exactly those the pure
    model gives for the same submissions: the device and the simulator agree by construction."""
    with DeviceProcess(settings(sharing=model)) as dev:
        clients = [DeviceClient(dev.address, name).__enter__() for name in ("a", "b", "c")]
        try:
            work = {"a": [6.0, 3.0], "b": [5.0], "c": [1.5, 1.5, 1.5]}
            for c in clients:
                for w in work[c.context]:
                    c.submit(w)
            got = {c.context: [c.wait() for _ in work[c.context]] for c in clients}
        finally:
            for c in clients:
                c.close()
    model_run = DeviceScheduler(model, start_ms=0.0)
    subs = sorted((d.submitted_ms, ctx, i, work[ctx][i]) for ctx, ds in got.items() for i, d in enumerate(ds))
    want = {}
    for at, ctx, i, w in subs:
        for done in model_run.submit(at, ctx, (ctx, i), w):
            want[done.job] = done.finished_ms
    for done in model_run.advance(1e9):
        want[done.job] = done.finished_ms
    for ctx, ds in got.items():
        for i, d in enumerate(ds):
            assert d.finished_ms == pytest.approx(want[(ctx, i)], abs=1e-3), (ctx, i)
            assert d.finished_ms - d.submitted_ms >= work[ctx][i] - 1e-3


def metrics(dev: DeviceProcess) -> dict[str, list]:
    text = httpx.get(dev.metrics_url, timeout=5).text
    out = {f.name: f.samples for f in text_string_to_metric_families(text)}
    out["text"] = text  # type: ignore[assignment]
    return out


def test_metrics_busy_time_by_context_and_gpu_util() -> None:
    with DeviceProcess(settings(util_period_ms=100.0)) as dev:
        with DeviceClient(dev.address, "m_0_0") as a, DeviceClient(dev.address, "train") as b:
            for _ in range(3):
                a.run(4.0, items=8)
            b.run(7.0, items=32)
        fams = poll_until(lambda: (m := metrics(dev)) and "DCGM_FI_DEV_GPU_UTIL" in m and m,
                          timeout_s=10, what="DCGM_FI_DEV_GPU_UTIL")
        busy = {s.labels["context"]: s.value for s in fams["autobatch_device_context_busy_seconds"]
                if s.name.endswith("_total")}
        assert busy == pytest.approx({"m_0_0": 0.012, "train": 0.007})
        items = {s.labels["context"]: s.value for s in fams["autobatch_device_context_items"]
                 if s.name.endswith("_total")}
        assert items == {"m_0_0": 24.0, "train": 32.0}
        (util,) = fams["DCGM_FI_DEV_GPU_UTIL"]
        assert 0 <= util.value <= 100 and util.value == int(util.value)
        assert util.labels["device"] == "nvidia0" and util.labels["UUID"].startswith("GPU-")
        assert parse_utilization(fams["text"]) == pytest.approx(util.value / 100)  # the sidecar's reading
        status = httpx.get(dev.status_url).json()
        assert status["contexts"]["train"]["jobs"] == 1 and status["sharing"]["policy"] == "timeslice"
        assert status["lateness_ms"]["count"] == 4  # every answer's delay after its exact time
        # what the process got of the realtime priority it asks for by default
        assert status["priority"].startswith(("SCHED_FIFO", "nice", "normal")), status["priority"]


def test_a_refused_job_keeps_the_connection_and_a_broken_line_ends_it() -> None:
    with DeviceProcess(settings()) as dev:
        with DeviceClient(dev.address, "a") as c:
            c.submit(-3.0)
            with pytest.raises(DeviceError, match="refused job 1: work_ms = -3.0: must be a number > 0"):
                c.wait()
            assert c.run(1.0).job == 2  # the same connection goes on
        host, port = dev.settings.listen.host, dev.settings.listen.port
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(b"HELLO autobatch-device/9 x\n")
            assert s.recv(4096).startswith(b"ERROR protocol 'autobatch-device/9' is not spoken here")
            assert s.recv(4096) == b""  # closed
        with DeviceClient(dev.address, "b") as c:
            assert c._sock is not None
            c._sock.sendall(b"RUN one two three\n")
            with pytest.raises(DeviceError,
                               match=r"ended the connection: expected 'RUN JOB WORK_MS ITEMS \[SENT_S\]'"):
                c.wait()
            assert not c.connected
            assert c.run(1.0).job >= 1  # connects again


def test_a_device_nobody_answers_and_one_that_dies_or_hangs() -> None:
    port = free_port()
    with pytest.raises(DeviceError, match=rf"cannot connect to the device at 127.0.0.1:{port} .*refused"):
        check_device(f"127.0.0.1:{port}")
    dev = DeviceProcess(settings())
    with dev:
        client = DeviceClient(dev.address, "a", timeout_s=1.0)
        client.connect()
        dev.freeze()
        try:
            with pytest.raises(DeviceError, match="did not answer within 1 s") as hung:
                client.run(2.0)
            assert hung.value.timed_out
        finally:
            dev.thaw()
        assert client.run(2.0).finished_ms > 0  # reconnects once it is back
        dev.kill()
        with pytest.raises(DeviceError, match="closed the connection|dropped the connection|cannot connect"):
            client.run(2.0)
        client.close()


def test_a_job_on_an_idle_device_runs_from_when_its_client_sent_it() -> None:
    """One machine, one CLOCK_MONOTONIC: a client's RUN says when it was sent, and on an idle
    device the job runs from then (the way over loopback is not device time), or from when
    the device went idle if that was later. A sent instant the device cannot believe counts
    from the arrival instead."""
    with DeviceProcess(settings(util_period_ms=60_000.0)) as dev:  # no period closes meanwhile
        with DeviceClient(dev.address, "a") as c:
            assert c.info is not None and c.info.shared_clock  # the READY's reading was ours
        foreign = DeviceClient(dev.address, "b", clock=lambda: time.monotonic() + 3600.0)
        assert not foreign.connect().shared_clock  # then its RUN lines carry no instant
        foreign.close()
        host, port = dev.settings.listen.host, dev.settings.listen.port
        with socket.create_connection((host, port), timeout=5) as s:
            reader = s.makefile("rb")
            s.sendall(b"HELLO autobatch-device/1 raw\n")
            assert reader.readline().startswith(b"READY ")

            def run(job: int, sent_s: float) -> protocol.Done:
                s.sendall(protocol.run(job, 5.0, 1, sent_s))
                kind, n, rest = protocol.parse_reply(reader.readline().decode().strip())
                assert (kind, n) == ("DONE", job)
                return protocol.parse_done(job, rest)

            first = run(1, sent := time.monotonic())
            t0_s = sent - first.started_ms / 1000.0  # the device's origin on our clock
            assert first.submitted_ms == first.started_ms and first.device_ms == pytest.approx(5.0)
            # sent 1 ms before the device went idle (the first job's end): it starts at that end
            second = run(2, t0_s + (first.finished_ms - 1.0) / 1000.0)
            assert second.started_ms == pytest.approx(first.finished_ms, abs=0.002)
            # sent after it: it starts when sent, to the microsecond the line carries
            third = run(3, sent := max(time.monotonic() - 0.002, t0_s + second.finished_ms / 1000.0))
            assert third.started_ms == pytest.approx((sent - t0_s) * 1000.0, abs=0.002)
            jobs = httpx.get(dev.jobs_url, params={"after": 1}).json()["jobs"]
            assert [j["context"] for j in jobs] == ["raw", "raw"]
            assert [j["started_ms"] for j in jobs] == pytest.approx([second.started_ms, third.started_ms],
                                                                   abs=1e-3)  # DONE: 4 decimals
            assert all(j["answered_ms"] >= j["finished_ms"] for j in jobs)
            leaving = time.monotonic()
            late = run(4, leaving - 60.0)  # a minute "on the way": not believed, the arrival counts
            assert late.started_ms >= (leaving - t0_s) * 1000.0 - 0.002


def test_cotenants_run_and_are_counted_by_the_device(tmp_path: Path) -> None:
    curve = BatchCurve({1: 8.0, 3: 20.0}, name="seed")
    jobs = [CoTenant("train", curve, 3, duty=0.5),
            CoTenant("serve", curve, 1, rate_bps=30.0, windows=((0.5, 1.5),))]
    with DeviceProcess(settings()) as dev:
        with CoTenantRunner(jobs, dev.address, duration_s=1.5) as runner:
            runner.join(10.0)
        report = runner.report()
        train, serve = report.results
        status = httpx.get(dev.status_url).json()["contexts"]
    assert train.failed == 0 and serve.failed == 0
    assert train.completed > 0 and serve.completed > 0
    assert status["train"]["jobs"] == train.completed and status["serve"]["jobs"] == serve.completed
    assert status["train"]["items"] == 3 * train.completed
    assert serve.active_s == pytest.approx(1.0) and train.active_s == pytest.approx(1.5)
    assert train.device is not None and train.device.p50_ms >= 20.0 - 1e-3


def test_cli_cotenants_run_and_its_bad_input(tmp_path: Path) -> None:
    co = tmp_path / "co.yaml"
    co.write_text(f"cotenants:\n  - {{name: train, curve: {CURVES / 'server-512x288-fp16.yaml'}, "
                  "batch_size: 1, duty: 0.5}\n")
    with DeviceProcess(settings()) as dev:
        res = autobatch("cotenants", "run", str(co), "--device", dev.address, "--duration", "1", "--json")
        assert res.returncode == 0, res.stderr
        (job,) = json.loads(res.stdout)["cotenants"]
        assert job["name"] == "train" and job["completed"] > 0 and job["failed"] == 0
        bad = tmp_path / "bad.yaml"
        bad.write_text("cotenants:\n  - {name: t, curve: nope.yaml, batch_size: 1, duty: 0.5}\n")
        res = autobatch("cotenants", "run", str(bad), "--device", dev.address, "--duration", "1")
        assert_bad_input(res.returncode, res.stderr, "cotenants[0].curve = 'nope.yaml': no such curve file")
    dead = f"127.0.0.1:{free_port()}"
    res = autobatch("cotenants", "run", str(co), "--device", dead, "--duration", "1")
    assert_bad_input(res.returncode, res.stderr, f"cannot connect to the device at {dead}")


def test_cli_device_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        res = autobatch("device", "--listen", f"127.0.0.1:{port}", "--metrics", "127.0.0.1:0")
    assert_bad_input(res.returncode, res.stderr, f"listen = 127.0.0.1:{port}: cannot listen there")
