"""`autobatch demo` and `measure`: every bad flag is refused before Triton starts or any
measuring begins (a stand-in start records whether it was reached; no Triton runs here)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import autobatch.lab.measure as measure_mod
import autobatch.lab.serve as serve_mod
from autobatch import cli
from autobatch.errors import ConfigError
from autobatch.lab.demo import run_demo

from ..conftest import ROOT
from ..helpers import assert_bad_input, run_main


class Started(Exception):
    """Raised by the stand-in start: the checks let the run begin."""


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def start(self: Any, *args: Any, **kwargs: Any) -> None:
        calls.append("triton")
        raise Started()

    def measure(*args: Any, **kwargs: Any) -> None:
        calls.append("measure")
        raise Started()

    monkeypatch.setattr(serve_mod.TritonServer, "start", start)
    monkeypatch.setattr(serve_mod.ManagedProcess, "start", start)
    monkeypatch.setattr(measure_mod, "measure_curve", measure)
    monkeypatch.setattr(measure_mod, "live_curve", measure)
    return calls


@pytest.fixture
def places(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    (tmp_path / "bad.yaml").write_text("policy: [\n")
    (tmp_path / "nomodel.yaml").write_text("policy:\n  slo_p95_ms: 50\n")
    config = yaml.safe_load((ROOT / "examples" / "sidecar-t4.yaml").read_text())
    config["profiles"]["dir"] = str(ROOT / "profiles" / "sidecar-t4" / "resnet50")
    config["server"].pop("token_file")
    config["policy"].pop("curve")
    (tmp_path / "nocurve.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "badjobs.yaml").write_text(yaml.safe_dump({
        "cotenants": [{"name": "x", "curve": str(ROOT / "curves" / "t4-resnet50-fp16.yaml"), "batch_size": 8,
                       "duty": 2.0}],
        "phases": [{"name": "a", "rate_rps": 10, "duration_s": 5}]}))
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--keep", "afile"], "keep = '{d}/afile': is a file: give a folder"),
        (["--keep", "afile/sub"], "keep = '{d}/afile/sub': '{d}/afile' is a file, not a folder"),
        (["--lead-in", "nan"], "lead_in = nan: must be a finite number >= 0 seconds"),
        (["--lead-in", "inf"], "lead_in = inf: must be a finite number >= 0 seconds"),
        (["--lead-in", "-1"], "lead_in = -1: must be a finite number >= 0 seconds"),
        (["--plot", "adir"], "plot = '{d}/adir': is a directory: give a file name"),
        (["--plot", "afile/t.png"], "plot = '{d}/afile/t.png': '{d}/afile' is a file, not a folder"),
        (["--plot", "t.nope"], "plot = '{d}/t.nope': suffix '.nope': must be one of"),
        (["--config", "bad.yaml"], "{d}/bad.yaml: not valid YAML"),
        (["--config", "nomodel.yaml"], "{d}/nomodel.yaml: model: required field is missing"),
        (["--config", "missing.yaml"], "{d}/missing.yaml: file not found"),
    ],
)
def test_bad_demo_flags_exit_2_with_one_line_before_triton_starts(
    args: list[str], message: str, places: Path, starts: list[str],
    monkeypatch: pytest.MonkeyPatch, capsys: Any,
) -> None:
    args = [a if a.startswith("-") or a in ("nan", "inf") else str(places / a) for a in args]
    code, _, err = run_main(monkeypatch, capsys, "demo", *args)
    assert_bad_input(code, err, message.format(d=places))
    assert starts == []


def test_good_demo_flags_reach_the_start(places: Path, starts: list[str], monkeypatch, capsys) -> None:
    """The stand-in start is reached: the table above is refused by the checks, not by it."""
    monkeypatch.setattr(sys, "argv", ["autobatch", "demo", "--plot", str(places / "t"),
                                      "--keep", str(places / "new" / "k"), "--lead-in", "0"])
    with pytest.raises(Started):
        cli.main()
    assert starts and set(starts) == {"triton"}  # the first server of a mode started (its GPU)
    assert (places / "new" / "k").is_dir()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lead_in_s": float("nan")}, "lead_in_s = nan: must be a finite number >= 0 seconds"),
        ({"lead_in_s": -1.0}, "lead_in_s = -1.0: must be a finite number >= 0 seconds"),
        ({"workdir": "afile"}, "workdir = '{d}/afile': is a file"),
        ({"config_path": "bad.yaml"}, "{d}/bad.yaml: not valid YAML"),
        ({"config_path": "nocurve.yaml"}, "{d}/nocurve.yaml: policy.curve: required for the demo"),
        ({"schedule_path": "badjobs.yaml"}, "{d}/badjobs.yaml: cotenants[0].duty = 2.0"),
    ],
)
def test_run_demo_checks_its_inputs_before_the_start(
    kwargs: dict[str, Any], message: str, places: Path, starts: list[str]
) -> None:
    kwargs = {k: places / v if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(ConfigError) as info:
        run_demo(**kwargs)
    assert message.format(d=places) in str(info.value)
    assert starts == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "adir"], "out = '{d}/adir': is a directory: give a file name"),
        (["--out", "afile/c.yaml"], "out = '{d}/afile/c.yaml': '{d}/afile' is a file, not a folder"),
        (["--out", "adir", "--live-s", "5"], "out = '{d}/adir': is a directory"),
        (["--live-s", "inf"], "live_s = inf: must be a finite number > 0"),
    ],
)
def test_bad_measure_flags_exit_2_before_measuring(
    args: list[str], message: str, places: Path, starts: list[str],
    monkeypatch: pytest.MonkeyPatch, capsys: Any,
) -> None:
    args = [str(places / a) if a in ("adir", "afile/c.yaml") else a for a in args]
    # Port 9 (discard) is never a Triton: a check that got as far as the network would fail otherwise.
    code, _, err = run_main(monkeypatch, capsys, "measure", "--model", "m", "--url", "127.0.0.1:9", *args)
    assert_bad_input(code, err, message.format(d=places))
    assert starts == []

