"""The example models of ``model_repository/``, built in code with fixed seeds.

Each ``model_repository/<name>/1/model.py`` is one line that picks a class
from here, so the test suite can build the very same network in-process and
compare Triton's outputs with it. Nothing is downloaded.

* ``dense_mlp`` (1024-4096-4096-1000, ~25 M weights): memory-bound at batch 1
  as a model on a GPU is, so batching pays on this CPU.
* ``small_cnn``: a small convolutional net (two 3x3 conv layers at full 128x128
  resolution, ~5 k weights) whose activations outgrow the CPU caches as the
  batch grows: its per-item time *grows* with the batch, so batching does not pay.
* ``emulated_accelerator``: no network at all; a batch of n takes the time a
  batch curve (the ``curves/`` format) gives for n, so batch curves
  measured on GPUs elsewhere can be reproduced on a CPU machine.

torch is imported lazily: this module is importable without it.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from pathlib import Path
from typing import Any

__all__ = [
    "DENSE_MLP_SIZES",
    "DenseMLPModel",
    "EmulatedAcceleratorModel",
    "SmallCNNModel",
    "build_dense_mlp",
    "build_small_cnn",
    "wait_until",
]

DENSE_MLP_SIZES = (1024, 4096, 4096, 1000)
SMALL_CNN_INPUT = (3, 128, 128)
SEED = 20261129


def build_dense_mlp(seed: int = SEED) -> Any:
    import torch

    gen = torch.Generator().manual_seed(seed)
    layers: list[Any] = []
    sizes = DENSE_MLP_SIZES
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = torch.nn.Linear(n_in, n_out)
        with torch.no_grad():
            bound = 1.0 / n_in**0.5
            lin.weight.uniform_(-bound, bound, generator=gen)
            lin.bias.uniform_(-bound, bound, generator=gen)
        layers.append(lin)
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def build_small_cnn(seed: int = SEED) -> Any:
    import torch

    gen = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    with torch.no_grad():
        for p in net.parameters():
            p.uniform_(-0.2, 0.2, generator=gen)
    return net.eval()


def wait_until(deadline: float, clock: Any = time.perf_counter, spin_s: float = 0.0003) -> None:
    """Sleep until ``deadline`` on ``clock``; the last ``spin_s`` is busy-waited.

    ``time.sleep`` overshoots by tens of microseconds on Linux; spinning the
    tail keeps an emulated batch within a few microseconds of its curve.
    """
    while True:
        left = deadline - clock()
        if left <= 0:
            return
        if left > spin_s:
            time.sleep(left - spin_s)


def _param(args: dict[str, Any], name: str, default: str | None = None) -> str | None:
    config = json.loads(args["model_config"])
    entry = (config.get("parameters") or {}).get(name)
    if entry is None:
        return default
    return entry.get("string_value", default)


class _BatchModel:
    """Python-backend glue: concatenate the requests of a batch, run, split."""

    input_name = "INPUT"
    output_name = "OUTPUT"
    failures: tuple[type[BaseException], ...] = ()
    """Errors of ``run`` that fail the batch's requests as a ``TritonModelException`` naming
    the model (any other exception fails them too, as itself)."""

    def initialize(self, args: dict[str, Any]) -> None:
        self.model_name = args.get("model_name", type(self).__name__)
        self.setup(args)

    def setup(self, args: dict[str, Any]) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def run(self, batch: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def execute(self, requests: list[Any]) -> list[Any]:
        import numpy as np
        import triton_python_backend_utils as pb_utils

        arrays = [pb_utils.get_input_tensor_by_name(r, self.input_name).as_numpy() for r in requests]
        sizes = [a.shape[0] for a in arrays]
        batch = np.concatenate(arrays, axis=0) if len(arrays) > 1 else arrays[0]
        try:
            result = self.run(batch)
        except self.failures as exc:
            # Raised, not returned as error responses: in this Python backend (Triton 2.51)
            # error responses from a batched execute corrupted the stub's shared memory and
            # crashed the server under load; an exception fails every request of the batch.
            raise pb_utils.TritonModelException(f"{self.model_name}: {exc}") from None
        out = np.ascontiguousarray(result, dtype=np.float32)
        responses = []
        start = 0
        for n in sizes:
            tensor = pb_utils.Tensor(self.output_name, out[start : start + n])
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            start += n
        return responses


class _TorchModel(_BatchModel):
    builder: Any = None

    def setup(self, args: dict[str, Any]) -> None:
        import torch

        threads = int(_param(args, "torch_threads", "1") or 1)
        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):  # already set in this process
            torch.set_num_interop_threads(1)
        self.net = type(self).builder()
        self.torch = torch
        # Warm up at the largest batch first: once glibc has seen (and freed) the big
        # activation buffers it raises its mmap threshold, so later batches reuse heap
        # memory instead of page-faulting fresh mappings on every call. Without this a
        # batch-1 time depends on whether a large batch happened to run before it.
        max_batch = int(json.loads(args["model_config"]).get("max_batch_size", 1) or 1)
        with torch.inference_mode():
            for n in (max_batch, 1):
                self.net(torch.zeros((n, *self.input_shape)))

    def run(self, batch: Any) -> Any:
        with self.torch.inference_mode():
            return self.net(self.torch.from_numpy(batch)).numpy()


class DenseMLPModel(_TorchModel):
    builder = staticmethod(build_dense_mlp)
    input_shape = (DENSE_MLP_SIZES[0],)


class SmallCNNModel(_TorchModel):
    builder = staticmethod(build_small_cnn)
    input_shape = SMALL_CNN_INPUT


class EmulatedAcceleratorModel(_BatchModel):
    """A batch of n takes ``curve(n)`` ms, then the input is echoed back.

    Config parameters (string values):
      ``curve``       the curve itself, YAML or JSON in the shared curve format;
      ``curve_file``  or a path to a curve file (relative to the model folder);
      ``noise_cv``    optional coefficient of variation of a lognormal noise on
                      each batch time (default 0: deterministic);
      ``device``      optional HOST:PORT of an emulated GPU (``autobatch device``): each
                      batch runs there as a job of ``curve(n)`` ms, shared with whatever
                      else runs on it. Without it the instance holds itself for that long:
                      one instance is one device;
      ``device_context``    the context the instance submits under (default: its instance
                      name, so each instance is a context of its own, as each process is
                      on a GPU);
      ``device_timeout_s``  the longest a batch waits for the device (default 30): a dead or
                      hung device fails the batch's requests instead of hanging them.
    """

    def setup(self, args: dict[str, Any]) -> None:
        import yaml

        from autobatch.curve import BatchCurve, load_curve
        from autobatch.errors import DeviceError

        self.failures = (DeviceError,)

        text = _param(args, "curve")
        path = _param(args, "curve_file")
        if text:
            self.curve = BatchCurve.from_mapping(yaml.safe_load(text), source="parameters.curve")
        elif path:
            p = Path(path)
            if not p.is_absolute():
                p = Path(args["model_repository"]) / p
            self.curve = load_curve(p)
        else:
            raise ValueError("emulated_accelerator needs a 'curve' or 'curve_file' parameter")
        self.noise_cv = float(_param(args, "noise_cv", "0") or 0)
        self.rng = random.Random(SEED)
        self.device: Any = None
        address = _param(args, "device")
        if address:
            from autobatch.device.client import JOB_TIMEOUT_S, DeviceClient

            context = _param(args, "device_context") or args.get("model_instance_name") or self.model_name
            timeout_s = float(_param(args, "device_timeout_s", str(JOB_TIMEOUT_S)) or JOB_TIMEOUT_S)
            self.device = DeviceClient(address, context, timeout_s=timeout_s)
            self.device.connect()  # a device nobody answers fails the load, not the first request

    def batch_ms(self, n: int) -> float:
        ms = self.curve.estimate(n).ms
        if self.noise_cv > 0:
            import math

            sigma = math.sqrt(math.log(1 + self.noise_cv**2))
            ms *= self.rng.lognormvariate(-sigma * sigma / 2, sigma)
        return ms

    def run(self, batch: Any) -> Any:
        n = batch.shape[0]
        if self.device is not None:
            self.device.run(self.batch_ms(n), items=n)
            return batch
        start = time.perf_counter()
        wait_until(start + self.batch_ms(n) / 1000.0)
        return batch

    def finalize(self) -> None:
        if self.device is not None:
            self.device.close()
