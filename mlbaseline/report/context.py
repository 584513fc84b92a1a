"""What every section of `baseline_report.md` reads (:class:`ReportContext`), the headings,
and the small helpers the sections share (a table, a "not measured" line, a figure link)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline.formatting import markdown_table
from mlbaseline.report import payloads
from mlbaseline.report.data import Telemetry
from mlbaseline.report.signals import Prediction, Signal
from mlbaseline.results import Result

TITLE = "# mlb baseline report"
SECTIONS = (
    "## Summary",
    "## Hardware and software",
    "## Golden parameters",
    "## Environment checks",
    "## Data subset",
    "## Training throughput",
    "## Training stage breakdown",
    "## Inference throughput",
    "## Latency",
    "## Data loading",
    "## Telemetry",
    "## Danger signals",
    "## Change-impact predictions",
    "## Warnings and notes",
    "## Method",
    "## History",  # last: the sections above index this tuple by position
)
NOT_MEASURED = "_Not measured"
LATENCY_QS = (50, 90, 95, 99)


@dataclass
class ReportContext:
    """Everything the sections read: results (with their files), telemetry, figures, findings."""

    results: list[Result]
    sources: list[Path | None]
    telemetry: Telemetry | None = None
    telemetry_note: str = ""
    figures: dict[str, str] = field(default_factory=dict)  # figure name -> relative path
    signals: list[Signal] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    subset: payloads.SubsetFacts | None = None
    history: Any = None  # sections_history.HistoryView: the series these results belong to
    runs: list[Result] = field(default_factory=list)  # `run` results: only their own status

    def of_kind(self, kind: str) -> list[Result]:
        return [r for r in self.results if r.kind == kind]


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table followed by a blank line."""
    return [*markdown_table(headers, rows), ""]


def not_measured(why: str) -> list[str]:
    return [f"{NOT_MEASURED}: {why}._", ""]


def figure(ctx: ReportContext, name: str, alt: str) -> list[str]:
    rel = ctx.figures.get(name)
    return [f"![{alt}]({rel})", ""] if rel else []


def details(summary: str, body: Sequence[str]) -> list[str]:
    """A collapsed block (`<details>`): the appendix material a reader opens on purpose.
    Blank lines around the body let Markdown inside it render (GitHub, CommonMark)."""
    return [f"<details><summary>{summary}</summary>", "", *body, "</details>", ""]


def opt(v: Any, fmt: Any = str, missing: str = "–") -> str:
    return missing if v is None else fmt(v)
