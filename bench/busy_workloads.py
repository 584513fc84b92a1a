"""Workloads whose every stage costs a known time: the truth the accuracy section measures against.

Each piece spins (`busy_wait`, not sleep: a sleep overshoots by the scheduler's wake-up latency,
a spin ends when the clock says) for a fixed duration, and does next to nothing else, so what
`mlb` reports for a stage should be that duration plus the framework's own few microseconds.
They plug into the tool by import path like any user workload (`busy_workloads:BusyModel`,
importable because `bench/` is on sys.path when the bench runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mlbaseline.measure.clock import busy_wait

# Seconds per stage: the accuracy section's truth (one item per batch, so data = one item).
# The example (data 2, forward 4, loss 1, backward 8 ms) scaled ×10, data ×20. Each
# stage also runs some framework code that `mlb` rightly counts in it (the DataLoader's sampler,
# fetch and default_collate, the autograd engine, zero_grad): 10-60 µs when run back to back,
# but measured on this VM at 0.1-0.5 ms per stage right after a spin of a few milliseconds, even
# with the load average under 1 (the caches are cold by then; the host's other tenants share
# them), the DataLoader's being the largest (0.35-0.58 ms). At these durations that cold
# framework code stays near 1% of every stage, so the figure shows the instrument rather than
# the cache; at ×1 it was 5-10%.
DATA_S = 0.040
FORWARD_S = 0.040
LOSS_S = 0.010
BACKWARD_S = 0.080
OPTIMIZER_S = 0.020
FEATURES = 8


class BusyDataset(torch.utils.data.Dataset):
    """`n` tiny (x, y) pairs; fetching one spins `wait_s` (the data-wait stage at batch 1)."""

    def __init__(self, n: int = 256, wait_s: float = DATA_S, features: int = FEATURES) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, features, generator=g)
        self.y = torch.zeros(n, dtype=torch.long)
        self.wait_s = wait_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        busy_wait(self.wait_s)
        return self.x[i], self.y[i]


class _SpinInBackward(torch.autograd.Function):
    """Identity forward; the backward spins `wait_s` before passing the gradient on."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, wait_s: float) -> torch.Tensor:
        ctx.wait_s = wait_s
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        busy_wait(ctx.wait_s)
        return grad, None


class BusyModel(nn.Module):
    """One tiny linear layer; forward spins `forward_s`, its backward spins `backward_s`."""

    def __init__(
        self,
        num_classes: int = 4,
        forward_s: float = FORWARD_S,
        backward_s: float = BACKWARD_S,
        features: int = FEATURES,
    ) -> None:
        super().__init__()
        self.lin = nn.Linear(features, num_classes)
        self.forward_s, self.backward_s = forward_s, backward_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        busy_wait(self.forward_s)
        return _SpinInBackward.apply(self.lin(x), self.backward_s)


class BusyLoss(nn.Module):
    """Spins `wait_s`, then the cheapest scalar that keeps the graph: the sum of the outputs."""

    def __init__(self, wait_s: float = LOSS_S) -> None:
        super().__init__()
        self.wait_s = wait_s

    def forward(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        busy_wait(self.wait_s)
        return out.sum()


class BusyOptimizer:
    """An optimizer that only spins `wait_s` in `step` and drops the gradients in `zero_grad`:
    the two calls the training step makes. Not a `torch.optim.Optimizer`: that base class wraps
    `step` in profiler and hook bookkeeping (140 µs per call measured here with cold caches),
    which would land in a stage whose truth is the spin."""

    def __init__(self, params: Any, wait_s: float = OPTIMIZER_S) -> None:
        self.params = list(params)
        self.wait_s = wait_s

    def step(self, closure: Any = None) -> None:
        busy_wait(self.wait_s)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


TRAIN_TRUTH = {
    "data_wait": DATA_S,
    "forward": FORWARD_S,
    "loss": LOSS_S,
    "backward": BACKWARD_S,
    "optimizer": OPTIMIZER_S,
}


def train_overrides() -> dict[str, Any]:
    """Config overrides (dotted keys) that make `mlb throughput` train the busy workload."""
    return {
        "workload.model": "busy_workloads:BusyModel",
        "workload.model_kwargs": {"num_classes": 4},
        "workload.dataset": "busy_workloads:BusyDataset",
        "workload.dataset_kwargs": {"n": 256},
        "workload.loss": "busy_workloads:BusyLoss",
        "workload.optimizer": "busy_workloads:BusyOptimizer",
        "workload.optimizer_kwargs": {},
        "workload.device": "cpu",
        "throughput.mode": "train",
        "throughput.batch_sizes": [1],
        "throughput.telemetry": False,
    }


# ---------------------------------------------------------------- a service with known latencies


def latency_durations(n: int, median_s: float = 0.003, sigma: float = 0.5) -> np.ndarray:
    """`n` compute times with a lognormal shape: the lognormal's quantiles at (i + 0.5) / n, in a
    seeded shuffled order (so neither the head nor the tail that trimming sets aside is special)."""
    from scipy.stats import lognorm

    grid = (np.arange(n) + 0.5) / n
    values = lognorm.ppf(grid, s=sigma, scale=median_s)
    return np.random.default_rng(7).permutation(values)


class _BusyClient:
    def __init__(self, durations: np.ndarray) -> None:
        self.durations = durations

    def prepare(self, index: int) -> int:
        return index

    def compute(self, index: int) -> int:
        busy_wait(float(self.durations[index % len(self.durations)]))
        return index

    def post(self, output: int) -> int:
        return output

    def close(self) -> None:
        pass


class BusyService:
    """A `Service` for `run_latency`: request i spins `durations[i]` in its compute stage."""

    def __init__(self, durations: np.ndarray) -> None:
        self.durations = np.asarray(durations, dtype=np.float64)

    def client(self, index: int) -> _BusyClient:
        return _BusyClient(self.durations)

    def describe(self) -> dict[str, Any]:
        return {"type": "bench-busy-wait", "device": "cpu", "requests": len(self.durations)}

    def close(self) -> None:
        pass


# ---------------------------------------------------------------- a real step with a known slowdown


class SpinCnn(nn.Module):
    """A small real conv net (3×32×32 inputs) whose backward also spins `backward_s`: the `ab`
    section's workload. Real compute carries the machine's noise; the spin is the known change."""

    def __init__(self, num_classes: int = 10, backward_s: float = 0.0) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
        )
        self.head = nn.Linear(32 * 16, num_classes)
        self.backward_s = backward_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        if torch.is_grad_enabled():
            # both arms run the same graph (the node's clone included); only the spin differs
            h = _SpinInBackward.apply(h, self.backward_s)
        return self.head(h)


def spin_cnn_overrides(backward_s: float = 0.0) -> dict[str, Any]:
    """Config overrides for the `ab` section: SpinCnn on synthetic 32 px images, batch 16."""
    return {
        "workload.model": "busy_workloads:SpinCnn",
        "workload.model_kwargs": {"num_classes": 10, "backward_s": backward_s},
        "workload.image_size": 32,
        "workload.num_classes": 10,
        "workload.device": "cpu",
        "workload.threads": 1,
        # fresh processes (replicates) find this module too
        "workload.import_paths": [str(Path(__file__).resolve().parent)],
        "throughput.mode": "train",
        "throughput.repeats": 1,  # the `ab` section's unpaired side: one process per run
        "throughput.batch_sizes": [16],
        "throughput.telemetry": False,
        "throughput.min_time_s": 1.0,
        "throughput.max_time_s": 4.0,
    }
