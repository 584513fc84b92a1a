"""The "History" section of the report and the trend figure (`mlb history trend`, `mlb report`).

The report never reads the store itself (report sits beside history in layer 1, not above it):
the runner hands it a :class:`HistoryView` — plain numbers per line, change points by position —
and this module draws and writes it. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlbaseline.formatting import interval_percent, signed_percent
from mlbaseline.report.context import SECTIONS, ReportContext, figure, not_measured, table

# the trend's data and drawing live with the other figures; re-exported for their callers
from mlbaseline.report.figures_history import HistoryView, Mark, TrendLine, trend_figure

HEADING = SECTIONS[15]


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
