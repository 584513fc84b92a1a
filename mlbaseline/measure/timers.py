"""Stage timers: one small interface, a CPU and a CUDA implementation, chosen once by device.

A step is timed as `begin_step()`, then one `with timer.stage(name):` block per stage, then
`end_step()` → `StepTimes`. Each stage has its own begin/end pair, and the step total has its
own outer pair, so `total − sum(stages)` (the residual) is whatever ran between stages: Python
glue, hooks, the timer's own cost. It is reported, never forced to zero.

- `CpuStageTimer`: a `Clock` (perf_counter_ns by default; `ManualClock` in tests).
- `CudaStageTimer`: `torch.cuda.Event(enable_timing=True)` pairs on the current stream, with a
  `torch.cuda.synchronize` at the block edges (start and end of each step), so that no earlier
  work leaks into a step and every event has completed before it is read. It also records the
  synchronized wall-clock time of the step (`StepTimes.wall_s`), which `bench/gpu_timing_check.py`
  compares with the event total.

Both take an optional memory recorder (`measure.memory_step`; `make_timer` gives one by
default) read at the same edges, outside the clock readings so that its cost lands in the
residual: the step's `StepTimes.memory` then holds the bytes each stage left held and the step's
peak.

Pass the timer in (`make_timer(device)`); nothing downstream branches on the device.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.memory_step import StepMemory, StepMemoryRecorder, make_step_memory


@dataclass(frozen=True)
class StepTimes:
    """One step, in seconds: the total, each stage (in the order they ran), and the wall time
    (equal to the total on CPU; the synchronized perf_counter time on CUDA), and the step's
    memory where the timer has a recorder."""

    total_s: float
    stages: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    memory: StepMemory | None = None

    @property
    def residual_s(self) -> float:
        return self.total_s - sum(self.stages.values())


class StageTimer(Protocol):
    kind: str  # "cpu" or "cuda"

    def begin_step(self) -> None: ...

    def stage(self, name: str) -> Any:
        """Context manager timing one stage of the current step."""
        ...

    def end_step(self) -> StepTimes: ...


class CpuStageTimer:
    """Host clock timer: stage boundaries are `clock.now_ns()` readings."""

    kind = "cpu"

    def __init__(
        self, clock: Clock | None = None, memory: StepMemoryRecorder | None = None
    ) -> None:
        self.clock = clock or PerfClock()
        self.memory = memory
        self._t0 = 0
        self._stages: dict[str, int] = {}

    def begin_step(self) -> None:
        self._stages = {}
        if self.memory is not None:
            self.memory.begin_step()
        self._t0 = self.clock.now_ns()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        mem = self.memory
        held0 = mem.current() if mem is not None else 0
        start = self.clock.now_ns()
        try:
            yield
        finally:
            self._stages[name] = self._stages.get(name, 0) + self.clock.now_ns() - start
            if mem is not None:
                mem.stage_end(name, held0)

    def end_step(self) -> StepTimes:
        total = (self.clock.now_ns() - self._t0) / 1e9
        memory = self.memory.end_step() if self.memory is not None else None
        stages = {k: v / 1e9 for k, v in self._stages.items()}
        return StepTimes(total_s=total, stages=stages, wall_s=total, memory=memory)


class CudaStageTimer:
    """CUDA event pairs per stage; synchronize at step edges only (not between stages, which
    would serialize host and device and change what is measured)."""

    kind = "cuda"

    def __init__(
        self,
        device: Any = None,
        clock: Clock | None = None,
        memory: StepMemoryRecorder | None = None,
    ) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device or "cuda")
        self.clock = clock or PerfClock()
        self.memory = memory
        self._start: Any = None
        self._wall0 = 0
        self._pairs: list[tuple[str, Any, Any]] = []

    def _event(self) -> Any:
        return self._torch.cuda.Event(enable_timing=True)

    def begin_step(self) -> None:
        self._torch.cuda.synchronize(self.device)  # block edge: nothing earlier leaks in
        if self.memory is not None:
            self.memory.begin_step()  # the allocator's peak, reset (host-side: no sync)
        self._pairs = []
        self._wall0 = self.clock.now_ns()
        self._start = self._event()
        self._start.record()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        mem = self.memory
        held0 = mem.current() if mem is not None else 0
        begin, end = self._event(), self._event()
        begin.record()
        try:
            yield
        finally:
            end.record()
            self._pairs.append((name, begin, end))
            if mem is not None:
                mem.stage_end(name, held0)

    def end_step(self) -> StepTimes:
        stop = self._event()
        stop.record()
        self._torch.cuda.synchronize(self.device)  # block edge: every event has completed
        wall = (self.clock.now_ns() - self._wall0) / 1e9
        memory = self.memory.end_step() if self.memory is not None else None
        stages: dict[str, float] = {}
        for name, begin, end in self._pairs:
            stages[name] = stages.get(name, 0.0) + begin.elapsed_time(end) / 1e3  # ms → s
        total = self._start.elapsed_time(stop) / 1e3
        return StepTimes(total_s=total, stages=stages, wall_s=wall, memory=memory)


def make_timer(device: str, clock: Clock | None = None, memory: bool = True) -> StageTimer:
    """The timer for `device` ("cpu", "cuda", "cuda:N"): chosen once, here; with the device's
    memory recorder unless `memory` is False."""
    recorder = make_step_memory(device) if memory else None
    if device.startswith("cuda"):
        return CudaStageTimer(device, clock, recorder)
    return CpuStageTimer(clock, recorder)
