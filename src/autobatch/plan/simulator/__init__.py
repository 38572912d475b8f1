"""A discrete-event model of Triton's dynamic batcher, fed by a batch curve.

The batch-formation rules are Triton's, read in its core
(``src/dynamic_batch_scheduler.cc``: ``Enqueue``, ``BatcherThread``,
``GetDynamicBatch``; ``src/scheduler_utils.cc``: ``PriorityQueue``;
``src/rate_limiter.cc``: ``PayloadSlotAvailable``), not a textbook queue.
Sizes count *rows*: a request's batch dimension (``Workload.rows``; one row
each unless given), as Triton's preferred sizes and ``max_batch_size`` do.

When the batcher looks, it walks the queued requests in order (priority level
1 first, then 2, ...; within a level, the main queue and then the requests a
``DELAY`` timeout moved behind it), adding each request's rows, and stops at
the first request that would take the batch past ``max_batch_size``: a request
is never split, it starts the next batch. On the way it notes the largest
preferred size it passes, or, if it goes past the largest preferred size
without passing one, the batch before that request. Then:

1. if it noted a size and the oldest request walked has not waited
   ``max_queue_delay``, it sends that batch;
2. else, if the walk reached ``max_batch_size`` or the largest preferred
   size, or the delay has run out, or the delay is 0, it sends everything walked;
3. else it waits: for the delay of the oldest request walked, for an arrival
   that brings the queued rows to the next preferred size, or for a request's
   queue-policy timeout.

An empty ``preferred_batch_size`` counts as ``[max_batch_size]`` (Triton fills
it in when it loads the config). Requests that arrive at the same instant are
in the queue together when the batcher looks; a burst from one client reaches
the server a request at a time, and schedules and traces are spread by
:data:`SEND_GAP_S` (measured) unless told otherwise.

*When* the batcher looks matters as much as what it does then. Without a queue
policy Triton forms the next batch (a "payload") while the instances are busy
and lets it grow until an instance takes it, and an arrival wakes the batcher
only under conditions that leave some arrivals out of a payload they could
have joined: the ``triton`` engine (``engines/triton.py``), the default. With
priority levels or a queue policy Triton cannot prefetch and forms a batch
only when an instance is free: the ``general`` engine (``engines/general.py``:
timeouts rejected or delayed when the walk meets them, and every 500 ms while
every instance is busy; ``max_queue_size`` refuses arrivals at the door until
a slot frees). The ``rules`` engine is the ``general`` one for a single queue
with no policy: the plain rules, the reference the others are checked
against. An engine refuses what it does not model (``triton`` and ``rules``:
priority levels and queue policies) rather than answer wrongly.

An instance is busy for the curve's time of the batch's rows (times lognormal
noise with ``noise_cv``, as the emulated accelerator does) plus a fixed cost
per batch and per request. Every latency also gets a fixed cost that does not
occupy the instance (the network, the client, the protocol). On a real server
those costs are not zero: :func:`autobatch.lab.fidelity.overheads_from_stats`
measures them from Triton's own timers, and the simulator takes them as plain
parameters rather than folding them into the curve.

On a shared device (a sharing model or co-tenants given) the instances are
not devices of their own: each is a context of one
:class:`autobatch.sharing.DeviceScheduler`, beside other models' instances and
co-tenant jobs, and a batch ends when that scheduler says (the ``shared``
engine, ``engines/shared.py``: the ``triton`` engine's batcher driven by one
event loop over every tenant). The emulated device process runs the same
scheduler.

The package: ``workload`` (what arrives), ``service`` (how long a batch
takes), ``engines/`` (``triton``, ``rules``, ``general``, ``shared``: arrivals
in, batches out; ``common`` holds the walk), ``results`` (what a run
produced), ``run`` (:func:`simulate`, which picks an engine and summarises)
and ``device`` (:func:`simulate_device`: several models and co-tenants on one
device). Pure: values in, values out.
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
