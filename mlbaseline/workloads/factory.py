"""Build the configured workload: model, dataset (+ collate), transform, loss, optimizer.

User factories (`pkg.module:callable`) are found on `workload.import_paths` and the cwd
(`workloads.imports`); so is a user dataset's `workload.collate`, the DataLoader's
`collate_fn` itself (not a factory: it is called with each batch's list of samples). A
model, dataset or transform factory is given `num_classes` and `image_size` when its signature
names them (and its `*_kwargs` do not), a dataset factory also the transform; a field that
would have no effect on the configured workload is an error, never silently ignored.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlbaseline.config import Config, WorkloadConfig
from mlbaseline.errors import ConfigError, DatasetError, FactoryError
from mlbaseline.workloads.imports import accepted, call_factory, call_resolved, resolve_callable
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
    model = call_factory(
        w.model, kwargs, "workload.model", offered=_shape(w), import_paths=w.import_paths
    )
    if not isinstance(model, nn.Module):
        raise FactoryError(f"workload.model: '{w.model}' did not return a torch.nn.Module")
    return model


def _shape(w: WorkloadConfig) -> dict[str, Any]:
    """What a model or dataset factory is offered (given only when its signature names it)."""
    return {"num_classes": w.num_classes, "image_size": w.image_size}


def build_loss(w: WorkloadConfig) -> nn.Module:
    return call_factory(w.loss, dict(w.loss_kwargs), "workload.loss", import_paths=w.import_paths)


def build_optimizer(w: WorkloadConfig, model: nn.Module) -> torch.optim.Optimizer:
    return call_factory(
        w.optimizer,
        dict(w.optimizer_kwargs),
        "workload.optimizer",
        model.parameters(),
        import_paths=w.import_paths,
    )


def default_transform(image_size: int) -> Callable[[Any], torch.Tensor]:
    from torchvision import transforms

    return transforms.Compose([transforms.Resize((image_size, image_size)), transforms.ToTensor()])


def _transform_kind(fn: Callable[..., Any], kwargs: dict[str, Any], w: WorkloadConfig) -> str:
    """What `workload.transform` is. `factory`: a class, a function given transform_kwargs,
    one callable with the keywords it names (`image_size`, …), or one that cannot take a
    sample; `transform`: a function that needs exactly one positional argument (the sample);
    `either`: one callable both with no argument and with one (`def make(offset=1)` or
    `def t(img=None)`: the signature cannot say)."""
    if inspect.isclass(fn) or kwargs:
        return "factory"
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "factory"
    named = accepted(fn, _shape(w))
    if (named and _binds(sig, **named)) or not _binds(sig, object()):
        return "factory"
    return "either" if _binds(sig) else "transform"


def _binds(sig: inspect.Signature, *args: Any, **kwargs: Any) -> bool:
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def build_transform(w: WorkloadConfig) -> Callable[[Any], Any]:
    """`workload.transform`: a factory called with transform_kwargs (a torchvision transform
    class, a function returning a transform), or a one-argument function used as it is. One
    that could be either is called once with no argument: a callable back is the transform it
    made, anything else (or an exception: it wanted its sample) means it is the transform."""
    if w.transform is None:
        return default_transform(w.image_size)
    kwargs = dict(w.transform_kwargs)
    fn = resolve_callable(w.transform, "workload.transform", w.import_paths)
    kind = _transform_kind(fn, kwargs, w)
    if kind == "transform":
        return fn
    if kind == "either":
        try:
            out = fn()
        except Exception:  # it needs a sample: the transform itself
            return fn
        return out if callable(out) else fn
    out = call_resolved(fn, w.transform, kwargs, "workload.transform", offered=_shape(w))
    if not callable(out):
        raise FactoryError(
            f"workload.transform: '{w.transform}' returned {type(out).__name__}, not a callable "
            "transform"
        )
    return out


def check_fields(w: WorkloadConfig) -> None:
    """Fields the configured dataset would never read are errors, not silently dropped."""
    builtin = w.dataset in ("synthetic", "imagefolder")
    if w.transform_kwargs and w.transform is None:
        raise ConfigError("workload.transform_kwargs: set, but workload.transform is not")
    if w.dataset_kwargs and builtin:
        raise ConfigError(
            f"workload.dataset_kwargs: the built-in dataset '{w.dataset}' takes none (they are "
            "for a `pkg.module:callable` dataset factory)"
        )
    if w.collate is not None and builtin:
        raise ConfigError(
            f"workload.collate: the built-in dataset '{w.dataset}' batches with its own collate "
            "(workload.collate is for a `pkg.module:callable` dataset factory)"
        )
    if w.transform is not None and w.dataset == "synthetic":
        raise ConfigError(
            "workload.transform: the synthetic dataset yields tensors and takes no transform; "
            "use workload.dataset: imagefolder or a dataset factory with a `transform` argument"
        )


@dataclass
class DataSpec:
    """A dataset plus how to batch it."""

    dataset: Any
    collate_fn: Callable[..., Any] | None
    description: dict[str, Any]


def build_dataset(cfg: Config) -> DataSpec:
    """The configured dataset: built-in synthetic (vision/text), an image folder, or a factory."""
    w = cfg.workload
    check_fields(w)
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
        check_classes(w.num_classes, list(ds.classes), root)
        return DataSpec(ds, None, {"type": "imagefolder", "len": len(ds), "root": str(root)})
    # the user's collate, as the DataLoader calls it (resolved first: a bad path fails fast)
    collate = resolve_callable(w.collate, "workload.collate", w.import_paths) if w.collate else None
    ds = _user_dataset(w)
    try:
        length = len(ds)
    except TypeError:
        raise FactoryError(
            f"workload.dataset: '{w.dataset}' did not return a sized dataset"
        ) from None
    return DataSpec(ds, collate, {"type": w.dataset, "len": length})


def check_classes(num_classes: int, classes: list[str], root: Path) -> None:
    """The folder's classes are the labels the model sees: a configured workload.num_classes
    that differs would train a head of the wrong width (labels out of range, or dead outputs),
    so it is an error. config.resolve already takes the folder's count when none was set."""
    if num_classes == len(classes):
        return
    shown = ", ".join(classes[:5]) + (", …" if len(classes) > 5 else "")
    raise ConfigError(
        f"workload.num_classes: {num_classes}, but the image folder {root} has {len(classes)} "
        f"classes ({shown}); leave workload.num_classes unset to take the folder's count"
    )


