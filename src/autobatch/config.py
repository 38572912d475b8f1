"""Reading YAML input into typed values, with errors that say exactly what is wrong.

Every file autobatch reads (profiles, curves, schedules, the sidecar config)
goes through :func:`load_yaml` and a :class:`Section`. A bad value raises
:class:`~autobatch.errors.ConfigError` with one line naming the file, the
field path, the value and what is allowed, e.g.::

    profiles/dense_mlp/aggressive.yaml: dynamic_batching.preferred_batch_size[1] = 64:
    must be <= max_batch_size (32)

The only I/O here is reading the file.
"""

from __future__ import annotations

import difflib
import gzip
import math
import operator
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from autobatch.errors import ConfigError, short_repr

__all__ = ["MISSING", "URL_RULE", "Section", "check_seed", "http_url", "load_yaml", "parse_yaml", "read_text"]


URL_RULE = "must be an http:// or https:// URL, or HOST:PORT (e.g. 127.0.0.1:8000), with a port in 1-65535"


def check_seed(seed: Any, field: str = "seed") -> int:
    """``seed`` if numpy takes it: an integer >= 0 (numpy's own refusal is a traceback, and
    ``autobatch load`` met it only after connecting). ``field`` names it: ``--seed`` at the CLI."""
    try:
        value = operator.index(seed)  # ints and numpy integers, not floats or strings
    except TypeError:
        value = -1
    if isinstance(seed, bool) or value < 0:
        raise ConfigError(f"{field} = {seed!r}: must be an integer >= 0", field=field, value=seed)
    return value


