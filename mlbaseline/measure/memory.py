"""Peak memory of one measured block, behind one interface chosen by device.

- CUDA: `torch.cuda.reset_peak_memory_stats` / `torch.cuda.max_memory_allocated` — bytes held by
  tensors through the caching allocator (not the allocator's reserved pool, not other processes).
- CPU: there is no allocator counter, so this is *RSS growth* of this process (not its
  DataLoader workers): the kernel's high-water mark `VmHWM`, reset through
  `/proc/self/clear_refs` ("5"), minus the RSS at reset. Where that reset is refused or VmHWM
  cannot be read back, the peak is the highest RSS seen at `update()` calls (after each step),
  which can miss a transient peak inside a step; `kind` says which was used.

The per-step recorder (`measure.memory_step`, in the stage timer) resets the same peaks at each
step's start, so a phase meter alongside it is handed each step's peak (`fold`): the phase's
peak is then the highest of them, not only what followed the last step's reset.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from mlbaseline import formatting
from mlbaseline.errors import ConfigError


class MemoryMeter(Protocol):
    kind: str

    def reset(self) -> None: ...

    def update(self) -> None: ...

    def fold(self, peak: int | None) -> None:
        """A peak read by someone else (absolute bytes, same counter) since `reset()`."""
        ...

    def peak_bytes(self) -> int: ...


def _status_kib(text: str, key: str) -> int | None:
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def vm_hwm(status: Path) -> int | None:
    """VmHWM (peak RSS) from a `/proc/PID/status` file; None where it cannot be read (the
    process ended, or the kernel does not say)."""
    try:
        return _status_kib(status.read_text(), "VmHWM")
    except OSError:
        return None


def workers_peak(pids: list[int], proc: Path = Path("/proc")) -> int | None:
    """DataLoader workers' peak RSS (VmHWM) summed over the workers, read while they are still
    alive; None without workers (or where none could be read)."""
    found = [p for p in (vm_hwm(proc / str(pid) / "status") for pid in pids) if p is not None]
    return sum(found) if found else None


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
        return vm_hwm(self.proc_self / "status")

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

    def fold(self, peak: int | None) -> None:
        if peak is not None:
            self._peak = max(self._peak, peak)

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
        self._folded = 0

    def reset(self) -> None:
        self._torch.cuda.synchronize(self.device)
        self._torch.cuda.reset_peak_memory_stats(self.device)
        self._folded = 0

    def update(self) -> None:
        pass  # the allocator keeps the peak itself

    def fold(self, peak: int | None) -> None:
        self._folded = max(self._folded, peak or 0)

    def peak_bytes(self) -> int:
        return max(self._folded, int(self._torch.cuda.max_memory_allocated(self.device)))


def make_memory_meter(device: str) -> MemoryMeter:
    if device.startswith("cuda"):
        return CudaMemoryMeter(device)
    return RssMeter()


# ---------------------------------------------------------------- will a batch fit at all?

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8}


@dataclass(frozen=True)
class BatchEstimate:
    """The bytes of one input batch: `batch` samples of `sample_shape` in `dtype`. A lower bound
    of what a step needs (activations come on top), so a batch over the memory available
    cannot run, and allocating it only ends in a MemoryError or an OOM-killed process."""

    batch: int
    sample_shape: tuple[int, ...]
    dtype: str

    @property
    def bytes(self) -> int:
        return self.batch * math.prod(self.sample_shape) * DTYPE_BYTES[self.dtype]

    def describe(self) -> str:
        shape = "×".join(map(str, self.sample_shape))
        return f"{self.batch} × {shape} {self.dtype} ≈ {formatting.size(self.bytes, ',.1f')}"


def host_available_bytes() -> int:
    return int(psutil.virtual_memory().available)


def cuda_free_bytes(device: str) -> int:
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


def available_bytes(
    device: str,
    host: Callable[[], int] = host_available_bytes,
    cuda_free: Callable[[str], int] = cuda_free_bytes,
) -> int:
    """Memory a new batch can take: the host's available memory (every batch is built there
    first), and on CUDA the less of that and the device's free memory."""
    have = host()
    return min(have, cuda_free(device)) if device.startswith("cuda") else have


def refuse_oversized_batch(
    where: str,
    estimate: BatchEstimate,
    device: str,
    available: Callable[[str], int] = available_bytes,
) -> None:
    """ConfigError (exit 2) before anything is allocated when the batch cannot fit."""
    have = available(device)
    if estimate.bytes > have:
        raise ConfigError(
            f"{where}: {estimate.describe()}, more than the {formatting.size(have, ',.1f')} "
            "available"
        )


def input_estimate(cfg: Any, batch: int, service: bool = False) -> BatchEstimate | None:
    """The input batch the config makes at `batch`: vision 3×image_size² float32; text tokens
    (int64) of max_length for the synthetic data, of the median length for the latency model
    service (`service`, whatever the dataset: it makes its own input). None where the samples
    are a dataset factory's own: their size is not in the config."""
    w = cfg.workload
    text = w.task == "text"
    if service and text:  # the synthetic data's median length
        length = min(w.max_length, max(w.min_length, w.max_length // 4))
        return BatchEstimate(batch, (length,), "int64")
    if not service and w.dataset not in ("synthetic", "imagefolder"):
        return None
    if text and w.dataset == "synthetic":
        return BatchEstimate(batch, (w.max_length,), "int64")
    return BatchEstimate(batch, (3, w.image_size, w.image_size), "float32")


def refuse_oversized_batches(
    cfg: Any,
    where: str,
    sizes: list[int],
    device: str = "cpu",
    service: bool = False,
    available: Callable[[str], int] = available_bytes,
) -> None:
    """`refuse_oversized_batch` for each configured batch size. With the default `cpu` it checks
    the host alone and needs no torch, so the CLI can refuse before importing it; the runners
    check again on the resolved device."""
    for size in sizes:
        estimate = input_estimate(cfg, size, service)
        if estimate is not None:
            refuse_oversized_batch(where, estimate, device, available)
