"""Memory per measured step, read at the stage timer's edges (issue 28).

The stage timer (`measure.timers`) calls one recorder at the edges it already has: `begin_step`
before the step's clock starts, `current()` before each stage's clock starts, `stage_end` after
it stops, `end_step` after the step's clock stops. So every path that times stages through the
timer (mlb throughput, the library API, attach) gets the same memory figures, and the readings'
own cost lands in the step's residual, never in a stage.

Per step a recorder gives a `StepMemory`:
- `held[stage]`: bytes allocated during the stage and still held at its end (current bytes at
  the end − at the start, summed over the stage's blocks in the step, 0 where the stage freed
  more than it allocated). `held["forward"]` is the activations.
- `peak`: the step's peak, `reserved` (CUDA only) the allocator's peak reserved pool.

Implementations, chosen once by device (`make_step_memory`):
- `CudaStepMemory`: the caching allocator's counters (`memory_allocated`; the peaks after
  `reset_peak_memory_stats` at the step's start). Host-side counters: no synchronize beyond the
  CUDA timer's own at the step's edges.
- `CpuStepMemory`: "current" is the bytes glibc malloc has handed out and not taken back
  (`mallinfo2`: in-use heap chunks + mmapped chunks), which is where CPU tensors live. RSS would
  not do for `held`: the measuring process keeps freed memory (`measure.allocator`), so the
  activations of step 2 reuse pages step 1 faulted in and RSS does not move. Where malloc is
  not glibc's, RSS (`/proc/self/statm`) is the fallback and `kind` says so. The peak is the
  process's peak RSS over the step: `VmHWM` after a `clear_refs` "5" reset at the step's start
  where the kernel allows it, else the highest RSS read at the stage edges (which misses a peak
  inside a stage; `peak_kind` says which).
A timer without a recorder (`make_timer(..., memory=False)`, the timers' default when built
directly) reads nothing and its steps carry no memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import re
import resource
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mlbaseline.results import Metric


@dataclass(frozen=True)
class StepMemory:
    """One step's memory, in bytes (see the module docstring)."""

    held: dict[str, int] = field(default_factory=dict)
    peak: int | None = None
    reserved: int | None = None
    kind: str = ""  # how `held` was read
    peak_kind: str = ""  # how `peak` was read


def median_memory(mems: Sequence[StepMemory]) -> StepMemory:
    """The median of several steps' (or turns') memory, figure by figure: each stage's held
    bytes (0 where a record lacks the stage), the peak (over the records that have one), the
    reserved pool (None unless every record has it); the first record's kinds."""
    if not mems:
        raise ValueError("median_memory: no records")

    def median(values: Iterable[int]) -> int:
        return int(statistics.median(values))

    names = sorted({k for m in mems for k in m.held})
    held = {k: median(m.held.get(k, 0) for m in mems) for k in names}
    peaks = [m.peak for m in mems if m.peak is not None]
    reserved = [m.reserved for m in mems]
    pool = median(r for r in reserved if r is not None) if None not in reserved else None
    first = mems[0]
    return StepMemory(held, median(peaks) if peaks else None, pool, first.kind, first.peak_kind)


class StepMemoryRecorder(Protocol):
    kind: str
    peak_kind: str

    def begin_step(self) -> None: ...

    def current(self) -> int:
        """Bytes held now (the counter `held` is a difference of)."""
        ...

    def stage_end(self, name: str, start: int) -> None:
        """The stage `name` ended; `start` is `current()` at its start."""
        ...

    def end_step(self) -> StepMemory | None: ...


# ---------------------------------------------------------------- CPU sources

