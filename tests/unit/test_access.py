"""Triton's restricted-API key: read from a file, sent where it is needed, never shown.

The fake Triton here answers as the real one does (403 and the message seen on the
tritonserver of nvidia-pytriton 0.7); tests/integration/test_restricted_api.py runs the
same paths against the real server started with --http-restricted-api.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from autobatch.access import GRPC_PREFIX, RestrictedApi, expected_header, refusal
from autobatch.actuators.triton import TritonReloadActuator
from autobatch.cli.app import restricted_api
from autobatch.controller.config import load_sidecar_config
from autobatch.errors import ConfigError, ScrapeError
from autobatch.profiles import load_profiles, parse_pbtxt
from autobatch.signals import TritonSource

from ..conftest import PROFILES, REPOSITORY

HEADER = "autobatch-key"
KEY = "0123456789abcdef-s3cret+/="
MODEL = "dense_mlp"
HTTP_REFUSAL = f"This API is restricted, expecting header '{HEADER}'"
GRPC_REFUSAL = f"This protocol is restricted, expecting header '{GRPC_PREFIX}{HEADER}'"


def key_file(tmp_path: Path, text: str = KEY + "\n") -> Path:
    path = tmp_path / "triton-key"
    path.write_text(text)
    return path


def test_the_key_is_read_stripped_and_never_shown(tmp_path):
    api = RestrictedApi.from_file(HEADER, key_file(tmp_path))
    assert api.key == KEY
    assert api.http_headers == {HEADER: KEY}
    assert api.grpc_headers == {f"triton-grpc-protocol-{HEADER}": KEY}
    assert KEY not in repr(api) and KEY not in str(api)
    assert api.redact(f"echoed {KEY} back") == "echoed <key> back"


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("", "the file is empty"),
        ("  \n", "the file is empty"),
        ("abc def", "character 4 of the key is not visible ASCII"),
        ("abc\x00", "character 4 of the key is not visible ASCII"),
        ("clé", "character 3 of the key is not visible ASCII"),
    ],
)
def test_an_unusable_key_is_one_line_that_never_quotes_it(tmp_path, text, expect):
    with pytest.raises(ConfigError) as info:
        RestrictedApi.from_file(HEADER, key_file(tmp_path, text))
    message = str(info.value)
    assert expect in message and "triton.restricted_api.key_file" in message
    assert "\n" not in message
    if text.strip():
        assert text.strip() not in message


def test_a_missing_key_file_names_the_setting(tmp_path):
    with pytest.raises(ConfigError, match=r"triton.restricted_api.key_file = '.*nope': cannot read the key"):
        RestrictedApi.from_file(HEADER, tmp_path / "nope")


@pytest.mark.parametrize("header", ["Admin-Key", "admin key", "", "-x", "a" * 64, "x_y"])
def test_a_header_grpc_cannot_send_is_refused(tmp_path, header):
    with pytest.raises(ConfigError, match="triton.restricted_api.header"):
        RestrictedApi.from_file(header, key_file(tmp_path))


def test_triton_refusals_are_recognised_on_both_transports():
    assert expected_header(HTTP_REFUSAL) == HEADER
    assert expected_header(GRPC_REFUSAL) == GRPC_PREFIX + HEADER
    assert expected_header("model 'x' is not found") is None
    assert refusal("the load", "unexpected inference output", None) is None


def test_a_refusal_says_which_part_of_the_setting_to_fix(tmp_path):
    none = refusal("the load of 'm'", GRPC_REFUSAL, None)
    assert none is not None and "set triton.restricted_api (header: autobatch-key" in none
    other = RestrictedApi.from_file("other-key", key_file(tmp_path))
    wrong_header = refusal("the load of 'm'", HTTP_REFUSAL, other)
    assert wrong_header is not None and "triton.restricted_api.header is 'other-key'" in wrong_header
    api = RestrictedApi.from_file(HEADER, key_file(tmp_path))
    wrong_key = refusal("the load of 'm'", HTTP_REFUSAL, api)
    assert wrong_key is not None and "the key in triton.restricted_api.key_file" in wrong_key
    # Triton matches the HTTP header name without regard to case.
    assert "key_file" in (refusal("x", "This API is restricted, expecting header 'AutoBatch-Key'", api) or "")
    flags = RestrictedApi.from_file(HEADER, key_file(tmp_path), setting="--restricted-api")
    assert "--restricted-api-key-file" in (refusal("x", HTTP_REFUSAL, flags) or "")
    for line in (none, wrong_header, wrong_key):
        assert "\n" not in line and KEY not in line


def test_the_cli_takes_the_header_and_the_key_file_together(tmp_path):
    assert restricted_api(None, None) is None
    api = restricted_api(HEADER, key_file(tmp_path))
    assert api.key == KEY
    with pytest.raises(ConfigError, match="--restricted-api-header needs --restricted-api-key-file"):
        restricted_api(HEADER, None)
    with pytest.raises(ConfigError, match="--restricted-api-key-file needs --restricted-api-header"):
        restricted_api(None, key_file(tmp_path))
    with pytest.raises(ConfigError, match="--restricted-api-header = 'A'"):
        restricted_api("A", key_file(tmp_path))


# -- the sidecar's config ------------------------------------------------------------------------


def write_sidecar(tmp_path: Path, triton: dict[str, Any]) -> Path:
    (tmp_path / "sidecar.yaml").write_text(json.dumps({
        "model": MODEL,
        "triton": triton,
        "profiles": {"dir": str(PROFILES / MODEL), "ladder": ["latency-soft", "aggressive"]},
        "slo": {"p95_ms": 50},
    }))
    return tmp_path / "sidecar.yaml"


def test_the_sidecar_reads_the_key_relative_to_its_config(tmp_path):
    key_file(tmp_path)
    cfg = load_sidecar_config(write_sidecar(tmp_path, {"restricted_api": {"header": HEADER,
                                                                          "key_file": "triton-key"}}))
    api = cfg.triton.restricted_api
    assert api is not None and api.key == KEY and api.key_file == tmp_path / "triton-key"
    assert cfg.signals.restricted_api is api  # the direct source sends it too
    assert load_sidecar_config(write_sidecar(tmp_path, {})).triton.restricted_api is None


@pytest.mark.parametrize(
    ("restricted", "expect"),
    [
        ({"header": HEADER}, "triton.restricted_api.key_file"),
        ({"header": HEADER, "key_file": "absent"}, "triton.restricted_api.key_file = '"),
        ({"header": "Admin", "key_file": "triton-key"}, "triton.restricted_api.header = 'Admin'"),
        ({"header": HEADER, "key_file": "triton-key", "key": KEY}, "triton.restricted_api.key"),
    ],
)
def test_a_bad_restricted_api_setting_is_one_line_naming_file_and_field(tmp_path, restricted, expect):
    key_file(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_sidecar_config(write_sidecar(tmp_path, {"restricted_api": restricted}))
    message = str(info.value)
    assert "sidecar.yaml" in message and expect in message and "\n" not in message
    assert KEY not in message


# -- the reload actuator and the direct source against a fake locked Triton ----------------------


class LockedTriton:
    """Triton with model-config, model-repository and statistics locked: 403 without the key."""

    def __init__(self) -> None:
        self.config = parse_pbtxt((REPOSITORY / MODEL / "config.pbtxt").read_text())
        self.seen: list[tuple[str, str | None]] = []
        self.loads = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen.append((path, request.headers.get(HEADER)))
        if path.endswith("/metrics"):
            return httpx.Response(200, text="")
        if request.headers.get(HEADER) != KEY:
            return httpx.Response(403, json={"error": HTTP_REFUSAL})
        if path.endswith("/config"):
            return httpx.Response(200, json=self.config)
        if path.endswith("/stats"):
            return httpx.Response(200, json={"model_stats": []})
        if path.endswith("/load"):
            self.loads += 1
            self.config = json.loads(json.loads(request.content)["parameters"]["config"])
            return httpx.Response(200)
        return httpx.Response(404, json={"error": "not found"})


def reload(triton: LockedTriton, api: RestrictedApi | None) -> Any:
    ladder = list(load_profiles(PROFILES / MODEL).values())
    client = httpx.AsyncClient(transport=httpx.MockTransport(triton.handler))
    actuator = TritonReloadActuator("http://triton.test:8000", MODEL, ladder, client=client,
                                    restricted_api=api)
    aggressive = next(p for p in ladder if p.name == "aggressive")

    async def go() -> Any:
        try:
            return await actuator.apply(aggressive)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_the_reload_sends_the_key_with_every_read_and_load(tmp_path):
    triton = LockedTriton()
    result = reload(triton, RestrictedApi.from_file(HEADER, key_file(tmp_path)))
    assert result.ok and result.reason == "applied", result.message
    assert triton.loads == 1
    assert {key for _, key in triton.seen} == {KEY}


@pytest.mark.parametrize(("key", "expect"), [(None, "set triton.restricted_api"), ("wrong", "key_file")])
def test_without_the_key_nothing_is_loaded_and_the_reason_is_forbidden(tmp_path, key, expect):
    triton = LockedTriton()
    api = RestrictedApi.from_file(HEADER, key_file(tmp_path, key)) if key else None
    result = reload(triton, api)
    assert not result.ok and result.reason == "forbidden"
    assert expect in result.message and "\n" not in result.message and KEY not in result.message
    assert triton.loads == 0 and [p for p, _ in triton.seen if p.endswith("/load")] == []


def test_the_direct_source_sends_the_key_to_stats_and_config_only(tmp_path):
    triton = LockedTriton()

    async def sample(api: RestrictedApi | None) -> Any:
        client = httpx.AsyncClient(transport=httpx.MockTransport(triton.handler))
        source = TritonSource("triton.test:8000", MODEL, metrics_url="http://triton.test:8002/metrics",
                              client=client, restricted_api=api)
        try:
            return await source.sample()
        finally:
            await client.aclose()

    with pytest.raises(ScrapeError) as info:
        asyncio.run(sample(None))
    assert info.value.reason == "forbidden" and "triton.restricted_api" in str(info.value)
    triton.seen.clear()
    with pytest.raises(ScrapeError):  # the fake's empty answers hold no series: past the key
        asyncio.run(sample(RestrictedApi.from_file(HEADER, key_file(tmp_path))))
    sent = dict(triton.seen)
    assert sent[f"/v2/models/{MODEL}/stats"] == KEY and sent[f"/v2/models/{MODEL}/config"] == KEY
    assert sent["/metrics"] is None  # the metrics port never gets it
