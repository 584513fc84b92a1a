"""The one decision function of mlb and the test that feeds it with the replicates users have.

Every place that judges (`mlb compare`, `mlb history gate`, `mlb ab`, the report's comparison)
reaches a verdict through :func:`decide`, called as ``decision.decide`` so that a test can swap
it for a spy and see every path go through it.

**The test at the process level.** The unit compared is one figure per fresh process (its
median). A default result holds 2–10 of them, too few for a rank test: with 5 vs 5 the smallest
two-sided Mann-Whitney p is 0.0079, so under Holm over 8 metrics no change, however large, could
ever be flagged. So the process figures are compared by **Student's t on their logarithms**
(:func:`log_t_test`): the log makes a difference a ratio, and the variance is pooled over both
sides (the null hypothesis is "same config, same machine", which is the equal-variance model;
with equal counts per side, as the default pipeline produces, the pooled test keeps its level
under unequal variances). Pooling gives ``n_old + n_new − 2`` degrees of freedom where Welch's
can fall to 1 (a critical t of 12.7 at 2 vs 2). One side with a single process is compared
against the other side's spread (``n − 1`` degrees of freedom). With one process a side nothing
measures the noise between processes: the verdict is :data:`INSUFFICIENT`. The rank test (and
the bootstrap CI of the ratio of medians) is kept where the counts allow it: from
:data:`RANK_MIN` values a side.

**Gatekeeping** (:func:`gatekeep`): the headline metrics (a training step, an inference batch:
role ``total``) are tested first, Holm among themselves at the full α. The stages of a group are
tested only when their total was rejected, Holm among themselves at α·r/m (r of m totals
rejected: Bonferroni parallel gatekeeping, which keeps the family-wise error at α). A stage whose
total did not move can still be shown "unchanged" (its CI inside the band needs no test).

**What a comparison can see** (:func:`detectable_change`): a change is flagged when p < α' and
the CI lies beyond the practical threshold, so the smallest change seen with 80% power is
``expm1(max(log1p(thr) + t_c·se, t_α'·se) + t_power·se)``. :func:`replicates_to_settle` and
:func:`min_decidable` are derived from the same degrees of freedom the test uses.

**Memory** (:func:`memory_rule`) is nearly deterministic: a rank or t test on a handful of
identical values is the wrong tool (no spread, no p). Its CI is the ratio of medians widened by
the measured spread, and its p says only whether that CI lies beyond the band; the verdict then
comes from :func:`decide` like every other one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from mlbaseline.stats.core import DEFAULT_THRESHOLD, _sps, holm

INSUFFICIENT = "insufficient data"
RANK_MIN = 12  # values a side from which the rank test and the bootstrap CI are used
POWER = 0.8
MAX_SETTLE = 10_000


def decide(
    ratio_ci: tuple[float, float, float],
    p_adjusted: float,
    higher_is_better: bool,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = 0.05,
) -> str:
    """The verdict of one metric from its ratio new/old with CI (ratio, low, high) and its
    adjusted p (two gates, DESIGN.md "Statistics"):

    - "regressed"/"improved": p_adjusted < alpha AND the whole CI lies beyond the band on that
      side (lower is better: regressed when low > 1+threshold, improved when high <
      1-threshold; mirrored when higher is better);
    - "unchanged": the whole CI lies inside [1-threshold, 1+threshold] AND includes 1 — a CI
      that excludes 1 shows a change, if a small one, so it is never called unchanged (a change
      below the band is "inconclusive", with the reason given by the caller);
    - "inconclusive": anything else, and any CI that is not finite.
    """
    _, lo, hi = ratio_ci
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive"
    significant = p_adjusted < alpha
    above = lo > 1.0 + threshold
    below = hi < 1.0 - threshold
    if significant and (above or below):
        worse = below if higher_is_better else above
        return "regressed" if worse else "improved"
    if lo >= 1.0 - threshold and hi <= 1.0 + threshold and lo <= 1.0 <= hi:
        return "unchanged"
    return "inconclusive"


def below_band(ratio_ci: tuple[float, float, float], threshold: float) -> bool:
    """A CI that excludes 1 but lies inside the band: a change smaller than the threshold."""
    _, lo, hi = ratio_ci
    inside = lo >= 1.0 - threshold and hi <= 1.0 + threshold
    return inside and not lo <= 1.0 <= hi


# --------------------------------------------------------------------------- memory

DEFAULT_MEMORY_THRESHOLD = 0.05  # compare.memory_threshold's default
# The spread a memory CI assumes at least, as a share of the threshold: what one value a side
# (or byte-identical values) cannot measure, pages and allocator blocks, is taken as a quarter
# of the band, so an A/A pair whose medians differ by a page is "unchanged", not "a change".
MEMORY_RESOLUTION = 0.25
# The smallest scale a memory change is judged against, in bytes: a stage that holds a few KiB
# (allocator bookkeeping, Python objects) and moves by a few hundred bytes has not regressed.
MEMORY_MIN_BYTES = float(2**20)


@dataclass(frozen=True)
class MemoryJudgement:
    """One memory metric judged by :func:`memory_rule` (ratio new/old of the medians)."""

    ratio: float
    ci_low: float
    ci_high: float
    p: float  # 0: the CI lies wholly beyond the band; 1: it does not
    spread: float  # the relative spread the CI was widened by (floor included)
    median_old: float
    median_new: float
    verdict: str
    mde: float  # the smallest change this pair of sides calls (its spread and the band)
    base: float  # the bytes the change was measured against (median(old) unless scaled)

    @property
    def scaled(self) -> bool:
        """Measured against more than median(old): a small stage, or one that frees memory."""
        return self.base != self.median_old


def memory_base(old_median: float, scale: float | None, min_bytes: float) -> float:
    """The bytes a memory change is measured against: median(old), or `scale` (the group's
    peak) where that is not positive (a stage that frees memory holds <= 0 bytes at its end);
    at least `min_bytes`, and at least 1."""
    base = old_median if old_median > 0 else (scale or 0.0)
    return max(base, min_bytes, 1.0)


def _relative_spread(values: np.ndarray, median: float, base: float, min_bytes: float) -> float:
    """(max − min) / median of one side (at least `min_bytes`; `base` where its median is not
    positive); 0 for a single value."""
    if values.size < 2:
        return 0.0
    return float(values.max() - values.min()) / (max(median, min_bytes) if median > 0 else base)


def memory_ci(
    old: Sequence[float],
    new: Sequence[float],
    threshold: float,
    scale: float | None = None,
    min_bytes: float = MEMORY_MIN_BYTES,
) -> tuple[tuple[float, float, float], float, float, float]:
    """((ratio, low, high), p, s, base) of the memory rule (module doc): ratio = median(new) /
    median(old); s = the larger side's (max − min) / median, at least MEMORY_RESOLUTION of the
    threshold; CI = (r, r·(1 − s), r·(1 + s)), its low end clamped at 0; p = 0 when the CI lies
    wholly beyond 1 ± threshold, else 1.

    The denominator is :func:`memory_base`: below `min_bytes` (1 MiB), or for a stage that
    frees memory (median(old) <= 0: `scale`, the group's peak), ratio = 1 + (median(new) −
    median(old)) / base. Two all-zero sides are ratio 1."""
    a, b = np.asarray(old, dtype=np.float64), np.asarray(new, dtype=np.float64)
    if a.size == 0 or b.size == 0 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("memory values: both sides need finite values")
    m_old, m_new = float(np.median(a)), float(np.median(b))
    base = memory_base(m_old, scale, min_bytes)
    r = 1.0 + (m_new - m_old) / base
    measured = max(
        _relative_spread(a, m_old, base, min_bytes), _relative_spread(b, m_new, base, min_bytes)
    )
    s = max(measured, MEMORY_RESOLUTION * threshold)
    ci = (r, max(0.0, r - abs(r) * s), r + abs(r) * s)
    beyond = ci[1] > 1.0 + threshold or ci[2] < 1.0 - threshold
    return ci, 0.0 if beyond else 1.0, s, base


def memory_rule(
    old: Sequence[float],
    new: Sequence[float],
    higher_is_better: bool = False,
    threshold: float = DEFAULT_MEMORY_THRESHOLD,
    alpha: float = 0.05,
    scale: float | None = None,
    min_bytes: float = MEMORY_MIN_BYTES,
) -> MemoryJudgement:
    """The verdict of one memory metric: :func:`memory_ci`, then :func:`decide` (the module's
    attribute, looked up at call time: a spy that replaces it sees every memory verdict) at
    `threshold` (compare.memory_threshold). A doubling is "regressed" and identical values
    "unchanged" at every count, even one value a side."""
    ci, p, s, base = memory_ci(old, new, threshold, scale, min_bytes)
    verdict = decide(ci, p, higher_is_better, threshold, alpha)
    # the smallest rise whose CI clears the band: r·(1 − s) > 1 + threshold
    mde = (1.0 + threshold) / (1.0 - s) - 1.0 if s < 1.0 else math.inf
    m_old, m_new = float(np.median(old)), float(np.median(new))
    return MemoryJudgement(ci[0], ci[1], ci[2], p, s, m_old, m_new, verdict, mde, base)


# --------------------------------------------------------------------------- the test


@dataclass(frozen=True)
class LogTTest:
    """Student's t on the logs of the process figures (module doc)."""

    ratio: float  # exp(mean log new − mean log old): the ratio of geometric means
    ci_low: float
    ci_high: float
    p: float  # two-sided
    se: float  # standard error of the log difference
    df: int
    sd: float  # pooled sd of the logs (a relative sd)


