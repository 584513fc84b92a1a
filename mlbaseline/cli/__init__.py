"""Command-line layer: parse → load config → call one runner → write → exit code.

Each command lives in its own module and registers itself on `app`; they are imported here in
the order `mlb --help` lists them.
"""

from __future__ import annotations

import importlib
import importlib.util

from mlbaseline.cli.app import app

COMMAND_MODULES = (
    "run",
    "env_check",
    "subset",
    "throughput",
    "latency",
    "dataloader",
    "compare",
    "report",
)

for _name in COMMAND_MODULES:
    if importlib.util.find_spec(f"mlbaseline.cli.{_name}") is not None:
        importlib.import_module(f"mlbaseline.cli.{_name}")


def main() -> None:
    app()


__all__ = ["app", "main"]
