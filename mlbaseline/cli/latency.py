"""`mlb latency`: parse → load config → run_latency → table on stderr → emit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mlbaseline.cli.common import (
    CommonOptions,
    Ui,
    command,
    compact_table,
    execute,
    parse_int_list,
)
from mlbaseline.formatting import milliseconds
from mlbaseline.results import Result
from mlbaseline.runners.latency import fmt_ms, run_latency

RequestsOpt = Annotated[
    int | None, typer.Option("--requests", help="Requests per level (default 1000).")
]
ConcurrencyOpt = Annotated[
    int | None,
    typer.Option(
        "--concurrency", help="Closed loop: N clients; open loop: N workers serving arrivals."
    ),
]
RateOpt = Annotated[
    float | None,
    typer.Option("--rate", help="Open loop: Poisson arrivals at QPS requests/s (seeded)."),
]
SweepOpt = Annotated[
    str | None,
    typer.Option("--sweep", help="Closed-loop concurrency sweep, e.g. 1,2,4,8: finds the knee."),
]
SlaOpt = Annotated[
    float | None, typer.Option("--sla-p99-ms", help="SLA: p99 must not exceed MS (150).")
]
UrlOpt = Annotated[
    str | None, typer.Option("--url", help="Endpoint mode: measure this http(s) URL end to end.")
]
BodyOpt = Annotated[str | None, typer.Option("--body", help="Endpoint mode: request body text.")]
BodyFileOpt = Annotated[
    Path | None, typer.Option("--body-file", help="Endpoint mode: file sent as the body.")
]
LoopOpt = Annotated[
    str | None,
    typer.Option("--loop", help="auto (open if --rate, else closed), closed, open, or both."),
]


@command("latency")
def latency(
    common: CommonOptions,
    requests: RequestsOpt = None,
    concurrency: ConcurrencyOpt = None,
    rate: RateOpt = None,
    sweep: SweepOpt = None,
    sla_p99_ms: SlaOpt = None,
    url: UrlOpt = None,
    body: BodyOpt = None,
    body_file: BodyFileOpt = None,
    loop: LoopOpt = None,
) -> None:
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
        "latency.requests": requests,
        "latency.concurrency": concurrency,
        "latency.rate": rate,
        "latency.sweep": parse_int_list(sweep, "--sweep"),
        "latency.sla_p99_s": None if sla_p99_ms is None else sla_p99_ms / 1000.0,
        "latency.url": url,
        "latency.body": body,
        "latency.body_file": None if body_file is None else str(body_file),
        "latency.loop": loop,
    }
    execute(common, lambda cfg, ui: run_latency(cfg, ui.progress), overrides, render=render)


def _ms(seconds: float | None) -> str:
    return milliseconds(seconds, 3)  # never scientific: '1,876', not '1.88e+03'


def _tables(levels: dict[str, Any]) -> tuple[Table, Table]:
    """Per level: the distribution (a p99 CI and the SLA verdict) and the stage split; every
    figure whole, so that both fit 80 columns (`compact_table`, all columns `no_wrap`)."""
    table = compact_table("latency per request, ms (CIs in the result file)")
    for col in ("level", "n", "p50", "p90", "p95", "p99", "p99 CI", "mean", "max", "err"):
        table.add_column(col, justify="left" if col == "level" else "right", no_wrap=True)
    table.add_column("SLA", no_wrap=True)
    stages = compact_table("stage split, ms: median/p99")
    for col in ("level", "queue", "preprocess", "compute", "postprocess", "residual"):
        stages.add_column(col, justify="left" if col == "level" else "right", no_wrap=True)
    for key, lv in levels.items():
        st = lv.get("stats")
        errors = str(lv["errors"]["count"])
        verdict = "[green]ok[/green]" if lv["sla"]["met"] else "[red]MISS[/red]"
        if st is None:
            table.add_row(key, "0", *["–"] * 7, errors, verdict)
            continue
        points = [_ms(st[k]["value"]) for k in ("p50", "p90", "p95", "p99")]
        lo, hi = st["p99"]["ci"]
        ci = f"{milliseconds(lo, 2)}–{milliseconds(hi, 2)}"
        tail = [_ms(st["mean"]["value"]), _ms(st["max"]["value"]), errors, verdict]
        table.add_row(key, str(st["n"]), *points, ci, *tail)
        split = lv["stages"]
        cells = [
            f"{milliseconds(v['median'], 2)}/{milliseconds(v['p99'], 2)}" for v in split.values()
        ]
        stages.add_row(key, *cells)
    return table, stages


def render(result: Result, ui: Ui) -> None:
    """The distribution per level, the stage split, and the sweep/rate/omission lines."""
    if ui.quiet:
        return
    levels = result.data.get("levels", {})
    for table in _tables(levels):
        ui.print(table)
    for key, lv in levels.items():
        if lv["loop"] == "open":
            ui.print(
                f"{key}: target {lv['target_rate']:g} req/s (this schedule "
                f"{lv['schedule_rate'] or 0:.3g}), achieved {lv['achieved_rate'] or 0:.3g} req/s, "
                f"{lv['late_share'] or 0:.1%} of sends late "
                f"(> {fmt_ms(lv['late_threshold_s'])} after schedule)"
            )
    sweep = result.data.get("sweep")
    if sweep:
        ui.print(f"sweep knee (highest concurrency meeting the SLA): {sweep['knee']}")
    omission = result.data.get("coordinated_omission")
    if omission:
        ratio = omission["ratio"]
        ui.print(
            f"open vs closed p99: {fmt_ms(omission['open_p99_s'])} vs "
            f"{fmt_ms(omission['closed_p99_s'])}" + (f" ({ratio:.1f}×)" if ratio else "")
        )
    for check in result.verdict.checks:
        colour = {"pass": "green", "warn": "yellow", "fail": "red"}.get(check.status, "dim")
        ui.print(f"[{colour}]{check.status}[/{colour}] {check.name}: {check.message}")
