"""`autobatch demo`, the README's first command, end to end on a short schedule.

The demo runs the controller, Triton's default and the ladder's last rung at the same time,
each on its own emulated GPU with the same co-tenant arriving mid-run. This checks that all of
it comes up, runs every phase of every run, reads each GPU's busy time by tenant, reports the
comparison and draws the PNG. Whether the controller switches at the right moments is the
sidecar tests' business (tests/integration/test_sidecar.py), on a deterministic emulator.
"""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from autobatch.cli import app

from ..conftest import ROOT


def test_demo_runs_the_controller_and_two_static_profiles_at_once_and_compares_them(tmp_path):
    schedule = tmp_path / "short.yaml"
    schedule.write_text(yaml.safe_dump({
        "cotenants": [{"name": "train", "curve": str(ROOT / "curves" / "t4-resnet50-fp16.yaml"),
                       "batch_size": 32, "duty": 0.9}],
        "phases": [{"name": "alone", "rate_rps": 60, "duration_s": 5, "cotenants": 0},
                   {"name": "shared", "rate_rps": 60, "duration_s": 5, "cotenants": 1},
                   {"name": "alone-again", "rate_rps": 60, "duration_s": 5, "cotenants": 0}]}))
    keep = tmp_path / "keep"
    plot = tmp_path / "demo.png"
    result = CliRunner().invoke(
        app, ["demo", "--schedule", str(schedule), "--keep", str(keep), "--plot", str(plot), "--json",
              "--lead-in", "3"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    sidecar = yaml.safe_load((ROOT / "examples" / "sidecar-t4.yaml").read_text())
    ladder_top = sidecar["profiles"]["ladder"][-1]
    assert list(data["runs"]) == ["controller", "triton-default", ladder_top]
    requests = set()
    for name, run in data["runs"].items():
        assert [p["name"] for p in run["phases"]] == ["lead-in", "alone", "shared", "alone-again"]
        requests.add(tuple(p["requests"] for p in run["phases"]))
        assert sum(sum(p["failures"].values()) for p in run["phases"]) == 0, name
        for phase in run["phases"][1:]:
            assert sum(phase["profiles"].values()) > 0.99, phase  # the profile in force was known
            assert phase["device_ms"] > 0 and phase["busy_by_tenant"]["model"] > 0, (name, phase)
        alone, shared = run["phases"][1], run["phases"][2]
        assert shared["busy_by_tenant"]["train"] > alone["busy_by_tenant"].get("train", 0.0), name
        assert run["cotenants"]["cotenants"][0]["completed"] > 0, name
        assert run["timeline"] and all("busy_by_tenant" in s for s in run["timeline"])
    assert len(requests) == 1  # the same trace for every run
    held = data["runs"]["triton-default"]["phases"]
    assert all(set(p["profiles"]) == {"triton-default"} for p in held[1:])
    assert [c["against"] for c in data["comparisons"]] == ["triton-default", ladder_top]
    assert all(c["device_ratio"] > 0 and c["cotenant_ratio"] > 0 for c in data["comparisons"])
    # The people's view went to stderr: the side-by-side table and the verdict lines.
    assert "the same requests three ways, at once" in result.stderr
    assert "controller vs triton-default: device time per request" in result.stderr
    assert "0 failed" in result.stderr
    # The sidecar ran: its decision log holds one line per window, each with a reason.
    log = keep / "run" / "controller" / "decisions.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) >= 5 and all(x["decision"]["reason"] for x in lines)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
