"""The "History" section of the report and the trend figure (`mlb history trend`, `mlb report`).

The report never reads the store itself (report sits beside history in layer 1, not above it):
the runner hands it a :class:`HistoryView` — plain numbers per line, change points by position —
and this module draws and writes it. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline.formatting import interval_percent, signed_percent
from mlbaseline.report.context import SECTIONS, ReportContext, figure, not_measured, table
from mlbaseline.report.figures import _save, new_figure, styled

HEADING = SECTIONS[15]


@dataclass(frozen=True)
class TrendLine:
    """One line of the trend figure: a metric over the runs of one comparable series."""

    label: str
    positions: list[int]  # index of each point on the shared run axis
    medians: list[float]
    lows: list[float | None]
    highs: list[float | None]


@dataclass(frozen=True)
class Mark:
    """A change point on the run axis."""

    position: int
    label: str
    suspected: bool = False


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


def _scale(unit: str) -> tuple[float, str]:
    return (1e3, "ms") if unit == "s" else (1.0, unit)


@styled
def trend_figure(view: HistoryView, path: Path, force: bool = False) -> Path:
    """Median per run with its CI band, one line per metric; change points as vertical lines
    (dashed: confirmed, dotted: suspected, needs more runs)."""
    factor, unit = _scale(view.unit)
    fig, ax = new_figure()
    for line in view.lines:
        x = np.asarray(line.positions)
        y = np.asarray(line.medians, dtype=float) * factor
        (drawn,) = ax.plot(x, y, marker="o", ms=4, label=line.label)
        low = np.asarray([np.nan if v is None else v for v in line.lows], dtype=float) * factor
        high = np.asarray([np.nan if v is None else v for v in line.highs], dtype=float) * factor
        ax.fill_between(x, low, high, alpha=0.2, color=drawn.get_color(), linewidth=0)
    for mark in view.marks:
        ax.axvline(mark.position - 0.5, color="#c44e52", ls=":" if mark.suspected else "--")
        ax.annotate(
            mark.label,
            (mark.position - 0.5, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="top",
            ha="right",
            fontsize=11,
            color="#c44e52",
        )
    step = max(1, len(view.runs) // 20)  # at most ~20 run labels on the axis
    ticks = list(range(0, len(view.runs), step))
    ax.set_xticks(ticks, [view.runs[i] for i in ticks], rotation=45, ha="right")
    ax.set_xlabel("run (oldest → newest)")
    ax.set_ylabel(f"median ({unit}), band: 95% CI")
    ax.set_title(view.title)
    if len(view.lines) > 1:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, path, force)


def change_rows(changes: Sequence[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for c in changes:
        commits = [(x or "?")[:8] for x in c.get("commit_range") or [None, None]]
        rows.append(
            [
                c["metric"],
                f"#{c['run']['id']}",
                f"{commits[0]}..{commits[1]}",
                signed_percent(c["rel_change"]),
                interval_percent([c.get("ci_low"), c.get("ci_high")]),
                c["status"] + ("" if c["status"] == "confirmed" else " (needs more runs)"),
            ]
        )
    return rows


def section_history(ctx: ReportContext) -> list[str]:
    lines = [HEADING, ""]
    view: HistoryView | None = getattr(ctx, "history", None)
    if view is None or not view.lines:
        return lines + not_measured(
            "the history store has no series of earlier comparable results for these results"
        )
    lines += [f"{view.title}: {len(view.runs)} comparable runs in `{view.store}`.", ""]
    lines += figure(ctx, "history", "median per run with its 95% CI, change points marked")
    if view.changes:
        headers = ("metric", "first run", "commits", "step", "CI", "status")
        lines += table(headers, change_rows(view.changes))
    else:
        lines += ["No change point in the series.", ""]
    return lines


__all__ = [
    "HEADING",
    "HistoryView",
    "Mark",
    "TrendLine",
    "change_rows",
    "section_history",
    "trend_figure",
]
