"""Property tests (hypothesis): whatever comes in, a 4xx or a one-line error, never a traceback.

Fixed budget, derandomized (the same examples every run, no example database), a
few seconds in all:

* the control API, over raw sockets: any method, path, headers and body give a
  status under 500, nothing is logged with a traceback, and the pin changes only
  for a well-formed request carrying the token;
* the sidecar config, profiles, curves and schedules: any mapping (or YAML text)
  is either read or refused with one ``ConfigError`` line that names the file.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autobatch.config import parse_yaml
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.controller.http import ControlServer
from autobatch.controller.loop import Controller
from autobatch.curve import BatchCurve, load_curve
from autobatch.errors import ConfigError
from autobatch.profiles import profile_from_mapping
from autobatch.schedule import parse_schedule

from ..conftest import PROFILES
from .test_controller import Clock, FakeActuator, ScriptedSource, make_config

BUDGET = settings(
    max_examples=150, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

scalars = (st.none() | st.booleans() | st.integers(-(10**30), 10**30)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=8,
)


def one_line_error(exc: ConfigError, source: str) -> None:
    text = str(exc)
    assert "\n" not in text, text
    assert text.startswith(f"{source}: "), text
    assert len(text) < 600, text


# -- the control API ------------------------------------------------------------------------

TOKEN = b"s3cret-token"
LADDER = ["latency-soft", "balanced", "aggressive"]


class _Traceback(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[tuple[Controller, int, _Traceback]]:
    """One sidecar's HTTP API on loopback, in its own event loop thread, for every example."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    tmp = tmp_path_factory.mktemp("api")

    async def setup() -> tuple[Controller, ControlServer]:
        clock = Clock()
        c = Controller(make_config(tmp), ScriptedSource(clock, []), FakeActuator("balanced"), clock=clock)
        await c.start()
        server = ControlServer(c, "127.0.0.1", 0, TOKEN, request_timeout_s=1.0)
        await server.start()
        return c, server

    controller, server = asyncio.run_coroutine_threadsafe(setup(), loop).result(30)
    tracebacks = _Traceback()
    logging.getLogger().addHandler(tracebacks)
    try:
        yield controller, server.port, tracebacks
    finally:
        logging.getLogger().removeHandler(tracebacks)

        async def teardown() -> None:
            await server.stop()
            await controller.aclose()

        asyncio.run_coroutine_threadsafe(teardown(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "BREW"])
paths = st.sampled_from(["/profile", "/status", "/metrics", "/healthz", "/readyz", "/", "/profile/x",
                         "/%ff%fe", "/../../etc/passwd", "/profile?profile=aggressive"]) | st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30).map(lambda s: "/" + s)
header_bytes = st.binary(max_size=60).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
auth = st.one_of(
    st.none(),
    st.just(b"Bearer " + TOKEN),
    header_bytes.map(lambda b: b"Bearer " + b),
    st.just("Bearer caf\u00e9".encode()),
    header_bytes,
)
extra_headers = st.lists(
    st.tuples(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=":"),
                      min_size=1, max_size=12).filter(
                          lambda n: n.lower() not in ("content-length", "transfer-encoding", "connection",
                                                      "authorization", "host", "expect")),
              header_bytes),
    max_size=4,
)
bodies = st.one_of(
    st.sampled_from([None, *LADDER, "turbo"]).map(lambda n: json.dumps({"profile": n}).encode()),
    values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 5000).map(lambda n: json.dumps({"profile": "x" * n}).encode()),
)


def send(port: int, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    head = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close",
            b"Content-Length: " + str(len(body)).encode()]
    head += [name + b": " + value for name, value in headers]
    request = b"\r\n".join(head) + b"\r\n\r\n" + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def expected_pin(method: str, path: str, authorization: bytes | None, body: bytes) -> tuple[bool, Any]:
    """Does this request pin, and to what? Only a POST /profile with the token and a good body."""
    if method != "POST" or path != "/profile" or authorization != b"Bearer " + TOKEN:
        return False, None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(data, dict) or set(data) != {"profile"}:
        return False, None
    name = data["profile"]
    return (name is None or name in LADDER), name


@BUDGET
@given(method=methods, path=paths, authorization=auth, headers=extra_headers, body=bodies)
def test_the_control_api_never_throws(api, method, path, authorization, headers, body):
    controller, port, tracebacks = api
    before = controller.state.pin
    all_headers = [(n.encode(), v) for n, v in headers]
    if authorization is not None:
        all_headers.append((b"Authorization", authorization))
    answer = send(port, method, path, all_headers, body)
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), answer[:200]
    status = int(status_line.split()[1])
    # /readyz is 503 by design here: the fixture's source gives no window, so no fresh one.
    assert status < 500 or (path == "/readyz" and status == 503), answer[:300]
    assert len(answer) < 20_000 or path in ("/metrics", "/status"), "an error echoed too much"
    pins, name = expected_pin(method, path, authorization, body)
    if pins:
        assert status == 200 and controller.state.pin == name
    else:
        assert controller.state.pin == before, (method, path, authorization, body[:100])
    assert not tracebacks.records, tracebacks.records[0].getMessage()


# -- config, profiles, curves, schedules ----------------------------------------------------

