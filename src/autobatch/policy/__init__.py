"""The policy: which profile should be live, and why. Pure: no clock, no I/O, no logging."""

from autobatch.policy.capacity import batch_estimate, device_ms_estimate, live_factor
from autobatch.policy.core import (
    Action,
    Decision,
    Observation,
    PolicySettings,
    Reason,
    State,
    capacity_rps,
    decide,
    floor_capacity_rps,
)
from autobatch.policy.forecast import Forecast, holt

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
