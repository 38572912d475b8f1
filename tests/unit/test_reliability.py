"""The sidecar's own failure modes (issue 15), one regression test per probe, pure or loopback only.

Each test names the probe it pins down. Against the real Triton: liveness with
Triton stopped in tests/integration/test_sidecar.py, and every fault of the issue
under load in benchmarks/faults.py; the fuzzing is in test_properties.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
from pathlib import Path

import httpx
import pytest
import yaml

from autobatch.config import load_yaml, parse_yaml
from autobatch.controller.config import RANGES, load_sidecar_config, parse_listen, sidecar_config_from_mapping
from autobatch.controller.exposure import exposure_warnings, read_token, token_matches
from autobatch.controller.files import DecisionLog, StateFile
from autobatch.controller.health import Health
from autobatch.controller.http import ECHO_CHARS, ControlServer, fetch_status
from autobatch.controller.loop import Controller
from autobatch.curve import load_curve
from autobatch.errors import AutobatchError, ConfigError, ProfileError, ScrapeError
from autobatch.policy import Reason
from autobatch.profiles import load_profile
from autobatch.schedule import load_schedule
from autobatch.signals.http import get_bounded
from autobatch.signals.triton import TritonSource

from .test_controller import SATURATED, Clock, FakeActuator, ScriptedSource, make_config

# -- 5. every input error is one line and exit 2 ---------------------------------------------


def config_data(tmp_path: Path, **sections) -> dict:
    from ..conftest import PROFILES

    data = {
        "model": "dense_mlp",
        "profiles": {"dir": str(PROFILES / "dense_mlp"), "ladder": ["latency-soft", "balanced"]},
        "slo": {"p95_ms": 50},
    }
    data.update(sections)
    return data


def config_error(tmp_path: Path, **sections) -> str:
    with pytest.raises(ConfigError) as info:
        sidecar_config_from_mapping(config_data(tmp_path, **sections), "s.yaml", base=tmp_path)
    text = str(info.value)
    assert "\n" not in text and text.startswith("s.yaml: ")
    return text


@pytest.mark.parametrize(
    ("section", "field", "value", "message"),
    [
        ("policy", "history_windows", 1e20,
         "policy.history_windows = 100000000000000000000: must be <= 100000"),
        ("policy", "interval_s", 1e308, "policy.interval_s = 1e+308: must be <= 3600"),
        ("policy", "min_dwell_s", 1e9, "policy.min_dwell_s = 1000000000.0: must be <= 86400"),
        ("policy", "confirmations", 10**6, "policy.confirmations = 1000000: must be <= 1000"),
        ("policy", "max_window_age_s", 0, "policy.max_window_age_s = 0.0: must be > 0"),
        ("signals", "timeout_s", 1e6, "signals.timeout_s = 1000000.0: must be <= 300"),
        ("signals", "max_scrape_bytes", 10, "signals.max_scrape_bytes = 10: must be >= 1024"),
        ("actuator", "timeout_s", 86400 * 7, "actuator.timeout_s = 604800.0: must be <= 3600"),
        ("server", "request_timeout_s", -1, "server.request_timeout_s = -1.0: must be > 0"),
        ("slo", "p95_ms", float("inf"), "slo.p95_ms = inf: must be a finite number"),
    ],
)
def test_numbers_are_bounded(tmp_path, section, field, value, message):
    data = config_data(tmp_path)
    data.setdefault(section, {})[field] = value
    with pytest.raises(ConfigError, match="^s.yaml: ") as info:
        sidecar_config_from_mapping(data, "s.yaml", base=tmp_path)
    assert message in str(info.value)


def test_every_range_is_stated_in_the_config_reference():
    """docs/sidecar.md's tables give each bounded field the same upper bound as RANGES."""
    reference = (Path(__file__).parents[2] / "docs" / "sidecar.md").read_text()
    rows: dict[str, str] = {}
    section = ""
    for line in reference.splitlines():
        if line.startswith("### "):
            section = line.split("`")[1] if "`" in line else ""
        elif line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            name = cells[0].strip("`")
            rows[name if "." in name else f"{section}.{name}"] = cells[3] if len(cells) > 3 else ""
    for field, (_, hi) in RANGES.items():
        assert field in rows, f"{field} has no row in docs/sidecar.md"
        stated = f"{int(hi)}" if float(hi).is_integer() and hi < 1e9 or isinstance(hi, int) else f"{hi:g}"
        assert stated in rows[field], (field, rows[field])


