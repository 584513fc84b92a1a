"""Is the subset representative? Gaussian KL per feature against the full set, averaged.

DESIGN.md fixes the test: fit a Gaussian to each feature in the subset and in the full set
(or its seeded reference sample), take KL(subset ‖ full) per feature with
`stats.gaussian_kl_features`, average, and pass below the threshold (0.05 nats by default).
Features that are constant, and equal, in both sets (all images 224×224: height, width and
aspect ratio) have KL 0 by construction; they are reported but left out of the average, which
would otherwise be diluted by them and pass a skewed subset of a fixed-size dataset more
easily. Two further figures are reported, not gated on features: the divergence of the class
proportions, KL(subset classes ‖ full classes) with `scipy.stats.entropy`, and the feature KL
within each class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlbaseline import stats

MIN_ROWS_PER_CLASS = 2  # a Gaussian fit needs a spread


@dataclass(frozen=True)
class FeatureKl:
    per_feature: dict[str, float]
    mean: float  # over the informative features (not constant-and-equal in both sets)
    constant: list[str]

    def passed(self, threshold: float) -> bool:
        return self.mean < threshold

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "per_feature": self.per_feature, "constant": self.constant}


def feature_kl(subset: np.ndarray, full: np.ndarray, names: Sequence[str]) -> FeatureKl:
    """Per-feature Gaussian KL(subset ‖ full) (`stats.gaussian_kl_features`) and its mean over
    the features that are not constant and equal in both sets."""
    per, _ = stats.gaussian_kl_features(subset, full)
    s, f = np.asarray(subset, dtype=np.float64), np.asarray(full, dtype=np.float64)
    constant = (np.ptp(s, axis=0) == 0) & (np.ptp(f, axis=0) == 0) & (s[0] == f[0])
    informative = per[~constant]
    mean = float(informative.mean()) if informative.size else 0.0
    return FeatureKl(
        dict(zip(names, (float(v) for v in per), strict=True)),
        mean,
        [name for name, c in zip(names, constant, strict=True) if c],
    )


def class_divergence(subset_counts: Sequence[int], full_counts: Sequence[int]) -> float:
    """KL(subset class distribution ‖ full class distribution), nats (`scipy.stats.entropy`)."""
    p = np.asarray(subset_counts, dtype=np.float64)
    q = np.asarray(full_counts, dtype=np.float64)
    if p.sum() == 0 or q.sum() == 0:
        return float("nan")
    from scipy import stats as sps  # lazily: scipy.stats costs ~0.6 s to import

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
        out[name] = feature_kl(s, f, [str(i) for i in range(s.shape[1])]).mean
    return out
