"""How strong a verdict may be: between-process noise, the threshold it sets, reachable advice.

On a shared machine most timing noise lies *between* processes, so a verdict may only be as
strong as the noise measured at its level (DESIGN.md, "Statistics"):

- **Between-process noise** of a metric: the coefficient of variation of the per-replicate
  medians (``std(ddof=1) / mean``), pooled over the sides that have at least 2 replicates,
  ``sqrt(sum((r_i - 1)·cv_i²) / sum(r_i - 1))`` with ``sum(r_i - 1)`` degrees of freedom.
  ``None`` when neither side has 2 replicates: then it was not measured.
- **Between-sitting noise** of a metric: the sd beyond their processes of the figures of
  earlier sittings in the history (``data.noise[metric].sittings.between_sd``, added when the
  result was measured: :mod:`mlbaseline.history.sittings`), the larger of the two sides'.
  Two results from different sittings differ by chance with sd ``sqrt(2)·s_sit``, so its
  *sitting bar* is ``z_{(1+confidence)/2} · sqrt(2) · s_sit``.
- **Practical threshold**: ``max(configured floor, between-process noise, sitting bar)``; the
  floor is ``compare.thresholds`` / ``compare.threshold``. Which of them it was is recorded.
- **In-process samples** (fewer than ``min_replicates`` replicates on a side) never make a
  regressed/improved verdict on their own: without measured noise the verdict becomes
  inconclusive; with it, ``|ratio - 1|`` must exceed the noise bar
  ``t_{(1+confidence)/2, dof} · cv · sqrt(1/p_old + 1/p_new)`` (p: processes per side, at least
  1), the CI half-width of a difference of process means under that noise.
- **Reachable advice**: with Holm over k metrics the first step needs ``p < alpha/k``; the
  smallest N-vs-N count whose smallest attainable Mann-Whitney p is below that is
  :func:`replicates_reachable`; no recommendation asks for fewer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from mlbaseline import stats
from mlbaseline.comparison.matching import replicate_medians, threshold_for
from mlbaseline.config import CompareConfig
from mlbaseline.results import Metric, Result
from mlbaseline.stats.noise import (
    MAX_REPLICATES,
    Components,
    components,
    min_mann_whitney_p,
    relative_mde,
    replicates_reachable,
    summary,
)

SOURCE_FLOOR = "configured floor"
SOURCE_NOISE = "measured between-process noise"
SOURCE_SITTINGS = "measured between-sitting noise (history)"


def repeats_advice(k: int, alpha: float, min_replicates: int) -> int:
    """The --repeats to recommend: enough for the replicate level and to reach alpha/k."""
    return replicates_reachable(k, alpha, min_replicates)


@dataclass(frozen=True)
class Level:
    """At which level a metric was judged, and the threshold and noise that applied."""

    basis: str  # "replicates" | "samples"
    floor: float  # the configured threshold
    noise: float | None  # between-process CV, None when not measured
    dof: int  # degrees of freedom of `noise`
    processes: tuple[int, int]  # processes per side (1 without replicate ids)
    # variance components of each side (stats.noise.components), None where not measured
    sides: tuple[Components | None, Components | None] = field(default=(None, None))
    sitting: float | None = None  # between-sitting sd (history), None when not measured
    confidence: float = 0.95  # of the sitting bar

    @property
    def sitting_bar(self) -> float | None:
        """The change two sittings show by chance at `confidence`, None when not measured."""
        if self.sitting is None:
            return None
        return stats.z_value(self.confidence) * math.sqrt(2.0) * self.sitting

    @property
    def threshold(self) -> float:
        return max(self.floor, self.noise or 0.0, self.sitting_bar or 0.0)

    @property
    def source(self) -> str:
        if self.threshold == self.floor:
            return SOURCE_FLOOR
        return SOURCE_SITTINGS if self.threshold == self.sitting_bar else SOURCE_NOISE

    def noise_bar(self, confidence: float) -> float | None:
        """|ratio - 1| an in-process verdict must exceed; None when noise was not measured."""
        if self.noise is None or self.dof < 1:
            return None
        t = float(sps.t.ppf(0.5 + confidence / 2.0, self.dof))
        p_old, p_new = self.processes
        return t * self.noise * math.sqrt(1.0 / p_old + 1.0 / p_new)

    def to_dict(self, confidence: float) -> dict[str, Any]:
        return {
            "level": "process" if self.basis == "replicates" else "in-process",
            "threshold": self.threshold,
            "threshold_source": self.source,
            "threshold_floor": self.floor,
            "between_process_noise": self.noise,
            "noise_dof": self.dof,
            "processes": list(self.processes),
            "noise_bar": None if self.basis == "replicates" else self.noise_bar(confidence),
            "between_sitting_noise": self.sitting,
            "sitting_bar": self.sitting_bar,
            "noise_components": {
                side: None if c is None else c.to_dict()
                for side, c in zip(("old", "new"), self.sides, strict=True)
            },
        }

    def replicate_mde(self, alpha: float) -> float | None:
        """MDE of the process-level comparison from both sides' process sds (the one formula,
        stats.noise.relative_mde), with twice the between-sitting variance when measured;
        None unless both sides have components."""
        old, new = self.sides
        if old is None or new is None:
            return None
        s2 = (self.sitting or 0.0) ** 2  # each side's figure carries one sitting term
        sd_old = math.sqrt(old.process_sd**2 + old.processes * s2)
        sd_new = math.sqrt(new.process_sd**2 + new.processes * s2)
        return relative_mde(sd_old, old.processes, sd_new, new.processes, alpha)


def _side_cv(metric: Metric) -> tuple[float, int] | None:
    """(CV of the per-replicate medians, replicates) for a side with >= 2 replicates."""
    if not metric.replicate or len(set(metric.replicate)) < 2:
        return None
    medians = replicate_medians(np.asarray(metric.values, dtype=np.float64), metric.replicate)
    mean = float(np.mean(medians))
    if not (mean > 0 and math.isfinite(mean)):
        return None
    # the CV the report's signal and the replicate plan judge: one definition (stats.summarize)
    return stats.summarize(medians).cv, medians.size


def sitting_noise(old: Result, new: Result, name: str) -> float | None:
    """The larger between-sitting sd either side's history recorded for `name`, or None."""
    found = []
    for side in (old, new):
        rec = (side.data.get("noise") or {}).get(name) or {}
        sit = rec.get("sittings") if isinstance(rec, dict) else None
        sd = sit.get("between_sd") if isinstance(sit, dict) else None
        if isinstance(sd, (int, float)) and math.isfinite(sd):
            found.append(float(sd))
    return max(found) if found else None


