"""`autobatch plan`, `simulate` and `measure` as an operator runs them."""

from __future__ import annotations

import json

import pytest

from autobatch.curve import BatchCurve, load_curve
from autobatch.lab.measure import write_curve
from autobatch.lab.serve import EMULATOR_MODEL
from autobatch.profiles import load_profiles

from ..conftest import CURVES, PROFILES, ROOT
from ..helpers import assert_bad_input, autobatch, run_main

FP16_512 = str(CURVES / "laptop-512x288-fp16.yaml")
FP16_256 = str(CURVES / "laptop-256x144-fp16.yaml")




def test_plan_text_shows_equation_gains_verdict_and_candidates():
    r = autobatch("plan", "--curve", FP16_512, "--slo-p99-ms", "100", "--network-ms", "10",
                  "--rate", "50")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "budget = SLO p99 - time of one batch at the max batch size - network" in text
    assert "100 - batch of 8 50 - network 10 = 40 ms" in text  # the article's example
    assert "batching lowers throughput on this device: serve batch 1, do not wait" in text
    assert "EXTRAPOLATED" in text and "interpolated" in text
    assert "Largest batch whose run time fits: 7" in text
    assert "latency-soft" in text and "aggressive" in text and "recommended" in text


def test_plan_says_whether_switching_pays_over_a_schedule_with_a_ladder():
    args = ("plan", "--curve", str(CURVES / "dense_mlp-cpu.yaml"), "--slo-p99-ms", "60",
            "--network-ms", "2", "--rate", "350", "--instances", "2",
            "--schedule", str(ROOT / "examples" / "schedules" / "step.yaml"),
            "--ladder", str(PROFILES / "dense_mlp"))
    r = autobatch(*args)
    assert r.returncode == 0, r.stderr
    assert "Does switching pay here?" in r.stdout and "Does switching pay?" in r.stdout
    assert "triton-default" in r.stdout and "oracle:" in r.stdout
    r = autobatch(*args, "--json")
    sw = json.loads(r.stdout)["switching"]
    assert sw["instances"] == 2 and sw["schedule"].endswith("step.yaml")
    assert [s["name"] for s in sw["statics"]][0] == "triton-default"
    assert sw["verdict"]["kind"] in ("pays", "needed", "latency", "static", "default", "overloaded")
    # 2 instances of dense_mlp at 350/s: switching uses well under Triton's default's device time
    default = sw["statics"][0]["device_ms"]
    assert sw["oracle"]["device_ms"] < 0.8 * default
    bad = autobatch("plan", "--curve", str(CURVES / "dense_mlp-cpu.yaml"), "--slo-p99-ms", "60",
                    "--network-ms", "2", "--reaction-s", "-1")
    assert bad.returncode == 2 and "reaction_s = -1" in bad.stderr


