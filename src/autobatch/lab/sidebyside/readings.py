"""What the emulated GPU says about a stretch of a run: its own busy time by context, and how
late its answers went out.

A mode's device time per request is the work its model's contexts did (in ms
of the device alone, which co-tenants do not inflate) over the items they ran;
its busy share by tenant is each context's work over the device's clock; its
lateness (the OS waking the device process late) is the CPU headroom figure:
with the cores carrying every mode at once, answers go out within a
millisecond of their exact time. Parsing and differencing are pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["LATE_MS", "DeviceReading", "device_figures", "parse_device_metrics", "served_shares"]

LATE_MS = 2.0
"""An answer later than this after its exact time counts as late (a histogram bound)."""


@dataclass(frozen=True)
class DeviceReading:
    """The device's cumulative counters at one instant."""

    uptime_s: float
    busy_s: float
    context_busy_s: Mapping[str, float] = field(default_factory=dict)
    context_items: Mapping[str, float] = field(default_factory=dict)
    answers: float = 0.0
    lateness_sum_s: float = 0.0
    late_answers: float = 0.0
    """Answers later than :data:`LATE_MS`."""


def parse_device_metrics(text: str) -> DeviceReading:
    """A reading from the device's ``/metrics`` exposition."""
    busy: dict[str, float] = {}
    items: dict[str, float] = {}
    scalars: dict[str, float] = {}
    within = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "autobatch_device_context_busy_seconds_total":
                busy[s.labels["context"]] = s.value
            elif s.name == "autobatch_device_context_items_total":
                items[s.labels["context"]] = s.value
            elif s.name == "autobatch_device_answer_lateness_seconds_bucket":
                if s.labels.get("le") != "+Inf" and abs(float(s.labels["le"]) * 1000.0 - LATE_MS) < 1e-9:
                    within = s.value
            else:
                scalars[s.name] = s.value
    answers = scalars.get("autobatch_device_answer_lateness_seconds_count", 0.0)
    return DeviceReading(
        uptime_s=scalars.get("autobatch_device_uptime_seconds", 0.0),
        busy_s=scalars.get("autobatch_device_busy_seconds_total", 0.0),
        context_busy_s=busy, context_items=items, answers=answers,
        lateness_sum_s=scalars.get("autobatch_device_answer_lateness_seconds_sum", 0.0),
        late_answers=answers - within,
    )


def _owner(context: str, model_prefixes: Sequence[str], cotenants: Sequence[str]) -> str | None:
    if any(context.startswith(p) for p in model_prefixes):
        return "model"
    return context if context in cotenants else None


def device_figures(a: DeviceReading, b: DeviceReading, model_prefixes: Sequence[str],
                   cotenants: Sequence[str]) -> dict[str, Any]:
    """What the device did between readings ``a`` and ``b``: the model's device ms per item
    (its contexts are those starting with one of ``model_prefixes``), busy share by tenant
    (``model`` and each co-tenant), the device's busy share, and its answers' lateness."""
    span = b.uptime_s - a.uptime_s
    work: dict[str, float] = {}
    model_items = 0.0
    for ctx, v in b.context_busy_s.items():
        owner = _owner(ctx, model_prefixes, cotenants)
        if owner is None:
            continue
        work[owner] = work.get(owner, 0.0) + v - a.context_busy_s.get(ctx, 0.0)
        if owner == "model":
            model_items += b.context_items.get(ctx, 0.0) - a.context_items.get(ctx, 0.0)
    answers = b.answers - a.answers
    model_work = work.get("model", 0.0)
    return {
        "device_ms": round(1000.0 * model_work / model_items, 4) if model_items > 0 else None,
        "device_items": int(round(model_items)),
        "device_busy_ms": round(1000.0 * model_work, 3),
        "busy_share": round((b.busy_s - a.busy_s) / span, 4) if span > 0 else None,
        "busy_by_tenant": {k: round(v / span, 4) for k, v in sorted(work.items())} if span > 0 else {},
        "answers": int(round(answers)),
        "lateness_mean_ms": round(1000.0 * (b.lateness_sum_s - a.lateness_sum_s) / answers, 4)
        if answers > 0 else None,
        "late_share": round((b.late_answers - a.late_answers) / answers, 5) if answers > 0 else None,
    }


def served_shares(a: DeviceReading, b: DeviceReading, variants: Mapping[str, str]) -> dict[str, float] | None:
    """Which profile served the model between readings ``a`` and ``b``: each profile's share of
    the items its variant's device contexts ran (``variants`` maps a context prefix to its
    profile; the longest prefix that matches wins). A gateway's answer per request, where its
    sidecar's ``/status`` names the new profile only once the shift's dwell is over. None with
    no variants (one model whose profile changes in place) or no items."""
    if not variants:
        return None
    prefixes = sorted(variants, key=len, reverse=True)
    items: dict[str, float] = {}
    for ctx, v in b.context_items.items():
        prefix = next((p for p in prefixes if ctx.startswith(p)), None)
        if prefix is not None:
            name = variants[prefix]
            items[name] = items.get(name, 0.0) + v - a.context_items.get(ctx, 0.0)
    total = sum(items.values())
    if total <= 0:
        return None
    return {k: round(v / total, 3) for k, v in sorted(items.items(), key=lambda kv: (-kv[1], kv[0])) if v > 0}
