"""The sessions workload: K streams at F fps that keep only their latest frame."""

from __future__ import annotations

import pytest

from autobatch.curve import BatchCurve, load_curve
from autobatch.errors import ConfigError
from autobatch.plan.sessions import SESSION_POLICIES, simulate_sessions
from autobatch.plan.simulator import ServiceModel
from autobatch.sessions import choose, summarize_sessions

from ..conftest import CURVES

FPS = 30.0


def fits(curve, fps: float, sessions: int, policy: str) -> bool | None:
    """Can the device serve every session at ``fps`` under this policy?

    oldest-first and round-robin serve one frame at a time: K batch-1 times per
    frame period. batch-waiting serves every session in one batch: one batch of
    K per period.
    True under 95% of the period, False over 105%; in between (None) the random
    phases of the streams decide, and the test makes no claim.
    """
    period_ms = 1000.0 / fps
    one_batch = policy == "batch-waiting"
    need_ms = curve.estimate(sessions).ms if one_batch else sessions * curve.estimate(1).ms
    if need_ms < 0.95 * period_ms:
        return True
    if need_ms > 1.05 * period_ms:
        return False
    return None


# 512x288 fp16 loses with batching, 256x144 fp16 gains; each at a frame rate where some
# session counts fit and some do not.
CASES = [
    (curve, fps, k, policy)
    for curve, fps in (("laptop-512x288-fp16.yaml", 20.0), ("laptop-256x144-fp16.yaml", 60.0))
    for k in (3, 4, 6)
    for policy in SESSION_POLICIES
]


@pytest.mark.parametrize(("curve_file", "fps", "sessions", "policy"), CASES)
def test_sessions(curve_file, fps, sessions, policy):
    curve = load_curve(CURVES / curve_file)
    res = simulate_sessions(ServiceModel(curve), sessions, fps, policy=policy, duration_s=20.0,
                            seed=sessions)
    got = res.per_session_fps
    assert len(got) == sessions
    verdict = fits(curve, fps, sessions, policy)
    if verdict is True:
        # Every session gets its full frame rate (a last frame may straddle the end).
        assert min(got) == pytest.approx(fps, abs=0.1)
        assert res.overwritten_frac == 0.0
    elif verdict is False:
        assert sum(got) < 0.97 * sessions * fps
        assert res.overwritten_frac > 0.0
    if policy == "batch-waiting":
        # Every batch takes the latest frame of every waiting session: all are served alike.
        assert max(got) - min(got) <= 0.01 * max(got) + 0.1
    for s in res.per_session:
        assert s.delivered + s.overwritten <= s.frames
        assert s.latency is not None and s.latency.p50_ms >= curve.estimate(1).ms - 1e-6


def test_the_table_exercises_both_outcomes_under_every_policy():
    outcomes = {(p, fits(load_curve(CURVES / c), f, k, p)) for c, f, k, p in CASES}
    for policy in SESSION_POLICIES:
        assert {(policy, True), (policy, False)} <= outcomes


def test_oldest_first_on_a_no_gain_device_delivers_its_batch1_capacity():
    curve = load_curve(CURVES / "laptop-512x288-fp16.yaml")
    res = simulate_sessions(ServiceModel(curve), 6, FPS, policy="oldest-first", duration_s=20.0)
    assert res.throughput_rps == pytest.approx(1000.0 / curve.estimate(1).ms, rel=0.02)
    assert res.mean_batch == 1.0


def test_batching_pays_for_streams_on_a_gain_device():
    curve = load_curve(CURVES / "laptop-256x144-fp16.yaml")
    svc = ServiceModel(curve)
    one = simulate_sessions(svc, 12, 60.0, policy="oldest-first", duration_s=10.0)
    many = simulate_sessions(svc, 12, 60.0, policy="batch-waiting", duration_s=10.0)
    assert many.throughput_rps > 1.3 * one.throughput_rps
    assert many.mean_batch > 2


def test_json_fields():
    curve = load_curve(CURVES / "laptop-256x144-fp16.yaml")
    d = simulate_sessions(ServiceModel(curve), 3, FPS, policy="batch-waiting", duration_s=5.0).to_dict()
    assert {"throughput_rps", "latency_ms", "mean_batch", "per_session_fps"} <= set(d)
    assert {"p50", "p95", "p99"} <= set(d["latency_ms"])
    assert len(d["per_session_fps"]) == 3
    assert {"fps", "overwritten_frac", "latency_ms"} <= set(d["per_session"][0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"policy": "newest-first"}, "session_policy = 'newest-first'"),
        ({"sessions": 0}, "sessions = 0"),
        ({"fps": 0.0}, "fps = 0.0"),
    ],
)
def test_bad_session_inputs(kwargs, message):
    curve = load_curve(CURVES / "laptop-256x144-fp16.yaml")
    args = {"sessions": 3, "fps": 30.0, "policy": "oldest-first", **kwargs}
    with pytest.raises(ConfigError, match=message):
        simulate_sessions(ServiceModel(curve), args.pop("sessions"), args.pop("fps"), **args)


