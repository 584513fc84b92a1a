"""`mlb run`: parse → load config → run_baseline → summary on stderr → exit code."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from mlbaseline.cli.common import CommonOptions, Ui, command, execute
from mlbaseline.cli.throughput import REPEATS_HELP, parse_repeats
from mlbaseline.config import Config
from mlbaseline.results import Result

STATUS_STYLE = {"complete": "green", "interrupted": "yellow", "failed": "red"}
VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "red"}


def phase_table(baseline: Result) -> Table:
    from mlbaseline.documents.data_run import Data
    from mlbaseline.report.payloads import typed_data  # numpy: not at `mlb` startup

    table = Table(title="mlb run", title_justify="left")
    for col in ("phase", "status", "verdict", "file"):
        table.add_column(col)
    for entry in typed_data(baseline, Data).phases:
        if isinstance(entry, str):  # a hand-written run file may name only a phase's file
            table.add_row("-", "?", "-", escape(entry))
            continue
        status, verdict = entry.status or "?", entry.verdict or "-"
        table.add_row(
            escape(str(entry.phase)),
            f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]",
            f"[{VERDICT_STYLE.get(verdict, 'white')}]{verdict}[/]",
            escape(entry.file or entry.error or "-"),
        )
    return table


def _print_outcome(
    ui: Ui, baseline: Result, out_dir: Path, report: Path | None, html: bool = False
) -> None:
    ui.print(phase_table(baseline))
    failed = [c for c in baseline.verdict.checks if c.status == "fail"]
    for check in failed[:10]:
        ui.print(f"[red]fail[/red] {escape(check.name)}: {escape(check.message)}")
    for note in baseline.notes:
        ui.print(f"[yellow]note:[/yellow] {escape(note)}")
    ui.print(f"results in [bold]{escape(str(out_dir))}[/bold]")
    if report is not None:
        ui.print(f"report: [bold]{escape(str(report))}[/bold]")
        if html:  # written beside the Markdown, named after it
            ui.print(f"HTML report: [bold]{escape(str(report.with_suffix('.html')))}[/bold]")


def _run_with_probe(cfg: Config, out_dir: Path, ui: Ui, **options: Any) -> Any:
    """`run_baseline` with the GPU probe opened for the run and always closed."""
    from mlbaseline.measure.gpu import default_probe
    from mlbaseline.runners.run import run_baseline

    probe = default_probe()
    try:
        return run_baseline(cfg, out_dir, probe, ui.progress, **options)
    finally:
        probe.close()


DATA_HELP = "Image-folder dataset: a subset is drawn from it and measured."
RunOutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Folder for every result (default: mlb-results/\\<UTC timestamp\\>/).",
        show_default=False,
    ),
]
IgnoreEnvOpt = Annotated[
    bool, typer.Option("--ignore-env", help="Measure even when env-check fails (result marked).")
]
SkipOpt = Annotated[
    str | None,
    typer.Option(
        "--skip", help="Phases to leave out, e.g. latency,dataloader.", show_default=False
    ),
]


RepeatsOpt = Annotated[
    str | None, typer.Option("--repeats", help=REPEATS_HELP, show_default=False, metavar="N|auto")
]
HtmlOpt = Annotated[
    bool,
    typer.Option(
        "--html",
        help="Also write the report as baseline_report.html: one self-contained file, "
        "figures inline, nothing fetched when viewed.",
    ),
]


@command("run", output=RunOutputOpt, data=DATA_HELP)
def run(
    common: CommonOptions,
    ignore_env: IgnoreEnvOpt = False,
    skip: SkipOpt = None,
    repeats: RepeatsOpt = None,
    html: HtmlOpt = False,
) -> None:
    """The whole baseline in one go: env-check → (subset) → dataloader → throughput → latency →
    report.

    Everything lands in one folder: each phase's result JSON, the telemetry CSV of the whole
    run, a combined baseline.json (kind run) and baseline_report.md with its figures. The
    default profile (demo) needs no data and no GPU. A failed env-check stops the run (exit 1)
    unless --ignore-env; Ctrl-C keeps the phases already done and marks the run interrupted.

    Example: mlb run -o mlb-results/first   (then: mlb compare mlb-results/first/baseline.json
    mlb-results/second/baseline.json)
    """

    overrides = {
        "subset.source": str(common.data) if common.data else None,
        "throughput.repeats": parse_repeats(repeats),
    }
    skipped = {s.strip() for s in (skip or "").split(",") if s.strip()}
    done: dict[str, Any] = {}  # the folder and the report, for the summary

    held = ExitStack()

    def measure(cfg: Config, ui: Ui) -> Result:
        from mlbaseline.runners.run import default_output_dir, lock_run_dir

        done["dir"] = out_dir = common.output or default_output_dir()
        # one run per folder, from before its first file to after its history record
        held.enter_context(lock_run_dir(out_dir, skipped))
        outcome = _run_with_probe(
            cfg, out_dir, ui, ignore_env=ignore_env, skip=skipped, force=common.force, html=html
        )
        done["report"] = outcome.report_path
        return outcome.baseline

    def render(baseline: Result, ui: Ui) -> None:
        _print_outcome(ui, baseline, done["dir"], done["report"], html)

    def written(baseline: Result) -> Path:
        # baseline.json holds every phase's metrics: the one file of a run the history records
        from mlbaseline.runners.run import BASELINE

        return Path(done["dir"]) / BASELINE

    with held:
        execute(common, measure, overrides, outputs=(), render=render, write=False, written=written)
