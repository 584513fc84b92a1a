"""The `data` payload of a `subset` result (written by `runners/subset.py`).

`run_subset` writes the run's settings first (`source` … `timings_s`); indexing adds `index`
and `plan` (all a dry run has); a real run adds the extractor, the reference sample, the
chosen try and its KL figures, and `manifest_sha256` once a manifest exists (dropped again
when the run was interrupted). A KL that is NaN or infinite is written as null.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlbaseline.documents.base import FiniteFloat, Strict


class IndexSummary(Strict):
    """`subset.index.Index.summary()`."""

    images: int
    classes: int
    empty_classes: list[str]
    ignored_files: int
    ignored_by_suffix: dict[str, int]
    hidden_skipped: int
    unreadable_dirs: list[str]


class PlanRow(Strict):
    """One class of the plan; `selected` and `corrupt_excluded` once a subset was drawn."""

    class_: str = Field(alias="class")
    images: int
    quota: int
    selected: int | None = None
    corrupt_excluded: int | None = None


class Extractor(Strict):
    """The feature extractor's `info` (`subset.features`) and its feature count."""

    name: str
    features: int
    draft_side: int | None = None  # stats extractor
    weights: str | None = None  # resnet18: "file" or "random-init"
    init_seed: int | None = None
    weights_path: str | None = None
    weights_sha256: str | None = None
    feature_size: int | None = None


class Reference(Strict):
    requested_max: int
    size: int
    whole_dataset: bool
    corrupt: list[str]


class Counts(Strict):
    selected: int
    per_class: dict[str, int]


class Kl(Strict):
    extractor: str
    threshold: FiniteFloat
    mean: FiniteFloat | None
    per_feature: dict[str, FiniteFloat | None]
    constant_features: list[str]
    class_proportion: FiniteFloat | None
    per_class: dict[str, FiniteFloat | None]  # None: fewer than 2 images on a side


class ImageSize(Strict):
    mean_width: FiniteFloat
    mean_height: FiniteFloat


class Try(Strict):
    seed: int
    kl_mean: FiniteFloat | None
    passed: bool
    class_kl: FiniteFloat | None
    corrupt_excluded: list[str]


class CorruptImage(Strict):
    path: str
    error: str | None


class Tensors(Strict):
    path: str
    skipped_corrupt: list[str]


class Data(Strict):
    """`data` of a subset result."""

    source: str
    output: str | None
    n: int
    strategy: Literal["proportional", "balanced"]
    base_seed: int
    link: str
    dry_run: bool
    timings_s: dict[str, FiniteFloat]
    index: IndexSummary | None = None
    plan: list[PlanRow] | None = None
    extractor: Extractor | None = None
    reference: Reference | None = None
    seed: int | None = None
    planned_before_corrupt: list[int] | None = None
    counts: Counts | None = None
    kl: Kl | None = None
    image_size: ImageSize | None = None
    tries: list[Try] | None = None
    corrupt: list[CorruptImage] | None = None
    corrupt_kept: list[str] | None = None
    manifest_sha256: str | None = None
    tensors: Tensors | None = None
