"""`mlb ab` core: a paired, interleaved A/B run of two training-step configs in one process.

Both arms' steps are built with the throughput step core (`runners.sweep.build_step`: model,
loss, optimizer, loader and stage timer from the config, seeded), warmed up alternately, then
run pair by pair in the ABBA/BAAB order of `measure.interleave.abba_order`: one step per arm per
pair, every stage timed. The run stops after `pairs` pairs or when `budget_s` is spent; Ctrl-C
keeps the finished pairs (status interrupted). The per-pair ratios B/A per stage are judged by
`stats.compare_paired` (Wilcoxon signed-rank, Holm, bootstrap CI against a practical band).

Metrics: `ab.a.<stage>` and `ab.b.<stage>` for every training stage, `step` (the total) and
`residual`, with the pair id of each value as its `replicate`. `result.data` holds the order,
the stop reason, per-stage verdicts (`stages`) and the overall `verdict`. Memory, where the
steps carry it: `ab.<arm>.mem.*`, judged by the memory rule (`runners.ab_memory`,
`data["memory"]`), in the overall verdict and the checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from mlbaseline import stats
from mlbaseline.comparison.drift import signature as drift_signature
from mlbaseline.config import Config
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import NotComparableError, UsageError
from mlbaseline.measure.allocator import tune as tune_malloc
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.contamination import CpuAccount
from mlbaseline.measure.contamination import record as record_contamination
from mlbaseline.measure.control import ControlKernel, make_control
from mlbaseline.measure.determinism import resolve_device
from mlbaseline.measure.gpu import GpuProbe, default_probe
from mlbaseline.measure.interleave import ARMS, DEFAULT_PAIRS, abba_order, arms_of
from mlbaseline.measure.step import TRAIN_STAGES, Batches, SingleProcess, StepRecord, TrainStep
from mlbaseline.measure.timers import StepTimes
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Check, Metric, Result

# the one place a training step is built from a config (the throughput sweep's own helper)
from mlbaseline.runners.ab_memory import add_memory_metrics, judge_memory, memory_checks
from mlbaseline.runners.sweep import build_step, compile_first
from mlbaseline.stats.paired import min_wilcoxon_p, pairs_reachable
from mlbaseline.workloads.factory import build_dataset

COMPARED = (*TRAIN_STAGES, "step")  # what gets a verdict; the residual is kept, not judged
RECORDED = (*COMPARED, "residual")
MAX_FAILURES = 3  # failed turns in a row that stop a run (a broken arm, not a glitch)


class TurnFailed(Exception):
    """An arm's turn gave no measurement (e.g. its fresh process crashed): the pair is dropped
    and recorded, the run goes on."""


@dataclass
class PairLog:
    """What the pair loop collected: per arm, the step times of warm-up and of each finished
    pair (index = position in `done`), and why it stopped."""

    warmup: dict[str, list[StepTimes]] = field(default_factory=lambda: {a: [] for a in ARMS})
    times: dict[str, list[StepTimes]] = field(default_factory=lambda: {a: [] for a in ARMS})
    done: list[str] = field(default_factory=list)  # the order of each finished pair
    dropped: list[dict[str, Any]] = field(default_factory=list)  # pairs a TurnFailed cut
    stop_reason: str = "pairs"
    control: list[tuple[int, float]] = field(default_factory=list)  # (pair, control kernel s)


def run_pairs(
    steps: Mapping[str, Callable[[], StepRecord]],
    order: list[str],
    budget_s: float | None,
    clock: Clock,
    warmup: int = 0,
    on_pair: Callable[[int], None] | None = None,
    max_failures: int = MAX_FAILURES,
    control: ControlKernel | None = None,
) -> PairLog:
    """Warm-up (`warmup` steps per arm, alternating A, B), then one step per arm per pair in
    `order`, until the order is done ("pairs") or `budget_s` since the start is spent
    ("budget"). Ctrl-C stops it ("interrupted"); the pair it cut is dropped. A step that
    raises TurnFailed drops its pair (recorded in `dropped`); `max_failures` in a row stop
    the run ("failures"). `control`: the control kernel, timed after every `control.every`-th
    finished pair (between the steps, never inside one)."""
    log = PairLog()
    failures = 0
    start = clock.now_ns()
    try:
        for _ in range(warmup):
            for arm in ARMS:
                log.warmup[arm].append(steps[arm]().times)
        for i, pair in enumerate(order):
            if budget_s is not None and (clock.now_ns() - start) / 1e9 >= budget_s:
                log.stop_reason = "budget"
                break
            try:
                got = {arm: steps[arm]().times for arm in arms_of(pair)}
            except TurnFailed as exc:
                log.dropped.append({"pair": i, "order": pair, "error": str(exc)})
                failures += 1
                if on_pair is not None:
                    on_pair(i)
                if failures >= max_failures:
                    log.stop_reason = "failures"
                    break
                continue
            failures = 0
            for arm in ARMS:
                log.times[arm].append(got[arm])
            log.done.append(pair)
            if control is not None and len(log.done) % control.every == 0:
                log.control.append((len(log.done) - 1, control.sample()))
            if on_pair is not None:
                on_pair(i)
    except KeyboardInterrupt:
        log.stop_reason = "interrupted"
    return log


def mark_lost_turns(result: Result, log: PairLog, max_failures: int) -> None:
    """A run that `max_failures` lost pairs in a row stopped is failed, with the last error
    (the modes with turns that can fail: fresh processes, attached scripts)."""
    if log.stop_reason == "failures":
        last = log.dropped[-1]["error"] if log.dropped else ""
        result.mark("failed", f"{max_failures} pairs in a row lost a turn; last: {last}")


def stage_values(times: list[StepTimes], stage: str) -> list[float]:
    if stage == "step":
        return [t.total_s for t in times]
    if stage == "residual":
        if times and all("residual" in t.stages for t in times):  # a summary's own figure
            return [t.stages["residual"] for t in times]
        return [t.total_s - sum(t.stages.get(s, 0.0) for s in TRAIN_STAGES) for t in times]
    return [t.stages.get(stage, 0.0) for t in times]


def judge(
    log: PairLog, cfg: Config, threshold: float, seed: int, compared: Sequence[str] = COMPARED
) -> tuple[list[stats.PairedStage], str]:
    """Per-stage paired verdicts (Holm across `compared`) and the overall verdict."""
    c = cfg.compare
    a = {s: stage_values(log.times["a"], s) for s in compared}
    b = {s: stage_values(log.times["b"], s) for s in compared}
    judged = stats.compare_paired(
        a,
        b,
        alpha=c.alpha,
        threshold=threshold,
        confidence=c.confidence,
        n_resamples=c.n_resamples,
        seed=seed,
    )
    return judged, stats.overall_verdict(judged)


def ab_result(
    cfg_a: Config,
    cfg_b: Config,
    log: PairLog,
    threshold: float,
    seed: int,
    meta: dict[str, Any] | None = None,
    control_meta: dict[str, Any] | None = None,
    extra_stages: Sequence[str] = (),
    per_unit: int = 1,
) -> Result:
    """The versioned result: both arms' raw samples (pair ids as replicate ids), the order,
    per-stage verdicts with one check each (regressed fails), the overall verdict; the control
    kernel's samples (`ab.control.matmul`, with `control_meta`) and the drift record.
    `extra_stages`: stages beyond the training stages (a script's own), judged like them.
    `per_unit`: pairs of turns in each entry of `log` (`--attach`'s units of processes), for
    the advice when there are too few."""
    result = Result(kind="ab", config={"a": cfg_a.to_dict(), "b": cfg_b.to_dict()})
    ids = list(range(len(log.done)))
    compared = (*TRAIN_STAGES, *extra_stages, "step")
    for arm in ARMS:
        for s in (*compared, "residual"):
            warm = stage_values(log.warmup[arm], s)
            meta_m = {"group": f"ab.{arm}", "arm": arm, "stage": s, "role": "stage"}
            if s == "step":
                meta_m["role"] = "total"
            values = stage_values(log.times[arm], s)
            result.add_metric(Metric(f"ab.{arm}.{s}", "s", False, values, warm, ids, meta=meta_m))
        add_memory_metrics(result, arm, log.times[arm], ids)
    judged, overall = judge(log, cfg_a, threshold, seed, compared)
    judged, overall, drift_doc = _drift(result, log, judged, overall, threshold, control_meta)
    for st in judged:
        status = {"regressed": "fail", "inconclusive": "warn"}.get(st.verdict, "pass")
        msg = f"B/A {st.ratio:.4f} [{st.ci_low:.4f}, {st.ci_high:.4f}], p_holm {st.p_adjusted:.3g}"
        result.verdict.checks.append(Check(f"ab.{st.stage}", status, st.ratio, threshold, msg))
    memory = judge_memory(log.times["a"], log.times["b"], cfg_a)
    if memory is not None:  # memory's own rule; a regression fails like a stage's
        overall = memory_checks(result, memory, overall)
    result.data = {
        **(meta or {}),
        "pairs_done": len(log.done),
        "order": list(log.done),
        "pairs": [{"pair": i, "order": o} for i, o in enumerate(log.done)],
        "stop_reason": log.stop_reason,
        "dropped": list(log.dropped),
        "threshold": threshold,
        "alpha": cfg_a.compare.alpha,
        "seed": seed,
        "method": "per-pair log-ratio B/A; median, bootstrap CI; Wilcoxon signed-rank; Holm",
        "stages": [s.to_dict() for s in judged],
        "verdict": overall,
        "drift": drift_doc,
        **({"memory": memory} if memory is not None else {}),
    }
    if log.stop_reason == "interrupted":
        result.mark("interrupted", f"Ctrl-C: {len(log.done)} finished pairs kept")
    _warn_pairs(result, len(log.done), cfg_a.compare.alpha, len(compared), per_unit)
    return result


def _drift(
    result: Result,
    log: PairLog,
    judged: list[stats.PairedStage],
    overall: str,
    threshold: float,
    control_meta: dict[str, Any] | None,
) -> tuple[list[stats.PairedStage], str, dict[str, Any]]:
    """The control's samples as a metric and how far the machine moved during the run (late
    half / early half of the control: common-mode drift, which pairing cancels); and the drift
    signature over the paired stages (every stage ×f alike, data_wait/h2d included: machine
    drift, not a regression), whose regressed/improved verdicts are then held back."""
    doc: dict[str, Any] = {"control": None, "signature": None}
    if log.control:
        ids, values = [p for p, _ in log.control], [v for _, v in log.control]
        meta = {**(control_meta or {}), "group": "ab.control", "role": "control"}
        result.add_metric(Metric("ab.control.matmul", "s", False, values, [], ids, meta=meta))
        half = len(values) // 2
        moved = (
            float(np.median(values[half:]) / np.median(values[:half]))
            if half and np.median(values[:half]) > 0
            else None
        )
        note = "common-mode drift during the run; pairing cancels it"
        doc["control"] = {"samples": len(values), "late_over_early": moved, "note": note}
    rows = [(s.stage, s.ratio, s.ci_low, s.ci_high) for s in judged if s.stage in TRAIN_STAGES]
    sig = drift_signature("ab", rows, threshold)
    if sig is None:
        return judged, overall, doc
    doc["signature"] = sig.to_dict()
    result.warn("machine_drift", sig.message(), factor=sig.factor)
    held = [
        replace(s, verdict="inconclusive") if s.verdict in ("regressed", "improved") else s
        for s in judged
    ]
    return held, stats.overall_verdict(held), doc


def _warn_pairs(
    result: Result, n: int, alpha: float, k: int = len(COMPARED), per_unit: int = 1
) -> None:
    """Fewer pairs (or units of `per_unit` pairs) than the signed-rank test needs to pass
    Holm's alpha/k: no stage can be called regressed or improved, whatever the data; the
    advice is a count that can."""
    need = pairs_reachable(k, alpha)
    if n >= need:
        return
    floor = f"its smallest p is {min_wilcoxon_p(n):.2g}" if n >= 2 else "none"
    what = f"{n} pairs" if per_unit == 1 else f"{n} units of {per_unit} pairs (processes)"
    result.warn(
        "too_few_pairs",
        f"{what}: the signed-rank test ({floor}) cannot pass Holm's alpha/k = "
        f"{alpha:g}/{k} = {alpha / k:.2g}, so no stage can be called regressed or improved; "
        f"run --pairs {need * per_unit} or more",
        pairs=n,
        needed=need * per_unit,
    )


def _check_arms(cfg_a: Config, cfg_b: Config) -> str:
    for arm, cfg in (("A", cfg_a), ("B", cfg_b)):
        if cfg.throughput.nproc > 1:
            raise UsageError(f"arm {arm}: mlb ab measures one process per arm (nproc 1)")
    dev_a, dev_b = resolve_device(cfg_a.workload.device), resolve_device(cfg_b.workload.device)
    if dev_a != dev_b:
        raise NotComparableError(f"the arms run on different devices: A {dev_a}, B {dev_b}")
    return dev_a


def _arm_step(
    cfg: Config, device: str, clock: Clock | None
) -> tuple[TrainStep, Batches, int, float | None]:
    """The arm's step, its batches, batch size and compile_s (workload.compile's first step,
    run here: never one of the warm-up or paired steps)."""
    bs = cfg.throughput.batch_sizes[0]
    step, batches = build_step(cfg, build_dataset(cfg), bs, device, SingleProcess(), clock)
    step.model.train()
    try:
        return step, batches, bs, compile_first(step, cfg, clock)
    except BaseException:
        batches.close()
        raise


def _with_threads(step: TrainStep, threads: int | None) -> Callable[[], StepRecord]:
    """The arm's step under its own torch thread count (an A/B knob like any other)."""

    def run() -> StepRecord:
        if threads and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return step()

    return run


