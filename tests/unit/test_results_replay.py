"""The closed-loop and reaction figures on record still describe the shipped policy.

Each current result file of ``benchmarks/closed_loop.py``
(``benchmarks/results/closed_loop/*.json``) has the decision logs of its
controller runs beside it (``logs/<file>-<schedule>-x<instances>-<mode>.jsonl.gz``,
which the benchmark writes). Replayed through the example config the run used
(``examples/sidecar.yaml``, ``examples/sidecar-gateway.yaml``: the benchmark only
points them at its own Triton), every tick up to the run's last request must decide
what the run decided (the ticks after it change no figure).
When a policy change makes one diverge, its figures no longer describe the
shipped controller: run that part again and move the old file and its logs to
``superseded/`` (docs/benchmarks.md, "From a run to the front page").

The reaction runs (``benchmarks/reaction.py``, ``results/reaction/*.json``, logs
``logs/<file>-steps.jsonl.gz`` and ``-ramp``) are held to the same rule, through
``examples/sidecar.yaml`` on the ladder the run recorded (``data.ladder``); the
saved demo runs (``benchmarks/demo.py``, ``results/demo/``) through ``examples/sidecar.yaml``.
A config whose contents changed under its name replays the runs before the change through the
file that now holds the old contents (``benchmarks/record.py``, ``RENAMED_CONFIGS``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autobatch.config import load_yaml
from autobatch.plan.replay import replay

from ..conftest import config_as_run, load_benchmark, read_trace, sidecar_config, while_served

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "closed_loop"
REACTION = ROOT / "benchmarks" / "results" / "reaction"
EXAMPLES = ROOT / "examples"
shared_gpu = load_benchmark("shared_gpu")
setting_replay = load_benchmark("setting_replay")
CONFIGS = {"reload": EXAMPLES / "sidecar.yaml", "gateway": EXAMPLES / "sidecar-gateway.yaml"}


def _logs() -> list[tuple[str, str]]:
    """(log file name, mode) for every controller run of every current result file."""
    out = []
    for path in sorted(RESULTS.glob("*.json")):
        for run in json.loads(path.read_text(encoding="utf-8"))["data"]["runs"]:
            block = f"-b{run['block']}" if "block" in run else ""  # alternating blocks, since 2026-12-02
            stem = f"{path.stem}-{run['schedule']}-x{run['instances']}{block}"
            for mode in sorted(set(run["modes"]) & set(CONFIGS)):
                out.append((f"{stem}-{mode}.jsonl.gz", mode))
    return out


LOGS = _logs()


def test_every_current_result_keeps_its_decision_logs() -> None:
    missing = [name for name, _ in LOGS if not (RESULTS / "logs" / name).is_file()]
    assert LOGS and not missing, missing


@pytest.mark.parametrize(("name", "mode"), LOGS)
def test_the_logs_replay_through_the_shipped_policy(name: str, mode: str) -> None:
    path = RESULTS / "logs" / name
    if not path.is_file():
        pytest.fail(f"{path} is missing (see the test above)")
    _assert_replays(path, dict(load_yaml(CONFIGS[mode])), CONFIGS[mode])


def _assert_replays(path: Path, data: dict, example: Path) -> None:
    """Every tick of the log at ``path`` while the run served requests, replayed through the
    config ``data`` (read from ``example``), decides what the run decided (the ticks after the
    last request change no figure: :func:`tests.conftest.while_served`)."""
    cfg = sidecar_config(example, data)
    ticks = read_trace(path)
    assert len(ticks) >= 60
    steps = replay(ticks, cfg.policy, history_windows=cfg.history_windows)
    differ = [(round(s.tick.now_s - ticks[0].now_s, 1), s.decision.action.value, s.decision.target,
               s.decision.reason.value) for s in while_served(steps) if not s.agrees]
    assert not differ, f"{path.name} no longer replays: {differ[:5]}"


def _reaction_logs() -> list[tuple[str, tuple[str, ...]]]:
    """(log file name, ladder) for each part of every current reaction result with logs
    (the runs before 2026-12-01 kept none)."""
    out = []
    for path in sorted(REACTION.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        for part in ("steps", "ramp"):
            name = f"{path.stem}-{part}.jsonl.gz"
            if (REACTION / "logs" / name).is_file():
                out.append((name, tuple(data["ladder"])))
    return out


REACTION_LOGS = _reaction_logs()


def test_the_current_reaction_runs_keep_their_logs() -> None:
    stems = {p.stem for p in REACTION.glob("*.json")}
    logged = {name.rsplit("-", 1)[0] for name, _ in REACTION_LOGS}
    assert REACTION_LOGS and logged == stems, sorted(stems - logged)


@pytest.mark.parametrize(("name", "ladder"), REACTION_LOGS)
def test_the_reaction_logs_replay_through_the_shipped_policy(name: str, ladder: tuple[str, ...]) -> None:
    example = CONFIGS["reload"]
    data = dict(load_yaml(example))
    data["profiles"] = {**data["profiles"], "ladder": list(ladder)}
    _assert_replays(REACTION / "logs" / name, data, example)


DEMO = ROOT / "benchmarks" / "results" / "demo"


def _config_of(path: Path, default: str) -> str:
    """The config a saved run names (``data.config``, relative to the repository)."""
    return json.loads(path.read_text(encoding="utf-8"))["data"].get("config") or default


DEMO_LOGS = sorted((f"{p.stem}-controller.jsonl.gz", _config_of(p, "examples/sidecar.yaml"))
                   for p in DEMO.glob("*.json"))


@pytest.mark.parametrize(("name", "config"), DEMO_LOGS)
def test_the_demo_logs_replay_through_the_shipped_policy(name: str, config: str) -> None:
    """The saved demo runs (``benchmarks/demo.py``) ran the config they name as it is
    (``examples/sidecar.yaml`` before the shared-GPU demo, which names its own)."""
    path = DEMO / "logs" / name
    assert path.is_file(), f"{path} is missing: benchmarks/demo.py saves it beside its result"
    example = config_as_run(config, name.split("-controller")[0])
    _assert_replays(path, dict(load_yaml(example)), example)


SHARED = ROOT / "benchmarks" / "results" / "shared_gpu"


@pytest.mark.parametrize(("name", "config", "sets", "drops"), setting_replay.controller_logs())
def test_the_shared_gpu_logs_replay_through_the_config_they_ran(name: str, config: str, sets: str,
                                                                drops: tuple[str, ...]) -> None:
    path = SHARED / "logs" / name
    assert path.is_file(), f"{path} is missing: benchmarks/shared_gpu.py saves it beside its result"
    # a variant: its settings as shared_gpu.py set them
    data, example = setting_replay.config_data(name, config, drops, shared_gpu.settings_items(sets))
    _assert_replays(path, data, example)
