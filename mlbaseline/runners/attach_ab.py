"""`mlb ab --attach` core: a paired A/B of two versions of the user's own, unmodified script.

Each arm is the same command (`python train.py …`) run in its own folder (two checkouts:
`--cwd-a/--cwd-b`, or the worktrees `runners.worktrees` makes for `--ref-a/--ref-b`), under the
attach hooks in turn mode (`runners.attach_turns`, the child's side). The turns run pair by pair
in the ABBA/BAAB order of `measure.interleave.abba_order`, through `runners.ab.run_pairs`
(budget, Ctrl-C keeps the finished pairs, a failed turn drops its pair, `MAX_FAILURES` in a row
stop the run). A turn is `turn_s` seconds of one arm's steady-state steps while the other arm's
process waits, blocked at a step's end.

**Processes, and the unit the statistics count.** Two processes of the same script differ by
a few percent for as long as they live (memory layout, the core they run on): measured here, one
process in four was 4-7% slower at its step than three others of the same code. One process per
arm would put that difference into every pair, and a paired test over the pairs would call it a
regression with great confidence (the A/A runs did, 2 in 8). So the processes come in *units*:
an A process and a B process, started together (their import and warm-up overlap), take
`pairs_per_process` consecutive pairs of turns, then both are ended and the next unit's pair
starts. Each unit is summarised per arm and figure (step, each stage) by `paired_figure`: the
median over its pairs of each pair's ratio B/A of the turns' median times, split around the
unit's level; the per-unit ratios B/A go to `runners.ab.ab_result` (`stats.compare_paired`:
Wilcoxon signed-rank, Holm, bootstrap CI), the same statistics, verdicts and result shape as
every `mlb ab`: the process effect is in the spread the test sees, not hidden from it. Import
and warm-up are paid once per unit, not once per turn; `pairs_per_process=1` is a fresh process
per turn.

When a process cannot go on (its script ended, or it stopped answering), the rest of the run
falls back to a short fresh process per turn for both arms (each pays its warm-up, measures one
turn and is stopped; each pair its own unit), and the result says so: `data.mode` is
"long-lived", "short-processes" (`short=True`, or asked for) or "long-lived, then
short-processes" with `data.fallback` saying after which pair and why.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mlbaseline import scratch, stats
from mlbaseline.config import Config
from mlbaseline.envinfo import affinity_list, fingerprint, pin_tree
from mlbaseline.errors import UsageError
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.contamination import record as record_contamination
from mlbaseline.measure.determinism import resolve_device
from mlbaseline.measure.gpu import GpuProbe
from mlbaseline.measure.interleave import (
    ARMS,
    DEFAULT_ATTACH_PAIRS,
    DEFAULT_ATTACH_TURN_S,
    PAIRS_PER_PROCESS,
    abba_order,
)
from mlbaseline.measure.step import TRAIN_STAGES, StepRecord
from mlbaseline.measure.timers import StepTimes
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.redact import redact_argv, redact_env
from mlbaseline.results import Result
from mlbaseline.runners.ab import (
    MAX_FAILURES,
    PairLog,
    TurnFailed,
    ab_result,
    check_turns,
    mark_lost_turns,
    pairs_account,
    run_pairs,
)
from mlbaseline.runners.attach import refuse_launcher
from mlbaseline.runners.attach_turns import MIN_STEPS
from mlbaseline.runners.attach_units import extra_stages, turn_times, unit_log
from mlbaseline.runners.worktrees import signals_held, worktrees
from mlbaseline.safewrite import open_stream

START_TIMEOUT_S = 300.0  # import + first step + warm-up of one arm's process
TURN_SLACK_S = 60.0  # a turn that has not answered turn_s + this later is lost
STOP_GRACE_S = 10.0  # a stopped arm ends at its next step's end; then SIGINT, then SIGKILL
LONG, SHORT = "long-lived", "short-processes"
METHOD = (
    "units of one A and one B process (--pairs-per-process pairs of turns each, or a fresh "
    "process per turn, see mode), turns of --turn-s seconds after the warm-up; per-unit "
    "log-ratio B/A: the median over its pairs of each pair's log-ratio of the turns' median "
    "step and stage times; median, bootstrap CI; Wilcoxon signed-rank; Holm"
)


@dataclass(frozen=True)
class ScriptArm:
    """One arm: the command, the folder it runs in, extra environment variables, and what
    the folder is (a ref and its commit for a worktree)."""

    command: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)
    ref: str | None = None
    commit: str | None = None
    uncommitted: tuple[str, ...] = ()  # a worktree's: edits of the checkout it lacks

    def describe(self) -> dict[str, Any]:
        """As stored: credentials in the command's options and the environment masked."""
        return {
            "command": redact_argv(self.command),
            "cwd": str(self.cwd),
            "env": redact_env(self.env),
        }


