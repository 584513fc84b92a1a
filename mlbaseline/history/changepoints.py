"""Change points in a series of baseline medians: steps, one-run spikes and unfinished steps.

`ruptures` (PELT on an l2 cost, its C implementation `KernelCPD(kernel="linear")`) proposes the
candidate change points; this module adds what a CI gate needs and the library lacks
(bench/RESULTS.md, "change-point library choice", says why ruptures):

1. **One-run spikes are outliers, not change points.** A point whose robust score (distance to the
   median of its neighbours on *each* side, in units of the series' noise) is above
   `OUTLIER_SCORE` is reported as an `Outlier` and left out before detection. The noise is the MAD
   of first differences, which a step or a spike barely moves. The last point is never an
   outlier: with nothing after it, it may be the first run of a new regime.
2. **Every candidate is tested.** Mann-Whitney U (scipy.stats.mannwhitneyu, two-sided) between
   the neighbouring segments, Benjamini-Hochberg over the candidates
   (scipy.stats.false_discovery_control); a candidate that fails, or that leaves a segment
   shorter than `min_segment`, is merged away, weakest first, and the rest are tested again.
3. **Steps at the edge are "suspected".** A step with fewer than `min_segment` points after it
   cannot be told from noise by a test (Mann-Whitney with one point after it never reaches
   p < 0.05 on a short series); if every point after it is more than `SUSPECT_SCORE` noise units
   from the median before it, on the same side, it is reported with status "suspected" (needs
   more runs), never "confirmed". The tail is checked even where PELT's penalty, sized against
   false steps in the middle, did not propose a cut there.
4. **The step has a CI.** rel_change = median(after) / median(before) − 1 with a percentile
   bootstrap CI (scipy.stats.bootstrap), seeded: the same input and seed give the same output.

No torch here: history is layer 1 and may only import layer 0 and `comparison`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from mlbaseline.errors import UsageError

OUTLIER_SCORE = 5.0  # robust z of a one-run spike against both neighbourhoods
SUSPECT_SCORE = 3.0  # robust z every point of an unfinished tail step must reach
PENALTY = 5.0  # PELT penalty per change point, × σ² ln n on the normalised series (BIC-like)
NOISE_FLOOR = 1e-6  # smallest noise scale, relative to the series' median
N_RESAMPLES = 999  # bootstrap resamples for the CI of the step
METHOD = (
    "ruptures KernelCPD(linear) PELT candidates; Mann-Whitney U per candidate with "
    "Benjamini-Hochberg; median/MAD spikes as outliers; percentile bootstrap CI of the step"
)


class SeriesError(UsageError, ValueError):
    """A series or parameter `detect` cannot work with (NaN, infinite, out of range)."""


def _finite_or_none(v: float) -> float | None:
    # JSON has no NaN: a CI that cannot be computed (one point after a step) is null
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class ChangePoint:
    """A step between two regimes of the series."""

    index: int  # position (0-based) of the first point of the new regime
    before: float  # median of the segment before
    after: float  # median of the segment after
    rel_change: float  # after / before - 1
    ci_low: float  # bootstrap CI of rel_change at `confidence` (NaN when not computable)
    ci_high: float
    p_value: float  # BH-adjusted Mann-Whitney p (confirmed); the raw one (suspected)
    status: str  # "confirmed" | "suspected" (fewer than min_segment points after it)

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: _finite_or_none(v) if isinstance(v, float) else v for k, v in d.items()}


@dataclass(frozen=True)
class Outlier:
    """A single run far from its neighbours on both sides: reported, left out of detection."""

    index: int
    value: float
    score: float  # robust z: distance to the nearer neighbourhood median / noise scale

    def to_dict(self) -> dict:
        return {"index": self.index, "value": self.value, "score": _finite_or_none(self.score)}


@dataclass(frozen=True)
class Detection:
    """What `detect` found in one series."""

    change_points: list[ChangePoint]
    outliers: list[Outlier]
    method: str
    n: int

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "n": self.n,
            "change_points": [c.to_dict() for c in self.change_points],
            "outliers": [o.to_dict() for o in self.outliers],
        }


def detect(
    values: Sequence[float],
    *,
    alpha: float = 0.05,
    min_segment: int = 3,
    confidence: float = 0.95,
    seed: int = 0,
) -> Detection:
    """Change points and outliers of `values` (in order, oldest first).

    Raises SeriesError (a ValueError and a UsageError) for NaN or infinite values and for
    parameters out of range; an empty or constant series gives an empty detection.
    """
    x = _validate(values, alpha, min_segment, confidence)
    n = int(x.size)
    if n < 2 or np.ptp(x) == 0:
        return Detection([], [], METHOD, n)
    scale = float(np.median(np.abs(x))) or 1.0
    z = x / scale  # unit-free, so the penalty and the scores do not depend on ms vs s
    sigma = _noise_scale(z)
    outliers = _outliers(x, z, sigma, max(min_segment, 3))
    keep = np.ones(n, dtype=bool)
    keep[[o.index for o in outliers]] = False
    pos = np.flatnonzero(keep)  # clean position → original index
    cuts = _candidates(z[keep], sigma, min_segment)
    found = _prune(z[keep], cuts, sigma, alpha, min_segment)
    if not any(status == "suspected" for _, _, status, _ in found):
        found += _tail_scan(z[keep], [cut for cut, *_ in found], sigma, min_segment)
    cps = [
        _change_point(x[keep], cut, bounds, int(pos[cut]), status, p, confidence, seed)
        for cut, bounds, status, p in found
    ]
    return Detection(cps, outliers, METHOD, n)


def _validate(
    values: Sequence[float], alpha: float, min_segment: int, confidence: float
) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as e:
        raise SeriesError(f"series must be numbers: {e}") from None
    if x.ndim != 1:
        raise SeriesError(f"series must be one-dimensional, got shape {x.shape}")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise SeriesError(f"series has a non-finite value ({x[bad[0]]}) at position {bad[0]}")
    if not 0.0 < alpha < 1.0:
        raise SeriesError(f"alpha must be in (0, 1), got {alpha}")
    if not 0.0 < confidence < 1.0:
        raise SeriesError(f"confidence must be in (0, 1), got {confidence}")
    if min_segment < 2:
        raise SeriesError(f"min_segment must be at least 2, got {min_segment}")
    return x


def _noise_scale(z: np.ndarray) -> float:
    """Robust σ of the noise: MAD of first differences / √2 (steps and spikes barely move it)."""
    d = np.diff(z)
    sigma = float(np.median(np.abs(d - np.median(d)))) * 1.4826 / math.sqrt(2.0)
    if sigma == 0:  # quantised values (whole ms) repeat: most differences are 0, so is the MAD
        sigma = float(np.std(d)) / math.sqrt(2.0)
    # constant or an exact ramp has no noise at all: keep the scores finite, and take a part per
    # million of the median as the resolution below which nothing is a change
    return max(sigma, NOISE_FLOOR)


def _outliers(x: np.ndarray, z: np.ndarray, sigma: float, w: int) -> list[Outlier]:
    """One-run spikes: far (> OUTLIER_SCORE σ) from the median of `w` neighbours on each side."""
    n = z.size
    pad = np.r_[np.full(w, np.nan), z, np.full(w, np.nan)]
    win = np.lib.stride_tricks.sliding_window_view(pad, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows at the two ends
        left = np.nanmedian(win[:n], axis=1)  # z[i-w:i]
        right = np.nanmedian(win[w + 1 : w + 1 + n], axis=1)  # z[i+1:i+1+w]
        dev = np.c_[z - left, z - right]
        score = np.nanmin(np.abs(dev), axis=1) / sigma
        # a spike is above (or below) both neighbourhoods; a point on a ramp or a step is between
        score[np.nanmin(dev, axis=1) * np.nanmax(dev, axis=1) < 0] = 0.0
    score[-1] = 0.0  # the last point may start a new regime: the tail rule judges it
    return [
        Outlier(int(i), float(x[i]), float(score[i])) for i in np.flatnonzero(score > OUTLIER_SCORE)
    ]


def _candidates(z: np.ndarray, sigma: float, min_segment: int) -> list[int]:
    """Candidate cuts (first index of each new segment) from ruptures' PELT."""
    import ruptures as rpt  # imported here: importing the history package stays cheap

    if z.size < min_segment + 1:
        return []
    pen = PENALTY * sigma**2 * math.log(z.size)
    # min_size=1: a one-point tail must be proposable, so that it can be reported as suspected
    algo = rpt.KernelCPD(kernel="linear", min_size=1, jump=1).fit(z)
    return [int(b) for b in algo.predict(pen=pen)[:-1]]


