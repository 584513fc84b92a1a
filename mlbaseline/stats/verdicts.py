"""Per-metric comparison verdicts: two gates (Holm-corrected Mann-Whitney U and a bootstrap CI of
the ratio of medians beyond the practical threshold)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from mlbaseline.stats.core import (
    DEFAULT_SEED,
    DEFAULT_THRESHOLD,
    ArrayLike,
    _as_sample,
    _check_confidence,
    _check_ratio_inputs,
    _interval,
    _median_replicates,
    holm,
    mann_whitney_p,
    min_detectable_effect,
    samples_needed,
)

# --------------------------------------------------------------------------- compare verdicts


@dataclass(frozen=True)
class MetricComparison:
    """The per-metric result of comparing old and new samples (see :func:`compare_samples`)."""

    metric: str
    n_old: int
    n_new: int
    median_old: float
    median_new: float
    ratio: float  # median_new / median_old
    ci_low: float
    ci_high: float
    p_value: float  # two-sided Mann-Whitney U
    p_adjusted: float  # Holm across all metrics of the comparison
    change: float  # ratio - 1, signed; direction is in higher_is_better
    verdict: str  # "regressed" | "improved" | "unchanged" | "inconclusive"
    mde: float | None  # minimum detectable effect as a fraction of median_old (inconclusive)
    samples_needed: int | None  # per side, to settle an inconclusive result
    higher_is_better: bool = False
    threshold: float = DEFAULT_THRESHOLD
    # bootstrap standard errors of the two medians: what the MDE is computed from (median_mde),
    # carried so that a caller needing the MDE of a settled verdict does not resample again
    se_old: float = 0.0
    se_new: float = 0.0

    def to_dict(self) -> dict[str, str | float | int | bool | None]:
        # the standard errors are an input to the MDE, not a figure of the result file
        return {k: v for k, v in asdict(self).items() if k not in ("se_old", "se_new")}


def decide(
    ratio_ci: tuple[float, float, float],
    p_adjusted: float,
    higher_is_better: bool,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
) -> str:
    """Two-gate verdict on a ratio of medians (new/old) with its CI (ratio, low, high):

    - "regressed"/"improved": p_adjusted < alpha AND the whole CI lies beyond the band on that
      side (lower is better: regressed when low > 1+threshold, improved when high < 1-threshold;
      mirrored when higher is better);
    - "unchanged": the whole CI lies inside [1-threshold, 1+threshold];
    - "inconclusive": anything else.
    """
    _, lo, hi = ratio_ci
    significant = p_adjusted < alpha
    above = lo > 1.0 + threshold
    below = hi < 1.0 - threshold
    if significant and (above or below):
        worse = below if higher_is_better else above
        return "regressed" if worse else "improved"
    if lo >= 1.0 - threshold and hi <= 1.0 + threshold:
        return "unchanged"
    return "inconclusive"


def _resolved_threshold(metric: str, threshold: float | Mapping[str, float]) -> float:
    """The threshold of `metric`: one value for all, or an exact-name lookup in a mapping whose
    keys must already be resolved metric names (comparison.matching.threshold_for resolves
    glob patterns; this does not), DEFAULT_THRESHOLD for a name it omits."""
    if isinstance(threshold, Mapping):
        return float(threshold.get(metric, DEFAULT_THRESHOLD))
    return float(threshold)


@dataclass(frozen=True)
class _Raw:
    """Per-metric numbers computed before the Holm correction."""

    n_old: int
    n_new: int
    median_old: float
    median_new: float
    ratio_ci: tuple[float, float, float]
    p_value: float
    se_old: float  # bootstrap standard error of median(old)
    se_new: float  # bootstrap standard error of median(new)


def _raw_comparison(
    old: ArrayLike, new: ArrayLike, confidence: float, n_resamples: int, seed: int
) -> _Raw:
    a, b = _as_sample(old, "old"), _as_sample(new, "new")
    _check_ratio_inputs(a, b)
    m_old, m_new = float(np.median(a)), float(np.median(b))
    rep_old, rep_new = _median_replicates(a, b, n_resamples, seed)
    with np.errstate(divide="ignore"):
        lo, hi = _interval(rep_new / rep_old, confidence)
    se_old = float(np.std(rep_old, ddof=1))
    se_new = float(np.std(rep_new, ddof=1))
    p = mann_whitney_p(a, b)
    return _Raw(a.size, b.size, m_old, m_new, (m_new / m_old, lo, hi), p, se_old, se_new)


def _settling(raw: _Raw, threshold: float, confidence: float, alpha: float) -> tuple[float, int]:
    """MDE (fraction of median_old) and per-side sample count for an inconclusive result.

    Per-sample sigmas (relative to median_old) come from the bootstrap standard errors of the
    two medians, sigma_i = SE_i·sqrt(n_i), with the delta method for the ratio (the old side is
    scaled by the ratio). The MDE is :func:`min_detectable_effect` at (alpha, power 0.8). The
    sample count is :func:`samples_needed` with sigma = sqrt(sigma_old² + sigma_new²) (equal n
    per side) and a target half-width equal to the distance from the ratio to the nearest edge
    of the threshold band, floored at threshold/4 (a ratio sitting on an edge would otherwise
    ask for unbounded samples); never fewer than one more than the larger side already has.
    """
    ratio = raw.ratio_ci[0]
    s_old, s_new = _sigmas(ratio, raw.median_old, raw.n_old, raw.se_old, raw.n_new, raw.se_new)
    mde = min_detectable_effect(s_old, raw.n_old, s_new, raw.n_new, alpha=alpha)
    half = max(abs(abs(ratio - 1.0) - threshold), threshold / 4.0)
    n = samples_needed(math.hypot(s_old, s_new), 2.0 * half, confidence)
    return mde, max(n, max(raw.n_old, raw.n_new) + 1)


def _sigmas(
    ratio: float, median_old: float, n_old: int, se_old: float, n_new: int, se_new: float
) -> tuple[float, float]:
    """Per-sample sigmas relative to median_old from the medians' standard errors (see
    :func:`_settling`)."""
    s_old = ratio * se_old * math.sqrt(n_old) / median_old
    return s_old, se_new * math.sqrt(n_new) / median_old


def median_mde(row: MetricComparison, alpha: float) -> float:
    """The MDE (fraction of median_old) of a compared metric, whatever its verdict: the
    figure :func:`_settling` gives an inconclusive one, from the standard errors on the row.
    median_old must be > 0."""
    s_old, s_new = _sigmas(row.ratio, row.median_old, row.n_old, row.se_old, row.n_new, row.se_new)
    return min_detectable_effect(s_old, row.n_old, s_new, row.n_new, alpha=alpha)


def _all_zero(old: ArrayLike, new: ArrayLike) -> bool:
    return bool(np.all(_as_sample(old, "old") == 0) and np.all(_as_sample(new, "new") == 0))


def _zero_raw(old: ArrayLike, new: ArrayLike) -> _Raw:
    return _Raw(len(old), len(new), 0.0, 0.0, (1.0, 1.0, 1.0), 1.0, 0.0, 0.0)


def _raws(
    metrics: Mapping[str, tuple[Sequence[float], Sequence[float], bool]],
    confidence: float,
    n_resamples: int,
    seed: int,
) -> dict[str, _Raw]:
    """Per metric, the test and the bootstrap CI before Holm (ValueError naming the metric)."""
    raws: dict[str, _Raw] = {}
    for name, (old, new, _) in metrics.items():
        try:
            if _all_zero(old, new):
                raws[name] = _zero_raw(old, new)
            else:
                raws[name] = _raw_comparison(old, new, confidence, n_resamples, seed)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return raws


def compare_samples(
    metrics: Mapping[str, tuple[Sequence[float], Sequence[float], bool]],
    threshold: float | Mapping[str, float] = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = DEFAULT_SEED,
) -> list[MetricComparison]:
    """Compare old and new samples per metric with two gates: a two-sided Mann-Whitney U test,
    Holm-corrected across ALL metrics passed, and a seeded percentile-bootstrap CI of the ratio
    of medians new/old against the threshold band (see :func:`decide`).

    ``metrics`` maps name -> (old values, new values, higher_is_better). ``threshold`` is one
    value or a per-metric mapping (metrics it omits use DEFAULT_THRESHOLD). Every metric uses
    the same ``seed``, so its CI does not depend on which other metrics are passed. A metric
    whose values are all 0 on both sides is "unchanged" (ratio 1); otherwise median(old) must be
    > 0 and values non-negative (ValueError naming the metric). Results keep the input order.
    """
    _check_confidence(confidence)
    raws = _raws(metrics, confidence, n_resamples, seed)
    adjusted = holm([r.p_value for r in raws.values()])
    out: list[MetricComparison] = []
    for (name, raw), p_adj in zip(raws.items(), adjusted, strict=True):
        hib = bool(metrics[name][2])
        thr = _resolved_threshold(name, threshold)
        verdict = decide(raw.ratio_ci, p_adj, hib, thr, alpha)
        mde, needed = (None, None)
        if verdict == "inconclusive":
            mde, needed = _settling(raw, thr, confidence, alpha)
        ratio, lo, hi = raw.ratio_ci
        out.append(
            MetricComparison(
                metric=name,
                n_old=raw.n_old,
                n_new=raw.n_new,
                median_old=raw.median_old,
                median_new=raw.median_new,
                ratio=ratio,
                ci_low=lo,
                ci_high=hi,
                p_value=raw.p_value,
                p_adjusted=p_adj,
                change=ratio - 1.0,
                verdict=verdict,
                mde=mde,
                samples_needed=needed,
                higher_is_better=hib,
                threshold=thr,
                se_old=raw.se_old,
                se_new=raw.se_new,
            )
        )
    return out