def test_plan_json_write_profiles_and_plot(tmp_path):
    out_dir = tmp_path / "profiles" / "mymodel"
    png = tmp_path / "plan.png"
    r = autobatch("plan", "--curve", FP16_256, "--slo-p99-ms", "100", "--network-ms", "10",
                  "--rate", "250", "--json", "--write-profiles", str(out_dir), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["verdict"]["batching_pays"] is True
    assert plan["equation"]["budget_ms"] == pytest.approx(100 - 9.29 - 10)
    names = [c["name"] for c in plan["candidates"]]
    assert len(names) >= 2
    for c in plan["candidates"]:
        assert {"p50", "p95", "p99"} <= set(c["at_load"]["latency_ms"])
        assert c["at_load"]["throughput_rps"] > 0 and c["at_load"]["mean_batch"] >= 1
        assert c["max_rate_rps"] > 0
    # The sidecar's loader reads the written profiles back, names and knobs intact.
    loaded = load_profiles(out_dir)
    assert sorted(loaded) == sorted(names)
    for c in plan["candidates"]:
        assert loaded[c["name"]].preferred_batch_size == tuple(
            c["profile"]["dynamic_batching"]["preferred_batch_size"]
        )
        assert loaded[c["name"]].model == "mymodel"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second run does not overwrite them without --force.
    again = autobatch("plan", "--curve", FP16_256, "--slo-p99-ms", "100", "--network-ms", "10",
                      "--rate", "250", "--write-profiles", str(out_dir))
    assert again.returncode == 2
    assert "already exists; overwrite it with force" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--curve", "nope.yaml", "--slo-p99-ms", "100", "--network-ms", "10"], "nope.yaml: file not found"),
        (["--curve", FP16_256, "--slo-p99-ms", "-5", "--network-ms", "10"], "slo_p99_ms = -5"),
        (["--curve", FP16_256, "--slo-p95-ms", "-5", "--network-ms", "10"], "slo_p95_ms = -5"),
        (["--curve", FP16_256, "--network-ms", "10"], "--slo-p95-ms / --slo-p99-ms: give exactly one"),
        (["--curve", FP16_256, "--slo-p95-ms", "60", "--slo-p99-ms", "100", "--network-ms", "10"],
         "--slo-p95-ms / --slo-p99-ms: give exactly one"),
        (["--curve", FP16_256, "--slo-p99-ms", "100", "--network-ms", "10", "--rate", "5",
          "--sessions", "2", "--fps", "5"], "give one load"),
        (["--curve", FP16_256, "--slo-p99-ms", "100", "--network-ms", "10", "--margin", "1.5"],
         "margin = 1.5"),
    ],
)
def test_plan_bad_input_is_one_line_and_exit_2(args, message):
    r = autobatch("plan", *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--lead-in", "-1"], "lead_in = -1: must be "),  # the exact line: test_lab_demo.py
     (["--instances", "0"], "instances = 0: must be an integer >= 1")],
)
def test_demo_bad_input_is_one_line_and_exit_2_before_starting_triton(args, message):
    r = autobatch("demo", *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_simulate_json_poisson_with_a_profile():
    r = autobatch("simulate", "--curve", FP16_256, "--profile",
                  str(PROFILES / EMULATOR_MODEL / "aggressive.yaml"), "--rate", "300",
                  "--requests", "20000", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["requests"] == 20000 and d["completed"] == 20000
    assert d["throughput_rps"] == pytest.approx(300, rel=0.03)
    assert d["latency_ms"]["p50"] <= d["latency_ms"]["p95"] <= d["latency_ms"]["p99"]
    assert d["mean_batch"] > 1 and d["engine"] == "triton"


def test_simulate_the_load_schedule_format(tmp_path):
    sched = tmp_path / "step.yaml"
    sched.write_text("phases:\n  - {name: low, rate_rps: 50, duration_s: 5}\n"
                     "  - {name: high, rate_rps: 350, duration_s: 5, arrival: bursty, burst_size: 4}\n")
    r = autobatch("simulate", "--curve", FP16_256, "--preferred", "2,4", "--max-batch-size", "8",
                  "--delay-us", "2000", "--schedule", str(sched), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert [p["name"] for p in d["phases"]] == ["low", "high"]
    assert d["phases"][0]["mean_batch"] < d["phases"][1]["mean_batch"]


def test_simulate_sessions_json_has_per_session_fps():
    r = autobatch("simulate", "--curve", FP16_512, "--sessions", "4", "--fps", "30",
                  "--session-policy", "batch-waiting", "--duration", "10", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["per_session_fps"]) == 4
    assert {"throughput_rps", "latency_ms", "mean_batch"} <= set(d)


def test_simulate_priority_levels_text(tmp_path):
    prof = tmp_path / "prio.yaml"
    prof.write_text("name: prio\nmax_batch_size: 8\ndynamic_batching:\n"
                    "  preferred_batch_size: [4, 8]\n  max_queue_delay_microseconds: 2000\n"
                    "  priority_levels: 2\n  default_priority_level: 2\n")
    r = autobatch("simulate", "--curve", FP16_256, "--profile", str(prof), "--rate", "400",
                  "--duration", "10", "--priority-mix", "1:0.2,2:0.8")
    assert r.returncode == 0, r.stderr
    assert "Per priority level" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "10", "--sessions", "2", "--fps", "3"], "give one workload"),
        (["--rate", "10", "--preferred", "4,x"], "preferred = '4,x'"),
        (["--rate", "10", "--preferred", "64"], "preferred_batch_size[0] = 64"),
        (["--sessions", "3", "--fps", "30", "--session-policy", "random"], "session_policy = 'random'"),
        (["--rate", "10", "--priority-mix", "high"], "--priority-mix = 'high'"),
    ],
)
def test_simulate_bad_input_is_one_line_and_exit_2(args, message):
    r = autobatch("simulate", "--curve", FP16_256, *args)
    assert r.returncode == 2, r.stdout
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_write_curve_round_trips_yaml_and_csv(tmp_path):
    curve = BatchCurve({1: 4.5, 4: 9.25}, name="c")
    for name in ("c.yaml", "c.csv"):
        path = write_curve(curve, tmp_path / name)
        assert dict(load_curve(path).points) == {1: 4.5, 4: 9.25}


# -- against the real Triton ---------------------------------------------------------------










def test_docs_document_the_planner():
    text = (ROOT / "docs" / "planner.md").read_text(encoding="utf-8")
    assert "# The planner" in text


