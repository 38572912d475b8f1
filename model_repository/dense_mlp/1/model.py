"""Triton Python-backend entry point; the model is built in autobatch.example_models."""

from autobatch.example_models import DenseMLPModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
