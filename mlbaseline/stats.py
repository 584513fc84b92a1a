"""Statistics for baselines and comparisons: pure NumPy/SciPy, no torch, no I/O.

Every function is deterministic (resampling is seeded, default seed 42) and its docstring names
the statistical method it implements. Location and spread lead with the median and IQR; mean,
standard deviation and CV are reported beside them. Percentiles use NumPy's ``"linear"`` method
(Hyndman & Fan type 7), recorded in results as :data:`PERCENTILE_METHOD`.

A comparison has two gates (see DESIGN.md, "Statistics"): a two-sided Mann-Whitney U test after a
Holm correction across all compared metrics, AND a bootstrap confidence interval of the ratio of
medians lying entirely beyond the practical threshold.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@functools.cache
def _sps() -> Any:
    """scipy.stats, imported on first use: it costs ~0.6 s, and `mlb --help` should not pay it."""
    from scipy import stats

    return stats


PERCENTILE_METHOD = "linear"  # numpy's method name, recorded in results
PERCENTILE_FLOORS: dict[float, int] = {90: 64, 95: 130, 99: 662}
DEFAULT_SEED = 42
DEFAULT_THRESHOLD = 0.03  # practical-significance band for compare: ±3 %
KL_VARIANCE_FLOOR = 1e-12
OUTLIER_IQR_FACTOR = 3.0

VERDICTS = ("regressed", "improved", "unchanged", "inconclusive")

ArrayLike = Sequence[float] | np.ndarray


# --------------------------------------------------------------------------- input checks


def _as_sample(values: ArrayLike, name: str = "values") -> np.ndarray:
    """``values`` as a 1-D float64 array; ValueError if empty, not 1-D or non-finite."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name}: empty sample")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return x


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")


