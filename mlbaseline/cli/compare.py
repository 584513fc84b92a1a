"""`mlb compare OLD NEW`: two-gate verdicts per metric, attribution, comparability."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mlbaseline.cli.common import CommonOptions, Notes, Ui, command, compact_table, execute
from mlbaseline.comparison.cost import compare_cost_lines
from mlbaseline.config import Config
from mlbaseline.report import comparison as cmp
from mlbaseline.report.headline import workload_text
from mlbaseline.results import Result
from mlbaseline.runners.compare_files import CompareRun, run_compare
from mlbaseline.safewrite import write_text

# --allow KEY, one spelling and help for `mlb compare`, `mlb history gate`, `mlb report --compare`
AllowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        metavar="KEY",
        help="Compare although this blocking key differs (repeatable), e.g. --allow image_size "
        "for workload.image_size; listed as an allowed difference, verdicts not marked.",
        show_default=False,
    ),
]


class FailOn(StrEnum):
    regressed = "regressed"
    any = "any"
    never = "never"


# --fail-on and --threshold: one spelling, choice list and help for compare and history gate
FailOnOpt = Annotated[
    FailOn | None,
    typer.Option(
        "--fail-on",
        help="regressed: exit 1 on any regressed metric (default). any: exit 1 unless every "
        "metric of OLD is unchanged or improved (inconclusive, not judged or missing from NEW "
        "also fail). never: exit 0 after any comparison.",
        show_default=False,
    ),
]
ThresholdOpt = Annotated[
    float | None,
    typer.Option(
        "--threshold",
        help="Practical threshold as a fraction (default 0.03 = 3%); per-metric overrides "
        "in compare.thresholds.",
        show_default=False,
    ),
]

_STYLE = {
    "regressed": "red",
    "improved": "green",
    "unchanged": "",
    "inconclusive": "yellow",
    "insufficient data": "yellow",
}
CAPTION = (
    "p: per-process figures, t on logs; step first, then its stages (Holm); "
    "MDE: smallest change seen"
)


def _prefix(metric: dict[str, Any]) -> str:
    return metric.get("group") or metric["metric"].rpartition(".")[0]


def _verdict_cell(r: dict[str, str], notes: Notes) -> str:
    """The verdict word (and † when compared across a blocking difference) in the cell; its
    reason, e.g. `need ~437 repl./side`, as a numbered note under the table."""
    text = r["verdict"].removesuffix(" †")
    # "insufficient data" would not fit an 80-column table: its first word, the reason below
    cell = r["status"].split()[0] + r["verdict"][len(text) :]
    reason = text[len(r["status"]) :].strip().removeprefix("(").removesuffix(")")
    if reason:
        cell += f" {escape(notes.mark(reason))}"
    style = _STYLE[r["status"]]
    return f"[{style}]{cell}[/{style}]" if style else cell


def _metric_table(doc: dict[str, Any], notes: Notes) -> Table:
    """Metrics under a row per group prefix, so names stay short enough for an 80-column log;
    no cell wraps or is cut (reasons go to `notes`)."""
    conf = round(100 * doc["settings"]["confidence"])
    title = f"{doc['old']['label']} → {doc['new']['label']}"
    # too wide for the terminal: the verdict stays beside Δ, old / new / MDE go below
    caption = CAPTION + ("; .mem.*: memory's own rule, no test" if doc.get("memory") else "")
    table = compact_table(title, caption=caption, secondary=("old", "new", "MDE"))
    table.add_column("metric", no_wrap=True)  # never cut: a truncated name is useless
    adjusted = cmp.drift_adjusted(doc)  # then the adjusted Δ gets its own column (‡)
    headers = ("old", "new", "Δ%", f"{conf}% CI", *(("adj. Δ%",) if adjusted else ()), "p", "MDE")
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    group = None
    for m, r in zip(doc["metrics"], cmp.table_rows(doc), strict=True):
        prefix = _prefix(m)
        if prefix != group:
            group = prefix
            table.add_row(f"[bold]{prefix}[/bold]" if prefix else "")
        name = m["metric"][len(prefix) :] if prefix else m["metric"]
        cells = (r["old"], r["new"], r["delta"], r["ci"])
        cells += (r["adjusted"],) if adjusted else ()
        cells += (r["p"], r["mde_compact"])
        table.add_row(f"  {name}", *cells, _verdict_cell(r, notes))
    return table


def _stage_table(a: dict[str, Any]) -> Table:
    title = f"attribution: {a['total']} (Δ {cmp.format_value(a['delta'], a['unit'], True)})"
    table = compact_table(title, caption=f"CI: {cmp.ATTRIBUTION_METHOD}")
    table.add_column("stage", no_wrap=True)
    for header in ("Δ", "Δ/old total", "CI", "share"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for r in cmp.stage_rows(a):
        table.add_row(r["stage"], r["delta"], r["pct"], r["ci"], r["share"], r["verdict"])
    return table


def _memory_table(a: dict[str, Any]) -> Table:
    """The bytes each stage of a group holds at its end, old and new, with the verdicts."""
    note = cmp.MEMORY_NOTE.removeprefix("\\")
    table = compact_table(f"memory: {a['group']} (held at each stage's end)", caption=note)
    table.add_column("stage", no_wrap=True)
    for header in ("old", "new", "Δ", "Δ%"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for r in cmp.memory_rows(a):
        table.add_row(r["stage"], r["old"], r["new"], r["delta"], r["change"], r["verdict"])
    return table


def _show_memory(doc: dict[str, Any], ui: Ui) -> None:
    """Per group, the stages' held memory when its peak (or a stage) moved, and the sentence."""
    for a in doc.get("memory") or []:
        moved = {a["peak_verdict"], *(r["verdict"] for r in a["stages"])}
        if a["stages"] and moved & {"regressed", "improved"}:
            ui.print(_memory_table(a))
        ui.print(f"[bold]{escape(a['sentence'])}[/bold]")


