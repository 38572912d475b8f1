"""`autobatch serve`'s bad input is refused before anything starts (no Triton is started here)."""

from __future__ import annotations

from typing import Any

import pytest

import autobatch.lab.serve as serve_mod
from autobatch.errors import ConfigError
from autobatch.lab.serve import TritonServer

from ..helpers import assert_bad_input, run_main


@pytest.fixture
def no_triton(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test if anything past the input checks runs: the binary lookup or a process."""
    started: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        started.append("tritonserver")
        raise AssertionError("the checks let a Triton start")

    monkeypatch.setattr(serve_mod, "_pytriton_dir", refuse)
    monkeypatch.setattr(serve_mod.ManagedProcess, "start", refuse)
    return started


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http-port", "-1"], "--http-port = -1: must be a port number 1-65535 (or 0: a free one)"),
        (["--grpc-port", "65536"], "--grpc-port = 65536: must be a port number 1-65535"),
        (["--metrics-port", "99999999999"], "--metrics-port = 99999999999: must be a port number"),
        (["--host", "999.1.1.1"], "host = '999.1.1.1': does not resolve to an IPv4 address"),
        (["--host", "192.0.2.1"], "host = '192.0.2.1': cannot listen there"),
        (["--http-port", "8001", "--grpc-port", "8001"], "http_port = 8001: grpc_port is 8001 too"),
    ],
)
def test_bad_serve_flags_exit_2_with_one_line_before_any_start(
    args: list[str], message: str, no_triton: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, _, err = run_main(monkeypatch, capsys, "serve", *args)
    assert_bad_input(code, err, message)
    assert "already in use" not in err
    assert no_triton == []


def test_a_host_that_does_not_resolve_names_its_flag(no_triton: list[str], monkeypatch, capsys) -> None:
    _, _, err = run_main(monkeypatch, capsys, "serve", "--host", "no-such-host.invalid")
    assert err.strip().endswith("(set with --host)")


def test_port_0_takes_free_distinct_ports(no_triton: list[str]) -> None:
    server = TritonServer(http_port=0, grpc_port=0, metrics_port=0)
    server._check_inputs()
    ports = {server.urls.http_port, server.urls.grpc_port, server.urls.metrics_port}
    assert len(ports) == 3 and 0 not in ports
    assert server.urls.http.endswith(f":{server.urls.http_port}")


@pytest.mark.parametrize("port", [-1, 65536, 1.5, True])
def test_the_library_checks_ports_too(port: Any, no_triton: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"^http_port = .*: must be a port number"):
        TritonServer(http_port=port)._check_inputs()


class _OfferedSocket:
    """A socket whose bind to port 0 gets the next of ``offers``, as the kernel may offer a
    port released a moment ago."""

    def __init__(self, offers: list[int]) -> None:
        self._offers = offers
        self._port = 0

    def __call__(self, *args: Any) -> _OfferedSocket:
        return self

    def __enter__(self) -> _OfferedSocket:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def bind(self, address: tuple[str, int]) -> None:
        self._port = self._offers.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)


def test_free_port_never_hands_out_a_port_twice_even_when_the_kernel_offers_it_again(monkeypatch) -> None:
    monkeypatch.setattr(serve_mod, "_HANDED_OUT", set())
    monkeypatch.setattr(serve_mod.socket, "socket", _OfferedSocket([40001, 40001, 40001, 40002]))
    assert [serve_mod.free_port(), serve_mod.free_port()] == [40001, 40002]


def test_free_port_says_so_when_every_offer_was_handed_out_before(monkeypatch) -> None:
    monkeypatch.setattr(serve_mod, "_HANDED_OUT", {40001})
    monkeypatch.setattr(serve_mod, "FREE_PORT_TRIES", 3)
    monkeypatch.setattr(serve_mod.socket, "socket", _OfferedSocket([40001] * 3))
    with pytest.raises(serve_mod.ServeError, match="no free port that this process was not given already"):
        serve_mod.free_port()
