"""Per-image features for the KL validation, and the decoding that finds corrupt images.

Each file is read once (read-only): the same bytes give its size, its SHA-256 (for the
manifest) and the decoded image. Only the images that are needed are decoded — the subset's
candidates and the reference sample — in a small thread pool (PIL and hashlib release the
GIL), in chunks so that memory stays bounded whatever the extractor.

Extractors:
- ``stats`` (default, cheap): per-channel mean and standard deviation of RGB (0–255), original
  height and width, aspect ratio (width / height), file size in bytes and the Shannon entropy
  (bits) of the luminance histogram. JPEGs are decoded at reduced scale (PIL's draft mode, at
  least `STATS_DRAFT_SIDE` px) — the same for the subset and the reference, so the comparison
  stays fair while decoding gets several times cheaper.
- ``resnet18``: the 512 pooled features of torchvision's resnet18 on images resized to
  `feature_size` and ImageNet-normalised; weights from a local file (loaded with
  ``torch.load(weights_only=True)``) or a fixed-seed random init. `info` says which.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image

from mlbaseline.errors import ConfigError
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.subset.index import Index

STATS_FEATURES = (
    "mean_r",
    "mean_g",
    "mean_b",
    "std_r",
    "std_g",
    "std_b",
    "height",
    "width",
    "aspect_ratio",
    "file_bytes",
    "entropy",
)
STATS_DRAFT_SIDE = 256
CHUNK = 256  # images decoded per round; bounds memory for every extractor
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Key = tuple[int, int]  # (class index, file index)


class Extractor(Protocol):
    name: str
    feature_names: list[str]
    info: dict[str, Any]
    draft_side: int | None  # JPEG draft decoding bound; None: full decode

    def prepare(self, image: Image.Image, size: tuple[int, int], nbytes: int) -> np.ndarray:
        """Per image, in a worker thread: a feature row or a model input."""
        ...

    def finish(self, prepared: list[np.ndarray]) -> np.ndarray:
        """Per chunk, in the calling thread: rows of features (len(prepared) × features)."""
        ...


class StatsExtractor:
    name = "stats"
    draft_side: int | None = STATS_DRAFT_SIDE

    def __init__(self) -> None:
        self.feature_names = list(STATS_FEATURES)
        self.info: dict[str, Any] = {"name": self.name, "draft_side": self.draft_side}

    def prepare(self, image: Image.Image, size: tuple[int, int], nbytes: int) -> np.ndarray:
        pixels = np.asarray(image, dtype=np.float64).reshape(-1, 3)
        width, height = size
        hist = np.bincount(np.asarray(image.convert("L")).ravel(), minlength=256)
        p = hist[hist > 0] / hist.sum()
        entropy = float(-(p * np.log2(p)).sum())
        return np.array(
            [
                *pixels.mean(axis=0),
                *pixels.std(axis=0),
                height,
                width,
                width / height,
                nbytes,
                entropy,
            ],
            dtype=np.float64,
        )

    def finish(self, prepared: list[np.ndarray]) -> np.ndarray:
        return np.stack(prepared) if prepared else np.empty((0, len(self.feature_names)))


class Resnet18Extractor:
    """torchvision resnet18 without its classifier: 512 pooled features per image."""

    name = "resnet18"
    draft_side: int | None = None

    def __init__(
        self,
        weights: Path | None,
        seed: int,
        feature_size: int = 224,
        device: str = "cpu",
        batch_size: int = 64,
    ) -> None:
        import torch
        import torchvision

        self.size, self.device, self.batch_size = feature_size, device, batch_size
        self.draft_side = feature_size
        with torch.random.fork_rng(devices=[]):  # a fixed init without moving the global RNG
            torch.manual_seed(seed)
            model = torchvision.models.resnet18(weights=None)
        if weights is not None:
            self.info = {"name": self.name, "weights": "file", **_load_weights(model, weights)}
        else:
            self.info = {"name": self.name, "weights": "random-init", "init_seed": seed}
        self.info["feature_size"] = feature_size
        model.fc = torch.nn.Identity()
        self.model = model.eval().to(device)
        self.feature_names = [f"resnet18_{i:03d}" for i in range(512)]
        self._mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1).to(device)
        self._std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1).to(device)

    def prepare(self, image: Image.Image, size: tuple[int, int], nbytes: int) -> np.ndarray:
        return np.asarray(image.resize((self.size, self.size), Image.Resampling.BILINEAR))

    def finish(self, prepared: list[np.ndarray]) -> np.ndarray:
        import torch

        rows = []
        with torch.inference_mode():
            for start in range(0, len(prepared), self.batch_size):
                batch = np.stack(prepared[start : start + self.batch_size])
                x = torch.from_numpy(batch).to(self.device).permute(0, 3, 1, 2).float() / 255.0
                rows.append(self.model((x - self._mean) / self._std).double().cpu().numpy())
        return np.concatenate(rows) if rows else np.empty((0, 512))


def _load_weights(model: Any, path: Path) -> dict[str, Any]:
    import torch

    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConfigError(f"subset.weights: {path}: no such file") from None
    except Exception as exc:  # torch raises many types for a file that is not a checkpoint
        raise ConfigError(f"subset.weights: {path}: not a loadable state dict ({exc})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"subset.weights: {path}: does not fit resnet18 ({first})") from None
    return {"weights_path": str(path), "weights_sha256": sha256_file(path)}


def make_extractor(
    name: str,
    weights: str | None,
    seed: int,
    feature_size: int = 224,
    device: str = "cpu",
) -> Extractor:
    if name == "stats":
        return StatsExtractor()
    if name == "resnet18":
        return Resnet18Extractor(Path(weights) if weights else None, seed, feature_size, device)
    raise ConfigError(f"subset.extractor: unknown extractor '{name}' (use stats or resnet18)")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def open_rgb(data: bytes, draft_side: int | None = None) -> tuple[Image.Image, tuple[int, int]]:
    """Decode fully (so truncation is found) into RGB; returns the image and its original size."""
    image = Image.open(io.BytesIO(data))
    size = image.size
    if draft_side is not None and image.format == "JPEG":
        image.draft("RGB", (draft_side, draft_side))
    return image.convert("RGB"), size


def decode_uint8(path: Path) -> np.ndarray:
    """Full-resolution RGB pixels (H×W×3 uint8) of one image file."""
    with open(path, "rb") as fh:
        image, _ = open_rgb(fh.read())
    return np.array(image)  # a writable copy: torch.from_numpy needs one


@dataclass
class Entry:
    """What decoding one file found."""

    nbytes: int
    sha256: str
    error: str | None = None
    row: int = -1  # row in the feature matrix; -1 when the file did not decode
    size: tuple[int, int] | None = None  # (width, height) as stored, for the report

    @property
    def ok(self) -> bool:
        return self.error is None


class FeatureStore:
    """Decodes files on demand, once each, and keeps their features, sizes and hashes."""

    def __init__(self, index: Index, extractor: Extractor, workers: int = 1) -> None:
        self.index, self.extractor, self.workers = index, extractor, max(1, workers)
        self.entries: dict[Key, Entry] = {}
        self._rows: list[np.ndarray] = []
        self._n_rows = 0

    def _load(self, key: Key) -> tuple[Entry, np.ndarray | None]:
        path = self.index.path(*key)
        try:
            with open(path, "rb") as fh:  # read-only: the source tree is never modified
                data = fh.read()
        except OSError as exc:
            return Entry(0, "", f"unreadable: {exc.strerror or exc}"), None
        entry = Entry(len(data), hashlib.sha256(data).hexdigest())
        try:
            image, size = open_rgb(data, self.extractor.draft_side)
            entry.size = (int(size[0]), int(size[1]))
            prepared = self.extractor.prepare(image, size, len(data))
        except Exception as exc:  # decoders raise many types for a damaged file; all mean corrupt
            entry.error = f"{type(exc).__name__}: {exc}".strip()[:200]
            return entry, None
        return entry, prepared

    def ensure(self, keys: Sequence[Key], progress: Progress | None = None, desc: str = "") -> None:
        """Decode the keys not seen before; progress advances per image."""
        todo = [k for k in dict.fromkeys(keys) if k not in self.entries]
        if not todo:
            return
        progress = progress or NullProgress()
        try:
            with (
                progress.task(desc or "decoding images", total=len(todo)) as task,
                ThreadPoolExecutor(max_workers=self.workers) as pool,
            ):
                for chunk in _chunks(todo, CHUNK):
                    self._add_chunk(chunk, list(pool.map(self._load, chunk)))
                    task.advance(len(chunk))
        finally:  # keep the store consistent even when interrupted between chunks
            self._rows = [np.concatenate(self._rows)] if self._rows else []

    def _add_chunk(self, chunk: list[Key], loaded: list[tuple[Entry, np.ndarray | None]]) -> None:
        prepared = [p for _, p in loaded if p is not None]
        rows = self.extractor.finish(prepared)
        r = 0
        for key, (entry, p) in zip(chunk, loaded, strict=True):
            if p is not None:
                entry.row = self._n_rows + r
                r += 1
            self.entries[key] = entry
        self._rows.append(rows)
        self._n_rows += len(prepared)

    def matrix(self, keys: Sequence[Key]) -> np.ndarray:
        """Feature rows of the keys that decoded, in order."""
        rows = [self.entries[k].row for k in keys if self.entries[k].ok]
        if not self._rows or not rows:
            return np.empty((0, len(self.extractor.feature_names)))
        return self._rows[0][rows]


def _chunks(items: list[Key], size: int) -> Iterator[list[Key]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
