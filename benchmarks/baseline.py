"""The simulator as it was before issue 13's changes, loaded from git for side-by-side runs.

Commit 8399142 holds ``src/autobatch/plan/simulator.py`` as one module (before it
became a package and learnt rows, simultaneous arrivals and timeout rejections).
:func:`load` reads that file with ``git show`` and imports it under its own
name, so a benchmark can time or compare the old engines and the new ones in
one run on one machine. It needs the repository's history (a clone, not an
export); without it :func:`load` says so.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REV = "8399142"
PATH = "src/autobatch/plan/simulator.py"


def load(rev: str = REV) -> types.ModuleType:
    try:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{PATH}"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"cannot read the baseline simulator {rev}:{PATH} from git: {exc}") from None
    name = f"_simulator_baseline_{rev}"
    mod = types.ModuleType(name)
    mod.__file__ = f"{rev}:{PATH}"
    sys.modules[name] = mod  # dataclasses look their module up while the class is built
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod
