"""The sidecar's config: every bad value is one line naming file, field, value and rule."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autobatch.config import Section, http_url, parse_yaml
from autobatch.controller.config import load_sidecar_config, sidecar_config_from_mapping
from autobatch.errors import ConfigError
from autobatch.lab.serve import free_port
from autobatch.signals.triton import normalize_url

from ..conftest import PROFILES, ROOT

EXAMPLE = ROOT / "examples" / "sidecar.yaml"


def example() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["profiles"]["dir"] = str(PROFILES / "dense_mlp")
    data["policy"]["curve"] = str(ROOT / "curves" / "dense_mlp-cpu.yaml")
    data["server"]["token_file"] = str(EXAMPLE.parent / "sidecar.token")
    return data


def test_the_example_config_loads_as_documented():
    cfg = load_sidecar_config(EXAMPLE)
    assert cfg.model == "dense_mlp"
    assert [p.name for p in cfg.profiles] == ["triton-default", "efficient"]
    assert cfg.policy.slo_p95_ms == 60 and cfg.interval_s == 1
    assert cfg.policy.stability.confirmations == 2 and cfg.policy.stability.min_dwell_s == 10
    assert cfg.policy.curve is not None and cfg.actuator.load_api == "grpc"
    assert (cfg.server.host, cfg.server.port) == ("127.0.0.1", 9400)


def test_the_example_configs_use_no_deprecated_spelling():
    for name in ("sidecar.yaml", "sidecar-gateway.yaml"):
        assert load_sidecar_config(ROOT / "examples" / name).deprecations == ()


def _policy(tmp_path: Path, policy: dict[str, Any]) -> Any:
    data = example()
    data["policy"] = {"curve": data["policy"]["curve"], **policy}
    return sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)


# Every policy knob at a value other than its default, in the old flat spelling and grouped.
FLAT_VALUES = {
    "max_window_age_s": 12.0, "settle_s": 1.5, "p95_settle_s": 30.0, "breach_min_mean": 0.2,
    "confirmations": 4, "min_dwell_s": 7.0, "stabilization_s": 9.0, "stabilization_drop": 0.4,
    "overload_ratio": 1.1, "overload_windows": 3, "overload_backlog_ratio": 0.6,
    "saturation_delay_ratio": 2.5, "saturation_min_queue_ms": 4.0, "failure_rps_threshold": 0.5,
    "failure_reasons": ["REJECTED"], "headroom": 0.6, "util_ceiling": 0.5, "min_saving": 0.2,
    "latency_tolerance": 0.04, "min_freed_share": 0.15, "efficiency_max_busy": 0.7,
    "efficiency_max_p95": 0.5, "near_delay_ratio": 0.6, "wait_max_busy": 0.8, "capacity_margin": 1.3,
    "min_gain": 1.2, "busy_ceiling": 0.85, "live_min_busy": 0.25, "device_alpha": 0.4, "forecast": False,
    "forecast_windows": 8, "forecast_alpha": 0.6, "forecast_beta": 0.2, "forecast_z": 3.0,
    "forecast_jump_z": 5.0, "default_actuation_s": 2.0,
}


def test_the_old_flat_policy_keys_load_as_their_groups_with_one_line_each(tmp_path):
    from autobatch.policy.settings import FIELDS_GROUPED_ONLY, FLAT, GROUPED_ONLY, GROUPS

    assert set(FLAT_VALUES) == set(FLAT)  # every old key is tried here
    grouped: dict[str, dict[str, Any]] = {}
    for old, value in FLAT_VALUES.items():
        group, name = FLAT[old]
        grouped.setdefault(group, {})[name] = value
    old, new = _policy(tmp_path, FLAT_VALUES), _policy(tmp_path, grouped)
    assert old.policy == new.policy and new.deprecations == ()
    assert old.policy.stability.min_dwell_s == 7.0 and old.policy.forecast.enabled is False
    assert old.policy.efficiency.max_busy == 0.7 and old.policy.capacity.margin == 1.3
    for group in set(GROUPS) - GROUPED_ONLY:  # no field left at its default: each key reached its field
        defaults = GROUPS[group]()
        assert all(getattr(new.policy, group).__dict__[k] != v for k, v in defaults.__dict__.items()
                   if (group, k) not in FIELDS_GROUPED_ONLY)
    assert len(old.deprecations) == len(FLAT)
    assert all("\n" not in line for line in old.deprecations)
    assert ("sidecar.yaml: policy.efficiency_max_busy is deprecated: write policy.efficiency.max_busy "
            "(docs/sidecar.md#policy)") in old.deprecations


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"min_dwell_s": 5, "stability": {"min_dwell_s": 6}},
         "policy.min_dwell_s = 5: is given as policy.stability.min_dwell_s too: keep that one"),
        ({"forecast": False, "forecast_z": 2},  # the old bool is the flat spelling of forecast.enabled
         None),
        ({"forecast": {"enabled": False}, "forecast_z": 2}, None),
        ({"forecast": {"enabled": "no"}}, "policy.forecast.enabled = 'no': must be true or false"),
        ({"device": {"floor_alone": 1}}, "policy.device.floor_alone = 1: must be true or false"),
        ({"device": {"steady_windows": 0}}, "policy.device.steady_windows = 0: must be >= 1"),
        ({"device": {"steady_windows": 1.5}}, "policy.device.steady_windows = 1.5: must be an integer"),
        ({"device": {"change_windows": -1}}, "policy.device.change_windows = -1: must be >= 0"),
        ({"device": {"change_share": 0}}, "policy.device.change_share = 0.0: must be a fraction in (0, 1]"),
        ({"device": {"change_rate": 1.5}}, "policy.device.change_rate = 1.5: must be a fraction in [0, 1]"),
        ({"efficiency": {"no_gain_needs_seen": "yes"}},
         "policy.efficiency.no_gain_needs_seen = 'yes': must be true or false"),
        ({"stability": {"confirmatons": 2}},
         "policy.stability.confirmatons = 2: unknown field (did you mean confirmations?)"),
        ({"efficiency": {"max_busy": 0}}, "policy.efficiency.max_busy = 0.0: must be a fraction in (0, 1]"),
        ({"trust": {"max_window_age_s": 0}}, "policy.trust.max_window_age_s = 0.0: must be > 0"),
        ({"efficiency": {"min_saving": 0.04}},
         "policy.efficiency.min_saving = 0.04: must be above latency_tolerance (0.05), or the ladder flaps"),
        ({"survival": 3}, "policy.survival = 3: must be a mapping of field: value"),
    ],
)
def test_the_policy_groups_are_checked_like_any_field(tmp_path, policy, message):
    if message is None:
        cfg = _policy(tmp_path, policy)
        assert cfg.policy.forecast.enabled is False and cfg.policy.forecast.z == 2
        return
    with pytest.raises(ConfigError) as info:
        _policy(tmp_path, policy)
    assert str(info.value) == f"sidecar.yaml: {message}"


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),  # as tritonclient takes it
        ("http://triton:8000/", "http://triton:8000"),
        ("https://triton.example/v2", "https://triton.example/v2"),
    ],
)
def test_urls_take_host_port_like_tritonclient(tmp_path, given, taken):
    cfg = sidecar_config_from_mapping(edit("triton.http_url", given), "sidecar.yaml", base=tmp_path)
    assert cfg.triton.http_url == taken


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000"),
        (" http://triton:8002/metrics/ ", "http://triton:8002/metrics"),
        ("https://triton.example", "https://triton.example"),
        ("grpc://127.0.0.1:8001", None),
        ("http://", None),
        ("127.0.0.1:port", None),
        ("", None),
        (8000, None),
    ],
)
def test_one_url_rule_for_config_files_and_command_lines(given, taken):
    assert http_url(given) == taken
    if taken is None:  # the flags' check (autobatch watch/status) says the same as the files'
        with pytest.raises(ConfigError, match=f"^--url = {re.escape(repr(given))}: must be an http"):
            normalize_url(given, "--url")
    else:
        assert normalize_url(given, "--url") == taken


def edit(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(example())
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return data


DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("model", DELETE, "model: required field is missing"),
        ("modle", "x", "modle = 'x': unknown field"),
        ("triton.http_url", "grpc://127.0.0.1:8001",
         "triton.http_url = 'grpc://127.0.0.1:8001': must be an http"),
        ("triton.metrics_url", "http://", "triton.metrics_url = 'http://': must be an http"),
        ("triton.http_url", "127.0.0.1:port", "triton.http_url = '127.0.0.1:port': must be an http"),
        ("triton.grpc_url", "http://127.0.0.1:8001",
         "triton.grpc_url = 'http://127.0.0.1:8001': must be HOST:PORT"),
        ("profiles.ladder", ["latency-soft"], "profiles.ladder = ['latency-soft']: must list two or more"),
        ("profiles.ladder", ["latency-soft", "turbo"], "profiles.ladder[1] = 'turbo': no such profile"),
        ("profiles.ladder", [["triton-default"], "efficient"],
         "profiles.ladder[0] = ['triton-default']: must be a profile name (a string)"),
        ("profiles.ladder", ["triton-default", {"efficient": 1}],
         "profiles.ladder[1] = {'efficient': 1}: must be a profile name (a string)"),
        ("profiles.ladder", ["triton-default", None], "profiles.ladder[1] = None: must be a profile name"),
        ("profiles.ladder", ["latency-soft", "latency-soft"],
         "profiles.ladder[1] = 'latency-soft': is listed twice"),
        ("profiles.initial", "turbo", "profiles.initial = 'turbo': must be one of the ladder"),
        ("slo.p95_ms", 0, "slo.p95_ms = 0.0: must be > 0"),
        ("slo.p95_ms", "fast", "slo.p95_ms = 'fast': must be a finite number"),
        ("policy.stability.confirmations", 0, "policy.stability.confirmations = 0: must be >= 1"),
        ("policy.headroom", 1.5, "policy.headroom = 1.5: must be a fraction in [0, 1]"),
        ("policy.interval_s", 0, "policy.interval_s = 0.0: must be >= 0.05"),
        ("policy.busy_ceiling", 0, "policy.busy_ceiling = 0.0: must be a fraction in (0, 1]"),
        ("policy.busy_ceiling", 1.2, "policy.busy_ceiling = 1.2: must be a fraction in [0, 1]"),
        ("policy.forecast_beta", 0, "policy.forecast_beta = 0.0: must be a fraction in (0, 1]"),
        ("policy.forecast", "yes", "policy.forecast = 'yes': must be true or false"),
        ("policy.forecast_windows", 2, "policy.forecast_windows = 2: must be >= 3"),
        ("policy.overload_windows", 0, "policy.overload_windows = 0: must be >= 1"),
        ("policy.latency_tolerance", 0.3,
         "policy.latency_tolerance = 0.3: must be below min_saving (0.15), or the ladder flaps"),
        ("policy.forecast_z", -1, "policy.forecast_z = -1.0: must be >= 0"),
        ("policy.forecast_jump_z", "big", "policy.forecast_jump_z = 'big': must be a finite number"),
        ("policy.min_saveing", 0.1,
         "policy.min_saveing = 0.1: unknown field (did you mean min_saving or min_gain?)"),
        ("policy.min_freed_share", 1, "policy.min_freed_share = 1.0: must be a fraction in [0, 1)"),
        ("policy.device_alpha", 0, "policy.device_alpha = 0.0: must be a fraction in (0, 1]"),
        ("policy.curve", "nope.yaml",
         "sidecar.yaml: policy.curve = 'nope.yaml': {tmp}/nope.yaml: file not found"),
        ("policy.curve", ".",
         "sidecar.yaml: policy.curve = '.': {tmp}: is a directory, expected a YAML file"),
        ("profiles.dir", str(EXAMPLE),
         f"profiles.dir = '{EXAMPLE}': profile directory {EXAMPLE} is a file, not a directory"),
        ("profiles.dir", "nowhere", "profiles.dir = 'nowhere': profile directory {tmp}/nowhere not found"),
        ("server.token_file", "/", "server.token_file = '/': is a directory, not a file"),
        ("server.token_file", "/dev/null", "server.token_file = '/dev/null': is not a regular file"),
        ("signals.source", "statsd", "signals.source = 'statsd': must be one of"),
        ("signals.source", "prometheus",
         "signals.prometheus_url = None: is required when source is prometheus"),
        ("signals.instances_per_replica", 0, "signals.instances_per_replica = 0: must be >= 1"),
        ("actuator.kind", "ssh", "actuator.kind = 'ssh': must be one of"),
        ("actuator.load_api", "rest", "actuator.load_api = 'rest': must be one of"),
        ("actuator.mode", "file", "actuator.repository = None: is required when mode is file"),
        ("actuator.backend", "be", "actuator.backend = 'be': unknown field for kind triton"),
        ("server.listen", "9400", "server.listen = '9400': must be HOST:PORT"),
        ("server.token_file", "missing.token", "server.token_file = "),
        ("policy.failure_reasons", ["REJECTD"],
         "policy.failure_reasons[0] = 'REJECTD': must be a Triton failure reason: "
         "REJECTED, CANCELED, BACKEND, OTHER, unknown"),
        ("policy.failure_reasons", ["REJECTED", 5], "policy.failure_reasons[1] = 5: must be a Triton"),
        ("policy.failure_reasons", "REJECTED",
         "policy.failure_reasons = 'REJECTED': must be a list of Triton failure reasons (REJECTED,"),
        # every address's port is 1-65535
        ("triton.grpc_url", "127.0.0.1:99999",
         "triton.grpc_url = '127.0.0.1:99999': must be HOST:PORT with a port in 1-65535"),
        ("triton.grpc_url", "127.0.0.1:0", "triton.grpc_url = '127.0.0.1:0': must be HOST:PORT with a port"),
        ("triton.http_url", "http://127.0.0.1:0", "triton.http_url = 'http://127.0.0.1:0': must be an http"),
        ("triton.metrics_url", "127.0.0.1:70000/metrics",
         "triton.metrics_url = '127.0.0.1:70000/metrics': must be an http"),
        ("actuator.replicas", [{"http_url": "http://10.0.0.5:8000", "grpc_url": "10.0.0.5:65536"}],
         "actuator.replicas[0].grpc_url = '10.0.0.5:65536': must be HOST:PORT with a port in 1-65535"),
        # an explicit null is not the default
        ("policy.interval_s", None, "policy.interval_s = None: needs a value (leave the field out for "
         "the default, 1.0)"),
        ("policy.stability.min_dwell_s", None, "policy.stability.min_dwell_s = None: needs a value"),
        ("policy.stability.confirmations", None, "policy.stability.confirmations = None: needs a value"),
        ("policy.forecast", None, "policy.forecast = None: needs a value"),
        ("policy.failure_reasons", None, "policy.failure_reasons = None: needs a value"),
        ("signals.source", None, "signals.source = None: needs a value"),
        ("actuator.kind", None, "actuator.kind = None: needs a value"),
        ("server.listen", None, "server.listen = None: needs a value"),
        ("slo.p95_ms", None, "slo.p95_ms: required field is missing"),
    ],
)
def test_bad_values_are_one_line_naming_the_field(tmp_path, path, value, message):
    with pytest.raises(ConfigError) as info:
        sidecar_config_from_mapping(edit(path, value), "sidecar.yaml", base=tmp_path)
    text = str(info.value)
    assert message.replace("{tmp}", str(tmp_path)) in text, text
    assert "\n" not in text
    assert text.startswith("sidecar.yaml: ")


def test_autobatch_run_rejects_a_bad_config_before_starting_anything(tmp_path: Path):
    bad = tmp_path / "sidecar.yaml"
    data = edit("slo.p95_ms", -5)
    data["server"]["listen"] = f"127.0.0.1:{free_port()}"
    bad.write_text(yaml.safe_dump(data))
    res = subprocess.run([sys.executable, "-m", "autobatch", "run", "--config", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr == f"autobatch: error: {bad}: slo.p95_ms = -5.0: must be > 0\n"


@pytest.mark.parametrize(
    ("text", "number"),
    [("1e3", 1000.0), ("1.5e3", 1500.0), ("-2E-1", -0.2), ("1.0e+3", 1000.0), ("1000", 1000.0)],
)
def test_an_exponent_without_a_dot_is_the_number_it_means(text, number):
    """PyYAML reads YAML 1.1: `1e3` (no dot, unsigned exponent) arrives as a string."""
    sec = Section("f.yaml", parse_yaml(f"x: {text}", "f.yaml"))
    assert sec.float("x") == number
    if number.is_integer():
        assert sec.int("x") == int(number)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("'60'", "f.yaml: x = '60': must be a finite number"),  # a quoted number is a string
        ("1e400", "f.yaml: x = '1e400': must be a finite number"),
        (".nan", "f.yaml: x = nan: must be a finite number"),
        ("-.inf", "f.yaml: x = -inf: must be a finite number"),
        ("nan", "f.yaml: x = 'nan': must be a finite number"),
        ("1e3x", "f.yaml: x = '1e3x': must be a finite number"),
        ("e3", "f.yaml: x = 'e3': must be a finite number"),
    ],
)
def test_other_strings_and_non_finite_numbers_are_still_refused(text, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        Section("f.yaml", parse_yaml(f"x: {text}", "f.yaml")).float("x")


def test_every_yaml_reader_takes_1e3(tmp_path):
    from autobatch.curve import BatchCurve
    from autobatch.schedule import parse_schedule

    schedule = parse_schedule(parse_yaml("phases: [{name: a, rate_rps: 1e3, duration_s: 2e1}]", "s"), "s")
    assert (schedule.phases[0].rate_rps, schedule.phases[0].duration_s) == (1000.0, 20.0)
    curve = BatchCurve.from_mapping(parse_yaml("points: {1: 5e0, 2: 6.5e0}", "c"), "c")
    assert curve.points == {1: 5.0, 2: 6.5}
    data = edit("policy.history_windows", "1e3")
    data["policy"].setdefault("stability", {})["min_dwell_s"] = "1.5e1"
    cfg = sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)
    assert (cfg.history_windows, cfg.policy.stability.min_dwell_s) == (1000, 15.0)
    with pytest.raises(ConfigError, match=r"history_windows = 100000000000000000000: must be <= 100000"):
        sidecar_config_from_mapping(edit("policy.history_windows", "1e20"), "sidecar.yaml", base=tmp_path)


def test_null_stays_none_for_an_optional_field_and_an_empty_section(tmp_path):
    data = edit("slo.p99_ms", None)
    data["signals"] = None  # `signals:` with every field commented out
    data["decision_log"] = None
    cfg = sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)
    assert cfg.policy.slo_p99_ms is None and cfg.signals.source == "triton" and cfg.decision_log is None


@pytest.mark.parametrize("command", ["run", "replay"])
@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("profiles.ladder", [["triton-default"], "efficient"],
         "profiles.ladder[0] = ['triton-default']: must be a profile name (a string)"),
        ("policy.failure_reasons", ["REJECTD"],
         "policy.failure_reasons[0] = 'REJECTD': must be a Triton failure reason: "
         "REJECTED, CANCELED, BACKEND, OTHER, unknown"),
        ("triton.grpc_url", "127.0.0.1:99999",
         "triton.grpc_url = '127.0.0.1:99999': must be HOST:PORT with a port in 1-65535, "
         "e.g. 127.0.0.1:8001"),
        ("policy.interval_s", None,
         "policy.interval_s = None: needs a value (leave the field out for the default, 1.0)"),
        ("policy.curve", "/nonexistent/nope.yaml",
         "policy.curve = '/nonexistent/nope.yaml': /nonexistent/nope.yaml: file not found"),
    ],
)
def test_the_cli_rejects_a_bad_config_in_one_line(tmp_path: Path, command, path, value, message):
    bad = tmp_path / "sidecar.yaml"
    data = edit(path, value)
    data["server"]["listen"] = "127.0.0.1:0"
    data["actuator"] = {"kind": "dry-run"}
    bad.write_text(yaml.safe_dump(data))
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"decision": {"at_s": 1}, "window": null}\n')
    args = ["--dry-run"] if command == "run" else ["--trace", str(trace)]
    res = subprocess.run([sys.executable, "-m", "autobatch", command, "--config", str(bad), *args],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr == f"autobatch: error: {bad}: {message}\n"


@pytest.mark.parametrize(
    ("level", "accepted"),
    [("critical", False), ("notset", False), ("fatal", False), ("warn", False), ("5", False),
     ("debug", True), ("INFO", True), ("Warning", True), ("error", True)],
)
def test_run_takes_exactly_the_documented_log_levels(tmp_path: Path, level, accepted):
    bad = tmp_path / "sidecar.yaml"
    bad.write_text(yaml.safe_dump(edit("slo.p95_ms", -5)))  # an accepted level gets as far as this
    res = subprocess.run([sys.executable, "-m", "autobatch", "run", "--config", str(bad), "--dry-run",
                          "--log-level", level], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    if accepted:
        assert res.stderr == f"autobatch: error: {bad}: slo.p95_ms = -5.0: must be > 0\n"
    else:
        assert res.stderr == (f"autobatch: error: --log-level = {level!r}: "
                              "must be debug, info, warning or error\n")


def test_instances_per_replica_reaches_the_prometheus_source(tmp_path):
    """Fleet mode's busy share needs the instances per replica; the direct source reads them."""
    from autobatch.signals.factory import ReadTarget, build_source
    from autobatch.signals.prometheus import PrometheusSource

    data = edit("signals.source", "prometheus")
    data["signals"].update(prometheus_url="http://127.0.0.1:9090", instances_per_replica=2)
    cfg = sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)
    assert cfg.signals.instances_per_replica == 2
    source = build_source(cfg.signals, ReadTarget("dense_mlp", "http://127.0.0.1:8000"))
    assert isinstance(source, PrometheusSource) and source.instances_per_replica == 2
    unset = sidecar_config_from_mapping(edit("signals.source", "prometheus") | {
        "signals": {"source": "prometheus", "prometheus_url": "http://127.0.0.1:9090"}}, "sidecar.yaml",
        base=tmp_path)
    assert unset.signals.instances_per_replica is None  # the busy share is left unknown


