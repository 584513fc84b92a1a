"""Marks at the step cutter's boundaries (`measure.step_cutter`): a point in time taken in the
hot path and read later, the host clock's at once, a CUDA event's once it has completed (nothing
waits for the device)."""

from __future__ import annotations

import time
from typing import Any, Protocol

from mlbaseline.measure.clock import Clock


class Marker(Protocol):
    """A point in time at a boundary, readable later without synchronizing."""

    kind: str

    def mark(self) -> Any: ...

    def ready(self, mark: Any) -> bool:
        """True once `mark` (and every mark before it) can be read without waiting."""
        ...

    def wait(self, mark: Any) -> None: ...

    def seconds(self, a: Any, b: Any) -> float: ...


class CpuMarker:
    """Host clock marks (`perf_counter_ns`; a `ManualClock` in tests)."""

    kind = "cpu"

    def __init__(self, clock: Clock | None = None) -> None:
        # the hot path (two marks an interval): a mark is the clock's own function, bound
        # here, not a method calling a method (`make bench`'s attach overhead)
        self.now = time.perf_counter_ns if clock is None else clock.now_ns
        self.mark = self.now

    def mark(self) -> int:  # shadowed per instance by the bound clock (above)
        return self.now()

    def ready(self, mark: Any) -> bool:
        return True

    def wait(self, mark: Any) -> None:
        return None

    def seconds(self, a: int, b: int) -> float:
        return (b - a) / 1e9


class CudaMarker:
    """CUDA events recorded on the current stream: a backward's kernels, queued by the time
    `backward()` returns, lie before the event recorded after it."""

    kind = "cuda"

    def __init__(self) -> None:
        import torch

        self._event = torch.cuda.Event
        self._free: list[Any] = []  # events read already: recorded again, not created anew

    def mark(self) -> Any:
        event = self._free.pop() if self._free else self._event(enable_timing=True)
        event.record()
        return event

    def release(self, marks: list[Any]) -> None:
        self._free.extend(marks)

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def wait(self, mark: Any) -> None:
        mark.synchronize()

    def seconds(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) / 1e3  # ms → s


__all__ = ["CpuMarker", "CudaMarker", "Marker"]
