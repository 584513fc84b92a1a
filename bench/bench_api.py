"""Bench section `api`: what the library API (`mlbaseline.api.Baseline`) costs a training loop.

The same loop runs uninstrumented and instrumented, interleaved (plain, api, api, plain, …),
many rounds, medians per step:
- empty bodies (the loop itself), with 5 stage blocks and with none: the API's own cost per
  step, and per stage block (the slope between the two);
- a 10 ms step (5 stages of 2 ms busy-wait): the overhead as a share of the step, measured
  directly on the median step (noisy on a shared machine: a busy-wait that is preempted
  ends late; the figure from the empty loops is the tight one).
The instrumented loop has `bl.data()`'s data-wait stage, a `with bl.step():` block and the
CLI's warm-up detection and stability test every step (a tolerance it never meets keeps the
rule from stopping the loop). Telemetry is off here; its cost is the `overhead` section's.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench_common import Row, interleave, pct

STEPS = int(os.environ.get("MLB_BENCH_API_STEPS", "400"))  # steps per empty-loop run
ROUNDS = int(os.environ.get("MLB_BENCH_API_ROUNDS", "21"))
BUSY_STEPS = int(os.environ.get("MLB_BENCH_API_BUSY_STEPS", "40"))  # 10 ms steps per run
BUSY_ROUNDS = int(os.environ.get("MLB_BENCH_API_BUSY_ROUNDS", "9"))
STAGES = ("h2d", "forward", "loss", "backward", "optimizer")
STEP_S = 0.010
STEP_TARGET = 0.01  # ≤ 1% of a 10 ms step
STAGE_TARGET_S = 20e-6  # ≤ 20 µs per stage block


def _rule(steps: int) -> dict[str, Any]:
    # the stability test runs every step after min_steps, and never passes: the loop runs on
    return {
        "throughput.min_time_s": 0.0,
        "throughput.min_steps": 16,
        "throughput.max_steps": steps + 100,
        "throughput.max_time_s": 1e6,
        "throughput.stability_tolerance": 1e-12,
    }


def _nothing() -> None:
    return None


def _spin() -> None:
    from mlbaseline.measure.clock import busy_wait

    busy_wait(STEP_S / len(STAGES))


def plain(steps: int, stages: tuple[str, ...], work: Callable[[], None]) -> list[float]:
    """Seconds of each step of the uninstrumented loop."""
    out = []
    clock = time.perf_counter
    last = clock()
    for _batch in iter(range(steps)):
        for _stage in stages:
            work()
        now = clock()
        out.append(now - last)
        last = now
    return out


def instrumented(steps: int, stages: tuple[str, ...], work: Callable[[], None]) -> list[float]:
    """Seconds of each step of the same loop under the API (built before the clock starts);
    a step here is one iteration, from one `next()` to the next, as in the plain loop."""
    from mlbaseline.api import Baseline
    from mlbaseline.measure.gpu import NullProbe

    bl = Baseline("bench", 1, "cpu", overrides=_rule(steps), telemetry=False, probe=NullProbe())
    out = []
    clock = time.perf_counter
    last = clock()
    for _batch in bl.data(range(steps)):
        with bl.step():
            for stage in stages:
                with bl.stage(stage):
                    work()
        now = clock()
        out.append(now - last)
        last = now
    if bl.done or len(bl.loop.records) != steps:
        raise RuntimeError(f"the stop rule ended the bench loop ({bl.loop.reason})")
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def api() -> list[Row]:
    # empty bodies: the mean step of each run (the cost is spread evenly), median over runs
    empty = {
        k: _median([sum(run) / len(run) for run in v])
        for k, v in interleave(
            {
                "plain5": lambda: plain(STEPS, STAGES, _nothing),
                "api5": lambda: instrumented(STEPS, STAGES, _nothing),
                "plain0": lambda: plain(STEPS, (), _nothing),
                "api0": lambda: instrumented(STEPS, (), _nothing),
            },
            ROUNDS,
        ).items()
    }
    per_step = empty["api5"] - empty["plain5"]
    per_stage = (per_step - (empty["api0"] - empty["plain0"])) / len(STAGES)
    # 10 ms steps: the median step of all runs of an arm (a preempted step is an outlier)
    busy = interleave(
        {
            "plain": lambda: plain(BUSY_STEPS, STAGES, _spin),
            "api": lambda: instrumented(BUSY_STEPS, STAGES, _spin),
        },
        BUSY_ROUNDS,
    )
    med = {k: _median([t for run in v for t in run]) for k, v in busy.items()}
    direct = med["api"] / med["plain"] - 1.0
    return [
        Row(
            "api",
            "overhead per step (5 stages + data wait + step; empty loop)",
            _us(per_step),
            f"≤ {_us(STEP_TARGET * STEP_S)} (1% of 10 ms)",
            per_step <= STEP_TARGET * STEP_S,
        ),
        Row(
            "api",
            "overhead per stage block (slope, 5 vs 0 stages)",
            _us(per_stage),
            f"≤ {_us(STAGE_TARGET_S)}",
            per_stage <= STAGE_TARGET_S,
        ),
        Row(
            "api",
            "share of a 10 ms step, from the empty loop",
            pct(per_step / STEP_S),
            f"≤ {pct(STEP_TARGET)}",
            per_step / STEP_S <= STEP_TARGET,
        ),
        Row(
            "api",
            f"10 ms step side by side: median step, instrumented / plain − 1 "
            f"({BUSY_ROUNDS} × {BUSY_STEPS} steps each)",
            pct(direct, signed=True),
            "reference (noisy)",
            None,
        ),
        Row(
            "api",
            "empty loop per step: plain / instrumented (0 stages: data + step only)",
            f"{_us(empty['plain5'])} / {_us(empty['api5'])} ({_us(empty['api0'])})",
            "reference",
            None,
        ),
    ]


__all__ = ["api", "instrumented", "plain"]
