"""Signals: turn Triton, Prometheus and accelerator metrics into trustworthy windows.

* :class:`TritonSource` reads one Triton's ``/metrics`` and ``/v2/models/M/stats``
  and differences two samples into a :class:`Window`.
* :class:`PrometheusSource` builds the same window from PromQL, across every
  replica Prometheus scrapes.
* :func:`windows` polls either on an interval (async); :func:`watch` is its
  blocking front-end, used by ``autobatch watch``.
* :mod:`.factory` builds every source from typed :class:`SignalSettings`;
  :mod:`.variants` reads gateway variants, combined for the policy and one by
  one for the guard.

The pure core (:func:`parse_metrics`, :func:`parse_stats`, :func:`window_between`,
:class:`PromQL`, :func:`window_from_results`) does no I/O and reads no clock.
"""

from autobatch.signals.factory import (
    ReadTarget,
    SignalSettings,
    build_source,
    build_step_signals,
    build_variants_source,
    make_source,
)
from autobatch.signals.loop import SignalSource, watch, windows
from autobatch.signals.parse import (
    MetricsSample,
    StatsSample,
    parse_metrics,
    parse_stats,
    parse_utilization,
)
from autobatch.signals.prometheus import PrometheusSource, PromQL, window_from_results
from autobatch.signals.triton import TritonSample, TritonSource, window_between
from autobatch.signals.variants import VariantsSource, combine_windows
from autobatch.signals.window import StaleReason, Window

__all__ = [
    "MetricsSample",
    "PromQL",
    "PrometheusSource",
    "ReadTarget",
    "SignalSettings",
    "SignalSource",
    "StaleReason",
    "StatsSample",
    "TritonSample",
    "TritonSource",
    "VariantsSource",
    "Window",
    "build_source",
    "build_step_signals",
    "build_variants_source",
    "make_source",
    "parse_metrics",
    "parse_stats",
    "parse_utilization",
    "watch",
    "window_between",
    "window_from_results",
    "combine_windows",
    "windows",
]