def level_of(
    old: Metric,
    new: Metric,
    basis: str,
    floor: float,
    sitting: float | None = None,
    confidence: float = 0.95,
) -> Level:
    """The judging level of one metric from both sides' replicate ids (and the
    between-sitting sd, :func:`sitting_noise`)."""
    cvs = [s for s in (_side_cv(old), _side_cv(new)) if s is not None]
    dof = sum(r - 1 for _, r in cvs)
    noise = math.sqrt(sum((r - 1) * cv * cv for cv, r in cvs) / dof) if dof else None
    procs = tuple(max(1, len(set(m.replicate or ()))) for m in (old, new))
    comps = tuple(components(m.values, m.replicate) if m.replicate else None for m in (old, new))
    sides = (comps[0], comps[1])
    return Level(basis, floor, noise, dof, (procs[0], procs[1]), sides, sitting, confidence)


def in_process_reason(level: Level, change: float, confidence: float, repeats: int) -> str | None:
    """Why an in-process regressed/improved verdict must become inconclusive, or None when the
    change exceeds the measured between-process noise bar."""
    bar = level.noise_bar(confidence)
    if bar is None:
        return (
            f"in-process samples only: between-process noise not measured (use --repeats {repeats})"
        )
    if abs(change) > bar:
        return None
    return (
        f"in-process samples: {100 * abs(change):.1f}% is within the between-process noise "
        f"bar ±{100 * bar:.1f}% (use --repeats {repeats})"
    )


# --------------------------------------------------------------------------- a result's own noise


def judged_names(result: Result) -> list[str]:
    """The metrics `mlb compare` would judge in a comparison of two results like this one
    (every metric but the residuals and the control kernel): the k of Holm that an MDE must be
    stated at."""
    skip = ("residual", "control")
    return [n for n, m in result.measurements.items() if (m.meta or {}).get("role") not in skip]


def result_noise(result: Result, cfg: CompareConfig) -> dict[str, Any]:
    """Per metric with >= 2 fresh-process replicates: its variance components and the MDE of a
    comparison of two results like this one at `cfg.alpha` (Holm's k = every judged metric),
    recomputable from the raw values (stats.noise.summary). Empty without replicates."""
    names = judged_names(result)
    out: dict[str, Any] = {}
    for name in names:
        m = result.measurements[name]
        rec = summary(
            m.values, m.replicate, alpha=cfg.alpha, k=len(names), threshold=threshold_for(name, cfg)
        )
        if rec is not None:
            out[name] = rec
    return out


__all__ = [
    "MAX_REPLICATES",
    "SOURCE_FLOOR",
    "SOURCE_NOISE",
    "SOURCE_SITTINGS",
    "Level",
    "in_process_reason",
    "judged_names",
    "level_of",
    "min_mann_whitney_p",
    "repeats_advice",
    "replicates_reachable",
    "result_noise",
    "sitting_noise",
]
