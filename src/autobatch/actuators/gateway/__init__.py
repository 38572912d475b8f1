"""Gateway weight shifting: swap profiles by moving traffic between loaded variants.

* :mod:`.steps`: the pure step planner (:func:`plan_shift`, shares, percents)
  and the guard's verdict (:func:`judge`);
* :mod:`.actuator`: :class:`GatewayActuator` (guarded steps, rollback,
  reconcile) and :class:`Guard`, the I/O around them;
* :mod:`.backend`: :class:`WeightsBackend`, what a gateway must offer, and
  :class:`GatewayFailure`;
* :mod:`.haproxy`: HAProxy's Runtime API over the stats socket;
* :mod:`.kubernetes`: JSON patches of a Gateway API HTTPRoute or an Istio
  VirtualService, applied in-cluster or printed;
* :mod:`.settings`: ``actuator: {kind: gateway, ...}`` in the sidecar YAML.

Each variant's signals (for the guard, and combined for the policy) live in
:mod:`autobatch.signals.variants`; a real HAProxy for tests and benchmarks in
:mod:`autobatch.lab.haproxy`.
"""

from autobatch.actuators.gateway.actuator import GatewayActuator, Guard
from autobatch.actuators.gateway.backend import GatewayFailure, WeightsBackend
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
from autobatch.actuators.gateway.steps import (
    DEFAULT_STEPS,
    GuardSettings,
    StepRecord,
    Variant,
    Verdict,
    holder,
    judge,
    percents,
    plan_shift,
    shares,
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
