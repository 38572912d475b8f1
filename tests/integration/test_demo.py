"""`autobatch demo`, the README's first command, end to end on a short step load.

The demo starts its own Triton (dense_mlp), the sidecar from examples/sidecar.yaml
and the load; this checks that all of it comes up, runs every phase, reports it
and draws the timeline. Whether the controller switches at the right moments is the
sidecar tests' business (tests/integration/test_sidecar.py), on a deterministic emulator.
"""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from autobatch.cli import app


def test_demo_runs_every_phase_and_reports_it(tmp_path):
    schedule = tmp_path / "short.yaml"
    schedule.write_text(yaml.safe_dump({"phases": [
        {"name": "low", "rate_rps": 20, "duration_s": 6},
        {"name": "high", "rate_rps": 120, "duration_s": 6},
        {"name": "low-again", "rate_rps": 20, "duration_s": 6},
    ]}))
    keep = tmp_path / "keep"
    plot = tmp_path / "timeline.png"
    result = CliRunner().invoke(
        app, ["demo", "--schedule", str(schedule), "--keep", str(keep), "--plot", str(plot), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [p["name"] for p in data["phases"]] == ["low", "high", "low-again"]
    assert data["failed_requests"] == 0
    for phase in data["phases"]:
        assert phase["requests"] > 0.8 * phase["target_rps"] * 6, phase
        assert sum(phase["profiles"].values()) > 0.99, phase  # the profile in force was known
    # The people's view went to stderr: the per-phase table and the closing line.
    assert "what each phase got" in result.stderr and "0 failed" in result.stderr
    # The sidecar ran: its decision log holds one line per window, each with a reason.
    lines = [json.loads(x) for x in (keep / "decisions.jsonl").read_text().splitlines()]
    assert len(lines) >= 5 and all(x["decision"]["reason"] for x in lines)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
