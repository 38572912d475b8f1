"""Where a long run will write, checked before it starts: a bad ``--out``, ``--plot`` or
``--keep`` fails in a second with one line, not after minutes of measuring.

Missing folders are fine (the writers make them); what is refused is a path that
cannot be written whatever happens: a directory given for a file, a file given for
a folder, a folder inside a file, a folder without write permission.
"""

from __future__ import annotations

import os
from pathlib import Path

from autobatch.errors import ConfigError

__all__ = ["check_folder", "check_output"]


def _nearest_existing(p: Path) -> Path:
    return next((a for a in (p, *p.parents) if a.exists()), Path("."))


def _check_creatable(p: Path, field: str, given: Path) -> None:
    """``p`` (a folder that may not exist yet) can be made and written in."""
    base = _nearest_existing(p)
    if not base.is_dir():
        raise ConfigError(
            f"{field} = {str(given)!r}: {str(base)!r} is a file, not a folder",
            field=field, value=str(given),
        )
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{field} = {str(given)!r}: cannot write in {str(base)!r} (permission denied)",
            field=field, value=str(given),
        )


def check_output(path: str | Path, field: str) -> Path:
    """``path`` as a :class:`Path` if a file can be written there, else a ConfigError naming
    ``field`` and the path (its folders may be missing: the writer makes them)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(
            f"{field} = {str(p)!r}: is a directory: give a file name (in it, or elsewhere)",
            field=field, value=str(p),
        )
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(
            f"{field} = {str(p)!r}: the file is not writable (permission denied)",
            field=field, value=str(p),
        )
    _check_creatable(p.parent, field, p)
    return p


def check_folder(path: str | Path, field: str) -> Path:
    """``path`` as a :class:`Path` if it is a folder (or one can be made there) to write in,
    else a ConfigError naming ``field`` and the path."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(
            f"{field} = {str(p)!r}: is a file: give a folder (it is made if missing)",
            field=field, value=str(p),
        )
    _check_creatable(p, field, p)
    return p