def http_url(value: Any) -> str | None:
    """``value`` as an http(s) URL without a trailing slash, or None if it is not one.

    ``host:port``, as tritonclient takes it, means ``http://host:port``.
    """
    if not isinstance(value, str) or not value.strip():
        return None
    u = value.strip()
    if "://" not in u:
        u = "http://" + u
    try:
        parts = urlsplit(u)
        port = parts.port  # raises on a port that is not a number or over 65535
    except ValueError:
        return None
    if port == 0:  # nothing can be reached there
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return u.rstrip("/")


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def read_text(path: str | Path, *, what: str = "a file", error: type[ConfigError] = ConfigError) -> str:
    """Read one UTF-8 input file, gzip-compressed or not (a rotated decision log, the
    benchmarks' saved ones); any failure is a one-line ``ConfigError`` naming it."""
    p = Path(path)
    try:
        data = p.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        # as text mode reads it: universal newlines
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise error(f"{p}: not a readable gzip file: {exc}", source=str(p)) from exc
    except FileNotFoundError as exc:
        raise error(f"{p}: file not found", source=str(p)) from exc
    except IsADirectoryError as exc:
        raise error(f"{p}: is a directory, expected {what}", source=str(p)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{p}: cannot read: {exc}", source=str(p)) from exc


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

    PyYAML keeps the last of two equal keys without a word, so a config with
    ``min_dwell_s`` twice would silently run on the second. Merge keys (``<<``)
    still override, as YAML means them to.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"duplicate key {short_repr(key)} (first at line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str, *, error: type[ConfigError] = ConfigError) -> Any:
    """Parse YAML text (duplicate keys refused); any failure is a one-line ``ConfigError``."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{source}: not valid YAML{where}: {problem}", source=source) from exc
    except (ValueError, OverflowError, RecursionError) as exc:
        # Odd scalars (a timestamp out of range) and absurd nesting fail outside YAMLError.
        raise error(f"{source}: not valid YAML: {short_repr(str(exc), 120)}", source=source) from exc


def load_yaml(path: str | Path, *, error: type[ConfigError] = ConfigError) -> Any:
    """Read and parse one YAML file; any failure is a one-line ``ConfigError``."""
    p = Path(path)
    return parse_yaml(read_text(p, what="a YAML file", error=error), str(p), error=error)


class Section:
    """A mapping read field by field, each read checked and named by its path.

    Call :meth:`done` at the end to reject keys nobody asked for (a typo in a
    config must not be silently ignored).
    """

    def __init__(
        self,
        source: str,
        data: Any,
        path: str = "",
        *,
        error: type[ConfigError] = ConfigError,
    ) -> None:
        self.source = source
        self.path = path
        self.error = error
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            where = path or "(top level)"
            raise error(
                f"{source}: {where} = {short_repr(data)}: must be a mapping of field: value",
                source=source,
                field=path,
                value=data,
            )
        self.data: Mapping[str, Any] = data
        self._seen: set[str] = set()

    # -- helpers -----------------------------------------------------------------
    def field_path(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        if not isinstance(key, str) or not key.isprintable():
            key = repr(key)  # a key with a newline in it must not break the one-line error
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str | int, value: Any, allowed: str) -> ConfigError:
        field = self.field_path(key)
        return self.error(
            f"{self.source}: {field} = {short_repr(value)}: {allowed}",
            source=self.source,
            field=field,
            value=value,
        )

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = MISSING, *, null_is_default: bool = False) -> Any:
        """The value of ``key`` as given, or ``default`` when the field is left out.

        An explicit ``null`` counts as left out only where the default is None (an
        optional field) or ``null_is_default`` says so (an empty section): elsewhere
        ``interval_s: null`` is a mistake, not a request for the default.
        """
        self._seen.add(key)
        if (key in self.data and self.data[key] is None and default is not MISSING
                and default is not None and not null_is_default):
            raise self.fail(key, None,
                            f"needs a value (leave the field out for the default, {short_repr(default)})")
        if key not in self.data or self.data[key] is None:
            if default is MISSING:
                unread = [k for k in self.data if k not in self._seen and isinstance(k, str)]
                close = (difflib.get_close_matches(key, unread, n=1, cutoff=0.75)
                         if isinstance(key, str) else [])
                hint = f" (found {close[0]!r}: a typo?)" if close else ""
                raise self.error(
                    f"{self.source}: {self.field_path(key)}: required field is missing{hint}",
                    source=self.source,
                    field=self.field_path(key),
                )
            return default
        return self.data[key]

    # -- typed reads -------------------------------------------------------------
    def int(
        self,
        key: str,
        default: Any = MISSING,
        *,
        min: int | None = None,
        max: int | None = None,
    ) -> Any:
        v = self.raw(key, default)
        if v is default and default is not MISSING:
            return v
        return check_int(self, key, v, min=min, max=max)

    def float(
        self,
        key: str,
        default: Any = MISSING,
        *,
        min: float | None = None,
        max: float | None = None,
        min_exclusive: bool = False,
    ) -> Any:
        v = self.raw(key, default)
        if v is default and default is not MISSING:
            return v
        v = _yaml11_number(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.fail(key, v, "must be a finite number")
        v = float(v)
        if min is not None and (v <= min if min_exclusive else v < min):
            raise self.fail(key, v, f"must be {'>' if min_exclusive else '>='} {min:g}")
        if max is not None and v > max:
            raise self.fail(key, v, f"must be <= {max:g}")
        return v

    def str(self, key: str, default: Any = MISSING, *, choices: tuple[str, ...] = ()) -> Any:
        v = self.raw(key, default)
        if v is default and default is not MISSING:
            return v
        if not isinstance(v, str) or not v:
            raise self.fail(key, v, "must be a non-empty string")
        if choices and v not in choices:
            raise self.fail(key, v, f"must be one of {', '.join(choices)}")
        return v

    def url(self, key: str, default: Any = MISSING) -> Any:
        """An HTTP(S) URL, as :func:`http_url` reads it."""
        v = self.str(key, default)
        if v is None:
            return None
        u = http_url(v)
        if u is None:
            raise self.fail(key, v, URL_RULE)
        return u

    def bool(self, key: str, default: Any = MISSING) -> Any:
        v = self.raw(key, default)
        if not isinstance(v, bool):
            raise self.fail(key, v, "must be true or false")
        return v

    def int_list(
        self, key: str, default: Any = MISSING, *, min: int | None = None, max: int | None = None
    ) -> Any:
        v = self.raw(key, default)
        if v is default and default is not MISSING:
            return v
        if not isinstance(v, list):
            raise self.fail(key, v, "must be a list of integers")
        sub = Section(self.source, {}, self.field_path(key), error=self.error)
        return tuple(check_int(sub, i, item, min=min, max=max) for i, item in enumerate(v))

    def section(self, key: str, default: Any = MISSING) -> Section:
        # `policy:` with every field commented out is an empty section
        v = self.raw(key, {} if default is MISSING else default, null_is_default=True)
        if default is MISSING and key not in self.data:
            self.raw(key)  # raises "required"
        return Section(self.source, v, self.field_path(key), error=self.error)

    def sections(self, key: str) -> list[Section]:
        v = self.raw(key)
        if not isinstance(v, list) or not v:
            raise self.fail(key, v, "must be a non-empty list")
        return [
            Section(self.source, item, f"{self.field_path(key)}[{i}]", error=self.error)
            for i, item in enumerate(v)
        ]

    def done(self) -> None:
        extra = [k for k in self.data if k not in self._seen]
        if extra:
            k = extra[0]
            close = difflib.get_close_matches(str(k), sorted(self._seen), n=3, cutoff=0.6)
            if close:
                hint = f"did you mean {' or '.join(close)}?"
            else:
                names = sorted(self._seen)
                hint = "known fields here: " + (", ".join(names[:12]) or "none") + (
                    f", ... ({len(names)} in all)" if len(names) > 12 else "")
            raise self.fail(k, self.data[k], f"unknown field ({hint})")


_EXPONENT_LITERAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


def _yaml11_number(v: Any) -> Any:
    """``1e3`` as the number it means. PyYAML follows YAML 1.1, whose floats need a dot and
    a signed exponent (``1.0e+3``), so ``1e3`` and ``1.5e3`` arrive as strings. Only such
    exponent literals are read; any other string stays a string (and is refused)."""
    if isinstance(v, str) and _EXPONENT_LITERAL.fullmatch(v.strip()) and math.isfinite(float(v)):
        return float(v)
    return v  # 1e400 stays the string given, and is refused as such


def check_int(sec: Section, key: str | int, v: Any, *, min: int | None, max: int | None) -> int:
    v = _yaml11_number(v)
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise sec.fail(key, v, "must be an integer")
    if min is not None and v < min:
        raise sec.fail(key, v, f"must be >= {min}")
    if max is not None and v > max:
        raise sec.fail(key, v, f"must be <= {max}")
    return v