class ArmChild(Protocol):
    """A running arm process as the turn loop drives it (`attach_turns`' protocol)."""

    def send(self, command: dict[str, Any]) -> None: ...

    def event(self, timeout_s: float) -> dict[str, Any] | None:
        """The next status event; None when the process ended (its status fd closed).
        No event within `timeout_s` → TimeoutError."""
        ...

    def end(self) -> str:
        """Stop the process (stop command, then signals after a grace period) and wait for
        it; returns how it ended (exit code and its last stderr line)."""
        ...

    def pin(self) -> None:
        """Past its warm-up: move it (all its threads and processes) onto the CPUs it is to
        measure on (`--cpus`); nothing where none were asked for."""
        ...


Spawner = Callable[[ScriptArm, str], ArmChild]  # (arm, "a"/"b") → a started process


class PipeChild:
    """A real arm process: commands go down `control` (the write end of its control pipe),
    events come up `status` (the read end of its status pipe), its output goes to `log`."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        control: int,
        status: int,
        log: Path,
        cpus: frozenset[int] | None = None,
    ):
        self.proc, self.control, self.status, self.log = proc, control, status, log
        self.cpus = cpus
        self.buffer = b""

    def pin(self) -> None:
        if self.cpus is not None:
            pin_tree(self.proc.pid, self.cpus)

    def send(self, command: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # it is gone: the next event() says so
            os.write(self.control, (json.dumps(command) + "\n").encode())

    def event(self, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.status], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self.status, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return {"event": "error", "message": f"status: not an event: {line[:80]!r}"}
        return event

    def end(self) -> str:
        """Stop (the script exits at its next step end), then SIGINT, then SIGKILL; wait."""
        self.send({"cmd": "stop"})
        for fd in (self.control, self.status):
            with contextlib.suppress(OSError):
                os.close(fd)
        for grace, sig in ((STOP_GRACE_S, signal.SIGINT), (STOP_GRACE_S, signal.SIGKILL)):
            try:
                self.proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
        code = self.proc.wait()
        tail = _last_line(self.log)
        return f"exit code {code}" + (f": {tail}" if tail and code != 0 else "")


def spawn_in(logs: Path, cpus: frozenset[int] | None = None) -> Spawner:
    """The real spawner: each arm's process runs its command in its folder, in turn mode,
    under `mlb attach`'s boot (`runners.attach.write_boot` / `child_env`: the hooks are
    installed before the script's first line, with `attach_turns`' sink), with a control and
    a status pipe, in its own session (a terminal's Ctrl-C reaches this process, which stops
    the arms itself), its output to a log in `logs` (two scripts' output interleaved on one
    terminal would be noise; the last line of a failed one is in its error). `cpus`: every
    arm's process (and what it starts) is moved onto these CPUs once past its warm-up
    (`--cpus`, `PipeChild.pin`): its import and warm-up run where this process may, so that a
    unit's two processes start side by side, not one after the other on one CPU."""
    from mlbaseline.runners import attach

    boot = logs / "boot"
    boot.mkdir(exist_ok=True)
    attach.write_boot(boot)
    count = itertools.count()

    def spawn(arm: ScriptArm, name: str) -> PipeChild:
        control_r, control_w = os.pipe()
        status_r, status_w = os.pipe()
        env = attach.child_env(boot, "turns", status_w, control_r, extra=arm.env)
        log_path = logs / f"{name}-{next(count)}.log"
        try:
            with open_stream(log_path, mode="wb") as log:
                proc = subprocess.Popen(
                    list(arm.command),
                    cwd=arm.cwd,
                    env=env,
                    pass_fds=(control_r, status_w),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except BaseException:
            for fd in (control_w, status_r):
                os.close(fd)
            raise
        finally:
            os.close(control_r)  # the child's ends: only the child holds them now
            os.close(status_w)
        return PipeChild(proc, control_w, status_r, log_path, cpus)

    return spawn


def _last_line(path: Path, size: int = 4096) -> str:
    """The last non-blank line of a child's log (its stderr's last word, usually)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


@dataclass
class _Turns:
    """The turn loop's side: the processes (in LONG mode one A and one B per unit of
    `per_process` pairs, started together; else a fresh one per turn), the mode, every
    turn's record and every measured turn's figures."""

    arms: Mapping[str, ScriptArm]
    spawner: Spawner
    turn_s: float
    clock: Clock
    mode: str = LONG
    per_process: int = PAIRS_PER_PROCESS
    start_timeout_s: float = START_TIMEOUT_S
    pair: int = 0
    children: dict[str, ArmChild] = field(default_factory=dict)  # by slot: "a0", "b3", …
    records: list[dict[str, Any]] = field(default_factory=list)
    fallback: dict[str, Any] | None = None
    started: dict[str, int] = field(default_factory=lambda: {a: 0 for a in ARMS})
    # (arm, pair, unit, figures) of every turn measured
    figures: list[tuple[str, int, int, StepTimes]] = field(default_factory=list)

    def step(self, arm: str) -> Callable[[], StepRecord]:
        return lambda: self.turn(arm)

    def run(
        self, order: list[str], budget_s: float | None, progress: Progress, max_failures: int
    ) -> PairLog:
        """The turns, pair by pair in `order` (`runners.ab.run_pairs`); every process is
        ended afterwards, however the loop ended."""
        try:
            with progress.task("ab: pairs (attached)", total=len(order)) as task:

                def on_pair(i: int) -> None:
                    self.pair = i + 1
                    task.advance()

                steps = {arm: self.step(arm) for arm in ARMS}
                return run_pairs(steps, order, budget_s, self.clock, 0, on_pair, max_failures)
        finally:
            self.close()

    def unit(self) -> int:
        """The unit the current pair belongs to: its processes' block in LONG mode; after a
        fallback to fresh processes, each pair its own (numbered past every block)."""
        if self.mode == LONG:
            return self.pair // self.per_process
        return self.pair + self.pair // self.per_process + 1

    def turn(self, arm: str) -> StepRecord:
        start = self.clock.now_ns()
        long = self.mode == LONG
        index = self.unit() if long else 0
        slot = f"{arm}{index}"
        # "interrupted" unless the turn ends otherwise: Ctrl-C is the one way out unrecorded
        record: dict[str, Any] = {"pair": self.pair, "arm": arm, "status": "interrupted"}
        record.update(process=index, fresh=slot not in self.children)
        self.records.append(record)
        try:
            if long:
                self._open_unit(index)
            child = self.children.get(slot) or self._start(arm, slot)
            unit = self.unit()  # a start that failed over to fresh processes renumbers
            steps, partial = self._measure(slot, child)
        except TurnFailed as exc:
            record.update(status="failed", error=str(exc))
            raise TurnFailed(f"arm {arm.upper()}: {exc}") from None
        finally:
            record["wall_s"] = (self.clock.now_ns() - start) / 1e9
        record.update(status="partial" if partial else "ok", steps=len(steps), unit=unit)
        if self.mode == SHORT and slot in self.children:
            self._end(slot)
        times, samples = turn_times(steps)
        record.update(step_s=times.total_s, stages_s=dict(times.stages))
        self.figures.append((arm, self.pair, unit, times))
        return StepRecord(times, samples)

    def _open_unit(self, index: int) -> None:
        """The unit's two processes: any of this one's not running yet are started together
        (their imports and warm-ups overlap) while the last unit's are told to stop, and
        waited on until each is past its warm-up; the last unit's are reaped before anything
        is measured (their exit overlaps the start, never a turn)."""
        wanted = {f"{arm}{index}": arm for arm in ARMS}
        old = [slot for slot in self.children if slot not in wanted]
        for slot in old:
            self.children[slot].send({"cmd": "stop"})
        new = [slot for slot in wanted if slot not in self.children]
        for slot in new:
            self.children[slot] = self._spawn(wanted[slot])
        for slot in new:
            self._warmed(slot, self.children[slot])
        for slot in old:
            self._end(slot)

    def _spawn(self, arm: str) -> ArmChild:
        try:
            child = self.spawner(self.arms[arm], f"{arm}{self.unit() if self.mode == LONG else 0}")
        except OSError as exc:
            raise TurnFailed(f"could not start {self.arms[arm].command[0]}: {exc}") from None
        self.started[arm] += 1
        return child

    def _start(self, arm: str, slot: str) -> ArmChild:
        """A new process for the arm's slot, waited on until its warm-up is over."""
        child = self.children[slot] = self._spawn(arm)
        self._warmed(slot, child)
        return child

    def _warmed(self, slot: str, child: ArmChild) -> None:
        event = self._next(slot, child, self.start_timeout_s, "warm-up")
        while event.get("event") != "measuring":
            event = self._next(slot, child, self.start_timeout_s, "warm-up")
        child.pin()  # blocked at a step's end: its threads stay put while they are moved

    def _measure(self, slot: str, child: ArmChild) -> tuple[list[dict[str, Any]], bool]:
        child.send({"cmd": "go", "seconds": self.turn_s})
        while True:
            event = self._next(slot, child, self.turn_s + TURN_SLACK_S, "turn")
            if event.get("event") == "turn":
                break
        steps, partial = list(event.get("steps") or []), bool(event.get("partial"))
        if partial:  # the script ended on its own during the turn: this process is done
            self._lost(slot, "the script ended during a turn")
        if len(steps) < MIN_STEPS:
            raise TurnFailed(f"the turn measured {len(steps)} steps (fewer than {MIN_STEPS})")
        return steps, partial

    def _next(self, slot: str, child: ArmChild, timeout_s: float, what: str) -> dict[str, Any]:
        """The next event; an ended process, an error event or silence → TurnFailed."""
        try:
            event = child.event(timeout_s)
        except TimeoutError:
            why = self._lost(slot, f"no answer in {timeout_s:g} s during its {what}")
            raise TurnFailed(why) from None
        if event is None:
            raise TurnFailed(self._lost(slot, f"the process ended during its {what}"))
        if event.get("event") == "error":
            raise TurnFailed(self._lost(slot, str(event.get("message"))))
        return event

    def _lost(self, slot: str, why: str) -> str:
        """A process is gone or useless: end it; a long-lived run falls back to a fresh
        process per turn for both arms from here on. Returns the reason, with how the
        process ended."""
        how = self._end(slot)
        if self.mode == LONG:
            self.fallback = {"pair": self.pair, "arm": slot[0], "reason": why}
            self.mode = SHORT
            for other in list(self.children):
                self._end(other)
        return f"{why} ({how})" if how else why

    def _end(self, slot: str) -> str:
        child = self.children.pop(slot, None)
        return child.end() if child is not None else ""

    def close(self) -> None:
        """End every arm process; a second Ctrl-C waits until they are gone (their folders,
        worktrees perhaps, are removed next)."""
        with signals_held():
            for slot in list(self.children):
                self._end(slot)

    def mode_ran(self, short: bool) -> str:
        if short:
            return SHORT
        return LONG if self.fallback is None else f"{LONG}, then {SHORT}"