# --------------------------------------------------------------------------- location/spread


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one sample (median and IQR lead; see :func:`summarize`)."""

    n: int
    median: float
    q1: float
    q3: float
    iqr: float
    mean: float
    stdev: float  # sample standard deviation, ddof=1 (0 when n < 2)
    cv: float  # stdev / mean (0 when mean == 0)
    min: float
    max: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarize(values: ArrayLike) -> Summary:
    """Descriptive summary: median, quartiles (numpy "linear" percentiles), IQR = q3 - q1,
    arithmetic mean, sample standard deviation (ddof=1; 0 when n < 2), coefficient of
    variation CV = stdev/mean (0 when the mean is 0), min and max.

    Raises ValueError on empty or non-finite input.
    """
    x = _as_sample(values)
    q1, med, q3 = np.percentile(x, [25, 50, 75], method=PERCENTILE_METHOD)
    mean = float(np.mean(x))
    stdev = float(np.std(x, ddof=1)) if x.size > 1 else 0.0
    return Summary(
        n=int(x.size),
        median=float(med),
        q1=float(q1),
        q3=float(q3),
        iqr=float(q3 - q1),
        mean=mean,
        stdev=stdev,
        cv=stdev / abs(mean) if mean != 0 else 0.0,
        min=float(np.min(x)),
        max=float(np.max(x)),
    )


def percentile(values: ArrayLike, q: float, method: str = PERCENTILE_METHOD) -> float:
    """The q-th percentile (q in 0..100) by numpy.percentile with the named method
    (default "linear", Hyndman & Fan type 7: interpolate at virtual index (n-1)·q/100)."""
    _check_q(q)
    return float(np.percentile(_as_sample(values), q, method=method))


def percentile_key(q: float) -> str:
    """Result key of a percentile: 50 -> "p50", 99.9 -> "p99.9"."""
    return f"p{q:g}"


def percentiles(
    values: ArrayLike, qs: Sequence[float] = (50, 90, 95, 99), method: str = PERCENTILE_METHOD
) -> dict[str, float]:
    """Several percentiles by numpy.percentile (method stated, default "linear"), keyed "p50",
    "p90", ... in the order of ``qs``."""
    for q in qs:
        _check_q(q)
    x = _as_sample(values)
    vals = np.percentile(x, list(qs), method=method)
    return {percentile_key(q): float(v) for q, v in zip(qs, np.atleast_1d(vals), strict=True)}


# --------------------------------------------------------------------------- bootstrap CIs


def bootstrap_ci(
    values: ArrayLike,
    statistic: Callable[[np.ndarray], float],
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = DEFAULT_SEED,
    *,
    vectorized: bool = False,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic`` (scipy.stats.bootstrap,
    method="percentile", seeded with numpy.random.default_rng(seed)).

    ``vectorized=True`` tells scipy the statistic accepts an ``axis`` keyword (much faster).
    A degenerate sample (n < 2, or all values equal) returns ``(s, s)`` with s = statistic(values).
    """
    _check_confidence(confidence)
    x = _as_sample(values)
    if x.size < 2 or np.all(x == x[0]):
        s = float(statistic(x))
        return s, s
    res = _sps().bootstrap(
        (x,),
        statistic,
        n_resamples=n_resamples,
        vectorized=vectorized,
        batch=100 if vectorized else None,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


# Why not scipy.stats.bootstrap for quantiles: measured on a 2-core machine, a two-sample
# ratio-of-medians bootstrap (2000 resamples, 100k values per side, vectorized, batch=50) took
# 6.3 s per metric, and compare runs one per metric. The sampler below draws from the *exact*
# same bootstrap distribution in O(n log n + n_resamples): for sorted data s and a resample of
# n indices I_k = floor(n·U_k) (U_k iid uniform), the j-th smallest resampled value is
# s[floor(n·U_(j))], and the uniform order statistic U_(j) ~ Beta(j, n+1-j); given it, the next
# one is U_(j) + (1 - U_(j))·Beta(1, n-j) (the minimum of the n-j uniforms above it). So a
# linear-interpolated percentile of a resample needs two Beta draws, not n index draws.


def _bootstrap_quantiles(
    sorted_x: np.ndarray, q: float, n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Bootstrap replicates of the "linear" q-th percentile by exact order-statistic sampling
    (equal in distribution to resampling with replacement; see the comment above)."""
    n = sorted_x.size
    h = (n - 1) * (q / 100.0)  # numpy's virtual index, same rounding
    j = min(math.floor(h), n - 1)  # 0-based lower order statistic
    g = h - j
    u1 = rng.beta(j + 1, n - j, size=n_resamples)
    i1 = np.minimum((n * u1).astype(np.int64), n - 1)
    lower = sorted_x[i1]
    if g <= 0.0 or j + 1 >= n:
        return lower
    u2 = u1 + (1.0 - u1) * rng.beta(1, n - j - 1, size=n_resamples)
    i2 = np.minimum((n * u2).astype(np.int64), n - 1)
    return _lerp(lower, sorted_x[i2], g)


def _lerp(a: np.ndarray, b: np.ndarray, g: float) -> np.ndarray:
    """Interpolate as numpy.percentile does (from the nearer end), so replicate values are
    bit-identical to numpy's on the same resample."""
    diff = b - a
    return b - diff * (1.0 - g) if g >= 0.5 else a + diff * g


def _interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile-bootstrap interval: the (1-c)/2 and (1+c)/2 quantiles of the replicates."""
    alpha = 1.0 - confidence
    lo, hi = np.percentile(replicates, [50 * alpha, 100 - 50 * alpha])
    return float(lo), float(hi)


def percentile_ci(
    values: ArrayLike,
    q: float,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Seeded percentile-bootstrap CI of the "linear" q-th percentile. Replicates are drawn by
    exact order-statistic sampling of the bootstrap distribution (Beta-distributed uniform order
    statistics), equivalent to resampling with replacement but O(n_resamples) after a sort."""
    _check_q(q)
    _check_confidence(confidence)
    x = np.sort(_as_sample(values))
    if x[0] == x[-1]:
        return float(x[0]), float(x[0])
    reps = _bootstrap_quantiles(x, q, n_resamples, np.random.default_rng(seed))
    return _interval(reps, confidence)


def median_ci(
    values: ArrayLike,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Seeded percentile-bootstrap CI of the median (see :func:`percentile_ci` with q=50)."""
    return percentile_ci(values, 50.0, confidence, n_resamples, seed)


def _median_replicates(
    old: np.ndarray, new: np.ndarray, n_resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Independent bootstrap replicates of median(old) and median(new), one seeded stream."""
    rng = np.random.default_rng(seed)
    rep_old = _bootstrap_quantiles(np.sort(old), 50.0, n_resamples, rng)
    rep_new = _bootstrap_quantiles(np.sort(new), 50.0, n_resamples, rng)
    return rep_old, rep_new


def _check_ratio_inputs(old: np.ndarray, new: np.ndarray) -> None:
    if np.any(old < 0) or np.any(new < 0):
        raise ValueError("ratio of medians needs non-negative values")
    if np.median(old) == 0:
        raise ValueError("ratio of medians is undefined: median of old samples is 0")


def ratio_of_medians_ci(
    old: ArrayLike,
    new: ArrayLike,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float, float]:
    """Ratio of medians median(new)/median(old) with a seeded two-sample, independent (unpaired)
    percentile-bootstrap CI: each sample is resampled on its own (as scipy.stats.bootstrap with
    paired=False), by exact order-statistic sampling of each bootstrap median.

    Returns (ratio, low, high). Needs non-negative values and median(old) > 0 (ValueError).
    """
    _check_confidence(confidence)
    a, b = _as_sample(old, "old"), _as_sample(new, "new")
    _check_ratio_inputs(a, b)
    ratio = float(np.median(b) / np.median(a))
    rep_old, rep_new = _median_replicates(a, b, n_resamples, seed)
    with np.errstate(divide="ignore"):
        reps = rep_new / rep_old
    lo, hi = _interval(reps, confidence)
    return ratio, lo, hi


# --------------------------------------------------------------------------- tests/corrections


def mann_whitney_p(old: ArrayLike, new: ArrayLike) -> float:
    """Two-sided Mann-Whitney U test p-value (scipy.stats.mannwhitneyu, method="auto": exact
    for small tie-free samples, else the tie-corrected normal approximation). Samples that are
    all one identical value give 1.0."""
    a, b = _as_sample(old, "old"), _as_sample(new, "new")
    if np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0
    # "auto" goes exact whenever one side has <= 8 tie-free values; measured, 8 vs 100k values
    # takes 15 s exact (0.01 s at 8 vs 1000) and agrees with the asymptotic p to 1e-3.
    method = "auto" if max(a.size, b.size) <= 1000 else "asymptotic"
    p = float(_sps().mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue)
    return 1.0 if math.isnan(p) else min(1.0, p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values: sort ascending, adjusted_(i) =
    max_{j<=i} min(1, (m - j + 1)·p_(j)); returned in the input order. Monotone in the raw
    p-values, never below them, capped at 1."""
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError("holm: expected a 1-D sequence of p-values")
    if p.size == 0:
        return []
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("holm: p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = (m - np.arange(m)) * p[order]
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return [float(v) for v in adjusted]


# --------------------------------------------------------------------------- KL divergence


def _kl_normal(
    mu_p: np.ndarray | float,
    var_p: np.ndarray | float,
    mu_q: np.ndarray | float,
    var_q: np.ndarray | float,
    eps: float,
) -> np.ndarray:
    vp = np.maximum(np.asarray(var_p, dtype=np.float64), eps)
    vq = np.maximum(np.asarray(var_q, dtype=np.float64), eps)
    diff = np.asarray(mu_p, dtype=np.float64) - np.asarray(mu_q, dtype=np.float64)
    kl = 0.5 * (np.log(vq / vp) + (vp + diff**2) / vq - 1.0)
    return np.maximum(kl, 0.0)  # the true value is >= 0; clip rounding noise near 0


def gaussian_kl(
    mu_p: float, var_p: float, mu_q: float, var_q: float, eps: float = KL_VARIANCE_FLOOR
) -> float:
    """KL(P||Q) for 1-D Gaussians P = N(mu_p, var_p), Q = N(mu_q, var_q), closed form
    0.5·(ln(var_q/var_p) + (var_p + (mu_p - mu_q)²)/var_q - 1), in nats.

    Variances are floored at ``eps`` (default 1e-12, absolute) so a constant feature gives a
    finite value instead of inf or nan: equal constants give 0, a constant whose mean differs
    gives a large value. Rounding noise below 0 is clipped to 0.
    """
    for name, v in (("mu_p", mu_p), ("var_p", var_p), ("mu_q", mu_q), ("var_q", var_q)):
        if not math.isfinite(v):
            raise ValueError(f"gaussian_kl: {name} must be finite")
    if var_p < 0 or var_q < 0:
        raise ValueError("gaussian_kl: variances must be non-negative")
    return float(_kl_normal(mu_p, var_p, mu_q, var_q, eps))


def _as_feature_matrix(data: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(data, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name}: expected a non-empty 2-D array (samples x features)")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return x


def gaussian_kl_features(
    subset: np.ndarray, full: np.ndarray, eps: float = KL_VARIANCE_FLOOR
) -> tuple[np.ndarray, float]:
    """Per-feature Gaussian KL divergence KL(subset || full) and its arithmetic mean.

    Each feature (column; a 1-D input is one feature) is fitted by a Gaussian with the sample
    mean and the maximum-likelihood variance (ddof=0), then :func:`gaussian_kl` is applied with
    the variance floor ``eps``. No normalisation of features of different scales is needed: KL
    between Gaussians is invariant under any affine change of units applied to both, except
    where the absolute floor ``eps`` bites (variances near 1e-12 in the data's own units).
    """
    s = _as_feature_matrix(subset, "subset")
    f = _as_feature_matrix(full, "full")
    if s.shape[1] != f.shape[1]:
        raise ValueError(f"subset has {s.shape[1]} features, full has {f.shape[1]}")
    kl = _kl_normal(s.mean(axis=0), s.var(axis=0), f.mean(axis=0), f.var(axis=0), eps)
    return kl, float(np.mean(kl))


# --------------------------------------------------------------------------- sample sizes


def z_value(confidence: float = 0.95) -> float:
    """Two-sided standard normal quantile z_{1-(1-c)/2} (scipy.stats.norm.ppf); 0.95 -> 1.95996."""
    _check_confidence(confidence)
    return float(_sps().norm.ppf(0.5 + confidence / 2.0))


def samples_needed(sigma: float, width: float, confidence: float = 0.95) -> int:
    """Samples for a normal-approximation CI of full width W: n = ceil(4·Z²·σ²/W²), Z the
    two-sided normal quantile; at least 2 (a spread needs two samples)."""
    if width <= 0 or not math.isfinite(width):
        raise ValueError(f"width must be positive and finite, got {width}")
    if sigma < 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be non-negative and finite, got {sigma}")
    z = z_value(confidence)
    n = 4.0 * z * z * sigma * sigma / (width * width)
    return max(2, math.ceil(round(n, 9)))  # round: do not let 1e-15 noise add a sample


def min_detectable_effect(
    sigma_old: float,
    n_old: int,
    sigma_new: float,
    n_new: int,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """Minimum detectable (absolute) difference of a two-sided two-sample test, normal
    approximation: (z_{1-α/2} + z_{power})·sqrt(σ_old²/n_old + σ_new²/n_new)."""
    if n_old < 1 or n_new < 1:
        raise ValueError("min_detectable_effect: sample counts must be >= 1")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError("min_detectable_effect: alpha and power must lie in (0, 1)")
    z = z_value(1.0 - alpha) + float(_sps().norm.ppf(power))
    return z * math.sqrt(sigma_old**2 / n_old + sigma_new**2 / n_new)


# --------------------------------------------------------------------------- warnings


@dataclass(frozen=True)
class StatWarning:
    """A stability or sample-size warning, kept as data in the result."""

    code: str  # "high_cv", "iqr_10", "iqr_25", "first_outlier", "percentile_floor"
    metric: str
    message: str
    value: float
    threshold: float

    def to_dict(self) -> dict[str, str | float]:
        return asdict(self)


def _iqr_warning(s: Summary, metric: str, iqr_limits: Sequence[float]) -> StatWarning | None:
    if s.median == 0:
        return None  # relative spread is undefined around 0
    rel = s.iqr / abs(s.median)
    crossed = [lim for lim in sorted(iqr_limits) if rel >= lim]
    if not crossed:
        return None
    lim = crossed[-1]
    msg = f"{metric}: IQR is {rel:.1%} of the median (>= {lim:.0%})"
    return StatWarning(f"iqr_{round(lim * 100)}", metric, msg, rel, lim)


def _first_outlier_warning(x: np.ndarray, metric: str) -> StatWarning | None:
    if x.size < 4:
        return None
    rest = x[1:]
    q1, med, q3 = np.percentile(rest, [25, 50, 75], method=PERCENTILE_METHOD)
    bound = OUTLIER_IQR_FACTOR * float(q3 - q1)
    dev = abs(float(x[0] - med))
    if dev <= bound:
        return None
    msg = f"{metric}: first sample {x[0]:.6g} is an outlier (median of the rest {med:.6g})"
    return StatWarning("first_outlier", metric, msg, dev, bound)


def stability_warnings(
    values: ArrayLike,
    metric: str,
    cv_limit: float = 0.10,
    iqr_limits: Sequence[float] = (0.10, 0.25),
) -> list[StatWarning]:
    """Stability warnings as data:

    - ``high_cv``: coefficient of variation stdev/mean >= cv_limit;
    - ``iqr_<pct>``: IQR/|median| >= a limit; only the highest limit crossed is reported
      (``iqr_25`` replaces ``iqr_10``); skipped when the median is 0;
    - ``first_outlier``: the first sample lies beyond median ± 3·IQR, both computed over the
      *other* samples (so the outlier cannot hide itself); needs n >= 4. ``value`` is its
      distance from that median, ``threshold`` is 3·IQR.
    """
    x = _as_sample(values, metric)
    s = summarize(x)
    out: list[StatWarning] = []
    if s.cv >= cv_limit:
        msg = f"{metric}: coefficient of variation {s.cv:.1%} (>= {cv_limit:.0%})"
        out.append(StatWarning("high_cv", metric, msg, s.cv, cv_limit))
    for w in (_iqr_warning(s, metric, iqr_limits), _first_outlier_warning(x, metric)):
        if w is not None:
            out.append(w)
    return out


def percentile_floor_warnings(
    n: int, metric: str, qs: Sequence[float] = (90, 95, 99)
) -> list[StatWarning]:
    """A ``percentile_floor`` warning for each tail percentile in ``qs`` whose sample floor
    (:data:`PERCENTILE_FLOORS`: p90/p95/p99 need 64/130/662 samples) exceeds n. A q without a
    floor is a ValueError, not silence."""
    out: list[StatWarning] = []
    for q in qs:
        if q not in PERCENTILE_FLOORS:
            raise ValueError(f"no sample floor is defined for p{q:g}")
        floor = PERCENTILE_FLOORS[q]
        if n < floor:
            key = percentile_key(q)
            msg = f"{metric}: {key} from {n} samples is unreliable (needs >= {floor})"
            out.append(StatWarning("percentile_floor", metric, msg, float(n), float(floor)))
    return out


# --------------------------------------------------------------------------- warm-up / stop rule


def split_half_settled(
    values: ArrayLike, tolerance: float = 0.05, test_alpha: float = 0.05
) -> bool:
    """Split-half stability test. With h = n // 2, the halves are a = values[:h] and
    b = values[n-h:] (an odd middle value is left out). Settled when both hold:

    1. |median(b) - median(a)| <= tolerance·|median(a)| (the medians agree within tolerance);
    2. the halves do not show a *significant and sizeable* shift: NOT (two-sided Mann-Whitney
       p < test_alpha AND |median(b)/median(a) - 1| > tolerance/2).

    Rule 2 catches a trend that is still running but has not yet crossed the tolerance; the
    tolerance/2 floor keeps a tiny, practically irrelevant drift in very quiet data from
    blocking forever. Fewer than 4 values (halves of 1) are never settled. ``test_alpha=0``
    disables rule 2.
    """
    x = _as_sample(values)
    h = x.size // 2
    if h < 2:
        return False
    a, b = x[:h], x[x.size - h :]
    ma, mb = float(np.median(a)), float(np.median(b))
    shift = abs(mb - ma)
    if shift > tolerance * abs(ma):
        return False
    if test_alpha > 0 and shift > 0.5 * tolerance * abs(ma):
        return mann_whitney_p(a, b) >= test_alpha
    return True


def detect_warmup(
    values: ArrayLike,
    min_warmup: int = 3,
    window: int = 10,
    tolerance: float = 0.05,
    test_alpha: float = 0.05,
) -> int | None:
    """Warm-up length by split-half testing: the smallest k >= min_warmup such that the full
    window values[k:k+window] passes :func:`split_half_settled`; None if no window settles."""
    x = _as_sample(values)
    if window < 4:
        raise ValueError("window must be >= 4 (two values per half)")
    for k in range(min_warmup, x.size - window + 1):
        if split_half_settled(x[k : k + window], tolerance, test_alpha):
            return k
    return None


def windows_stable(
    values: ArrayLike, n_windows: int = 3, window: int = 10, tolerance: float = 0.05
) -> bool:
    """Stop-rule stability: split the last n_windows·window values into n_windows consecutive
    windows; stable when every window median lies within ±tolerance·|M| of their mean M.
    False when there are too few values."""
    if n_windows < 1 or window < 1:
        raise ValueError("n_windows and window must be >= 1")
    x = _as_sample(values)
    need = n_windows * window
    if x.size < need:
        return False
    meds = np.median(x[-need:].reshape(n_windows, window), axis=1)
    center = float(np.mean(meds))
    return bool(np.all(np.abs(meds - center) <= tolerance * abs(center)))


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

    def to_dict(self) -> dict[str, str | float | int | bool | None]:
        return asdict(self)


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


def _threshold_for(metric: str, threshold: float | Mapping[str, float]) -> float:
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
    s_old = ratio * raw.se_old * math.sqrt(raw.n_old) / raw.median_old
    s_new = raw.se_new * math.sqrt(raw.n_new) / raw.median_old
    mde = min_detectable_effect(s_old, raw.n_old, s_new, raw.n_new, alpha=alpha)
    half = max(abs(abs(ratio - 1.0) - threshold), threshold / 4.0)
    n = samples_needed(math.hypot(s_old, s_new), 2.0 * half, confidence)
    return mde, max(n, max(raw.n_old, raw.n_new) + 1)


def _all_zero(old: ArrayLike, new: ArrayLike) -> bool:
    return bool(np.all(_as_sample(old, "old") == 0) and np.all(_as_sample(new, "new") == 0))


def _zero_raw(old: ArrayLike, new: ArrayLike) -> _Raw:
    return _Raw(len(old), len(new), 0.0, 0.0, (1.0, 1.0, 1.0), 1.0, 0.0, 0.0)


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
    raws: dict[str, _Raw] = {}
    for name, (old, new, _) in metrics.items():
        try:
            if _all_zero(old, new):
                raws[name] = _zero_raw(old, new)
            else:
                raws[name] = _raw_comparison(old, new, confidence, n_resamples, seed)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    adjusted = holm([r.p_value for r in raws.values()])
    out: list[MetricComparison] = []
    for (name, raw), p_adj in zip(raws.items(), adjusted, strict=True):
        hib = bool(metrics[name][2])
        thr = _threshold_for(name, threshold)
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
            )
        )
    return out
