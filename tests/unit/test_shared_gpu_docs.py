"""docs/shared-gpu.md's table of side-by-side runs comes from benchmarks/shared_gpu.py's saved results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from ..conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


def _report() -> ModuleType:
    return load_benchmark("shared_gpu_report")


def test_the_docs_table_is_the_saved_runs() -> None:
    report = _report()
    assert report.check(), "run: .venv/bin/python benchmarks/shared_gpu_report.py --docs"
    docs = (ROOT / "docs" / "shared-gpu.md").read_text(encoding="utf-8")
    for doc in report.newest_runs():
        assert doc["_file"] in docs


@pytest.mark.parametrize(("mode", "top"), [("reload", "aggressive"), ("gw-w25", "wait25"),
                                           ("gw-steps", "aggressive")])
def test_each_row_names_the_top_rung_its_controller_climbed_to(mode: str, top: str) -> None:
    """The T4 sidecar's ladder changed under its name: a row says which it ran."""
    data = {"ladder": ["triton-default", "aggressive"],
            "variants": ["gw-w25=gateway:profiles.dir=p,profiles.ladder=[triton-default, wait25],a.b=1",
                         "gw-steps=gateway:actuator.steps=[25, 100]"]}
    assert _report().top_rung(data, mode) == top


def test_the_ladder_oracle_leaves_out_the_statics_off_the_ladder() -> None:
    """cotenants-linger on the shipped ladder, `aggressive` held beside: the verdict's oracle
    takes `aggressive` in low-shared (the controllers miss 1.1x it); over [triton-default,
    wait25] alone the oracle takes the default there, and the controllers come within 1.1x."""
    doc = json.loads((ROOT / "benchmarks" / "results" / "shared_gpu" / "superseded" / "20261204-200215.json")
                     .read_text(encoding="utf-8"))
    rows = _report().ladder_oracle(doc)
    assert len(rows) == 6 and {r["mode"] for r in rows} == {"reload", "gateway"}
    assert all(r["vs_oracle"] > 1.1 and r["vs_ladder_oracle"] < 1.1 for r in rows), rows
    assert all(r["ladder_oracle_picks"][3] == "triton-default" for r in rows)
    assert all(set(r["ladder_oracle_picks"]) <= set(doc["data"]["ladder"]) for r in rows)


def test_a_new_run_makes_the_table_stale(tmp_path: Path) -> None:
    report = _report()
    runs = sorted(report.RESULTS.glob("*.json"))
    assert runs, "no saved shared_gpu run"
    folder = tmp_path / "benchmarks" / "results" / "shared_gpu"
    folder.mkdir(parents=True)
    doc = json.loads(runs[-1].read_text(encoding="utf-8"))
    doc["command"] += " --seed 1"  # another command line: another row
    doc["date"] = "2099-01-01T00:00:00Z"
    shutil.copy(runs[-1], folder / runs[-1].name)
    (folder / "20990101-000000.json").write_text(json.dumps(doc), encoding="utf-8")
    report.ROOT = tmp_path
    page = tmp_path / "shared-gpu.md"
    page.write_text((ROOT / "docs" / "shared-gpu.md").read_text(encoding="utf-8"), encoding="utf-8")
    assert not report.check(folder, page)
    _, new = report._docs_text(folder, page)
    assert "benchmarks/results/shared_gpu/20990101-000000.json" in new


def test_the_gateway_runs_without_the_reload_only_guards(tmp_path: Path) -> None:
    """The gateway derived from the reload's config keeps its policy but for the guards of a
    reload's own disturbance (its variants are warm), flat or grouped, and the run says so."""
    import yaml

    bench = load_benchmark("shared_gpu")
    reload = tmp_path / "reload.yaml"
    data = yaml.safe_load((ROOT / "examples" / "sidecar-t4.yaml").read_text(encoding="utf-8"))
    data["policy"].update(efficiency_max_p95=0.5, stability={"confirmations": 2})
    data["policy"]["efficiency"] = {"max_load": 0.7, "max_busy": 0.7, "headroom": 0.6}
    reload.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = yaml.safe_load(bench.gateway_config(reload, tmp_path / "gateway.yaml").read_text(encoding="utf-8"))
    assert out["actuator"]["kind"] == "gateway"
    assert out["policy"]["efficiency"] == {"headroom": 0.6}  # the reload's other settings stay
    assert "efficiency_max_p95" not in out["policy"] and out["policy"]["stability"] == {"confirmations": 2}
    assert set(bench.RELOAD_ONLY) == {"efficiency.max_busy", "efficiency.max_p95", "efficiency.max_load"}


