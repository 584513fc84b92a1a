"""The history trend figure (`mlb history trend`, the report's History section) and its data.

One figure holds one result kind (a `run` record and a `throughput` result of the same metric
are different series: :func:`by_kind` splits a view), one axis per unit (seconds drawn in ms,
samples/s on their own axis: never one scaled onto the other), colours by metric (the legend
names metrics; a second comparable series of the same metric keeps its colour, dashed).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline.report.figures_style import SERIES_COLORS, new_figure, plt, save, styled

_STYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class TrendLine:
    """One line of the trend figure: a metric over the runs of one comparable series."""

    label: str
    positions: list[int]  # index of each point on the shared run axis
    medians: list[float]
    lows: list[float | None]
    highs: list[float | None]
    unit: str = ""  # the metric's unit ("s", "items/s", …); "" takes the view's
    kind: str = ""  # result kind of the series ("run", "throughput", …)
    series: str = ""  # which comparable series (fingerprint), when a metric has several


@dataclass(frozen=True)
class Mark:
    """A change point on the run axis."""

    position: int
    label: str
    suspected: bool = False
    kind: str = ""  # result kind of the series it was found in ("" : every kind)


@dataclass
class HistoryView:
    """What the history knows of a series: runs on one axis, lines, change points."""

    title: str
    unit: str
    runs: list[str]  # axis labels, "#12", oldest first
    lines: list[TrendLine] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)  # rows for the table
    store: str = ""


def kinds(view: HistoryView) -> list[str]:
    return list(dict.fromkeys(line.kind for line in view.lines))


def by_kind(view: HistoryView) -> list[HistoryView]:
    """One view per result kind among the lines (the view itself when it holds one)."""
    found = kinds(view)
    if len(found) < 2:
        return [view]
    out = []
    for kind in found:
        title = view.title.split(" (", 1)[0]
        out.append(
            replace(
                view,
                title=f"{title} ({kind})",
                lines=[ln for ln in view.lines if ln.kind == kind],
                marks=[m for m in view.marks if m.kind in ("", kind)],
            )
        )
    return out


def _scale(unit: str) -> tuple[float, str]:
    return (1e3, "ms") if unit == "s" else (1.0, unit or "value")


def _marks(ax: Any, view: HistoryView, labelled: bool) -> None:
    for mark in view.marks:
        ax.axvline(mark.position - 0.5, color="#c44e52", ls=":" if mark.suspected else "--")
        if labelled:
            ax.annotate(mark.label, (mark.position - 0.5, 1.0), xycoords=("data", "axes fraction"),
                        rotation=90, va="top", ha="right", fontsize=11,
                        color="#c44e52")  # fmt: skip


def draw_trend(view: HistoryView) -> plt.Figure:
    """Median per run with its CI band, one line per metric (and series), one axis per unit;
    change points as vertical lines (dashed: confirmed, dotted: suspected, needs more runs).
    Line gids: "trend|UNIT|LABEL"."""
    units = list(dict.fromkeys(line.unit or view.unit for line in view.lines)) or [view.unit]
    fig, axes = new_figure(len(units), 1, sharex=True, squeeze=False)
    axes = [a for row in axes for a in row]
    metrics = list(dict.fromkeys(line.label for line in view.lines))
    series = list(dict.fromkeys(line.series for line in view.lines))
    for ax, unit in zip(axes, units, strict=True):
        factor, shown = _scale(unit)
        for line in (ln for ln in view.lines if (ln.unit or view.unit) == unit):
            color = SERIES_COLORS[metrics.index(line.label) % len(SERIES_COLORS)]
            style = _STYLES[series.index(line.series) % len(_STYLES)]
            name = f"{line.label} ({line.series})" if len(series) > 1 else line.label
            x = np.asarray(line.positions)
            y = np.asarray(line.medians, dtype=float) * factor
            ax.plot(x, y, marker="o", ms=4, color=color, ls=style, label=name,
                    gid=f"trend|{unit}|{name}")  # fmt: skip
            low = np.array([np.nan if v is None else v for v in line.lows], dtype=float)
            high = np.array([np.nan if v is None else v for v in line.highs], dtype=float)
            ax.fill_between(x, low * factor, high * factor, alpha=0.2, color=color, linewidth=0)
        _marks(ax, view, labelled=ax is axes[0])
        ax.set_ylabel(f"median ({shown}), band: 95% CI")
        if len(ax.get_lines()) > 1 or len(units) > 1:
            ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    step = max(1, len(view.runs) // 20)  # at most ~20 run labels on the axis
    ticks = list(range(0, len(view.runs), step))
    axes[-1].set_xticks(ticks, [view.runs[i] for i in ticks], rotation=45, ha="right")
    axes[-1].set_xlabel("run (oldest → newest)")
    axes[0].set_title(view.title)
    return fig


@styled
def trend_figure(view: HistoryView, path: Path, force: bool = False) -> Path:
    """The trend of one kind into `path` (a view of several kinds: its first kind's lines)."""
    return save(draw_trend(by_kind(view)[0]), path, force)


def trend_figures(view: HistoryView, path: Path, force: bool = False) -> list[Path]:
    """One PNG per result kind: `path` for the first, `STEM-KIND.png` beside it for the rest."""
    views = by_kind(view)
    out = [trend_figure(views[0], path, force)]
    for v in views[1:]:
        kind = v.lines[0].kind if v.lines else "other"
        out.append(trend_figure(v, path.with_name(f"{path.stem}-{kind}{path.suffix}"), force))
    return out


__all__ = ["HistoryView", "Mark", "TrendLine", "by_kind", "draw_trend", "kinds", "trend_figure",
           "trend_figures"]  # fmt: skip