def pairs_account(cfg: Config) -> CpuAccount:
    """The CPU account of an A/B run's pairs (every mode: in this process, fresh processes,
    attached scripts, whose processes are this one's tree): other programs' load, recorded."""
    advice = "pairing cancels a steady load, not one that changes within a pair"
    return CpuAccount(cfg.throughput.contamination_cores, advice=advice)


def _watch(cfg: Config, clock: Clock) -> tuple[ControlKernel | None, CpuAccount]:
    """The control kernel (every N/2 pairs: a pair is two steps, throughput.control_every
    counts steps; None when 0) and the CPU account of the pairs."""
    every = cfg.throughput.control_every
    control = make_control(max(1, every // 2), clock) if every else None
    return control, pairs_account(cfg)


def run_ab(
    cfg_a: Config,
    cfg_b: Config,
    pairs: int = DEFAULT_PAIRS,
    budget_s: float | None = None,
    progress: Progress | None = None,
    clock: Clock | None = None,
    seed: int | None = None,
    *,
    threshold: float = stats.PAIRED_THRESHOLD,
    probe: GpuProbe | None = None,
) -> Result:
    """Run A and B interleaved in this process, `pairs` pairs (or until `budget_s`), and judge
    B/A per stage. Each arm measures its first `throughput.batch_sizes` entry; `seed` (default
    A's golden.seed) drives the ABBA/BAAB order and the bootstrap."""
    if pairs < 1:
        raise UsageError(f"--pairs: at least 1, got {pairs}")
    device = _check_arms(cfg_a, cfg_b)
    allocator = _allocator(cfg_a, cfg_b)
    seed = cfg_a.golden.seed if seed is None else seed
    progress = progress or NullProgress()
    order = abba_order(pairs, seed)
    arms = {"a": _arm_step(cfg_a, device, clock), "b": _arm_step(cfg_b, device, clock)}
    steps = {
        "a": _with_threads(arms["a"][0], cfg_a.workload.threads),
        "b": _with_threads(arms["b"][0], cfg_b.workload.threads),
    }
    warmup = max(cfg_a.throughput.warmup_min, cfg_b.throughput.warmup_min, 1)
    threads = torch.get_num_threads()
    clock = clock or PerfClock()
    control, account = _watch(cfg_a, clock)
    try:
        with progress.task("ab: pairs", total=pairs) as task, account.phase("ab pairs"):
            log = run_pairs(
                steps, order, budget_s, clock, warmup, lambda _: task.advance(), control=control
            )
    finally:
        torch.set_num_threads(threads)  # the arms' thread counts end with the run
        for _, batches, *_ in arms.values():
            batches.close()
    meta = {
        "device": device,
        "allocator": allocator,
        "pairs_requested": pairs,
        "budget_s": budget_s,
        "warmup_steps": warmup,
        "batch_size": {"a": arms["a"][2], "b": arms["b"][2]},
        "compile_s": {"a": arms["a"][3], "b": arms["b"][3]},
        "planned_order": order,
        "stages_recorded": list(RECORDED),
    }
    result = ab_result(
        cfg_a, cfg_b, log, threshold, seed, meta, control.meta() if control else None
    )
    record_contamination(result, account)
    result.environment = _fingerprint(cfg_a, probe, device)
    return result


def _allocator(cfg_a: Config, cfg_b: Config) -> dict[str, Any]:
    """The glibc malloc setting of this process, which both arms share (measure.allocator)."""
    if cfg_a.workload.malloc_tuning != cfg_b.workload.malloc_tuning:
        raise UsageError(
            "workload.malloc_tuning: one process has one allocator setting; "
            "compare it with --processes"
        )
    return tune_malloc(cfg_a.workload.malloc_tuning)


def _fingerprint(cfg: Config, probe: GpuProbe | None, device: str) -> dict[str, Any]:
    own = probe is None
    probe = probe or default_probe()
    try:
        return fingerprint(cfg.to_dict(), probe, device)
    finally:
        if own:
            probe.close()


def check_turns(pairs: int, turn_s: float, budget_s: float | None) -> None:
    """The options of the runs that alternate whole turns (`--processes`, `--attach`)."""
    if pairs < 1:
        raise UsageError(f"--pairs: at least 1, got {pairs}")
    if not math.isfinite(turn_s) or turn_s <= 0:
        raise UsageError(f"--turn-s: must be > 0, got {turn_s}")
    if budget_s is not None and budget_s <= 0:
        raise UsageError("--budget: must be > 0 seconds")


__all__ = [
    "COMPARED",
    "DEFAULT_PAIRS",
    "MAX_FAILURES",
    "PairLog",
    "TurnFailed",
    "ab_result",
    "check_turns",
    "judge",
    "mark_lost_turns",
    "pairs_account",
    "run_ab",
    "run_pairs",
    "stage_values",
]
