"""Series of comparable results and the change points in them.

A *series* is one metric (a stage such as `train.bs64.forward`, a total, a rate) over the
records of one kind and one comparability fingerprint, oldest first: the results `mlb compare`
would accept as a pair. Change points come from :func:`mlbaseline.history.changepoints.detect`
on the series of medians; each is tied back to the runs around it (ids, times, the commit
range) so that `mlb history check` can name the run and the stage that moved.

Memory series (role ``memory``: peak bytes, the bytes a stage holds) get change points like
time series. Memory is nearly deterministic, so a step the test finds can be a few pages: a
step (or a one-run spike) smaller than ``compare.memory_threshold`` (the band of the memory
rule) is not reported.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlbaseline.history.record import MetricSummary
from mlbaseline.history.store import Entry
from mlbaseline.stats.decision import DEFAULT_MEMORY_THRESHOLD


@dataclass(frozen=True)
class Point:
    entry: Entry
    summary: MetricSummary


@dataclass
class Series:
    kind: str
    fingerprint: str
    metric: str
    points: list[Point] = field(default_factory=list)

    @property
    def unit(self) -> str:
        return self.points[-1].summary.unit if self.points else ""

    @property
    def higher_is_better(self) -> bool:
        return bool(self.points and self.points[-1].summary.higher_is_better)

    @property
    def memory(self) -> bool:
        return bool(self.points and self.points[-1].summary.role == "memory")

    @property
    def medians(self) -> list[float]:
        return [p.summary.median for p in self.points]


def _group_key(e: Entry) -> tuple[str, str]:
    return (e.kind, e.fingerprint)


def build_series(
    entries: Iterable[Entry], metrics: Sequence[str] | None = None, residuals: bool = False
) -> list[Series]:
    """One series per (kind, fingerprint, metric) of `entries` (oldest first already), for the
    metrics matching any glob of `metrics` (all when None); residuals are left out unless
    `residuals` (their median sits near 0 and may be negative: a ratio means nothing)."""
    out: dict[tuple[str, str, str], Series] = {}
    for e in entries:
        for name, s in e.metrics.items():
            if not residuals and s.role == "residual":
                continue
            if metrics and not any(fnmatch.fnmatchcase(name, pat) for pat in metrics):
                continue
            key = (*_group_key(e), name)
            if key not in out:
                out[key] = Series(e.kind, e.fingerprint, name)
            out[key].points.append(Point(e, s))
    return sorted(out.values(), key=lambda s: (s.kind, s.fingerprint, s.metric))


def _run(e: Entry) -> dict[str, Any]:
    return {
        "id": e.id,
        "created_at": e.created_at,
        "commit": e.git.commit,
        "branch": e.git.branch,
        "dirty": e.git.dirty,
        "path": e.path,
    }


def _direction(before: float, after: float, higher_is_better: bool) -> str:
    """From the step's sign (its relative change is NaN from a median of 0: a memory stage
    that held nothing before)."""
    if after == before:
        return "unchanged"
    worse = after < before if higher_is_better else after > before
    return "regression" if worse else "improvement"


def _below_band(cp: Any, series: Series, memory_threshold: float) -> bool:
    """A memory step inside the memory rule's band (a few pages or allocator blocks)."""
    rel = cp.rel_change
    return series.memory and math.isfinite(rel) and abs(rel) < memory_threshold


def _spike_below_band(index: int, series: Series, memory_threshold: float) -> bool:
    """A memory run off its nearer neighbours (3 runs each side) by less than the band: its
    noise is a few pages, so a robust score can call a trivial difference a spike."""
    if not series.memory:
        return False
    x = series.medians
    value = x[index]
    sides = [x[max(0, index - 3) : index], x[index + 1 : index + 4]]
    centres = [float(np.median(side)) for side in sides if side]
    off = [abs(value / c - 1.0) for c in centres if c > 0]
    return bool(off) and min(off) < memory_threshold


def check_series(
    series: Series,
    *,
    alpha: float,
    min_segment: int,
    confidence: float,
    seed: int = 0,
    memory_threshold: float = DEFAULT_MEMORY_THRESHOLD,
) -> dict[str, Any]:
    """Change points and outliers of one series, each tied to its runs (a memory series' steps
    inside `memory_threshold` left out, module doc)."""
    from mlbaseline.history import changepoints

    det = changepoints.detect(
        series.medians, alpha=alpha, min_segment=min_segment, confidence=confidence, seed=seed
    )
    pts = series.points
    changes = []
    for cp in det.change_points:
        if _below_band(cp, series, memory_threshold):
            continue
        first, last_before = pts[cp.index].entry, pts[cp.index - 1].entry
        changes.append(
            {
                **cp.to_dict(),
                "direction": _direction(cp.before, cp.after, series.higher_is_better),
                "run": _run(first),
                "previous_run": _run(last_before),
                "commit_range": [last_before.git.commit, first.git.commit],
            }
        )
    outliers = [
        {**o.to_dict(), "run": _run(pts[o.index].entry)}
        for o in det.outliers
        if not _spike_below_band(o.index, series, memory_threshold)
    ]
    return check_row(series, det.method, changes, outliers)


def check_row(
    series: Series,
    method: str | None,
    changes: list[dict[str, Any]] | None = None,
    outliers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The `check` row of one series (method None: too short to look for change points)."""
    row = {
        "kind": series.kind,
        "fingerprint": series.fingerprint,
        "metric": series.metric,
        "unit": series.unit,
        "higher_is_better": series.higher_is_better,
        "n": len(series.points),
        "method": method,
        "change_points": changes or [],
        "outliers": outliers or [],
    }
    return row if method is not None else row | {"too_short": True}


def trend_rows(series: Series) -> list[dict[str, Any]]:
    """The points of a series as plain rows (the `trend` table and its JSON)."""
    return [
        {
            "metric": series.metric,
            **_run(p.entry),
            "median": p.summary.median,
            "ci_low": p.summary.ci_low,
            "ci_high": p.summary.ci_high,
            "n": p.summary.n,
            "replicates": p.summary.replicates,
            "mde": p.summary.mde,
            "unit": p.summary.unit,
        }
        for p in series.points
    ]


__all__ = ["Point", "Series", "build_series", "check_series", "trend_rows"]
