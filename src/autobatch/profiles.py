"""Batching profiles: the dynamic-batching knobs of one model, as one YAML file.

A profile lives at ``profiles/<model>/<name>.yaml``::

    name: latency-soft
    max_batch_size: 32
    dynamic_batching:
      preferred_batch_size: [2, 4, 8]
      max_queue_delay_microseconds: 1000
      # optional: priority_levels, default_priority_level, default_queue_policy,
      #           priority_queue_policy, preserve_ordering
    instance_group: {count: 1, kind: KIND_CPU}     # optional

It is validated before anything touches Triton, with Triton's own rules
(core ``model_config_utils.cc``), and again against the live model's config.
It renders into the JSON config override for
``POST /v2/repository/models/M/load`` and into a ``config.pbtxt``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autobatch.config import Section, load_yaml, read_text
from autobatch.errors import ProfileError

__all__ = [
    "Profile",
    "QueuePolicy",
    "load_profile",
    "load_profiles",
    "parse_pbtxt",
    "render_pbtxt",
    "render_profile",
    "write_profiles",
]

TIMEOUT_ACTIONS = ("REJECT", "DELAY")

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
FIELD_MAX = {
    "max_batch_size": (INT32_MAX, "an int32"),
    "dynamic_batching.max_queue_delay_microseconds": (UINT64_MAX, "a uint64"),
    "dynamic_batching.priority_levels": (UINT64_MAX, "a uint64"),
    "default_timeout_microseconds": (UINT64_MAX, "a uint64"),
    "max_queue_size": (UINT32_MAX, "a uint32"),
    "instance_group.count": (INT32_MAX, "an int32"),
}
"""The largest value of each integer field, from its type in Triton's model config
(``model_config.proto``): what rendering the profile would refuse, refused when it
is read instead (a unit test holds this table to the proto)."""
INSTANCE_KINDS = ("KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL")


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy``."""

    timeout_action: str = "REJECT"
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    def to_config(self) -> dict[str, Any]:
        return {
            "timeout_action": self.timeout_action,
            "default_timeout_microseconds": self.default_timeout_microseconds,
            "allow_timeout_override": self.allow_timeout_override,
            "max_queue_size": self.max_queue_size,
        }


