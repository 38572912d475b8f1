"""benchmarks/setting_replay.py on a saved run: where a setting first decides otherwise."""

from __future__ import annotations

from ..conftest import ROOT, load_benchmark

LOGS = ROOT / "benchmarks" / "results" / "shared_gpu" / "logs"


def test_release_steps_back_where_the_run_held_on_dwell() -> None:
    """cotenants-step at 16:42, repeat 1's reload: a shared move 18 s into high-shared, and the
    way back held on the dwell into high-alone. With device.release it goes back 6 s sooner."""
    mod = load_benchmark("setting_replay")
    log = LOGS / "20261206-164209-cotenants-step-r1-g1-reload.jsonl.gz"
    assert mod.first_difference(log, "examples/sidecar-t4.yaml", (), []) is None  # as it ran
    row = mod.first_difference(log, "examples/sidecar-t4.yaml", (), ["policy.device.release=true"])
    assert row is not None and row["decides"] == "switch wait25 (efficiency)", row
    assert row["ran"] == "hold triton-default (dwell)" and row["run_switched_after_s"] == 6.0


def test_controller_logs_carry_each_variant_s_settings() -> None:
    mod = load_benchmark("setting_replay")
    logs = {name: sets for name, _, sets, _ in mod.controller_logs("20261206")}
    assert logs["20261206-164209-cotenants-step-r1-g1-reload.jsonl.gz"] == ""  # shipped
    assert logs["20261206-174217-cotenants-step-r1-g1-rr.jsonl.gz"] == "policy.device.release=true"
