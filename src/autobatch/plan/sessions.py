"""Live sessions, simulated: K latest-only streams sharing one device.

The streams, the policies (``oldest-first``, ``batch-waiting``,
``round-robin``) and the result type are :mod:`autobatch.sessions`, shared
with the SDK's :class:`~autobatch.sdk.SessionBatcher` and ``autobatch load
--sessions``, which run the same policy against a real Triton.

The model: one request is in flight at a time. A request of n frames keeps
the device busy for the service model's time of a batch of n; its result
reaches the client ``fixed_latency_ms`` later (the trip to the server and
back, the protocol, the client), and only then is the next request chosen
from the frames waiting at that moment. So the fixed latency is part of
every cycle, as it is for a latest-only client that waits for each answer
before it picks the freshest frames again.

It answers "how many streams can this device keep at F fps, and which
policy shares it fairly".

Pure: values in, values out.
"""

from __future__ import annotations

import math

import numpy as np

from autobatch.errors import ConfigError
from autobatch.plan.simulator import ServiceModel
from autobatch.sessions import (
    SESSION_POLICIES,
    SessionsResult,
    SessionStats,
    check_policy,
    choose,
    stream_frames,
    summarize_sessions,
)

__all__ = ["SESSION_POLICIES", "SessionStats", "SessionsResult", "simulate_sessions"]


def simulate_sessions(
    service: ServiceModel,
    sessions: int,
    fps: float,
    *,
    policy: str = "oldest-first",
    duration_s: float = 60.0,
    max_batch_size: int | None = None,
    seed: int = 0,
) -> SessionsResult:
    """Serve ``sessions`` streams at ``fps`` on one device for ``duration_s``.

    ``max_batch_size`` caps a ``batch-waiting`` batch (default: ``sessions``);
    ``seed`` draws the streams' phases (as :func:`autobatch.sessions.stream_frames`)
    and the service-time noise. Frames still waiting when the streams stop are
    served before the run ends; fps counts over ``duration_s``.
    """
    check_policy(policy)
    t_arr, sid_arr = stream_frames(sessions, fps, duration_s, seed)  # checks the three
    if max_batch_size is None:
        max_batch_size = sessions
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or (
        max_batch_size < 1
    ):
        raise ConfigError(f"max_batch_size = {max_batch_size!r}: must be an integer >= 1")
    t = t_arr.tolist()
    sid = sid_arr.tolist()
    n = len(t)
    frames = np.bincount(sid_arr, minlength=sessions).tolist()
    # A batch holds at most one frame per session: no table past that.
    cap = min(max_batch_size, sessions) if policy == "batch-waiting" else 1
    busy_s = [0.0] + [service.busy_ms(b) / 1000.0 for b in range(1, cap + 1)]
    curve_s = [0.0] + [service.curve_ms(b) / 1000.0 for b in range(1, cap + 1)]
    noise = [1.0] * n
    if service.noise_cv > 0:
        sigma = math.sqrt(math.log(1.0 + service.noise_cv**2))
        noise = np.random.default_rng([seed, 13]).lognormal(-sigma * sigma / 2, sigma, n).tolist()
    fixed_s = service.fixed_latency_ms / 1000.0

    waiting: list[float | None] = [None] * sessions
    n_waiting = 0
    overwritten = [0] * sessions
    latencies: list[list[float]] = [[] for _ in range(sessions)]
    batches = 0
    batch_total = 0
    busy_total = 0.0
    free_at = 0.0
    last = -1
    i = 0
    while True:
        # Frames that arrived while a request was out wait in (or overwrite) their slot.
        while i < n and t[i] <= free_at:
            s = sid[i]
            if waiting[s] is not None:
                overwritten[s] += 1
            else:
                n_waiting += 1
            waiting[s] = t[i]
            i += 1
        if n_waiting == 0:
            if i >= n:
                break
            free_at = t[i]
            continue
        ready = [(a, s, 1) for s, a in enumerate(waiting) if a is not None]
        chosen = choose(policy, ready, max_rows=cap, last=last)
        size = len(chosen)
        took = busy_s[size] + curve_s[size] * (noise[batches] - 1.0)
        # The answer is back at the client a fixed latency after the device is done;
        # only then is the next request chosen.
        end = free_at + took + fixed_s
        for s in chosen:
            latencies[s].append(end - waiting[s])  # type: ignore[operator]
            waiting[s] = None
        last = chosen[-1]
        n_waiting -= size
        batches += 1
        batch_total += size
        busy_total += took
        free_at = end

    span = max(duration_s, free_at)
    return summarize_sessions(
        policy=policy,
        sessions=sessions,
        fps=fps,
        duration_s=duration_s,
        frames=frames,
        overwritten=overwritten,
        latencies_ms=[np.array(ms) * 1000.0 for ms in latencies],
        batches=batches,
        batch_frames=batch_total,
        utilisation=busy_total / span,
        mean_request_ms=(busy_total / batches + fixed_s) * 1000.0 if batches else None,
    )
