"""Arrival traces: when each request came, how many rows it carried, at which priority.

A trace is what ``autobatch simulate --trace`` replays through the simulator
and what ``autobatch load --trace`` sends to a real Triton; ``autobatch load
--record-trace`` writes one of what it sent. Three formats are read, each
described in docs/planner.md ("Traces in and out"):

* CSV (``.csv``): a header, then one request a line: ``time_s`` (required),
  ``rows`` (default 1), ``priority`` (default 0); ``#`` starts a comment;
* JSON lines (``.jsonl``, ``.ndjson``): one object a line with the same keys;
* Triton's own trace file (``.json``, or ``.json.0``, ``.json.1``, ...): a
  request arrives at its ``REQUEST_START`` (``QUEUE_START`` if missing), its
  rows are its first input's first dimension with level ``TENSORS`` (else 1),
  its priority is 0 (Triton does not trace it); several models need ``model``.

Times are shifted so that the first request arrives at 0 and requests are put
in arrival order (Triton writes them as they finish). Every error names the
file, the line (or the trace id) and the field: ``trace.csv:7: rows = 'x': must
be an integer >= 1``.

Pure apart from :func:`read_trace` and :func:`write_trace`, which read and
write the file they are given.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autobatch.config import read_text
from autobatch.errors import ConfigError, short_repr

__all__ = [
    "TRACE_FORMATS",
    "ArrivalTrace",
    "RowsSpec",
    "draw_rows",
    "parse_rows",
    "parse_trace_text",
    "read_trace",
    "write_trace",
]

TRACE_FORMATS = ("csv", "jsonl", "triton")

RowsSpec = int | Mapping[int, float]
"""Rows per request: a fixed number, or shares ``{rows: share}`` to draw from."""

MAX_ROWS = 2**31 - 1
"""The most rows one request can carry: Triton's ``max_batch_size`` is an int32."""

MAX_PRIORITY = 2**63 - 1
"""The highest priority a trace can give (held as int64; Triton's levels are far fewer)."""

MAX_SPAN_S = 30 * 86400.0
"""The longest trace replayed: 30 days from the first arrival to the last."""


