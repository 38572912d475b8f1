"""The embedded Triton launcher: start, stop, clean exit, one-line errors."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from autobatch.errors import ConfigError, ServeError
from autobatch.lab.process import group_members, poll_until
from autobatch.lab.serve import EMULATOR_MODEL, TritonServer, free_port

from ..conftest import REPOSITORY


def test_context_manager_serves_and_leaves_no_process_behind():
    with TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL]) as server:
        pgid = server.pid
        assert httpx.get(f"{server.urls.http}/v2/health/ready").status_code == 200
        members = group_members(pgid)
        assert pgid in members
        assert len(members) >= 2  # tritonserver and the model's Python stub
        metrics = httpx.get(server.urls.metrics).text
        assert "nv_inference_request_summary_us" in metrics  # summary_latencies=true
    assert group_members(pgid) == []


def _cli(*args: str, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autobatch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_cli_serve_prints_urls_and_stops_on_sigterm():
    ports = [str(free_port()) for _ in range(3)]
    proc = _cli(
        "serve", "--model", EMULATOR_MODEL,
        "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2],
    )
    lines = []
    try:
        for line in proc.stdout:  # blocks until the server prints; bounded by start-up timeout
            lines.append(line)
            if "Ctrl-C" in line:
                break
        text = "".join(lines)
        assert f"http://127.0.0.1:{ports[0]}" in text
        assert f"127.0.0.1:{ports[1]}" in text
        pid = int(text.split("pid ", 1)[1].split(")", 1)[0])
        assert group_members(pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert group_members(pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_in_use_is_a_one_line_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(ServeError, match=rf"127.0.0.1:{taken} \(http port\) is already in use"):
            TritonServer(REPOSITORY, http_port=taken, grpc_port=free_port(),
                         metrics_port=free_port()).start()
        proc = _cli("serve", "--http-port", str(taken))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().count("\n") == 0
    assert "already in use" in err and "--http-port" in err


def test_free_ports_taken_before_the_start_are_picked_again(monkeypatch):
    # A port handed out by on_free_ports, then taken by another process before Triton binds
    # it (here: before the start's own check), gives the server new ports, not an error.
    import autobatch.lab.serve as serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        real = serve.free_port
        first = iter([taken])
        monkeypatch.setattr(serve, "free_port", lambda host="127.0.0.1": next(first, None) or real(host))
        server = TritonServer.on_free_ports(REPOSITORY, models=[])
        assert taken in (server.urls.http_port, server.urls.grpc_port, server.urls.metrics_port)
        with server:
            ports = (server.urls.http_port, server.urls.grpc_port, server.urls.metrics_port)
            assert taken not in ports
            assert httpx.get(server.urls.http + "/v2/health/ready", timeout=5).status_code == 200


def test_missing_repository_is_a_one_line_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="model repository not found"):
        TritonServer(missing).start()
    proc = _cli("serve", "--repository", str(missing))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert str(missing) in err and err.strip().count("\n") == 0


def test_unknown_model_names_what_the_repository_holds():
    with pytest.raises(ConfigError, match="model 'resnet' not found; the repository holds dense_mlp"):
        TritonServer(REPOSITORY, models=["resnet"]).start()


BLOCK = textwrap.dedent(
    """
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "pytriton"):
                raise ModuleNotFoundError(f"No module named {name!r}")
    sys.meta_path.insert(0, Block())
    """
)


@pytest.mark.parametrize(
    ("code", "rc", "expect"),
    [
        ("import autobatch, autobatch.cli, autobatch.lab.serve, autobatch.profiles; print('ok')", 0, "ok"),
        ("sys.argv = ['autobatch', '--help']; from autobatch.cli import main; main()", 0, "serve"),
        (
            "sys.argv = ['autobatch', 'serve', '--http-port', '0', '--grpc-port', '0', "
            "'--metrics-port', '0']; from autobatch.cli import main; main()",
            2,
            "needs the 'triton' extra",
        ),
    ],
)
def test_works_without_torch_and_pytriton(code, rc, expect):
    """The real check runs in .ci/run, in a venv holding only the core dependencies."""
    res = subprocess.run(
        [sys.executable, "-c", BLOCK + code], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == rc, res.stderr
    assert expect in res.stdout + res.stderr


def test_kill_takes_the_stubs_down_too():
    server = TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL])
    try:
        server.start()
        pgid = server.pid
        # Each stub's second argument is its shared-memory region, which only the server
        # removes: killed, it would leave it (1 MB each) in /dev/shm for good.
        regions = [Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[2].decode()
                   for p in group_members(pgid) if p != pgid]
        assert regions and all(Path("/dev/shm", r).exists() for r in regions), regions
        server.kill()
        with contextlib.suppress(ServeError):  # the assert below names the survivors
            poll_until(lambda: not group_members(pgid), timeout_s=10,
                       what=f"the processes of group {pgid} to exit")
        assert group_members(pgid) == []
        assert [r for r in regions if Path("/dev/shm", r).exists()] == []
        server.start()  # and it comes back on the same ports
        assert httpx.get(f"{server.urls.http}/v2/health/ready").status_code == 200
    finally:
        server.close()
    assert not os.path.exists(f"/proc/{pgid}")


def test_a_server_that_died_says_how_and_quotes_its_log():
    """A crash of tritonserver alone (SIGSEGV to its pid, its stub untouched): check_alive
    names the signal and quotes the log, where Triton's own crash report is; close() still
    takes the orphaned stub down."""
    server = TritonServer.on_free_ports(REPOSITORY, models=[EMULATOR_MODEL])
    # No core file from the server or its stubs (they inherit the limit) where dumps are on.
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        server.start()
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
        server.check_alive("while serving")
        pgid = server.pid
        assert pgid is not None
        os.kill(pgid, signal.SIGSEGV)
        poll_until(lambda: not server.running(), timeout_s=60, what="tritonserver to end")
        assert server.exit_status() == "was killed by signal 11 (SIGSEGV)"
        with pytest.raises(ServeError) as info:
            server.check_alive("during the test")
        message = str(info.value)
        assert message.startswith(f"tritonserver (pid {pgid}) was killed by signal 11 (SIGSEGV) "
                                  "during the test; last log lines: "), message
        assert "Signal (11) received." in message, message
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
        server.close()
    assert group_members(pgid) == []
