"""The `data` payload of an `ab` result (`runners/ab.py`'s `ab_result`).

Both modes share the pairs, the order, the per-stage paired verdicts and the drift record; one
process (`run_ab`) adds its allocator, warm-up and compile times; `--processes`
(`runners/ab_process.py`) adds the turn rule, each arm's command, every turn and the environment
and config keys that differed between the arms; `--attach` (`runners/attach_ab.py`) adds the
mode that ran, the turns, the script's command and the refs; the CLI adds the `--set-a`/`--set-b`
overrides.
A statistic that came out NaN (the MDE of fewer than two pairs) is written as null.
"""

from __future__ import annotations

from mlbaseline.documents.base import FiniteFloat, JsonValue, Strict
from mlbaseline.documents.data_throughput import Allocator, Contamination

Num = FiniteFloat | None  # a derived figure: null where it was NaN or could not be computed


class Pair(Strict):
    pair: int
    order: str  # "AB" or "BA"


class Dropped(Strict):
    """A pair a failed turn cut (`runners.ab.run_pairs`)."""

    pair: int
    order: str
    error: str


class Stage(Strict):
    """`stats.paired.PairedStage`: one stage's B/A ratio over the pairs and its verdict."""

    stage: str
    n: int
    ratio: Num
    ci_low: Num
    ci_high: Num
    p: Num
    p_adjusted: Num
    verdict: str
    mde: Num


class Control(Strict):
    """The control kernel over the run: late half over early half (common-mode drift)."""

    samples: int
    late_over_early: Num
    note: str


class Signature(Strict):
    """`comparison.drift.Signature.to_dict()`: every stage moved by one factor."""

    group: str
    factor: FiniteFloat
    stages: list[str]
    message: str


class Drift(Strict):
    control: Control | None = None
    signature: Signature | None = None


class ArmPair(Strict):
    a: int | None
    b: int | None


class CompileTimes(Strict):
    a: Num
    b: Num


class TurnRule(Strict):
    """`--processes`: how long each turn (one fresh process) measures."""

    mode: str
    min_time_s: FiniteFloat
    max_time_s: FiniteFloat
    turn_s: FiniteFloat


class ArmCommand(Strict):
    """`ab_process.Arm.describe()`: the command, working directory and extra environment."""

    command: list[str]
    cwd: str | None
    env: dict[str, str]


class Turn(Strict):
    """One arm's turn: a fresh process of `--processes`, or a turn of `--attach` (`steps`
    measured, `fresh`: in a process started for it, `process`: which of the arm's)."""

    pair: int
    arm: str
    returncode: int | None = None
    wall_s: FiniteFloat
    status: str
    error: str | None = None
    steps: int | None = None
    fresh: bool | None = None
    process: int | None = None  # which of the arm's long-lived processes took it
    unit: int | None = None  # --attach: the unit (an A and a B process) it was judged in
    step_s: Num = None  # --attach: the turn's median step and stage times
    stages_s: dict[str, FiniteFloat] | None = None


class Fallback(Strict):
    """`--attach`: the long-lived process that could not go on, and from which pair on each
    turn was a fresh process."""

    pair: int
    arm: str
    reason: str


class Unit(Strict):
    """`--attach`: one judged unit, an A and a B process, and the pairs of turns it took."""

    unit: int
    pairs: list[int]


class Ref(Strict):
    """`--ref-a/--ref-b`: the ref asked for and the commit its worktree was made at."""

    ref: str | None
    commit: str | None


class Overrides(Strict):
    a: list[str]
    b: list[str]


class MemoryRow(Strict):
    """One memory metric B against A by the memory rule (`runners.ab_memory.judge_memory`)."""

    metric: str
    stage: str | None
    memory: str
    median_old: Num  # arm A
    median_new: Num  # arm B
    delta: Num
    change: Num
    ci_low: Num
    ci_high: Num
    spread: Num
    scaled: bool = False  # the change is of more than A's own bytes (decision.memory_base)
    verdict: str
    named: bool


class Memory(Strict):
    """Memory of the arms (issue 28): each metric's verdict, the stage named, the sentence."""

    threshold: FiniteFloat
    rule: str
    metrics: list[MemoryRow]
    named: str | None
    verdict: str
    sentence: str


class Data(Strict):
    """`data` of an ab result."""

    pairs_done: int
    order: list[str]
    pairs: list[Pair]
    stop_reason: str
    dropped: list[Dropped]
    threshold: FiniteFloat
    alpha: FiniteFloat
    seed: int
    method: str
    stages: list[Stage]
    verdict: str
    drift: Drift
    memory: Memory | None = None  # where the arms' steps carried memory (issue 28)
    # the run's own record (`meta` of ab_result), both modes
    device: str | None = None
    pairs_requested: int | None = None
    budget_s: Num = None
    batch_size: ArmPair | None = None
    planned_order: list[str] | None = None
    stages_recorded: list[str] | None = None
    # one process
    allocator: Allocator | None = None
    warmup_steps: int | None = None
    compile_s: CompileTimes | None = None
    contamination: Contamination | None = None
    # --processes
    mode: str | None = None
    turn_rule: TurnRule | None = None
    arms: dict[str, ArmCommand] | None = None  # "a"/"b"
    turns: list[Turn] | None = None
    pair_index: list[int] | None = None
    # key -> [A's value, B's value]: whatever the two arms' fingerprints or configs hold under
    # that key (strings, numbers, lists, null when one lacks it): free-form JSON by nature
    environment_differs: dict[str, list[JsonValue]] | None = None
    config_differs: dict[str, list[JsonValue]] | None = None
    overrides: Overrides | None = None  # the CLI's --set-a / --set-b
    # --attach (runners/attach_ab.py): the mode that ran ("long-lived", "short-processes",
    # "long-lived, then short-processes"), the turn length, the script's command, processes
    # started per arm, the fallback, and each arm's ref and commit (--ref-a/--ref-b)
    turn_s: Num = None
    command: list[str] | None = None
    processes: ArmPair | None = None
    fallback: Fallback | None = None
    refs: dict[str, Ref] | None = None
    # the units judged: each one A and one B process, the pairs of turns they took (the
    # metrics' replicate ids are the units'); --pairs-per-process
    units: list[Unit] | None = None
    pairs_per_process: int | None = None
    # --cpus: the CPU ids both arms' processes were pinned to (null: not pinned)
    cpus: list[int] | None = None
    # files written before the units (one process per arm rotating): stage -> how much two
    # long-lived processes of one arm differed (ratio − 1); no longer written
    process_spread: dict[str, FiniteFloat] | None = None
