"""The sidecar's views: a running sidecar's ``/status``, and ``replay``'s decisions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from autobatch.cli.views.cells import num


def status_table(data: Mapping[str, Any]) -> Table:
    """A running sidecar's ``/status`` JSON as a two-column table."""
    table = Table(title=f"autobatch sidecar: {data.get('model')}", show_header=False)
    decision = data.get("last_decision") or {}
    window = data.get("last_window") or {}
    rows = [
        ("active profile", data.get("active_profile")),
        ("pinned", data.get("pinned") or "-"),
        ("last decision", f"{decision.get('action', '-')} ({decision.get('reason', '-')})"),
        ("why", decision.get("message", "-")),
        ("switches", data.get("switches")),
        ("errors", ", ".join(f"{k}={v}" for k, v in (data.get("errors") or {}).items()) or "none"),
    ]
    for key in ("request_rps", "mean_queue_ms", "mean_batch_size", "pending_requests", "p95_ms"):
        value = window.get(key)
        rows.append((f"window {key}", "-" if value is None else f"{value:.3g}"))
    for k, v in rows:
        table.add_row(k, str(v))
    return table


def replay_table(steps: Sequence[Any], title: str, *, show_all: bool = False) -> Table:
    """One row per replayed tick whose decision changed (every tick with ``show_all``)."""
    t0 = steps[0].tick.now_s
    table = Table(title=title)
    for col in ("t s", "req/s", "queue ms", "batch", "pending", "p95 ms", "decision", "reason", "why"):
        table.add_column(col, justify="left" if col in ("decision", "reason", "why") else "right")

    previous = None
    for st in steps:
        d, w = st.decision, st.tick.window
        key = (d.action, d.reason)
        if not show_all and not d.switch and key == previous:
            continue
        previous = key
        verb = f"switch -> {d.target}" if d.switch else f"hold {d.current}"
        table.add_row(
            f"{st.tick.now_s - t0:.0f}",
            num(w.request_rps if w else None), num(w.mean_queue_ms if w else None),
            num(w.mean_batch_size if w else None), num(w.pending_requests if w else None, "{:.0f}"),
            num(w.p95_ms if w else None), verb, d.reason.value, d.message,
        )
    return table


def replay_summary(steps: Sequence[Any]) -> list[str]:
    """The lines under the replay table: switches by reason, agreement with the recording."""
    switches = [st for st in steps if st.decision.switch]
    by_reason: Counter[str] = Counter(st.decision.reason.value for st in switches)
    lines = [f"{len(steps)} ticks, {len(switches)} switches "
             f"({', '.join(f'{k} {v}' for k, v in by_reason.items()) or 'none'}); "
             f"final profile {steps[-1].active_after}"]
    recorded = [st.agrees for st in steps if st.agrees is not None]
    if recorded:
        lines.append(f"agrees with the recorded decisions on {sum(recorded)}/{len(recorded)} ticks")
    return lines