@pytest.mark.parametrize(
    ("listen", "parsed"),
    [
        ("127.0.0.1:9400", ("127.0.0.1", 9400)),
        ("[::1]:9400", ("::1", 9400)),
        ("[::]:0", ("::", 0)),
        ("localhost:80", ("localhost", 80)),
        ("sidecar.svc.cluster.local:9400", ("sidecar.svc.cluster.local", 9400)),
        ("::1:9400", None),  # bare IPv6: the port cannot be told apart
        ("[::1]", None),
        ("[nope]:9400", None),
        ("9400", None),
        ("host:99999", None),
        ("host:９４", None),  # non-ASCII digits
        ("bad host:1", None),
    ],
)
def test_listen_takes_ipv4_ipv6_and_names(listen, parsed):
    assert parse_listen(listen) == parsed


def test_an_ipv6_listen_address_is_accepted(tmp_path):
    cfg = sidecar_config_from_mapping(config_data(tmp_path, server={"listen": "[::1]:9400"}), "s.yaml",
                                      base=tmp_path)
    assert (cfg.server.host, cfg.server.port, cfg.server.address) == ("::1", 9400, "[::1]:9400")


def test_decision_log_that_is_a_directory(tmp_path):
    (tmp_path / "logs").mkdir()
    assert "decision_log = " in config_error(tmp_path, decision_log=str(tmp_path / "logs"))
    assert "is a directory" in config_error(tmp_path, decision_log=str(tmp_path / "logs"))


def test_decision_log_under_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    text = config_error(tmp_path, decision_log=str(tmp_path / "file" / "sub" / "d.jsonl"))
    assert f"{tmp_path / 'file'} is a file, not a directory" in text


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere; the open check below covers it")
def test_decision_log_in_a_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    assert "is not writable" in config_error(tmp_path, decision_log=str(ro / "d.jsonl"))


def test_decision_log_that_cannot_be_opened_is_a_config_error_naming_it():
    # /proc takes no new files, whoever asks (root included).
    log = DecisionLog(Path("/proc/autobatch-test/decisions.jsonl"))
    with pytest.raises(ConfigError, match=r"^decision_log = '/proc/autobatch-test/decisions.jsonl': cannot"):
        log.open()


def test_the_state_file_sits_beside_the_decision_log(tmp_path):
    cfg = sidecar_config_from_mapping(config_data(tmp_path, decision_log="d.jsonl"), "s.yaml", base=tmp_path)
    assert cfg.state_file == tmp_path / "d.jsonl.state.json"


@pytest.mark.parametrize(
    ("name", "text", "load"),
    [
        ("sidecar.yaml", "model: a\nmodel: b\n", load_sidecar_config),
        ("p.yaml", "name: p\nmax_batch_size: 8\nmax_batch_size: 16\n", load_profile),
        ("c.yaml", "points:\n  1: 2.0\n  1: 3.0\n", load_curve),
        ("s.yaml", "phases:\n  - {rate: 1, duration_s: 1, rate: 2}\n", load_schedule),
    ],
)
def test_duplicate_keys_are_refused_in_every_file_type(tmp_path, name, text, load):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: not valid YAML (line ")
    assert "duplicate key" in str(info.value) and "\n" not in str(info.value)


def test_merge_keys_still_override():
    assert parse_yaml("a: &x {k: 1}\nb:\n  <<: *x\n  k: 2\n", "f") == {"a": {"k": 1}, "b": {"k": 2}}


@pytest.mark.parametrize("text", ["a: 2001-13-45\n", "[" * 5000, "a: !!python/object:os.system x\n"])
def test_odd_yaml_is_one_line(tmp_path, text):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{path}: not valid YAML"):
        load_yaml(path)


def test_a_curve_csv_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b"batch_size,ms\n1,\xff\n")
    with pytest.raises(ConfigError, match=f"^{path}: cannot read"):
        load_curve(path)


# -- 2. the token ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "result"),
    [
        (b"s3cret\n", b"s3cret"),
        ("caf\u00e9-\u4e2d".encode(), "caf\u00e9-\u4e2d".encode()),  # non-ASCII UTF-8 works
        (b"", "the token file is empty"),
        (b" \n\t", "the token file is empty"),
        (b"\xff\xfe", "the token is not UTF-8 text"),
        (b"two words", "which an Authorization header cannot carry"),
        (b"a\x00b", "which an Authorization header cannot carry"),
    ],
)
def test_the_token_file_is_read_as_bytes(tmp_path, content, result):
    path = tmp_path / "token"
    path.write_bytes(content)
    if isinstance(result, bytes):
        assert read_token(path) == result
    else:
        with pytest.raises(ConfigError) as info:
            read_token(path)
        assert str(info.value).startswith(f"{path}: ") and result in str(info.value)


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer s3cret", True),
        ("bearer   s3cret ", True),
        ("Bearer s3cre", False),
        ("Bearer s3cret\u00e9", False),  # non-ASCII: no TypeError from compare_digest
        ("Bearer \udcff", False),  # what aiohttp makes of an invalid UTF-8 byte
        ("Basic s3cret", False),
        ("", False),
        (None, False),
    ],
)
def test_tokens_compare_as_bytes(header, ok):
    assert token_matches(header, b"s3cret") is ok


