"""Noise decomposition of replicated timings and the minimum detectable effect (MDE) it implies.

Method (Kalibera & Jones, *Rigorous Benchmarking in Reasonable Time*, 2013: multi-level
repetition): a one-way random-effects ANOVA on the log of the values, one group per fresh
process (its replicate id). With p processes, n_i values in process i and N values in all:

- within-process variance  s²_w = MSW = Σ_i Σ_j (y_ij − ȳ_i)² / (N − p);
- between-process variance s²_b = max(0, (MSB − MSW) / n₀), MSB = Σ_i n_i (ȳ_i − ȳ)² / (p − 1),
  n₀ = (N − Σ n_i² / N) / (p − 1) (the usual unbalanced-design constant);
- the share of the variance that lies between processes, s²_b / (s²_b + s²_w) (the ICC).

On log values, a standard deviation is a relative one (≈ CV for small spreads), so every figure
is unit-free and a ratio of medians is a difference of logs.

The figure a comparison judges is the per-process median, so the noise of one *reported* figure
is the standard deviation of the log per-process medians (``process_sd``, measured directly:
it holds the between-process part and what n steps leave of the within part). The MDE of a
comparison of two results with p_old and p_new processes is :func:`relative_mde` of those sds:
the smallest change the test ``mlb compare`` runs (Student's t on the logs, CI beyond the
threshold: :func:`mlbaseline.stats.decision.detectable_change`) flags with 80% power at α' = α/k,
Holm's first step in the metric's family (the step's family: the totals; a stage's: the
stages) — the one implementation used by throughput results (``data["noise"]``), the history
and ``mlb compare``.

**Between sittings** (:func:`sittings`): a sitting is one invocation, minutes or days from
another (one stored result in the history). With S sittings of the same config, figure m_s from
p_s processes of log sd sd_s each, the observed variance of the log figures holds what each
sitting's own processes leave (sd_s² / p_s) and the sitting-to-sitting part:
s²_sit = max(0, var(log m_s) − mean_s(sd_s² / p_s)). A comparison of two results from different
sittings carries 2·s²_sit beyond their process terms, which its MDE adds to the variance of
the log difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

import mlbaseline.stats.decision as decision

POWER = 0.8  # the power every MDE in mlb is stated at
MAX_REPLICATES = 10_000  # search cap of replicates_reachable / replicates_for_mde


@dataclass(frozen=True)
class Components:
    """Variance components of one metric on log values (relative standard deviations)."""

    processes: int
    values: int
    within_sd: float  # sqrt(s²_w): the step-to-step noise inside one process
    between_sd: float  # sqrt(s²_b): how much process means differ beyond that
    between_share: float  # s²_b / (s²_b + s²_w), 0 when both are 0
    process_sd: float  # sd (ddof=1) of the log per-process medians: noise of one figure
    dof: int  # p − 1, the degrees of freedom of process_sd

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _groups(values: Sequence[float], replicate: Sequence[int]) -> list[np.ndarray]:
    """Log values per replicate id (id order); non-positive or non-finite values dropped."""
    x = np.asarray(values, dtype=np.float64)
    ids = np.asarray(replicate)
    if x.shape != ids.shape:
        raise ValueError("values and replicate ids differ in length")
    ok = np.isfinite(x) & (x > 0)
    out = [np.log(x[ok & (ids == r)]) for r in np.unique(ids[ok])]
    return [g for g in out if g.size]


def components(values: Sequence[float], replicate: Sequence[int]) -> Components | None:
    """Variance components (module doc) of values tagged with their process id; None with
    fewer than 2 processes or no within-process degree of freedom."""
    groups = _groups(values, replicate)
    p = len(groups)
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    n_total = float(sizes.sum()) if p else 0.0
    if p < 2 or n_total - p < 1:
        return None
    means = np.array([g.mean() for g in groups])
    grand = float(np.concatenate(groups).mean())
    msw = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / (n_total - p)
    msb = float((sizes * (means - grand) ** 2).sum()) / (p - 1)
    n0 = (n_total - float((sizes**2).sum()) / n_total) / (p - 1)
    s2b = max(0.0, (msb - msw) / n0)
    total = s2b + msw
    medians = np.array([np.median(g) for g in groups])
    return Components(
        processes=p,
        values=int(n_total),
        within_sd=math.sqrt(msw),
        between_sd=math.sqrt(s2b),
        between_share=s2b / total if total > 0 else 0.0,
        process_sd=float(np.std(medians, ddof=1)),
        dof=p - 1,
    )


def relative_mde(
    sd_old: float,
    n_old: int,
    sd_new: float,
    n_new: int,
    alpha: float,
    power: float = POWER,
    *,
    threshold: float = 0.0,
    confidence: float = 0.95,
    extra_var: float = 0.0,
) -> float:
    """Smallest relative change (fraction) that a comparison of n_old vs n_new process figures
    with these log-scale sds flags with `power`: the test `mlb compare` runs (Student's t on
    the logs, pooled variance, decision.detectable_change) at `alpha` with its CI beyond
    `threshold`; `extra_var` adds variance the processes do not show (sittings). inf when
    nothing measures the spread (one process a side)."""
    df = decision.t_dof(n_old, n_new)
    if df < 1:
        return math.inf
    pooled = ((n_old - 1) * sd_old**2 + (n_new - 1) * sd_new**2) / df
    se = math.sqrt(pooled * (1.0 / n_old + 1.0 / n_new) + extra_var)
    return decision.detectable_change(se, df, alpha, threshold, confidence, power)


MIN_SITTINGS = 3  # with 2 the sitting variance has 1 degree of freedom: no figure to state


@dataclass(frozen=True)
class Sittings:
    """The between-sitting component of one metric (log scale: relative sds)."""

    sittings: int
    figure_sd: float  # sd (ddof=1) of the log figures of the sittings
    process_part_sd: float  # sqrt(mean(sd_s²/p_s)): what the sittings' own processes explain
    between_sd: float  # sqrt(s²_sit): what lies between sittings beyond that
    between_share: float  # s²_sit / figure_sd², 0 when figure_sd is 0
    dof: int  # S − 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sittings(
    figures: Sequence[float], process_sds: Sequence[float], processes: Sequence[int]
) -> Sittings | None:
    """Between-sitting component (module doc) from each sitting's reported figure, its log
    process sd and its process count; None with fewer than MIN_SITTINGS usable sittings."""
    rows = [
        (math.log(f), sd, p)
        for f, sd, p in zip(figures, process_sds, processes, strict=True)
        if f > 0 and math.isfinite(f) and math.isfinite(sd) and p >= 1
    ]
    if len(rows) < MIN_SITTINGS:
        return None
    y = np.array([r[0] for r in rows])
    var_fig = float(np.var(y, ddof=1))
    var_proc = float(np.mean([sd * sd / p for _, sd, p in rows]))
    s2 = max(0.0, var_fig - var_proc)
    return Sittings(
        sittings=len(rows),
        figure_sd=math.sqrt(var_fig),
        process_part_sd=math.sqrt(var_proc),
        between_sd=math.sqrt(s2),
        between_share=s2 / var_fig if var_fig > 0 else 0.0,
        dof=len(rows) - 1,
    )


def cross_sitting_mde(
    comp: Components, between_sd: float, alpha: float, power: float = POWER
) -> float:
    """MDE of a comparison of two results like `comp` taken in different sittings (module
    doc): the process terms of both sides plus twice the between-sitting variance."""
    p = comp.processes
    return relative_mde(
        comp.process_sd, p, comp.process_sd, p, alpha, power, extra_var=2.0 * between_sd**2
    )


def replicates_for_mde(
    sd: float,
    target: float,
    alpha: float,
    *,
    threshold: float,
    at_least: int = 2,
    confidence: float = 0.95,
    power: float = POWER,
) -> int:
    """Fewest processes per side (N vs N, same sd both sides) whose MDE (:func:`relative_mde`,
    the test compare runs, CI beyond `threshold`) is <= target; MAX_REPLICATES when none is."""
    if target <= 0:
        raise ValueError("target must be > 0")

    def ok(n: int) -> bool:
        mde = relative_mde(sd, n, sd, n, alpha, power, threshold=threshold, confidence=confidence)
        return mde <= target

    return decision.fewest(ok, max(at_least, decision.min_decidable()), MAX_REPLICATES)


def summary(
    values: Sequence[float],
    replicate: Sequence[int] | None,
    *,
    alpha: float,
    k: int,
    threshold: float,
    power: float = POWER,
) -> dict[str, Any] | None:
    """The noise record of one metric: its components, the MDE of a comparison of two results
    like this one (same processes and noise both sides; `alpha / k`: the first Holm step of its
    family under gatekeeping), whether a verdict is possible at all with this many processes,
    and the processes per side that would see a change of twice `threshold` (a change AT the
    threshold is seen at most half the time: the CI must clear it). None without 2 processes."""
    if not replicate:
        return None
    comp = components(values, replicate)
    if comp is None:
        return None
    p, sd, alpha_k = comp.processes, comp.process_sd, alpha / max(1, k)
    target = 2.0 * threshold
    return {
        **comp.to_dict(),
        "alpha": alpha,
        "power": power,
        "metrics_judged": k,
        "mde": relative_mde(sd, p, sd, p, alpha_k, power, threshold=threshold),
        "decidable": p >= decision.min_decidable(),
        "replicates_to_decide": decision.min_decidable(),
        "target": target,
        "replicates_for_target": replicates_for_mde(sd, target, alpha_k, threshold=threshold),
        "threshold": threshold,
    }


__all__ = [
    "MIN_SITTINGS",
    "POWER",
    "Components",
    "Sittings",
    "components",
    "cross_sitting_mde",
    "relative_mde",
    "replicates_for_mde",
    "sittings",
    "summary",
]
