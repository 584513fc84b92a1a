"""The sections of `baseline_report.md`, as pure functions of a `ReportContext`.

Every section is always present; a section whose input is absent says "not measured" (and why)
instead of disappearing. Numbers come from the results' raw values: medians with seeded
bootstrap CIs (`mlbaseline.stats`), stage shares time-weighted (sum of stage / sum of total).
"""

from __future__ import annotations

from mlbaseline.formatting import milliseconds as ms
from mlbaseline.report.context import NOT_MEASURED, SECTIONS, TITLE, ReportContext
from mlbaseline.report.headline import HEADLINE, section_headline
from mlbaseline.report.sections_ab import section_ab
from mlbaseline.report.sections_findings import (
    section_method,
    section_predictions,
    section_signals,
    section_telemetry,
    section_warnings,
)
from mlbaseline.report.sections_history import section_history
from mlbaseline.report.sections_memory import section_memory
from mlbaseline.report.sections_performance import (
    section_dataloader,
    section_inference,
    section_latency,
    section_stages,
    section_training,
    stage_table,
)
from mlbaseline.report.sections_setup import (
    section_env_check,
    section_golden,
    section_hardware,
    section_subset,
    section_summary,
)

# importers reach these through this module
__all__ = [
    "HEADLINE",
    "NOT_MEASURED",
    "SECTIONS",
    "SECTION_FUNCTIONS",
    "TITLE",
    "ReportContext",
    "ms",
    "render_markdown",
    "stage_table",
]

SECTION_FUNCTIONS = (
    section_headline,  # the first screen: what was measured, figures, MDE, fired signals
    section_ab,  # an `mlb ab` result's verdicts, where one was given (else nothing)
    section_summary,
    section_hardware,
    section_golden,
    section_env_check,
    section_subset,
    section_training,
    section_stages,
    section_inference,
    section_latency,
    section_dataloader,
    section_memory,  # memory per stage and batch size, its figure, energy (and cost when set)
    section_telemetry,
    section_signals,
    section_predictions,
    section_warnings,
    section_method,
    section_history,
)


def render_markdown(ctx: ReportContext) -> str:
    """The whole report: the headline screen, then every section in order."""
    lines = [TITLE, ""]
    for fn in SECTION_FUNCTIONS:
        lines += fn(ctx)
    return "\n".join(lines).rstrip() + "\n"
