"""``autobatch watch`` as an operator runs it, against the real Triton."""

from __future__ import annotations

import subprocess

import pytest

from autobatch.lab.serve import free_port

from ..helpers import autobatch


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return autobatch("watch", *args, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["--interval", "0"], "autobatch: error: interval_s = 0"),
        (["--count", "0"], "autobatch: error: count = 0"),
        (["--source", "kafka"], "autobatch: error: source = 'kafka'"),
        (["--selector", 'job="x"'], "autobatch: error: selector"),
        (["--url", "ftp://x"], "autobatch: error: url = 'ftp://x'"),
    ],
)
def test_watch_bad_input(args: list[str], start: str) -> None:
    base = {"--url": "127.0.0.1:1", "--model": "m"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    r = run(*[x for kv in base.items() for x in kv], timeout=30)
    assert r.returncode == 2
    assert r.stderr.startswith(start) and r.stderr.count("\n") == 1, r.stderr


def test_watch_unreachable_is_one_line_and_exit_2() -> None:
    port = free_port()
    r = run("--url", f"127.0.0.1:{port}", "--metrics-url", f"127.0.0.1:{port}/metrics",
            "--model", "m", "--count", "1", timeout=30)
    assert r.returncode == 2
    assert r.stderr.startswith("autobatch: error: cannot reach") and r.stderr.count("\n") == 1