@dataclass(frozen=True)
class ArrivalTrace:
    """Requests in arrival order: time from the first (s), rows, priority."""

    t_s: np.ndarray
    rows: np.ndarray
    priority: np.ndarray | None = None
    """None when every request has priority 0 (the model's default level)."""
    source: str = "trace"

    def __post_init__(self) -> None:
        t = np.asarray(self.t_s, dtype=np.float64)
        rows = np.asarray(self.rows, dtype=np.int64)
        if t.ndim != 1 or rows.shape != t.shape:
            raise ConfigError(f"{self.source}: time_s and rows must have one entry per request")
        if t.shape[0] == 0:
            raise ConfigError(f"{self.source}: the trace holds no request")
        if not np.all(np.isfinite(t)) or (t.shape[0] > 1 and np.any(np.diff(t) < 0)) or t[0] < 0:
            raise ConfigError(f"{self.source}: time_s must be finite, >= 0 and sorted")
        if rows.min() < 1:
            raise ConfigError(f"{self.source}: rows = {int(rows.min())}: must be an integer >= 1")
        object.__setattr__(self, "t_s", t)
        object.__setattr__(self, "rows", rows)
        if self.priority is not None:
            prio = np.asarray(self.priority, dtype=np.int64)
            if prio.shape != t.shape:
                raise ConfigError(f"{self.source}: priority must have one entry per request")
            object.__setattr__(self, "priority", prio if np.any(prio != 0) else None)

    def __len__(self) -> int:
        return int(self.t_s.shape[0])

    @property
    def duration_s(self) -> float:
        """Up to the last arrival (at least 1 ms, so one request still spans a time)."""
        return max(float(self.t_s[-1]), 0.001)

    @property
    def multi_row(self) -> bool:
        return bool(np.any(self.rows != 1))

    @classmethod
    def of(
        cls,
        t_s: Any,
        rows: Any = None,
        priority: Any = None,
        *,
        source: str = "trace",
    ) -> ArrivalTrace:
        """From unsorted times at any origin: sorted (stably) and shifted to start at 0."""
        t = np.asarray(t_s, dtype=np.float64)
        if t.shape[0] == 0:
            raise ConfigError(f"{source}: the trace holds no request")
        try:
            r = np.ones(t.shape[0], dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
            prio = None if priority is None else np.asarray(priority, dtype=np.int64)
        except OverflowError:
            raise ConfigError(
                f"{source}: rows must be integers >= 1 and <= {MAX_ROWS}, priorities "
                f">= 0 and <= {MAX_PRIORITY}"
            ) from None
        order = np.argsort(t, kind="stable")
        prio = None if prio is None else prio[order]
        return cls(t[order] - t[order[0]], r[order], prio, source)

    def to_rows(self) -> list[dict[str, Any]]:
        prio = self.priority if self.priority is not None else np.zeros(len(self), dtype=np.int64)
        return [
            {"time_s": round(float(t), 6), "rows": int(r), "priority": int(p)}
            for t, r, p in zip(self.t_s, self.rows, prio)
        ]


# -- rows per request ------------------------------------------------------------------------


def parse_rows(text: str, *, what: str = "rows") -> RowsSpec:
    """``"4"`` (every request 4 rows) or ``"1:0.5,4:0.5"`` (shares of each row count)."""
    text = text.strip()
    try:
        if ":" not in text:
            value: RowsSpec = int(text)
        else:
            mix: dict[int, float] = {}
            for part in text.split(","):
                r, _, share = part.partition(":")
                mix[int(r)] = float(share)
            value = mix
    except ValueError:
        raise ConfigError(
            f"{what} = {text!r}: must be a number of rows (4) or shares of row counts "
            f"(1:0.5,4:0.5)"
        ) from None
    check_rows_spec(value, what=what)
    return value


def check_rows_spec(spec: RowsSpec, *, what: str = "rows") -> None:
    if isinstance(spec, Mapping):
        bad = [k for k, v in spec.items() if not _is_int(k) or not 1 <= k <= MAX_ROWS or not (v >= 0)]
        if not spec or bad or sum(spec.values()) <= 0 or not all(math.isfinite(v) for v in spec.values()):
            raise ConfigError(
                f"{what} = {dict(spec)!r}: row counts must be integers >= 1 and <= {MAX_ROWS} "
                f"with finite shares >= 0, not all 0"
            )
    elif not _is_int(spec) or not 1 <= spec <= MAX_ROWS:
        raise ConfigError(f"{what} = {spec!r}: must be an integer >= 1 and <= {MAX_ROWS}")


def draw_rows(n: int, spec: RowsSpec, seed: int = 0) -> np.ndarray:
    """Rows of ``n`` requests: all ``spec``, or drawn from the shares with ``seed``."""
    check_rows_spec(spec)
    if not isinstance(spec, Mapping):
        return np.full(n, int(spec), dtype=np.int64)
    keys = sorted(spec)
    weights = np.array([spec[k] for k in keys], dtype=np.float64)
    rng = np.random.default_rng([seed, 13])
    return np.array(keys, dtype=np.int64)[rng.choice(len(keys), size=n, p=weights / weights.sum())]


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


# -- reading ---------------------------------------------------------------------------------


def read_trace(path: str | Path, *, model: str | None = None) -> ArrivalTrace:
    """Read a trace file; the format comes from the suffix (and, for ``.json``, the content)."""
    p = Path(path)
    text = read_text(p, what="a trace file")
    return parse_trace_text(text, str(p), fmt=_format_of(p, text), model=model)


def _format_of(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json" or re.fullmatch(r".+\.json\.\d+", path.name):
        # Triton writes one JSON array (trace.json, or trace.json.0, .1, ... with a
        # log frequency); a .json of JSON lines is read as lines.
        return "triton" if text.lstrip().startswith("[") else "jsonl"
    raise ConfigError(
        f"{path}: suffix {path.suffix or '(none)'!r}: a trace file must be .csv, .jsonl "
        f"(JSON lines) or .json (Triton's trace file)"
    )


def parse_trace_text(text: str, source: str, *, fmt: str, model: str | None = None) -> ArrivalTrace:
    if fmt == "csv":
        return _parse_csv(text, source)
    if fmt == "jsonl":
        return _parse_jsonl(text, source)
    if fmt == "triton":
        return _parse_triton(text, source, model)
    raise ConfigError(f"format = {fmt!r}: must be one of {', '.join(TRACE_FORMATS)}")


def _field(value: Any, where: str, name: str, *, kind: str) -> Any:
    """One checked value: ``time_s`` a number >= 0, ``rows`` an integer >= 1 and <=
    :data:`MAX_ROWS`, ``priority`` an integer >= 0 and <= :data:`MAX_PRIORITY`, ``ns``
    (Triton's timestamp) an integer >= 0."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text) if kind == "time" else int(text)
        except ValueError:
            value = text
    shown = value
    if isinstance(value, float) and kind != "time" and value.is_integer():
        value = int(value)
    ok = (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        and value >= 0
        if kind == "time"
        else _is_int(value) and value >= (1 if kind == "rows" else 0)
        and (kind == "ns" or value <= (MAX_ROWS if kind == "rows" else MAX_PRIORITY))
    )
    if not ok:
        need = {"time": "a number >= 0 (seconds)", "rows": f"an integer >= 1 and <= {MAX_ROWS}",
                "priority": f"an integer >= 0 and <= {MAX_PRIORITY}", "ns": "an integer >= 0"}[kind]
        raise ConfigError(f"{where}: {name} = {shown!r}: must be {need}", field=name, value=shown)
    return value


def _build(
    times: list[float], rows: list[int], prio: list[int], source: str, labels: list[str]
) -> ArrivalTrace:
    """``labels[i]`` names request i's time in an error (``trace.csv:7: time_s = 9.5``)."""
    if not times:
        raise ConfigError(f"{source}: the trace holds no request")
    # A longer span is a mistake (a time in ms, or two traces run together), and the
    # simulator and the load generator would run through all of it.
    last = max(range(len(times)), key=times.__getitem__)
    span_s = times[last] - min(times)
    if span_s > MAX_SPAN_S:
        raise ConfigError(
            f"{labels[last]}: {span_s:g} s after the first arrival: a trace spans at most "
            f"{MAX_SPAN_S:.0f} s (30 days)"
        )
    return ArrivalTrace.of(times, rows, prio if any(prio) else None, source=source)


def _parse_csv(text: str, source: str) -> ArrivalTrace:
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines())
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ConfigError(f"{source}: the trace holds no request")
    header_no, header = lines[0]
    names = [c.strip() for c in next(csv.reader([header]))]
    if "time_s" not in names:
        raise ConfigError(
            f"{source}:{header_no}: header = {header.strip()!r}: must name the columns, "
            f"with time_s (and optionally rows, priority)"
        )
    unknown = [c for c in names if c not in ("time_s", "rows", "priority")]
    if unknown:
        raise ConfigError(
            f"{source}:{header_no}: column {unknown[0]!r}: must be time_s, rows or priority"
        )
    twice = [c for i, c in enumerate(names) if c in names[:i]]
    if twice:
        raise ConfigError(
            f"{source}:{header_no}: column {twice[0]!r}: given twice; name each column once"
        )
    col = {name: names.index(name) for name in names}
    times: list[float] = []
    rows: list[int] = []
    prio: list[int] = []
    labels: list[str] = []
    for line_no, line in lines[1:]:
        cells = next(csv.reader([line]))
        where = f"{source}:{line_no}"
        if len(cells) != len(names):
            raise ConfigError(
                f"{where}: {len(cells)} field(s): must have {len(names)} ({', '.join(names)})"
            )
        times.append(float(_field(cells[col["time_s"]], where, "time_s", kind="time")))
        labels.append(f"{where}: time_s = {times[-1]!r}")
        rows.append(_field(cells[col["rows"]], where, "rows", kind="rows") if "rows" in col else 1)
        prio.append(
            _field(cells[col["priority"]], where, "priority", kind="priority") if "priority" in col else 0
        )
    return _build(times, rows, prio, source, labels)


def _parse_jsonl(text: str, source: str) -> ArrivalTrace:
    times: list[float] = []
    rows: list[int] = []
    prio: list[int] = []
    labels: list[str] = []
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        where = f"{source}:{i + 1}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: {line.strip()[:60]!r}: must be a JSON object")
        if "time_s" not in obj:
            raise ConfigError(f"{where}: time_s: missing (every line needs the arrival time)")
        unknown = [k for k in obj if k not in ("time_s", "rows", "priority")]
        if unknown:
            raise ConfigError(f"{where}: key {unknown[0]!r}: must be time_s, rows or priority")
        times.append(float(_field(obj["time_s"], where, "time_s", kind="time")))
        labels.append(f"{where}: time_s = {times[-1]!r}")
        rows.append(_field(obj.get("rows", 1), where, "rows", kind="rows"))
        prio.append(_field(obj.get("priority", 0), where, "priority", kind="priority"))
    return _build(times, rows, prio, source, labels)


