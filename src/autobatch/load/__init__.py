"""``autobatch load``: an open-loop load generator for Triton, and the measuring stick
of every benchmark.

Requests go out at the times a :class:`~autobatch.schedule.Schedule` draws,
whether or not earlier ones have come back, over gRPC (default) or HTTP. Each
request is recorded (phase, scheduled and actual send offset, latency,
outcome), and each phase is summarised: target vs achieved rate, throughput,
p50/p95/p99, failures by kind and the generator's own send lag, with a
``behind`` flag when the generator could not keep up.

>>> from autobatch.schedule import Schedule                      # doctest: +SKIP
>>> report = run_load("127.0.0.1:8001", "dense_mlp", Schedule.constant(100, 10))
>>> report.phases[0].p95_ms, report.phases[0].failures
"""

from autobatch.load.report import BehindLimits, LoadReport, PhaseStats, RequestRecord
from autobatch.load.runner import (
    DEFAULT_TIMEOUT_S,
    StopFlag,
    run_load,
    run_load_async,
    sent_trace,
    trace_schedule,
)
from autobatch.load.transport import PROTOCOLS, default_url

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "PROTOCOLS",
    "BehindLimits",
    "LoadReport",
    "PhaseStats",
    "RequestRecord",
    "StopFlag",
    "default_url",
    "run_load",
    "run_load_async",
    "sent_trace",
    "trace_schedule",
]
