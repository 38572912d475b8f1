"""The planner: batch curves, the SLO budget, the batcher simulator, replay.

Pure: functions take values and return values; no clock, no network, no logging.
"""
