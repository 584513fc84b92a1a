"""`mlb throughput`: parse → load config → run_throughput → summary table on stderr → emit."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from mlbaseline import formatting as fmt
from mlbaseline.cli.common import (
    CommonOptions,
    OptFloat,
    OptInt,
    OptStr,
    Ui,
    check_output,
    command,
    execute,
    opt,
    parse_int_list,
)
from mlbaseline.cli.helptext import choices
from mlbaseline.cli.tables import StackTable
from mlbaseline.comparison.cost import cost_lines, energy_lines
from mlbaseline.config import Config
from mlbaseline.documents.data_throughput import Data, Noise, PartSummary
from mlbaseline.errors import UsageError
from mlbaseline.report.headline import workload_text
from mlbaseline.results import Result
from mlbaseline.runners.torchrun import failures_announced, torchrun_env

STAGE_ABBREV = {
    "data_wait": "data",
    "h2d": "h2d",
    "forward": "fwd",
    "loss": "loss",
    "backward": "bwd",
    "grad_sync": "sync",
    "optimizer": "opt",
}
PART_LABEL = {"train": "train", "train_ddp": "train DDP", "inference": "infer"}


def telemetry_name(output: Path) -> str:
    """The telemetry CSV beside the result: t.json → t.telemetry.csv."""
    return f"{output.stem}.telemetry.csv"


def throughput_data(result: Result) -> Data | None:
    """The typed payload (report.payloads' reader, imported here only when a summary is
    shown: it brings NumPy, which `mlb --help` does not need)."""
    from mlbaseline.report.payloads import throughput_data as typed

    return typed(result)


def _fmt_rate(info: PartSummary) -> str:
    r = info.samples_per_s
    if r is None or r.median is None or r.ci_low is None or r.ci_high is None:
        return "-"
    return f"{r.median:.1f} [{r.ci_low:.1f}, {r.ci_high:.1f}]"


def _pct(x: float | None) -> str:
    return f"{x * 100:.1f}" if x is not None else "-"


def _parts(result: Result) -> list[tuple[str, str, PartSummary]]:
    """(batch size, part, its summary) of every part the result recorded."""
    data = throughput_data(result)
    out = []
    for key, entry in data.batch_sizes.items() if data is not None else []:
        for part, info in (
            ("train", entry.train),
            ("train_ddp", entry.train_ddp),
            ("inference", entry.inference),
        ):
            if info is not None:
                out.append((key, part, info))
    return out


def summary_table(result: Result) -> Group:
    """Two tables: per batch size and part, samples/s [95% CI], step ms, residual %, stop
    reason and peak memory; then each training stage's share of the step. Also used by
    `mlb run`."""
    # figures never wrap or cut: a terminal too narrow gets the stop reason and memory below
    main = StackTable(
        title="throughput", title_justify="left", keys=2, secondary=("stop", "peak mem")
    )
    for col in ("bs", "part", "samples/s [95% CI]", "step ms", "resid %", "stop", "peak mem"):
        main.add_column(col, justify="left" if col in ("part", "stop") else "right", no_wrap=True)
    data = throughput_data(result)
    stages = data.stages if data is not None else []
    shares = StackTable(title="share of the training step, %", title_justify="left", keys=2)
    for col in ("bs", "part", *(STAGE_ABBREV.get(s, s) for s in stages), "resid"):
        shares.add_column(col, justify="left" if col == "part" else "right", no_wrap=True)
    for key, part, info in _parts(result):
        label = PART_LABEL[part]
        if info.status in ("oom", "error"):
            note = "out of memory" if info.status == "oom" else info.error or "error"
            main.add_row(key, label, f"[red]{escape(note)}[/red]", "-", "-", info.status, "-")
            continue
        time_s = info.time_s.median if info.time_s is not None else None
        resid = info.residual_share
        main.add_row(
            key,
            label,
            _fmt_rate(info),
            f"{time_s * 1e3:.2f}" if time_s else "-",
            _pct(resid),
            info.stop_reason or "-",
            _fmt_memory(result, key, part) or _fmt_bytes(info.peak_memory_bytes, info.memory_kind),
        )
        share = info.stage_share
        if share:
            cells = [_pct(share.get(s)) for s in stages]
            shares.add_row(key, label, *cells, _pct(resid))
            mde = _mde_cells(result, key, stages) if part == "train" else None
            if mde:
                shares.add_row(key, "MDE ±", *mde, "-")
    return Group(main, shares) if shares.row_count else Group(main)


def _fmt_memory(result: Result, key: str, part: str) -> str | None:
    """The step's peak memory, median over the measured steps (the `mem.peak` metric), and for
    training the memory held after forward (`mem.forward`, the activations), e.g. "1.2 GiB
    RSS, fwd 64.0 MiB"; None where the result has no memory metrics (an older file)."""
    group = {"train": f"train.bs{key}", "train_ddp": f"train.bs{key}.ddp"}
    prefix = group.get(part, f"infer.bs{key}")
    peak = result.measurements.get(f"{prefix}.mem.peak")
    if peak is None or not peak.values:
        return None
    rss = " RSS" if str(peak.meta.get("kind", "")).startswith("cpu_rss") else ""
    text = f"{fmt.size(statistics.median(peak.values), '.1f')}{rss}"
    forward = result.measurements.get(f"{prefix}.mem.forward")
    if forward is not None and forward.values:
        text += f", fwd {fmt.size(statistics.median(forward.values), '.1f')}"
    return text