MIB = 2**20
_HWM = re.compile(rb"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


class ProcSelf:
    """This process's memory counters in /proc, through file descriptors kept open: a `pread`
    costs ~0.5 µs where an open + read costs ~6 µs. `/proc/self` resolves when a file is opened,
    so after a fork the child opens its own."""

    def __init__(self, root: Path = Path("/proc/self")) -> None:
        self.root = root
        self._pid = -1
        self._statm = self._status = self._clear = -1
        self.page = os.sysconf("SC_PAGE_SIZE")

    def _open(self) -> None:
        if self._pid == os.getpid():
            return
        for fd in (self._statm, self._status, self._clear):  # the parent's: they read its counters
            if fd >= 0:
                os.close(fd)
        self._pid = os.getpid()
        self._statm = os.open(self.root / "statm", os.O_RDONLY)
        self._status = os.open(self.root / "status", os.O_RDONLY)
        try:
            self._clear = os.open(self.root / "clear_refs", os.O_WRONLY)
        except OSError:
            self._clear = -1

    def rss(self) -> int:
        self._open()
        return int(os.pread(self._statm, 128, 0).split()[1]) * self.page

    def hwm(self) -> int | None:
        """VmHWM, the kernel's peak RSS since the process began or the last reset."""
        self._open()
        m = _HWM.search(os.pread(self._status, 4096, 0))
        return int(m.group(1)) * 1024 if m else None

    def maxrss(self) -> int:
        """getrusage's peak RSS: VmHWM, or the peak before an exec where that was higher."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def reset_hwm(self) -> bool:
        """VmHWM back to the current RSS (`clear_refs` "5"); False where the kernel refuses."""
        self._open()
        if self._clear < 0:
            return False
        try:
            os.write(self._clear, b"5")
        except OSError:
            return False
        return True


class _MallInfo2(ctypes.Structure):
    _FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks")
    _fields_ = [(name, ctypes.c_size_t) for name in (*_FIELDS, "fordblks", "keepcost")]


@functools.cache
def malloc_in_use() -> Callable[[], int] | None:
    """A reader of the bytes glibc malloc has handed out and not taken back (`mallinfo2`:
    `uordblks` in-use heap chunks of every arena + `hblkhd` mmapped chunks; ~0.3 µs), or None
    where malloc is not glibc ≥ 2.33's."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        info = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    info.restype, info.argtypes = _MallInfo2, []

    def read() -> int:
        m = info()
        return int(m.uordblks + m.hblkhd)

    return read


_PROC: ProcSelf | None = None


def proc_self() -> ProcSelf:
    """The process's one `ProcSelf` (its descriptors stay open for the process's life)."""
    global _PROC
    if _PROC is None:
        _PROC = ProcSelf()
    return _PROC


class CpuStepMemory:
    """Held bytes from malloc's counter (RSS where there is none), peak RSS per step."""

    def __init__(
        self,
        proc: ProcSelf | None = None,
        allocated: Callable[[], int] | None = None,
        use_malloc: bool = True,
    ) -> None:
        self.proc = proc or proc_self()
        self._read = allocated or (malloc_in_use() if use_malloc else None) or self.proc.rss
        self._rss_only = self._read == self.proc.rss
        self.kind = "cpu_rss" if self._rss_only else "cpu_malloc"
        self._hwm: bool | None = None  # decided at the first reset
        self.peak_kind = "cpu_rss_hwm"
        self._rusage = False  # the peak from getrusage rather than /proc/self/status
        self._held: dict[str, int] = {}
        self._peak = 0

    def begin_step(self) -> None:
        self._held = {}
        if self._hwm is None:  # the first step decides how the peak is read (and resets it)
            self._decide()
        elif self._hwm and not self.proc.reset_hwm():  # refused now: sample from here on
            self._hwm, self.peak_kind = False, "cpu_rss_sampled"
        if not self._hwm:
            self._peak = self.proc.rss()

    def _decide(self) -> None:
        self._hwm = self.proc.reset_hwm() and self.proc.hwm() is not None
        if not self._hwm:
            self.peak_kind = "cpu_rss_sampled"
            return
        # getrusage's ru_maxrss is the same high-water mark for ~2 µs where /proc/self/status
        # costs ~15 µs; it also holds the peak of the image before an exec, so it is used
        # only where that is below the RSS now (it follows the reset)
        self._rusage = self.proc.maxrss() <= self.proc.rss() + MIB

    def current(self) -> int:
        if not self._hwm:  # no kernel peak: sample RSS at every edge
            rss = self.proc.rss()
            self._peak = max(self._peak, rss)
            if self._rss_only:
                return rss
        return self._read()

    def stage_end(self, name: str, start: int) -> None:
        self._held[name] = self._held.get(name, 0) + max(0, self.current() - start)

    def end_step(self) -> StepMemory:
        peak = None
        if self._hwm:
            peak = self.proc.maxrss() if self._rusage else self.proc.hwm()
        if peak is None:
            if self._hwm:  # VmHWM gone since the reset: sample from here on, and say so
                self._hwm, self.peak_kind = False, "cpu_rss_sampled"
            peak = max(self._peak, self.proc.rss())
        return StepMemory(dict(self._held), peak, None, self.kind, self.peak_kind)


# ---------------------------------------------------------------- CUDA


class CudaMemoryApi(Protocol):
    """The part of `torch.cuda` a recorder reads (a fake stands in for it in tests)."""

    def memory_allocated(self, device: Any) -> int: ...

    def reset_peak_memory_stats(self, device: Any) -> None: ...

    def max_memory_allocated(self, device: Any) -> int: ...

    def max_memory_reserved(self, device: Any) -> int: ...


class TorchCuda:
    """`torch.cuda`'s allocator counters, read from `memory_stats_as_nested_dict`: the public
    `memory_allocated` flattens the whole statistics dict on every call, a cost the stage edges
    should not pay. Before CUDA is initialized every counter reads 0, as torch's own do."""

    def __init__(self) -> None:
        import torch

        self._cuda = torch.cuda

    def _get(self, device: Any, key: str, which: str) -> int:
        stats = self._cuda.memory_stats_as_nested_dict(device)
        return int(stats.get(key, {}).get("all", {}).get(which, 0))

    def memory_allocated(self, device: Any) -> int:
        return self._get(device, "allocated_bytes", "current")

    def reset_peak_memory_stats(self, device: Any) -> None:
        self._cuda.reset_peak_memory_stats(device)

    def max_memory_allocated(self, device: Any) -> int:
        return self._get(device, "allocated_bytes", "peak")

    def max_memory_reserved(self, device: Any) -> int:
        return self._get(device, "reserved_bytes", "peak")


class CudaStepMemory:
    """Held bytes from the caching allocator's `allocated` counter; peak allocated and peak
    reserved per step (reset at the step's start)."""

    kind = "cuda_allocated"
    peak_kind = "cuda_max_allocated"

    def __init__(self, device: Any, cuda: CudaMemoryApi | None = None) -> None:
        self.device = device
        self.cuda = cuda or TorchCuda()
        self._held: dict[str, int] = {}

    def begin_step(self) -> None:
        self._held = {}
        self.cuda.reset_peak_memory_stats(self.device)

    def current(self) -> int:
        return int(self.cuda.memory_allocated(self.device))

    def stage_end(self, name: str, start: int) -> None:
        self._held[name] = self._held.get(name, 0) + max(0, self.current() - start)

    def end_step(self) -> StepMemory:
        peak = int(self.cuda.max_memory_allocated(self.device))
        reserved = int(self.cuda.max_memory_reserved(self.device))
        return StepMemory(dict(self._held), peak, reserved, self.kind, self.peak_kind)


class PhasePeak:
    """The peak memory of this process over one phase (latency: the in-process model service
    over all its levels), as a one-value metric: a recorder's "step" spanning the phase."""

    def __init__(self, device: str, recorder: StepMemoryRecorder | None = None) -> None:
        self.recorder = recorder or make_step_memory(device)
        self.recorder.begin_step()

    def metric(self, name: str, group: str) -> Metric | None:
        memory = self.recorder.end_step()
        if memory is None or memory.peak is None:
            return None
        meta = {"group": group, "role": "memory", "memory": "peak", "per": "phase"}
        return Metric(name, "B", False, [memory.peak], meta={**meta, "kind": memory.peak_kind})


def make_step_memory(device: str) -> StepMemoryRecorder:
    """The recorder for `device` ("cpu", "cuda", "cuda:N"): chosen once, here."""
    if device.startswith("cuda"):
        return CudaStepMemory(device)
    return CpuStepMemory()


__all__ = [
    "CpuStepMemory",
    "CudaMemoryApi",
    "CudaStepMemory",
    "PhasePeak",
    "ProcSelf",
    "StepMemory",
    "StepMemoryRecorder",
    "TorchCuda",
    "make_step_memory",
    "malloc_in_use",
    "median_memory",
    "proc_self",
]
