"""`mlb ab --processes` core: a paired A/B run whose arms take turns as short fresh processes.

For arms that cannot live in one process (two commits, two environments: two interpreters or
venvs, two checkouts, two sets of environment variables), each arm's turn is one fresh
`PREFIX throughput -c CONFIG --json --quiet` process (the child helpers of
`runners.throughput`, the same ones behind `--repeats`): training only, the arm's first batch
size, a short measuring time (`turn_s`: the child's stop rule measures at least that long, and
at most `TURN_CAP`× that with its warm-up). The turns run pair by pair in the ABBA/BAAB order of
`measure.interleave.abba_order` through `runners.ab.run_pairs` (budget, Ctrl-C keeps the
finished pairs, a failed turn drops its pair, `MAX_FAILURES` in a row stop the run), so drift
slower than a pair hits both arms alike. Each process is summarised by its per-stage medians
(and its residual's median); the per-pair ratios B/A of those are judged by `runners.ab.judge`
/ `ab_result` (`stats.compare_paired`: Wilcoxon signed-rank, Holm, bootstrap CI), the same
statistics and result shape as the in-process run.

What the caller gets: the verdict result (kind "ab", `data["mode"] == "processes"`, every turn
in `data["turns"]`, dropped pairs in `data["dropped"]`), and one pooled throughput result per
arm (`runners.throughput.replicates_result`) over the processes of the finished pairs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline import scratch, stats
from mlbaseline.config import Config, flatten
from mlbaseline.errors import UsageError
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.contamination import record as record_contamination
from mlbaseline.measure.interleave import ARMS, DEFAULT_PROCESS_PAIRS, DEFAULT_TURN_S, abba_order
from mlbaseline.measure.memory_step import StepMemory
from mlbaseline.measure.step import TRAIN_STAGES, StepRecord
from mlbaseline.measure.timers import StepTimes
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.redact import redact_argv, redact_env
from mlbaseline.results import Result
from mlbaseline.runners.ab import (
    MAX_FAILURES,
    RECORDED,
    PairLog,
    TurnFailed,
    _check_arms,
    ab_result,
    check_turns,
    mark_lost_turns,
    pairs_account,
    run_pairs,
)
from mlbaseline.runners.throughput import (
    CHILD_PREFIX,
    ChildRun,
    child_command,
    replicates_result,
    run_child,
    write_child_config,
)

TURN_CAP = 3.0  # a turn's stop-rule cap, warm-up included, as a multiple of turn_s
METHOD = (
    "fresh process per arm turn; per-pair log-ratio B/A of each process's per-stage medians; "
    "median, bootstrap CI; Wilcoxon signed-rank; Holm"
)


@dataclass(frozen=True)
class Arm:
    """How one arm's turns run: its config, the command that starts mlbaseline (this
    interpreter's `python -m mlbaseline` by default; another venv's python, or any command),
    the working directory (a checkout of another commit: `-m` imports from there first), and
    environment variables on top of this process's."""

    cfg: Config
    prefix: tuple[str, ...] = CHILD_PREFIX
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """As stored: credentials in the command's options and the environment masked."""
        return {
            "command": redact_argv(self.prefix),
            "cwd": None if self.cwd is None else str(self.cwd),
            "env": redact_env(self.env),
        }


@dataclass(frozen=True)
class Turn:
    """One arm's turn as a launcher sees it: the arm, its planned pair, and what to run."""

    arm: str
    pair: int
    command: list[str]
    cwd: Path | None
    env: dict[str, str] | None  # the whole environment; None: this process's


Launcher = Callable[[Turn], ChildRun]


def launch(turn: Turn) -> ChildRun:
    """The real launcher: one fresh process (tests inject a fake)."""
    return run_child(turn.command, turn.cwd, turn.env)


@dataclass
class ProcessRun:
    """What `run_ab_processes` returns: the verdict and each arm's pooled result."""

    result: Result
    arms: dict[str, Result]


def process_times(result: Result, batch_size: int) -> StepTimes:
    """One process's summary: the median of each training stage, of the step and of the
    residual (kept as its own figure). No training step measured → TurnFailed, with why."""
    prefix = f"train.bs{batch_size}"
    step = result.measurements.get(f"{prefix}.step")
    if step is None or not step.values:
        entry = result.data.get("batch_sizes", {}).get(str(batch_size), {})
        train = entry.get("train") if isinstance(entry.get("train"), dict) else {}
        why = train.get("error") or train.get("status") or "no training step measured"
        raise TurnFailed(f"batch size {batch_size}: {why}")

    def median(name: str) -> float:
        m = result.measurements.get(f"{prefix}.{name}")
        return stats.summarize(m.values).median if m is not None and m.values else 0.0

    stages = {s: median(s) for s in (*TRAIN_STAGES, "residual")}
    memory = process_memory(result, prefix)  # judged by runners.ab's memory rule
    return StepTimes(total_s=stats.summarize(step.values).median, stages=stages, memory=memory)


