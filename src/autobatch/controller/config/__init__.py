"""The sidecar's config: the YAML file read into frozen typed settings.

* :mod:`.settings`: :class:`SidecarConfig` and its groups (triton, actuator,
  replicas, server), and :data:`RANGES`, the range of every number;
* :mod:`.parse`: :func:`load_sidecar_config`, one small parser per settings
  group, each bad value one line naming the file, the field, the value and
  what is allowed (``ConfigError``, exit code 2) before anything starts.
"""

from autobatch.controller.config.parse import load_sidecar_config, parse_listen, sidecar_config_from_mapping
from autobatch.controller.config.settings import (
    RANGES,
    READ_TIMEOUT_S,
    ActuatorSettings,
    ReplicaSettings,
    ServerSettings,
    SidecarConfig,
    TritonEndpoints,
)

__all__ = [
    "RANGES",
    "READ_TIMEOUT_S",
    "ActuatorSettings",
    "ReplicaSettings",
    "ServerSettings",
    "SidecarConfig",
    "TritonEndpoints",
    "load_sidecar_config",
    "parse_listen",
    "sidecar_config_from_mapping",
]
