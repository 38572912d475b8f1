"""The device as the model sees it: how much its batches stretch, and who else uses the device.

Pure: figures in, figures out. On a device others share (co-tenant pods
time-slicing a GPU, other models in the same Triton) a batch's compute time,
as Triton times it, holds the time the others held the device while it ran.
Against the reference curve (the batch's time with the device to itself) that
is the **stretch**: 1 when the device is the model's, 3 when every batch took
three times its curve time. The curve's time of the window's executions is
the model's **own share** of the device, in the device's own time; the
device's utilisation (``DCGM_FI_DEV_GPU_UTIL``) less that share is what the
**others** used. The two tell "the device is shared" (others > 0) from "my
load rose" (others near 0, the stretch the model's own instances' turns).
docs/policy.md says how the policy uses them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from autobatch.curve import BatchCurve

__all__ = ["DeviceView", "curve_ms", "device_view"]


class DeviceView(NamedTuple):
    stretch: float | None
    """Observed compute time of the window's executions over the curve's time for them."""
    own_device_share: float | None
    """The curve's time of the window's executions per second of window (0..1 of one device)."""
    others_share: float | None
    """The device's utilisation less :attr:`own_device_share`, at least 0."""


def curve_ms(curve: BatchCurve, batch: float) -> float:
    """The curve's time of a batch of ``batch`` (a mean, so not always whole): linear
    between the whole sizes around it."""
    b = max(1.0, batch)
    lo = math.floor(b)
    t_lo = curve.ms(lo)
    return t_lo if b == lo else t_lo + (b - lo) * (curve.ms(lo + 1) - t_lo)


def device_view(executions: Iterable[tuple[float, float, float]], window_s: float,
                curve: BatchCurve | None, utilization: float | None) -> DeviceView:
    """The stretch and the shares of a window whose ``executions`` are ``(batch size,
    executions, their compute ms in all)`` rows, over ``window_s`` seconds, against ``curve``
    (None: nothing to measure against, every figure None)."""
    if curve is None or not window_s > 0:
        return DeviceView(None, None, None)
    expected = observed = 0.0
    for batch, count, ms in executions:
        if count > 0 and ms >= 0:
            expected += count * curve_ms(curve, batch)
            observed += ms
    if not (expected > 0 and observed > 0 and math.isfinite(expected) and math.isfinite(observed)):
        return DeviceView(None, 0.0 if expected == 0 else None, _others(utilization, 0.0))
    own = expected / 1000.0 / window_s
    return DeviceView(observed / expected, own, _others(utilization, own))


def _others(utilization: float | None, own: float) -> float | None:
    return None if utilization is None else max(0.0, utilization - own)