def _prune(
    z: np.ndarray, cuts: list[int], sigma: float, alpha: float, min_segment: int
) -> list[tuple[int, tuple[int, int, int], str, float]]:
    """Merge away the weakest failing candidate until every one left holds.

    Returns (cut, (start, cut, stop), status, p) per change point kept.
    """
    cuts = sorted(cuts)
    while cuts:
        judged = _judge(z, cuts, sigma, alpha, min_segment)
        failing = [j for j in judged if j[2] == "fail"]
        if not failing:
            return judged
        weakest = max(failing, key=lambda j: (j[3], j[0]))
        cuts.remove(weakest[0])
    return []


def _judge(
    z: np.ndarray, cuts: list[int], sigma: float, alpha: float, min_segment: int
) -> list[tuple[int, tuple[int, int, int], str, float]]:
    """Status of each cut given the others: "confirmed", "suspected" or "fail"."""
    bounds = [0, *cuts, z.size]
    out = []
    for k, cut in enumerate(cuts):
        start, stop = bounds[k], bounds[k + 2]
        before, after = z[start:cut], z[cut:stop]
        p = float(stats.mannwhitneyu(before, after, alternative="two-sided").pvalue)
        if before.size < min_segment:
            status = "fail"
        elif after.size >= min_segment:
            status = "test"
        elif stop == z.size and _tail_moved(before, after, sigma):
            status = "suspected"
        else:
            status = "fail"
        out.append([cut, (start, cut, stop), status, p])
    tested = [j for j in out if j[2] == "test"]
    if tested:
        adjusted = stats.false_discovery_control([j[3] for j in tested], method="bh")
        for j, q in zip(tested, adjusted, strict=True):
            j[2], j[3] = ("confirmed" if q <= alpha else "fail"), float(q)
    return [tuple(j) for j in out]


