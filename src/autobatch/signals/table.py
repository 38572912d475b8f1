"""The rich table ``autobatch watch`` shows: one row per window, newest last."""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.table import Table
from rich.text import Text

from autobatch.signals.window import Window

__all__ = ["window_table"]


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _curve(w: Window, limit: int = 6) -> str:
    if not w.batch_curve_ms:
        return "-"
    items = sorted(w.batch_curve_ms.items())
    text = " ".join(f"{b}:{ms:.1f}" for b, ms in items[:limit])
    return text + (" ..." if len(items) > limit else "")


def window_table(windows: Iterable[Window], *, title: str | None = None) -> Table:
    """A table of ``windows``; stale rows show why (in the last column) instead of numbers."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for name in ("end", "s", "req/s", "fail/s", "batch", "queue ms", "compute ms",
                 "request ms", "pending", "p95 ms", "p99 ms", "util", "curve ms (b:ms)"):
        table.add_column(name, justify="left" if name.startswith(("end", "curve")) else "right")
    for w in windows:
        end = time.strftime("%H:%M:%S", time.localtime(w.end_s))
        if w.stale:
            detail = f"{w.stale_reason}: {w.stale_detail}" if w.stale_detail else w.stale_reason
            table.add_row(end, f"{w.interval_s:.1f}", "[yellow]stale[/]", *[""] * 9,
                          Text(str(detail), style="yellow"))
            continue
        pending = "-"
        if w.pending_requests is not None:
            pending = f"{w.pending_requests:g}"
            if w.pending_delta:
                pending += f" ({w.pending_delta:+g})"
        table.add_row(
            end,
            f"{w.interval_s:.1f}",
            f"{w.request_rps:.1f}",
            f"{w.failures_rps:.1f}",
            _num(w.mean_batch_size, "{:.2f}"),
            _num(w.mean_queue_ms, "{:.2f}"),
            _num(w.mean_compute_ms, "{:.2f}"),
            _num(w.mean_request_ms, "{:.2f}"),
            pending,
            _num(w.p95_ms),
            _num(w.p99_ms),
            _num(None if w.utilization is None else w.utilization * 100, "{:.0f}%"),
            _curve(w),
        )
    return table