_ARRIVAL_STAMPS = ("REQUEST_START", "QUEUE_START")


def _parse_triton(text: str, source: str, model: str | None) -> ArrivalTrace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source}:{exc.lineno}: not JSON ({exc.msg}); Triton writes its trace as one JSON array"
        ) from None
    if not isinstance(doc, list):
        raise ConfigError(f"{source}: must be a JSON array of trace entries (Triton's trace file)")
    # Triton writes a trace as several entries with the same id: the model, the
    # timestamps, the tensors. Gather them per id.
    by_id: dict[Any, dict[str, Any]] = {}
    for k, entry in enumerate(doc):
        if not isinstance(entry, dict) or "id" not in entry:
            raise ConfigError(f"{source}: entry {k}: must be an object with an id (Triton's trace)")
        trace_id = entry["id"]
        if isinstance(trace_id, bool) or not isinstance(trace_id, (int, str)):
            raise ConfigError(
                f"{source}: entry {k}: id = {trace_id!r}: must be an integer or a string (Triton's trace id)"
            )
        timestamps = entry.get("timestamps") or []
        if not isinstance(timestamps, list):
            raise ConfigError(
                f"{source}: trace id {trace_id}: timestamps = {short_repr(timestamps)}: must be a list of "
                f"{{name, ns}} objects"
            )
        rec = by_id.setdefault(entry["id"], {"stamps": {}, "rows": None, "model": None})
        if "model_name" in entry:
            rec["model"] = entry["model_name"]
        for stamp in timestamps:
            if isinstance(stamp, dict) and isinstance(stamp.get("name"), str) and "ns" in stamp:
                rec["stamps"].setdefault(stamp["name"], stamp["ns"])
        tensor = entry.get("tensor")
        if (entry.get("activity") == "TENSOR_QUEUE_INPUT" and isinstance(tensor, dict)
                and rec["rows"] is None):
            rec["rows"] = _rows_of_shape(tensor.get("shape"), f"{source}: trace id {entry['id']}")
    models = sorted({str(r["model"]) for r in by_id.values() if r["model"] is not None})
    if model is None and len(models) > 1:
        raise ConfigError(
            f"{source}: model: the trace holds {len(models)} models ({', '.join(models)}); "
            f"name the one to replay"
        )
    if model is not None and model not in models:
        raise ConfigError(
            f"{source}: model = {model!r}: not in the trace (it holds: {', '.join(models) or 'none'})"
        )
    times: list[float] = []
    rows: list[int] = []
    labels: list[str] = []
    for trace_id, rec in by_id.items():
        if model is not None and rec["model"] != model:
            continue
        stamp = next((rec["stamps"][s] for s in _ARRIVAL_STAMPS if s in rec["stamps"]), None)
        if stamp is None:
            continue  # an entry with no timestamps (e.g. a level without TIMESTAMPS)
        ns = _field(stamp, f"{source}: trace id {trace_id}", "REQUEST_START ns", kind="ns")
        times.append(ns / 1e9)
        labels.append(f"{source}: trace id {trace_id}: REQUEST_START ns = {ns!r}")
        rows.append(rec["rows"] or 1)
    if not times:
        raise ConfigError(
            f"{source}: no request with a REQUEST_START timestamp: trace with "
            f"level=TIMESTAMPS (and TENSORS for the rows)"
        )
    return _build(times, rows, [0] * len(times), source, labels)


