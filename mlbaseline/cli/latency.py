"""`mlb latency`: parse → load config → run_latency → table on stderr → emit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from rich.console import Console
from rich.table import Table

from mlbaseline.cli.common import (
    CommonOptions,
    OptFloat,
    OptInt,
    OptPath,
    OptStr,
    Ui,
    command,
    compact_table,
    execute,
    opt,
    parse_int_list,
)
from mlbaseline.cli.helptext import choices
from mlbaseline.formatting import milliseconds
from mlbaseline.results import Result
from mlbaseline.runners.latency import fmt_ms, run_latency

if TYPE_CHECKING:
    from mlbaseline.documents.data_latency import Level


@dataclass(frozen=True)
class LatencyOptions:
    requests: Annotated[OptInt, opt("--requests", "Requests per level (default 1000).")] = None
    concurrency: Annotated[
        OptInt,
        opt("--concurrency", "Closed loop: N clients; open loop: N workers serving arrivals."),
    ] = None
    rate: Annotated[
        OptFloat, opt("--rate", "Open loop: Poisson arrivals at QPS requests/s (seeded).")
    ] = None
    sweep: Annotated[
        OptStr,
        opt(
            "--sweep",
            "Closed-loop concurrency sweep, e.g. 1,2,4,8: finds the knee.",
            metavar="N,N,…",
        ),
    ] = None
    sla_p99_ms: Annotated[OptFloat, opt("--sla-p99-ms", "SLA: p99 must not exceed MS (150).")] = (
        None
    )
    url: Annotated[OptStr, opt("--url", "Endpoint mode: measure this http(s) URL end to end.")] = (
        None
    )
    body: Annotated[OptStr, opt("--body", "Endpoint mode: request body text.")] = None
    body_file: Annotated[OptPath, opt("--body-file", "Endpoint mode: file sent as the body.")] = (
        None
    )
    loop: Annotated[
        OptStr,
        opt(
            "--loop",
            "auto: open if --rate, else closed (default).",
            metavar=choices("auto", "closed", "open", "both"),
        ),
    ] = None


@command("latency")
def latency(common: CommonOptions, o: LatencyOptions) -> None:
    """Batch-1 request latency under concurrency: p50/p90/p95/p99 with CIs, an SLA verdict.

    The first and last 5% of requests by send order are dropped as warm-up and drain. Each
    request is split into queue, preprocess, compute and postprocess. The closed loop (N
    clients) hides stalls; the open loop (--rate) counts from the scheduled send time.
    Exit 1 when the p99 SLA is missed.

    Example: mlb latency --concurrency 4 -o lat.json

    Example: mlb latency --rate 50 --loop both --sla-p99-ms 100

    Example: mlb latency --url http://127.0.0.1:8080/predict --body '{"x": 1}' --sweep 1,2,4
    """

    overrides: dict[str, Any] = {
        "latency.requests": o.requests,
        "latency.concurrency": o.concurrency,
        "latency.rate": o.rate,
        "latency.sweep": parse_int_list(o.sweep, "--sweep"),
        "latency.sla_p99_s": None if o.sla_p99_ms is None else o.sla_p99_ms / 1000.0,
        "latency.url": o.url,
        "latency.body": o.body,
        "latency.body_file": None if o.body_file is None else str(o.body_file),
        "latency.loop": o.loop,
    }
    execute(common, lambda cfg, ui: run_latency(cfg, ui.progress), overrides, render=render)


def _ms(seconds: float | None) -> str:
    return milliseconds(seconds, 3)  # never scientific: '1,876', not '1.88e+03'


COLUMNS = ("level", "n", "p50", "p90", "p95", "p99", "p99 CI", "mean", "max", "err", "SLA")
OPTIONAL = ("mean", "max")  # dropped, in this order, when the table would not fit the console


def _rows(levels: dict[str, Level]) -> list[dict[str, str]]:
    rows = []
    for key, lv in levels.items():
        st = lv.stats
        row = dict.fromkeys(COLUMNS, "–") | {"level": key, "n": "0"}
        row["err"] = str(lv.errors.count)
        row["SLA"] = "[green]ok[/green]" if lv.sla.met else "[red]MISS[/red]"
        if st is not None:
            figures = {"p50": st.p50, "p90": st.p90, "p95": st.p95, "p99": st.p99}
            figures |= {"mean": st.mean, "max": st.max}
            row |= {k: _ms(v.value) for k, v in figures.items()}
            lo, hi = st.p99.ci
            row |= {"n": str(st.n), "p99 CI": f"{milliseconds(lo, 2)}–{milliseconds(hi, 2)}"}
        rows.append(row)
    return rows


def _level_table(rows: list[dict[str, str]], width: int) -> Table:
    """The distribution per level, every figure whole: optional columns go before any cell
    would be cut."""
    dropped: list[str] = []
    while True:
        # still too wide without them: the CI and the error count go to a table below
        title = "latency per request, ms (CIs in the result file)"
        table = compact_table(title, secondary=("p99 CI", "err"))
        columns = [c for c in COLUMNS if c not in dropped]
        for col in columns:
            table.add_column(col, justify="left" if col in ("level", "SLA") else "right")
            table.columns[-1].no_wrap = True
        for row in rows:
            table.add_row(*(row[c] for c in columns))
        if len(dropped) == len(OPTIONAL) or _width(table) <= width:
            return table
        dropped.append(OPTIONAL[len(dropped)])


def _width(table: Table) -> int:
    """The table's natural width (measured on a console wide enough not to limit it)."""
    return Console(width=10_000).measure(table).maximum


def _stage_table(levels: dict[str, Level]) -> Table:
    stages = compact_table("stage split, ms: median/p99")
    for col in ("level", "queue", "preprocess", "compute", "postprocess", "residual"):
        stages.add_column(col, justify="left" if col == "level" else "right", no_wrap=True)
    for key, lv in levels.items():
        if lv.stats is None:
            continue
        cells = [
            f"{milliseconds(v.median, 2)}/{milliseconds(v.p99, 2)}"
            for v in (lv.stages or {}).values()
        ]
        stages.add_row(key, *cells)
    return stages


def render(result: Result, ui: Ui) -> None:
    """The distribution per level, the stage split, and the sweep/rate/omission lines."""
    if ui.quiet:
        return
    from mlbaseline.documents.data_latency import Data
    from mlbaseline.report.payloads import typed_data  # numpy: not at `mlb` startup

    data = typed_data(result, Data)
    ui.print(_level_table(_rows(data.levels), ui.console.width))
    ui.print(_stage_table(data.levels))
    for key, lv in data.levels.items():
        if lv.loop == "open":
            ui.print(
                f"{key}: target {lv.target_rate or 0:g} req/s (this schedule "
                f"{lv.schedule_rate or 0:.3g}), achieved {lv.achieved_rate or 0:.3g} req/s, "
                f"{lv.late_share or 0:.1%} of sends late "
                f"(> {fmt_ms(lv.late_threshold_s)} after schedule)"
            )
    if data.sweep:
        ui.print(f"sweep knee (highest concurrency meeting the SLA): {data.sweep.knee}")
    omission = data.coordinated_omission
    if omission:
        ratio = omission.ratio
        ui.print(
            f"open vs closed p99: {fmt_ms(omission.open_p99_s)} vs "
            f"{fmt_ms(omission.closed_p99_s)}" + (f" ({ratio:.1f}×)" if ratio else "")
        )
    for check in result.verdict.checks:
        colour = {"pass": "green", "warn": "yellow", "fail": "red"}.get(check.status, "dim")
        ui.print(f"[{colour}]{check.status}[/{colour}] {check.name}: {check.message}")