def run_ab_attach(
    cfg: Config,
    arm_a: ScriptArm,
    arm_b: ScriptArm,
    spawner: Spawner,
    pairs: int = DEFAULT_ATTACH_PAIRS,
    budget_s: float | None = None,
    progress: Progress | None = None,
    *,
    turn_s: float = DEFAULT_ATTACH_TURN_S,
    threshold: float = stats.PAIRED_THRESHOLD,
    seed: int | None = None,
    short: bool = False,
    per_process: int = PAIRS_PER_PROCESS,
    probe: GpuProbe | None = None,
    clock: Clock | None = None,
    max_failures: int = MAX_FAILURES,
    cpus: frozenset[int] | None = None,
) -> Result:
    """Run the two arms' turns, `pairs` pairs in ABBA/BAAB order (or until `budget_s`), and
    judge B/A per stage from each unit's figures (`per_process` pairs of one A and one B
    process; `short`: a fresh process per turn from the start, each pair a unit). `cfg`
    gives the statistics' settings (compare.alpha, …) and `seed` (default its golden.seed)
    the order and the bootstrap; `spawner` starts one arm's process (on `cpus`, recorded)."""
    check_turns(pairs, turn_s, budget_s)
    if per_process < 1:
        raise UsageError("--pairs-per-process: must be >= 1")
    per_process = 1 if short else per_process
    arms = {"a": arm_a, "b": arm_b}
    seed = cfg.golden.seed if seed is None else seed
    order = abba_order(pairs, seed)
    mode = SHORT if short else LONG
    turns = _Turns(arms, spawner, turn_s, clock or PerfClock(), mode=mode, per_process=per_process)
    account = pairs_account(cfg)  # the arms' processes are this process's children
    with account.phase("ab pairs"):
        log = turns.run(order, budget_s, progress or NullProgress(), max_failures)
    units, members = unit_log(log, turns.figures)
    extra = extra_stages(log.times)
    meta: dict[str, Any] = {
        "mode": turns.mode_ran(short),
        "pairs_requested": pairs,
        "pairs_per_process": per_process,
        "budget_s": budget_s,
        "turn_s": turn_s,
        "planned_order": order,
        "stages_recorded": [*TRAIN_STAGES, *extra, "step", "residual"],
        "arms": {arm: spec.describe() for arm, spec in arms.items()},
        "command": redact_argv(arm_a.command),
        "cpus": sorted(cpus) if cpus is not None else None,
    }
    result = ab_result(
        cfg, cfg, units, threshold, seed, meta, extra_stages=extra, per_unit=per_process
    )
    _annotate(result, turns, arms, log, members)
    _advise_pinning(result, threshold, cpus)
    record_contamination(result, account)
    # as `mlb ab` takes it (the script picks its device: `auto`'s is the likely one)
    result.environment = fingerprint(cfg.to_dict(), probe, resolve_device("auto"))
    mark_lost_turns(result, log, max_failures)
    return result


