"""The ``autobatch`` command line, one module per command group.

* :mod:`.sidecar`: ``run``, ``status``;
* :mod:`.planner`: ``plan``, ``simulate``, ``replay``, ``render``;
* :mod:`.traffic`: ``load``, ``watch``;
* :mod:`.lab`: ``serve``, ``measure``, ``demo``;
* :mod:`.options`: the options several commands share;
* :mod:`.device`: ``device``, ``cotenants run``;
* :mod:`.views`: every table, live view and plot they print.
"""

from autobatch.cli import device, lab, planner, sidecar, traffic  # noqa: F401 - registers the commands
from autobatch.cli.app import app, main

__all__ = ["app", "main"]
