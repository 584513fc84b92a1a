"""`mlb ab`: two configs, interleaved step by step in one process, judged pair by pair."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mlbaseline import formatting as fmt
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
    label_overrides,
    load_config,
    opt,
)
from mlbaseline.config import Config
from mlbaseline.documents.data_ab import Data as AbData
from mlbaseline.errors import UsageError
from mlbaseline.results import Result, write_result

if TYPE_CHECKING:
    from mlbaseline.runners.ab_process import Arm, ProcessRun

# the runners import torch: they are imported when the command runs, not when `mlb` starts
from mlbaseline.measure.interleave import (
    DEFAULT_ATTACH_PAIRS,
    DEFAULT_ATTACH_TURN_S,
    DEFAULT_PAIRS,
    DEFAULT_PROCESS_PAIRS,
    DEFAULT_TURN_S,
    PAIRS_PER_PROCESS,
)
from mlbaseline.stats.paired import PAIRED_THRESHOLD

_STYLE = {"regressed": "red", "improved": "green", "unchanged": "", "inconclusive": "yellow"}


def _verdict(text: str) -> str:
    style = _STYLE.get(text, "")
    return f"[{style}]{text}[/{style}]" if style else text


def ab_data(result: Result) -> AbData:
    """The typed ab payload (report.payloads' reader, imported when a result is shown: it
    brings NumPy, which `mlb --help` does not need)."""
    from mlbaseline.report.sections_ab import ab_payload

    return ab_payload(result)


def ab_table(result: Result) -> Table:
    """Per stage: B/A − 1 [95% CI] (percent), Holm-adjusted p, verdict, MDE; 80 columns."""
    d = ab_data(result)
    units = f" in {len(d.units)} units" if d.units is not None else ""
    title = f"B vs A: {d.pairs_done} pairs{units}, band ±{fmt.percent(d.threshold)}"
    caption = "p: Wilcoxon signed-rank, Holm-adjusted; MDE at 80% power"
    table = compact_table(title, caption=caption, secondary=("MDE",))  # below, if too wide
    table.add_column("stage", no_wrap=True)
    for header in ("B/A−1", "95% CI", "p", "MDE"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for s in d.stages:
        change = s.ratio - 1 if s.ratio is not None else None
        ci = [v - 1 if v is not None else None for v in (s.ci_low, s.ci_high)]
        table.add_row(
            s.stage,
            fmt.signed_percent(change, 2),
            fmt.interval_percent(ci, 2),
            fmt.p_value(s.p_adjusted),
            fmt.percent(s.mde, 1, fmt.NA),  # a NaN MDE is null in the payload
            _verdict(s.verdict),
        )
    return table


def _arm_line(d: AbData, arm: str) -> str:
    from mlbaseline.report.sections_ab import arm_line  # the report's words, escaped for rich

    return escape(arm_line(d, arm))


def memory_table(d: AbData) -> Table:
    """Memory B against A by the memory rule (runners.ab_memory): A, B, the change, verdict."""
    mem = d.memory
    assert mem is not None
    title = f"memory B vs A, band ±{fmt.percent(mem.threshold)}"
    table = compact_table(title, caption="◀ the stage named; bytes each stage left held")
    table.add_column("metric", no_wrap=True)
    for header in ("A", "B", "B/A−1"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for r in mem.metrics:
        name = r.metric.removeprefix("mem.") + (" ◀" if r.named else "")
        own = r.delta / r.median_old if r.median_old and r.delta is not None else r.change
        table.add_row(name, fmt.value(r.median_old, "B"), fmt.value(r.median_new, "B"),
                      fmt.signed_percent(own), _verdict(r.verdict))  # fmt: skip
    return table


def render(result: Result, ui: Ui) -> None:
    from mlbaseline.report.sections_ab import pinned_to

    d = ab_data(result)
    for arm in ("a", "b"):
        ui.print(_arm_line(d, arm))
    ui.print(ab_table(result))
    if d.memory is not None:  # issue 28: the arms' memory, by the memory rule
        ui.print(memory_table(d))
        ui.print(escape(d.memory.sentence))
    if d.dropped:
        last = escape(d.dropped[-1].error)
        ui.print(f"{len(d.dropped)} pairs dropped (a turn failed); last: {last}")
    if d.command is not None:
        each = f", {d.pairs_per_process} pairs a unit" if d.pairs_per_process else ""
        ui.print(f"mode: {d.mode}, turns of {fmt.duration(d.turn_s)}{each}{pinned_to(d)}")
    ui.print(f"stopped by {d.stop_reason}; overall: {_verdict(d.verdict)}")


def _arm_sets(common: CommonOptions, extra: list[str] | None) -> list[str]:
    return [*(common.sets or []), *(extra or [])]


ListOpt = list[str] | None


@dataclass(frozen=True)
class AbOptions:
    set_a: Annotated[
        ListOpt, opt("--set-a", "Arm A only: KEY=VALUE on top of the config.", metavar="KEY=VALUE")
    ] = None
    set_b: Annotated[
        ListOpt, opt("--set-b", "Arm B only: KEY=VALUE on top of the config.", metavar="KEY=VALUE")
    ] = None
    pairs: Annotated[
        OptInt,
        opt(
            "--pairs",
            "Pairs (A and B) to run (default 55; 12 with --processes, 128 with --attach).",
            min=1,
        ),
    ] = None
    budget: Annotated[
        OptFloat, opt("--budget", "Stop after this many seconds (finished pairs kept).")
    ] = None
    threshold: Annotated[
        float,
        typer.Option("--threshold", help="Practical band for the ratio B/A, as a fraction.", min=0),
    ] = PAIRED_THRESHOLD
    processes: Annotated[
        bool,
        typer.Option(
            "--processes",
            help="Each arm's turn is a fresh process (--python/--cmd/--cwd/--env-X imply it).",
        ),
    ] = False
    turn_s: Annotated[
        OptFloat,
        opt(
            "--turn-s",
            f"Seconds each turn measures ({DEFAULT_TURN_S:g} with --processes, "
            f"{DEFAULT_ATTACH_TURN_S:g} with --attach).",
        ),
    ] = None
    python_a: Annotated[OptPath, opt("--python-a", "Arm A's interpreter (another venv).")] = None
    python_b: Annotated[OptPath, opt("--python-b", "Arm B's interpreter (another venv).")] = None
    cmd_a: Annotated[
        OptStr, opt("--cmd-a", "Arm A's command in place of `python -m mlbaseline`.")
    ] = None
    cmd_b: Annotated[
        OptStr, opt("--cmd-b", "Arm B's command in place of `python -m mlbaseline`.")
    ] = None
    cwd_a: Annotated[OptPath, opt("--cwd-a", "Arm A runs in DIR (another commit's checkout).")] = (
        None
    )
    cwd_b: Annotated[OptPath, opt("--cwd-b", "Arm B runs in DIR (another commit's checkout).")] = (
        None
    )
    env_a: Annotated[
        ListOpt, opt("--env-a", "Arm A's processes: KEY=VALUE in their env.", metavar="KEY=VALUE")
    ] = None
    env_b: Annotated[
        ListOpt, opt("--env-b", "Arm B's processes: KEY=VALUE in their env.", metavar="KEY=VALUE")
    ] = None
    attach: Annotated[
        bool,
        typer.Option(
            "--attach",
            help="Arms are your script (after --), unmodified, in long-lived processes.",
        ),
    ] = False
    ref_a: Annotated[
        OptStr, opt("--ref-a", "--attach in a temporary git worktree at REF.", metavar="REF")
    ] = None
    ref_b: Annotated[
        OptStr, opt("--ref-b", "--attach in a temporary git worktree at REF.", metavar="REF")
    ] = None
    short_processes: Annotated[
        bool,
        typer.Option(
            "--short-processes", help="--attach: a fresh process per turn (--pairs-per-process 1)."
        ),
    ] = False
    pairs_per_process: Annotated[
        int | None,
        typer.Option(
            "--pairs-per-process",
            help=f"--attach: pairs of turns one A and one B process take ({PAIRS_PER_PROCESS}).",
            min=1,
            metavar="N",
            show_default=False,
        ),
    ] = None
    cpus: Annotated[
        OptStr,
        opt(
            "--cpus",
            "--attach: run both arms' processes on these CPUs (1, 0,2, 2-3): on a shared "
            "machine, less noise between turns (bench/RESULTS.md, attach).",
            metavar="LIST",
        ),
    ] = None
    script: Annotated[
        ListOpt,
        typer.Argument(
            help="--attach: the training command for each arm, after `--`: python train.py ARGS…",
            metavar="CMD",
            show_default=False,
        ),
    ] = None

    def arm_options(self, arm: str) -> tuple[Path | None, str | None, Path | None, list[str]]:
        """(python, cmd, cwd, env items) of one arm."""
        return tuple(getattr(self, f"{k}_{arm}") for k in ("python", "cmd", "cwd", "env"))  # type: ignore[return-value]

    @property
    def attaching(self) -> bool:
        """The arms are the user's script (--attach; --ref-a/--ref-b imply it)."""
        return self.attach or bool(self.ref_a or self.ref_b)

    @property
    def fresh(self) -> bool:
        """Fresh processes: asked for, or implied by an option only they can honour."""
        if self.attaching:
            return False
        return self.processes or any(v for a in ("a", "b") for v in self.arm_options(a))


