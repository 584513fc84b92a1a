"""Seeds and determinism flags, applied in one place and recorded in every result."""

from __future__ import annotations

import os
import random
from typing import Any

from mlbaseline.errors import HardwareUnavailableError, UsageError


def set_determinism(
    seed: int, deterministic: bool = True, benchmark: bool = False
) -> dict[str, Any]:
    """Seed random, NumPy, torch and every CUDA device; set the cuDNN flags. Returns the flags."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)  # all devices, not only the current one
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = benchmark
    return {
        "seed": seed,
        "cudnn_deterministic": deterministic,
        "cudnn_benchmark": benchmark,
        "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
    }


def resolve_device(name: str) -> str:
    """'auto' → 'cuda' when a CUDA device is visible, else 'cpu'. Asking for CUDA where there
    is none is 'not possible here' (exit 3), not a crash."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise HardwareUnavailableError(
                f"workload.device: '{name}' requested but no CUDA device is available here"
            )
        return name
    raise UsageError(f"workload.device: unknown device '{name}' (use auto, cpu, cuda or cuda:N)")
