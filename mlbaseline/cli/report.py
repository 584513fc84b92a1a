"""`mlb report RESULT.json... | DIR -o OUTDIR [--html]`: a Markdown baseline report with PNG
figures, and with `--html` the same report as one self-contained HTML file beside it."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlbaseline import folderlock
from mlbaseline.cli.common import CommonOptions, Ui, command, dump_json, execute
from mlbaseline.cli.compare import AllowOpt
from mlbaseline.config import Config
from mlbaseline.errors import OutputExistsError, UsageError

DEFAULT_OUT = Path("mlb-report")


def check_out_dir(out: Path, force: bool) -> None:
    """A report goes into an empty (or new) folder; a non-empty one needs --force."""
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out}: exists and is not a folder")
    taken = out.is_dir() and any(not folderlock.is_lock_file(p) for p in out.iterdir())
    if taken and not force:
        raise OutputExistsError(f"{out}: folder is not empty (use --force to write into it)")


def _summary(output: Any) -> dict[str, Any]:
    return {
        "report": str(output.markdown_path),
        "html": None if output.html_path is None else str(output.html_path),
        "figures": [str(p) for p in output.figures],
        "signals": [s.to_dict() for s in output.signals],
        "predictions": [p.to_dict() for p in output.predictions],
    }


def _print(ui: Ui, output: Any) -> None:
    for line in output.measured:  # what was measured first, before any danger signal
        ui.print(escape(line))
    ui.print(f"[dim]report written to {output.markdown_path} ({len(output.figures)} figures)[/dim]")
    if output.html_path is not None:
        ui.print(f"[dim]HTML report (figures inline, views offline): {output.html_path}[/dim]")
    for line in output.danger_lines:  # as the report's headline has them, one per kind
        ui.print(f"[yellow]danger signal:[/yellow] {escape(line)}")


OutDirOpt = Annotated[
    Path, typer.Option("--output", "-o", help="Folder for baseline_report.md and figures/.")
]


@dataclass(frozen=True)
class ReportOptions:
    inputs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Result JSON files and/or folders of them (e.g. an `mlb run` folder).",
            show_default=False,
        ),
    ] = None
    compare: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            "--compare",
            metavar="OLD NEW",
            help="Render `mlb compare OLD NEW` (verdicts, attribution, forest plot) instead.",
            show_default=False,
        ),
    ] = None
    telemetry: Annotated[
        Path | None,
        typer.Option(
            "--telemetry",
            help="Telemetry CSV to show (default: the one the throughput result references).",
            show_default=False,
        ),
    ] = None
    allow_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-mismatch", help="With --compare: compare although blocking keys differ."
        ),
    ] = False
    allow: AllowOpt = None
    html: Annotated[
        bool,
        typer.Option(
            "--html",
            help="Also write the report as one self-contained HTML file beside the Markdown "
            "(figures inline, nothing fetched when viewed).",
        ),
    ] = False


@command("report", output=OutDirOpt, output_default=DEFAULT_OUT)
def report_command(common: CommonOptions, o: ReportOptions) -> None:
    """Write a Markdown baseline report with PNG figures from result files; never measures.

    Sections: hardware fingerprint and golden parameters, env checks, data subset, training
    and inference throughput with the stage breakdown, latency percentiles with the SLA,
    dataloader sweep with the knee, telemetry heat map, danger signals (each with its
    threshold) and change-impact predictions; an mlb ab result's verdicts per stage. Absent
    data is marked "not measured".

    Exit codes: 0 written, 2 bad input (no results, unreadable file, non-empty output folder
    without --force), 3 with --compare: not comparable.

    Example: mlb report mlb-results/demo -o report/

    Example: mlb report --compare old.json new.json -o compare-report/

    Example: mlb report mlb-results/demo -o report/ --html   (also report/baseline_report.html)
    """

    output = common.output or DEFAULT_OUT
    held = ExitStack()  # the folder's lock, from before the first file to the end

    def prepare(cfg: Config) -> None:
        if o.compare is not None and o.inputs:
            raise UsageError("give either result files/folders or --compare OLD NEW, not both")
        if o.compare is None and not o.inputs:
            raise UsageError("no input: give result files or folders, or --compare OLD NEW")
        if o.telemetry is not None and not o.telemetry.is_file():
            raise UsageError(f"--telemetry {o.telemetry}: no such file")
        if not (output.exists() and not output.is_dir()):  # a file: check_out_dir says so
            held.enter_context(folderlock.locked(output))  # one command per folder
        check_out_dir(output, common.force)

    def measure(cfg: Config, ui: Ui) -> None:
        if o.compare is not None:
            out = _render_compare(o.compare, cfg, o, output, common.force, ui)
        else:
            out = _render(o.inputs or [], output, o, common.force, ui, cfg)
        _print(ui, out)
        if common.json_out:
            sys.stdout.write(dump_json(_summary(out)))

    with held:
        execute(common, measure, prepare=prepare, outputs=())


def _render_compare(
    pair: tuple[Path, Path], cfg: Config, o: ReportOptions, output: Path, force: bool, ui: Ui
) -> Any:
    from mlbaseline.report.render import render_compare_report
    from mlbaseline.runners.compare_files import run_compare

    run = run_compare(pair[0], pair[1], cfg, o.allow_mismatch, ui.progress, o.allow or ())
    return render_compare_report(
        run.result.data, output, force=force, progress=ui.progress, html=o.html
    )


def _render(
    inputs: list[Path], output: Path, o: ReportOptions, force: bool, ui: Ui, cfg: Config
) -> Any:
    # imported here: matplotlib is slow to import and only this command needs it
    from mlbaseline.report.inputs import collect
    from mlbaseline.report.render import render_compare_report, render_report
    from mlbaseline.runners.history import report_view

    found = collect(inputs)
    for note in found.notes:
        ui.print(f"[dim]{note}[/dim]")
    compares = [i for i in found.items if i.result.kind == "compare"]
    if compares and len(compares) == len(found.items) and not found.manifest:
        return render_compare_report(
            compares[-1].result.data, output, force=force, progress=ui.progress, html=o.html
        )
    return render_report(
        found.items,
        output,
        telemetry_csv=o.telemetry,
        manifest=found.manifest,
        force=force,
        progress=ui.progress,
        history=report_view([i.result for i in found.items], cfg),
        html=o.html,
    )
