"""The configured workload as a latency service: the model built here (workloads may import
measure, never the reverse) and handed to `measure.latency_services.ModelService`."""

from __future__ import annotations

from typing import Any

import torch

from mlbaseline.measure.determinism import resolve_device
from mlbaseline.measure.latency_services import ModelService
from mlbaseline.measure.memory import input_estimate, refuse_oversized_batch
from mlbaseline.workloads.factory import build_model, model_dtype


def build_model_service(cfg: Any) -> ModelService:
    """The configured workload (`build_model` on `workload.device`, eval mode) with a random
    input of the configured shape: vision 3×image_size×image_size, text a token sequence of
    the synthetic data's median length (both at `latency.batch_size`)."""
    w = cfg.workload
    device = resolve_device(w.device)
    if w.threads:
        torch.set_num_threads(w.threads)
    dtype = model_dtype(w)
    batch = cfg.latency.batch_size
    estimate = input_estimate(cfg, batch, service=True)
    assert estimate is not None  # the service's input is always the config's
    refuse_oversized_batch("latency.batch_size", estimate, device)  # before any allocation
    shape: tuple[int, ...] = (batch, *estimate.sample_shape)
    if w.task == "text":

        def make_input(g: Any) -> Any:
            return torch.randint(1, w.vocab_size, shape, generator=g)  # 0 is padding
    else:

        def make_input(g: Any) -> Any:
            return torch.rand(shape, generator=g).to(dtype)

    model = build_model(w).to(device=device, dtype=dtype).eval()
    info = {"model": w.model, "task": w.task, "input_shape": list(shape), "dtype": w.dtype}
    service = ModelService(model, make_input, device, cfg.golden.seed, info=info)
    service.prime()
    return service


__all__ = ["build_model_service"]
