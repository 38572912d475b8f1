"""The policy: which profile should be live, and why. Pure: no clock, no I/O, no logging."""

from autobatch.policy.capacity import (
    batch_estimate,
    capacity_rps,
    device_ms_estimate,
    floor_capacity_rps,
    live_factor,
)
from autobatch.policy.core import decide
from autobatch.policy.forecast import Forecast, holt
from autobatch.policy.settings import PolicySettings
from autobatch.policy.types import Action, Decision, Observation, Reason, State

__all__ = [
    "Action",
    "Decision",
    "Forecast",
    "Observation",
    "PolicySettings",
    "Reason",
    "State",
    "batch_estimate",
    "capacity_rps",
    "decide",
    "device_ms_estimate",
    "floor_capacity_rps",
    "holt",
    "live_factor",
]