def _fmt_bytes(n: Any, kind: Any) -> str:
    if n is None:
        return "-"
    suffix = " RSS" if kind and str(kind).startswith("cpu_rss") else ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}{suffix}" if unit == "B" else f"{n:.1f} {unit}{suffix}"
        n /= 1024
    return str(n)


def trace_table(result: Result) -> Table | None:
    """--trace: per batch size and stage, mlb's time against the profiler's over the window."""
    table = Table(title="profiler cross-check (--trace), ms over the window", title_justify="left")
    for col in ("bs", "stage", "mlb", "profiler", "diff %", "agree"):
        table.add_column(col, justify="left" if col in ("stage", "agree") else "right")
    for key, part, info in _parts(result):
        trace = info.trace if part == "train" else None
        for stage, row in trace.stages.items() if trace is not None else []:
            diff = row.difference
            table.add_row(
                key,
                STAGE_ABBREV.get(stage, stage),
                f"{row.mlb_s * 1e3:.3f}",
                f"{row.profiler_s * 1e3:.3f}",
                f"{diff * 100:+.1f}" if diff is not None else "-",
                "yes" if row.agree else "[yellow]NO[/yellow]",
            )
    return table if table.row_count else None


def _noise(result: Result) -> dict[str, Noise]:
    data = throughput_data(result)
    return (data.noise if data is not None else None) or {}


def _mde_cells(result: Result, key: str, stages: list[str]) -> list[str] | None:
    """A training group's MDE per stage, in percent (data["noise"], stats.noise): the smallest
    change a compare of two runs like this one can see; None without replicates."""
    noise = _noise(result)
    if f"train.bs{key}.step" not in noise:
        return None
    rec = [noise.get(f"train.bs{key}.{s}") for s in stages]
    return [f"{r.mde * 100:.0f}" if r is not None and r.mde is not None else "-" for r in rec]


def noise_lines(result: Result) -> list[str]:
    """One line per training group with fresh-process replicates: what the MDE row means, how
    many processes it rests on and the step's share of variance between processes."""
    noise = _noise(result)
    out = []
    for key, part, _info in _parts(result):
        step = noise.get(f"train.bs{key}.step") if part == "train" else None
        if step is None or step.mde is None:  # no MDE (NaN): nothing it could promise
            continue
        line = (
            f"MDE bs{key}: changes below {step.mde:.0%} of the step cannot be seen by a "
            f"compare of two such runs ({step.processes} processes; "
            f"{step.between_share:.0%} of its variance between them)"
        )
        if not step.decidable:
            line += f"; no verdict is possible below --repeats {step.replicates_to_decide}"
        if step.mde > step.target:
            line += f"; {step.target:.0%} needs --repeats {step.replicates_for_target}"
        out.append(line)
        sit = step.sittings
        if sit is not None and sit.mde_across_sittings is not None:
            out.append(
                f"between sittings bs{key}: {sit.sittings} sittings in the history differ by "
                f"{sit.between_sd:.1%} (sd) beyond their processes; against another sitting "
                f"changes below {sit.mde_across_sittings:.0%} of the step cannot be seen"
            )
    return out


def compile_lines(result: Result) -> list[str]:
    """torch.compile's first call per part (workload.compile), timed apart from the steps."""
    from mlbaseline.formatting import duration

    return [
        f"compile bs{key} {part}: {duration(info.compile_s)} (the first call, traced and "
        "compiled: neither warm-up nor measured)"
        for key, part, info in _parts(result)
        if info.compile_s is not None
    ]


