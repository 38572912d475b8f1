"""The CLI shell: usage errors are one line and exit 2; --help, Ctrl-C and AutobatchError as before."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import typer

from autobatch.errors import ConfigError

from ..helpers import run_main

shell = importlib.import_module("autobatch.cli.app")  # autobatch.cli.app is also the Typer app


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["simulate", "--rate", "fast"],
         "autobatch simulate: error: --rate = 'fast': Input should be a valid number"),
        (["simulate", "--rate", "5"], "autobatch simulate: error: Missing option '--curve'."),
        (["plan", "--curve", "c.yaml", "--slo-p99-ms", "50", "--instances", "two"],
         "autobatch plan: error: --instances = 'two': Input should be a valid integer"),
        (["run", "--dryrun"], "autobatch run: error: No such option: --dryrun"),
        (["load", "--model", "m", "--seed", "x"], "autobatch load: error: --seed = 'x'"),
        (["bogus"], "autobatch: error: No such command 'bogus'."),
    ],
)
def test_a_usage_error_is_one_line_naming_command_option_and_value(
    argv: list[str], line: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, out, err = run_main(monkeypatch, capsys, *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(line), lines[0]
    assert lines[0].endswith("--help')"), lines[0]


@pytest.mark.parametrize("argv", [["--help"], ["simulate", "--help"], ["load", "--help"]])
def test_help_still_exits_0(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    code, out, err = run_main(monkeypatch, capsys, *argv)
    assert code == 0
    assert out.startswith("Usage: autobatch")


def test_bare_autobatch_still_shows_the_help(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    code, out, err = run_main(monkeypatch, capsys)
    assert code == 2
    assert "Commands:" in err


def _one_command(body: Any) -> typer.Typer:
    tiny = typer.Typer()

    @tiny.command()
    def go() -> None:
        body()

    @tiny.command()
    def other() -> None:  # two commands, so the app is a group like autobatch's
        pass

    return tiny


def _interrupt() -> None:
    raise KeyboardInterrupt


def _abort() -> None:
    raise typer.Abort()


def _config_error() -> None:
    raise ConfigError("x.yaml: a = 1: must be 2")


@pytest.mark.parametrize(
    ("body", "code", "err"),
    [
        (_interrupt, 130, ""),
        (_abort, 1, "Aborted!"),
        (_config_error, 2, "autobatch: error: x.yaml: a = 1: must be 2"),
    ],
)
def test_ctrl_c_abort_and_config_errors_exit_as_before(
    body: Any, code: int, err: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(shell, "app", _one_command(body))
    got, _, stderr = run_main(monkeypatch, capsys, "go")
    assert got == code
    assert stderr.strip() == err