def _show(doc: dict[str, Any], ui: Ui, measured: str = "") -> None:
    if ui.quiet:
        return
    notes = Notes()
    ui.print(f"[bold]{escape(cmp.headline_text(doc))}[/bold]")
    if measured:
        ui.print(escape(measured))
    ui.print(_metric_table(doc, notes))
    notes.print(ui)
    ui.print(f"[dim]{cmp.threshold_text(doc)}[/dim]")
    if doc["blocking_differences"]:
        ui.print(
            "[red]† not comparable, compared anyway (--allow-mismatch):[/red] "
            + cmp.describe_differences(doc["blocking_differences"])
        )
    for a in doc["attribution"]:
        if a["total_verdict"] in ("regressed", "improved"):
            ui.print(_stage_table(a))
        ui.print(f"[bold]{a['sentence']}[/bold]")
    _show_memory(doc, ui)
    for label, names in (
        (doc["old"]["label"], doc["only_old"]),
        (doc["new"]["label"], doc["only_new"]),
    ):
        if names:
            ui.print(f"only in {label} (not compared): {', '.join(names)}")
    residuals = [s["metric"] for s in doc["skipped"] if s["code"] == cmp.SKIP_RESIDUAL]
    if residuals:  # one line, not one per group: they are expected and carry no verdict
        ui.print(
            f"[dim]not judged ({len(residuals)} residuals, median near 0; see the "
            f"attribution): {', '.join(residuals)}[/dim]"
        )
    for s in doc["skipped"]:
        if s["code"] != cmp.SKIP_RESIDUAL:
            ui.print(f"[dim]not judged: {s['metric']} — {s['reason']}[/dim]")
    for line in cmp.difference_lines(doc):
        ui.print(f"[dim]{escape(line)}[/dim]")
    ui.print(cmp.summary_line(doc))


def measured_line(old: Result, new: Result) -> str:
    """What the two results measured (the report's "Measured" line), once where it is the
    same: the headline's change is read against it."""
    a, b = workload_text([old]), workload_text([new])
    return f"measured: {a}" if a == b else f"measured: old {a}; new {b}"


@dataclass(frozen=True)
class CompareOptions:
    old: Annotated[Path, typer.Argument(help="Baseline result JSON.", show_default=False)]
    new: Annotated[Path, typer.Argument(help="Candidate result JSON.", show_default=False)]
    fail_on: FailOnOpt = None
    allow_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-mismatch",
            help="Compare although a blocking environment key differs; every verdict is marked.",
        ),
    ] = False
    allow: AllowOpt = None
    threshold: ThresholdOpt = None
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            help="Write a Markdown summary here (for a CI comment).",
            show_default=False,
        ),
    ] = None


@command("compare")
def compare_command(common: CommonOptions, o: CompareOptions) -> None:
    """Compare two results of the same kind, metric by metric, and name the stage that moved.

    The first line is the headline: the step's verdict, change and CI, and the smallest change
    this pair could see. One figure per fresh process is compared (Student's t on their logs);
    the step is judged first, its stages after it (Holm). A metric is regressed/improved only
    when p < alpha AND the whole CI of the ratio lies beyond the practical threshold; unchanged
    when the CI lies inside it and includes 0; otherwise inconclusive (with the replicates that
    would settle it); one process a side: insufficient data.
    A blocking environment difference (GPU, driver, CUDA, cuDNN, torch, device, dtype, golden
    parameters, subset hash) or workload identity (dataset, image size, sequence shape, classes,
    batch sizes, data pipeline) exits 3 unless each key is given with --allow KEY (listed, not
    marked) or --allow-mismatch (every key, every verdict marked). Model, loss and optimizer
    changes are the change under test: listed on a line of their own.

    Exit codes: 0 the gate passed, 1 it failed (see --fail-on), 2 bad input, 3 not comparable.

    Example: mlb compare baseline.json new.json --markdown compare.md -o compare.json
    """
    overrides = {
        "compare.fail_on": o.fail_on.value if o.fail_on else None,
        "compare.threshold": o.threshold,
    }

    runs: list[CompareRun] = []  # the two files as measure() read them, for render()

    def measure(cfg: Config, ui: Ui) -> Result:
        runs.append(run_compare(o.old, o.new, cfg, o.allow_mismatch, ui.progress, o.allow or ()))
        return runs[-1].result

    def render(result: Result, ui: Ui) -> None:
        pair = (runs[-1].old, runs[-1].new)
        _show(result.data, ui, measured_line(*pair))
        if not ui.quiet:  # cost per 1k samples where a price is set (never invented)
            for line in compare_cost_lines(*pair, result.config.get("cost")):
                ui.print(f"[dim]{escape(line)}[/dim]")
        if o.markdown is not None:
            write_text(o.markdown, cmp.render_markdown(result.data), force=common.force)
            ui.print(f"[dim]markdown written to {o.markdown}[/dim]")

    execute(common, measure, overrides, outputs=(common.output, o.markdown), render=render)