@pytest.mark.parametrize(
    ("sets", "items"),
    [
        ("actuator.steps=[100]", ["actuator.steps=[100]"]),
        ("actuator.steps=[25,100]", ["actuator.steps=[25,100]"]),
        ("a.b=0,actuator.steps=[25, 50,100],c={x: 1, y: 2}", ["a.b=0", "actuator.steps=[25, 50,100]",
                                                             "c={x: 1, y: 2}"]),
        ("a=1,,b=2", ["a=1", "b=2"]),
        ("", []),
    ],
)
def test_a_variants_settings_split_at_commas_outside_a_list(sets: str, items: list[str]) -> None:
    assert load_benchmark("shared_gpu").settings_items(sets) == items


def test_a_variant_sets_a_list_value(tmp_path: Path) -> None:
    import yaml

    bench = load_benchmark("shared_gpu")
    gateway = bench.gateway_config(ROOT / "examples" / "sidecar-t4.yaml", tmp_path / "gateway.yaml")
    name, kind, out = bench.variant("canary=gateway:actuator.steps=[25,100],actuator.step_dwell_s=1",
                                    ROOT / "examples" / "sidecar-t4.yaml", gateway, tmp_path)
    data = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert (name, kind) == ("canary", "gateway")
    assert data["actuator"]["steps"] == [25, 100] and data["actuator"]["step_dwell_s"] == 1


def test_a_variants_path_is_relative_to_where_it_was_typed(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    bench = load_benchmark("shared_gpu")
    monkeypatch.chdir(ROOT)
    _, _, out = bench.variant("wide=reload:profiles.dir=profiles/experiments/resnet50,"
                              "profiles.ladder=[triton-default, wait25]",
                              ROOT / "examples" / "sidecar-t4.yaml", tmp_path / "g.yaml", tmp_path)
    data = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert data["profiles"]["dir"] == str(ROOT / "profiles" / "experiments" / "resnet50")
    assert data["policy"]["curve"] == str(ROOT / "curves" / "t4-resnet50-fp16.yaml")  # the config's own


@pytest.mark.parametrize(("ladder", "rungs", "error"), [
    ("[triton-default, wait25]", ["triton-default", "wait25"], None),
    ("[triton-default, aggressive, wait25]", ["triton-default", "aggressive", "wait25"], None),
    ("[triton-default, nope]", ["triton-default"],
     "variant 'gw': profiles.ladder[1] = 'nope': no such profile"),
])
def test_a_gateway_variant_serves_the_rungs_of_its_own_ladder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               ladder: str, rungs: list[str],
                                                               error: str | None) -> None:
    """A gateway variant with another ladder gets one warm variant per rung of its own ladder
    (not the comparison's), and a bad one is a ConfigError before any server starts."""
    from autobatch.controller.config import load_sidecar_config
    from autobatch.curve import load_curve
    from autobatch.device.settings import DeviceSettings
    from autobatch.errors import ConfigError
    from autobatch.lab.serve import TritonUrls
    from autobatch.lab.sidebyside import StackSetup, check_sidecar_configs
    from autobatch.lab.sidebyside.layout import ModeSpec
    from autobatch.lab.sidebyside.stack import mode_ladder, sidecar_mapping

    bench = load_benchmark("shared_gpu")
    monkeypatch.chdir(ROOT)
    config = ROOT / "examples" / "sidecar-t4-aggressive.yaml"  # a comparison over another ladder
    gateway = bench.gateway_config(config, tmp_path / "gateway.yaml")
    spec = f"gw=gateway:profiles.dir=profiles/experiments/resnet50,profiles.ladder={ladder}"
    _, kind, out = bench.variant(spec, config, gateway, tmp_path)
    cfg = load_sidecar_config(config)
    setup = StackSetup(model=cfg.model, curve=load_curve(ROOT / "curves" / "t4-resnet50-fp16.yaml"),
                       device=DeviceSettings(), ladder=tuple(cfg.profiles), sidecar_config=config,
                       gateway_config=gateway)
    mode = ModeSpec("gw", kind, cfg.profiles[0], out)
    assert [p.name for p in mode_ladder(mode, setup)] == rungs
    assert [p.name for p in mode_ladder(ModeSpec("gateway", "gateway", cfg.profiles[0]), setup)] == \
        ["triton-default", "aggressive"]
    data = sidecar_mapping(mode, setup, triton=TritonUrls("127.0.0.1", 1, 2, 3), listen="127.0.0.1:4",
                           dcgm_url="http://127.0.0.1:5/metrics", socket=tmp_path / "admin.sock",
                           decision_log=tmp_path / "d.jsonl")
    assert list(data["actuator"]["variants"]) == rungs
    if error is None:
        check_sidecar_configs([mode], setup)
    else:
        with pytest.raises(ConfigError, match="^" + error.replace("[", r"\[").replace("]", r"\]")):
            check_sidecar_configs([mode], setup)


