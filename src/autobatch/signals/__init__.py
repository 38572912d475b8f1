"""Signals: turn Triton, Prometheus and accelerator metrics into trustworthy windows."""

from autobatch.signals.window import Window

__all__ = ["Window"]