def _user_dataset(w: WorkloadConfig) -> Any:
    """A dataset factory, given the transform when one is configured (it must take a
    `transform` argument then) and the shape keywords its signature names."""
    fn = resolve_callable(w.dataset, "workload.dataset", w.import_paths)
    kwargs = dict(w.dataset_kwargs)
    if w.transform is not None:
        if "transform" in kwargs:
            raise ConfigError(
                "workload.transform: set, and workload.dataset_kwargs sets 'transform' too"
            )
        if "transform" not in accepted(fn, {"transform": None}):
            raise ConfigError(
                f"workload.transform: the dataset factory '{w.dataset}' has no `transform` "
                "argument, so the transform could not be applied (add one, or drop "
                "workload.transform)"
            )
        kwargs["transform"] = build_transform(w)
    return call_resolved(fn, w.dataset, kwargs, "workload.dataset", offered=_shape(w))


def model_dtype(w: WorkloadConfig) -> torch.dtype:
    return DTYPES[w.dtype]


def memory_format(w: WorkloadConfig) -> torch.memory_format:
    """`workload.channels_last`: the memory format of the model and of its 4-D inputs."""
    return torch.channels_last if w.channels_last else torch.contiguous_format


def compile_model(model: nn.Module, w: WorkloadConfig) -> nn.Module:
    """`workload.compile`: torch.compile is lazy, so a compile failure shows at the first call
    (`measure.step.first_call`), which turns it into one error line."""
    if w.compile == "off":
        return model
    mode = None if w.compile == "default" else w.compile
    return torch.compile(model, mode=mode)  # type: ignore[return-value]
