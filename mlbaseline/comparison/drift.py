"""Machine drift in a comparison: the control kernel's shift, drift-adjusted values, and the
signature of a drift that moves every stage alike.

- **Control**: both results carry the control metric (role ``control``, e.g. ``control.matmul``)
  with the same kernel and thread count. Its ratio c = median(control NEW)/median(control OLD)
  (of the process figures when a side has replicates) is how much the machine moved. Only on
  evidence — the control's own CI lies wholly beyond the threshold — is it named **common-mode
  drift**, and every time metric of NEW divided by c (rates multiplied) before judging, so
  verdicts use drift-adjusted deltas (metric ratio / c); the measured medians, ratio, CI and
  verdict stay beside each metric and are what the table shows, with the adjusted change in a
  column of its own. A control whose CI reaches into the band (a noisy control, a CI that
  includes 1) adjusts nothing, whatever its point ratio. The control itself is never a verdict
  (its own two-gate verdict is recorded).
- **Signature** (with or without a control): within one group, at least 3 stages, all moved by
  one common factor f (the median of their ratios) beyond the threshold — each stage's ratio
  within max(threshold, |f−1|/4) of f, or its CI containing f — and among them a stage a change
  to the model cannot reach (data_wait or h2d; without one, a uniform shift may be real); at
  least 3 of them, one unreachable, with a CI that excludes 1 (moved for sure). That
  is the signature of machine drift, not a regression: the group's regressed/improved verdicts
  are held back to inconclusive, and said so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.matching import pair_samples
from mlbaseline.config import CompareConfig
from mlbaseline.results import Metric, Result

ROLE = "control"
METHOD = (
    "control: NEW's time metrics divided by the control ratio (rates multiplied) only when "
    "the control's CI lies wholly beyond the threshold; signature: >= 3 stages of a group, "
    "data_wait or h2d among them, all within max(threshold, |f-1|/4) of their median ratio f "
    "(or CI containing f), |f-1| beyond the threshold, >= 3 (one of data_wait/h2d) with a CI "
    "excluding 1: its regressed/improved verdicts held back"
)
SIGNATURE_MIN_STAGES = 3
UNREACHABLE = ("data_wait", "h2d")  # stages a model/optimizer change does not touch
MATCH_KEYS = ("kernel", "threads")


def control_metric(result: Result) -> Metric | None:
    return next((m for m in result.measurements.values() if m.meta.get("role") == ROLE), None)


def control_names(result: Result) -> set[str]:
    return {n for n, m in result.measurements.items() if m.meta.get("role") == ROLE}


@dataclass(frozen=True)
class ControlShift:
    """The control's comparison and whether it adjusts the verdicts."""

    metric: str
    ratio: float
    ci: tuple[float, float]
    verdict: str
    basis: str
    applied: bool  # the verdicts used drift-adjusted values
    moved: bool  # its CI lies wholly beyond the threshold: common-mode drift, on evidence
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "ratio": self.ratio,
            "ci": list(self.ci),
            "verdict": self.verdict,
            "basis": self.basis,
            "applied": self.applied,
            "moved": self.moved,
            "reason": self.reason,
        }


def control_shift(old: Result, new: Result, cfg: CompareConfig, seed: int) -> ControlShift | None:
    """The control's own verdict, or None when either side has none."""
    a, b = control_metric(old), control_metric(new)
    if a is None or b is None or a.name != b.name or not a.values or not b.values:
        return None
    pair = pair_samples(a, b, cfg.min_replicates)
    if np.median(pair.old) <= 0:
        return None
    (row,) = stats.compare_samples(
        {a.name: (pair.old, pair.new, False)},
        threshold=cfg.threshold,
        alpha=cfg.alpha,
        confidence=cfg.confidence,
        n_resamples=cfg.n_resamples,
        seed=seed,
    )
    differs = [k for k in MATCH_KEYS if a.meta.get(k) != b.meta.get(k)]
    moved = row.ci_low > 1.0 + cfg.threshold or row.ci_high < 1.0 - cfg.threshold
    ci = f"×{row.ratio:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}]"
    if differs:
        reason = f"not used: the control differs ({', '.join(differs)})"
    elif moved:
        reason = (
            f"the control moved {ci} too, its CI beyond ±{cfg.threshold:.0%}: common-mode "
            f"drift; verdicts use drift-adjusted deltas (ratio / {row.ratio:.3f})"
        )
    else:
        reason = (
            f"the control moved {ci}, its CI not wholly beyond ±{cfg.threshold:.0%}: "
            "no evidence of drift, nothing adjusted"
        )
    applied = moved and not differs
    return ControlShift(
        a.name, row.ratio, (row.ci_low, row.ci_high), row.verdict, pair.basis, applied, moved,
        reason,
    )  # fmt: skip


