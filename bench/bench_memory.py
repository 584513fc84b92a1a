"""Bench section `memory` (issue 28): the per-step memory measurement on CPU, against known
allocations, and its cost per step.

(a) Accuracy. A step whose `forward` stage allocates a tensor of a known size (8, 64, 256 MiB)
    and keeps it to the step's end, measured by the stage timer's recorder as `mlb throughput`
    builds it (`make_timer("cpu")`, malloc tuned as in the measuring process), 6 steps per size:
    the median held bytes against the size. Beside it, what an RSS difference reads on the
    same steady-state steps (freed memory stays in the process, so it reads ~0 after the first
    step: why `held` reads malloc's in-use counter). And the step peak (VmHWM after the
    per-step reset): a stage that allocates and frees the size, in a fresh process per size
    (its first allocation of that size faults the pages in), peak − RSS at the step's start.
(b) Overhead. The same step timed by a CPU stage timer with and without the recorder,
    interleaved rounds, the whole step's wall time (begin_step to end_step, so the recorder's
    reads outside the clock count too): on empty stages (6 per step; the difference of the
    medians is the tight figure, the recorder's own cost per step) and on a ~10 ms step (6
    stages busy-waiting; the fastest step of each arm, since load only adds time, and the
    medians beside it).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench_common import Row, interleave, mib, pct, run_child

MIB = 2**20
SIZES_MIB = (8, 64, 256)
STEPS = 6
TOLERANCE = 0.05  # the test bound: within 5%
STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer")
STEP_S = 0.010
ROUNDS = int(os.environ.get("MLB_BENCH_MEMORY_ROUNDS", "15"))
EMPTY_STEPS = int(os.environ.get("MLB_BENCH_MEMORY_EMPTY_STEPS", "2000"))
BUSY_STEPS = int(os.environ.get("MLB_BENCH_MEMORY_BUSY_STEPS", "30"))
OVERHEAD_TARGET = 0.01  # ≤ 1% of a 10 ms step


def _held(size: int, rss: bool) -> list[float]:
    """Held bytes of `forward` per step, the tensor kept to the step's end."""
    import torch

    from mlbaseline.measure.memory_step import CpuStepMemory
    from mlbaseline.measure.timers import CpuStageTimer, make_timer

    timer = CpuStageTimer(memory=CpuStepMemory(use_malloc=False)) if rss else make_timer("cpu")
    out = []
    for _ in range(STEPS):
        timer.begin_step()
        with timer.stage("forward"):
            kept = torch.ones(size // 4)
        with timer.stage("loss"):
            kept.add_(1.0)
        memory = timer.end_step().memory
        del kept
        assert memory is not None
        out.append(float(memory.held["forward"]))
    return out


def accuracy_rows() -> list[Row]:
    from mlbaseline.measure import allocator

    allocator.tune(True)  # as in the measuring process
    rows = []
    for n in SIZES_MIB:
        size = n * MIB
        rss = _held(size, rss=True)  # first: its first step allocates the size afresh
        held = statistics.median(_held(size, rss=False))
        err = held / size - 1
        rows.append(
            Row("memory", f"held after a stage keeping {n} MiB (malloc in use, median of "
                f"{STEPS} steps)", f"{mib(held)} ({pct(err, signed=True)})",
                f"within ±{TOLERANCE:.0%}", abs(err) <= TOLERANCE)
        )  # fmt: skip
        rows.append(
            Row("memory", "the same as an RSS difference: first step, then median of the "
                "rest (freed pages stay in the process)", f"{mib(rss[0])}, then "
                f"{mib(statistics.median(rss[1:]))}", "info: why held reads malloc", None)
        )  # fmt: skip
    for n in SIZES_MIB:
        child = run_child([__file__, "--peak", str(n)], timeout_s=120)
        if child.returncode != 0:
            raise RuntimeError(child.stderr.strip().splitlines()[-1])
        got = child.json()
        err = got["peak_growth"] / (n * MIB) - 1
        rows.append(
            Row("memory", f"step peak (VmHWM, {got['peak_kind']}) − RSS at step start, a "
                f"stage allocating and freeing {n} MiB (fresh process)",
                f"{mib(got['peak_growth'])} ({pct(err, signed=True)})",
                f"within ±{TOLERANCE:.0%}", abs(err) <= TOLERANCE)
        )  # fmt: skip
    return rows


def _peak_child(n: int) -> dict[str, Any]:
    """In a fresh process: one step whose stage allocates and frees `n` MiB."""
    import torch

    from mlbaseline.measure.memory_step import proc_self
    from mlbaseline.measure.timers import make_timer

    timer = make_timer("cpu")
    for _ in range(2):  # torch's and the timer's first-call costs, outside the measured step
        timer.begin_step()
        with timer.stage("forward"):
            torch.ones(1).add_(1.0)
        timer.end_step()
    timer.begin_step()
    rss0 = proc_self().rss()
    with timer.stage("forward"):
        tmp = torch.ones(n * MIB // 4)
        del tmp
    memory = timer.end_step().memory
    assert memory is not None and memory.peak is not None
    return {"peak_growth": memory.peak - rss0, "peak_kind": memory.peak_kind}


# ---------------------------------------------------------------- (b) overhead


def _steps(memory: bool, steps: int, work: Callable[[], None]) -> list[float]:
    """Wall seconds of each step (begin_step … end_step)."""
    from mlbaseline.measure.timers import make_timer

    timer = make_timer("cpu", memory=memory)
    clock = time.perf_counter
    walls = []
    for _ in range(steps):
        t0 = clock()
        timer.begin_step()
        for name in STAGES:
            with timer.stage(name):
                work()
        timer.end_step()
        walls.append(clock() - t0)
    return walls


def _nothing() -> None:
    return None


def _spin() -> None:
    from mlbaseline.measure.clock import busy_wait

    busy_wait(STEP_S / len(STAGES))


def _arms(steps: int, work: Callable[[], None]) -> dict[str, list[float]]:
    """Without and with the recorder, interleaved rounds; every step's wall time per arm."""
    runs = interleave(
        {"off": lambda: _steps(False, steps, work), "on": lambda: _steps(True, steps, work)},
        ROUNDS,
    )
    return {arm: [w for run in walls for w in run] for arm, walls in runs.items()}


def overhead_rows() -> list[Row]:
    empty = _arms(EMPTY_STEPS, _nothing)
    off, on = statistics.median(empty["off"]), statistics.median(empty["on"])
    cost = on - off
    busy = _arms(BUSY_STEPS, _spin)
    b_off, b_on = statistics.median(busy["off"]), statistics.median(busy["on"])
    # a preempted busy-wait only ends late: each arm's fastest step is the least disturbed
    f_off, f_on = min(busy["off"]), min(busy["on"])
    return [
        Row("memory", f"empty step, {len(STAGES)} stages: without / with the recorder "
            f"(median of {ROUNDS} rounds × {EMPTY_STEPS} steps)",
            f"{off * 1e6:.1f} µs / {on * 1e6:.1f} µs", "info", None),
        Row("memory", "the recorder's cost per step (from the empty steps), as a share of a "
            "10 ms step", f"{cost * 1e6:.1f} µs = {pct(cost / STEP_S)}",
            f"≤ {OVERHEAD_TARGET:.0%}", cost / STEP_S <= OVERHEAD_TARGET),
        Row("memory", f"~10 ms step ({len(STAGES)} stages busy-waiting), {ROUNDS} rounds × "
            f"{BUSY_STEPS} steps: fastest step without / with",
            f"{f_off * 1e3:.3f} ms / {f_on * 1e3:.3f} ms ({pct(f_on / f_off - 1, signed=True)})",
            f"≤ +{OVERHEAD_TARGET:.0%}", f_on / f_off - 1 <= OVERHEAD_TARGET),
        Row("memory", "the same, median step without / with (load on a shared machine "
            "preempts busy-waits)", f"{b_off * 1e3:.3f} ms / {b_on * 1e3:.3f} ms "
            f"({pct(b_on / b_off - 1, signed=True)})", "info", None),
    ]  # fmt: skip


def memory() -> list[Row]:
    return accuracy_rows() + overhead_rows()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peak"]:
        print(json.dumps(_peak_child(int(sys.argv[2]))))
