"""Workloads with a known, deterministic extra cost in one stage (busy-wait, not sleep), loaded
by import path from the config (`workloads_slow:slow_model`): pytest puts tests/ on sys.path."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from mlbaseline.measure.clock import busy_wait


class _SlowGrad(torch.autograd.Function):
    """Identity forward; its backward spins for `delay_s` (an extra cost inside backward)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, delay_s: float) -> torch.Tensor:
        ctx.delay_s = delay_s
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        busy_wait(ctx.delay_s)
        return grad, None


class SlowModel(nn.Module):
    """A tiny classifier over 3×8×8 inputs; forward_s / backward_s add a known cost.

    `oom_above`: raise an out-of-memory error for batches larger than this (sweep tests).
    `interrupt_after`: raise KeyboardInterrupt on that forward call (Ctrl-C tests).
    `seen_inference_mode`: whether forward ran under torch.inference_mode()."""

    def __init__(
        self,
        num_classes: int = 10,
        forward_s: float = 0.0,
        backward_s: float = 0.0,
        oom_above: int | None = None,
        interrupt_after: int | None = None,
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU())
        self.head = nn.Linear(16, num_classes)
        self.forward_s, self.backward_s = forward_s, backward_s
        self.oom_above, self.interrupt_after = oom_above, interrupt_after
        self.calls = 0
        self.seen_inference_mode: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.seen_inference_mode.append(torch.is_inference_mode_enabled())
        if self.interrupt_after is not None and self.calls >= self.interrupt_after:
            raise KeyboardInterrupt
        if self.oom_above is not None and x.shape[0] > self.oom_above:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (fake, batch {x.shape[0]})")
        busy_wait(self.forward_s)
        h = self.net(x)
        if self.backward_s and torch.is_grad_enabled():
            h = _SlowGrad.apply(h, self.backward_s)
        return self.head(h)


MODELS: list[SlowModel] = []  # every model built, so tests can look inside


def slow_model(**kwargs: Any) -> SlowModel:
    model = SlowModel(**kwargs)
    MODELS.append(model)
    return model


class SlowLoss(nn.Module):
    """Cross-entropy plus a known cost."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.ce = nn.CrossEntropyLoss()

    def forward(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        busy_wait(self.delay_s)
        return self.ce(out, target)


class SlowData(Dataset):
    """Seeded 3×8×8 images; each item costs `item_s` (so a batch of B costs B·item_s of data
    wait with num_workers=0)."""

    def __init__(self, n: int = 64, item_s: float = 0.0, num_classes: int = 10) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 3, 8, 8, generator=g)
        self.y = torch.randint(num_classes, (n,), generator=g)
        self.item_s = item_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        busy_wait(self.item_s)
        return self.x[i], self.y[i]


def slow_dataset(**kwargs: Any) -> SlowData:
    return SlowData(**kwargs)


class SpinCNN(nn.Module):
    """The built-in TinyCNN plus a device-side spin of `cycles` GPU clock cycles in forward
    (torch.cuda._sleep): a known extra cost that only CUDA events can see as device time."""

    def __init__(self, num_classes: int = 10, cycles: int = 0) -> None:
        super().__init__()
        from mlbaseline.workloads.factory import TinyCNN

        self.inner = TinyCNN(num_classes=num_classes)
        self.cycles = cycles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cycles and x.is_cuda:
            torch.cuda._sleep(self.cycles)
        return self.inner(x)


def spin_model(**kwargs: Any) -> SpinCNN:
    return SpinCNN(**kwargs)
