"""The control kernel: a fixed piece of work no change to the workload can reach, timed between
the workload's steps, so that a shift it shows too is the machine's, not the change's.

Work: a float32 matmul of fixed size (`SIZE`×`SIZE`, `REPS` times, ~0.7 ms on one thread of this
2-core machine, measured), on the CPU, at the thread count the workload runs with (torch's
current one, read when it runs). Its inputs are made once, seeded, so every process computes the
same thing. It runs *outside* the step timer (between steps, in the loop's step callback), so
stage figures are untouched; only the measured phase's steps trigger it, every `every`-th step.

Samples become the metric `control.matmul` (`s`, lower is better, role `control`), with the
kernel's shape in its meta: `mlb compare` only uses a control whose meta matches on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.results import Metric

SIZE = 192
REPS = 8
NAME = "control.matmul"


def _matmul_work(size: int, reps: int) -> Callable[[], None]:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen)
    b = torch.randn(size, size, generator=gen)

    def work() -> None:
        for _ in range(reps):
            torch.mm(a, b)

    work()  # first call allocates and picks a kernel: not a sample
    return work


@dataclass
class ControlKernel:
    """Time the control work on `clock`; `work` is the fixed matmul unless a test gives one."""

    every: int
    clock: Clock = field(default_factory=PerfClock)
    work: Callable[[], None] | None = None
    size: int = SIZE
    reps: int = REPS
    samples: list[float] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)
    measured: int = 0  # measured steps seen by on_step

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError("every must be >= 1")
        if self.work is None:
            self.work = _matmul_work(self.size, self.reps)

    def sample(self) -> float:
        """One timed run of the work, appended to `samples`."""
        assert self.work is not None
        start = self.clock.now_ns()
        self.work()
        seconds = (self.clock.now_ns() - start) / 1e9
        self.samples.append(seconds)
        self.threads.append(torch.get_num_threads())
        return seconds

    def on_step(self, n: int, measuring: bool) -> None:
        """The loop's step callback: one sample after every `every`-th measured step."""
        if not measuring:
            return
        self.measured += 1
        if self.measured % self.every == 0:
            self.sample()

    def meta(self) -> dict[str, Any]:
        threads = sorted(set(self.threads))
        return {
            "group": "control",
            "role": "control",
            "kernel": f"float32 matmul {self.size}x{self.size} x{self.reps}",
            "threads": threads[0] if len(threads) == 1 else threads,
            "every": self.every,
            "note": "fixed work timed between measured steps, outside the step timer; a shift "
            "it shows too is the machine's (common-mode drift)",
        }

    def metric(self, name: str = NAME) -> Metric:
        return Metric(name, "s", False, list(self.samples), meta=self.meta())


def make_control(every: int, clock: Clock | None = None) -> ControlKernel | None:
    """The run's control kernel, or None when `every` is 0 (off)."""
    if every <= 0:
        return None
    return ControlKernel(every, clock or PerfClock())


__all__ = ["NAME", "REPS", "SIZE", "ControlKernel", "make_control"]
