"""The forest plot of a comparison (`compare_forest.png`): ratio of medians new/old per metric.

The axis is logarithmic (a ratio is multiplicative: 0.8 and 1.25 are equally far from 1) and is
fitted to every metric's CI, so nothing is clipped to an edge; each row prints its ratio and CI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbaseline.formatting import number
from mlbaseline.report.figures_style import new_figure, plt, save, styled


@dataclass(frozen=True)
class ForestRow:
    """One metric of a comparison: ratio new/old with its CI and the verdict."""

    metric: str
    ratio: float
    low: float
    high: float
    verdict: str
    threshold: float


_VERDICT_COLORS = {
    "regressed": "#d62728",
    "improved": "#2ca02c",
    "unchanged": "#7f7f7f",
    "inconclusive": "#ff7f0e",
    "insufficient data": "#000000",
}
FOREST_PAD = 1.15  # the axis reaches this factor beyond the outermost CI end, each side
# tick sets, finest first: the finest with at least three ticks inside the axis is used
_TIERS = (
    (0.9, 0.95, 0.98, 1.0, 1.02, 1.05, 1.1),
    (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25),
    (0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0),
    (0.25, 0.5, 0.67, 1.0, 1.5, 2.0, 4.0),
    (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0),
    (0.01, 0.1, 1.0, 10.0, 100.0),
    (1e-4, 1e-2, 1.0, 1e2, 1e4),
)


def _positive(v: float) -> bool:
    return math.isfinite(v) and v > 0


def forest_limits(rows: Sequence[ForestRow]) -> tuple[float, float]:
    """The x range: every finite positive ratio and CI end, and the ±threshold band, inside."""
    thr = max((r.threshold for r in rows), default=0.03)
    ends = [v for r in rows for v in (r.low, r.ratio, r.high) if _positive(v)]
    lo = min([*ends, 1 - 2 * thr]) / FOREST_PAD
    hi = max([*ends, 1 + 2 * thr]) * FOREST_PAD
    return lo, hi


def _ticks(lo: float, hi: float) -> list[float]:
    """The finest tick set with at least three ticks inside (lo, hi) that spans at least 40%
    of the axis (log scale), so the ticks neither crowd the centre nor leave the ends bare."""
    for tier in _TIERS:
        inside = [t for t in tier if lo <= t <= hi]
        if len(inside) >= 3 and math.log(inside[-1] / inside[0]) >= 0.4 * math.log(hi / lo):
            return inside
    return [t for t in _TIERS[-1] if lo <= t <= hi] or [1.0]


def _value_text(r: ForestRow) -> str:
    ci = f"[{number(r.low)}, {number(r.high)}]" if _positive(r.low) else "[–]"
    return f"×{number(r.ratio)} {ci}"


def _legend_title(rows: Sequence[ForestRow]) -> str:
    """The colour key of the verdicts the rows have ("red: regressed · grey: unchanged")."""
    names = {"#d62728": "red", "#2ca02c": "green", "#7f7f7f": "grey", "#ff7f0e": "orange",
             "#000000": "black"}  # fmt: skip
    present = dict.fromkeys(r.verdict for r in rows)
    return " · ".join(f"{names.get(_VERDICT_COLORS.get(v, ''), 'black')}: {v}" for v in present)


def draw_forest(rows: Sequence[ForestRow]) -> plt.Figure:
    """Ratio of medians new/old with 95% CI per metric on a log axis that holds every CI, the
    ±threshold band shaded, each row's ratio and CI printed at the right edge."""
    fig, ax = new_figure(rows=len(rows))
    thr = max((r.threshold for r in rows), default=0.03)
    lo, hi = forest_limits(rows)
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows, strict=True):
        color = _VERDICT_COLORS.get(r.verdict, "black")
        a = r.low if _positive(r.low) else lo  # an open CI end runs to the edge, as an arrow
        b = r.high if _positive(r.high) else hi
        ax.plot([a, b], [yi, yi], color=color, linewidth=2.5, gid=f"ci|{r.metric}")
        if _positive(r.ratio):
            ax.plot([r.ratio], [yi], "o", color=color, markersize=8, gid=f"ratio|{r.metric}")
        for end, edge, marker in ((r.low, lo, "<"), (r.high, hi, ">")):
            if not _positive(end):
                ax.plot([edge], [yi], marker, color=color, markersize=10)
        ax.annotate(_value_text(r), (1.0, yi), xycoords=("axes fraction", "data"),
                    xytext=(8, 0), textcoords="offset points", va="center", fontsize=12,
                    color=color)  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = _ticks(lo, hi)
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.axvspan(1 - thr, 1 + thr, color="#eeeeee", zorder=0)
    ax.axvline(1.0, color="black", linewidth=1.2)
    ax.set_yticks(y, [r.metric for r in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("ratio of medians new/old (95% CI, log scale); band: ±threshold")
    ax.set_title(_legend_title(rows))
    return fig


@styled
def forest_figure(rows: Sequence[ForestRow], path: Path) -> Path:
    return save(draw_forest(rows), path)


__all__ = ["FOREST_PAD", "ForestRow", "draw_forest", "forest_figure", "forest_limits"]
