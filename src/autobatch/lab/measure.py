"""Measure a model's batch curve on a running Triton, through Triton's own timers.

For each batch size, one request carrying the whole batch is sent at a time;
the compute time of that one execution is read back from
``GET /v2/models/M/stats`` (``batch_stats[].compute_infer``), so the figure is
the model's run time on the server, not a client round trip (which would hide
a fast model behind client and network overhead). Warm-up runs are discarded;
the point is the median of the repeats.

Also here, because they talk to a server: :func:`live_curve` (the curve live
traffic shows, from two ``batch_stats`` samples), :func:`model_stats` and
:func:`model_config` (one model's ``/stats`` and ``/config``), and
:func:`write_curve`. What a real server adds to the curve, and the simulator
against the real server, are in :mod:`autobatch.lab.fidelity`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from autobatch.access import RestrictedApi, http_headers, refusal
from autobatch.curve import BatchCurve
from autobatch.errors import ConfigError, ServeError, TritonError
from autobatch.lab.process import poll_until
from autobatch.signals.parse import curve_from_batch_stats

__all__ = [
    "CurveMeasurement",
    "live_curve",
    "measure_curve",
    "model_config",
    "model_stats",
    "synth_inputs",
    "write_curve",
]

_NP_DTYPES = {
    "TYPE_FP32": np.float32,
    "TYPE_FP16": np.float16,
    "TYPE_FP64": np.float64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_UINT8": np.uint8,
    "TYPE_BOOL": np.bool_,
}


@dataclass(frozen=True)
class CurveMeasurement:
    curve: BatchCurve
    samples_ms: dict[int, tuple[float, ...]]

    def spread(self, batch_size: int) -> float:
        """(max - min) / median of the repeats at one size: how noisy that point is."""
        s = self.samples_ms[batch_size]
        return (max(s) - min(s)) / statistics.median(s)


def _get_json(client: httpx.Client, path: str, what: str, restricted_api: RestrictedApi | None = None) -> Any:
    """GET one of Triton's JSON endpoints, with the restricted-API key when there is one."""
    try:
        r = client.get(path, headers=http_headers(restricted_api))
    except httpx.HTTPError as exc:
        raise TritonError(f"cannot reach Triton at {client.base_url}: {exc}") from exc
    if r.status_code != 200:
        text = _error_text(r)
        refused = refusal(f"the read of {what}", text, restricted_api) if r.status_code == 403 else None
        raise TritonError(refused or f"{what} on {client.base_url}: {text}")
    return r.json()


def model_config(
    client: httpx.Client, model: str, restricted_api: RestrictedApi | None = None
) -> dict[str, Any]:
    return _get_json(client, f"/v2/models/{model}/config", f"model {model!r}", restricted_api)