def _scaled(m: Metric, factor: float) -> Metric:
    """Time metrics divided by the drift factor, rates multiplied; anything else unchanged."""
    if m.unit == "s" and not m.higher_is_better:
        k = 1.0 / factor
    elif m.higher_is_better and m.unit.endswith("/s"):
        k = factor
    else:
        return m
    return replace(m, values=[v * k for v in m.values], warmup=[v * k for v in m.warmup])


def adjusted(result: Result, factor: float, skip: Iterable[str]) -> Result:
    """A shallow copy of `result` whose metrics (except `skip`) are drift-adjusted."""
    keep = set(skip)
    out = replace(result)
    out.measurements = {
        n: m if n in keep else _scaled(m, factor) for n, m in result.measurements.items()
    }
    return out


# --------------------------------------------------------------------------- signature


@dataclass(frozen=True)
class Signature:
    group: str
    factor: float
    stages: list[str]

    def message(self) -> str:
        reach = [s for s in self.stages if s in UNREACHABLE]
        also = f", {' and '.join(reach)} included" if reach else ""
        return (
            f"{self.group}: every stage moved ×{self.factor:.3f} alike ({len(self.stages)} "
            f"stages{also}): the signature of machine drift, not a regression"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "factor": self.factor, "stages": self.stages,
                "message": self.message()}  # fmt: skip


def signature(
    group: str, rows: Sequence[tuple[str, float, float, float]], threshold: float
) -> Signature | None:
    """(stage, ratio, ci_low, ci_high) of one group's stages → the drift signature or None
    (module doc)."""
    rows = [r for r in rows if all(math.isfinite(x) and x > 0 for x in r[1:])]
    if len(rows) < SIGNATURE_MIN_STAGES or not any(r[0] in UNREACHABLE for r in rows):
        return None  # without a stage the change cannot reach, a uniform shift may be real
    f = float(np.median([r[1] for r in rows]))
    if abs(f - 1.0) <= threshold:
        return None
    tol = max(threshold, abs(f - 1.0) / 4.0)
    for _stage, ratio, lo, hi in rows:
        if not (lo <= f <= hi or abs(ratio / f - 1.0) <= tol):
            return None
    # moved: the CI excludes 1 on f's side (wide CIs of a noisy run agree with any f)
    moved = [r[0] for r in rows if (r[2] > 1.0 if f > 1.0 else r[3] < 1.0)]
    if len(moved) < SIGNATURE_MIN_STAGES or not any(s in UNREACHABLE for s in moved):
        return None
    return Signature(group, f, [r[0] for r in rows])


def signatures(metrics: Iterable[Any], threshold_of: Mapping[str, float]) -> list[Signature]:
    """Drift signatures of every group among judged metrics (MetricResult-like: .meta, .stat,
    .name), stages only."""
    groups: dict[str, list[tuple[str, float, float, float]]] = {}
    thr: dict[str, float] = {}
    for m in metrics:
        if m.meta.get("role") != "stage":
            continue
        g = str(m.meta.get("group"))
        groups.setdefault(g, []).append(
            (str(m.meta.get("stage")), m.stat.ratio, m.stat.ci_low, m.stat.ci_high)
        )
        thr[g] = max(thr.get(g, 0.0), threshold_of.get(m.name, 0.0))
    out = [signature(g, rows, thr[g]) for g, rows in groups.items()]
    return [s for s in out if s is not None]


__all__ = [
    "METHOD",
    "ROLE",
    "ControlShift",
    "Signature",
    "adjusted",
    "control_metric",
    "control_names",
    "control_shift",
    "signature",
    "signatures",
]