@dataclass(frozen=True)
class Profile:
    """One batching profile of one model. Times are in microseconds, as in Triton."""

    name: str
    max_batch_size: int
    preferred_batch_size: tuple[int, ...]
    max_queue_delay_us: int
    model: str | None = None
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: Mapping[int, QueuePolicy] = field(default_factory=dict)
    preserve_ordering: bool = False
    instance_count: int | None = None
    instance_kind: str | None = None
    source: str = "<profile>"

    def __post_init__(self) -> None:
        self.check()

    # -- validation -----------------------------------------------------------------
    def _fail(self, field_path: str, value: Any, allowed: str) -> ProfileError:
        return ProfileError.field_error(self.source, field_path, value, allowed)  # type: ignore[return-value]

    def _at_most(self, name: str, value: int, where: str = "") -> None:
        top, kind = FIELD_MAX[name]
        if value > top:
            raise self._fail(f"{where}.{name}" if where else name, value,
                             f"must be <= {top} (Triton's field is {kind})")

    def check(self) -> None:
        """Triton's own rules for a dynamic-batching config, checked locally."""
        if self.max_batch_size < 1:
            raise self._fail("max_batch_size", self.max_batch_size, "must be >= 1 to batch")
        self._at_most("max_batch_size", self.max_batch_size)
        self._at_most("dynamic_batching.max_queue_delay_microseconds", self.max_queue_delay_us)
        self._at_most("dynamic_batching.priority_levels", self.priority_levels)
        policies_by_path = [("dynamic_batching.default_queue_policy", self.default_queue_policy)] + [
            (f"dynamic_batching.priority_queue_policy.{k}", p) for k, p in self.priority_queue_policy.items()
        ]
        for where, policy in policies_by_path:
            if policy is not None:
                self._at_most("default_timeout_microseconds", policy.default_timeout_microseconds, where)
                self._at_most("max_queue_size", policy.max_queue_size, where)
        if self.instance_count is not None:
            self._at_most("instance_group.count", self.instance_count)
        seen: set[int] = set()
        for i, size in enumerate(self.preferred_batch_size):
            if not 1 <= size <= self.max_batch_size:
                raise self._fail(
                    f"dynamic_batching.preferred_batch_size[{i}]",
                    size,
                    f"must be > 0 and <= max_batch_size ({self.max_batch_size})",
                )
            if size in seen:
                raise self._fail(
                    f"dynamic_batching.preferred_batch_size[{i}]", size, "is listed twice"
                )
            seen.add(size)
        if self.max_queue_delay_us < 0:
            raise self._fail(
                "dynamic_batching.max_queue_delay_microseconds",
                self.max_queue_delay_us,
                "must be >= 0",
            )
        levels = self.priority_levels
        if levels < 0:
            raise self._fail("dynamic_batching.priority_levels", levels, "must be >= 0")
        if levels > 0 and not 1 <= self.default_priority_level <= levels:
            raise self._fail(
                "dynamic_batching.default_priority_level",
                self.default_priority_level,
                f"must be in [1, priority_levels] = [1, {levels}]",
            )
        if levels == 0 and self.default_priority_level != 0:
            raise self._fail(
                "dynamic_batching.default_priority_level",
                self.default_priority_level,
                "must be 0 (or unset) when priority_levels is 0",
            )
        for key in self.priority_queue_policy:
            if not 1 <= key <= levels:
                raise self._fail(
                    f"dynamic_batching.priority_queue_policy.{key}",
                    key,
                    f"priority level must be in [1, priority_levels] = [1, {max(levels, 0)}]",
                )
        if self.preserve_ordering:
            if levels > 1:
                raise self._fail(
                    "dynamic_batching.priority_levels",
                    levels,
                    "preserve_ordering allows at most one priority level",
                )
            policies = [("default_queue_policy", self.default_queue_policy)] + [
                (f"priority_queue_policy.{k}", p) for k, p in self.priority_queue_policy.items()
            ]
            for where, policy in policies:
                if policy is not None and policy.timeout_action == "DELAY":
                    raise self._fail(
                        f"dynamic_batching.{where}.timeout_action",
                        "DELAY",
                        "preserve_ordering forbids the DELAY timeout action",
                    )
        if self.instance_count is not None and self.instance_count < 1:
            raise self._fail("instance_group.count", self.instance_count, "must be >= 1")

    def validate_against(self, live: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> None:
        """Check the profile against the live model config (Triton's JSON form).

        ``base`` is the config the profile will be merged into when that is not
        the live one (file mode): its inputs and outputs must match the live ones.
        """
        live_mbs = int(live.get("max_batch_size", 0) or 0)
        model = live.get("name", self.model or "?")
        if live_mbs < 1:
            raise ProfileError(
                f"{self.source}: model {model!r} has max_batch_size 0 on the server: "
                "it does not support batching, so no batching profile applies"
            )
        if base is not None:
            for key in ("input", "output"):
                if _io_signature(base.get(key, [])) != _io_signature(live.get(key, [])):
                    raise ProfileError(
                        f"{self.source}: the {key}s of the base config differ from the live "
                        f"model {model!r}: {_io_signature(base.get(key, []))} vs "
                        f"{_io_signature(live.get(key, []))}"
                    )

    # -- rendering ----------------------------------------------------------------------
    def dynamic_batching(self) -> dict[str, Any]:
        db: dict[str, Any] = {
            "preferred_batch_size": list(self.preferred_batch_size),
            "max_queue_delay_microseconds": self.max_queue_delay_us,
            "preserve_ordering": self.preserve_ordering,
            "priority_levels": self.priority_levels,
            "default_priority_level": self.default_priority_level,
        }
        if self.default_queue_policy is not None:
            db["default_queue_policy"] = self.default_queue_policy.to_config()
        if self.priority_queue_policy:
            db["priority_queue_policy"] = {
                str(k): p.to_config() for k, p in sorted(self.priority_queue_policy.items())
            }
        return db

    def merge_into(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``config`` (Triton's JSON form) with this profile's batching fields."""
        out = copy.deepcopy(dict(config))
        out["max_batch_size"] = self.max_batch_size
        out["dynamic_batching"] = self.dynamic_batching()
        if self.instance_count is not None or self.instance_kind is not None:
            groups = [dict(g) for g in out.get("instance_group") or [{}]]
            first = groups[0]
            if self.instance_count is not None:
                first["count"] = self.instance_count
            if self.instance_kind is not None:
                first["kind"] = self.instance_kind
            # Triton names groups itself; a stale name from the live config is harmless
            # but several groups would multiply the count, so the profile owns one group.
            out["instance_group"] = [first]
        return out

    def to_override(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The body of ``POST /v2/repository/models/M/load`` applying this profile."""
        return {"parameters": {"config": json.dumps(self.merge_into(config))}}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "max_batch_size": self.max_batch_size}
        out["dynamic_batching"] = {
            k: v
            for k, v in self.dynamic_batching().items()
            if not (k in ("preserve_ordering", "priority_levels", "default_priority_level") and not v)
        }
        if self.instance_count is not None or self.instance_kind is not None:
            ig: dict[str, Any] = {}
            if self.instance_count is not None:
                ig["count"] = self.instance_count
            if self.instance_kind is not None:
                ig["kind"] = self.instance_kind
            out["instance_group"] = ig
        return out

    def summary(self) -> str:
        pref = ",".join(map(str, self.preferred_batch_size)) or f"[{self.max_batch_size}]"
        return (
            f"{self.name} (max {self.max_batch_size}, preferred {pref}, "
            f"delay {self.max_queue_delay_us} us)"
        )

    @property
    def effective_preferred(self) -> tuple[int, ...]:
        """Triton treats an empty ``preferred_batch_size`` as ``[max_batch_size]``."""
        return self.preferred_batch_size or (self.max_batch_size,)


# -- loading ----------------------------------------------------------------------------


def _queue_policy(sec: Section) -> QueuePolicy:
    policy = QueuePolicy(
        timeout_action=sec.str("timeout_action", "REJECT", choices=TIMEOUT_ACTIONS),
        default_timeout_microseconds=sec.int("default_timeout_microseconds", 0, min=0),
        allow_timeout_override=sec.bool("allow_timeout_override", False),
        max_queue_size=sec.int("max_queue_size", 0, min=0),
    )
    sec.done()
    return policy


def profile_from_mapping(data: Any, source: str, model: str | None = None) -> Profile:
    sec = Section(source, data, error=ProfileError)
    name = sec.str("name")
    model = sec.str("model", model)
    max_batch_size = sec.int("max_batch_size", min=1)
    db = sec.section("dynamic_batching")
    preferred = db.int_list("preferred_batch_size", (), min=1)
    delay = db.int("max_queue_delay_microseconds", 0, min=0)
    levels = db.int("priority_levels", 0, min=0)
    default_level = db.int("default_priority_level", 0, min=0)
    dqp = None
    if db.has("default_queue_policy"):
        dqp = _queue_policy(db.section("default_queue_policy"))
    pqp: dict[int, QueuePolicy] = {}
    if db.has("priority_queue_policy"):
        raw = db.section("priority_queue_policy")
        for key in list(raw.data):
            try:
                level = int(key)
            except (TypeError, ValueError):
                raise raw.fail(str(key), key, "keys must be priority levels (integers)") from None
            pqp[level] = _queue_policy(raw.section(key))
        raw.done()
    preserve = db.bool("preserve_ordering", False)
    db.done()
    count = kind = None
    if sec.has("instance_group"):
        ig = sec.section("instance_group")
        count = ig.int("count", None, min=1)
        kind = ig.str("kind", None, choices=INSTANCE_KINDS)
        ig.done()
    description = sec.raw("description", "")
    if not isinstance(description, str):
        raise sec.fail("description", description, "must be a string (a note for people reading the file)")
    sec.done()
    return Profile(
        name=name,
        model=model,
        max_batch_size=max_batch_size,
        preferred_batch_size=tuple(preferred),
        max_queue_delay_us=delay,
        priority_levels=levels,
        default_priority_level=default_level,
        default_queue_policy=dqp,
        priority_queue_policy=pqp,
        preserve_ordering=preserve,
        instance_count=count,
        instance_kind=kind,
        source=source,
    )


def load_profile(path: str | Path) -> Profile:
    """Load and validate one profile; the model is its directory's name."""
    p = Path(path)
    data = load_yaml(p, error=ProfileError)
    return profile_from_mapping(data, str(p), model=p.resolve().parent.name)


def load_profiles(directory: str | Path) -> dict[str, Profile]:
    """Every ``*.yaml`` profile in a model's profile directory, by name."""
    d = Path(directory)
    if not d.is_dir():
        raise ProfileError(f"{d}: profile directory not found", source=str(d))
    out: dict[str, Profile] = {}
    for path in sorted(d.glob("*.y*ml")):
        prof = load_profile(path)
        if prof.name in out:
            raise ProfileError(
                f"{path}: name = {prof.name!r}: already used by {out[prof.name].source}",
                source=str(path),
            )
        out[prof.name] = prof
    if not out:
        raise ProfileError(f"{d}: no profile files (*.yaml) found", source=str(d))
    return out


def render_profile(
    path: str | Path,
    *,
    base: str | Path | None = None,
    repository: str | Path | None = None,
    override: bool = False,
) -> str:
    """The model's full ``config.pbtxt`` with the profile at ``path`` merged in (or, with
    ``override``, the JSON body of ``POST /v2/repository/models/M/load``).

    ``base`` is the config to merge into; without it, the model's own config in
    ``repository`` (the model is the profile directory's name).
    """
    prof = load_profile(path)
    if base is None:
        if repository is None:
            raise ProfileError(f"{path}: no base config given and no repository to find one in",
                               source=str(path))
        base = Path(repository) / (prof.model or "") / "config.pbtxt"
        if not Path(base).is_file():
            raise ProfileError(
                f"{path}: no base config for model {prof.model!r} at {base}; give base", source=str(path)
            )
    config = parse_pbtxt(read_text(base, what="a config.pbtxt"), str(base))
    if override:
        return json.dumps(prof.to_override(config)) + "\n"
    return render_pbtxt(prof.merge_into(config), str(path))


def write_profiles(
    documents: Sequence[Mapping[str, Any]], directory: str | Path, *, force: bool = False
) -> list[Path]:
    """Write each profile document (a mapping with ``name``, as :meth:`Profile.to_dict` gives,
    optionally with a ``description``) as ``directory/<name>.yaml``.

    Every file is read back through :func:`load_profile` before this returns, so
    a file written is a file the sidecar accepts. Existing files are kept
    unless ``force``.
    """
    d = Path(directory)
    targets = [(doc, d / f"{doc['name']}.yaml") for doc in documents]
    if not force:
        taken = [str(p) for _, p in targets if p.exists()]
        if taken:
            raise ProfileError(f"write_profiles = {str(d)!r}: {taken[0]} already exists; "
                               "overwrite it with force", source=str(d))
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(f"write_profiles = {str(d)!r}: cannot create it: {exc}", source=str(d)) from exc
    written = []
    for doc, path in targets:
        try:
            path.write_text(yaml.safe_dump(dict(doc), sort_keys=False), encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"write_profiles: cannot write {path}: {exc}", source=str(path)) from exc
        load_profile(path)
        written.append(path)
    return written


# -- config.pbtxt <-> Triton JSON -----------------------------------------------------------


def parse_pbtxt(text: str, source: str = "config.pbtxt") -> dict[str, Any]:
    """A config.pbtxt as Triton's JSON form (field names as in the proto)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    msg = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as exc:
        raise ProfileError(f"{source}: not a valid model config: {exc}", source=source) from exc
    return _ints_as_numbers(json_format.MessageToDict(msg, preserving_proto_field_name=True), msg)


def _ints_as_numbers(data: Any, msg: Any) -> Any:
    """Proto JSON writes 64-bit integers as strings; Triton's own JSON uses numbers."""
    from google.protobuf.descriptor import FieldDescriptor as F

    wide = {F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_SINT64, F.TYPE_FIXED64, F.TYPE_SFIXED64}

    def repeated(fd: Any) -> bool:
        flag = getattr(fd, "is_repeated", None)  # protobuf >= 6; .label is deprecated there
        if flag is None:
            return bool(fd.label == F.LABEL_REPEATED)
        return bool(flag() if callable(flag) else flag)

    for fd in msg.DESCRIPTOR.fields:
        if fd.name not in data:
            continue
        value = data[fd.name]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            field_value = getattr(msg, fd.name)
            for key in list(value):
                item_key = int(key) if fd.message_type.fields_by_name["key"].type in wide else key
                if value_fd.message_type is not None:
                    _ints_as_numbers(value[key], field_value[item_key])
                elif value_fd.type in wide:
                    value[key] = int(value[key])
        elif fd.message_type is not None:
            items = getattr(msg, fd.name)
            if repeated(fd):
                for sub_dict, sub_msg in zip(value, items):
                    _ints_as_numbers(sub_dict, sub_msg)
            else:
                _ints_as_numbers(value, items)
        elif fd.type in wide:
            data[fd.name] = [int(v) for v in value] if repeated(fd) else int(value)
    return data


def render_pbtxt(config: Mapping[str, Any], source: str = "config") -> str:
    """Triton's JSON form of a model config, as config.pbtxt text."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    msg = model_config_pb2.ModelConfig()
    try:
        json_format.ParseDict(dict(config), msg, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ProfileError(f"{source}: cannot render as config.pbtxt: {exc}") from exc
    return text_format.MessageToString(msg)


def _io_signature(tensors: Any) -> list[tuple[str, str, tuple[int, ...]]]:
    sig = []
    for t in tensors or []:
        dims = tuple(int(d) for d in t.get("dims", []))
        sig.append((t.get("name", ""), t.get("data_type", ""), dims))
    return sorted(sig)
