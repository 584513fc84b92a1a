"""The Typer application object (only the `cli` package imports typer)."""

from __future__ import annotations

import sys
from typing import Any

import typer
import typer.core

from mlbaseline.cli.helptext import PlainGroup
from mlbaseline.cli.streams import silence

# the Click that Typer runs on: its own copy from Typer 0.2x (`typer._click`), Click before
_CLICK: Any = getattr(typer.core, "_click", None) or getattr(typer.core, "click", None)
_ERRORS: Any = _CLICK.exceptions


class RootGroup(PlainGroup):
    """`mlb` itself: an error the argument parser finds (an unknown option, a missing
    argument, a value out of range, an unknown command) is bad input like any other, so it
    is one line, `Error: …` with where help is, exit 2 (DESIGN.md's exit codes), not Click's
    usage block; everything else goes Typer's way."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _ERRORS.NoArgsIsHelpError as exc:  # `mlb` alone: its help
            exc.show()
            sys.exit(exc.exit_code)
        except _ERRORS.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "mlb"
            message = " ".join(exc.format_message().split())
            print(f"Error: {message} ({where} -h for help)", file=sys.stderr)
            sys.exit(2)
        except _ERRORS.ClickException as exc:
            print(f"Error: {' '.join(exc.format_message().split())}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except typer.Abort:  # Click's own Abort, re-exported by Typer before 0.2x
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        except BrokenPipeError:  # stdout's reader left (`mlb … --json - | head`): files written
            silence(sys.stdout)  # by then stay; nobody is left to read an error line
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="mlb",
    cls=RootGroup,  # --help spells values as words, never <bool>; parser errors in one line
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