def _prefix(arm: str, python: Path | None, cmd: str | None) -> tuple[str, ...]:
    """The command that starts mlbaseline for one arm's turns."""
    flag = f"--python-{arm}"
    if python is not None and cmd is not None:
        raise UsageError(f"{flag} and --cmd-{arm}: give one of them")
    if python is not None:
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise UsageError(f"{flag}: {python}: not an executable file")
        return (str(python), "-m", "mlbaseline")
    if cmd is not None:
        words = shlex.split(cmd)
        if not words or shutil.which(words[0]) is None:
            raise UsageError(f"--cmd-{arm}: {cmd!r}: no such command")
        return tuple(words)
    from mlbaseline.runners.throughput import CHILD_PREFIX

    return CHILD_PREFIX


def _process_arm(cfg: Config, o: AbOptions, arm: str) -> Arm:
    from mlbaseline.runners.ab_process import Arm, parse_env

    python, cmd, cwd, env = o.arm_options(arm)
    if cwd is not None and not cwd.is_dir():
        raise UsageError(f"--cwd-{arm}: {cwd}: not a directory")
    resolved = cwd.resolve() if cwd is not None else None
    return Arm(cfg, _prefix(arm, python, cmd), resolved, parse_env(env, f"--env-{arm}"))


def _check_attach(o: AbOptions) -> None:
    """--attach runs the script after --, in two folders or at two refs: the config-built
    arms' options mean nothing there, and the script's command is required."""
    if not o.attaching:
        if o.short_processes:
            raise UsageError("--short-processes: only with --attach")
        if o.pairs_per_process is not None:
            raise UsageError("--pairs-per-process: only with --attach")
        if o.cpus is not None:
            raise UsageError("--cpus: only with --attach")
        if o.script:
            raise UsageError(f"unexpected argument {o.script[0]!r} (a script needs --attach)")
        return
    if not o.script:
        raise UsageError("--attach: give the script's command after --, e.g. -- python train.py")
    for flag, value in (
        ("--processes", o.processes),
        ("--set-a", o.set_a),
        ("--set-b", o.set_b),
        ("--python-a", o.python_a),
        ("--python-b", o.python_b),
        ("--cmd-a", o.cmd_a),
        ("--cmd-b", o.cmd_b),
    ):
        if value:
            raise UsageError(f"{flag}: not with --attach (the arms are the script's versions)")


