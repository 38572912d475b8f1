"""What benchmarks/shared_gpu.py prints and adds to the results table, from one comparison's result."""

from __future__ import annotations

import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autobatch.lab.compare import oracle
from autobatch.lab.sidebyside.layout import statics_of

__all__ = ["cotenant_figures", "headroom", "headroom_line", "ladder_oracle", "merged_modes",
           "mode_cores", "mode_cores_line", "print_comparison", "rows_for", "verdict_line"]

CONTROLLERS = ("reload", "gateway")


def controllers(result: Mapping[str, Any]) -> list[str]:
    """The controller modes of a result (the usual two, and any variant the run added)."""
    return list(result.get("controllers") or CONTROLLERS)


BESIDE = "triton-default beside the controllers"
"""The default of the controllers' group, when the static profiles ran in another: the
baseline of the controllers' ratios, shown so the groups' conditions can be compared."""


def merged_modes(run: Mapping[str, Any], kinds: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """One repeat's modes by name, in the order they ran: each controller from its group, the
    statics as the verdicts take them (:func:`~autobatch.lab.sidebyside.layout.statics_of`),
    and the controllers' own default as :data:`BESIDE` when the statics ran in another group."""
    out: dict[str, dict[str, Any]] = {}
    for g in run["groups"]:
        if len(run["groups"]) > 1 and set(CONTROLLERS) & set(g["modes"]):  # variants run beside these
            out[BESIDE] = g["modes"]["triton-default"]
        out.update(g["modes"])
    out.update(statics_of(run["groups"], set(kinds or CONTROLLERS)))
    return out


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _measured(r: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [p for p in r["phases"] if p.get("measured", True)]


def phase_table(result: Mapping[str, Any]) -> Table:
    runs = [merged_modes(r, result.get("controllers")) for r in result["runs"]]
    modes = list(runs[0])
    t = Table(title=f"{result['schedule']}: share over the SLO ({result['slo_p95_ms']:g} ms) / p95 ms / "
              f"device ms per request [profile in force], medians of {len(runs)} run(s)")
    t.add_column("phase")
    t.add_column("rate/s", justify="right")
    t.add_column("co-t.", justify="right")
    for m in modes:
        t.add_column(m, justify="right")
    for i, ph in enumerate(result["phases"]):
        cells = []
        for m in modes:
            ps = [_measured(r[m])[i] for r in runs if m in r]
            share = _median([p["over_slo_share"] for p in ps])
            p95 = _median([p["p95_ms"] for p in ps])
            dev = _median([p["device_ms"] for p in ps])
            cell = (f"{share:.1%} / {p95 or 0:.0f} / " if share is not None else "- / ") + \
                ("-" if dev is None else f"{dev:.2f}")
            # which variant served (a gateway's, runs from 2026-12-06 04:50), else the sidecar's /status
            shares = (ps[0].get("served") or ps[0]["profiles"]) if ps else None
            if m in controllers(result) and shares:
                cell += escape(f" [{max(shares.items(), key=lambda kv: kv[1])[0]}]")
            cells.append(cell)
        t.add_row(ph["name"], f"{ph['rate_rps']:g}", str(ph.get("cotenants") or 0), *cells)
    return t


def _react(x: Mapping[str, Any]) -> str:
    """One arrival's reaction in windows: ``none`` (no switch followed it), or ``not needed``
    (the profile in force already suited the phase; runs before 2026-12-02 14:00 lack it)."""
    if x.get("needed") is False:
        return "not needed"
    return "none" if x["windows"] is None else f"{x['windows']:g}"


def verdict_line(result: Mapping[str, Any], mode: str) -> str:
    s = result["summary"][mode]

    def med(k: str, fmt: str = "{:.2f}") -> str:
        v = s.get(k)
        return "-" if not v else fmt.format(v["median"]) + f" (spread {v['spread']:.3f})"

    runs = result["runs"]
    last = [r["verdicts"]["controllers"].get(mode) for r in runs]
    last = [v for v in last if v]
    target = last[0]["target_points"] if last else 0
    beaten = s["every_static_loses"]
    winners = sorted({m for v in last for m, why in v["losers"].items() if why is None})
    reacts = [x for v in last for x in v["reactions"]]
    react = "no co-tenant arrival" if not reacts else ", ".join(map(_react, reacts)) + " windows"
    worst = med('worst_excess_points', '{:+.1f}')
    beside = med('worst_beside_default_points', '{:+.1f}')
    return (f"{result['schedule']}: controller by {mode}: worst phase {worst} "
            f"points over the best static (target {target:g}), {beside} beside its own group's "
            f"default; device {med('device_vs_default')}x the "
            f"default's (target 0.7x), {med('device_vs_oracle')}x the oracle's (target 1.1x); every static "
            f"loses: {sum(beaten)}/{len(beaten)} runs" + (f" (not: {', '.join(winners)})" if winners else "")
            + f"; reaction to co-tenants: {react}")


def cotenant_figures(result: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per mode: the co-tenants' items a second (summed over jobs) and their worst p95 ms,
    medians over the repeats."""
    out: dict[str, dict[str, float | None]] = {}
    runs = [merged_modes(r, result.get("controllers")) for r in result["runs"]]
    for m in runs[0]:
        if m == BESIDE:
            continue
        reps = [r[m].get("cotenants") for r in runs if m in r and r[m].get("cotenants")]
        if not reps:
            continue
        items = [sum(j["items_per_s"] or 0 for j in rep["cotenants"]) for rep in reps]
        p95 = [max(((j.get("latency_ms") or {}).get("p95") or 0) for j in rep["cotenants"]) for rep in reps]
        out[m] = {"items_per_s": _median(items), "p95_ms": _median(p95)}
    return out


def headroom(result: Mapping[str, Any]) -> dict[str, Any]:
    """The CPU evidence over every group of every repeat: cores our processes used, the load
    average, the devices' answer lateness and the generators' send lag (the worst of each); and,
    where the run recorded them, the cores the rest of the machine used and the hypervisor stole."""
    cores, loads, late, mean, lag, others, steal = [], [], [], [], [], [], []
    for run in result["runs"]:
        for g in run["groups"]:
            cores.append(g["cpu_cores"]["ours"])
            loads.append(g["load_average"][0])
            machine = g.get("machine_cores") or {}
            others.append(machine.get("others"))
            steal.append(machine.get("steal"))
            for r in g["modes"].values():
                for p in _measured(r):
                    late.append(p.get("late_share"))
                    mean.append(p.get("lateness_mean_ms"))
                    lag.append(p.get("lag_p99_ms"))

    def top(xs: Sequence[float | None]) -> float | None:
        got = [x for x in xs if x is not None]
        return max(got) if got else None

    return {"cores_max": top(cores), "cores_median": _median(cores), "load_average_max": top(loads),
            "late_share_max": top(late), "lateness_mean_ms_max": top(mean), "lag_p99_ms_max": top(lag),
            "others_cores_max": top(others), "steal_cores_max": top(steal)}


def mode_cores(result: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Each mode's own cores by process kind, the median over the groups it ran in (runs saved
    before 2026-12-06 have no ``cpu_by_mode``: empty)."""
    got: dict[str, dict[str, list[float]]] = {}
    for run in result["runs"]:
        for g in run["groups"]:
            for mode, kinds in (g.get("cpu_by_mode") or {}).items():
                for kind, cores in kinds.items():
                    got.setdefault(mode, {}).setdefault(kind, []).append(cores)
    return {m: {k: _median(v) for k, v in kinds.items()} for m, kinds in got.items()}


def mode_cores_line(cores: Mapping[str, Mapping[str, float]]) -> str:
    """The modes' own cores beside each other, each against the reload's where there is one."""
    base = cores.get("reload", {}).get("all")

    def one(m: str, k: Mapping[str, float]) -> str:
        vs = f", {k['all'] / base:.2f}x the reload's" if base and m != "reload" else ""
        return (f"{m} {k['all']:.3f} (Triton {k.get('triton', 0):.3f}, sidecar {k.get('sidecar', 0):.3f}, "
                f"generator {k.get('load', 0):.3f}{vs})")

    return "; ".join(one(m, k) for m, k in cores.items())


def print_comparison(console: Console, result: Mapping[str, Any]) -> None:
    console.print(phase_table(result))
    for mode in controllers(result):
        if mode in result["summary"]:
            console.print(verdict_line(result, mode))
    single = result["summary"]["single_static"]
    console.print(f"one static profile is the answer: {', '.join(str(s) for s in single)} (per run)")
    cot = cotenant_figures(result)
    if cot:
        console.print("co-tenants' throughput (items/s) and worst p95 (ms) by mode: " + ", ".join(
            f"{m} {v['items_per_s']:.0f}/s p95 {v['p95_ms']:.0f}" for m, v in cot.items()))
    console.print("CPU headroom: " + headroom_line(headroom(result)))
    own = mode_cores(result)
    if own:
        console.print("each mode's own cores (median over groups): " + mode_cores_line(own))
    for f in result.get("failed", []):
        console.print(f"repeat {f['repeat'] + 1} failed (try {f['retry'] + 1}) in the group of "
                      f"{', '.join(f['group'])}: {f['error']}")


def _r(v: float | None, n: int = 3) -> str:
    return "-" if v is None else f"{v:.{n}g}"


def headroom_line(h: Mapping[str, Any]) -> str:
    machine = ("" if h.get("others_cores_max") is None else
               f"; the rest of the machine used at most {_r(h['others_cores_max'])} cores, the hypervisor "
               f"stole at most {_r(h['steal_cores_max'])}")
    return (f"our processes used {_r(h['cores_median'])} cores of 2 (median over groups; at most "
            f"{_r(h['cores_max'])}), load average up to {_r(h['load_average_max'])}; device answers over "
            f"2 ms late: at most {_r(h['late_share_max'])} of a phase's (mean lateness at most "
            f"{_r(h['lateness_mean_ms_max'])} ms); generator send lag p99 at most "
            f"{_r(h['lag_p99_ms_max'])} ms{machine}")


def rows_for(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    from record import row

    rows = []
    sched = result["schedule"]
    n = len(result["runs"])
    for mode in controllers(result):
        if mode not in result["summary"]:
            continue
        dv = result["summary"][mode].get("device_vs_default")
        rows.append(row(f"shared GPU ({result['curve']}), {sched}: controller by {mode}, {n} runs at once "
                        f"with every static profile", verdict_line(result, mode),
                        key=f"shared_gpu_{sched}_{mode}", value=None if not dv else dv["median"], unit="x",
                        value_name="device vs default"))
    if result.get("variants") or tuple(controllers(result)) != CONTROLLERS:
        # An experiment: its co-tenants and headroom are in docs/shared-gpu.md's table. These
        # two rows are by schedule, so in docs/results.md they would replace the shipped run's.
        return rows
    cot = cotenant_figures(result)
    if cot:
        rows.append(row(f"shared GPU ({result['curve']}), {sched}: the co-tenants' throughput by mode",
                        ", ".join(f"{m} {v['items_per_s']:.0f} items/s (p95 {v['p95_ms']:.0f} ms)"
                                  for m, v in cot.items())))
    rows.append(row(f"shared GPU, {sched}: CPU headroom while the modes ran at once",
                    headroom_line(headroom(result))))
    return rows


# -- docs/shared-gpu.md's table of the side-by-side runs (generated, checked by a unit test) --------

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "shared_gpu"
DOCS = ROOT / "docs" / "shared-gpu.md"
BLOCK = "shared-gpu-runs"


def newest_runs(results: Path = RESULTS) -> list[dict[str, Any]]:
    """The newest saved result of each command line, oldest first (each its ``_file``)."""
    from record import saved

    by_cmd: dict[str, dict[str, Any]] = {}
    for doc in saved(results):
        by_cmd[doc["command"]] = doc
    return sorted(by_cmd.values(), key=lambda d: d["date"])


def _fig(s: Mapping[str, Any] | None, fmt: str = "{:.2f}") -> str:
    return "-" if not s else f"{fmt.format(s['median'])} ({s['spread']:.3f})"


def top_rung(data: Mapping[str, Any], mode: str) -> str:
    """The top rung of ``mode``'s ladder: a variant's own ``profiles.ladder=[...]``, else the
    comparison's (``data.ladder``). The T4 sidecar's climbed to ``aggressive`` until
    2026-12-04 and to ``wait25`` since, under one name: this tells their rows apart."""
    for spec in data.get("variants") or []:
        name, _, rest = spec.partition("=")
        found = re.search(r"profiles\.ladder=\[([^\]]*)\]", rest) if name == mode else None
        if found:
            return found.group(1).split(",")[-1].strip()
    return str(data["ladder"][-1])


def docs_rows(doc: Mapping[str, Any]) -> list[str]:
    """One line per controller of one saved comparison."""
    data = doc["data"]
    h = headroom(data)
    cot = cotenant_figures(data)
    single = [s for s in data["summary"]["single_static"] if s]
    out = []
    for mode in controllers(data):
        s = data["summary"].get(mode)
        if not s:
            continue
        vs = [r["verdicts"]["controllers"][mode] for r in data["runs"]
              if mode in r["verdicts"]["controllers"]]
        reacts = [x for v in vs for x in v["reactions"]]
        react = "-" if not reacts else ", ".join(map(_react, reacts))
        mine = cot.get(mode, {}).get("items_per_s")
        base = cot.get("triton-default", {}).get("items_per_s")
        items = "-" if not mine or not base else f"{mine:.0f} ({mine / base:.2f}x)"
        out.append(
            f"| {data['schedule']} | {mode} (to {top_rung(data, mode)}) | "
            f"{_fig(s.get('worst_excess_points'), '{:+.1f}')} "
            f"(target {vs[0]['target_points']:g}) | "
            f"{_fig(s.get('worst_beside_default_points'), '{:+.1f}')} | {_fig(s.get('device_vs_default'))} | "
            f"{_fig(s.get('device_vs_oracle'))} | {sum(s['every_static_loses'])}/"
            f"{len(s['every_static_loses'])} | {', '.join(sorted(set(single))) or 'none'} "
            f"({len(single)}/{len(data['runs'])}) | {react} | {items} | {_r(h['load_average_max'])} / "
            f"{_r(h['lag_p99_ms_max'])} / {_r(h['late_share_max'])} | "
            f"[{doc['date'][:16]}](../{doc['_file']}), {data.get('code', '-')} |")
    return out


def docs_table(results: Path = RESULTS) -> str:
    lines = [
        "| schedule | controller (to its top rung) | worst phase, points over the best static | "
        "the same, beside its group's default | device vs default | device vs oracle | every static loses | "
        "one static is the answer | reaction, windows | "
        "co-tenants' items/s (vs default) | load avg / send lag p99 ms / late share | run, code |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    docs = newest_runs(results)
    for doc in docs:
        lines += docs_rows(doc)
    lines.append("")
    lines.append("Medians over the repeats, the spread (max - min) in brackets; each run's command is in its "
                 "file. The table by `.venv/bin/python benchmarks/shared_gpu_report.py --docs`.")
    return "\n".join(lines)


def _docs_text(results: Path = RESULTS, page: Path = DOCS) -> tuple[str, str]:
    from record import fill_blocks

    text = page.read_text(encoding="utf-8")
    return text, fill_blocks(page, text, {BLOCK: lambda: docs_table(results)})


def check(results: Path = RESULTS, page: Path = DOCS) -> bool:
    """Whether the page's table is what the saved runs give."""
    from record import sync_blocks

    return sync_blocks(page, {BLOCK: lambda: docs_table(results)}, check=True)


def ladder_oracle(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per repeat and controller: its device time against the verdict's oracle (over every
    static profile the run held, those off the ladder included) and against the oracle over
    the ladder's own rungs, the most a controller on that ladder could reach; the same
    reaction time. Each is None where that oracle has no choice in some phase."""
    data = result["data"]
    ladder = set(data["ladder"])
    out = []
    for run in data["runs"]:
        statics = statics_of(run["groups"], set(controllers(result)))
        rungs = {m: _measured(r) for m, r in statics.items() if m in ladder}
        durations = [p["duration_s"] for p in next(iter(rungs.values()))] if rungs else []
        for mode, v in run["verdicts"]["controllers"].items():
            orc = v.get("oracle") or {}
            mine = oracle(rungs, durations, orc.get("react_s") or 0.0) if rungs else None
            out.append({"repeat": run["repeat"], "mode": mode, "vs_oracle": v.get("device_vs_oracle"),
                        "vs_ladder_oracle": None if mine is None or not v.get("device_ms")
                        else v["device_ms"] / mine.device_ms,
                        "ladder_oracle_picks": None if mine is None else list(mine.profiles)})
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="docs/shared-gpu.md's table of the side-by-side runs")
    ap.add_argument("--docs", action="store_true", help="rewrite the table")
    ap.add_argument("--check", action="store_true", help="exit 1 when the table is stale")
    ap.add_argument("--ladder-oracle", metavar="FILE", type=Path,
                    help="a saved run: each controller against the oracle over every static it held "
                         "and over its ladder's rungs alone")
    args = ap.parse_args()
    if args.ladder_oracle:
        import json

        for row in ladder_oracle(json.loads(args.ladder_oracle.read_text(encoding="utf-8"))):
            print(f"repeat {row['repeat']} {row['mode']}: device {_r(row['vs_oracle'])}x the oracle's, "
                  f"{_r(row['vs_ladder_oracle'])}x the ladder's own oracle's "
                  f"({', '.join(str(p) for p in row['ladder_oracle_picks'] or [])})")
        return
    if args.check:
        sys.exit(0 if check() else
                 f"{DOCS.relative_to(ROOT)}: stale; run benchmarks/shared_gpu_report.py --docs")
    if args.docs:
        from record import sync_blocks

        sync_blocks(DOCS, {BLOCK: docs_table}, check=False)
    else:
        print(docs_table())


if __name__ == "__main__":
    main()
