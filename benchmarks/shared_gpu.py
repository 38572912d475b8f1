"""The controller on a shared (emulated) GPU, side by side with every static profile at the same time.

    .venv/bin/python benchmarks/shared_gpu.py --config examples/sidecar-t4.yaml \
        --schedule examples/schedules/cotenants-step.yaml [--schedule step ...] \
        [--repeats 3] [--retries 1] [--group-size 3] [--lead-in 60] [--modes ...] [--no-save] [--json] \
        [--variant reload-nofreed=reload:policy.efficiency.min_freed_share=0]
        [--static profiles/experiments/resnet50/wait25.yaml]

Every mode runs at once, each on its own emulated GPU (an ``autobatch device``
process with the same sharing policy, the schedule's co-tenant jobs on it at
the same times) and its own Triton holding the emulated model (the config's
curve), behind its own HAProxy, fed the same arrival trace (same seed):
Triton's default, every other rung of the config's ladder held, each
``--static`` profile held, the controller by reload (the config) and by
gateway (``--gateway-config``, or
the config with examples/sidecar-gateway.yaml's actuator, one warm variant
per rung on the mode's device, and without the reload-only guards
``efficiency.max_busy``, ``max_p95``, ``max_load``: the result says so as
``gateway_without``). Modes that the two cores cannot carry at once
run in groups of ``--group-size`` one after another, each with the default in
it. Repeated ``--repeats`` times; a repeat whose group fails (a server that
stopped answering) is run again, ``--retries`` times in all, and kept under
``failed``. docs/benchmarks.md ("The shared GPU, side by
side") says what each figure is and what the CPU-headroom figures show.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from autobatch.config import load_yaml
from autobatch.controller.config import load_sidecar_config
from autobatch.curve import load_curve
from autobatch.device.settings import DeviceSettings, load_device_config
from autobatch.errors import AutobatchError
from autobatch.lab.sidebyside import Comparison, StackSetup, check_sidecar_configs, modes_for, run_comparison
from autobatch.plan.simulator.device import load_shared_device
from autobatch.profiles import load_profile, load_profiles
from autobatch.schedule import load_schedule
from autobatch.sharing import SharingModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record import save_result  # noqa: E402
from shared_gpu_report import print_comparison, rows_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCHEDULES = ("step", "bursty", "ramp", "rise-fall")


def schedule_path(name: str) -> Path:
    p = Path(name)
    return p if p.suffix in (".yaml", ".yml") else EXAMPLES / "schedules" / f"{name}.yaml"


PATH_KEYS = ("profiles.dir", "policy.curve", "server.token_file")
"""The config's paths (relative to the config file that names them)."""


def _absolute_paths(data: dict[str, Any], config: Path) -> dict[str, Any]:
    here = config.resolve().parent
    for section, key in (k.split(".") for k in PATH_KEYS):
        sub = dict(data.get(section) or {})
        if sub.get(key):
            sub[key] = str((here / sub[key]).resolve())
            data[section] = sub
    return data


RELOAD_ONLY = ("efficiency.max_busy", "efficiency.max_p95", "efficiency.max_load")
"""The policy's guards of a reload's own disturbance (its new copy loads on the serving
devices): a gateway shifts traffic between warm variants, so its controller runs without them."""


def without_reload_guards(policy: dict[str, Any], drops: tuple[str, ...] = RELOAD_ONLY) -> dict[str, Any]:
    """``policy`` (a sidecar config's section) without the ``group.field`` settings in ``drops``
    (:data:`RELOAD_ONLY`), written flat or grouped."""
    out = dict(policy)
    for key in drops:
        group, name = key.split(".")
        out.pop(f"{group}_{name}", None)
        if isinstance(out.get(group), dict):
            out[group] = {k: v for k, v in out[group].items() if k != name}
    return out


def gateway_config(config: Path, out: Path) -> Path:
    """``config`` with examples/sidecar-gateway.yaml's actuator (its variants are set per run),
    and without the reload's guards (:data:`RELOAD_ONLY`; settings.py: "the gateway needs none")."""
    data = dict(load_yaml(config))
    act = dict(load_yaml(EXAMPLES / "sidecar-gateway.yaml")["actuator"])
    act["guard"] = {**dict(act.get("guard") or {}), "p95_ms": float(data["slo"]["p95_ms"])}
    data["actuator"] = act
    data["policy"] = without_reload_guards(dict(data.get("policy") or {}))
    out.write_text(yaml.safe_dump(_absolute_paths(data, config), sort_keys=False), encoding="utf-8")
    return out


