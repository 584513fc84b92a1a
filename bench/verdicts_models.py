"""The slowed workload of bench section `verdicts` (bench_verdicts.py): torchvision resnet18 (what
the `demo` profile measures) plus `extra` units of real compute inside forward.

One unit is one `UNIT_N`×`UNIT_N` float32 matrix product on a fixed tensor under `torch.no_grad()`
(no busy-wait, no sleep: the CPU does arithmetic like the model's own layers, and competes for the
same cores and caches). The products write into a preallocated buffer, so the extra work
allocates nothing and its operands never change (no growth, no denormals). With `extra=0` the
factory returns the plain torchvision model, so the A side is the same model as the profile's.

Loaded by import path from a config or `--set`:

    mlb throughput --set workload.import_paths=[bench] \\
        --set workload.model=verdicts_models:slowed_resnet18 --set workload.model_kwargs.extra=40
"""

from __future__ import annotations

import torch
from torch import nn

UNIT_N = 256  # one unit: a 256×256 @ 256×256 product, 33.6 MFLOP (about 0.5 ms on one core)
UNIT_SEED = 1234


def _resnet18(num_classes: int) -> nn.Module:
    import torchvision

    return torchvision.models.get_model("resnet18", weights=None, num_classes=num_classes)


class ExtraWork(nn.Module):
    """`extra` matrix products on a fixed tensor per call; no parameters, no gradient."""

    def __init__(self, extra: int, n: int = UNIT_N) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(UNIT_SEED)
        # scaled so that a product of two such matrices stays of order 1
        self.register_buffer("lhs", torch.randn(n, n, generator=gen) / n**0.5, persistent=False)
        self.register_buffer("rhs", torch.randn(n, n, generator=gen) / n**0.5, persistent=False)
        self.register_buffer("out", torch.empty(n, n), persistent=False)
        self.extra = int(extra)

    def forward(self) -> None:
        with torch.no_grad():
            for _ in range(self.extra):
                torch.mm(self.lhs, self.rhs, out=self.out)


class SlowedResNet18(nn.Module):
    """resnet18 whose forward first does `extra` units of ExtraWork."""

    def __init__(self, num_classes: int = 10, extra: int = 0) -> None:
        super().__init__()
        self.net = _resnet18(num_classes)
        self.work = ExtraWork(extra)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.work()
        return self.net(x)


def slowed_resnet18(num_classes: int = 10, extra: int = 0) -> nn.Module:
    """The `demo` model plus `extra` units of compute in forward; `extra=0`: torchvision's own
    resnet18, unwrapped."""
    if extra < 0:
        raise ValueError(f"extra must be >= 0, not {extra}")
    if extra == 0:
        return _resnet18(num_classes)
    return SlowedResNet18(num_classes, extra)


def unit_work(extra: int = 1) -> ExtraWork:
    """The extra work alone, for calibrating the cost of one unit in a process."""
    return ExtraWork(extra)
