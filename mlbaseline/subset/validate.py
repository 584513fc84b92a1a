"""Is the subset representative? Gaussian KL per feature against the full set, averaged.

DESIGN.md fixes the test: fit a Gaussian to each feature in the subset and in the full set
(or its seeded reference sample), take KL(subset ‖ full) per feature with
`stats.gaussian_kl_features`, average, and pass below the threshold (0.05 nats by default).
Two further figures are reported, not gated on features: the divergence of the class
proportions, KL(subset classes ‖ full classes) with `scipy.stats.entropy`, and the feature KL
within each class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from mlbaseline import stats

MIN_ROWS_PER_CLASS = 2  # a Gaussian fit needs a spread


@dataclass(frozen=True)
class FeatureKl:
    per_feature: dict[str, float]
    mean: float

    def passed(self, threshold: float) -> bool:
        return self.mean < threshold

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "per_feature": self.per_feature}


def feature_kl(subset: np.ndarray, full: np.ndarray, names: Sequence[str]) -> FeatureKl:
    """Per-feature Gaussian KL(subset ‖ full) and its mean (see `stats.gaussian_kl_features`)."""
    per, mean = stats.gaussian_kl_features(subset, full)
    return FeatureKl(dict(zip(names, (float(v) for v in per), strict=True)), float(mean))


def class_divergence(subset_counts: Sequence[int], full_counts: Sequence[int]) -> float:
    """KL(subset class distribution ‖ full class distribution), nats (`scipy.stats.entropy`)."""
    p = np.asarray(subset_counts, dtype=np.float64)
    q = np.asarray(full_counts, dtype=np.float64)
    if p.sum() == 0 or q.sum() == 0:
        return float("nan")
    return float(sps.entropy(p, q))


def per_class_kl(
    subset: np.ndarray,
    subset_labels: np.ndarray,
    full: np.ndarray,
    full_labels: np.ndarray,
    classes: Sequence[str],
) -> dict[str, float | None]:
    """Mean feature KL within each class; None where either side has fewer than 2 images."""
    out: dict[str, float | None] = {}
    for c, name in enumerate(classes):
        s, f = subset[subset_labels == c], full[full_labels == c]
        if len(s) < MIN_ROWS_PER_CLASS or len(f) < MIN_ROWS_PER_CLASS:
            out[name] = None
            continue
        out[name] = float(stats.gaussian_kl_features(s, f)[1])
    return out