def set_dotted(data: dict[str, Any], key: str, value: str) -> None:
    """Set ``a.b.c`` in ``data`` (copying each mapping on the way) to the YAML ``value``."""
    *path, last = key.split(".")
    node = data
    for k in path:
        node[k] = dict(node.get(k) or {})
        node = node[k]
    node[last] = yaml.safe_load(value)


def set_setting(data: dict[str, Any], key: str, value: str, here: Path) -> None:
    """:func:`set_dotted`, with a path (:data:`PATH_KEYS`) taken relative to ``here``, where it
    was typed: a variant's config is written to a temporary folder, not beside the config."""
    set_dotted(data, key, value)
    if key in PATH_KEYS:
        section, field = key.split(".")
        data[section][field] = str((here / data[section][field]).resolve())


def settings_items(sets: str) -> list[str]:
    """``a=1,b=[25, 100]`` -> ``["a=1", "b=[25, 100]"]``: split at the commas outside a YAML
    flow list or mapping, so that a value such as ``actuator.steps=[25,100]`` stays whole."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(sets):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(sets[start:i])
            start = i + 1
    items.append(sets[start:])
    return [item for item in items if item]


def variant(spec: str, reload: Path, gateway: Path, folder: Path) -> tuple[str, str, Path]:
    """``NAME=KIND[:a.b.c=VALUE,...]``: a controller beside the usual two, its kind's config with
    each dotted key set to the YAML value (e.g. ``policy.efficiency.min_freed_share=0``, or
    ``actuator.steps=[25,100]``); a path (:data:`PATH_KEYS`) is relative to the working
    directory."""
    name, _, rest = spec.partition("=")
    kind, _, sets = rest.partition(":")
    if not name or kind not in ("reload", "gateway"):
        raise SystemExit(f"shared_gpu: --variant {spec!r}: want NAME=reload|gateway[:a.b=VALUE,...]")
    base = reload if kind == "reload" else gateway
    data = _absolute_paths(dict(load_yaml(base)), base)
    for item in settings_items(sets):
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"shared_gpu: --variant {spec!r}: {item!r} is not KEY=VALUE")
        set_setting(data, key, value, Path.cwd())
    out = folder / f"variant-{name}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return name, kind, out


def comparison(args: argparse.Namespace, name: str, path: Path, gateway: Path,
               variants: list[tuple[str, str, Path]]) -> Comparison:
    cfg = load_sidecar_config(args.config)
    curve = load_curve(args.curve) if args.curve else cfg.policy.curve
    if curve is None:
        raise SystemExit(f"shared_gpu: {args.config}: policy.curve is not set; give --curve")
    schedule = load_schedule(path)
    # The jobs as declared (the run places them on its schedule, the lead-in in front) and the
    # device's sharing, read as `autobatch simulate` reads them: the simulator's run compares.
    shared = load_shared_device(cotenants=args.cotenants, schedule=path)
    jobs = shared.cotenants if shared else ()
    ladder = tuple(cfg.profiles)
    folder = Path(ladder[0].source).parent
    default = next((p for p in ladder if p.name == "triton-default"), None) or \
        load_profiles(folder).get("triton-default")
    if default is None:
        raise SystemExit(f"shared_gpu: no triton-default profile in the ladder or in {folder}")
    start = next((p for p in ladder if p.name == cfg.initial_profile), ladder[0]) \
        if getattr(cfg, "initial_profile", None) else ladder[0]
    device = load_device_config(args.device_config) if args.device_config else \
        DeviceSettings(sharing=shared.sharing if shared else SharingModel())
    setup = StackSetup(model=cfg.model, curve=curve, device=device, ladder=ladder,
                       sidecar_config=Path(args.config), gateway_config=gateway)
    try:
        statics = [load_profile(s) for s in args.static]
        modes = modes_for(ladder, default, start, args.modes.split(",") if args.modes else None,
                          variants, statics)
        check_sidecar_configs(modes, setup)
    except AutobatchError as exc:
        print(f"shared_gpu: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    return Comparison(
        name=name, schedule=schedule, setup=setup, modes=tuple(modes), slo_p95_ms=cfg.policy.slo_p95_ms,
        cotenants=jobs, seed=args.seed, repeats=args.repeats, group_size=args.group_size,
        lead_in_s=args.lead_in, interval_s=cfg.interval_s, keep=args.keep, retries=args.retries,
        extra={"config": _rel(args.config), "schedule_file": _rel(path), "code": code_version(),
               **({"gateway_config": _rel(args.gateway_config)} if args.gateway_config
                  else {"gateway_without": list(RELOAD_ONLY)}),
               **({"cotenants_file": _rel(args.cotenants)} if args.cotenants else {}),
               **({"variants": args.variant} if args.variant else {}),
               **({"statics": [_rel(s) for s in args.static]} if args.static else {})})


def code_version() -> str:
    """The commit the run's code is at (``+dirty`` with uncommitted changes): the controller's
    policy moves from one commit to the next."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _rel(path: Path) -> str:
    """A path as the saved result names it: relative to the repository when inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def strip(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The result as saved (no per-second timelines; of the decisions, the switches) and the
    controllers' decision logs, as the sidecars wrote them (a replay test reads them)."""
    logs: dict[str, bytes] = {}
    for run in result["runs"]:
        for gi, g in enumerate(run["groups"]):
            for mode, text in g.pop("logs", {}).items():
                logs[f"{result['schedule']}-r{run['repeat']}-g{gi}-{mode}"] = text
            for r in g["modes"].values():
                r.pop("timeline", None)
                r["switches"] = [d for d in r.pop("decisions", []) if d["action"] == "switch"]
    return result, logs