def test_exposure_warnings(tmp_path):
    from autobatch.controller.config import ServerSettings

    token = tmp_path / "token"
    token.write_text("t")
    token.chmod(0o644)
    kinds = [k for k, _ in exposure_warnings(ServerSettings("0.0.0.0", 9400, token))]
    assert kinds == ["token_file", "listen"]
    token.chmod(0o600)
    assert exposure_warnings(ServerSettings("127.0.0.1", 9400, token)) == []
    assert exposure_warnings(ServerSettings("::1", 9400, None)) == []
    (_, sentence), = exposure_warnings(ServerSettings("10.0.0.5", 9400, None, protect_reads=False))
    assert "10.0.0.5:9400" in sentence and "protect_reads" in sentence


# -- 1. liveness and readiness (pure bookkeeping) --------------------------------------------


def test_liveness_turns_503_only_when_ticks_stop_completing():
    h = Health(bound_s=10, tick_limit_s=100, max_age_s=30, started_s=0)
    assert h.live(5).ok and not h.live(11).ok  # never ticked, past the bound
    h.tick_started(11)
    assert h.live(12).ok  # a tick is running and nothing timed out: progress
    h.timed_out("signals", "Triton metrics did not answer within 2 s")
    verdict = h.live(13)
    assert not verdict.ok and "did not answer within 2 s" in verdict.message
    assert h.tick_ended(14) is False  # a tick with a timeout does not count
    assert not h.live(15).ok
    h.tick_started(16)
    assert h.tick_ended(17) is True
    assert h.live(26).ok and not h.live(28).ok


def test_a_tick_after_one_that_timed_out_is_not_progress_until_it_completes():
    # A hung peer: every tick times out. A new tick's first moments, before its first call
    # times out, must not read as progress, or /healthz flaps 200/503 through the hang
    # (tests/integration/test_sidecar.py's SIGSTOP test read "ok: a tick has been running"
    # right after a 503).
    h = Health(bound_s=10, tick_limit_s=100, max_age_s=30, started_s=0)
    h.tick_started(1)
    assert h.tick_ended(2) is True
    h.tick_started(3)
    h.timed_out("signals", "Triton metrics did not answer within 1 s")
    assert h.tick_ended(4) is False
    h.tick_started(13)
    verdict = h.live(13.5)
    assert not verdict.ok and verdict.message.startswith("stalled: ") and "did not answer" in verdict.message
    assert h.tick_ended(14) is True  # the peer answers again: the tick completes
    assert h.live(14.5).ok
    h.tick_started(15)  # and a running tick after a completed one is progress again
    assert h.live(30).ok


def test_a_tick_past_its_hard_limit_is_not_live_even_without_timeouts():
    h = Health(bound_s=10, tick_limit_s=20, max_age_s=30, started_s=0)
    h.tick_started(1)
    assert h.live(20).ok
    verdict = h.live(22)
    assert not verdict.ok and "limit 20 s" in verdict.message


def test_readiness_follows_the_signals():
    h = Health(bound_s=10, tick_limit_s=20, max_age_s=30, started_s=0)
    assert h.ready(1).message == "signals stale: no fresh window yet"
    h.signals(fresh_end_s=5, error=None)
    assert h.ready(6).ok
    h.signals(fresh_end_s=None, error=None)  # a stale window from a reload: the read worked
    assert h.ready(7).ok
    h.signals(fresh_end_s=None, error="connection refused")
    assert not h.ready(8).ok and "connection refused" in h.ready(8).message
    h.signals(fresh_end_s=None, error=None)
    assert h.ready(34).ok and not h.ready(36).ok  # the fresh window aged out


# -- the controller: liveness, stale status, state across restarts ----------------------------


class HangingActuator(FakeActuator):
    """Every reconcile answers as a hung Triton does: after its timeout, reason timeout."""

    async def reconcile(self, profile):
        from autobatch.actuators.base import ActuationResult

        return ActuationResult(profile.name, False, 5.0, "timeout", "config read timed out", None)


async def test_ticks_whose_calls_time_out_turn_healthz_503(tmp_path):
    clock = Clock()
    hung = ScrapeError("Triton metrics did not answer within 2 s", timed_out=True)
    c = Controller(make_config(tmp_path), ScriptedSource(clock, [hung] * 1000), HangingActuator("balanced"),
                   clock=clock)
    await c.start()
    bound = c.health.bound_s
    assert c.health.live(clock()).ok
    while clock.t < 1000 + bound + 2:
        clock.t += 1.0
        await c.tick()
    verdict = c.health.live(clock())
    assert not verdict.ok and "stalled" in verdict.message
    get = c.registry.get_sample_value
    assert get("autobatch_timeouts_total", {"model": "dense_mlp", "stage": "signals"}) >= bound
    assert get("autobatch_timeouts_total", {"model": "dense_mlp", "stage": "reconcile"}) >= bound
    assert get("autobatch_live", {"model": "dense_mlp"}) == 0
    await c.aclose()