def process_memory(result: Result, prefix: str) -> StepMemory | None:
    """One process's memory: the medians of its `mem.peak`, `mem.reserved` and each stage's
    held bytes (`mem.<stage>`); None where the process measured no memory."""

    def median(name: str) -> int | None:
        m = result.measurements.get(f"{prefix}.mem.{name}")
        return int(stats.summarize(m.values).median) if m is not None and m.values else None

    peak = median("peak")
    if peak is None:
        return None
    held = {s: v for s in TRAIN_STAGES if (v := median(s)) is not None}
    return StepMemory(held, peak, median("reserved"))


@dataclass
class _Turns:
    """The turn loop's side of the run: which planned pair is on, every turn's record, the
    result of every turn that measured something."""

    arms: Mapping[str, Arm]
    paths: Mapping[str, Path]
    batch_size: Mapping[str, int]
    launcher: Launcher
    clock: Clock
    pair: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)
    results: dict[tuple[int, str], Result] = field(default_factory=dict)

    def step(self, arm: str) -> Callable[[], StepRecord]:
        return lambda: self.turn(arm)

    def turn(self, arm: str) -> StepRecord:
        spec = self.arms[arm]
        env = {**os.environ, **spec.env} if spec.env else None
        cmd = child_command(self.paths[arm], spec.prefix)
        start = self.clock.now_ns()
        try:
            run = self.launcher(Turn(arm, self.pair, cmd, spec.cwd, env))
        except OSError as exc:  # the command could not start: a failed turn like a crash
            run = ChildRun(None, f"could not start {cmd[0]}: {exc}", -1, False)
        record: dict[str, Any] = {
            "pair": self.pair,
            "arm": arm,
            "returncode": run.returncode,
            "wall_s": (self.clock.now_ns() - start) / 1e9,
            "status": run.result.status if run.result is not None else "no result",
        }
        self.records.append(record)
        if run.interrupted or record["status"] == "interrupted":
            raise KeyboardInterrupt
        try:
            if run.result is None:
                raise TurnFailed(f"no result ({run.error})")
            times = process_times(run.result, self.batch_size[arm])
        except TurnFailed as exc:
            record["error"] = str(exc)
            raise TurnFailed(f"arm {arm.upper()}: {exc}") from None
        self.results[(self.pair, arm)] = run.result
        return StepRecord(times, self.batch_size[arm])

    def finished(self, log: PairLog) -> list[int]:
        """The planned pair index of each finished pair, in order (both turns measured, not
        dropped; a pair cut by Ctrl-C has at most one)."""
        dropped = {d["pair"] for d in log.dropped}
        both = sorted(
            {
                p
                for p, _ in self.results
                if p not in dropped and all((p, a) in self.results for a in ARMS)
            }
        )
        return both[: len(log.done)]


def _arm_results(turns: _Turns, pairs: list[int], arms: Mapping[str, Arm]) -> dict[str, Result]:
    """Per arm: its processes of the finished pairs, pooled (replicate id = finished pair)."""
    out = {}
    for arm in ARMS:
        children = [turns.results[(p, arm)] for p in pairs]
        out[arm] = replicates_result(arms[arm].cfg.to_dict(), children)
        out[arm].data["ab_pairs"] = pairs
        if not children:
            out[arm].mark("failed", "no pair finished: no process of this arm is kept")
    return out


def _environment(result: Result, arm_results: Mapping[str, Result]) -> None:
    """The verdict's environment is arm A's (as its first process saw it); blocking keys that
    differ between the arms are listed: expected when two environments are compared, and
    worth seeing when they are not."""
    env = {arm: r.environment.get("blocking", {}) for arm, r in arm_results.items()}
    result.environment = arm_results["a"].environment
    keys = sorted(k for k in set(env["a"]) | set(env["b"]) if env["a"].get(k) != env["b"].get(k))
    result.data["environment_differs"] = {k: [env["a"].get(k), env["b"].get(k)] for k in keys}
    if keys and all(env.values()):
        result.warn(
            "arm_environments_differ",
            f"the arms ran in different environments ({', '.join(keys)}): "
            "the ratio measures those differences too",
            keys=keys,
        )


def _configs(
    result: Result, arm_results: Mapping[str, Result], cfg_a: Config, cfg_b: Config
) -> None:
    """The config each arm's processes resolved (another checkout fills what it is not given
    from its own profile and defaults): differences are listed, and a warning names those
    that --set-a / --set-b did not ask for."""
    ran = {arm: flatten(r.config) for arm, r in arm_results.items()}
    built_a, built_b = flatten(cfg_a.to_dict()), flatten(cfg_b.to_dict())
    asked = {k for k in set(built_a) | set(built_b) if built_a.get(k) != built_b.get(k)}
    keys = sorted(k for k in set(ran["a"]) | set(ran["b"]) if ran["a"].get(k) != ran["b"].get(k))
    keys = [k for k in keys if k != "workload.import_paths"]  # each arm's own config folder
    result.data["config_differs"] = {k: [ran["a"].get(k), ran["b"].get(k)] for k in keys}
    unasked = [k for k in keys if k not in asked]
    if unasked:
        result.warn(
            "arm_configs_differ",
            f"the arms' processes resolved different configs ({', '.join(unasked)}): "
            "another checkout's profile or defaults differ; set those fields to compare alike",
            keys=unasked,
        )