def _rows_of_shape(shape: Any, where: str) -> int:
    """The batch dimension of a traced tensor: Triton writes the shape as "2,16"."""
    dims = shape.split(",") if isinstance(shape, str) else shape
    try:
        first = int(str(dims[0]).strip())
    except (TypeError, ValueError, IndexError):
        raise ConfigError(f"{where}: tensor shape = {shape!r}: must start with the batch dimension") from None
    if not 1 <= first <= MAX_ROWS:
        raise ConfigError(
            f"{where}: tensor shape = {shape!r}: batch dimension must be >= 1 and <= {MAX_ROWS}"
        )
    return first


# -- writing ---------------------------------------------------------------------------------


def write_trace(trace: ArrivalTrace, path: str | Path) -> Path:
    """Write ``trace`` as CSV (``.csv``) or JSON lines (``.jsonl``/``.ndjson``/``.json``)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".jsonl", ".ndjson", ".json"):
        raise ConfigError(
            f"trace = {str(p)!r}: suffix {p.suffix or '(none)'!r}: write a trace as .csv or .jsonl"
        )
    items = trace.to_rows()
    if suffix == ".csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["time_s", "rows", "priority"])
        for it in items:
            w.writerow([f"{it['time_s']:.6f}", it["rows"], it["priority"]])
        text = buf.getvalue()
    else:
        text = "".join(json.dumps(it) + "\n" for it in items)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"trace = {str(p)!r}: cannot write there: {exc.strerror or exc}", field="trace", value=str(p)
        ) from exc
    return p
