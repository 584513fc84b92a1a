"""Command-line layer: parse → load config → call one runner → write → exit code.

Each command lives in its own module and registers itself on `app`; they are imported here in
the order `mlb --help` lists them. A missing module is an import error, never a silently
dropped command.
"""

from __future__ import annotations

# the order `mlb --help` lists the commands in; each import registers one
# isort: off
from mlbaseline.cli import (  # noqa: F401
    run,
    env_check,
    subset,
    throughput,
    attach,
    latency,
    dataloader,
    compare,
    ab,
    report,
    history,
)

# isort: on
from mlbaseline.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
