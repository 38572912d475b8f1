"""Side-by-side comparisons on the emulated GPU: every mode at once, each on its own device.

:mod:`.layout` (the modes, their groups, the shared trace; pure), :mod:`.stack`
(one mode's device, Triton, HAProxy and sidecar), :mod:`.worker` (one mode's
load, co-tenants and readings, a process of its own), :mod:`.readings` (the
device's own figures), :mod:`.run` (repeats, groups, verdicts). The verdicts
themselves are :mod:`autobatch.lab.compare`'s. docs/benchmarks.md says how.
"""

from autobatch.lab.sidebyside.layout import BASELINE, ModeSpec, group_modes, modes_for
from autobatch.lab.sidebyside.run import Comparison, run_comparison
from autobatch.lab.sidebyside.stack import StackSetup, check_sidecar_configs

__all__ = ["BASELINE", "Comparison", "ModeSpec", "StackSetup", "check_sidecar_configs", "group_modes",
           "modes_for", "run_comparison"]
