"""Build the configured workload: model, dataset (+ collate), transform, loss, optimizer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlbaseline.config import Config, WorkloadConfig
from mlbaseline.errors import DatasetError, FactoryError
from mlbaseline.workloads.imports import call_factory
from mlbaseline.workloads.synthetic import SyntheticText, SyntheticVision, pad_collate

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class TinyCNN(nn.Module):
    """A few conv layers: a fast CPU model for tests."""

    def __init__(self, num_classes: int = 10, channels: int = 3, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, width * 2, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(width * 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class TinyMLP(nn.Module):
    def __init__(self, num_classes: int = 10, in_features: int = 3 * 32 * 32, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.LazyLinear(hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )
        self.in_features = in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TinyText(nn.Module):
    """Embedding → masked mean pool → linear: a text classifier that respects padding (id 0)."""

    def __init__(self, num_classes: int = 2, vocab_size: int = 10000, dim: int = 64) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = (tokens != 0).unsqueeze(-1).float()
        h = torch.relu(self.mix(self.emb(tokens)))
        pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


BUILTIN_MODELS: dict[str, Callable[..., nn.Module]] = {
    "tiny_cnn": TinyCNN,
    "tiny_mlp": TinyMLP,
    "tiny_text": TinyText,
}


def build_model(w: WorkloadConfig) -> nn.Module:
    """`torchvision:NAME` (random init, no download), `builtin:NAME` or `pkg.mod:callable`."""
    scheme, _, name = w.model.partition(":")
    kwargs = dict(w.model_kwargs)
    if scheme == "torchvision":
        import torchvision

        try:
            return torchvision.models.get_model(
                name, weights=None, num_classes=w.num_classes, **kwargs
            )
        except (ValueError, KeyError):
            raise FactoryError(f"workload.model: torchvision has no model '{name}'") from None
        except TypeError as exc:
            raise FactoryError(f"workload.model: torchvision:{name}: {exc}") from None
    if scheme == "builtin":
        if name not in BUILTIN_MODELS:
            known = ", ".join(BUILTIN_MODELS)
            raise FactoryError(f"workload.model: no built-in model '{name}' (known: {known})")
        kwargs.setdefault("num_classes", w.num_classes)
        if name == "tiny_text":
            kwargs.setdefault("vocab_size", w.vocab_size)
        return BUILTIN_MODELS[name](**kwargs)
    model = call_factory(w.model, kwargs, "workload.model")
    if not isinstance(model, nn.Module):
        raise FactoryError(f"workload.model: '{w.model}' did not return a torch.nn.Module")
    return model


def build_loss(w: WorkloadConfig) -> nn.Module:
    return call_factory(w.loss, dict(w.loss_kwargs), "workload.loss")


def build_optimizer(w: WorkloadConfig, model: nn.Module) -> torch.optim.Optimizer:
    return call_factory(
        w.optimizer, dict(w.optimizer_kwargs), "workload.optimizer", model.parameters()
    )


def default_transform(image_size: int) -> Callable[[Any], torch.Tensor]:
    from torchvision import transforms

    return transforms.Compose([transforms.Resize((image_size, image_size)), transforms.ToTensor()])


def build_transform(w: WorkloadConfig) -> Callable[[Any], Any]:
    if w.transform is None:
        return default_transform(w.image_size)
    return call_factory(w.transform, dict(w.transform_kwargs), "workload.transform")


@dataclass
class DataSpec:
    """A dataset plus how to batch it."""

    dataset: Any
    collate_fn: Callable[..., Any] | None
    description: dict[str, Any]


def build_dataset(cfg: Config) -> DataSpec:
    """The configured dataset: built-in synthetic (vision/text), an image folder, or a factory."""
    w = cfg.workload
    n = w.dataset_size or cfg.golden.subset_size
    if w.dataset == "synthetic":
        if w.task == "text":
            ds = SyntheticText(
                n, w.vocab_size, w.num_classes, cfg.golden.seed, w.min_length, w.max_length
            )
            desc = {
                "type": "synthetic-text",
                "len": n,
                "overlong": ds.overlong,
                "max_length": w.max_length,
            }
            return DataSpec(ds, pad_collate, desc)
        ds = SyntheticVision(n, w.image_size, w.num_classes, cfg.golden.seed)
        return DataSpec(
            ds, None, {"type": "synthetic-vision", "len": n, "image_size": w.image_size}
        )
    if w.dataset == "imagefolder":
        if not w.data_dir:
            raise DatasetError("workload.data_dir: required when workload.dataset is 'imagefolder'")
        root = Path(w.data_dir)
        if not root.is_dir():
            raise DatasetError(f"workload.data_dir: {root}: no such directory")
        from torchvision.datasets import ImageFolder

        try:
            ds = ImageFolder(str(root), transform=build_transform(w))
        except (FileNotFoundError, RuntimeError) as exc:
            raise DatasetError(f"workload.data_dir: {root}: {exc}") from None
        return DataSpec(ds, None, {"type": "imagefolder", "len": len(ds), "root": str(root)})
    ds = call_factory(w.dataset, dict(w.dataset_kwargs), "workload.dataset")
    try:
        length = len(ds)
    except TypeError:
        raise FactoryError(
            f"workload.dataset: '{w.dataset}' did not return a sized dataset"
        ) from None
    return DataSpec(ds, None, {"type": w.dataset, "len": length})


def model_dtype(w: WorkloadConfig) -> torch.dtype:
    return DTYPES[w.dtype]