async def test_refused_connections_keep_healthz_200_but_not_ready(tmp_path):
    clock = Clock()
    refused = ScrapeError("cannot reach Triton metrics: connection refused")
    c = Controller(make_config(tmp_path), ScriptedSource(clock, [{}] + [refused] * 30),
                   FakeActuator("balanced"), clock=clock)
    await c.start()
    await c.tick()
    for _ in range(30):
        clock.t += 1.0
        await c.tick()
    assert c.health.live(clock()).ok
    assert not c.health.ready(clock()).ok
    assert c.registry.get_sample_value("autobatch_last_tick_timestamp_seconds",
                                       {"model": "dense_mlp"}) == clock()
    await c.aclose()


async def test_status_marks_the_last_window_stale_when_the_source_fails_since(tmp_path):
    clock = Clock()
    c = Controller(make_config(tmp_path), ScriptedSource(clock, [{}, ScrapeError("refused")]),
                   FakeActuator("balanced"), clock=clock)
    await c.start()
    clock.t += 1
    await c.tick()
    assert c.status.last_window["stale"] is False
    clock.t += 1
    await c.tick()
    w = c.status.last_window
    assert w["stale"] is True and w["stale_reason"] == "unreachable"
    assert "the source failed after this window: refused" in w["stale_detail"]
    await c.aclose()


async def test_a_restart_honours_the_pin_and_dwells_before_its_first_switch(tmp_path):
    clock = Clock()
    cfg = make_config(tmp_path, min_dwell_s=10)
    act = FakeActuator(live="latency-soft")
    c = Controller(cfg, ScriptedSource(clock, [{}] * 3), act, clock=clock)
    await c.start()
    await c.set_pin("balanced")
    clock.t += 1
    (d,) = [await c.tick()]
    assert d.reason is Reason.PIN and act.live == "balanced"
    await c.aclose()
    saved = json.loads(cfg.state_file.read_text())
    assert (saved["pin"], saved["active"]) == ("balanced", "balanced")

    # Restarted: the pin comes back; unpinned, a step back toward latency waits out the
    # dwell (a survival move would not: an overload does not wait for a dwell).
    clock.t += 100
    self_wait = dict(inference_rps=20.0, mean_batch_size=1.2, mean_queue_ms=19.0, p95_ms=30.0)
    c2 = Controller(cfg, ScriptedSource(clock, [self_wait] * 20), act, clock=clock)
    await c2.start()
    assert c2.status.pinned == "balanced" and c2.status.restored["pin"] == "balanced"
    assert act.applied == ["balanced"]  # the live profile is adopted, not re-applied
    c2.pin(None)
    started = clock()
    switched_at = None
    for _ in range(20):
        clock.t += 1
        d = await c2.tick()
        if d.switch:
            switched_at = clock()
            break
    assert switched_at is not None and switched_at - started >= cfg.policy.stability.min_dwell_s
    await c2.aclose()


async def test_a_corrupt_state_file_is_ignored_and_counted(tmp_path):
    clock = Clock()
    cfg = make_config(tmp_path)
    cfg.state_file.write_text("{not json")
    c = Controller(cfg, ScriptedSource(clock, []), FakeActuator("balanced"), clock=clock)
    await c.start()
    assert c.status.errors["state"] == 1 and "not a state file" in c.status.last_error
    assert json.loads(cfg.state_file.read_text())["active"] == "balanced"  # replaced by a good one
    await c.aclose()


def test_state_file_of_another_model_is_not_used(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"version": 1, "model": "other", "active": "a", "pin": None,
                                "last_switch_s": 1.0, "saved_s": 2.0}))
    saved, problem = StateFile(path).load("dense_mlp")
    assert saved is None and "model 'other'" in problem


# -- the decision log survives disk-full and rotation -----------------------------------------


def test_decision_log_reopens_after_a_failed_write_and_mends_the_torn_line(tmp_path):
    path = tmp_path / "d.jsonl"
    log = DecisionLog(path)
    log.open()
    log.write_line({"n": 1})
    # Simulate a disk that filled mid-line: half a line on disk, then the write fails.
    with open(path, "a") as f:
        f.write('{"n": 2, "cut')
    log._torn = True
    log.close()
    log.write_line({"n": 3})
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"n": 1} and json.loads(lines[-1]) == {"n": 3}


def test_decision_log_write_failure_raises_oserror_and_the_next_write_reopens(tmp_path):
    log = DecisionLog(Path("/dev/full"))  # every write: ENOSPC, as on a full disk
    log.open()
    with pytest.raises(OSError):
        log.write_line({"n": 1})
    assert log._file is None  # closed; the next write opens the path again
    with pytest.raises(OSError):
        log.write_line({"n": 2})
    log.close()
    log.close()  # closing twice, after failures, never raises


