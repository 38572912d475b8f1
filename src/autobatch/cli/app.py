"""The typer app every command registers on, its two consoles, and the error boundary.

Every ``AutobatchError`` becomes one line on stderr and exit code 2; a command
parses its options, calls one library function and prints through
:mod:`autobatch.cli.views` (or ``--json``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import typer
from rich.console import Console

from autobatch.errors import AutobatchError

__all__ = ["app", "err", "main", "out", "print_json"]

app = typer.Typer(
    name="autobatch",
    help="Keep a Triton model inside its latency SLO while getting the most out of the device.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def _console(stream: Any) -> Console:
    """A console for ``stream``; piped into a file or a CI log, tables get 120 columns, not 80."""
    wide = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stream is sys.stderr, width=120 if wide else None)


out = _console(sys.stdout)
err = _console(sys.stderr)


def main() -> None:
    try:
        app()
    except AutobatchError as exc:
        err.print(f"autobatch: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=None, sort_keys=False) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    err.print(f"autobatch: warning: {message}", markup=False, highlight=False, soft_wrap=True)
