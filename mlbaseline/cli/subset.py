"""`mlb subset SOURCE -o DIR`: the stratified, reproducible baseline subset, KL-validated."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mlbaseline.cli.common import CommonOptions, Ui, command, execute
from mlbaseline.config import Config
from mlbaseline.errors import OutputError, UsageError
from mlbaseline.results import Result
from mlbaseline.runners.subset import RESULT_NAME, run_subset

PLAN_ROWS_SHOWN = 30


class Strategy(StrEnum):
    proportional = "proportional"
    balanced = "balanced"


class Link(StrEnum):
    copy = "copy"
    hardlink = "hardlink"
    symlink = "symlink"


class ExtractorName(StrEnum):
    stats = "stats"
    resnet18 = "resnet18"


def _fmt(value: Any, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _show(result: Result, ui: Ui, all_rows: bool) -> None:
    if ui.quiet:
        return
    from mlbaseline.documents.data_subset import Data
    from mlbaseline.report.payloads import typed_data  # numpy: not at `mlb` startup

    data = typed_data(result, Data)
    table = Table(title=f"subset plan: {data.strategy}, n={data.n}", title_justify="left")
    # the per-class KL is shown, not judged: the verdict is the mean KL (the line below)
    for header in ("class", "images", "quota", "selected", "corrupt", "KL (info)"):
        table.add_column(header, justify="left" if header == "class" else "right", no_wrap=True)
    rows = data.plan or []
    per_class = data.kl.per_class if data.kl is not None else {}
    shown = rows if all_rows else rows[:PLAN_ROWS_SHOWN]
    for row in shown:
        table.add_row(
            row.class_,
            str(row.images),
            str(row.quota),
            "—" if row.selected is None else str(row.selected),
            "—" if row.corrupt_excluded is None else str(row.corrupt_excluded),
            _fmt(per_class.get(row.class_)),
        )
    if len(rows) > len(shown):
        table.add_row(f"… {len(rows) - len(shown)} more (see the result JSON)", "", "", "", "", "")
    ui.print(table)
    index = data.index
    ui.print(
        f"{index.images if index else 0} images in {index.classes if index else 0} classes; "
        f"{index.ignored_files if index else 0} other files ignored"
    )
    if data.dry_run:
        ui.print("[dim]dry run: nothing decoded, nothing written[/dim]")
        return
    for t in data.tries or []:
        mark = "[green]pass[/green]" if t.passed else "[red]fail[/red]"
        ui.print(f"seed {t.seed}: mean KL {_fmt(t.kl_mean)} {mark}")
    kl, reference = data.kl, data.reference
    if kl is not None and reference is not None:
        ui.print(
            f"kept seed {data.seed}: mean KL {_fmt(kl.mean)} (threshold {kl.threshold}; the "
            f"verdict), class-proportion KL {_fmt(kl.class_proportion)}, reference "
            f"{reference.size} images"
        )
    if data.output:
        ui.print(f"[dim]subset written to {data.output}[/dim]")


def _rebase_artifacts(result: Result, out_dir: Path, result_file: Path) -> Result:
    """Artifacts are paths relative to the JSON; a copy elsewhere needs them rebased."""
    base = result_file.resolve().parent
    result.artifacts = {
        name: os.path.relpath(out_dir.resolve() / rel, base)
        for name, rel in result.artifacts.items()
    }
    return result


DATA_HELP = "ImageFolder dataset (one sub-folder per class)."
SubsetDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help=f"Subset folder to create (holds the files, the manifest and {RESULT_NAME}).",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class SubsetOptions:
    n: Annotated[
        int | None,
        typer.Option("--n", "-n", help="Subset size (default: golden.subset_size).", min=1),
    ] = None
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed (default: golden.seed, 42).", min=0)
    ] = None
    strategy: Annotated[
        Strategy | None,
        typer.Option(
            "--strategy",
            help="proportional: largest remainder by class share (default). balanced: n // k "
            "per class, remainder to the largest classes.",
            show_default=False,
        ),
    ] = None
    link: Annotated[
        Link | None,
        typer.Option("--link", help="copy (default), hardlink or symlink.", show_default=False),
    ] = None
    extractor: Annotated[
        ExtractorName | None,
        typer.Option(
            "--extractor", help="KL features: stats (default) or resnet18.", show_default=False
        ),
    ] = None
    weights: Annotated[
        Path | None,
        typer.Option(
            "--weights",
            help="Local resnet18 state dict (else a fixed-seed random init).",
            show_default=False,
        ),
    ] = None
    reference_max: Annotated[
        int | None,
        typer.Option(
            "--reference-max", help="Full-set side: at most this many images (10000).", min=1
        ),
    ] = None
    retries: Annotated[
        int | None,
        typer.Option("--retries", help="Try this many seeds, keep the lowest KL.", min=1),
    ] = None
    keep_corrupt: Annotated[
        bool, typer.Option("--keep-corrupt", help="Keep images that fail to decode.")
    ] = False
    save_tensors: Annotated[
        bool, typer.Option("--save-tensors", help="Also write baseline_subset.pt (uint8 tensors).")
    ] = False
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the per-class plan; write nothing.")
    ] = False
    result_file: Annotated[
        Path | None,
        typer.Option("--result", help="Also write the result JSON here.", show_default=False),
    ] = None


@command("subset", output=SubsetDirOpt, data=DATA_HELP)
def subset_command(common: CommonOptions, o: SubsetOptions) -> None:
    """Draw a stratified, reproducible subset of an image-folder dataset and check with a
    Gaussian KL test that it represents the full set.

    The same seed and input always give the same files. The source is only read; an output
    inside it is refused; a non-empty output needs --force (and must be an earlier subset);
    Ctrl-C leaves nothing half-made. The manifest's SHA-256 goes into the result so that
    `mlb compare` refuses baselines built on different subsets.

    Exit codes: 0 KL passed, 1 KL failed, 2 bad input, 130 interrupted.

    Example: mlb subset data/train -o baseline_subset --n 1024 --seed 42
    """
    overrides = {
        "golden.seed": o.seed,
        "subset.n": o.n,
        "subset.strategy": o.strategy.value if o.strategy else None,
        "subset.link": o.link.value if o.link else None,
        "subset.extractor": o.extractor.value if o.extractor else None,
        "subset.weights": str(o.weights) if o.weights else None,
        "subset.reference_max": o.reference_max,
        "subset.retries": o.retries,
        "subset.keep_corrupt": True if o.keep_corrupt else None,
        "subset.save_tensors": True if o.save_tensors else None,
        "subset.source": str(common.data) if common.data else None,
    }
    folder = common.output  # -o is the subset folder; the result JSON goes to --result
    common = replace(common, output=o.result_file)

    def prepare(cfg: Config) -> None:
        if o.dry_run and o.result_file is not None:
            raise UsageError("--dry-run writes nothing: drop --result (use --json to see it)")
        _refuse_inside_source(o.result_file, cfg.subset.source)

    def measure(cfg: Config, ui: Ui) -> Result:
        src = Path(cfg.subset.source) if cfg.subset.source else None
        return run_subset(cfg, src, folder, ui.progress, dry_run=o.dry_run, force=common.force)

    def render(result: Result, ui: Ui) -> None:
        _show(result, ui, all_rows=o.dry_run)
        if o.result_file is not None and folder is not None:
            _rebase_artifacts(result, folder, o.result_file)

    execute(common, measure, overrides, prepare=prepare, render=render)


def _refuse_inside_source(result_file: Path | None, source: str | None) -> None:
    src = Path(source) if source else None
    if result_file is None or src is None or not src.exists():
        return
    if result_file.resolve().is_relative_to(src.resolve()):
        raise OutputError(f"{result_file}: inside the source tree; choose another path")