# -- the model from outside the file, the profiles in its own folder -------------------------------


def test_the_model_may_come_from_outside_the_file_and_must_agree_with_it(tmp_path):
    data = example()
    del data["model"]
    cfg = sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path, model="dense_mlp")
    assert cfg.model == "dense_mlp"
    with pytest.raises(ConfigError, match=r"^sidecar.yaml: model: required field is missing$"):
        sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)
    same = sidecar_config_from_mapping(example(), "sidecar.yaml", base=tmp_path, model="dense_mlp")
    assert same.model == "dense_mlp"
    with pytest.raises(ConfigError) as info:
        sidecar_config_from_mapping(example(), "sidecar.yaml", base=tmp_path, model="resnet50")
    assert str(info.value) == ("sidecar.yaml: model = 'dense_mlp': differs from the model given from outside "
                               "the file ('resnet50', AUTOBATCH_MODEL); set it in one place")


def test_the_profiles_are_in_the_models_own_folder_unless_dir_says_otherwise(tmp_path):
    data = example()
    del data["profiles"]["dir"]
    (tmp_path / "profiles").mkdir()
    missing = r"profiles.dir = 'profiles/dense_mlp': profile directory .* not found"
    with pytest.raises(ConfigError, match=missing):
        sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)
    shutil.copytree(PROFILES / "dense_mlp", tmp_path / "profiles" / "dense_mlp")
    cfg = sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)
    assert {Path(p.source).parent for p in cfg.profiles} == {tmp_path / "profiles" / "dense_mlp"}


