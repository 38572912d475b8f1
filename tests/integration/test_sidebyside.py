"""The side-by-side harness for real: four modes at once, each on its own emulated GPU and Triton
behind its own HAProxy, the controllers as `autobatch run` processes, a co-tenant arriving
mid-run on every mode's device.

What it checks is the protocol, not the controller: every mode was sent the same trace from
the same instant, each device saw the same co-tenant load, and each mode's figures come from
its own device (work by context, busy by tenant, lateness) and Triton.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autobatch.cotenants import CoTenant
from autobatch.curve import BatchCurve
from autobatch.device.settings import DeviceSettings
from autobatch.lab.sidebyside import Comparison, StackSetup, modes_for
from autobatch.lab.sidebyside.run import run_group, verdicts
from autobatch.profiles import load_profiles
from autobatch.schedule import Phase, Schedule

from ..conftest import ROOT

# ResNet-50 v1.5 on a T4, mixed precision (NVIDIA's DeepLearningExamples inference table).
T4 = BatchCurve.from_mapping({"name": "t4-resnet50-fp16", "points": {1: 12.96, 2: 13.18, 4: 12.99, 8: 12.82,
                                                                     16: 15.8, 32: 29.54}})
MODEL = "emulated_accelerator"


def sidecar_config(tmp_path: Path) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "sidecar.yaml").read_text())
    data.update(model=MODEL, decision_log=str(tmp_path / "unused.jsonl"),
                profiles={"dir": str(ROOT / "profiles" / MODEL), "ladder": ["triton-default", "aggressive"]})
    data["policy"].pop("curve", None)
    data["server"] = {"listen": "127.0.0.1:0"}
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump(data))
    gateway = yaml.safe_load((ROOT / "examples" / "sidecar-gateway.yaml").read_text())
    gateway.update(model=MODEL, profiles=data["profiles"], server=data["server"],
                   decision_log=data["decision_log"])
    gateway["policy"].pop("curve", None)
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(gateway))
    return path


@pytest.mark.timeout(300)
def test_every_mode_runs_the_same_trace_at_once_on_its_own_device(tmp_path: Path) -> None:
    available = load_profiles(ROOT / "profiles" / MODEL)
    ladder = (available["triton-default"], available["aggressive"])
    schedule = Schedule((Phase("alone", 60, 4, cotenants=0), Phase("shared", 60, 4, cotenants=1),
                         Phase("alone-again", 60, 4, cotenants=0)))
    setup = StackSetup(model=MODEL, curve=T4, device=DeviceSettings(), ladder=ladder,
                       sidecar_config=sidecar_config(tmp_path), gateway_config=tmp_path / "gateway.yaml")
    cmp = Comparison(name="short", schedule=schedule, setup=setup,
                     modes=tuple(modes_for(ladder, ladder[0], ladder[0])), slo_p95_ms=60.0,
                     cotenants=(CoTenant("train", T4, 32, duty=0.9),), repeats=1, group_size=4, lead_in_s=3.0)
    group = run_group(cmp, cmp.modes, tmp_path / "run")
    modes = group["modes"]
    assert list(modes) == ["triton-default", "aggressive", "reload", "gateway"]
    # One instant, one trace: every mode's time 0 is the same, and each phase drew the same arrivals.
    t0 = [r["t0_wall"] for r in modes.values()]
    assert max(t0) - min(t0) < 0.5
    counts = {m: [p["requests"] for p in r["phases"]] for m, r in modes.items()}
    assert len({tuple(c) for c in counts.values()}) == 1, counts
    assert [p["name"] for p in modes["reload"]["phases"]] == ["lead-in", "alone", "shared", "alone-again"]
    for name, r in modes.items():
        measured = [p for p in r["phases"] if p["measured"]]
        assert all(p["device_ms"] and p["device_items"] > 0 for p in measured), name
        assert all(p["answers"] > 0 and p["lateness_mean_ms"] is not None for p in measured), name
        alone, shared, after = measured
        # the co-tenant ran on this mode's device in the shared phase only
        assert shared["busy_by_tenant"]["train"] > 0.2 > alone["busy_by_tenant"].get("train", 0.0), name
        assert after["busy_by_tenant"].get("train", 0.0) < shared["busy_by_tenant"]["train"], name
        (job,) = r["cotenants"]["cotenants"]
        assert job["completed"] > 0 and job["failed"] == 0, name
        assert sum(sum(p["failures"].values()) for p in r["phases"]) == 0, name
    for c in ("reload", "gateway"):
        assert len(modes[c]["decisions"]) >= 5 and all(d["reason"] for d in modes[c]["decisions"])
        assert all(sum(p["profiles"].values()) > 0.99 for p in modes[c]["phases"][1:]), c
    # Which variant served, from the device: only a profile in force then, or switched to, served.
    switches = [(d["t_s"], d["target"]) for d in modes["gateway"]["decisions"] if d["action"] == "switch"]
    start = 0.0
    for p in modes["gateway"]["phases"]:
        end = start + p["duration_s"]
        before = [t for ts, t in switches if ts < start - 3.0]
        may = {before[-1] if before else "triton-default"}
        may |= {t for ts, t in switches if start - 3.0 <= ts < end}
        assert p["served"] and set(p["served"]) <= may and sum(p["served"].values()) > 0.99, (p, switches)
        start = end
    assert all(p["served"] is None for m in modes if m != "gateway" for p in modes[m]["phases"])
    assert group["cpu_cores"]["ours"] > 0 and group["cpu_cores"]["device"] > 0
    by_mode = group["cpu_by_mode"]
    assert set(by_mode) == set(modes) and all(r["triton"] > 0 and r["load"] > 0 for r in by_mode.values())
    assert by_mode["reload"]["sidecar"] > 0 and by_mode["triton-default"]["sidecar"] == 0
    v = verdicts(cmp, [group])
    assert set(v["controllers"]) == {"reload", "gateway"}
    for c in v["controllers"].values():
        assert len(c["excess_points"]) == 3 and c["device_vs_default"] > 0
        assert [x["arrival_s"] for x in c["reactions"]] == [7.0]  # 3 s lead-in + 4 s alone