def _check(o: AbOptions) -> None:
    if o.threshold <= 0:
        raise UsageError("--threshold: must be > 0")
    if o.budget is not None and o.budget <= 0:
        raise UsageError("--budget: must be > 0 seconds")
    _check_attach(o)
    if o.turn_s is not None and not (o.fresh or o.attaching):
        raise UsageError("--turn-s: only with --processes or --attach (turns of N seconds)")
    if o.turn_s is not None and o.turn_s <= 0:
        raise UsageError("--turn-s: must be > 0 seconds")


def _write_arms(run: ProcessRun, output: Path | None, force: bool, ui: Ui) -> None:
    """Each arm's pooled result beside the verdict (ab.json → ab.a.json, ab.b.json)."""
    from mlbaseline.runners.ab_process import arm_paths

    if output is None:
        return
    for arm, path in arm_paths(output).items():
        write_result(run.arms[arm], path, force=force)
        run.result.artifacts[f"arm_{arm}"] = path.name
        ui.print(f"[dim]arm {arm.upper()} written to {path}[/dim]")


def _measure_attached(cfg: Config, o: AbOptions, ui: Ui) -> Result:
    """--attach / --ref-a --ref-b: the script's two versions, turn by turn."""
    from mlbaseline.envinfo import parse_cpus
    from mlbaseline.runners.ab_process import parse_env
    from mlbaseline.runners.attach_ab import run_script_ab

    cpus = parse_cpus(o.cpus) if o.cpus is not None else None
    return run_script_ab(
        cfg,
        o.script or [],
        cwds={"a": o.cwd_a, "b": o.cwd_b},
        refs={"a": o.ref_a, "b": o.ref_b},
        envs={"a": parse_env(o.env_a, "--env-a"), "b": parse_env(o.env_b, "--env-b")},
        pairs=o.pairs or DEFAULT_ATTACH_PAIRS,
        budget_s=o.budget,
        progress=ui.progress,
        turn_s=o.turn_s or DEFAULT_ATTACH_TURN_S,
        threshold=o.threshold,
        short=o.short_processes,
        per_process=o.pairs_per_process or PAIRS_PER_PROCESS,
        cpus=cpus,
    )


