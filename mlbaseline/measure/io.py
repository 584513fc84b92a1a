"""I/O and CPU accounting for a process and its workers, and page-cache eviction.

- `/proc/<pid>/io`: `rchar` counts bytes returned by read-like syscalls (page-cache hits
  included); `read_bytes` counts bytes the process made the kernel fetch from storage. When a
  child is reaped, Linux adds its counters to the parent's, so a snapshot of the process plus its
  live children taken before the workers exit covers the workers too.
- `evict_from_page_cache`: `posix_fadvise(POSIX_FADV_DONTNEED)` drops a file's clean pages from
  the page cache; no root needed, the file is opened read-only and never modified. Dirty pages are
  not dropped, which is why freshly written files must be flushed first (`flush_to_disk`).

No torch here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class IoCounters:
    """Cumulative read counters, bytes."""

    rchar: int
    read_bytes: int

    def __sub__(self, other: IoCounters) -> IoCounters:
        return IoCounters(self.rchar - other.rchar, self.read_bytes - other.read_bytes)

    def __add__(self, other: IoCounters) -> IoCounters:
        return IoCounters(self.rchar + other.rchar, self.read_bytes + other.read_bytes)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


ZERO_IO = IoCounters(0, 0)


def parse_proc_io(text: str) -> IoCounters:
    """The `rchar` and `read_bytes` lines of a /proc/<pid>/io file."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            with contextlib.suppress(ValueError):
                fields[key.strip()] = int(value.strip())
    if "rchar" not in fields or "read_bytes" not in fields:
        raise ValueError("not a /proc/<pid>/io file (no rchar/read_bytes)")
    return IoCounters(fields["rchar"], fields["read_bytes"])


def read_proc_io(pid: int, proc: Path = Path("/proc")) -> IoCounters | None:
    """One process's counters; None when the file is missing or unreadable (hidepid, gone)."""
    try:
        return parse_proc_io((proc / str(pid) / "io").read_text())
    except (OSError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def tree_io(pid: int | None = None, proc: Path = Path("/proc")) -> IoCounters | None:
    """Counters of `pid` (default: this process) plus its live children; None when the
    process's own counters cannot be read. A child that exits between listing and reading is
    skipped: once reaped, its bytes show up in the parent's counters instead."""
    pid = os.getpid() if pid is None else pid
    own = read_proc_io(pid, proc)
    if own is None:
        return None
    total = own
    for child in _children(pid):
        counters = read_proc_io(child, proc)
        if counters is not None:
            total = total + counters
    return total


def task_cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float | None:
    """CPU seconds of a live process from /proc/<pid>/task/*/schedstat (nanoseconds on CPU,
    per thread): far finer than the 10 ms ticks of /proc/<pid>/stat. None when unreadable."""
    total = 0
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of this process and its live children.

    This process: `time.process_time()` (the process CPU clock, exited threads included).
    Children: their per-thread schedstat, else psutil's tick-granular cpu_times. A child
    reaped between two snapshots drops out; the runner takes its snapshots while the
    DataLoader workers are alive."""
    import psutil

    own_pid = os.getpid()
    pid = own_pid if pid is None else pid
    total = time.process_time() if pid == own_pid else (task_cpu_seconds(pid) or 0.0)
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        children = []
    for child in children:
        seconds = task_cpu_seconds(child.pid)
        if seconds is None:
            with contextlib.suppress(psutil.Error):
                ct = child.cpu_times()
                seconds = ct.user + ct.system
        total += seconds or 0.0
    return float(total)


@dataclass
class UsageSnapshot:
    """Where the counters stood at one moment; `usage_since` turns two into a delta."""

    io: IoCounters | None
    cpu_s: float
    wall_ns: int

    @classmethod
    def take(cls, wall_ns: int) -> UsageSnapshot:
        return cls(io=tree_io(), cpu_s=tree_cpu_seconds(), wall_ns=wall_ns)


def usage_between(start: UsageSnapshot, end: UsageSnapshot, cpus: int) -> dict[str, Any]:
    """I/O bytes and CPU utilisation (share of `cpus` usable CPUs) between two snapshots."""
    wall = max((end.wall_ns - start.wall_ns) / 1e9, 1e-9)
    cpu = max(end.cpu_s - start.cpu_s, 0.0)
    io = None if start.io is None or end.io is None else (end.io - start.io).to_dict()
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_util": cpu / wall / max(cpus, 1),
        "io": io,
    }


def flush_to_disk(paths: Iterable[Path]) -> None:
    """fsync each file so that its pages are clean and an eviction can drop them."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            with contextlib.suppress(OSError):
                os.fsync(fd)
        finally:
            os.close(fd)


def evict_file(path: str | os.PathLike[str]) -> bool:
    """Drop one file's clean pages from the page cache; False when it could not be done."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def evict_from_page_cache(paths: Iterable[Path]) -> int:
    """Evict every file; returns how many evictions succeeded."""
    return sum(evict_file(p) for p in paths)


def eviction_supported() -> bool:
    return hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")