def parser() -> argparse.ArgumentParser:
    """The command line, also read back from a saved result (shared_gpu_reverdict.py)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, required=True, help="the reload controller's sidecar config")
    ap.add_argument("--gateway-config", type=Path, default=None)
    ap.add_argument("--curve", type=Path, default=None, help="the emulated model's curve (default: the "
                    "config's policy.curve)")
    ap.add_argument("--device-config", type=Path, default=None, help="the emulated GPU's settings "
                    "(default: the co-tenant file's sharing, else timeslice with a 2 ms quantum)")
    ap.add_argument("--cotenants", type=Path, default=None, help="co-tenant jobs (and sharing) for "
                    "every schedule, as `autobatch simulate --cotenants` (default: the schedule's own)")
    ap.add_argument("--schedule", action="append", help="a schedule name or file; repeatable")
    ap.add_argument("--modes", default="", help="comma-separated subset (the default always runs)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=KIND[:KEY=VALUE,...]",
                    help="another controller mode: its kind's config with dotted keys set; repeatable")
    ap.add_argument("--static", action="append", type=Path, default=[], metavar="PROFILE",
                    help="a profile file held beside the ladder's rungs (a static a user might pick "
                    "instead of the controller); a baseline of the comparison, in the oracle; repeatable")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=3, help="modes at once (the default among them)")
    ap.add_argument("--retries", type=int, default=1, help="failed repeats run again (a server that "
                    "stopped answering); each failure is kept in the result")
    ap.add_argument("--lead-in", type=float, default=60.0, metavar="S")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None, help="keep every server's log here")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--json", action="store_true")
    return ap


def exit_on_sigterm() -> None:
    """A SIGTERM (``kill``, a CI timeout) ends the run as Ctrl-C does: by an exception, so that
    every server it started (devices, Tritons, HAProxies, workers) is stopped on the way out.
    Python's default for SIGTERM ends the process at once and leaves them all running."""
    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    exit_on_sigterm()
    args = parser().parse_args()
    console = Console(stderr=args.json, width=200)
    tmp = Path(tempfile.mkdtemp(prefix="ab-shared-gpu-"))
    try:
        gateway = args.gateway_config or gateway_config(args.config, tmp / "gateway.yaml")
        variants = [variant(v, args.config, gateway, tmp) for v in args.variant]
        for s in args.schedule or SCHEDULES:
            path = schedule_path(s)
            cmp = comparison(args, path.stem, path, gateway, variants)
            result = run_comparison(cmp, lambda line: console.print(line, style="dim"))
            print_comparison(console, result)
            saved, logs = strip(result)
            if not args.no_save:
                out = save_result("shared_gpu", saved, rows_for(saved))
                folder = out.parent / "logs"
                folder.mkdir(exist_ok=True)
                for name, text in logs.items():
                    with gzip.open(folder / f"{out.stem}-{name}.jsonl.gz", "wb", compresslevel=9) as f:
                        f.write(text)
            if args.json:
                print(json.dumps(saved, indent=1, default=str))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
