"""What a policy setting would have changed in the saved side-by-side runs, up to where it acts.

    .venv/bin/python benchmarks/setting_replay.py --set policy.device.release=true [--since 20261206] [--json]

Every controller log of every current ``benchmarks/shared_gpu.py`` result that ran a
shipped config (not a ``--variant``) is replayed through the config it ran
(``record.config_as_run``; a gateway without its reload-only guards, as the run had it)
with the ``--set`` settings changed, tick by tick, as ``tests/unit/test_results_replay.py``
replays them unchanged. Per log where a tick decides otherwise: that first tick (seconds
into the log), what it decides and why, what the run decided there, and how long until
the run's next switch. After that tick the windows are of a world the setting would have
changed, so nothing later is read. Reads only; writes nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from record import config_as_run
from shared_gpu import set_setting, settings_items, without_reload_guards
from shared_prediction import emit

from autobatch.config import load_yaml
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.plan.replay import parse_trace, replay

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "shared_gpu"


def _variant_sets(data: dict[str, Any], mode: str) -> str:
    """The ``a.b=VALUE,...`` of a ``--variant NAME=KIND:...`` the run added ('' for the two)."""
    for spec in data.get("variants") or []:
        name, _, rest = spec.partition("=")
        if name == mode:
            return rest.partition(":")[2]
    return ""


def controller_logs(since: str = "", results: Path = RESULTS) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(log file name, config, the variant's settings, the policy fields the run left out) for
    each controller of each group of each repeat of every current benchmarks/shared_gpu.py
    result from ``since`` (YYYYMMDD) on (a gateway derived from the reload's config runs
    without its reload-only guards, ``gateway_without``, since 2026-12-02 afternoon)."""
    out = []
    for path in sorted(results.glob("*.json")):
        if path.stem[:8] < since:
            continue
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        kinds = data.get("controllers") or {"reload": "reload", "gateway": "gateway"}
        for run in data["runs"]:
            for g, group in enumerate(run["groups"]):
                for mode in sorted(set(group["modes"]) & set(kinds)):
                    gateway = kinds[mode] == "gateway"
                    config = (data.get("gateway_config") if gateway else None) or data["config"]
                    drops = tuple(data.get("gateway_without") or ()) if gateway else ()
                    name = f"{path.stem}-{data['schedule']}-r{run['repeat']}-g{g}-{mode}.jsonl.gz"
                    out.append((name, config, _variant_sets(data, mode), drops))
    return out


def config_data(name: str, config: str, drops: tuple[str, ...],
                sets: Sequence[str]) -> tuple[dict[str, Any], Path]:
    """The sidecar mapping the run of log ``name`` decided by, and the file it is read from: the
    config as it was then (``record.config_as_run``) without ``drops``, ``sets`` (``a.b=value``)
    applied as shared_gpu.py applies a variant's, but for ``actuator.`` ones (how it moves, a
    gateway's steps, not what it decides)."""
    example = config_as_run(config, name[:15])
    data = dict(load_yaml(example))
    data["policy"] = without_reload_guards(dict(data.get("policy") or {}), drops)
    for item in sets:
        key, _, value = item.partition("=")
        if not key.startswith("actuator."):
            set_setting(data, key, value, ROOT)  # the runs start at the repository's root
    return data, example


def first_difference(log: Path, config: str, drops: tuple[str, ...],
                     sets: Sequence[str]) -> dict[str, Any] | None:
    """The first tick of ``log`` that decides otherwise with ``sets`` (``a.b=value``) applied to
    the config it ran, or None where every tick decides as the run did."""
    data, example = config_data(log.name, config, drops, sets)
    cfg = sidecar_config_from_mapping(data, str(example), base=example.parent)
    with gzip.open(log, "rt", encoding="utf-8") as f:
        ticks = parse_trace(f, log.name)
    steps = replay(ticks, cfg.policy, history_windows=cfg.history_windows)
    first = next((s for s in steps if not s.agrees), None)
    if first is None:
        return None
    t0, t = ticks[0].now_s, first.tick
    recorded = t.recorded or {}
    later = next((s.tick for s in steps if s.tick.now_s >= t.now_s
                  and (s.tick.recorded or {}).get("action") == "switch"), None)
    d = first.decision
    return {"log": log.name.removesuffix(".jsonl.gz"), "at_s": round(t.now_s - t0, 1),
            "decides": f"{d.action.value} {d.target} ({d.reason.value})",
            "ran": f"{recorded.get('action')} {recorded.get('target')} ({recorded.get('reason')})",
            "run_switched_after_s": None if later is None else round(later.now_s - t.now_s, 1)}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", required=True, metavar="KEY=VALUE",
                    help="a setting to change, as shared_gpu.py's --variant takes it (repeatable, or a,b)")
    ap.add_argument("--since", default="20261206", help="the first result's date, YYYYMMDD")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sets = [item for s in args.set for item in settings_items(s)]
    logs = [(RESULTS / "logs" / name, config, drops)  # the shipped configs: no variant's settings
            for name, config, variant, drops in controller_logs(args.since) if not variant]
    rows = [r for log, config, drops in logs if (r := first_difference(log, config, drops, sets)) is not None]
    emit(rows, args.json, ["log", "first tick that differs (s)", "decides", "the run decided",
                           "the run's next switch (s later)"],
         lambda r: [r["log"], r["at_s"], r["decides"], r["ran"], r["run_switched_after_s"]])
    if not args.json:
        print(f"\n{len(rows)} of {len(logs)} controller logs decide otherwise with {', '.join(sets)}")


if __name__ == "__main__":
    main()
