"""Options more than one command takes, declared once: the same flag, type and help everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CurveOption = Annotated[Path, typer.Option(help="Batch curve (YAML or CSV).")]
BatchOverheadOption = Annotated[float, typer.Option(help="Instance time per batch beyond the curve.")]
RequestOverheadOption = Annotated[float, typer.Option(help="Instance time per request beyond the curve.")]
TraceModelOption = Annotated[
    str | None, typer.Option(help="The model to replay from a Triton trace of several.")
]
SessionPolicyOption = Annotated[str, typer.Option(help="oldest-first, batch-waiting or round-robin.")]
RestrictedHeaderOption = Annotated[
    str | None,
    typer.Option(help="Triton's restricted-API header (--http-restricted-api=...:HEADER=KEY), "
                      "sent with the stats and config reads."),
]
RestrictedKeyFileOption = Annotated[
    Path | None, typer.Option(help="A file holding that header's key (never shown).")
]
CotenantsOption = Annotated[
    Path | None,
    typer.Option(help="Co-tenant jobs on the model's device (YAML: cotenants, optionally sharing); "
                      "the instances and the jobs then share one device."),
]
SharingOption = Annotated[
    str | None,
    typer.Option(help="How the device is shared: exclusive, timeslice or concurrent "
                      "[the co-tenant file's, or timeslice]."),
]
QuantumOption = Annotated[
    float | None, typer.Option(help="timeslice: the longest turn on the device, ms [2].")
]
SwitchOption = Annotated[
    float | None, typer.Option(help="timeslice: device time lost at each change of turn, ms [0].")
]
