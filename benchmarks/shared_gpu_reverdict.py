"""Recompute a saved side-by-side result's verdicts, summary and rows from what it measured.

    .venv/bin/python benchmarks/shared_gpu_reverdict.py benchmarks/results/shared_gpu/FILE.json... [--check]

The verdicts (best static per phase, oracle, "every static loses", reaction) are
computed from the modes' measured phases and the controllers' decision logs,
which a saved result keeps (the phases in the JSON, the logs gzipped beside it
under ``logs/``). When the code that judges changes, and the measurements do not,
this brings a saved result up to date without running it again: the comparison
is rebuilt from the result's own command line, the decisions are read back from
its logs, and ``data.verdicts_recomputed`` records the commit that recomputed
them. ``--check`` prints what would change and writes nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autobatch.lab.sidebyside.run import ReactFn, decisions_from_log, summary, verdicts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import config_as_run  # noqa: E402
from shared_gpu import code_version, comparison, gateway_config, parser, schedule_path, variant  # noqa: E402
from shared_gpu_report import rows_for  # noqa: E402


def _decisions(log: Path, t0_wall: float, t0_mono: float | None) -> list[dict[str, Any]]:
    if not log.is_file():
        return []
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        f.write(gzip.decompress(log.read_bytes()))
        f.flush()
        return decisions_from_log(Path(f.name), t0_wall, t0_mono)


def reverdict(path: Path, react_s: ReactFn | None = None) -> tuple[dict[str, Any], list[str]]:
    """The saved result at ``path`` with its verdicts, summary and rows recomputed, and a line
    per verdict that changed. ``react_s``: the oracle's reaction (default: the verdict's)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    data = doc["data"]
    argv = shlex.split(doc["command"])[2:]  # "python benchmarks/shared_gpu.py ..."
    args = parser().parse_args(argv)
    args.config = config_as_run(str(args.config), path.stem)  # the config as it was then
    with tempfile.TemporaryDirectory(prefix="ab-reverdict-") as tmp:
        gateway = args.gateway_config or gateway_config(args.config, Path(tmp) / "gateway.yaml")
        variants = [variant(v, args.config, gateway, Path(tmp)) for v in args.variant]
        sched = schedule_path(data["schedule_file"])
        cmp = comparison(args, data["schedule"], sched, gateway, variants)
    logs = path.parent / "logs"
    changed = []
    for run in data["runs"]:
        groups = []
        for gi, g in enumerate(run["groups"]):
            modes = {}
            for name, r in g["modes"].items():
                log = logs / f"{path.stem}-{data['schedule']}-r{run['repeat']}-g{gi}-{name}.jsonl.gz"
                if name in data["controllers"] and not log.is_file():
                    raise SystemExit(f"shared_gpu_reverdict: {path}: no decision log {log.name} for {name}")
                modes[name] = {**r, "decisions": _decisions(log, r["t0_wall"], r.get("t0_mono"))}
            groups.append({**g, "modes": modes})
        new, old = verdicts(cmp, groups, react_s), _flat(run["verdicts"])
        changed += [f"r{run['repeat']} {k}: {old.get(k)} -> {v}" for k, v in _flat(new).items()
                    if old.get(k) != v]
        run["verdicts"] = new
    data["summary"] = summary(data["runs"])
    data["verdicts_recomputed"] = {"code": code_version(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                  time.gmtime())}
    doc["rows"] = [{**r, "command": doc["command"]} for r in rows_for(data)]
    return doc, changed


def _flat(v: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, x in v.items():
            out.update(_flat(x, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: v}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--check", action="store_true", help="print what would change; write nothing")
    args = ap.parse_args()
    for path in args.files:
        doc, changed = reverdict(path)
        print(f"{path.name}: {len(changed)} verdict figure(s) change")
        for line in changed:
            print(f"  {line}")
        if not args.check:
            path.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