def t_dof(n_old: int, n_new: int) -> int:
    """Degrees of freedom of the pooled variance: each side with n values gives n − 1."""
    return max(0, n_old - 1) + max(0, n_new - 1)


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: int) -> float:
    return float(_sps().t.ppf(q, df))


def log_t_test(old: Sequence[float], new: Sequence[float], confidence: float) -> LogTTest | None:
    """The test of the module doc on positive figures; None when nothing measures the spread
    (one figure a side) or a figure is not positive (no logarithm)."""
    a, b = np.asarray(old, dtype=np.float64), np.asarray(new, dtype=np.float64)
    df = t_dof(a.size, b.size)
    if df < 1 or a.size == 0 or b.size == 0 or np.any(a <= 0) or np.any(b <= 0):
        return None
    la, lb = np.log(a), np.log(b)
    ss = float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum())
    sd = math.sqrt(ss / df)
    se = sd * math.sqrt(1.0 / a.size + 1.0 / b.size)
    d = float(lb.mean() - la.mean())
    if se == 0.0:
        return LogTTest(math.exp(d), math.exp(d), math.exp(d), 0.0 if d else 1.0, 0.0, df, 0.0)
    p = float(2.0 * _sps().t.sf(abs(d) / se, df))
    half = t_quantile(0.5 + confidence / 2.0, df) * se
    return LogTTest(math.exp(d), math.exp(d - half), math.exp(d + half), min(1.0, p), se, df, sd)


