"""The views of ``cotenants run``: each co-tenant job as its own client measured it."""

from __future__ import annotations

from rich import box
from rich.table import Table

from autobatch.cli.views.cells import ms, num
from autobatch.device.runner import CoTenantsReport


def cotenants_table(report: CoTenantsReport) -> Table:
    """One row a job: what it asks of the device, what it got, its latency and stretch."""
    t = Table(title=f"co-tenants on {report.device}, {report.duration_s:.0f} s", box=box.SIMPLE_HEAD)
    for col in ("job", "asks", "batch", "work ms", "done", "failed", "batch/s", "items/s",
                "share", "p50 ms", "p95 ms", "p99 ms", "stretch"):
        t.add_column(col, justify="left" if col == "job" else "right")
    for r in report.results:
        lat = r.latency
        asks = f"duty {r.demand:.0%}" if r.kind == "duty" else f"{r.demand:.0%} (rate)"
        t.add_row(
            r.name, asks, str(r.batch_size), f"{r.work_ms:.2f}", str(r.completed), str(r.failed),
            num(r.batches_per_s), num(r.items_per_s),
            "-" if r.busy_share is None else f"{r.busy_share:.0%}",
            ms(lat.p50_ms if lat else None), ms(lat.p95_ms if lat else None),
            ms(lat.p99_ms if lat else None), num(r.stretch, "{:.2f}x"),
        )
    return t
