"""A discrete-event model of Triton's dynamic batcher, fed by a batch curve.

The batch-formation rules are Triton's, read in its core
(``dynamic_batch_scheduler.cc``, ``scheduler_utils.cc``, ``rate_limiter.cc``),
not a textbook queue; sizes count *rows*, a request's batch dimension, as
Triton's preferred sizes and ``max_batch_size`` do. The rules, each with the
table test that holds it: docs/planner.md, "Batch formation: Triton's rules,
and where they come from".

Three engines, because *when* the batcher looks matters as much as what it
does then: ``triton`` (the default: payloads formed while instances are busy),
``general`` (priority levels, queue policies: a batch only when an instance is
free) and ``rules`` (``general`` for one plain queue: the reference). An engine
refuses what it does not model rather than answer wrongly.

An instance is busy for the curve's time of the batch's rows (lognormal noise,
``noise_cv``) plus fixed costs per batch and per request; every latency also
gets a fixed cost that does not occupy the instance (network, client), which
:func:`autobatch.lab.fidelity.overheads_from_stats` measures on a real server.

On a shared device (a sharing model or co-tenants given) each instance is a
context of one :class:`autobatch.sharing.DeviceScheduler`, beside other
models' instances and co-tenant jobs: the ``shared`` engine, the ``triton``
batcher driven by one event loop over every tenant.

The package: ``workload`` (what arrives), ``service`` (how long a batch
takes), ``engines/`` (arrivals in, batches out; ``common`` holds the walk),
``results``, ``run`` (:func:`simulate`) and ``device`` (:func:`simulate_device`:
several models and co-tenants on one device). Pure: values in, values out.
"""

from autobatch.plan.simulator.device import (
    DeviceRun,
    ModelLoad,
    SharedDevice,
    load_shared_device,
    simulate_device,
)
from autobatch.plan.simulator.results import (
    CoTenantResult,
    DevicePhase,
    DeviceShare,
    LatencyStats,
    PhaseResult,
    PriorityResult,
    SimResult,
    device_ms_per_request,
)
from autobatch.plan.simulator.run import ENGINES, simulate
from autobatch.plan.simulator.service import ServiceModel
from autobatch.plan.simulator.workload import (
    SEND_GAP_S,
    Workload,
    build_workload,
    spread_same_times,
    stream_frames,
)

__all__ = [
    "ENGINES",
    "SEND_GAP_S",
    "CoTenantResult",
    "DevicePhase",
    "DeviceRun",
    "DeviceShare",
    "LatencyStats",
    "ModelLoad",
    "PhaseResult",
    "PriorityResult",
    "ServiceModel",
    "SharedDevice",
    "SimResult",
    "Workload",
    "build_workload",
    "device_ms_per_request",
    "load_shared_device",
    "simulate",
    "simulate_device",
    "spread_same_times",
    "stream_frames",
]
