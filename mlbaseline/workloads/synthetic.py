"""Built-in synthetic data so that the tool runs with no data at all.

- `SyntheticVision`: seeded random images and labels, generated per index (no big tensor held).
- `SyntheticText`: variable-length token sequences; `pad_collate` pads them with
  `pad_sequence`; sequences longer than `max_length` are cut and counted, so a warning can say so.
- `write_image_tree`: real image files in an ImageFolder layout, for the dataloader and subset
  commands and the demo.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset


class SyntheticVision(Dataset):
    """`n` images (C×H×W float32 in [0,1]) with labels, deterministic per (seed, index)."""

    def __init__(self, n: int, image_size: int, num_classes: int, seed: int, channels: int = 3):
        self.n, self.size, self.k, self.seed, self.c = n, image_size, num_classes, seed, channels

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = torch.rand(self.c, self.size, self.size, generator=g)
        return x, int(torch.randint(self.k, (1,), generator=g))


class SyntheticText(Dataset):
    """`n` token sequences, lengths drawn from a seeded log-normal between min and a long tail.

    Samples longer than `max_length` are truncated; `overlong` counts them (the source
    document's pad_sequence blow-up came from one 20,000-token sample)."""

    def __init__(
        self,
        n: int,
        vocab_size: int,
        num_classes: int,
        seed: int,
        min_length: int = 16,
        max_length: int = 512,
    ) -> None:
        rng = np.random.default_rng(seed)
        median = max(min_length, max_length // 4)
        raw = rng.lognormal(mean=np.log(median), sigma=0.6, size=n).astype(int)
        self.raw_lengths = np.maximum(raw, min_length)
        self.lengths = np.minimum(self.raw_lengths, max_length)
        self.overlong = int((self.raw_lengths > max_length).sum())
        self.n, self.vocab, self.k, self.seed = n, vocab_size, num_classes, seed
        self.max_length = max_length

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        # token 0 is padding: draw from 1..vocab-1
        tokens = torch.randint(1, self.vocab, (int(self.lengths[i]),), generator=g)
        return tokens, int(torch.randint(self.k, (1,), generator=g))


def pad_collate(batch: Sequence[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad variable-length sequences to the longest in the batch (padding value 0)."""
    from torch.nn.utils.rnn import pad_sequence

    seqs = [b[0] for b in batch]
    labels = torch.tensor([b[1] for b in batch], dtype=torch.long)
    return pad_sequence(seqs, batch_first=True, padding_value=0), labels


def write_image_tree(
    root: Path,
    n: int,
    num_classes: int = 4,
    size: int = 64,
    seed: int = 42,
    fmt: str = "png",
    class_weights: Sequence[float] | None = None,
) -> list[Path]:
    """Write `n` real image files under root/class_XX/img_XXXXX.fmt; returns the paths.

    Each image is seeded noise over a class-dependent colour so that images differ in content
    (and in size when encoded), like a real dataset."""
    from PIL import Image

    from mlbaseline.safewrite import open_output

    pil_format = Image.registered_extensions().get(f".{fmt.lower()}")
    if pil_format is None:
        raise ValueError(f"unknown image format {fmt!r}")
    rng = np.random.default_rng(seed)
    weights = np.asarray(class_weights or [1.0] * num_classes, dtype=float)
    labels = rng.choice(num_classes, size=n, p=weights / weights.sum())
    paths = []
    for i, label in enumerate(labels):
        folder = Path(root) / f"class_{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        base = rng.integers(0, 256, size=3)
        noise = rng.integers(0, 64, size=(size, size, 3))
        pixels = np.clip(base + noise - 32, 0, 255).astype(np.uint8)
        path = folder / f"img_{i:05d}.{fmt}"
        # scratch data, made again on every run: no fsync per image
        with open_output(path, force=True, mode="wb", sync=False) as fh:
            Image.fromarray(pixels).save(fh, format=pil_format)
        paths.append(path)
    return paths


def describe(ds: Any) -> dict[str, Any]:
    """A small, JSON-safe description of a dataset for the result file."""
    out: dict[str, Any] = {"type": type(ds).__name__, "len": len(ds)}
    if isinstance(ds, SyntheticText):
        out.update(
            overlong=ds.overlong,
            max_length=ds.max_length,
            mean_length=float(ds.lengths.mean()),
        )
    return out
