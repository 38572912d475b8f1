"""Triton Python-backend entry point; the model is built in autobatch.lab.example_models."""

from autobatch.lab.example_models import DenseMLPModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
