"""Datasets that time their own stages, and a collate that carries the timings with the batch.

`TimedImageFolder` is an ImageFolder-style dataset whose `__getitem__` times three stages of one
sample: read (open + read the bytes), decode (PIL, or OpenCV's `cv2.imdecode`) and transform (the
configured torchvision transform). The timings travel inside the sample; `TimedCollate` times the
collate and packs the per-sample timings into the `TimedBatch`, so the split survives the trip
from a worker process back to the main process (`num_workers > 0`).

`WholeSampleDataset` wraps a user's dataset that does not expose these steps: each sample is
timed as a whole, and the runner says so.

A sample that cannot be read, decoded or transformed comes back as a `FailedSample` marker
instead of an exception, so that a corrupt file never kills a worker (and with it the sweep);
the collate drops the markers and counts them.

Keys may be an index or `(index, cold)`: with `cold` the file is evicted from the page cache just
before it is read (outside the timed read), so every read of a cold pass is a cold read. The key
comes from the sampler, which runs in the main process, so a persistent worker sees the change.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset, default_collate

from mlbaseline.errors import ConfigError, DatasetError
from mlbaseline.measure.io import evict_file

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
DECODERS = ("pil", "opencv")
STAGES = ("read", "decode", "transform")


@dataclass(frozen=True)
class SampleTimes:
    """Seconds spent on one sample; the stages are None when the dataset does not expose them."""

    total: float
    read: float | None = None
    decode: float | None = None
    transform: float | None = None
    nbytes: int = 0
    index: int = -1  # the dataset index: which file (and so which class) the sample was


@dataclass
class TimedSample:
    item: Any  # what the collate receives: (image tensor, target) for an image folder
    times: SampleTimes


@dataclass(frozen=True)
class FailedSample:
    """Marker for a sample that could not be loaded; never raised, always returned."""

    index: int
    path: str | None
    stage: str
    error: str


@dataclass
class TimedBatch:
    """A collated batch plus the timings of the samples in it and of the collate itself."""

    data: Any  # None when every sample of the batch failed
    times: list[SampleTimes]
    failed: list[FailedSample] = field(default_factory=list)
    collate_s: float = 0.0
    pin_s: float | None = None  # set when the DataLoader pins the batch (pin_memory=True)

    @property
    def size(self) -> int:
        return len(self.times)

    def pin_memory(self) -> TimedBatch:
        """Called by the DataLoader's pin-memory step; pins the tensors and times it."""
        t0 = time.perf_counter_ns()
        data = _pin(self.data)
        return replace(self, data=data, pin_s=(time.perf_counter_ns() - t0) / 1e9)


def _pin(obj: Any) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.pin_memory()
    if isinstance(obj, tuple):
        return type(obj)(*map(_pin, obj)) if hasattr(obj, "_fields") else tuple(map(_pin, obj))
    if isinstance(obj, list):
        return [_pin(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _pin(v) for k, v in obj.items()}
    return obj


def unpack_key(key: Any) -> tuple[int, bool]:
    """An index, or `(index, cold)` from a pass sampler."""
    if isinstance(key, tuple):
        return int(key[0]), bool(key[1])
    return int(key), False


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0]}" if text else exc.__class__.__name__


def _decode_pil(raw: bytes) -> Any:
    from PIL import Image

    with Image.open(io.BytesIO(raw)) as img:
        return img.convert("RGB")  # forces the full decode, like torchvision's pil_loader


def _decode_opencv(raw: bytes) -> Any:
    import cv2
    import numpy as np
    from PIL import Image

    pixels = cv2.imdecode(np.frombuffer(raw, dtype=np.uint8), cv2.IMREAD_COLOR)
    if pixels is None:
        raise ValueError("cv2.imdecode could not decode the image")
    # the configured torchvision transforms expect a PIL image: the conversion is decode cost
    return Image.fromarray(cv2.cvtColor(pixels, cv2.COLOR_BGR2RGB))


def decoder_for(name: str) -> Callable[[bytes], Any]:
    """The decode function for `dataloader.decoder`; a clear error when OpenCV is missing."""
    if name == "pil":
        return _decode_pil
    if name == "opencv":
        try:
            import cv2  # noqa: F401
        except ImportError:
            raise ConfigError(
                "dataloader.decoder: 'opencv' needs OpenCV, but cv2 cannot be imported here "
                "(install opencv-python-headless, or use the default decoder 'pil')"
            ) from None
        return _decode_opencv
    raise ConfigError(f"dataloader.decoder: {name!r} is not one of {', '.join(DECODERS)}")


