"""`mlb dataloader`: parse → load config → run_dataloader → table on stderr → emit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from rich.table import Table

from mlbaseline.cli.common import CommonOptions, Ui, command, execute, opt, parse_int_list
from mlbaseline.config import Config
from mlbaseline.results import Result, load_result
from mlbaseline.runners.dataloader import run_dataloader

if TYPE_CHECKING:
    from mlbaseline.documents.data_dataloader import Data, Rate, Setting

DATA_HELP = "Image-folder root (DIR/CLASS/IMAGE); default: a generated synthetic tree."


@dataclass(frozen=True)
class DataloaderOptions:
    workers: Annotated[
        str | None,
        opt(
            "--workers",
            "num_workers sweep, e.g. 0,2,4,8 (capped at usable CPUs).",
            metavar="N,N,…",
        ),
    ] = None
    batches: Annotated[
        int | None, opt("--batches", "Measured batches per setting (at least 16 advised).")
    ] = None
    no_cold: Annotated[bool, opt("--no-cold", "Skip the cold page-cache pass.")] = False
    throughput_result: Annotated[
        Path | None,
        opt(
            "--throughput-result",
            "A throughput result: adds the input-bound verdict (data wait / step time).",
        ),
    ] = None


@command("dataloader", data=DATA_HELP)
def dataloader(common: CommonOptions, o: DataloaderOptions) -> None:
    """Data-loading baseline: read / decode / transform / collate split, num_workers and
    pin_memory sweeps, cold vs warm page cache, and the worker-count knee.

    Each setting runs a cold pass (every file evicted from the page cache before it is read)
    and a warm pass; samples/s come with a CI. The knee is the smallest num_workers within 5%
    of the best throughput. Corrupt files are counted and listed, never fatal. With
    --throughput-result the share of step time spent waiting for data is judged: below 5%
    none, 5–20% moderate, 20% and above high.

    Example: mlb dataloader --workers 0,2,4 -o dl.json

    Example: mlb dataloader ./images --no-cold --throughput-result tp.json
    """

    overrides: dict[str, Any] = {
        "dataloader.data_dir": None if common.data is None else str(common.data),
        "dataloader.workers": parse_int_list(o.workers, "--workers"),
        "dataloader.batches": o.batches,
        "dataloader.cold_cache": False if o.no_cold else None,
    }
    tp: list[Result] = []

    def prepare(cfg: Config) -> None:
        if o.throughput_result is not None:
            tp.append(load_result(o.throughput_result, kinds=["throughput"]))

    def measure(cfg: Config, ui: Ui) -> Result:
        return run_dataloader(cfg, None, ui.progress, tp[0] if tp else None)

    execute(common, measure, overrides, prepare=prepare, render=render)


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.3g}"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _rate(entry: Rate | None, with_ci: bool = True) -> str:
    """'5,521 ±2%': the median and the larger half-width of its CI, relative."""
    med = entry.median if entry is not None else None
    if entry is None or med is None:
        return "–"
    lo, hi = entry.ci
    if not with_ci or lo is None or hi is None or med <= 0:
        return _num(med)
    return f"{_num(med)} ±{max(hi - med, med - lo) / med:.0%}"


def _bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n = n / 1000
    return str(n)  # pragma: no cover


def _name(row: Setting, knee: int | None) -> str:
    name = f"w{row.workers}{' pin' if row.pin_memory else ''} {row.cache}"
    return name + (" ◀" if row.workers == knee and row.cache == "warm" else "")


def _tables(data: Data) -> tuple[Table, Table]:
    knee = data.knee.workers if data.knee is not None else None
    rates = Table(
        title=f"throughput, batch {data.batch_size} (startup in ms)", title_justify="left"
    )
    # figures never wrap; the long headers take two lines instead, to fit 80 columns
    for col in ("setting", "samples/s\n±CI", "batches\n/s", "startup", "CPU", "read", "disk"):
        rates.add_column(col, justify="left" if col == "setting" else "right", no_wrap=True)
    rates.add_column("bad", justify="right", no_wrap=True)
    stages = Table(title=f"median per sample / per batch, ms ({data.split})", title_justify="left")
    for col in ("setting", "read", "decode", "transform", "sample", "collate", "batch wait"):
        stages.add_column(col, justify="left" if col == "setting" else "right", no_wrap=True)
    for row in data.settings:
        name = _name(row, knee)
        if row.status != "ok":
            rates.add_row(name, f"[red]{row.status}[/red]", *["–"] * 6)
            continue
        util = row.cpu_util
        rates.add_row(
            name,
            _rate(row.samples_per_s),
            _rate(row.batches_per_s, with_ci=False),
            _ms(row.startup_s),
            "–" if util is None else f"{util:.0%}",
            _bytes(row.io.rchar if row.io else None),
            _bytes(row.io.read_bytes if row.io else None),
            str(row.failed_samples),
        )
        st = row.stage_median_s or {}
        keys = ("read", "decode", "transform", "sample", "collate", "batch")
        stages.add_row(name, *(_ms(st.get(k)) for k in keys))
    return rates, stages


def render(result: Result, ui: Ui) -> None:
    """The sweep tables, then recommendation, input-bound verdict and skipped files."""
    if ui.quiet:
        return
    from mlbaseline.documents.data_dataloader import Data
    from mlbaseline.report.payloads import typed_data  # numpy: not at `mlb` startup

    data = typed_data(result, Data)
    for table in _tables(data):
        ui.print(table)
    level = data.confidence if data.confidence is not None else 0.95
    ui.print(
        f"[dim]◀ knee; ±CI: {level:.0%} bootstrap CI of the median; read: bytes returned by "
        "read calls (rchar); disk: fetched from storage[/dim]"
    )
    if data.recommendation:
        ui.print(f"[bold]recommendation:[/bold] {data.recommendation}")
    bound = data.input_bound
    if bound and bound.message:
        colour = {"none": "green", "moderate": "yellow", "high": "red"}.get(bound.level or "", "")
        ui.print(f"[{colour or 'dim'}]input-bound:[/{colour or 'dim'}] {bound.message}")
    for entry in data.corrupt.files[:10]:
        ui.print(f"[yellow]skipped[/yellow] {entry.path or entry.index}: {entry.error}")
    if data.corrupt.count > 10:
        ui.print(f"… and {data.corrupt.count - 10} more (all listed in the result file)")