def test_autobatch_run_takes_the_model_from_the_environment(tmp_path: Path):
    data = edit("slo.p95_ms", -5)  # gets as far as the SLO only if the model was found
    del data["model"]
    bad = tmp_path / "sidecar.yaml"
    bad.write_text(yaml.safe_dump(data))
    base = [sys.executable, "-m", "autobatch", "run", "--config", str(bad), "--dry-run"]
    env = {k: v for k, v in os.environ.items() if k != "AUTOBATCH_MODEL"}
    res = subprocess.run(base, capture_output=True, text=True, timeout=60, env=env)
    assert res.stderr == f"autobatch: error: {bad}: model: required field is missing\n"
    res = subprocess.run(base, capture_output=True, text=True, timeout=60,
                         env={**env, "AUTOBATCH_MODEL": "dense_mlp"})
    assert res.returncode == 2 and res.stderr == f"autobatch: error: {bad}: slo.p95_ms = -5.0: must be > 0\n"


@pytest.mark.parametrize(("value", "got", "error"), [
    (0.7, 0.7, None),
    (None, None, None),  # null: off, as left out
    (0.0, None, "policy.efficiency.max_load"),
    (1.5, None, "policy.efficiency.max_load"),
])
def test_max_load_is_grouped_only_a_fraction_or_null(tmp_path, value, got, error):
    if error is None:
        assert _policy(tmp_path, {"efficiency": {"max_load": value}}).policy.efficiency.max_load == got
    else:
        with pytest.raises(ConfigError, match=error.replace(".", r"\.")):
            _policy(tmp_path, {"efficiency": {"max_load": value}})


