"""`mlb attach [OPTIONS] -- CMD…`: measure an unmodified training script (runners.attach)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlbaseline import formatting as fmt
from mlbaseline.cli.app import app
from mlbaseline.cli.common import (
    CommonOptions,
    OptFloat,
    OptStr,
    Ui,
    command,
    execute,
    opt,
)
from mlbaseline.cli.helptext import choices
from mlbaseline.cli.throughput import (
    STAGE_ABBREV,
    noise_lines,
    parse_repeats,
    replicate_lines,
    summary_table,
)
from mlbaseline.config import Config
from mlbaseline.report.headline import workload_text
from mlbaseline.results import Result, write_result

REPEATS_HELP = (
    "Fresh processes of the script, each measured by the stop rule, pooled: N, or auto (at "
    "least 5, until the median is known to the config's reproducibility target, within its "
    "replicates budget). Default: the config's repeats (auto), as for mlb throughput; "
    "--repeats 1 for a single process (which mlb compare cannot decide on)."
)
JsonFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--json",
        metavar="PATH",
        help="Also write the result JSON to PATH (never to stdout, which is the script's): "
        "the pooled result of all processes, once the last one has ended.",
        show_default=False,
    ),
]
SHARE_LINE = 0.20


@dataclass(frozen=True)
class AttachCliOptions:
    cmd: Annotated[
        list[str] | None,
        typer.Argument(
            help="The training command, after `--`: python train.py ARGS…", metavar="CMD"
        ),
    ] = None
    repeats: Annotated[OptStr, opt("--repeats", REPEATS_HELP, metavar="N|auto")] = None
    then: Annotated[
        OptStr,
        opt(
            "--then",
            "Once measured: stop the script (SIGINT, then SIGTERM and SIGKILL after the grace) "
            "or let it train on, unmeasured, and wait for it. Default stop. With several "
            "processes only the last one trains on; the others are stopped once measured. "
            "A script that trains on and exits non-zero fails the verdict (exit 1; the "
            "measured result is kept).",
            metavar=choices("stop", "continue"),
        ),
    ] = None
    first_step_timeout: Annotated[
        OptFloat,
        opt(
            "--first-step-timeout",
            "Seconds the script may take to its first training step (default 60).",
            min=0.001,
            metavar="S",
        ),
    ] = None
    grace_s: Annotated[
        OptFloat,
        opt("--grace-s", "Seconds each stop signal is given (default 10).", min=0, metavar="S"),
    ] = None
    min_time: Annotated[
        OptFloat, opt("--min-time", "Stop rule: measure at least this many seconds.", min=0)
    ] = None


@command("attach", shared={"json_out": JsonFileOpt})
def attach(common: CommonOptions, o: AttachCliOptions) -> None:
    """Measure your training script as it is: steps and stages, by the stop rule.

    Runs CMD with mlb's hooks installed before its first line (no change to the script): a
    step is one optimizer step (torch.optim's hooks; gradient accumulation counted as
    micro-batches; a manual update without torch.optim ends a step at the backward), split
    into data wait, h2d, forward, loss, backward and optimizer, with the residual reported
    and eval kept apart. Warm-up detection, the stop rule, telemetry, the result file (kind
    throughput, source attach) and the history are those of mlb throughput. Once measured,
    the script is stopped (SIGINT, then SIGTERM after --grace-s) unless --then continue (with
    several processes: the last one only). Its stdout and stderr are its own. Like mlb
    throughput, it measures throughput.repeats fresh processes (auto by default: at least 5,
    pooled) so that mlb compare of two such results can decide; --repeats 1 runs one.
    Memory per step is measured too: the peak, and per stage the bytes it left held
    (forward: the activations). Exit 2 when no step comes within
    --first-step-timeout or the script fails before it is measured (its exit code and last
    stderr lines are in the message), and at once for a multi-process launcher (torchrun,
    accelerate launch): attach to one process of the script instead.

    Example: mlb attach -o base.json -- python train.py --epochs 1
    """
    json_path = common.json_out if isinstance(common.json_out, Path) else None
    output = common.output or json_path
    shared = dataclasses.replace(common, json_out=False, output=output)
    overrides = {
        "throughput.repeats": parse_repeats(o.repeats),  # None: the config's (auto)
        "throughput.min_time_s": o.min_time,
    }

    def measure(cfg: Config, ui: Ui) -> Result:
        from mlbaseline.runners.attach import AttachOptions, run_attach

        options = AttachOptions(
            command=list(o.cmd or []),
            then=o.then or "stop",
            first_step_timeout_s=60.0 if o.first_step_timeout is None else o.first_step_timeout,
            grace_s=10.0 if o.grace_s is None else o.grace_s,
            cwd=None,
        )
        return run_attach(cfg, options, ui.progress)

    def render(result: Result, ui: Ui) -> None:
        print_summary(ui, result)
        if json_path is not None and json_path != output:
            write_result(result, json_path, force=common.force)

    outputs = [p for p in dict.fromkeys((common.output, json_path)) if p is not None]
    execute(shared, measure, overrides, outputs=outputs, render=render)


def print_summary(ui: Ui, result: Result) -> None:
    """The throughput tables, then what attach saw of the script (no config advice: the
    script's own code decides its workers, precision and batch)."""
    ui.print(f"measured: {escape(workload_text([result]))}")
    ui.print(summary_table(result))
    for line in attach_lines(result):
        ui.print(escape(line))
    for line in replicate_lines(result) + noise_lines(result):
        ui.print(f"[dim]{escape(line)}[/dim]")


def attach_lines(result: Result) -> list[str]:
    """The script, how its steps were cut and how it ended; the stage that dominates."""
    block: dict[str, Any] = result.data.get("attach") or {}
    out = [
        f"script: {block.get('script')} (sha256 {str(block.get('script_sha256') or '-')[:12]}); "
        f"step boundary: {block.get('boundary')}; micro-batches per step: "
        f"{block.get('micro_batches')}; ended: {block.get('ended')}"
    ]
    if block.get("eval_s"):
        out.append(
            f"eval inside the measured steps, kept out of them: {fmt.duration(block['eval_s'])}"
        )
    for key, entry in (result.data.get("batch_sizes") or {}).items():
        train = entry.get("train") or {}
        shares = dict(train.get("stage_share") or {})
        if train.get("residual_share") is not None:
            shares["residual"] = train["residual_share"]
        shares = {k: v for k, v in shares.items() if v is not None}
        if shares:
            stage, share = max(shares.items(), key=lambda kv: kv[1])
            if share >= SHARE_LINE:
                name = STAGE_ABBREV.get(stage, stage)
                out.append(f"bs{key}: {name} is {fmt.percent(share)} of the step")
    return out


# `mlb attach python train.py --lr 3`: everything from CMD on is the script's, options too
for _info in app.registered_commands:
    if _info.name == "attach":
        _info.context_settings = {
            **(_info.context_settings or {}),
            "allow_interspersed_args": False,
        }
