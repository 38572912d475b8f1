"""Profiles: loading, Triton's validation rules, rendering (pure) and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autobatch.errors import ProfileError
from autobatch.profiles import load_profile, load_profiles, parse_pbtxt, render_pbtxt

from ..conftest import PROFILES, REPOSITORY

GOOD = """\
name: p
max_batch_size: 16
dynamic_batching:
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 2000
"""


def write(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "some_model"
    d.mkdir(exist_ok=True)
    p = d / "p.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("model", ["dense_mlp", "small_cnn", "emulated_accelerator"])
def test_shipped_profiles_load_and_include_the_ladder_ends(model):
    profiles = load_profiles(PROFILES / model)
    assert {"triton-default", "latency-soft", "aggressive"} <= set(profiles)
    for prof in profiles.values():
        assert prof.model == model
    # Triton's default: no preferred sizes (Triton reads them as [max_batch_size]), no wait.
    default = profiles["triton-default"]
    assert default.preferred_batch_size == () and default.max_queue_delay_us == 0
    assert default.effective_preferred == (default.max_batch_size,)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            GOOD.replace("[4, 8]", "[4, 32]"),
            "dynamic_batching.preferred_batch_size[1] = 32: must be > 0 and <= max_batch_size (16)",
        ),
        (GOOD.replace("[4, 8]", "[4, 0]"), "preferred_batch_size[1] = 0: must be >= 1"),
        (GOOD.replace("[4, 8]", "[4, 4]"), "preferred_batch_size[1] = 4: is listed twice"),
        (GOOD.replace("[4, 8]", "4"), "preferred_batch_size = 4: must be a list of integers"),
        (GOOD.replace("2000", "-1"), "max_queue_delay_microseconds = -1: must be >= 0"),
        (GOOD.replace("2000", "1.5"), "max_queue_delay_microseconds = 1.5: must be an integer"),
        (GOOD.replace("max_batch_size: 16", "max_batch_size: 0"), "max_batch_size = 0: must be >= 1"),
        (GOOD + "  priority_levels: 2\n  default_priority_level: 3\n",
         "default_priority_level = 3: must be in [1, priority_levels] = [1, 2]"),
        (GOOD + "  priority_levels: 2\n  default_priority_level: 1\n"
         "  priority_queue_policy: {3: {timeout_action: REJECT}}\n",
         "priority_queue_policy.3 = 3: priority level must be in [1, priority_levels]"),
        (GOOD + "  priority_levels: 2\n  default_priority_level: 1\n  preserve_ordering: true\n",
         "priority_levels = 2: preserve_ordering allows at most one priority level"),
        (GOOD + "  preserve_ordering: true\n  default_queue_policy: {timeout_action: DELAY}\n",
         "default_queue_policy.timeout_action = 'DELAY': preserve_ordering forbids"),
        (GOOD + "  default_queue_policy: {timeout_action: WAIT}\n",
         "timeout_action = 'WAIT': must be one of REJECT, DELAY"),
        (GOOD + "instance_group: {count: 0}\n", "instance_group.count = 0: must be >= 1"),
        (GOOD + "instance_group: {kind: KIND_TPU}\n", "instance_group.kind = 'KIND_TPU': must be one of"),
        (GOOD + "  max_queue_delay: 5\n", "dynamic_batching.max_queue_delay = 5: unknown field"),
        (GOOD.replace("name: p\n", ""), "name: required field is missing"),
        (GOOD.replace("dynamic_batching:", "dynamic_batchin:"),
         "dynamic_batching: required field is missing (found 'dynamic_batchin': a typo?)"),
        ("name: [p\n", "not valid YAML (line 2, column 1)"),
        # Past the field's type in Triton's model config: render refused them, simulate
        # accepted them (and a max_batch_size of 1e13 hung it).
        (GOOD.replace("max_batch_size: 16", "max_batch_size: 10000000000000"),
         "max_batch_size = 10000000000000: must be <= 2147483647 (Triton's field is an int32)"),
        (GOOD.replace("2000", "100000000000000000000000"),
         "dynamic_batching.max_queue_delay_microseconds = 100000000000000000000000: must be <= "
         "18446744073709551615 (Triton's field is a uint64)"),
        (GOOD + "  default_queue_policy: {max_queue_size: 4294967296}\n",
         "dynamic_batching.default_queue_policy.max_queue_size = 4294967296: must be <= 4294967295"),
        (GOOD + "  priority_levels: 1\n  default_priority_level: 1\n"
         "  priority_queue_policy: {1: {default_timeout_microseconds: 18446744073709551616}}\n",
         "dynamic_batching.priority_queue_policy.1.default_timeout_microseconds = 18446744073709551616: "
         "must be <="),
        (GOOD + "instance_group: {count: 2147483648}\n", "instance_group.count = 2147483648: must be <="),
        (GOOD + "description: [1, 2]\n", "description = [1, 2]: must be a string"),
    ],
)
def test_bad_profiles_name_file_field_value_and_rule(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    text = str(info.value)
    assert text.startswith(str(path))
    assert message in text
    assert "\n" not in text


def test_the_largest_values_are_the_proto_types_and_render(tmp_path):
    """A profile check refuses exactly what rendering into Triton's config refuses."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from tritonclient.grpc import model_config_pb2 as m

    from autobatch.profiles import FIELD_MAX

    top = {F.TYPE_INT32: 2**31 - 1, F.TYPE_UINT32: 2**32 - 1, F.TYPE_UINT64: 2**64 - 1}
    where = {"max_batch_size": m.ModelConfig, "count": m.ModelInstanceGroup,
             "max_queue_delay_microseconds": m.ModelDynamicBatching,
             "priority_levels": m.ModelDynamicBatching,
             "default_timeout_microseconds": m.ModelQueuePolicy, "max_queue_size": m.ModelQueuePolicy}
    for path, (most, _) in FIELD_MAX.items():
        name = path.rsplit(".", 1)[-1]
        assert top[where[name].DESCRIPTOR.fields_by_name[name].type] == most, path
    at_most = (f"name: p\nmax_batch_size: {2**31 - 1}\ndynamic_batching:\n"
               f"  max_queue_delay_microseconds: {2**64 - 1}\n"
               f"  default_queue_policy: {{max_queue_size: {2**32 - 1}}}\n")
    prof = load_profile(write(tmp_path, at_most))
    assert f"max_batch_size: {2**31 - 1}" in render_pbtxt(prof.merge_into(_base_config()))