# a stage's share of the step from which the summary names it, with what to do about it
SHARE_LINE = 0.20
_SHARE_ADVICE = {
    "data_wait": "the loop waits for its input; more loader workers (throughput.num_workers, "
    "now {workers}) or a faster dataset shorten it, and `mlb dataloader` finds the fastest "
    "loader settings",
    "h2d": "host-to-device copies; pinned memory with non-blocking copies, or smaller inputs "
    "(preprocess on the device), shorten it",
    "forward": "the model's own compute; workload.amp, workload.compile or a larger batch "
    "shorten it",
    "loss": "the loss function; fuse or simplify it, or compute it under workload.amp",
    "backward": "the model's own compute; workload.amp, workload.compile or a larger batch "
    "shorten it",
    "grad_sync": "the gradient all-reduce; a larger batch per process or fewer processes "
    "(--nproc) spend less of the step on it",
    "optimizer": "the optimizer step; a fused or foreach optimizer shortens it",
    "residual": "time outside the timed stages (Python overhead, logging, synchronisation)",
}


def share_lines(result: Result) -> list[str]:
    """Per training part: its largest share of the step (a stage or the residual) when it is
    at least SHARE_LINE, with what to do; an input-bound loop is the case this is for."""
    workers = result.config.get("throughput", {}).get("num_workers", "-")
    out = []
    for key, part, info in _parts(result):
        if not part.startswith("train") or not info.stage_share:
            continue
        shares = {s: v for s, v in info.stage_share.items() if v is not None}
        if info.residual_share is not None:
            shares["residual"] = info.residual_share
        if not shares:
            continue
        stage, share = max(shares.items(), key=lambda kv: kv[1])
        if share < SHARE_LINE:
            continue
        name = stage.replace("_", " ")
        advice = _SHARE_ADVICE.get(stage, "the largest part of the step").format(workers=workers)
        out.append(
            f"bs{key} {PART_LABEL[part]}: {name} is {fmt.percent(share)} of the step: {advice}"
        )
    return out


def replicate_lines(result: Result) -> list[str]:
    """How many fresh processes `repeats: auto` took and why it stopped (or why it ran one)."""
    data = throughput_data(result)
    plan = data.replicate_plan if data is not None else None
    text = (plan.message or plan.reason) if plan is not None else None
    return [f"replicates: {text}"] if text else []


def print_summary(ui: Ui, result: Result) -> None:
    ui.print(f"measured: {escape(workload_text([result]))}")  # what ran, before its figures
    ui.print(summary_table(result))
    for line in share_lines(result):  # what dominates the step, not only in the report
        ui.print(escape(line))
    lines = replicate_lines(result) + noise_lines(result) + compile_lines(result)
    for line in lines + energy_lines(result) + cost_lines(result):  # cost: where priced
        ui.print(f"[dim]{escape(line)}[/dim]")
    trace = trace_table(result)
    if trace is not None:
        ui.print(trace)
    data = throughput_data(result)
    tele = data.telemetry if data is not None else None
    if tele is not None:
        o = tele.overhead
        where = tele.csv or tele.stored
        ui.print(
            f"[dim]telemetry: {o.samples} samples every {tele.interval_s} s, sampler "
            f"overhead {o.overhead_fraction:.2%} of a core; CSV: {escape(str(where))}[/dim]"
        )


DATA_HELP = (
    "Image-folder dataset to measure on (sets workload.dataset imagefolder and "
    "workload.data_dir); default: the profile's dataset."
)


REPEATS_HELP = (
    "Fresh-process replicates, pooled: N (1: this process only) or auto (at least 5, until the "
    "median is known to the config's reproducibility target, within its replicates budget: "
    "throughput.repro_target and .replicates_budget_s)."
)


def parse_repeats(text: str | None) -> int | str | None:
    """--repeats: a positive integer or `auto`."""
    if text is None or text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"--repeats: '{text}' is not a positive integer or auto")
    return int(text)


