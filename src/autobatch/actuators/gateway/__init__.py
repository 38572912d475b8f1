"""Gateway weight shifting: swap profiles by moving traffic between loaded variants.

* :mod:`.core`: :class:`GatewayActuator` (guarded steps, rollback, reconcile),
  the pure step planner and guard verdict;
* :mod:`.haproxy`: HAProxy's Runtime API over the stats socket;
* :mod:`.kubernetes`: JSON patches of a Gateway API HTTPRoute or an Istio
  VirtualService, applied in-cluster or printed;
* :mod:`.settings`: ``actuator: {kind: gateway, ...}`` in the sidecar YAML.

Each variant's signals (for the guard, and combined for the policy) live in
:mod:`autobatch.signals.variants`; a real HAProxy for tests and benchmarks in
:mod:`autobatch.lab.haproxy`.
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
    parse_gateway_options,
)

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
    "Verdict",
    "WeightsBackend",
    "build_gateway_actuator",
    "holder",
    "judge",
    "parse_gateway_options",
    "parse_servers_state",
    "parse_stat_failures",
    "percents",
    "plan_shift",
    "shares",
]