def test_decision_log_follows_rotation(tmp_path):
    path = tmp_path / "d.jsonl"
    log = DecisionLog(path)
    log.open()
    log.write_line({"n": 1})
    path.rename(tmp_path / "d.jsonl.1")  # logrotate without copytruncate
    log.write_line({"n": 2})
    assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [2]
    held = log._file
    log.reopen()  # SIGHUP
    # The handler only asks: a write running in the worker thread keeps its file.
    assert held is not None and not held.closed and log._file is held
    log.write_line({"n": 3})
    assert held.closed and log._file is not held
    assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [2, 3]
    log.close()


async def test_a_full_disk_is_counted_and_shutdown_does_not_raise(tmp_path):
    clock = Clock()
    cfg = make_config(tmp_path)
    from dataclasses import replace

    cfg = replace(cfg, decision_log=Path("/dev/full"), state_file=tmp_path / "state.json")
    c = Controller(cfg, ScriptedSource(clock, [{}] * 3), FakeActuator("balanced"), clock=clock)
    await c.start()
    for _ in range(3):
        clock.t += 1
        await c.tick()
    assert c.status.errors["log"] == 3
    assert c.health.live(clock()).ok  # a failing write is an error, not a hang
    await c.aclose()


# -- 2. the control API never throws ----------------------------------------------------------


async def control_server(tmp_path, **kw) -> tuple[Controller, ControlServer, Clock]:
    clock = Clock()
    c = Controller(make_config(tmp_path), ScriptedSource(clock, [{}] * 50), FakeActuator("latency-soft"),
                   clock=clock)
    await c.start()
    token = kw.pop("token", b"s3cret")
    server = ControlServer(c, "127.0.0.1", 0, token, **kw)
    await server.start()
    return c, server, clock


async def test_probes_of_the_control_api(tmp_path, caplog):
    c, server, _ = await control_server(tmp_path)
    auth = {"Authorization": "Bearer s3cret"}
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            # A non-ASCII bearer header, no token needed to send it: 401, not 500.
            r = await http.post("/profile", json={"profile": "aggressive"},
                                headers={"Authorization": "Bearer caf\u00e9".encode()})
            assert r.status_code == 401
            # A deeply nested body, with the token: 400.
            r = await http.post("/profile", content=b"[" * 2000 + b"]" * 2000, headers=auth)
            assert r.status_code == 400 and "nested deeper" in r.json()["error"]
            r = await http.post("/profile", content=b'{"profile": ' + b"[" * 3 + b"]" * 3 + b"}",
                                headers=auth)
            assert r.status_code == 400
            # A 1 MB profile name: refused before it is read, and never echoed whole.
            r = await http.post("/profile", json={"profile": "x" * 1_000_000}, headers=auth)
            assert r.status_code == 413 and len(r.text) < 200
            r = await http.post("/profile", json={"profile": "y" * 3000}, headers=auth)
            assert r.status_code == 400 and len(r.json()["error"]) < ECHO_CHARS + 120
            r = await http.post("/profile", content=b"\xff\xfe", headers=auth)
            assert r.status_code == 400
            r = await http.request("DELETE", "/profile", headers=auth)
            assert r.status_code == 405
            assert c.state.pin is None  # nothing above changed anything
    finally:
        await server.stop()
        await c.aclose()
    assert "Traceback" not in caplog.text


async def test_a_non_ascii_token_file_pins(tmp_path):
    token = "caf\u00e9-\u4e2d-token".encode()
    c, server, _ = await control_server(tmp_path, token=token)
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/profile", json={"profile": "balanced"},
                                headers={"Authorization": b"Bearer " + token})
            assert r.status_code == 200 and c.state.pin == "balanced"
    finally:
        await server.stop()
        await c.aclose()


async def test_protected_reads_need_the_token_but_probes_never_do(tmp_path):
    c, server, _ = await control_server(tmp_path, protect_reads=True)
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            for path in ("/status", "/metrics"):
                assert (await http.get(path)).status_code == 401
                assert (await http.get(path, headers={"Authorization": "Bearer s3cret"})).status_code == 200
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code in (200, 503)
        with pytest.raises(AutobatchError, match="needs the bearer token.*no token was given") as info:
            await asyncio.to_thread(fetch_status, server.url)
        assert "--" not in str(info.value)  # a library message names no CLI flag
        status = await asyncio.to_thread(fetch_status, server.url, token=b"s3cret")
        assert status["active_profile"] == "latency-soft"
    finally:
        await server.stop()
        await c.aclose()