def _annotate(
    result: Result,
    turns: _Turns,
    arms: Mapping[str, ScriptArm],
    log: PairLog,
    members: Sequence[Sequence[int]],
) -> None:
    """The pairs of turns and the units they formed (the result judged the units), the turns
    (each with its figures), the processes, the fallback and the refs, on the verdict result."""
    result.data.update(
        pairs_done=len(log.done),
        order=list(log.done),
        pairs=[{"pair": i, "order": o} for i, o in enumerate(log.done)],
        units=[{"unit": i, "pairs": list(p)} for i, p in enumerate(members)],
    )
    result.data.update(method=METHOD, turns=turns.records, processes=dict(turns.started))
    if turns.fallback is not None:
        result.data["fallback"] = turns.fallback
        result.warn(
            "attach_fallback",
            f"arm {turns.fallback['arm'].upper()}'s long-lived process could not go on "
            f"({turns.fallback['reason']}): from pair {turns.fallback['pair']} on, each turn "
            "was a fresh process",
        )
    refs = {arm: {"ref": s.ref, "commit": s.commit} for arm, s in arms.items() if s.ref}
    if refs:
        result.data["refs"] = refs
    edits = sorted({f for s in arms.values() for f in s.uncommitted})
    if edits:  # `--ref-b HEAD` with an edit not yet committed: the edit was not measured
        shown = ", ".join(edits[:3]) + (f" and {len(edits) - 3} more" if len(edits) > 3 else "")
        result.warn(
            "uncommitted_changes",
            f"{len(edits)} tracked file(s) changed but not committed ({shown}): in neither arm, "
            "which ran the commits of --ref-a/--ref-b; commit them to measure them, or compare "
            "two folders with --cwd-a/--cwd-b",
            files=edits,
        )


