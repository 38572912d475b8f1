"""The cells every view formats numbers with: a dash for a missing value."""

from __future__ import annotations


def ms(v: float | None) -> str:
    """Milliseconds to one decimal, or ``-``."""
    return "-" if v is None else f"{v:.1f}"


def num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)