# -- the policy: which waiting frames go next (autobatch.sessions.choose) --------------------


@pytest.mark.parametrize(
    ("policy", "waiting", "max_rows", "last", "expected"),
    [
        # (arrived_s, session, rows) of every session with a frame waiting
        ("oldest-first", [(0.3, 0, 1), (0.1, 2, 1), (0.2, 1, 1)], 8, -1, [2]),
        ("oldest-first", [(0.1, 3, 1), (0.1, 1, 1)], 8, -1, [1]),  # a tie goes to the lower session
        ("oldest-first", [(0.3, 0, 1), (0.1, 2, 1)], 8, 2, [2]),  # served last or not: oldest wins
        ("round-robin", [(0.1, 0, 1), (0.3, 3, 1), (0.2, 2, 1)], 8, 0, [2]),  # next after 0, not oldest
        ("round-robin", [(0.1, 0, 1), (0.2, 2, 1)], 8, 2, [0]),  # past the highest: wraps around
        ("round-robin", [(0.1, 1, 1)], 8, 1, [1]),  # only the last one waits: it goes again
        ("round-robin", [(0.5, 4, 1), (0.1, 1, 1)], 8, -1, [1]),  # the first turn starts at 0
        ("batch-waiting", [(0.3, 0, 1), (0.1, 2, 1), (0.2, 1, 1)], 8, -1, [2, 1, 0]),  # oldest first
        ("batch-waiting", [(0.3, 0, 1), (0.1, 2, 1), (0.2, 1, 1)], 2, -1, [2, 1]),  # capped in rows
        # 3 + 2 rows > 4: the second frame starts the next batch; none overtakes it
        ("batch-waiting", [(0.1, 0, 3), (0.2, 1, 2), (0.3, 2, 1)], 4, -1, [0]),
        ("batch-waiting", [(0.1, 0, 6)], 4, -1, [0]),  # a frame above the cap still goes, alone
    ],
)
def test_choose(policy, waiting, max_rows, last, expected):
    assert choose(policy, waiting, max_rows=max_rows, last=last) == expected


def test_round_robin_is_fair_where_oldest_first_starves_a_session():
    # 6 streams at 30 fps on a device that serves ~100 frames/s one at a time.
    curve = load_curve(CURVES / "laptop-512x288-fp16.yaml")
    rr = simulate_sessions(ServiceModel(curve), 6, FPS, policy="round-robin", duration_s=20.0)
    of = simulate_sessions(ServiceModel(curve), 6, FPS, policy="oldest-first", duration_s=20.0)
    # The same device time goes to frames either way ...
    assert rr.throughput_rps == pytest.approx(of.throughput_rps, rel=0.02)
    assert rr.mean_batch == of.mean_batch == 1.0
    # ... but round-robin shares it out evenly, and oldest-first does not.
    assert max(rr.per_session_fps) - min(rr.per_session_fps) < 0.5
    assert min(of.per_session_fps) < 0.5 * min(rr.per_session_fps)


def test_the_fixed_latency_is_part_of_every_cycle():
    # One stream at 50 fps (20 ms apart) on a 10 ms device: it keeps up on its own,
    # but not once every answer takes 15 ms more to come back before the next frame is sent.
    curve = BatchCurve({1: 10.0, 2: 18.0})
    alone = simulate_sessions(ServiceModel(curve), 1, 50.0, duration_s=10.0)
    far = simulate_sessions(ServiceModel(curve, fixed_latency_ms=15.0), 1, 50.0, duration_s=10.0)
    assert alone.per_session[0].fps == pytest.approx(50.0, abs=0.1)
    assert alone.latency is not None and alone.latency.p50_ms == pytest.approx(10.0)
    # A frame every 20 ms, a cycle of 25 ms: every cycle serves the latest frame.
    assert far.per_session[0].fps == pytest.approx(1000.0 / 25.0, rel=0.03)
    assert far.overwritten_frac > 0.1
    assert far.latency is not None and far.latency.p50_ms >= 25.0 - 1e-9


def test_summarize_counts_every_frame_once():
    res = summarize_sessions(
        policy="round-robin", sessions=2, fps=10.0, duration_s=2.0, frames=[20, 20],
        overwritten=[5, 0], latencies_ms=[[10.0] * 14, [20.0] * 19], failed=[1, 1], batches=33,
        batch_frames=35, utilisation=None, measured=True,
    )
    assert [s.fps for s in res.per_session] == [7.0, 9.5]
    assert res.slowest_session_fps == 7.0
    assert res.mean_session_fps == pytest.approx(8.25)
    assert res.overwritten_frac == pytest.approx(5 / 40)
    assert res.failed == 2
    d = res.to_dict()
    assert d["measured"] is True and d["utilisation"] is None
    assert d["per_session"][0]["failed"] == 1
