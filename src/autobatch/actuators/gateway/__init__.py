"""Gateway weight shifting: swap profiles by moving traffic between loaded variants.

* :mod:`.core`: :class:`GatewayActuator` (guarded steps, rollback, reconcile),
  the pure step planner and guard verdict;
* :mod:`.haproxy`: HAProxy's Runtime API over the stats socket;
* :mod:`.kubernetes`: JSON patches of a Gateway API HTTPRoute or an Istio
  VirtualService, applied in-cluster or printed;
* :mod:`.signals`: each variant's signals, and the combined window the policy sees;
* :mod:`.settings`: ``actuator: {kind: gateway, ...}`` in the sidecar YAML;
* :mod:`.launch`: a real HAProxy for tests and benchmarks, and its two setups.
"""

from autobatch.actuators.gateway.core import (
    DEFAULT_STEPS,
    GatewayActuator,
    GatewayFailure,
    Guard,
    GuardSettings,
    StepRecord,
    Variant,
    Verdict,
    WeightsBackend,
    holder,
    judge,
    percents,
    plan_shift,
    shares,
)
from autobatch.actuators.gateway.haproxy import (
    HAProxyRuntime,
    HAProxyWeights,
    ServerState,
    parse_servers_state,
    parse_stat_failures,
)
from autobatch.actuators.gateway.settings import (
    GatewaySettings,
    build_gateway_actuator,
    build_gateway_source,
    parse_gateway_options,
)
from autobatch.actuators.gateway.signals import VariantsSource, combine_windows

__all__ = [
    "DEFAULT_STEPS",
    "GatewayActuator",
    "GatewayFailure",
    "GatewaySettings",
    "Guard",
    "GuardSettings",
    "HAProxyRuntime",
    "HAProxyWeights",
    "ServerState",
    "StepRecord",
    "Variant",
    "VariantsSource",
    "Verdict",
    "WeightsBackend",
    "build_gateway_actuator",
    "build_gateway_source",
    "combine_windows",
    "holder",
    "judge",
    "parse_gateway_options",
    "parse_servers_state",
    "parse_stat_failures",
    "percents",
    "plan_shift",
    "shares",
]
