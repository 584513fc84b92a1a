"""Peak memory of one measured block, behind one interface chosen by device.

- CUDA: `torch.cuda.reset_peak_memory_stats` / `torch.cuda.max_memory_allocated` — bytes held by
  tensors through the caching allocator (not the allocator's reserved pool, not other processes).
- CPU: there is no allocator counter, so this is *RSS growth* of this process (not its
  DataLoader workers): the kernel's high-water mark `VmHWM`, reset through
  `/proc/self/clear_refs` ("5"), minus the RSS at reset. Where that reset is refused or VmHWM
  cannot be read back, the peak is the highest RSS seen at `update()` calls (after each step),
  which can miss a transient peak inside a step; `kind` says which was used.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Protocol


class MemoryMeter(Protocol):
    kind: str

    def reset(self) -> None: ...

    def update(self) -> None: ...

    def peak_bytes(self) -> int: ...


def _status_kib(text: str, key: str) -> int | None:
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


class RssMeter:
    """Peak RSS growth of this process since `reset()`."""

    def __init__(self, proc_self: Path = Path("/proc/self")) -> None:
        self.proc_self = proc_self
        self.kind = "cpu_rss_growth"
        self._baseline = 0
        self._peak = 0
        self._hwm = False
        self._proc: Any = None

    def _rss(self) -> int:
        import psutil

        # one Process per pid (building one reads /proc/PID/stat: that was most of the cost
        # of an update after every step); a forked child gets its own
        if self._proc is None or self._proc.pid != os.getpid():
            self._proc = psutil.Process()
        return int(self._proc.memory_info().rss)

    def _read_hwm(self) -> int | None:
        try:
            return _status_kib((self.proc_self / "status").read_text(), "VmHWM")
        except OSError:
            return None

    def reset(self) -> None:
        try:
            (self.proc_self / "clear_refs").write_text("5")  # resets VmHWM to the current RSS
            # a reset is only worth it where VmHWM can be read back; else poll from the start
            self._hwm = self._read_hwm() is not None
        except OSError:
            self._hwm = False
        self.kind = "cpu_rss_growth_hwm" if self._hwm else "cpu_rss_growth_sampled"
        self._baseline = self._rss()
        self._peak = self._baseline

    def update(self) -> None:
        # with the high-water mark the kernel keeps the peak itself (read in peak_bytes); a
        # reading per step would only cost the measured loop (~25 µs)
        if not self._hwm:
            self._peak = max(self._peak, self._rss())

    def peak_bytes(self) -> int:
        if self._hwm:
            hwm = self._read_hwm()
            if hwm is not None:
                return max(0, max(self._peak, hwm) - self._baseline)
            # VmHWM read at reset and gone now (no polled peak in this mode): poll from here
            # on, and say the peak is a sampled one
            self._hwm, self.kind = False, "cpu_rss_growth_sampled"
        self.update()
        return max(0, self._peak - self._baseline)


class CudaMemoryMeter:
    """Peak bytes allocated by tensors on one CUDA device since `reset()`."""

    kind = "cuda_max_memory_allocated"

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)

    def reset(self) -> None:
        self._torch.cuda.synchronize(self.device)
        self._torch.cuda.reset_peak_memory_stats(self.device)

    def update(self) -> None:
        pass  # the allocator keeps the peak itself

    def peak_bytes(self) -> int:
        return int(self._torch.cuda.max_memory_allocated(self.device))


def make_memory_meter(device: str) -> MemoryMeter:
    if device.startswith("cuda"):
        return CudaMemoryMeter(device)
    return RssMeter()
