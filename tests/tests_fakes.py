"""Shared fakes for the drift and contamination tests (imported by name: tests/ is on sys.path)."""

from __future__ import annotations

from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.step import TRAIN_STAGES, StepRecord
from mlbaseline.measure.timers import CpuStageTimer


def fake_step(clock: ManualClock, cost_s: float = 0.001):
    """A step on the fake clock: every stage costs `cost_s`."""
    timer = CpuStageTimer(clock)

    def step() -> StepRecord:
        timer.begin_step()
        for s in TRAIN_STAGES:
            with timer.stage(s):
                clock.advance(cost_s)
        return StepRecord(timer.end_step(), 4)

    return step
