"""Actuators: apply a profile by Triton reload, gateway weights, or not at all (dry run)."""

from autobatch.actuators.base import ActuationResult, Actuator

__all__ = ["ActuationResult", "Actuator"]
