"""Clocks behind a tiny protocol so that tests can swap in a fake one."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic nanoseconds."""

    def now_ns(self) -> int: ...


class PerfClock:
    """`time.perf_counter_ns`: the highest-resolution monotonic clock on the CPU."""

    def __init__(self) -> None:
        # the clock's own function, bound here, not a method calling it: the stop rule reads
        # it twice a step, inside a training script under `mlb attach` too
        self.now_ns = time.perf_counter_ns

    def now_ns(self) -> int:  # shadowed per instance (above)
        return time.perf_counter_ns()


class ManualClock:
    """A clock that only moves when told to; for tests and simulations."""

    def __init__(self, start_ns: int = 0) -> None:
        self.t = start_ns

    def now_ns(self) -> int:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += round(seconds * 1e9)


def busy_wait(seconds: float, clock: Clock | None = None) -> None:
    """Spin (not sleep) for `seconds`: a deterministic CPU cost for stage-accuracy tests."""
    clk = clock or PerfClock()
    end = clk.now_ns() + round(seconds * 1e9)
    while clk.now_ns() < end:
        pass
