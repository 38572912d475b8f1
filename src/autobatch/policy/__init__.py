"""The policy: which profile should be live, and why. Pure: no clock, no I/O, no logging."""

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

__all__ = [
    "Action",
    "Decision",
    "Observation",
    "PolicySettings",
    "Reason",
    "State",
    "capacity_rps",
    "decide",
    "floor_capacity_rps",
]
