"""Actuators: apply a profile by Triton reload, gateway weights, or not at all (dry run)."""

from autobatch.actuators.base import REASONS, ActuationResult, Actuator
from autobatch.actuators.dry_run import DryRunActuator
from autobatch.actuators.triton import TritonReloadActuator

__all__ = ["REASONS", "ActuationResult", "Actuator", "DryRunActuator", "TritonReloadActuator"]