def synth_inputs(config: dict[str, Any], batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs of the right names, dtypes and shapes for one batch."""
    rng = np.random.default_rng(seed)
    out = {}
    for tensor in config.get("input", []):
        dtype = _NP_DTYPES.get(tensor.get("data_type", ""))
        if dtype is None:
            raise ConfigError(
                f"model {config.get('name')!r}: input {tensor.get('name')!r} has type "
                f"{tensor.get('data_type')}, which autobatch cannot synthesise"
            )
        dims = [1 if int(d) < 0 else int(d) for d in tensor.get("dims", [])]
        shape = [batch_size, *dims] if int(config.get("max_batch_size", 0)) > 0 else dims
        out[tensor["name"]] = (rng.random(shape) * 2 - 1).astype(dtype)
    return out


def _error_text(r: httpx.Response) -> str:
    try:
        return str(r.json().get("error", r.text))
    except ValueError:
        return r.text.strip() or f"HTTP {r.status_code}"


def _batch_counts(
    client: httpx.Client, model: str, restricted_api: RestrictedApi | None = None
) -> dict[int, tuple[int, int]]:
    rows = {}
    for row in model_stats(client, model, restricted_api).get("batch_stats") or []:
        infer = row["compute_infer"]
        rows[int(row["batch_size"])] = (int(infer["count"]), int(infer["ns"]))
    return rows


def measure_curve(
    http_url: str,
    model: str,
    batch_sizes: Sequence[int],
    *,
    warmup: int = 3,
    repeats: int = 10,
    seed: int = 0,
    timeout_s: float = 60.0,
    client: httpx.Client | None = None,
    on_step: Callable[[int, int], None] | None = None,
    restricted_api: RestrictedApi | None = None,
) -> CurveMeasurement:
    """Measure ``batch_sizes`` on ``model``; ``on_step(batch_size, done)`` after each run.

    Keep other traffic off the model while measuring: a batch that merges with
    another client's requests would be counted under a different size.
    ``restricted_api``: the key of Triton's restricted APIs, for the config and stats reads.
    """
    import tritonclient.http as th

    if not batch_sizes or any(b < 1 for b in batch_sizes):
        raise ConfigError(f"batch sizes = {list(batch_sizes)}: must be integers >= 1")
    if repeats < 1 or warmup < 0:
        raise ConfigError(f"repeats = {repeats}, warmup = {warmup}: need repeats >= 1, warmup >= 0")
    url = http_url if "://" in http_url else f"http://{http_url}"
    own = client is None
    hc = client or httpx.Client(base_url=url, timeout=timeout_s)
    try:
        config = model_config(hc, model, restricted_api)
        mbs = int(config.get("max_batch_size", 0))
        if mbs < 1:
            raise ConfigError(f"model {model!r} has max_batch_size 0: it does not batch")
        too_big = [b for b in batch_sizes if b > mbs]
        if too_big:
            raise ConfigError(
                f"batch sizes {too_big} exceed model {model!r}'s max_batch_size ({mbs})"
            )
        infer = th.InferenceServerClient(url.split("://", 1)[1], network_timeout=timeout_s)
        samples: dict[int, tuple[float, ...]] = {}
        for b in batch_sizes:
            inputs = []
            for name, arr in synth_inputs(config, b, seed).items():
                tensor = th.InferInput(name, list(arr.shape), _triton_dtype(arr))
                tensor.set_data_from_numpy(arr)
                inputs.append(tensor)
            runs: list[float] = []
            for i in range(warmup + repeats):
                before = _batch_counts(hc, model, restricted_api).get(b, (0, 0))
                try:
                    infer.infer(model, inputs)
                except Exception as exc:  # tritonclient raises its own exception types
                    raise TritonError(f"inference on {model!r} at batch {b} failed: {exc}") from exc
                after = _wait_for_execution(hc, model, b, before[0], restricted_api=restricted_api)
                dc, dns = after[0] - before[0], after[1] - before[1]
                if i >= warmup:
                    runs.append(dns / dc / 1e6)
                if on_step:
                    on_step(b, i + 1)
            samples[b] = tuple(runs)
        infer.close()
    except httpx.HTTPError as exc:
        raise TritonError(f"cannot reach Triton at {url}: {exc}") from exc
    finally:
        if own:
            hc.close()
    curve = BatchCurve(
        points={b: statistics.median(s) for b, s in samples.items()},
        name=f"{model}-measured",
        meta={"source": f"autobatch measure, {url}, median of {repeats} after {warmup} warm-up"},
    )
    return CurveMeasurement(curve=curve, samples_ms=samples)


def _wait_for_execution(
    client: httpx.Client, model: str, batch_size: int, count_before: int, timeout_s: float = 10.0,
    *, restricted_api: RestrictedApi | None = None,
) -> tuple[int, int]:
    """Stats are updated as the response completes; poll until this run shows up."""

    def recorded() -> tuple[int, int] | None:
        row = _batch_counts(client, model, restricted_api).get(batch_size, (0, 0))
        return row if row[0] > count_before else None

    try:
        return poll_until(recorded, timeout_s=timeout_s, interval_s=0.001,
                          what=f"an execution of batch size {batch_size}")
    except ServeError:
        raise TritonError(
            f"no execution of batch size {batch_size} recorded for {model!r}: another "
            "client's requests may have merged with the measured ones"
        ) from None


def _triton_dtype(arr: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(arr.dtype))


# -- writing curves --------------------------------------------------------------------------


def write_curve(curve: BatchCurve, path: str | Path) -> Path:
    """Write ``curve`` as YAML (the shared format) or, for a ``.csv`` path, CSV rows."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        text = "batch_size,ms\n" + "".join(f"{b},{ms:.4f}\n" for b, ms in curve.points.items())
    else:
        text = curve.to_yaml()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"out = {str(p)!r}: cannot write there: {exc.strerror or exc}") from exc
    return p


# -- the curve of live traffic --------------------------------------------------------------


def model_stats(
    client: httpx.Client, model: str, restricted_api: RestrictedApi | None = None
) -> dict[str, Any]:
    """One model's entry of ``GET /v2/models/M/stats`` (all versions' first entry)."""
    path = f"/v2/models/{model}/stats"
    entries = _get_json(client, path, f"stats of {model!r}", restricted_api).get("model_stats") or []
    if not entries:
        raise TritonError(f"stats of {model!r} on {client.base_url}: no model_stats in the answer")
    return dict(entries[0])


def live_curve(
    http_url: str,
    model: str,
    window_s: float,
    *,
    min_count: int = 3,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    restricted_api: RestrictedApi | None = None,
) -> BatchCurve | None:
    """The batch curve live traffic shows over ``window_s``: ``batch_stats`` sampled
    twice, differenced; sizes executed fewer than ``min_count`` times are left out.
    None when the traffic formed no batch size often enough."""
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ConfigError(f"live_s = {window_s!r}: must be a finite number > 0")
    url = http_url if "://" in http_url else f"http://{http_url}"
    own = client is None
    hc = client or httpx.Client(base_url=url, timeout=30.0)
    try:
        before = model_stats(hc, model, restricted_api).get("batch_stats")
        sleep(window_s)
        after = model_stats(hc, model, restricted_api).get("batch_stats")
    finally:
        if own:
            hc.close()
    return curve_from_batch_stats(after, before, name=f"{model}-live", min_count=min_count)
