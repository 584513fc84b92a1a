"""A user's own workload, plugged into `mlb` by import path (see examples/my_model.yaml and the
section "Measuring your own model" of docs/REFERENCE.md). Nothing here imports mlbaseline.

- `SmallNet(num_classes, image_size, width)`: mlb passes `num_classes` and `image_size` from
  the workload because the signature names them; `width` comes from `model_kwargs`.
- `ShapesDataset(n, image_size, num_classes, transform)`: PIL images, so a transform is needed;
  mlb passes the configured transform because the signature takes `transform`.
- `make_transform(image_size)`: a transform factory (called once; returns the transform).
- `SmoothedCrossEntropy` (a loss class) and `make_optimizer(params, lr)` (an optimizer factory).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from PIL import Image, ImageDraw
from torch import nn


class SmallNet(nn.Module):
    def __init__(self, num_classes: int, image_size: int, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
        )
        side = image_size // 2
        self.head = nn.Linear(2 * width * side * side, num_classes)  # needs image_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class ShapesDataset:
    """`n` generated images: class k is a k-sided-ish polygon at a seeded position."""

    def __init__(
        self,
        n: int,
        image_size: int,
        num_classes: int,
        transform: Callable[[Any], Any] | None = None,
        seed: int = 0,
    ) -> None:
        self.n, self.size, self.classes = n, image_size, num_classes
        self.transform, self.seed = transform, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Any, int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = i % self.classes
        img = Image.new("RGB", (self.size, self.size), (0, 0, 0))
        x0, y0 = (int(v) for v in torch.randint(0, self.size // 2, (2,), generator=g))
        r = self.size // 4
        points = [(x0 + r, y0), (x0 + 2 * r, y0 + r + label), (x0, y0 + 2 * r)]
        ImageDraw.Draw(img).polygon(points, fill=(255, 64 * (label % 4), 128))
        sample = self.transform(img) if self.transform is not None else img
        return sample, label


def make_transform(image_size: int) -> Callable[[Any], torch.Tensor]:
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.RandomHorizontalFlip(),
            transforms.Resize((image_size, image_size)),
            transforms.ToTensor(),
        ]
    )


class SmoothedCrossEntropy(nn.CrossEntropyLoss):
    def __init__(self, smoothing: float = 0.1) -> None:
        super().__init__(label_smoothing=smoothing)


def make_optimizer(params: Iterable[nn.Parameter], lr: float = 0.01) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