def scan_image_folder(root: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """Classes (sorted sub-folders) and (path, class index) pairs, like torchvision's
    ImageFolder; files are listed by extension only, so a corrupt file is found when read."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such directory")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise DatasetError(f"{root}: no class sub-folders (expected root/CLASS/IMAGE files)")
    samples: list[tuple[str, int]] = []
    for idx, name in enumerate(classes):
        for path in sorted((root / name).rglob("*")):
            if path.suffix.lower() in IMG_EXTENSIONS and path.is_file():
                samples.append((str(path), idx))
    if not samples:
        exts = ", ".join(IMG_EXTENSIONS)
        raise DatasetError(f"{root}: no image files in the class folders (extensions {exts})")
    return classes, samples


class TimedImageFolder(Dataset):
    """root/CLASS/IMAGE files; each sample timed as read → decode → transform."""

    def __init__(
        self,
        root: Path,
        transform: Callable[[Any], Any] | None = None,
        decoder: str = "pil",
    ) -> None:
        self.root = Path(root)
        self.transform = transform
        self.decoder = decoder
        self._decode = decoder_for(decoder)
        self.classes, self.samples = scan_image_folder(self.root)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.samples]

    def __getitem__(self, key: Any) -> TimedSample | FailedSample:
        index, cold = unpack_key(key)
        path, target = self.samples[index]
        if cold:
            evict_file(path)  # before t0: the eviction is not part of the read
        t0 = time.perf_counter_ns()
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError as exc:
            return FailedSample(index, path, "read", _describe(exc))
        t1 = time.perf_counter_ns()
        try:
            image = self._decode(raw)
        except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, …
            return FailedSample(index, path, "decode", _describe(exc))
        t2 = time.perf_counter_ns()
        try:
            x = self.transform(image) if self.transform is not None else image
        except Exception as exc:
            return FailedSample(index, path, "transform", _describe(exc))
        t3 = time.perf_counter_ns()
        times = SampleTimes(
            total=(t3 - t0) / 1e9,
            read=(t1 - t0) / 1e9,
            decode=(t2 - t1) / 1e9,
            transform=(t3 - t2) / 1e9,
            nbytes=len(raw),
            index=index,
        )
        return TimedSample((x, target), times)


class WholeSampleDataset(Dataset):
    """A user's dataset, timed per sample as a whole (its read/decode/transform are hidden)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, key: Any) -> TimedSample | FailedSample:
        index, _ = unpack_key(key)  # no files to evict: a cold pass does not apply
        t0 = time.perf_counter_ns()
        try:
            item = self.inner[index]
        except Exception as exc:
            return FailedSample(index, None, "sample", _describe(exc))
        total = (time.perf_counter_ns() - t0) / 1e9
        return TimedSample(item, SampleTimes(total=total, index=index))


class TimedCollate:
    """Drops failed samples (keeping them in `failed`), collates the rest and times it."""

    def __init__(self, inner: Callable[[Sequence[Any]], Any] | None = None) -> None:
        self.inner = inner or default_collate

    def __call__(self, batch: Sequence[TimedSample | FailedSample]) -> TimedBatch:
        good = [s for s in batch if isinstance(s, TimedSample)]
        failed = [s for s in batch if isinstance(s, FailedSample)]
        t0 = time.perf_counter_ns()
        data = self.inner([s.item for s in good]) if good else None
        collate_s = (time.perf_counter_ns() - t0) / 1e9
        return TimedBatch(data, [s.times for s in good], failed, collate_s)


class PassSampler:
    """The indices of one pass, each paired with the pass's `cold` flag: like a training
    loop's sampler, a seeded random permutation of the whole dataset (a fresh permutation each
    time it is used up, until `length`), or with `shuffle` off indices `0..n-1` in order. Every
    iteration yields the same sequence, so the cold and the warm pass of a setting, and every
    setting, read the same files. The DataLoader iterates the sampler in the main process at
    every epoch, so setting `cold` between passes reaches persistent workers too."""

    def __init__(
        self, n: int, length: int, cold: bool = False, seed: int = 0, shuffle: bool = True
    ) -> None:
        if n < 1:
            raise DatasetError("the dataset is empty")
        self.n, self.length, self.cold = n, length, cold
        self.seed, self.shuffle = seed, shuffle

    def indices(self) -> list[int]:
        if not self.shuffle:
            return [k % self.n for k in range(self.length)]
        import torch

        out: list[int] = []
        generator = torch.Generator().manual_seed(self.seed)
        while len(out) < self.length:
            out += torch.randperm(self.n, generator=generator).tolist()
        return out[: self.length]

    def describe(self) -> str:
        if not self.shuffle:
            return "sequential (dataloader.shuffle: false), cycled when the dataset is smaller"
        return (
            f"seeded random permutation of all {self.n} samples (seed {self.seed}), a fresh "
            "one each time it is used up; the same order in every pass"
        )

    def __iter__(self) -> Iterator[tuple[int, bool]]:
        cold = self.cold
        return ((k, cold) for k in self.indices())

    def __len__(self) -> int:
        return self.length


def seed_worker(worker_id: int) -> None:
    """worker_init_fn: seed random and NumPy from torch's per-worker seed (which the loader's
    seeded generator fixes), the recipe of the PyTorch reproducibility notes."""
    import random

    import numpy as np
    import torch

    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