def test_every_saved_runs_verdicts_are_what_the_code_computes_from_its_measurements() -> None:
    """The verdicts are recomputed from the saved phases and decision logs (a changed judge
    is applied with benchmarks/shared_gpu_reverdict.py); a result the code would judge
    otherwise is stale."""
    reverdict = load_benchmark("shared_gpu_reverdict")
    for path in sorted((ROOT / "benchmarks" / "results" / "shared_gpu").glob("*.json")):
        doc, changed = reverdict.reverdict(path)
        assert not changed, f"run benchmarks/shared_gpu_reverdict.py {path.name}: {changed[:3]}"
        saved = json.loads(path.read_text(encoding="utf-8"))
        assert [r["figure"] for r in doc["rows"]] == [r["figure"] for r in saved["rows"]]


def test_a_verdict_changed_by_hand_is_found(tmp_path: Path) -> None:
    reverdict = load_benchmark("shared_gpu_reverdict")
    src = ROOT / "benchmarks" / "results" / "shared_gpu" / "20261202-160521.json"
    (tmp_path / "logs").symlink_to(src.parent / "logs")
    doc = json.loads(src.read_text(encoding="utf-8"))
    doc["data"]["runs"][1]["verdicts"]["statics"]["triton-default"]["over_slo_share"] = 0.5
    (tmp_path / src.name).write_text(json.dumps(doc), encoding="utf-8")
    _, changed = reverdict.reverdict(tmp_path / src.name)
    assert changed == ["r1 statics.triton-default.over_slo_share: 0.5 -> 0.00317"]


def test_the_headroom_line_names_the_rest_of_the_machine_only_where_it_was_recorded() -> None:
    report = _report()
    newest = sorted(report.RESULTS.glob("*.json"))[-1]
    result = json.loads(newest.read_text(encoding="utf-8"))["data"]
    old = report.headroom(result)
    if all(g.get("machine_cores") is None for r in result["runs"] for g in r["groups"]):
        assert old["others_cores_max"] is None and "rest of the machine" not in report.headroom_line(old)
    first = result["runs"][0]["groups"][0]
    first["machine_cores"] = {"busy": 1.9, "others": 1.3, "steal": 0.25}
    h = report.headroom(result)
    assert h["others_cores_max"] >= 1.3 and h["steal_cores_max"] >= 0.25
    assert "the rest of the machine used at most" in report.headroom_line(h)


def test_each_modes_own_cores_are_the_median_over_its_groups() -> None:
    report = _report()
    group = {"cpu_by_mode": {"reload": {"triton": 0.1, "sidecar": 0.02, "load": 0.03, "all": 0.15},
                             "gateway": {"triton": 0.12, "sidecar": 0.03, "load": 0.03, "all": 0.18}}}
    other = {"cpu_by_mode": {"reload": {"triton": 0.2, "sidecar": 0.02, "load": 0.03, "all": 0.25}}}
    result = {"runs": [{"groups": [group, other]}, {"groups": [{"cpu_cores": {}}]}]}
    cores = report.mode_cores(result)
    assert cores["reload"]["all"] == pytest.approx(0.2) and cores["gateway"]["all"] == pytest.approx(0.18)
    line = report.mode_cores_line(cores)
    assert "gateway 0.180 (Triton 0.120, sidecar 0.030, generator 0.030, 0.90x the reload's)" in line
    assert report.mode_cores({"runs": [{"groups": [{"cpu_cores": {}}]}]}) == {}


def test_a_sigterm_ends_the_run_by_an_exception_so_its_servers_are_stopped() -> None:
    import signal

    bench = load_benchmark("shared_gpu")
    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    try:
        bench.exit_on_sigterm()
        with pytest.raises(SystemExit) as exc:
            try:
                signal.raise_signal(signal.SIGTERM)  # its handler runs before this returns
                cleaned.append("not reached")
            finally:
                cleaned.append("stopped")
        assert exc.value.code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)
    assert cleaned == ["stopped"]