async def test_a_half_sent_request_is_dropped_after_the_request_timeout(tmp_path):
    c, server, _ = await control_server(tmp_path, request_timeout_s=0.3)
    loop = asyncio.get_running_loop()
    try:
        for partial in (b"GET /status HTTP/1.1\r\nHost: x\r\n",  # headers never end
                        b"POST /profile HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
                        b"Content-Length: 100\r\n\r\n{\"pro"):  # body never ends
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.setblocking(False)
            await loop.sock_sendall(sock, partial)
            # The server closes it (EOF), or answers 408 and then closes: either way it ends.
            received = b""
            async with asyncio.timeout(10):
                while chunk := await loop.sock_recv(sock, 4096):
                    received += chunk
            sock.close()
            assert received == b"" or b" 408 " in received.split(b"\r\n")[0]
    finally:
        await server.stop()
        await c.aclose()


async def test_a_world_readable_token_and_a_wide_listen_are_warned_and_counted(tmp_path, caplog):
    from dataclasses import replace

    from autobatch.controller.app import run_sidecar

    token = tmp_path / "token"
    token.write_text("s3cret")
    token.chmod(0o644)
    cfg = make_config(tmp_path)
    cfg = replace(cfg, server=replace(cfg.server, host="0.0.0.0", port=0, token_file=token))
    clock = Clock()
    stop = asyncio.Event()
    seen = {}

    def ready(sidecar):
        get = sidecar.controller.registry.get_sample_value
        seen.update({k: get("autobatch_exposure_warnings", {"kind": k}) for k in ("token_file", "listen")})
        stop.set()

    await run_sidecar(cfg, stop=stop, ready=ready, source=ScriptedSource(clock, []),
                      actuator=FakeActuator("balanced"), clock=clock)
    assert seen == {"token_file": 1.0, "listen": 1.0}
    assert "chmod 600" in caplog.text and "beyond loopback" in caplog.text
    assert stat.S_IMODE(token.stat().st_mode) == 0o644  # warned, not changed


async def test_the_sidecar_logs_each_old_spelling_of_its_config_at_start(tmp_path, caplog):
    from autobatch.controller.app import run_sidecar

    cfg = make_config(tmp_path)  # flat policy keys: confirmations, min_dwell_s, stabilization_s
    assert len(cfg.deprecations) == 3
    stop = asyncio.Event()
    await run_sidecar(cfg, stop=stop, ready=lambda sidecar: stop.set(), source=ScriptedSource(Clock(), []),
                      actuator=FakeActuator("balanced"), clock=Clock())
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in logged if "deprecated" in m] == [f"config: {line}" for line in cfg.deprecations]


# -- 3. bounded signals -----------------------------------------------------------------------


def big_metrics(n_bytes: int) -> bytes:
    line = b'nv_inference_count{model="other",version="1"} 1\n'
    return line * (n_bytes // len(line) + 1)


async def test_a_scrape_over_the_cap_is_too_large_and_names_the_setting():
    body = big_metrics(200_000)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    async with httpx.AsyncClient(transport=transport) as client:
        source = TritonSource("127.0.0.1:8000", "dense_mlp", client=client, max_bytes=100_000)
        with pytest.raises(ScrapeError) as info:
            await source.sample()
    assert info.value.reason == "too_large" and "signals.max_scrape_bytes" in str(info.value)


async def test_a_huge_metrics_body_is_a_counted_stale_window_and_the_sidecar_stays_live(tmp_path):
    """The 18.7 MB /metrics probe, scaled to a 100 kB cap: the controller refuses the body,
    counts the error and the stale window (reason too_large), holds, and stays live but
    not ready; nothing of the body reaches /status."""
    body = big_metrics(200_000)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    clock = Clock()
    async with httpx.AsyncClient(transport=transport) as client:
        source = TritonSource("127.0.0.1:8000", "dense_mlp", client=client, max_bytes=100_000,
                              batch_stats=False, clock=clock)
        act = FakeActuator("balanced")
        c = Controller(make_config(tmp_path), source, act, clock=clock)
        await c.start()
        for _ in range(3):
            clock.t += 1
            d = await c.tick()
            assert not d.switch
        get = c.registry.get_sample_value
        assert get("autobatch_stale_windows_total", {"model": "dense_mlp", "reason": "too_large"}) == 3
        assert c.status.errors["signals"] == 3 and "signals.max_scrape_bytes" in c.status.last_error
        assert len(c.status.last_error) < 1000
        assert c.health.live(clock()).ok and not c.health.ready(clock()).ok
        assert act.applied == []
        await c.aclose()


async def test_a_body_without_a_length_is_cut_off_at_the_cap_too():
    async def chunks():
        for _ in range(1000):
            yield b"x" * 1000

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=chunks()))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(ScrapeError) as info:
            await get_bounded(client, "http://t/metrics", timeout_s=5, max_bytes=50_000, what="metrics")
    assert info.value.reason == "too_large"