def test_max_load_has_no_flat_spelling(tmp_path):
    with pytest.raises(ConfigError, match="max_load"):
        _policy(tmp_path, {"max_load": 0.7})


def test_no_gain_needs_seen_is_off_unless_written_and_has_no_flat_spelling(tmp_path):
    assert _policy(tmp_path, {}).policy.efficiency.no_gain_needs_seen is False
    got = _policy(tmp_path, {"efficiency": {"no_gain_needs_seen": True}}).policy.efficiency
    assert got.no_gain_needs_seen is True
    with pytest.raises(ConfigError, match="no_gain_needs_seen"):
        _policy(tmp_path, {"no_gain_needs_seen": True})


def test_device_steady_windows_is_one_unless_written(tmp_path):
    d = _policy(tmp_path, {}).policy.device
    assert (d.steady_windows, d.change_share, d.change_rate, d.change_windows) == (1, 0.1, 0.4, 0)
    written = {"device": {"steady_windows": 3, "change_share": 0.15, "change_rate": 0.5, "change_windows": 2}}
    d = _policy(tmp_path, written).policy.device
    assert (d.steady_windows, d.change_share, d.change_rate, d.change_windows) == (3, 0.15, 0.5, 2)


def test_device_floor_alone_is_off_unless_written(tmp_path):
    assert _policy(tmp_path, {}).policy.device.floor_alone is False
    assert _policy(tmp_path, {"device": {"floor_alone": True}}).policy.device.floor_alone is True