@dataclass(frozen=True)
class ThroughputOptions:
    batch_sizes: Annotated[
        OptStr, opt("--batch-sizes", "Batch-size sweep, e.g. 32,64,128.", metavar="N,N,…")
    ] = None
    mode: Annotated[
        OptStr, opt("--mode", "What to measure.", metavar=choices("train", "inference", "both"))
    ] = None
    nproc: Annotated[
        OptInt, opt("--nproc", "Processes (torch.distributed: gloo on CPU, NCCL on GPU).", min=1)
    ] = None
    repeats: Annotated[OptStr, opt("--repeats", REPEATS_HELP, metavar="N|auto")] = None
    min_time: Annotated[
        OptFloat, opt("--min-time", "Stop rule: measure at least this many seconds.", min=0)
    ] = None
    device: Annotated[OptStr, opt("--device", "auto, cpu, cuda or cuda:N.")] = None
    model: Annotated[OptStr, opt("--model", "Model override, e.g. torchvision:resnet50.")] = None
    trace: Annotated[
        bool,
        typer.Option(
            "--trace",
            help="Profiler cross-check: K more steps under torch.profiler after the measured "
            "ones; NAME.trace.bsB.json (Chrome/Perfetto) beside the result.",
        ),
    ] = False
    trace_steps: Annotated[
        OptInt, opt("--trace-steps", "Steps in the --trace window (K).", min=1)
    ] = None


@command("throughput", data=DATA_HELP)
def throughput(common: CommonOptions, o: ThroughputOptions) -> None:
    """Training and inference throughput, stage by stage, over a batch-size sweep.

    Each training step is split into data wait, host→device copy, forward, loss, backward,
    gradient sync (multi-process) and optimizer step; the residual (step − stages) is reported.
    Warm-up is detected and kept apart; each batch size stops on minimum time AND steps AND
    stability, with caps. Inference: forward only under inference_mode, timed with
    torch.utils.benchmark blocked_autorange. A telemetry CSV (GPU kernel-active %, CPU, RSS,
    I/O) is written beside the result. Out of memory at one size is recorded and the sweep goes
    on; Ctrl-C writes the result so far, marked interrupted (exit 130). --trace checks the
    stage timers against torch.profiler over K extra steps. Run by torchrun (`torchrun
    --nnodes N ... -m mlbaseline throughput ...`), every rank of every node is pooled into one
    result, written by rank 0 only.

    Example: mlb throughput --batch-sizes 8,16 --mode train -o tp.json
    """

    overrides = _overrides(o, common.data)
    output = common.output
    name = telemetry_name(output) if output is not None else "telemetry.csv"
    launch = torchrun_env()
    # under torchrun only rank 0 writes, so only rank 0 checks: the ranks of nodes started in
    # one folder would otherwise refuse rank 0's files as existing outputs
    rank0 = launch is None or launch.rank == 0
    outputs = (output, None if output is None else output.parent / name) if rank0 else ()

    def measure(cfg: Config, ui: Ui) -> Result | None:
        from mlbaseline.measure.gpu import default_probe
        from mlbaseline.runners.throughput import run_throughput

        # under torchrun only rank 0 writes: the result (every rank pooled) and its telemetry
        probe = default_probe()
        try:
            folder = output.parent if output is not None and rank0 else None
            result = run_throughput(cfg, ui.progress, probe, folder, telemetry_name=name)
        finally:
            probe.close()
        return result if rank0 else None

    def prepare(cfg: Config) -> None:
        from mlbaseline.measure.memory import refuse_oversized_batches

        refuse_oversized_batches(cfg, "throughput.batch_sizes", cfg.throughput.batch_sizes)
        from mlbaseline.measure.trace import trace_names  # imports torch: after the check

        if output is not None:  # the trace files beside the result: no overwrite either
            for trace_file in trace_names(cfg, name):
                check_output(output.parent / trace_file, common.force)

    render = lambda result, ui: print_summary(ui, result)  # noqa: E731
    with failures_announced(launch):  # a rank that fails tells the other nodes' ranks
        execute(common, measure, overrides, prepare=prepare, outputs=outputs, render=render)


def _overrides(o: ThroughputOptions, data: Path | None) -> dict[str, Any]:
    """The config keys this command's own options set (None: not given, the config decides)."""
    if o.mode is not None and o.mode not in ("train", "inference", "both"):
        raise UsageError(f"--mode: '{o.mode}' is not one of train, inference, both")
    return {
        "throughput.batch_sizes": parse_int_list(o.batch_sizes, "--batch-sizes"),
        "throughput.mode": o.mode,
        "throughput.nproc": o.nproc,
        "throughput.repeats": parse_repeats(o.repeats),
        "throughput.min_time_s": o.min_time,
        "workload.device": o.device,
        "workload.model": o.model,
        "throughput.trace": True if o.trace else None,
        "throughput.trace_steps": o.trace_steps,
        **_data_overrides(data),
    }


def _data_overrides(data: Path | None) -> dict[str, Any]:
    """DATA: measure on that image folder instead of the profile's dataset."""
    if data is None:
        return {}
    return {"workload.dataset": "imagefolder", "workload.data_dir": str(data)}
