"""autobatch: keep a Triton model inside its latency SLO while getting the most out of the device.

Three parts share this package: the sidecar controller (``autobatch run``), the
planner (``autobatch plan``/``simulate``/``measure``/``replay``) and the SDK
(:mod:`autobatch.sdk`). Importing it needs neither torch nor nvidia-pytriton.
"""

from autobatch.errors import AutobatchError

__all__ = ["AutobatchError", "__version__"]
__version__ = "0.1.0"