def min_decidable() -> int:
    """The fewest processes a side with which a comparison can reach a verdict: the first
    count whose pooled variance has a degree of freedom (2)."""
    return next(n for n in range(1, 100) if t_dof(n, n) >= 1)


# --------------------------------------------------------------------------- gatekeeping


@dataclass(frozen=True)
class Gated:
    """Adjusted p-values after gatekeeping, and the metrics whose gate stayed closed."""

    p_adjusted: dict[str, float]
    closed: set[str]  # not tested: their total did not move (p_adjusted 1)
    alpha_eff: dict[str, float]  # the level the first Holm step holds each metric to


def gatekeep(p: Mapping[str, float], gate: Mapping[str, str | None], alpha: float) -> Gated:
    """Adjusted p-values (module doc). `gate` maps a metric to the headline metric that must be
    rejected before it is tested, None for a headline metric (or one without a headline)."""
    first = [n for n in p if gate.get(n) is None or gate.get(n) not in p]
    adj = dict(zip(first, holm([p[n] for n in first]), strict=True))
    rejected = {n for n in first if adj[n] < alpha}
    m = max(1, len(first))
    second = [n for n in p if n not in adj]
    open_ = [n for n in second if gate[n] in rejected]
    closed = set(second) - set(open_)
    share = len(rejected) / m  # the α a rejected family passes on (parallel gatekeeping)
    if open_:
        for n, q in zip(open_, holm([p[x] for x in open_]), strict=True):
            adj[n] = min(1.0, q / share)
    adj.update(dict.fromkeys(closed, 1.0))
    k2 = max(1, len(second))
    eff = {n: alpha / m for n in first}
    eff.update({n: alpha * max(share, 1.0 / m) / k2 for n in second})
    return Gated(adj, closed, eff)


# --------------------------------------------------------------------------- what it can see


def detectable_change(
    se: float, df: float, alpha: float, threshold: float, confidence: float, power: float = POWER
) -> float:
    """The smallest relative change flagged with `power` (module doc); df = inf for the normal
    approximation of the rank test's bootstrap."""
    if not math.isfinite(se):
        return math.inf
    q = (lambda x: float(_sps().norm.ppf(x))) if math.isinf(df) else (lambda x: t_quantile(x, df))
    need = max(math.log1p(threshold) + q(0.5 + confidence / 2.0) * se, q(1 - alpha / 2.0) * se)
    return math.expm1(need + q(power) * se)


def replicates_to_settle(
    sd: float, change: float, threshold: float, confidence: float, at_least: int
) -> int:
    """Processes a side (equal counts) whose CI would settle a result at `change`: its
    half-width within the distance from the change to the band's edge (at least a quarter of
    the band); never fewer than `at_least`."""
    if sd <= 0:
        return max(at_least, min_decidable())
    half = max(abs(abs(math.log1p(change)) - math.log1p(threshold)), math.log1p(threshold) / 4)
    lo = max(at_least, min_decidable())

    def ok(n: int) -> bool:
        return t_quantile(0.5 + confidence / 2.0, t_dof(n, n)) * sd * math.sqrt(2.0 / n) <= half

    return fewest(ok, lo, MAX_SETTLE)


def fewest(ok: Callable[[int], bool], lo: int, cap: int) -> int:
    """The fewest n in [lo, cap] with ok(n), for an `ok` that stays true once it is (a
    half-width or an MDE that falls as n grows); `cap` when none is. Bisection: each call
    costs scipy quantiles, stepping n up one by one took ~1000 of them."""
    if ok(lo):
        return lo
    if not ok(cap):
        return cap
    hi = cap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


__all__ = [
    "DEFAULT_MEMORY_THRESHOLD",
    "INSUFFICIENT",
    "MEMORY_MIN_BYTES",
    "MEMORY_RESOLUTION",
    "POWER",
    "RANK_MIN",
    "Gated",
    "LogTTest",
    "MemoryJudgement",
    "below_band",
    "decide",
    "detectable_change",
    "fewest",
    "gatekeep",
    "log_t_test",
    "memory_base",
    "memory_ci",
    "memory_rule",
    "min_decidable",
    "replicates_to_settle",
    "t_dof",
    "t_quantile",
]
