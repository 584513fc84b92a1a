"""`mlb env-check`: parse → load config → run the checks → table on stderr → emit."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from mlbaseline.cli.common import CommonOptions, Ui, command, execute
from mlbaseline.cli.tables import StackTable
from mlbaseline.config import Config
from mlbaseline.measure.gpu import default_probe
from mlbaseline.report.checks import display
from mlbaseline.results import Check, Result
from mlbaseline.runners.envcheck import run_env_check

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _rows(checks: list[Check]) -> list[tuple[str, Check]]:
    """(label, check) per table row; a run of skips with one reason (all GPU checks on a
    machine without a driver) becomes one row. The JSON keeps every check."""
    rows: list[tuple[list[str], Check]] = []
    for check in checks:
        last = rows[-1][1] if rows else None
        if (
            last is not None
            and check.status == last.status == "skip"
            and check.message == last.message
        ):
            rows[-1][0].append(check.name)
        else:
            rows.append(([check.name], check))
    out = []
    for names, check in rows:
        prefix = names[0].split(".", 1)[0]
        same = all(n.split(".", 1)[0] == prefix for n in names)
        label = names[0] if len(names) == 1 else f"{prefix if same else names[0]}.* ({len(names)})"
        out.append((label, check))
    return out


def checks_table(checks: list[Check], title: str = "env-check") -> Table:
    """The checks as a rich table (also used by `mlb run` for its env-check phase)."""
    # names and figures are never cut or folded (no "torchvi/sion"); the advice wraps between
    # words, and when even that is too wide the threshold and advice go to a table below
    table = StackTable(
        title=title, title_justify="left", expand=False, secondary=("threshold", "advice")
    )
    for column in ("check", "status", "value", "threshold"):
        table.add_column(column, no_wrap=True)
    table.add_column("advice")
    for label, check in _rows(checks):
        value, threshold = display(check)
        style = STATUS_STYLE.get(check.status, "")
        status = f"[{style}]{check.status}[/{style}]" if style else check.status
        table.add_row(
            escape(label), status, escape(value), escape(threshold), escape(check.message)
        )
    return table


def print_summary(ui: Ui, result: Result) -> None:
    checks = result.verdict.checks
    ui.print(checks_table(checks))
    counts = {s: sum(1 for c in checks if c.status == s) for s in STATUS_STYLE}
    line = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    style = STATUS_STYLE.get(result.verdict.status, "")
    ui.print(f"[{style}]verdict: {result.verdict.status}[/{style}] ({line})")


@command("env-check")
def env_check(common: CommonOptions) -> None:
    """Is this machine fit for a baseline now? GPU, CPU, memory and software checks.

    GPU cool, idle and big enough; CPU idle; enough RAM; torch, CUDA, cuDNN and driver as
    pinned in env_check.expect. Each check is pass / warn / fail / skip with its value,
    threshold and advice; GPU checks skip when there is no NVIDIA driver. It only reads:
    nothing on the machine is changed. Exit 0: nothing failed; 1: a check failed; 2: bad input.

    Example: mlb env-check --json -o env.json
    """

    def measure(cfg: Config, ui: Ui) -> Result:
        probe = default_probe()
        try:
            return run_env_check(cfg, probe)
        finally:
            probe.close()

    execute(common, measure, render=lambda result, ui: print_summary(ui, result))
