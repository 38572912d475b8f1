"""The typer app every command registers on, its two consoles, and the error boundary.

Every ``AutobatchError`` becomes one line on stderr and exit code 2, and so does
a usage error (an unknown option, a missing one, a value of the wrong type):
``autobatch simulate: error: --rate = 'fast': ... (see 'autobatch simulate --help')``.
A command parses its options, calls one library function and prints through
:mod:`autobatch.cli.views` (or ``--json``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from autobatch.errors import AutobatchError, ConfigError

try:  # typer vendors click from 0.2x on; earlier, it raised click's own exceptions
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - an older typer
    from click import exceptions as click_errors  # type: ignore[no-redef]

__all__ = ["app", "err", "main", "out", "print_json", "usage_line"]

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


def _bad_value(exc: click_errors.ClickException) -> Any:
    """The value a ``BadParameter`` refused, when typer kept it (its pydantic error does)."""
    errors = getattr(exc.__cause__, "errors", None)
    if not callable(errors):
        return None
    try:
        first = errors()[0]
    except (IndexError, TypeError, ValueError):
        return None
    return first.get("input") if isinstance(first, dict) else None


def usage_line(exc: click_errors.ClickException) -> str:
    """Click's error as one line: the command, the option, the value and what is wrong.

    Click prints three lines (usage, "Try --help", the error); here they are one, as every
    other bad input gets.
    """
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "autobatch"
    param = getattr(exc, "param", None)
    value = _bad_value(exc)
    if isinstance(exc, click_errors.BadParameter) and param is not None and value is not None and param.opts:
        message = f"{'/'.join(param.opts)} = {value!r}: {exc.message}"
    else:
        message = exc.format_message()
    if isinstance(exc, click_errors.UsageError):
        message += f" (see '{where} --help')"
    return " ".join(f"{where}: error: {message}".split())


_NO_ARGS: Any = getattr(click_errors, "NoArgsIsHelpError", ())
"""Bare ``autobatch`` (click >= 8.2 raises it): shown as the help it carries."""


def main() -> None:
    try:
        # Not standalone: click would print a usage error on three lines and exit itself.
        code = app(prog_name="autobatch", standalone_mode=False)
    except _NO_ARGS as exc:
        exc.show()  # bare `autobatch`: the help, as ever
        sys.exit(exc.exit_code)
    except click_errors.ClickException as exc:
        err.print(usage_line(exc), markup=False, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("Aborted!", markup=False, highlight=False)
        sys.exit(1)
    except AutobatchError as exc:
        err.print(f"autobatch: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    # Not standalone, click returns what an exit asked for (--help: 0; Ctrl-C: 130)
    # instead of exiting; a command itself returns None.
    if isinstance(code, int):
        sys.exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=None, sort_keys=False) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    err.print(f"autobatch: warning: {message}", markup=False, highlight=False, soft_wrap=True)


def restricted_api(header: str | None, key_file: Path | None) -> Any:
    """``--restricted-api-header`` and ``--restricted-api-key-file`` as a
    :class:`~autobatch.access.RestrictedApi` (both or neither); errors name the flags."""
    from autobatch.access import RestrictedApi

    if header is None and key_file is None:
        return None
    if header is None or key_file is None:
        given, missing = (("--restricted-api-header", "--restricted-api-key-file") if key_file is None
                          else ("--restricted-api-key-file", "--restricted-api-header"))
        raise ConfigError(f"{given} needs {missing} too: Triton's restricted APIs take a header and its key")
    return RestrictedApi.from_file(header, key_file, setting="--restricted-api")
