"""`autobatch demo`, the README's first command, end to end on a short step load.

The demo starts its own Triton (dense_mlp) and runs the load three times: with
the sidecar from examples/sidecar.yaml, with Triton's default held, and with
the ladder's last rung held. This checks that all of it comes up, runs every
phase of every run, reads the device time, reports the comparison and draws the
timeline. Whether the controller switches at the right moments is the sidecar
tests' business (tests/integration/test_sidecar.py), on a deterministic emulator.
"""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from autobatch.cli import app

from ..conftest import ROOT


def test_demo_runs_the_controller_and_two_static_profiles_and_compares_them(tmp_path):
    schedule = tmp_path / "short.yaml"
    schedule.write_text(yaml.safe_dump({"phases": [
        {"name": "low", "rate_rps": 20, "duration_s": 5},
        {"name": "high", "rate_rps": 120, "duration_s": 5},
        {"name": "low-again", "rate_rps": 20, "duration_s": 5},
    ]}))
    keep = tmp_path / "keep"
    plot = tmp_path / "timeline.png"
    result = CliRunner().invoke(
        app, ["demo", "--schedule", str(schedule), "--keep", str(keep), "--plot", str(plot), "--json",
              "--lead-in", "3"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    sidecar = yaml.safe_load((ROOT / "examples" / "sidecar.yaml").read_text())
    ladder_top = sidecar["profiles"]["ladder"][-1]
    assert list(data["runs"]) == ["controller", "triton-default", ladder_top]
    for name, run in data["runs"].items():
        assert [p["name"] for p in run["phases"]] == ["low", "high", "low-again"]
        assert run["failed_requests"] == 0
        for phase in run["phases"]:
            assert phase["requests"] > 0.8 * phase["target_rps"] * 5, (name, phase)
            assert sum(phase["profiles"].values()) > 0.99, phase  # the profile in force was known
            # Triton's compute times were read at every phase boundary
            assert phase["device_ms"] is not None and phase["device_ms"] > 0, (name, phase)
            assert phase["mean_batch"] >= 1.0
        assert run["device_ms"] > 0
    held = data["runs"]["triton-default"]["phases"]
    assert all(set(p["profiles"]) == {"triton-default"} for p in held)
    assert [c["against"] for c in data["comparisons"]] == ["triton-default", ladder_top]
    assert all(c["device_ratio"] > 0 for c in data["comparisons"])
    # The people's view went to stderr: the side-by-side table and the verdict lines.
    assert "the same load three ways" in result.stderr
    assert "controller vs triton-default: device time per request" in result.stderr
    assert "0 failed" in result.stderr
    assert "it runs 3 s at 20/s first, unmeasured" in " ".join(result.stderr.split())  # wraps
    # The sidecar ran: its decision log holds one line per window, each with a reason.
    lines = [json.loads(x) for x in (keep / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) >= 5 and all(x["decision"]["reason"] for x in lines)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
