"""Per-metric comparison verdicts: two gates (a test after gatekeeping/Holm, and a CI of the ratio
beyond the practical threshold), decided by :func:`mlbaseline.stats.decision.decide`.

The test follows the counts (:mod:`.decision`): Student's t on the logs of the values below
:data:`~.decision.RANK_MIN` a side (process figures), the Mann-Whitney U test with a bootstrap CI
of the ratio of medians from there on. A metric named ``insufficient`` (one process a side)
gets the figures for display and the verdict "insufficient data"."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

import mlbaseline.stats.decision as decision
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
    ratio: float  # new/old: of the medians (rank test), of the geometric means (t on logs)
    ci_low: float
    ci_high: float
    p_value: float  # two-sided: Student's t on logs or Mann-Whitney U (`test`)
    p_adjusted: float  # after gatekeeping / Holm across the metrics of the comparison
    change: float  # ratio - 1, signed; direction is in higher_is_better
    verdict: str  # "regressed" | "improved" | "unchanged" | "inconclusive" | "insufficient data"
    mde: float | None  # smallest change this comparison flags with 80% power (fraction)
    samples_needed: int | None  # per side, to settle an inconclusive result
    higher_is_better: bool = False
    threshold: float = DEFAULT_THRESHOLD
    test: str = "rank"  # "t-log" | "rank" | "none" (insufficient data: nothing tested)
    gated: bool = False  # not tested: its total did not move (gatekeeping)
    alpha_eff: float = 0.05  # the level the first Holm step of its family holds it to
    # the standard errors the MDE comes from: of the log ratio, and (rank test) of the two
    # medians; an input to the MDE, not a figure of the result file
    se_log: float = math.nan
    se_old: float = 0.0
    se_new: float = 0.0

    def to_dict(self) -> dict[str, str | float | int | bool | None]:
        skip = ("se_old", "se_new", "se_log")
        return {k: v for k, v in asdict(self).items() if k not in skip}


def _resolved_threshold(metric: str, threshold: float | Mapping[str, float]) -> float:
    """The threshold of `metric`: one value for all, or an exact-name lookup in a mapping whose
    keys must already be resolved metric names (comparison.matching.threshold_for resolves
    glob patterns; this does not), DEFAULT_THRESHOLD for a name it omits."""
    if isinstance(threshold, Mapping):
        return float(threshold.get(metric, DEFAULT_THRESHOLD))
    return float(threshold)


@dataclass(frozen=True)
class _Raw:
    """Per-metric numbers computed before the p-values are adjusted."""

    n_old: int
    n_new: int
    median_old: float
    median_new: float
    ratio_ci: tuple[float, float, float]
    p_value: float
    test: str
    se_log: float  # standard error of the log ratio
    df: float  # of the test (inf: normal approximation)
    sd_log: float = math.nan  # pooled sd of the log values (t on logs)
    se_old: float = 0.0  # bootstrap standard error of median(old) (rank test)
    se_new: float = 0.0


def _rank_comparison(
    a: np.ndarray, b: np.ndarray, confidence: float, n_resamples: int, seed: int
) -> _Raw:
    _check_ratio_inputs(a, b)
    m_old, m_new = float(np.median(a)), float(np.median(b))
    rep_old, rep_new = _median_replicates(a, b, n_resamples, seed)
    with np.errstate(divide="ignore"):
        lo, hi = _interval(rep_new / rep_old, confidence)
    se_old = float(np.std(rep_old, ddof=1))
    se_new = float(np.std(rep_new, ddof=1))
    se_log = math.hypot(se_old / m_old, se_new / m_new) if m_new > 0 else math.inf
    p = mann_whitney_p(a, b)
    return _Raw(
        a.size, b.size, m_old, m_new, (m_new / m_old, lo, hi), p, "rank", se_log, math.inf,
        se_old=se_old, se_new=se_new,
    )  # fmt: skip


def _raw_comparison(
    old: ArrayLike, new: ArrayLike, confidence: float, n_resamples: int, seed: int
) -> _Raw:
    """Student's t on logs below RANK_MIN values a side (when every value is positive), else
    the rank test; one value a side: figures only, test "none"."""
    a, b = _as_sample(old, "old"), _as_sample(new, "new")
    if min(a.size, b.size) < decision.RANK_MIN:
        t = decision.log_t_test(a, b, confidence)
        if t is not None:
            return _Raw(
                a.size, b.size, float(np.median(a)), float(np.median(b)),
                (t.ratio, t.ci_low, t.ci_high), t.p, "t-log", t.se, t.df, t.sd,
            )  # fmt: skip
        if decision.t_dof(a.size, b.size) < 1:
            raw = _rank_comparison(a, b, confidence, n_resamples, seed)
            return _Raw(raw.n_old, raw.n_new, raw.median_old, raw.median_new, raw.ratio_ci,
                        1.0, "none", math.nan, math.nan)  # fmt: skip
    return _rank_comparison(a, b, confidence, n_resamples, seed)


def _settling(raw: _Raw, threshold: float, confidence: float) -> int:
    """Per-side count that would settle an inconclusive result (decision.replicates_to_settle
    for process figures; for the rank test the per-sample sigmas from the bootstrap standard
    errors, sigma_i = SE_i·sqrt(n_i), delta method for the ratio); never fewer than one more
    than the larger side already has."""
    ratio = raw.ratio_ci[0]
    at_least = max(raw.n_old, raw.n_new) + 1
    if raw.test == "t-log":
        return decision.replicates_to_settle(raw.sd_log, ratio - 1.0, threshold, confidence,
                                             at_least)  # fmt: skip
    s_old = ratio * raw.se_old * math.sqrt(raw.n_old) / raw.median_old
    s_new = raw.se_new * math.sqrt(raw.n_new) / raw.median_old
    half = max(abs(abs(ratio - 1.0) - threshold), threshold / 4.0)
    n = samples_needed(math.hypot(s_old, s_new), 2.0 * half, confidence)
    return max(n, at_least)


def _all_zero(old: ArrayLike, new: ArrayLike) -> bool:
    return bool(np.all(_as_sample(old, "old") == 0) and np.all(_as_sample(new, "new") == 0))


def _zero_raw(old: ArrayLike, new: ArrayLike) -> _Raw:
    return _Raw(len(old), len(new), 0.0, 0.0, (1.0, 1.0, 1.0), 1.0, "zero", 0.0, math.inf)


def _raws(
    metrics: Mapping[str, tuple[Sequence[float], Sequence[float], bool]],
    confidence: float,
    n_resamples: int,
    seed: int,
) -> dict[str, _Raw]:
    """Per metric, the test and the CI before adjustment (ValueError naming the metric)."""
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


def _adjust(
    raws: Mapping[str, _Raw],
    gate: Mapping[str, str | None] | None,
    insufficient: Collection[str],
    alpha: float,
) -> decision.Gated:
    """Adjusted p-values of the metrics that were tested: gatekeeping when `gate` is given
    (decision.gatekeep), else Holm over all of them."""
    tested = {n: r.p_value for n, r in raws.items() if r.test != "none" and n not in insufficient}
    if gate is not None:
        return decision.gatekeep(tested, gate, alpha)
    adj = dict(zip(tested, holm(list(tested.values())), strict=True))
    return decision.Gated(adj, set(), dict.fromkeys(tested, alpha / max(1, len(tested))))


def compare_samples(
    metrics: Mapping[str, tuple[Sequence[float], Sequence[float], bool]],
    threshold: float | Mapping[str, float] = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = DEFAULT_SEED,
    gate: Mapping[str, str | None] | None = None,
    insufficient: Collection[str] = (),
) -> list[MetricComparison]:
    """Compare old and new values per metric with two gates: the test of the module doc,
    adjusted by gatekeeping (`gate`: metric -> the headline metric that must move first, see
    :func:`decision.gatekeep`) or else Holm across ALL metrics passed, and the CI of the ratio
    against the threshold band (:func:`decision.decide`).

    ``metrics`` maps name -> (old values, new values, higher_is_better). ``threshold`` is one
    value or a per-metric mapping (metrics it omits use DEFAULT_THRESHOLD). Every metric uses
    the same ``seed``. A metric whose values are all 0 on both sides is "unchanged" (ratio 1);
    otherwise median(old) must be > 0 and values non-negative (ValueError naming the metric).
    Metrics in `insufficient`, and those with one value a side, are "insufficient data".
    Results keep the input order.
    """
    _check_confidence(confidence)
    raws = _raws(metrics, confidence, n_resamples, seed)
    gated = _adjust(raws, gate, insufficient, alpha)
    return [
        _row(
            name,
            raw,
            bool(metrics[name][2]),
            _resolved_threshold(name, threshold),
            gated,
            alpha,
            confidence,
        )
        for name, raw in raws.items()
    ]


def _row(
    name: str,
    raw: _Raw,
    hib: bool,
    thr: float,
    gated: decision.Gated,
    alpha: float,
    confidence: float,
) -> MetricComparison:
    ratio, lo, hi = raw.ratio_ci
    tested = name in gated.p_adjusted
    p_adj = gated.p_adjusted.get(name, 1.0)
    a_eff = gated.alpha_eff.get(name, alpha)
    if not tested:
        verdict = decision.INSUFFICIENT
    else:
        verdict = decision.decide(raw.ratio_ci, p_adj, hib, thr, alpha)
    mde = needed = None
    if tested and raw.test != "zero":
        mde = decision.detectable_change(raw.se_log, raw.df, a_eff, thr, confidence)
        if verdict == "inconclusive":
            needed = _settling(raw, thr, confidence)
    return MetricComparison(
        metric=name, n_old=raw.n_old, n_new=raw.n_new, median_old=raw.median_old,
        median_new=raw.median_new, ratio=ratio, ci_low=lo, ci_high=hi, p_value=raw.p_value,
        p_adjusted=p_adj, change=ratio - 1.0, verdict=verdict, mde=mde, samples_needed=needed,
        higher_is_better=hib, threshold=thr, test=raw.test if tested else "none",
        gated=name in gated.closed, alpha_eff=a_eff, se_log=raw.se_log, se_old=raw.se_old,
        se_new=raw.se_new,
    )  # fmt: skip