def test_good_profile_fields():
    prof = load_profile(PROFILES / "dense_mlp" / "aggressive.yaml")
    assert prof.preferred_batch_size == (16, 32)
    assert prof.max_queue_delay_us == 20000
    assert prof.effective_preferred == (16, 32)


def test_empty_preferred_means_max_batch_size(tmp_path):
    prof = load_profile(write(tmp_path, GOOD.replace("[4, 8]", "[]")))
    assert prof.effective_preferred == (16,)


def _base_config() -> dict:
    path = REPOSITORY / "dense_mlp" / "config.pbtxt"
    return parse_pbtxt(path.read_text(), str(path))


def test_merge_replaces_batching_and_keeps_io():
    base = _base_config()
    prof = load_profile(PROFILES / "dense_mlp" / "aggressive.yaml")
    merged = prof.merge_into(base)
    assert merged["input"] == base["input"] and merged["output"] == base["output"]
    assert merged["dynamic_batching"]["preferred_batch_size"] == [16, 32]
    assert merged["dynamic_batching"]["max_queue_delay_microseconds"] == 20000
    assert base["dynamic_batching"]["preferred_batch_size"] != [16, 32]  # input untouched


def test_override_is_the_load_api_body():
    prof = load_profile(PROFILES / "dense_mlp" / "latency-soft.yaml")
    body = prof.to_override(_base_config())
    config = json.loads(body["parameters"]["config"])
    assert config["name"] == "dense_mlp"
    assert config["dynamic_batching"]["preferred_batch_size"] == [1, 2, 4]


