"""``autobatch watch`` as an operator runs it, against the real Triton."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.signals import Window

from ..helpers import autobatch


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return autobatch("watch", *args, timeout=timeout)


@pytest.mark.triton
def test_watch_json_lines_are_the_trace_format(triton: Any) -> None:
    r = run("--url", triton.urls.http, "--metrics-url", triton.urls.metrics,
            "--model", EMULATOR_MODEL, "--json", "--count", "2", "--interval", "0.3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    windows = [Window.from_dict(json.loads(line)) for line in lines]
    assert all(w.model == EMULATOR_MODEL and w.source == "triton" and not w.stale for w in windows)
    assert windows[0].end_s == windows[1].start_s
    assert json.loads(lines[0])["interval_s"] > 0


@pytest.mark.triton
def test_watch_table(triton: Any) -> None:
    r = run("--url", triton.urls.http, "--metrics-url", triton.urls.metrics,
            "--model", EMULATOR_MODEL, "--count", "1", "--interval", "0.2")
    assert r.returncode == 0, r.stderr
    assert "req/s" in r.stdout and "queue ms" in r.stdout and "p95 ms" in r.stdout


@pytest.mark.triton
def test_watch_unknown_model_is_one_line_and_exit_2(triton: Any) -> None:
    r = run("--url", triton.urls.http, "--metrics-url", triton.urls.metrics,
            "--model", "no_such_model", "--count", "1")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "no_such_model" in r.stderr


