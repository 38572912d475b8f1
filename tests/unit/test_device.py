"""The emulated device's pure parts: the wire format, its settings, what /metrics says,
the co-tenant report. The device itself runs in tests/integration/test_device.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from autobatch.cli.views import cotenants_table
from autobatch.cotenants import CoTenant
from autobatch.curve import BatchCurve
from autobatch.device import protocol
from autobatch.device.client import SPIN_S, TIMEOUT_GRAIN_S, next_read
from autobatch.device.metrics import (
    LATENESS_BUCKETS_MS,
    ContextSnapshot,
    DeviceSnapshot,
    Lateness,
    dcgm_labels,
    families,
)
from autobatch.device.protocol import Address, parse_address
from autobatch.device.runner import CoTenantResult, CoTenantRunner, CoTenantsReport, load_jobs
from autobatch.device.settings import DeviceSettings, device_settings, load_device_config, parse_throughput
from autobatch.errors import ConfigError
from autobatch.sharing import SharingModel, SharingPolicy
from autobatch.signals.parse import parse_utilization
from autobatch.stats import LatencyStats

from ..helpers import run_main


@pytest.mark.parametrize(
    ("text", "want"),
    [("127.0.0.1:9410", Address("127.0.0.1", 9410)), ("localhost:0", Address("localhost", 0)),
     ("[::1]:80", Address("::1", 80))],
)
def test_addresses(text: str, want: Address) -> None:
    assert parse_address(text) == want
    assert str(want).endswith(f":{want.port}")


@pytest.mark.parametrize("text", ["9410", "host:", ":9410", "host:port", "host:70000", "host:-1", None])
def test_bad_addresses_name_the_field_and_value(text: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_address(text, "device")
    assert str(err.value).startswith(f"device = {text!r}: must be HOST:PORT")


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("HELLO autobatch-device/1 emulated_accelerator_0_0", "emulated_accelerator_0_0"),
        ("HELLO autobatch-device/1 train-a", "train-a"),
    ],
)
def test_hello(line: str, want: str) -> None:
    assert protocol.parse_hello(line) == want
    assert protocol.hello(want).decode().strip() == line


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("HELLO autobatch-device/2 a", "not spoken here"),
        ("HELLO autobatch-device/1", "expected 'HELLO"),
        ("HELLO autobatch-device/1 two words", "expected 'HELLO"),
        ("HELLO autobatch-device/1 " + "x" * 200, "must be 1-128"),
        ("GET / HTTP/1.1", "expected 'HELLO"),
    ],
)
def test_a_bad_hello_says_why(line: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        protocol.parse_hello(line)


def test_run_lines_round_trip_and_bad_ones_say_why() -> None:
    assert protocol.parse_run(protocol.run(7, 12.96, 8).decode().strip()) == (7, 12.96, 8, None)
    # with when the client sent it (its CLOCK_MONOTONIC), to the microsecond
    assert protocol.parse_run(protocol.run(7, 12.96, 8, 8813.9050114).decode().strip()) == (
        7, 12.96, 8, 8813.905011)
    assert protocol.parse_run("RUN 1 -3 1") == (1, -3.0, 1, None)  # refused per job, not per connection
    assert protocol.work_problem(-3.0) == "work_ms = -3.0: must be a number > 0"
    assert protocol.work_problem(math.nan) is not None and protocol.work_problem(0.5) is None
    for bad, words in (("RUN 1 2", "expected 'RUN"), ("RUN a b c", "with numbers"),
                       ("RUN 1 2 0", "items = 0"), ("RUN 1 2 3 4 5", "expected 'RUN"),
                       ("RUN 1 2 3 soon", "with numbers"), ("RUN 1 2 3 inf", "sent_s = inf")):
        with pytest.raises(ValueError, match=words):
            protocol.parse_run(bad)


def test_replies_parse() -> None:
    kind, job, rest = protocol.parse_reply(protocol.done(3, 1.5, 2.0, 14.25).decode().strip())
    assert (kind, job) == ("DONE", 3)
    d = protocol.parse_done(3, rest)
    assert (d.submitted_ms, d.started_ms, d.finished_ms, d.device_ms) == (1.5, 2.0, 14.25, 12.75)
    assert protocol.parse_reply(protocol.fail(4, "work_ms = 0\nbad").decode().strip()) == (
        "FAIL", 4, "work_ms = 0 bad")
    assert protocol.parse_reply("READY gpu0 timeslice") == ("READY", None, "gpu0 timeslice")
    kind, _, rest = protocol.parse_reply(protocol.ready("gpu0", "exclusive", 8812.4021).decode().strip())
    assert (kind, protocol.parse_ready(rest)) == ("READY", ("gpu0", "exclusive", 8812.4021))
    assert protocol.parse_ready("gpu0 timeslice") == ("gpu0", "timeslice", None)  # no clock: no instants
    for bad in ("gpu0", "gpu0 timeslice noon", "a b c d"):
        with pytest.raises(ValueError, match="malformed READY"):
            protocol.parse_ready(bad)
    for bad in ("DONE x 1 2 3", "HELLO"):
        with pytest.raises(ValueError):
            protocol.parse_reply(bad)


# -- how the client waits for an answer ----------------------------------------------------------

DUE = 100.0  # the earliest the answer can come (the job's sent instant + its work), s


@pytest.mark.parametrize(
    ("before_due_ms", "deadline_s", "due_s", "want"),
    [
        (13.0, 130.0, DUE, ("read", 0.0117)),   # blocks until by 1 ms before the poll, rounded up
        (1.0, 130.0, DUE, ("sleep", 0.0007)),   # the rest to the poll is slept exactly
        (0.2, 130.0, DUE, ("poll", 0.0)),       # from 0.3 ms before the answer can come
        (-0.9, 130.0, DUE, ("poll", 0.0)),      # until 1 ms after it
        (-1.1, 130.0, DUE, ("read", 29.9989)),  # then a job stretched by others: block again
        (13.0, 130.0, None, ("read", 30.013)),  # no due instant: block until the deadline
        (13.0, DUE - 0.005, DUE, ("read", 0.008)),  # the deadline first: block until it
    ],
)
def test_the_client_blocks_until_just_before_its_answer_can_come_then_polls(
        before_due_ms: float, deadline_s: float, due_s: float | None, want: tuple[str, float]) -> None:
    how, wait_s = next_read(DUE - before_due_ms / 1000.0, deadline_s, due_s)
    assert (how, wait_s) == (want[0], pytest.approx(want[1], abs=1e-9))


def test_no_blocking_read_reaches_past_the_polls_start_in_whole_milliseconds() -> None:
    """CPython's socket timeout waits whole milliseconds, rounded up: a read given the way to
    the poll's start would block up to 1 ms past it, and the poll (from 0.3 ms before the
    answer can come) would rarely run (2026-12-02: 13% of answers with the cores idle)."""
    for tenths_of_us in range(0, 300_000, 7):
        now = DUE - tenths_of_us / 1e7
        how, wait_s = next_read(now, DUE + 30.0, DUE)
        poll_from = DUE - SPIN_S
        if how == "read" and now < poll_from:
            assert now + math.ceil(round(wait_s * 1000.0, 6)) / 1000.0 <= poll_from + 1e-9
        if how == "sleep":
            assert wait_s <= TIMEOUT_GRAIN_S and now + wait_s == pytest.approx(poll_from)
        assert (how == "poll") == (poll_from <= now)


# -- settings ---------------------------------------------------------------------------------


def test_a_device_file_and_its_defaults(tmp_path: Path) -> None:
    f = tmp_path / "dev.yaml"
    f.write_text("name: gpu1\nlisten: 127.0.0.1:0\nsharing: {policy: exclusive}\n")
    s = load_device_config(f)
    assert s.name == "gpu1" and s.listen == Address("127.0.0.1", 0)
    assert s.metrics == parse_address("127.0.0.1:9411") and s.util_period_ms == 1000.0
    assert s.sharing == SharingModel(SharingPolicy.EXCLUSIVE)
    assert DeviceSettings().sharing.policy is SharingPolicy.TIMESLICE
    # what DeviceProcess writes for the child reads back the same
    g = tmp_path / "again.yaml"
    import yaml

    g.write_text(yaml.safe_dump(s.to_dict()))
    assert load_device_config(g) == s


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("listen: nowhere\n", "dev.yaml: listen = 'nowhere': must be HOST:PORT"),
        ("util_period_ms: 5\n", "dev.yaml: util_period_ms = 5.0: must be >= 10"),
        ("sharing: {policy: fair}\n", "dev.yaml: sharing.policy = 'fair': must be one of"),
        ("sharing: {quantum_ms: -1}\n", "dev.yaml: sharing.quantum_ms = -1.0: must be > 0"),
        ("quantum_ms: 2\n", "dev.yaml: quantum_ms = 2: unknown field"),
        ("priority: max\n", "dev.yaml: priority = 'max': must be one of realtime, high, normal"),
        ("name: two words\n", "dev.yaml: name = 'two words': must be 1-128"),
        ("listen: 127.0.0.1:9500\nmetrics: 127.0.0.1:9500\n",
         "dev.yaml: metrics = 127.0.0.1:9500: listen is"),
        ("- a\n", "dev.yaml: (top level) = ['a']: must be a mapping"),
    ],
)
def test_a_bad_device_file_is_one_line_naming_file_field_value(
    tmp_path: Path, text: str, message: str
) -> None:
    f = tmp_path / "dev.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_device_config(f)
    assert str(err.value).startswith(str(tmp_path / message)), str(err.value)
    assert "\n" not in str(err.value)


def test_options_override_the_file(tmp_path: Path) -> None:
    f = tmp_path / "dev.yaml"
    f.write_text("name: gpu1\nsharing: {policy: timeslice, quantum_ms: 4}\n")
    s = device_settings(f, quantum_ms=1.0, listen="127.0.0.1:0")
    assert s.name == "gpu1" and s.sharing.quantum_ms == 1.0 and s.listen.port == 0
    c = device_settings(policy="concurrent", throughput="1:1,2:1.5")
    assert c.sharing.throughput == {1: 1.0, 2: 1.5}
    with pytest.raises(ConfigError, match=r"^options: sharing.quantum_ms = 0.0: must be > 0"):
        device_settings(quantum_ms=0.0)
    with pytest.raises(ConfigError, match="K:SPEED pairs"):
        parse_throughput("1=1")


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["device", "--sharing", "fair"], "autobatch: error: options: sharing.policy = 'fair'"),
        (["device", "--listen", "nowhere"], "autobatch: error: options: listen = 'nowhere'"),
        (["cotenants", "run", "nope.yaml", "--device", "127.0.0.1:1", "--duration", "1"],
         "autobatch: error: nope.yaml: file not found"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv: list[str], start: str, monkeypatch: pytest.MonkeyPatch,
                                              capsys: Any) -> None:
    code, out, err = run_main(monkeypatch, capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(start), err


def test_cli_a_cotenant_file_with_a_wrong_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: Any) -> None:
    """Refused before anything connects: the address given answers nobody."""
    (tmp_path / "c.yaml").write_text("name: c\nunit: ms\npoints: {1: 8.0}\n")
    co = tmp_path / "co.yaml"
    co.write_text("cotenants:\n  - {name: a, curve: c.yaml, batch_size: 1, duty: 0.5, dutty: 1}\n")
    code, out, err = run_main(monkeypatch, capsys, "cotenants", "run", str(co), "--device", "127.0.0.1:1",
                              "--duration", "1")
    assert code == 2 and out == ""
    assert err.strip() == (f"autobatch: error: {co}: cotenants[0].dutty = 1: unknown field "
                           "(did you mean duty?)"), err


# -- what /metrics says -------------------------------------------------------------------------


def exposition(snap: DeviceSnapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)

    class C:
        def collect(self) -> Any:
            return families(snap, dcgm_labels(snap.name, "node-1"))

    registry.register(C())
    return generate_latest(registry).decode()


def snapshot(util: float | None) -> DeviceSnapshot:
    return DeviceSnapshot("gpu0", {"policy": "timeslice", "quantum_ms": 2.0}, now_ms=5000.0, busy_ms=1850.0,
                          util_period_ms=1000.0, util=util,
                          contexts={"m_0_0": ContextSnapshot(10, 40, 1200.0, 1, 1),
                                    "train": ContextSnapshot(5, 160, 650.0, 0, 0)})


def test_metrics_carry_dcgm_exporter_names_and_labels_and_the_busy_time_by_context() -> None:
    text = exposition(snapshot(0.374))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    (util,) = fams["DCGM_FI_DEV_GPU_UTIL"].samples
    assert util.value == 37.0  # integer percent, as NVML gives it
    assert set(util.labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
    assert util.labels["UUID"].startswith("GPU-") and util.labels["Hostname"] == "node-1"
    assert fams["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples[0].value == pytest.approx(0.374)
    # what the sidecar's utilisation signal reads from it
    assert parse_utilization(text) == pytest.approx(0.37)
    busy = {s.labels["context"]: s.value for s in fams["autobatch_device_context_busy_seconds"].samples
            if s.name.endswith("_total")}
    assert busy == {"m_0_0": 1.2, "train": 0.65}
    assert fams["autobatch_device_busy_seconds"].samples[0].value == 1.85
    assert fams["autobatch_device_uptime_seconds"].samples[0].value == 5.0


def test_the_lateness_of_the_answers_is_a_histogram_and_a_summary() -> None:
    buckets = [0] * (len(LATENESS_BUCKETS_MS) + 1)
    buckets[0], buckets[4], buckets[-1] = 3, 1, 1  # <= 0.05 ms x3, <= 1 ms, > 100 ms
    snap = DeviceSnapshot("gpu0", {"policy": "timeslice"}, 1000.0, 10.0, 1000.0, None,
                          lateness=Lateness(tuple(buckets), 150.7, (0.01, 0.02, 0.03, 0.7, 150.0)))
    fams = {f.name: f for f in text_string_to_metric_families(exposition(snap))}
    got = {s.labels["le"]: s.value for s in fams["autobatch_device_answer_lateness_seconds"].samples
           if s.name.endswith("_bucket")}
    assert got["5e-05"] == 3 and got["0.0005"] == 3 and got["0.001"] == 4 and got["0.1"] == 4
    assert got["+Inf"] == 5
    d = snap.to_dict()["lateness_ms"]
    assert d["count"] == 5 and d["recent_p50"] == 0.03 and d["recent_max"] == 150.0


def test_before_the_first_period_the_utilization_is_absent_not_zero() -> None:
    text = exposition(snapshot(None))
    assert "DCGM_FI_DEV_GPU_UTIL{" not in text and "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" not in text
    assert parse_utilization(text) is None
    assert snapshot(None).to_dict()["gpu_util_percent"] is None


def test_the_uuid_is_stable_per_device_name() -> None:
    assert dcgm_labels("gpu0", "h")["UUID"] == dcgm_labels("gpu0", "h")["UUID"]
    assert dcgm_labels("gpu0", "h")["UUID"] != dcgm_labels("gpu1", "h")["UUID"]


# -- co-tenants ---------------------------------------------------------------------------------

CURVE = BatchCurve({1: 8.0, 3: 20.0}, name="seed")


def test_load_jobs_from_a_cotenant_file_and_from_a_schedule(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("name: c\nunit: ms\npoints: {1: 8.0, 3: 20.0}\n")
    co = tmp_path / "co.yaml"
    co.write_text("cotenants:\n  - {name: a, curve: c.yaml, batch_size: 3, duty: 0.5}\n")
    jobs, length = load_jobs(co)
    assert [j.name for j in jobs] == ["a"] and length is None
    sched = tmp_path / "s.yaml"
    sched.write_text(
        "phases:\n"
        "  - {name: alone, rate_rps: 10, duration_s: 5}\n"
        "  - {name: shared, rate_rps: 10, duration_s: 5, cotenants: 2}\n"
        "cotenants:\n"
        "  - {name: a, curve: c.yaml, batch_size: 3, duty: 0.5}\n"
        "  - {name: b, curve: c.yaml, batch_size: 1, rate_bps: 20}\n"
    )
    jobs, length = load_jobs(sched)
    assert length == 10.0 and [j.windows for j in jobs] == [((5.0, 10.0),), ((5.0, 10.0),)]
    bad = tmp_path / "bad.yaml"
    bad.write_text("cotenants:\n  - {name: a, curve: c.yaml, batch: 3, duty: 0.5}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: cotenants\[0\]\.(batch_size: required|batch = 3)"):
        load_jobs(bad)


def test_the_runner_refuses_what_it_cannot_run() -> None:
    job = CoTenant("a", CURVE, 1, duty=0.5)
    with pytest.raises(ConfigError, match="no jobs"):
        CoTenantRunner([], "127.0.0.1:1", duration_s=1)
    with pytest.raises(ConfigError, match="duration_s = inf"):
        CoTenantRunner([job], "127.0.0.1:1", duration_s=math.inf)
    with pytest.raises(ConfigError, match="device = 'nowhere'"):
        CoTenantRunner([job], "nowhere", duration_s=1)


def test_a_cotenant_result_and_its_table() -> None:
    lat = LatencyStats(30.0, 40.0, 45.0, 31.0, 50.0)
    dev = LatencyStats(28.0, 38.0, 44.0, 29.0, 48.0)
    r = CoTenantResult("train", "duty", 3, 20.0, 0.8, active_s=10.0, submitted=250, completed=249,
                       failed=1, latency=lat, device=dev, first_error="the device closed")
    assert r.batches_per_s == pytest.approx(24.9) and r.items_per_s == pytest.approx(74.7)
    assert r.busy_share == pytest.approx(0.498) and r.stretch == pytest.approx(1.4)
    d = r.to_dict()
    assert d["latency_ms"]["p95"] == 40.0 and d["failed"] == 1
    console = Console(width=140, record=True)
    console.print(cotenants_table(CoTenantsReport("127.0.0.1:9410", 10.0, (r,))))
    text = console.export_text()
    assert "train" in text and "duty 80%" in text and "1.40x" in text and "50%" in text