def _advise_pinning(result: Result, threshold: float, cpus: frozenset[int] | None) -> None:
    """Arms not pinned, on a machine with more than one CPU, and a step MDE wider than the
    practical band: say that `--cpus` can narrow it (the turns then meet the same cores)."""
    allowed = affinity_list()
    step = next((s for s in result.data.get("stages") or [] if s.get("stage") == "step"), {})
    mde = step.get("mde")
    if cpus is not None or len(allowed) < 2 or mde is None or not mde > threshold:
        return
    result.warn(
        "unpinned_noise",
        f"the step's MDE is {mde:.1%} (a change below it can pass unseen) and the arms ran on "
        f"whichever CPUs the scheduler gave each turn: --cpus {allowed[-1]} (as many CPUs as "
        "the script uses threads) runs both on the same ones, which about halved it on a "
        "shared 2-CPU machine (bench/RESULTS.md, attach); more --pairs narrow it too",
        value=mde,
        threshold=threshold,
    )


@contextlib.contextmanager
def script_arms(
    command: Sequence[str],
    cwds: Mapping[str, Path | None],
    refs: Mapping[str, str | None],
    envs: Mapping[str, Mapping[str, str]],
) -> Iterator[dict[str, ScriptArm]]:
    """The two arms of `command`: in `cwds` (default: the working directory), or, with
    `refs`, in temporary worktrees of this repository at them (removed when the block
    ends, however it ends)."""
    if not command:
        raise UsageError("--attach: give the script's command after --, e.g. -- python train.py")
    refuse_launcher(command)
    given = {arm: ref for arm, ref in refs.items() if ref}
    if given and len(given) != len(ARMS):
        missing = next(arm for arm in ARMS if arm not in given)
        raise UsageError(f"--ref-{missing}: --ref-a and --ref-b go together")
    if given and any(cwds.values()):
        raise UsageError("--ref-a/--ref-b run in their own worktrees: not with --cwd-a/--cwd-b")
    cmd = tuple(command)
    if given:
        with worktrees(given) as trees:
            for arm, tree in trees.items():
                if not tree.cwd.is_dir():
                    sub = tree.cwd.relative_to(tree.root)
                    raise UsageError(f"--ref-{arm}: {tree.ref} has no folder {sub}")
            yield {
                arm: ScriptArm(cmd, t.cwd, envs.get(arm, {}), t.ref, t.commit, t.uncommitted)
                for arm, t in trees.items()
            }
        return
    out = {}
    for arm in ARMS:
        cwd = cwds.get(arm) or Path.cwd()
        if not cwd.is_dir():
            raise UsageError(f"--cwd-{arm}: {cwd}: not a directory")
        out[arm] = ScriptArm(cmd, cwd.resolve(), envs.get(arm, {}))
    yield out


def run_script_ab(
    cfg: Config,
    command: Sequence[str],
    *,
    cwds: Mapping[str, Path | None],
    refs: Mapping[str, str | None],
    envs: Mapping[str, Mapping[str, str]],
    spawner: Callable[[Path], Spawner] | None = None,
    cpus: frozenset[int] | None = None,
    **run: Any,
) -> Result:
    """`mlb ab --attach`: the arms (folders or worktrees at refs, see `script_arms`), a scratch
    folder for their logs, then `run_ab_attach` with `run`'s options. `spawner(logs)` makes
    the spawner (default: real processes under the attach hooks, `spawn_in`, on `cpus`)."""
    with scratch.folder("attach") as logs, script_arms(command, cwds, refs, envs) as arms:
        made = spawner(logs) if spawner is not None else spawn_in(logs, cpus)
        return run_ab_attach(cfg, arms["a"], arms["b"], made, cpus=cpus, **run)


__all__ = [
    "DEFAULT_ATTACH_PAIRS",
    "LONG",
    "PAIRS_PER_PROCESS",
    "SHORT",
    "ArmChild",
    "PipeChild",
    "ScriptArm",
    "Spawner",
    "run_ab_attach",
    "run_script_ab",
    "script_arms",
]