async def test_a_dripping_endpoint_times_out_as_a_whole():
    async def drip():
        while True:
            yield b"#"
            await asyncio.sleep(0.05)  # each chunk is quick: only a total deadline stops it

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=drip()))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(ScrapeError) as info:
            await get_bounded(client, "http://t/metrics", timeout_s=0.3, max_bytes=1 << 20, what="metrics")
    assert info.value.timed_out and "did not answer within 0.3 s" in str(info.value)


async def test_parsing_a_big_scrape_leaves_the_event_loop_free():
    """While a large /metrics is parsed, the loop keeps running other tasks (/healthz)."""
    body = big_metrics(1_500_000)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    beats = 0

    async def heartbeat():
        nonlocal beats
        while True:
            beats += 1
            await asyncio.sleep(0)

    async with httpx.AsyncClient(transport=transport) as client:
        source = TritonSource("127.0.0.1:8000", "dense_mlp", client=client, batch_stats=False)
        task = asyncio.create_task(heartbeat())
        await asyncio.sleep(0)
        before = beats
        sample = await source.sample()
        task.cancel()
    assert sample.metrics.counters == {}  # none of it is dense_mlp's
    assert beats - before > 10  # the loop ran meanwhile


def test_profile_errors_stay_profile_errors(tmp_path):
    path = tmp_path / "some_model" / "p.yaml"
    path.parent.mkdir()
    path.write_text("name: p\nname: q\n")
    with pytest.raises(ProfileError):
        load_profile(path)


async def test_writes_queue_and_a_hung_one_fails_the_next_at_once():
    import threading

    from autobatch.controller.files import FileTimeout, Writer

    writer = Writer(timeout_s=0.2)
    order: list[int] = []
    await asyncio.gather(*(writer.run(lambda i=i: order.append(i)) for i in range(5)))
    assert sorted(order) == [0, 1, 2, 3, 4]  # concurrent writers wait their turn, none times out
    release = threading.Event()
    with pytest.raises(FileTimeout, match="longer than 0.2 s"):
        await writer.run(lambda: release.wait(10))  # a file system that hangs
    with pytest.raises(FileTimeout, match="has not returned yet"):
        await writer.run(lambda: None)
    release.set()
    await asyncio.wrap_future(writer._stuck)  # the hung write returns
    assert await writer.run(lambda: 42) == 42  # it returned: writes go through again
    writer.close()


# -- the real CLI: exit codes -------------------------------------------------------------------