def _tail_scan(
    z: np.ndarray, cuts: list[int], sigma: float, min_segment: int
) -> list[tuple[int, tuple[int, int, int], str, float]]:
    """A tail step PELT's penalty did not propose: the longest moved tail < min_segment."""
    start, n = (cuts[-1] if cuts else 0), z.size
    for k in range(min_segment - 1, 0, -1):
        before, after = z[start : n - k], z[n - k :]
        if before.size >= min_segment and _tail_moved(before, after, sigma):
            p = float(stats.mannwhitneyu(before, after, alternative="two-sided").pvalue)
            return [(n - k, (start, n - k, n), "suspected", p)]
    return []


def _tail_moved(before: np.ndarray, after: np.ndarray, sigma: float) -> bool:
    """Every point of the short tail is > SUSPECT_SCORE σ from the median before, on one side."""
    d = (after - np.median(before)) / sigma
    return bool(np.all(d > SUSPECT_SCORE) or np.all(d < -SUSPECT_SCORE))


def _change_point(
    x: np.ndarray,
    cut: int,
    bounds: tuple[int, int, int],
    index: int,
    status: str,
    p: float,
    confidence: float,
    seed: int,
) -> ChangePoint:
    start, _, stop = bounds
    before, after = x[start:cut], x[cut:stop]
    m_before, m_after = float(np.median(before)), float(np.median(after))
    rel = m_after / m_before - 1.0 if m_before != 0 else math.nan
    low, high = _step_ci(before, after, confidence, np.random.default_rng([seed, index]))
    return ChangePoint(index, m_before, m_after, rel, low, high, p, status)


def _step_ci(
    before: np.ndarray, after: np.ndarray, confidence: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(after) / median(before) − 1 (NaN for a 1-point side)."""
    if before.size < 2 or after.size < 2 or np.median(before) == 0:
        return math.nan, math.nan

    def ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(b, axis=axis) / np.median(a, axis=axis) - 1.0

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate (all-equal) resamples: the CI is a point
        res = stats.bootstrap(
            (before, after),
            ratio,
            vectorized=True,
            n_resamples=N_RESAMPLES,
            batch=100,  # resamples per vectorised call: bounds memory on long segments
            confidence_level=confidence,
            method="percentile",
            rng=rng,
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
