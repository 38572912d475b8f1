"""A discrete-event model of Triton's dynamic batcher, fed by a batch curve.

The batch-formation rules are Triton's (core ``dynamic_batch_scheduler.cc``,
``scheduler_utils.cc``), not a textbook queue. When requests are queued, the
batcher walks the queue in arrival order (priority level 1 first, then 2, ...;
within a level, the main queue and then the requests a ``DELAY`` timeout moved
behind it) and takes up to ``max_batch_size`` requests. Then:

1. if the oldest request taken has waited ``max_queue_delay`` or longer, it
   sends everything it took (up to ``max_batch_size``);
2. else, if a preferred size can be formed, it sends the largest preferred
   size that fits;
3. else, with ``max_queue_delay`` 0, it sends everything it took;
4. else it waits, until an arrival completes a preferred size (sent at once)
   or the oldest request's delay runs out.

An empty ``preferred_batch_size`` counts as ``[max_batch_size]`` (Triton fills
it in when it loads the config). Batches go to whichever instance is free
first. Queue policies apply as in Triton: a level's ``max_queue_size`` rejects
arrivals at the door; a request older than its level's timeout is rejected
(``REJECT``) or moved behind the level's other requests (``DELAY``) when the
walk reaches it.

*When* the batcher looks matters as much as what it does then. Triton forms
the next batch (a "payload") while the instances are busy and lets it grow
until an instance takes it, but an arrival wakes the batcher only under
conditions that leave some arrivals out of a payload they could have joined.
The ``triton`` engine models that thread (see ``engines/triton.py``); it is the
default, and its p50 and p95 are within 15% of the real server's (the
fidelity test). The ``rules`` engine applies the rules above whenever an
instance is free, a simpler reference; the ``general`` engine does the same
with priority levels and queue policies.

An instance is busy for the curve's time of the batch (times lognormal noise
with ``noise_cv``, as the emulated accelerator does) plus a fixed cost per
batch and per request. Every latency also gets a fixed cost that does not
occupy the instance (the network, the client, the protocol). On a real server
those costs are not zero: :func:`autobatch.lab.measure.overheads_from_stats`
measures them from Triton's own timers, and the simulator takes them as plain
parameters rather than folding them into the curve.

The package: ``workload`` (what arrives), ``service`` (how long a batch
takes), ``engines/`` (``triton``, ``rules``, ``general``: arrivals in, batches
out), ``results`` (what a run produced) and ``run`` (:func:`simulate`, which
picks an engine and summarises). Pure: values in, values out.
"""

from autobatch.plan.simulator.results import LatencyStats, PhaseResult, PriorityResult, SimResult
from autobatch.plan.simulator.run import ENGINES, simulate
from autobatch.plan.simulator.service import ServiceModel
from autobatch.plan.simulator.workload import Workload, stream_frames

__all__ = [
    "ENGINES",
    "LatencyStats",
    "PhaseResult",
    "PriorityResult",
    "ServiceModel",
    "SimResult",
    "Workload",
    "simulate",
    "stream_frames",
]
