"""How strong a verdict may be: the practical threshold, the gatekeeping order, a result's noise.

On a shared machine most timing noise lies *between* processes, so the unit a comparison tests
is one figure per fresh process (DESIGN.md, "Statistics"; the test:
:mod:`mlbaseline.stats.decision`):

- **Between-process noise** of a metric: the coefficient of variation of the per-replicate
  medians, pooled over the sides that have at least 2 replicates; recorded beside each verdict
  (the test itself measures it through the pooled variance of the logs).
- **Between-sitting noise** of a metric: the sd beyond their processes of the figures of
  earlier sittings in the history (``data.noise[metric].sittings.between_sd``, added when the
  result was measured: :mod:`mlbaseline.history.sittings`), the larger of the two sides'.
  Two results from different sittings differ by chance with sd ``sqrt(2)·s_sit``, a shift the
  processes of one sitting cannot show, so its *sitting bar*
  ``z_{(1+confidence)/2} · sqrt(2) · s_sit`` raises the practical threshold.
- **Practical threshold**: ``max(configured floor, sitting bar)``; the floor is
  ``compare.thresholds`` / ``compare.threshold``. Which of them it was is recorded.
- **One process a side** measures no noise between processes: "insufficient data".
- **Gatekeeping** (:func:`gates`): the total of each group (the step) is tested first; its
  stages and rate after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.matching import replicate_medians, threshold_for
from mlbaseline.config import CompareConfig
from mlbaseline.results import Metric, Result
from mlbaseline.stats.noise import MAX_REPLICATES, Components, components, summary

SOURCE_FLOOR = "configured floor"
SOURCE_NOISE = "measured between-process noise"
SOURCE_SITTINGS = "measured between-sitting noise (history)"


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
        return max(self.floor, self.sitting_bar or 0.0)

    @property
    def source(self) -> str:
        return SOURCE_FLOOR if self.threshold == self.floor else SOURCE_SITTINGS

    def to_dict(self, confidence: float) -> dict[str, Any]:
        return {
            "level": "process" if self.basis == "replicates" else "in-process",
            "threshold": self.threshold,
            "threshold_source": self.source,
            "threshold_floor": self.floor,
            "between_process_noise": self.noise,
            "noise_dof": self.dof,
            "processes": list(self.processes),
            "between_sitting_noise": self.sitting,
            "sitting_bar": self.sitting_bar,
            "noise_components": {
                side: None if c is None else c.to_dict()
                for side, c in zip(("old", "new"), self.sides, strict=True)
            },
        }


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


# --------------------------------------------------------------------------- a result's own noise


def judged_names(result: Result) -> list[str]:
    """The metrics `mlb compare` would judge in a comparison of two results like this one
    by the test of times (every metric but the residuals, the control kernel and memory, which
    has its own rule: comparison.memory)."""
    skip = ("residual", "control", "memory")
    return [n for n, m in result.measurements.items() if (m.meta or {}).get("role") not in skip]


def gates(metas: Mapping[str, Mapping[str, Any]]) -> dict[str, str | None]:
    """Per metric (name -> its meta), the headline metric gatekeeping tests before it: the
    total of its group; None for a total, for a group's J/step (energy is a headline of its
    own) and for a metric of a group without one (tested with the totals)."""
    totals = {meta.get("group"): n for n, meta in metas.items() if meta.get("role") == "total"}
    # energy is its own headline: a step that costs 30% more joules at the same speed (a power
    # change) must be tested, not held behind a step time that did not move. Per group, J/step
    # is tested with the totals; J/sample follows it.
    energy = {
        meta.get("group"): n
        for n, meta in metas.items()
        if meta.get("role") == "energy" and n.endswith(".energy_per_step")
    }

    def gate(n: str, meta: Mapping[str, Any]) -> str | None:
        if meta.get("role") == "total" or n in energy.values():
            return None
        if meta.get("role") == "energy":
            return energy.get(meta.get("group"))
        return totals.get(meta.get("group"))

    return {n: gate(n, meta) for n, meta in metas.items()}


def result_noise(result: Result, cfg: CompareConfig) -> dict[str, Any]:
    """Per metric with >= 2 fresh-process replicates: its variance components and the MDE of a
    comparison of two results like this one at `cfg.alpha` over the size of its gatekeeping
    family (the totals, or the metrics after them), recomputable from the raw values
    (stats.noise.summary). Empty without replicates."""
    names = judged_names(result)
    gate = gates({n: result.measurements[n].meta or {} for n in names})
    first = sum(g is None for g in gate.values())
    out: dict[str, Any] = {}
    for name in names:
        m = result.measurements[name]
        k = first if gate[name] is None else len(names) - first
        thr = threshold_for(name, cfg)
        rec = summary(m.values, m.replicate, alpha=cfg.alpha, k=k, threshold=thr)
        if rec is not None:
            out[name] = rec
    return out


__all__ = [
    "MAX_REPLICATES",
    "SOURCE_FLOOR",
    "SOURCE_NOISE",
    "SOURCE_SITTINGS",
    "Level",
    "gates",
    "judged_names",
    "level_of",
    "result_noise",
    "sitting_noise",
]