CONFIG_FIELDS = [
    "model", "triton", "triton.http_url", "triton.metrics_url", "triton.grpc_url", "profiles",
    "profiles.dir", "profiles.ladder", "profiles.initial", "slo", "slo.p95_ms", "slo.p99_ms", "policy",
    "policy.interval_s", "policy.history_windows", "policy.confirmations", "policy.min_dwell_s",
    "policy.headroom", "policy.curve", "policy.failure_reasons", "policy.max_window_age_s", "signals",
    "signals.source", "signals.prometheus_url", "signals.selector", "signals.range_s", "signals.timeout_s",
    "signals.max_scrape_bytes", "signals.utilization", "actuator", "actuator.kind", "actuator.mode",
    "actuator.timeout_s", "actuator.load_api", "actuator.repository", "actuator.gateway", "actuator.steps",
    "actuator.variants", "server", "server.listen", "server.token_file", "server.protect_reads",
    "server.request_timeout_s", "decision_log", "state_file", "unknown_field", "policy.unknown",
]


def base_config() -> dict[str, Any]:
    return {
        "model": "dense_mlp",
        "profiles": {"dir": str(PROFILES / "dense_mlp"), "ladder": LADDER},
        "slo": {"p95_ms": 50},
        "policy": {"interval_s": 1},
        "server": {"listen": "127.0.0.1:9400"},
    }


def put(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = data
    for key in parents:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[last] = value


@BUDGET
@given(edits=st.lists(st.tuples(st.sampled_from(CONFIG_FIELDS), values), min_size=1, max_size=3))
def test_any_sidecar_config_is_read_or_refused_in_one_line(tmp_path, edits):
    data = copy.deepcopy(base_config())
    for path, value in edits:
        put(data, path, value)
    try:
        sidecar_config_from_mapping(data, "s.yaml", base=tmp_path)
    except ConfigError as exc:
        one_line_error(exc, "s.yaml")


@BUDGET
@given(data=values)
def test_any_top_level_value_is_a_one_line_config_error(tmp_path, data):
    try:
        sidecar_config_from_mapping(data, "s.yaml", base=tmp_path)
    except ConfigError as exc:
        one_line_error(exc, "s.yaml")


yaml_text = st.one_of(
    st.text(max_size=200),
    st.lists(st.tuples(st.sampled_from(["a", "b", "model", "<<", "? x", "- y", "&x a", "*x"]),
                       st.sampled_from(["1", "{}", "[", "]", "!!binary x", "2001-13-45", "*x", "&a b",
                                        "!!python/name:os.system", "'", '"\\x"', "\t"])),
             max_size=6).map(lambda kv: "\n".join(f"{k}: {v}" for k, v in kv)),
)


@BUDGET
@given(text=yaml_text)
def test_any_yaml_text_parses_or_is_one_line(text):
    try:
        parse_yaml(text, "f.yaml")
    except ConfigError as exc:
        one_line_error(exc, "f.yaml")


PROFILE_FIELDS = ["name", "model", "max_batch_size", "dynamic_batching", "instance_group",
                  "instance_group.count", "instance_group.kind", "description", "x"] + [
    f"dynamic_batching.{f}" for f in ("preferred_batch_size", "max_queue_delay_microseconds",
                                      "priority_levels", "default_queue_policy",
                                      "default_queue_policy.timeout_action")]


@BUDGET
@given(edits=st.lists(st.tuples(st.sampled_from(PROFILE_FIELDS), values), max_size=3))
def test_any_profile_is_read_or_refused_in_one_line(edits):
    data: dict[str, Any] = {"name": "p", "max_batch_size": 16,
                            "dynamic_batching": {"preferred_batch_size": [4, 8],
                                                 "max_queue_delay_microseconds": 2000}}
    for path, value in edits:
        put(data, path, value)
    try:
        profile_from_mapping(data, "p.yaml")
    except ConfigError as exc:
        one_line_error(exc, "p.yaml")


@BUDGET
@given(data=st.one_of(values, st.dictionaries(st.sampled_from(["points", "name", "unit", "x"]),
                                                values, max_size=3),
                      st.dictionaries(st.integers(-3, 1000) | st.text(max_size=3),
                                      scalars, max_size=5).map(lambda p: {"points": p})))
def test_any_curve_is_read_or_refused_in_one_line(data):
    try:
        BatchCurve.from_mapping(data, source="c.yaml")
    except ConfigError as exc:
        one_line_error(exc, "c.yaml")


@BUDGET
@given(text=st.text(max_size=200) | st.binary(max_size=100).map(lambda b: b.decode("latin-1")))
def test_any_curve_csv_is_read_or_refused_in_one_line(tmp_path, text):
    path = tmp_path / "c.csv"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        load_curve(path)
    except ConfigError as exc:
        one_line_error(exc, str(path))


@BUDGET
@given(data=st.one_of(
    values,
    st.lists(st.dictionaries(st.sampled_from(["rate_rps", "duration_s", "arrival", "burst_size", "name"]),
                             scalars, max_size=4),
             max_size=3).map(lambda phases: {"phases": phases}),
))
def test_any_schedule_is_read_or_refused_in_one_line(data):
    try:
        parse_schedule(data, "s.yaml")
    except ConfigError as exc:
        one_line_error(exc, "s.yaml")