def run_ab_processes(
    arm_a: Arm,
    arm_b: Arm,
    pairs: int = DEFAULT_PROCESS_PAIRS,
    budget_s: float | None = None,
    progress: Progress | None = None,
    *,
    turn_s: float = DEFAULT_TURN_S,
    threshold: float = stats.PAIRED_THRESHOLD,
    seed: int | None = None,
    launcher: Launcher | None = None,
    clock: Clock | None = None,
    max_failures: int = MAX_FAILURES,
) -> ProcessRun:
    """Run A and B as alternating fresh processes, `pairs` pairs in ABBA/BAAB order (or until
    `budget_s`), and judge B/A per stage from each process's per-stage medians. `seed`
    (default A's golden.seed) drives the order and the bootstrap; `launcher` (default
    `launch`: a real fresh process) runs one turn."""
    check_turns(pairs, turn_s, budget_s)
    arms = {"a": arm_a, "b": arm_b}
    device = _check_arms(arm_a.cfg, arm_b.cfg)
    seed = arm_a.cfg.golden.seed if seed is None else seed
    order = abba_order(pairs, seed)
    clock = clock or PerfClock()
    batch = {arm: spec.cfg.throughput.batch_sizes[0] for arm, spec in arms.items()}
    turn = {"mode": "train", "min_time_s": turn_s, "max_time_s": round(TURN_CAP * turn_s, 6)}
    account = pairs_account(arm_a.cfg)  # the turns are this process's children
    with scratch.folder("ab") as tmp:
        paths = _turn_configs(arms, Path(tmp), batch, turn)
        turns = _Turns(arms, paths, batch, launcher or launch, clock)
        progress = progress or NullProgress()
        with (
            progress.task("ab: pairs (fresh processes)", total=pairs) as task,
            account.phase("ab pairs"),
        ):

            def on_pair(i: int) -> None:
                turns.pair = i + 1
                task.advance()

            steps = {arm: turns.step(arm) for arm in ARMS}
            log = run_pairs(steps, order, budget_s, clock, 0, on_pair, max_failures)
    meta = {
        "mode": "processes",
        "device": device,
        "pairs_requested": pairs,
        "budget_s": budget_s,
        "turn_rule": {**turn, "turn_s": turn_s},
        "batch_size": batch,
        "planned_order": order,
        "stages_recorded": list(RECORDED),
        "arms": {arm: spec.describe() for arm, spec in arms.items()},
    }
    result = ab_result(arm_a.cfg, arm_b.cfg, log, threshold, seed, meta)
    record_contamination(result, account)
    mark_lost_turns(result, log, max_failures)
    return ProcessRun(result, _annotate(result, turns, log, arms))


def _annotate(
    result: Result, turns: _Turns, log: PairLog, arms: dict[str, Arm]
) -> dict[str, Result]:
    """The turns on the verdict result, and each arm's result pooled from its processes (with
    the machine and the configs they ran, where a pair was done)."""
    done = turns.finished(log)
    result.data.update(method=METHOD, turns=turns.records, pair_index=done)
    arm_results = _arm_results(turns, done, arms)
    if done:
        _environment(result, arm_results)
        _configs(result, arm_results, arms["a"].cfg, arms["b"].cfg)
    return arm_results


def _turn_configs(
    arms: dict[str, Arm], tmp: Path, batch: dict[str, int], turn: dict[str, Any]
) -> dict[str, Path]:
    """Each arm's child config: what differs from its profile, one batch size, a short turn."""
    return {
        arm: write_child_config(
            spec.cfg, tmp, f"{arm}.yaml", changes_only=True, batch_sizes=[batch[arm]], **turn
        )
        for arm, spec in arms.items()
    }


def arm_paths(output: Path) -> dict[str, Path]:
    """Where each arm's pooled result goes beside the verdict `output`: ab.json → ab.a.json,
    ab.b.json."""
    return {arm: output.with_name(f"{output.stem}.{arm}{output.suffix or '.json'}") for arm in ARMS}


def parse_env(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    """['K=V', …] → {K: V}; a malformed item is bad input."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


__all__ = [
    "DEFAULT_PROCESS_PAIRS",
    "DEFAULT_TURN_S",
    "Arm",
    "Launcher",
    "ProcessRun",
    "Turn",
    "arm_paths",
    "launch",
    "parse_env",
    "process_times",
    "run_ab_processes",
]