def test_pbtxt_round_trip_keeps_the_profile():
    prof = load_profile(PROFILES / "emulated_accelerator" / "aggressive.yaml")
    text = render_pbtxt(prof.merge_into(_base_config()))
    again = parse_pbtxt(text)
    assert [int(x) for x in again["dynamic_batching"]["preferred_batch_size"]] == [8, 16, 32]
    assert int(again["dynamic_batching"]["max_queue_delay_microseconds"]) == 10000


def test_priority_fields_render(tmp_path):
    body = GOOD + (
        "  priority_levels: 2\n  default_priority_level: 2\n"
        "  default_queue_policy: {timeout_action: REJECT, default_timeout_microseconds: 5000}\n"
        "  priority_queue_policy: {1: {max_queue_size: 10}}\n"
    )
    prof = load_profile(write(tmp_path, body))
    db = parse_pbtxt(render_pbtxt(prof.merge_into(_base_config())))["dynamic_batching"]
    assert db["priority_levels"] == 2
    assert db["priority_queue_policy"]["1"]["max_queue_size"] == 10
    assert int(db["default_queue_policy"]["default_timeout_microseconds"]) == 5000


@pytest.mark.parametrize(
    ("live", "message"),
    [
        ({"name": "m", "max_batch_size": 0}, "does not support batching"),
        (
            {"name": "m", "max_batch_size": 8, "instance_group": [{"kind": "KIND_CPU"}]},
            None,
        ),
    ],
)
def test_validate_against_live(tmp_path, live, message):
    prof = load_profile(write(tmp_path, GOOD))
    if message is None:
        prof.validate_against(live)
    else:
        with pytest.raises(ProfileError, match=message):
            prof.validate_against(live)


def test_validate_against_live_io_mismatch(tmp_path):
    prof = load_profile(write(tmp_path, GOOD))
    base = _base_config()
    live = dict(base, input=[{"name": "OTHER", "data_type": "TYPE_FP32", "dims": [4]}])
    with pytest.raises(ProfileError, match="inputs of the base config differ"):
        prof.validate_against(live, base=base)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autobatch", *args], capture_output=True, text=True, timeout=60
    )


def test_render_cli_prints_pbtxt():
    res = run_cli("render", str(PROFILES / "dense_mlp" / "aggressive.yaml"))
    assert res.returncode == 0, res.stderr
    config = parse_pbtxt(res.stdout)
    assert config["name"] == "dense_mlp"
    assert [int(x) for x in config["dynamic_batching"]["preferred_batch_size"]] == [16, 32]


def test_render_cli_bad_profile_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, GOOD.replace("[4, 8]", "[4, 32]"))
    res = run_cli("render", str(path), "--base", str(REPOSITORY / "dense_mlp" / "config.pbtxt"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "preferred_batch_size[1] = 32" in lines[0] and str(path) in lines[0]


@pytest.mark.parametrize("model", ["dense_mlp", "small_cnn", "emulated_accelerator"])
def test_repository_config_is_the_latency_soft_profile(model):
    """A restarted Triton forgets overrides: its own config must be a ladder profile."""
    path = REPOSITORY / model / "config.pbtxt"
    config = parse_pbtxt(path.read_text(), str(path))
    prof = load_profile(PROFILES / model / "latency-soft.yaml")
    assert config["dynamic_batching"]["preferred_batch_size"] == list(prof.preferred_batch_size)
    assert config["dynamic_batching"].get("max_queue_delay_microseconds", 0) == prof.max_queue_delay_us
    assert config["max_batch_size"] == prof.max_batch_size
