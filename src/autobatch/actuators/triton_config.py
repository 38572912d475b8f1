"""What a profile decides in a Triton model config, read as Triton reads it (pure).

:class:`~autobatch.actuators.triton.TritonReloadActuator` sends a merged config
and reads it back; Triton normalises a config when it loads it (fills in
defaults, resolves ``KIND_AUTO``, prints 64-bit fields as numbers), so the two
are compared through :func:`batching_view`, which applies the same
normalisations to both sides. Values in, values out: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autobatch.profiles import Profile

__all__ = ["batching_view", "differences", "matches", "profile_flags"]


def _queue_policy_view(policy: Any) -> tuple[str, int, bool, int]:
    # Triton omits default_queue_policy when unset and fills the defaults when set,
    # so an absent policy and an all-default one are the same thing.
    p = policy if isinstance(policy, Mapping) else {}
    return (
        str(p.get("timeout_action", "REJECT") or "REJECT"),
        int(p.get("default_timeout_microseconds", 0) or 0),
        bool(p.get("allow_timeout_override", False)),
        int(p.get("max_queue_size", 0) or 0),
    )


def _preferred_view(config: Mapping[str, Any], db: Mapping[str, Any]) -> list[int]:
    # Triton's NormalizeModelConfig (core model_config_utils.cc) fills an empty
    # preferred_batch_size with [max_batch_size] when dynamic batching is on and
    # max_batch_size > 0, so Triton's default (no preferred sizes) reads back as
    # [max_batch_size]. The batcher sees only the filled-in list: the two are one
    # config. Order does not matter to the batcher either.
    sizes = sorted(int(s) for s in db.get("preferred_batch_size") or [])
    max_batch_size = int(config.get("max_batch_size", 0) or 0)
    if not sizes and "dynamic_batching" in config and max_batch_size > 0:
        sizes = [max_batch_size]
    return sizes


def _instance_count(group: Mapping[str, Any]) -> int:
    # NormalizeInstanceGroup gives a group without a count (or count 0) its default
    # count: 1, except 2 for KIND_CPU groups of the TensorFlow and ONNX Runtime
    # backends. A profile always names its count (>= 1), so only the live side can
    # carry a 0, and there 1 is what the example models' Python backend gets.
    return max(int(group.get("count", 1) or 1), 1)


def batching_view(config: Mapping[str, Any], *, count: bool, kind: bool) -> dict[str, Any]:
    """The fields of a config (Triton's JSON form) a profile decides, normalised as Triton
    normalises a config when it loads it.

    What Triton changes between the config sent and the config read back
    (core ``model_config_utils.cc``, checked on the real server by
    tests/integration/test_actuator_triton.py::test_triton_normalisations_read_back_as_the_profile):

    * an empty ``preferred_batch_size`` becomes ``[max_batch_size]``;
    * preferred sizes keep the order sent, which the batcher ignores: sorted;
    * 64-bit fields (``max_queue_delay_microseconds``, timeouts) come back as JSON
      numbers, the proto JSON writes them as strings: read as integers;
    * every primitive field is printed with its default (``preserve_ordering:
      false``, ``priority_levels: 0``) while an unset ``default_queue_policy`` is
      omitted: absent and default are the same;
    * an instance group without a count gets 1; ``KIND_AUTO`` becomes ``KIND_CPU``
      or ``KIND_GPU`` (so a profile's ``KIND_AUTO`` is never compared).
    """
    db = config.get("dynamic_batching")
    db = db if isinstance(db, Mapping) else {}
    pqp = db.get("priority_queue_policy")
    pqp = pqp if isinstance(pqp, Mapping) else {}
    view: dict[str, Any] = {
        "max_batch_size": int(config.get("max_batch_size", 0) or 0),
        "dynamic_batching": "dynamic_batching" in config,
        "preferred_batch_size": _preferred_view(config, db),
        "max_queue_delay_microseconds": int(db.get("max_queue_delay_microseconds", 0) or 0),
        "preserve_ordering": bool(db.get("preserve_ordering", False)),
        "priority_levels": int(db.get("priority_levels", 0) or 0),
        "default_priority_level": int(db.get("default_priority_level", 0) or 0),
        "default_queue_policy": _queue_policy_view(db.get("default_queue_policy")),
        "priority_queue_policy": {int(k): _queue_policy_view(v) for k, v in pqp.items()},
    }
    groups = [g for g in config.get("instance_group") or [] if isinstance(g, Mapping)]
    if count:
        view["instance_count"] = sum(_instance_count(g) for g in groups) if groups else None
    if kind:
        view["instance_kind"] = sorted({str(g.get("kind", "KIND_AUTO")) for g in groups})
    return view


def profile_flags(profile: Profile) -> dict[str, bool]:
    # Triton resolves KIND_AUTO to a concrete kind, so it can never read back equal.
    return {
        "count": profile.instance_count is not None,
        "kind": profile.instance_kind not in (None, "KIND_AUTO"),
    }


def matches(profile: Profile, config: Mapping[str, Any]) -> bool:
    """Is ``profile`` what ``config`` runs, as far as the profile's fields go?"""
    flags = profile_flags(profile)
    return batching_view(config, **flags) == batching_view(profile.merge_into(config), **flags)


def differences(want: Mapping[str, Any], got: Mapping[str, Any]) -> str:
    return "; ".join(
        f"{k} = {got.get(k)!r}, expected {want.get(k)!r}" for k in want if want.get(k) != got.get(k)
    )