DENSE = str(CURVES / "dense_mlp-cpu.yaml")
SIM = ["simulate", "--curve", DENSE, "--rate", "10", "--duration", "1"]
PLAN = ["plan", "--curve", DENSE, "--slo-p99-ms", "60", "--network-ms", "2", "--rate", "50"]
AGGRESSIVE = str(PROFILES / "dense_mlp" / "aggressive.yaml")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Crashed with a traceback from numpy.
        (SIM + ["--seed", "-1"], "--seed = -1: must be an integer >= 0"),
        (PLAN + ["--seed", "-1"], "--seed = -1: must be an integer >= 0"),
        (SIM + ["--priority-mix", "1:nan,2:1"], "priority_mix share of level 1 = nan: must be a number >= 0"),
        (SIM + ["--priority-mix", "1:0.5,1:0.5"], "--priority-mix = '1:0.5,1:0.5': level 1 is given twice"),
        (SIM + ["--rows", "99999999999999999999"], "rows = 99999999999999999999: must be"),
        # Hung.
        (SIM + ["--max-batch-size", "100000000000"],
         "command line: max_batch_size = 100000000000: must be <= 2147483647"),
        (PLAN + ["--max-batch-size", "100000000000"], "max_batch_size = 100000000000: must be an integer"),
        # Named the converted field, not the option given.
        (SIM + ["--burst-gap-us", "-5"], "--burst-gap-us = -5: must be >= 0 (microseconds)"),
        (PLAN[:5] + ["--network-ms", "-2"], "--network-ms = -2: must be >= 0 (milliseconds)"),
        # Silently ignored.
        (["simulate", "--curve", DENSE, "--schedule", str(ROOT / "examples" / "schedules" / "step.yaml"),
          "--duration", "-5"], "--duration does not go with --schedule"),
        (SIM + ["--fps", "30"], "--fps goes only with --sessions"),
        (SIM + ["--trace-model", "m"], "--trace-model goes only with --trace"),
        (SIM + ["--preferred", "64", "--profile", AGGRESSIVE], "--preferred does not go with --profile"),
        (SIM + ["--max-batch-size", "8", "--profile", AGGRESSIVE],
         "--max-batch-size does not go with --profile"),
    ],
)
def test_bad_simulate_and_plan_options_are_one_line_and_exit_2(capsys, monkeypatch, args, message):
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert_bad_input(code, err, message)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.csv", "time_s,rows\n0,99999999999999999999\n", "t.csv:2: rows = 99999999999999999999"),
        ("t.jsonl", '{"time_s": 0}\n{"time_s": 1e9}\n', "t.jsonl:2: time_s = 1000000000.0: 1e+09 s after"),
        ("t.json", '[{"id": [1], "model_name": "m", "timestamps": [{"name": "REQUEST_START", "ns": 5}]}]',
         "t.json: entry 0: id = [1]: must be an integer or a string"),
        ("s.yaml", "phases: [{name: a, rate_rps: 1.0e+300, duration_s: 10}]",
         "s.yaml: phases[0].rate_rps = 1e+300: must be <= 1e+07"),
        ("s.yaml", "phases: [{name: a, rate_rps: 1, duration_s: 1}, {name: idle, rate_rps: 0, "
                   "duration_s: 1.0e+9}, {name: b, rate_rps: 1, duration_s: 1}]",
         "s.yaml: phases[1].duration_s = 1000000000.0: must be <= 2592000 (30 days)"),
        ("p.yaml", "name: p\nmax_batch_size: 10000000000000\ndynamic_batching: {}\n",
         "p.yaml: max_batch_size = 10000000000000: must be <= 2147483647"),
    ],
)
def test_bad_files_to_simulate_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    option = {"t": "--trace", "s": "--schedule", "p": "--profile"}[name[0]]
    args = ["simulate", "--curve", DENSE, option, str(path)]
    if option == "--profile":
        args += ["--rate", "10", "--duration", "1"]
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert_bad_input(code, err, message)


def test_plan_refuses_a_bad_plot_path_before_planning_or_writing_profiles(tmp_path, capsys, monkeypatch):
    """A directory given to --plot was found only after the planning runs, with the profiles
    of --write-profiles already written; now nothing is written."""
    out_dir = tmp_path / "profiles"
    code, _, err = run_main(monkeypatch, capsys, "plan", "--curve", FP16_256, "--slo-p99-ms", "100",
                            "--network-ms", "10", "--rate", "250", "--write-profiles", str(out_dir),
                            "--plot", str(tmp_path))
    assert_bad_input(code, err, f"--plot = '{tmp_path}': is a directory")
    assert not out_dir.exists()