def cli_config(tmp_path: Path, **over) -> Path:
    from autobatch.lab.serve import free_port

    from ..conftest import PROFILES

    dead = f"127.0.0.1:{free_port()}"  # nothing listens: every read is refused at once
    data = {
        "model": "dense_mlp",
        "triton": {"http_url": dead, "metrics_url": f"http://{dead}/metrics", "grpc_url": dead},
        "profiles": {"dir": str(PROFILES / "dense_mlp"), "ladder": ["latency-soft", "balanced"]},
        "slo": {"p95_ms": 50},
        "policy": {"interval_s": 0.2},
        "server": {"listen": f"127.0.0.1:{free_port()}"},
        **over,
    }
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("log", "message"),
    [("logs", "is a directory"), ("file/d.jsonl", "is a file, not a directory"),
     # Unwritable for root too (CI runs as root, where the read-only directory test skips):
     # only the open at start-up finds it, and its line still names the config.
     ("/proc/autobatch-test/d.jsonl", "cannot open it for appending")],
)
def test_autobatch_run_refuses_a_bad_decision_log_in_one_line(tmp_path, log, message):
    import subprocess
    import sys

    (tmp_path / "logs").mkdir()
    (tmp_path / "file").write_text("x")
    path = cli_config(tmp_path, decision_log=str(tmp_path / log))
    res = subprocess.run([sys.executable, "-m", "autobatch", "run", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"autobatch: error: {path}: decision_log = ") and message in res.stderr
    assert res.stderr.count("\n") == 1


def test_sigterm_with_a_full_disk_exits_0_without_a_traceback(tmp_path):
    """The decision log on /dev/full (every write: ENOSPC); the sidecar runs, counts, and
    SIGTERM still ends it cleanly."""
    import signal
    import sys

    from autobatch.lab.process import ManagedProcess, poll_until

    path = cli_config(tmp_path, decision_log="/dev/full", state_file=str(tmp_path / "state.json"))
    port = yaml.safe_load(path.read_text())["server"]["listen"].rsplit(":", 1)[1]
    proc = ManagedProcess("sidecar", tmp_path / "sidecar.log")
    proc.start([sys.executable, "-m", "autobatch", "run", "--config", str(path)])
    try:
        def log_errors() -> float:
            try:
                st = httpx.get(f"http://127.0.0.1:{port}/status", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return 0
            return st["errors"].get("log", 0)

        poll_until(lambda: log_errors() >= 3, timeout_s=60, what="three failed log writes",
                   check=lambda: proc.check_alive("while running"))
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        proc.signal(signal.SIGTERM)
        poll_until(lambda: not proc.running(), timeout_s=30, what="the sidecar to exit")
        code = proc.returncode
    finally:
        proc.stop()
    text = (tmp_path / "sidecar.log").read_text()
    assert code == 0, text[-2000:]
    assert "Traceback" not in text and "sidecar stopped" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"\xff\xfe s3cret", "the token is not UTF-8 text"),  # crashed the start-up with a traceback
     (b"two words", "which an Authorization header cannot carry")],
)
def test_autobatch_run_refuses_an_unusable_token_file_in_one_line(tmp_path, content, message):
    import subprocess
    import sys

    token = tmp_path / "token"
    token.write_bytes(content)
    token.chmod(0o600)
    path = cli_config(tmp_path, decision_log=str(tmp_path / "d.jsonl"))
    data = yaml.safe_load(path.read_text())
    data["server"]["token_file"] = str(token)
    path.write_text(yaml.safe_dump(data))
    res = subprocess.run([sys.executable, "-m", "autobatch", "run", "--config", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(f"autobatch: error: {token}: ") and message in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_sighup_reopens_the_decision_log_after_rotation(tmp_path):
    """logrotate moves the log and sends SIGHUP: the sidecar lives on (SIGHUP's default
    action would end it), writes a new file at the path, and the moved one stays whole."""
    import signal
    import sys

    from autobatch.lab.process import ManagedProcess, poll_until

    log = tmp_path / "d.jsonl"
    rotated = tmp_path / "d.jsonl.1"
    path = cli_config(tmp_path, decision_log=str(log))
    proc = ManagedProcess("sidecar", tmp_path / "sidecar.log")
    proc.start([sys.executable, "-m", "autobatch", "run", "--config", str(path)])

    def lines(p: Path) -> list[str]:
        try:
            return p.read_text().splitlines()
        except FileNotFoundError:
            return []

    try:
        alive = {"check": lambda: proc.check_alive("while running")}
        # The SIGHUP handler is in place once the sidecar says it serves.
        poll_until(lambda: "autobatch sidecar for" in (tmp_path / "sidecar.log").read_text()
                   and len(lines(log)) >= 2, timeout_s=60, what="two decision log lines", **alive)
        log.rename(rotated)
        proc.signal(signal.SIGHUP)
        poll_until(lambda: len(lines(log)) >= 2, timeout_s=60, what="two lines in the new log", **alive)
        assert proc.running()
        proc.signal(signal.SIGTERM)
        poll_until(lambda: not proc.running(), timeout_s=30, what="the sidecar to exit")
        code = proc.returncode
    finally:
        proc.stop()
    text = (tmp_path / "sidecar.log").read_text()
    assert code == 0, text[-2000:]
    assert "Traceback" not in text
    # Every line of both files parses (none torn by the rotation), and the new file
    # carries on where the moved one stopped.
    stamps = [json.loads(x)["ts"] for x in lines(rotated) + lines(log)]
    assert stamps == sorted(stamps) and len(lines(log)) >= 2
    # ... and the monotonic clock read with each decision, for times a wall-clock step cannot bend
    monos = [json.loads(x)["mono"] for x in lines(rotated) + lines(log)]
    assert all(isinstance(m, float) for m in monos) and monos == sorted(monos)


async def test_replay_agrees_with_a_sidecar_that_dwelt_after_its_start(tmp_path):
    from autobatch.plan.replay import parse_trace, replay

    clock = Clock()
    cfg = make_config(tmp_path, min_dwell_s=5)
    c = Controller(cfg, ScriptedSource(clock, [SATURATED] * 12), FakeActuator("latency-soft"), clock=clock)
    await c.start()
    decisions = []
    for _ in range(12):
        clock.t += 1
        decisions.append(await c.tick())
    await c.aclose()
    assert Reason.SETTLING in [d.reason for d in decisions] and any(d.switch for d in decisions)
    steps = replay(parse_trace(cfg.decision_log.read_text().splitlines()), cfg.policy)
    assert all(s.agrees for s in steps), [(s.tick.now_s, s.decision.message) for s in steps if not s.agrees]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
async def test_the_control_api_listens_on_ipv6(tmp_path):
    c, server, _ = await control_server(tmp_path)
    await server.stop()
    server6 = ControlServer(c, "::1", 0, b"s3cret")
    await server6.start()
    try:
        assert server6.url.startswith("http://[::1]:")
        async with httpx.AsyncClient(base_url=server6.url) as http:
            assert (await http.get("/healthz")).status_code == 200
    finally:
        await server6.stop()
        await c.aclose()
