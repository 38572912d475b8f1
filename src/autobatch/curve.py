"""Batch curves: the wall time of one forward pass as a function of batch size.

The file format is the one of the repository's ``curves/`` (see curves/README.md)::

    name: laptop-512x288-fp16
    device: 8 GB laptop-class GPU
    unit: ms
    points: {1: 9.82, 2: 20.36, 4: 46.15}

Between measured points the curve is interpolated linearly; past the last
point (or before the first) it is extrapolated from the two nearest points,
and every estimate says which of the three it is. Nothing here does I/O beyond
reading the file handed to :func:`load_curve`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from autobatch.config import Section, load_yaml, read_text
from autobatch.errors import ConfigError

__all__ = ["BatchCurve", "Estimate", "PointKind", "load_curve"]


MAX_BATCH_SIZE = 2**31 - 1
"""The largest batch a curve can describe: Triton's ``max_batch_size`` is an int32."""

class PointKind(str, Enum):
    MEASURED = "measured"
    INTERPOLATED = "interpolated"
    EXTRAPOLATED = "extrapolated"


@dataclass(frozen=True)
class Estimate:
    batch_size: int
    ms: float
    kind: PointKind

    @property
    def per_item_ms(self) -> float:
        return self.ms / self.batch_size


@dataclass(frozen=True)
class BatchCurve:
    """A measured batch curve. ``points`` maps batch size to milliseconds per batch."""

    points: Mapping[int, float]
    name: str = "curve"
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.points:
            raise ConfigError(f"curve {self.name!r}: points: must hold at least one point")
        ordered = dict(sorted(self.points.items()))
        for b, ms in ordered.items():
            if b < 1:
                raise ConfigError(f"curve {self.name!r}: points: batch size {b}: must be >= 1")
            if not ms > 0:
                raise ConfigError(f"curve {self.name!r}: points[{b}] = {ms!r}: must be > 0 ms")
        object.__setattr__(self, "points", ordered)

    # -- shape --------------------------------------------------------------------
    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(self.points)

    @property
    def max_measured(self) -> int:
        return self.sizes[-1]

    def estimate(self, batch_size: int) -> Estimate:
        """Time of one batch of ``batch_size``, flagged measured/interpolated/extrapolated."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        pts = self.points
        if batch_size in pts:
            return Estimate(batch_size, pts[batch_size], PointKind.MEASURED)
        sizes = self.sizes
        if len(sizes) == 1:
            # One point says nothing about the slope: assume no batching gain.
            (b0,) = sizes
            return Estimate(batch_size, pts[b0] * batch_size / b0, PointKind.EXTRAPOLATED)
        if sizes[0] < batch_size < sizes[-1]:
            lo = max(b for b in sizes if b < batch_size)
            hi = min(b for b in sizes if b > batch_size)
            kind = PointKind.INTERPOLATED
        elif batch_size > sizes[-1]:
            lo, hi = sizes[-2], sizes[-1]
            kind = PointKind.EXTRAPOLATED
        else:
            lo, hi = sizes[0], sizes[1]
            kind = PointKind.EXTRAPOLATED
        slope = (pts[hi] - pts[lo]) / (hi - lo)
        ms = pts[lo] + slope * (batch_size - lo)
        if ms <= 0:
            # A falling curve extrapolated below zero: clamp to the per-item time of
            # the nearest point, never a made-up speed-up.
            near = lo if batch_size < lo else hi
            ms = pts[near] / near * batch_size
        return Estimate(batch_size, ms, kind)

    def sizes_to_try(self, max_batch_size: int, *, every_up_to: int = 100_000) -> list[int]:
        """Batch sizes 1..``max_batch_size`` among which any ratio ``b / (A + C * time(b))``
        (a throughput, with per-batch and per-item overheads) is largest.

        Every size up to ``every_up_to``. Past it (Triton allows 2**31-1), the
        sizes where the curve's formula changes: the measured sizes, and where an
        extrapolated line is clamped (it would fall below zero). Between them the
        estimate is one straight line, along which such a ratio is monotone, so the
        ends are enough.
        """
        if max_batch_size <= every_up_to:
            return list(range(1, max_batch_size + 1))
        last = self.sizes[-1]
        out = set(range(1, min(last, every_up_to) + 2)) | {s for s in self.sizes if s <= max_batch_size}
        out.add(max_batch_size)
        if len(self.sizes) > 1:
            # The two extrapolated lines (below the first size, past the last) are clamped
            # where they would fall to 0: their formula changes there.
            for lo, hi in ((self.sizes[0], self.sizes[1]), (self.sizes[-2], self.sizes[-1])):
                slope = (self.points[hi] - self.points[lo]) / (hi - lo)
                if slope != 0:
                    zero = lo - self.points[lo] / slope
                    if math.isfinite(zero) and abs(zero) < 2**62:
                        out |= {math.floor(zero) + d for d in (-1, 0, 1, 2)}
        return sorted(b for b in out if 1 <= b <= max_batch_size)

    def ms(self, batch_size: int, *, allow_extrapolation: bool = True) -> float:
        est = self.estimate(batch_size)
        if est.kind is PointKind.EXTRAPOLATED and not allow_extrapolation:
            raise ConfigError(
                f"curve {self.name!r}: batch size {batch_size} lies outside the measured "
                f"sizes {list(self.sizes)}; pass allow_extrapolation to estimate it anyway"
            )
        return est.ms

    def per_item_ms(self, batch_size: int) -> float:
        return self.estimate(batch_size).per_item_ms

    def gain(self, batch_size: int) -> float:
        """Per-item time at ``batch_size`` relative to batch 1 (< 1 means batching pays)."""
        return self.per_item_ms(batch_size) / self.per_item_ms(1)

    def throughput_rps(self, batch_size: int) -> float:
        """Items per second of one instance running back-to-back batches of this size."""
        return batch_size * 1000.0 / self.estimate(batch_size).ms

    def best_batch(self, max_batch_size: int | None = None) -> int:
        """The measured size with the highest throughput (up to ``max_batch_size``)."""
        sizes = [b for b in self.sizes if max_batch_size is None or b <= max_batch_size] or [1]
        return max(sizes, key=lambda b: (self.throughput_rps(b), -b))

    # -- serialisation --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, **dict(self.meta)}
        out["unit"] = "ms"
        out["points"] = {int(b): round(float(ms), 4) for b, ms in self.points.items()}
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)

    @classmethod
    def from_mapping(cls, data: Any, source: str = "curve") -> BatchCurve:
        sec = Section(source, data)
        name = sec.str("name", "curve")
        unit = sec.str("unit", "ms", choices=("ms", "us", "s"))
        raw_points = sec.raw("points")
        if not isinstance(raw_points, Mapping) or not raw_points:
            raise sec.fail("points", raw_points, "must be a non-empty mapping {batch_size: time}")
        scale = {"ms": 1.0, "us": 0.001, "s": 1000.0}[unit]
        points: dict[int, float] = {}
        spelled: dict[int, Any] = {}
        psec = Section(source, raw_points, "points")
        allowed = f"batch sizes must be integers >= 1 and <= {MAX_BATCH_SIZE}"
        for key in raw_points:
            try:
                b = int(key)
            except (TypeError, ValueError):
                raise psec.fail(str(key), key, allowed) from None
            if not 1 <= b <= MAX_BATCH_SIZE or str(b) != str(key).strip():
                raise psec.fail(str(key), key, allowed)
            if b in spelled:
                # 1 and '1' (or ' 1') are one batch size: which time holds is a guess.
                raise psec.fail(str(key), key, f"batch size {b} is given twice (also as {spelled[b]!r})")
            spelled[b] = key
            value = psec.float(key, min=0.0, min_exclusive=True)
            points[b] = value * scale
        meta = {k: v for k, v in sec.data.items() if k not in ("name", "unit", "points")}
        for k in meta:
            sec.raw(k)
        sec.done()
        return cls(points=points, name=name, meta=meta)


def load_curve(path: str | Path) -> BatchCurve:
    """Load a curve from YAML (the shared format) or CSV (``batch_size,ms`` rows)."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return _load_csv(p)
    data = load_yaml(p)
    return BatchCurve.from_mapping(data, source=str(p))


def _load_csv(p: Path) -> BatchCurve:
    text = read_text(p, what="a CSV file")
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and not r[0].lstrip().startswith("#")]
    if rows and not _is_number(rows[0][0]):
        header = [h.strip() for h in rows[0]]
        if header[:2] != ["batch_size", "ms"]:
            raise ConfigError(
                f"{p}: header = {','.join(header)!r}: must start with batch_size,ms",
                source=str(p),
            )
        rows = rows[1:]
    points: dict[str, float] = {}
    row_of: dict[str, int] = {}
    for i, row in enumerate(rows, start=1):
        if len(row) < 2:
            raise ConfigError(f"{p}: row {i} = {row!r}: needs batch_size,ms", source=str(p))
        key = row[0].strip()
        if key in row_of:
            raise ConfigError(
                f"{p}: row {i}: batch_size = {key}: given twice (row {row_of[key]} has it too)",
                source=str(p), field="batch_size", value=key,
            )
        row_of[key] = i
        points[key] = _to_float(p, i, row[1])
    return BatchCurve.from_mapping({"name": p.stem, "points": points}, source=str(p))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _to_float(p: Path, row: int, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{p}: row {row}: ms = {text!r}: must be a number", source=str(p)) from None
