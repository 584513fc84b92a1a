"""glibc malloc settings for the measuring process (issue 15 item 1, bench `drift`).

By default glibc returns large freed blocks to the kernel (mmap'd chunks above a *dynamic*
threshold, heap top above the trim threshold) and faults fresh pages in at the next allocation.
A CPU training step frees and reallocates its activations every step, so each step paid
3,000–8,700 minor page faults on the demo step here, a number that differed from process to
process (one process of six had 26): the kernel's cost of zeroing pages is then part of every
stage and varies with the host. Fixed thresholds keep that memory in the process: the faults
drop to ~0–90 per step, the in-process CV of the step halved (2.3% → 1.0%) and the median fell
~3% (bench `drift`, quiet machine, 6 fresh processes per setting). The same settings as
environment variables (MALLOC_MMAP_THRESHOLD_ etc.) need a new process; `mallopt` applies them
to this one. Only glibc has `mallopt`; elsewhere nothing is changed and the result says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from typing import Any

# mallopt parameter numbers from glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

SETTINGS = {
    "M_MMAP_THRESHOLD": (M_MMAP_THRESHOLD, 256 * 2**20),  # allocations below stay on the heap
    "M_TRIM_THRESHOLD": (M_TRIM_THRESHOLD, 256 * 2**20),  # free heap top kept up to this
    "M_TOP_PAD": (M_TOP_PAD, 64 * 2**20),  # grow the heap in large steps
    "M_ARENA_MAX": (M_ARENA_MAX, 1),  # one arena: the step's threads share warm memory
}

_applied: dict[str, Any] | None = None


def _libc() -> Any | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") else None


def tune(enabled: bool, libc: Any | None = None) -> dict[str, Any]:
    """Apply SETTINGS with mallopt (once per process; later calls report the first outcome).
    Returns what the result records: whether it was applied, the values, or why not."""
    global _applied
    if not enabled:
        return {"malloc_tuning": False, "reason": "workload.malloc_tuning: false"}
    if _applied is not None and libc is None:
        return _applied
    lib = libc if libc is not None else _libc()
    if lib is None:
        out: dict[str, Any] = {"malloc_tuning": False, "reason": "not glibc: mallopt unavailable"}
    else:
        failed = [k for k, (param, value) in SETTINGS.items() if lib.mallopt(param, value) != 1]
        out = {
            "malloc_tuning": not failed,
            "settings": {k: v for k, (_, v) in SETTINGS.items()},
            **({"reason": f"mallopt refused {', '.join(failed)}"} if failed else {}),
        }
    if libc is None:
        _applied = out
    return out


__all__ = ["SETTINGS", "tune"]