def _measure_configs(
    arms: dict[str, Config], o: AbOptions, common: CommonOptions, ui: Ui
) -> Result:
    """The two config arms: in this process, or (--processes) as fresh processes, whose
    pooled arms are written beside the verdict; the --set-a/--set-b overrides recorded."""
    from mlbaseline.runners.ab import run_ab
    from mlbaseline.runners.ab_process import run_ab_processes

    if o.fresh:
        run = run_ab_processes(
            _process_arm(arms["a"], o, "a"),
            _process_arm(arms["b"], o, "b"),
            o.pairs or DEFAULT_PROCESS_PAIRS,
            o.budget,
            ui.progress,
            turn_s=o.turn_s or DEFAULT_TURN_S,
            threshold=o.threshold,
        )
        _write_arms(run, common.output, common.force, ui)
        result = run.result
    else:
        pairs = o.pairs or DEFAULT_PAIRS
        result = run_ab(arms["a"], arms["b"], pairs, o.budget, ui.progress, threshold=o.threshold)
    result.data["overrides"] = {"a": list(o.set_a or []), "b": list(o.set_b or [])}
    return result


@command("ab")
def ab(common: CommonOptions, o: AbOptions) -> None:
    """Paired, interleaved A/B of two training-step configs or environments.

    Both arms are built from the same config (--config / --profile / --set), then --set-a and
    --set-b apply to one arm each. By default both arms live in one process: after a warm-up
    they run one training step each per pair, in blocks ABBA or BAAB (seeded by
    golden.seed). With --processes, each arm's turn is a short fresh process (`mlb throughput`
    training the first batch size for --turn-s seconds), in the same order; --python-X,
    --cmd-X, --cwd-X and --env-X (X = a or b) start one arm's processes from another venv,
    checkout (commit) or environment, and imply --processes; -o ab.json also writes each
    arm's pooled processes to ab.a.json and ab.b.json. Drift of the machine hits both arms of
    a pair alike and cancels in the ratio. Per stage: the median per-pair ratio B/A (of step
    times, or of each process's medians) with a bootstrap CI, a Wilcoxon signed-rank p (Holm
    across stages); regressed only when p < compare.alpha AND the CI lies beyond
    ±threshold. Stops after --pairs or --budget seconds; Ctrl-C keeps the finished pairs
    (exit 130). Exit 1 when a stage regressed, 3 when the arms run on different devices.

    With --attach, the arms are two versions of your own training script (the command after
    --), unmodified: run in --cwd-a and --cwd-b, or, with --ref-a/--ref-b, in temporary git
    worktrees of this repository at those refs (removed afterwards, Ctrl-C included; a
    worktree holds the commit, so commit your change first: edits not committed are warned
    about, being in neither arm). An A and
    a B process warm up together, then take --pairs-per-process pairs of --turn-s turns:
    these units of processes (two processes of one script differ by a few percent), not the
    turns, are what the test counts; --short-processes: a fresh process per turn. Every
    stage the hooks see, and the script's own, is judged. On a shared machine (a CI runner,
    a cloud VM), --cpus pins both arms to the same CPUs: the turns then meet the same cores.

    Example: mlb ab --set-b workload.threads=2 --pairs 55 -o ab.json

    Example: mlb ab --processes --cwd-b ../mlb-old --pairs 12 -o ab.json

    Example: mlb ab --ref-a main --ref-b HEAD -o ab.json -- python train.py --epochs 1

    Example: mlb ab --ref-a main --ref-b HEAD --cpus 1 -o ab.json -- python train.py
    """
    _check(o)
    arms: dict[str, Config] = {}

    def prepare(cfg: Config) -> None:
        for arm, extra in (("a", o.set_a), ("b", o.set_b)):
            sets = _arm_sets(common, extra)
            arms[arm] = load_config(common.config, common.profile, sets, label_overrides(common))

    from mlbaseline.runners.ab_process import arm_paths

    def measure(cfg: Config, ui: Ui) -> Result:
        if o.attaching:
            return _measure_attached(cfg, o, ui)
        return _measure_configs(arms, o, common, ui)

    outputs = None
    if o.fresh and common.output is not None:
        outputs = (common.output, *arm_paths(common.output).values())
    execute(common, measure, prepare=prepare, render=render, outputs=outputs)


__all__: list[str] = ["AbOptions", "ab", "ab_table"]
