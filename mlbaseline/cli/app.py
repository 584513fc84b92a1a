"""The Typer application object (only the `cli` package imports typer)."""

from __future__ import annotations

import typer

from mlbaseline.cli.helptext import PlainGroup

app = typer.Typer(
    name="mlb",
    cls=PlainGroup,  # --help spells values as words, never <bool>
    help=(
        "mlb — a performance baseline for PyTorch projects that is reproducible, decomposable "
        "and attributable.\n\n"
        "Example: mlb run   (env-check, dataloader, throughput, latency and a report, on the "
        "built-in demo profile: no data, no GPU needed)\n\n"
        "Exit codes: 0 ok, 1 a verdict failed, 2 bad input, 3 not comparable / not possible "
        "here, 130 interrupted (143 SIGTERM, 129 SIGHUP)."
    ),
    no_args_is_help=True,
    # markdown: docstring paragraphs are re-wrapped to the terminal, blank lines kept
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root() -> None:
    # A callback keeps `mlb` a command group even while only one command is registered
    # (Typer would otherwise run that command as `mlb` itself).
    pass
