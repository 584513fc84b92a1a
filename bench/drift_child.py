"""One fresh process of the drift study (bench section `drift`): the demo training step under
one setting, with a fixed control matmul timed after every step, printed as JSON on stdout.

    python bench/drift_child.py SETTING [STEPS] [WARMUP]

Settings (each one change against `base`, the demo profile as `mlb throughput` runs it):
  base       workload.threads 1, no pinning, default allocator, denormals as torch leaves them
  pin        os.sched_setaffinity to one CPU (the last usable one) before torch starts
  threads2   two intra-op threads (torch's default on this machine)
  denormal   torch.set_flush_denormal(True)
  warm       a long warm-up (WARMUP × 4 steps)
  malloc     glibc: MALLOC_ARENA_MAX=1, fixed trim/mmap thresholds (env set by the parent)
  interop1   torch.set_num_interop_threads(1)
  thp        THP_MEM_ALLOC_ENABLE=1: torch's CPU allocator aligns large blocks to 2 MiB and
             madvises them as huge pages (env set by the parent)
  noaslr     address-space randomization off (personality ADDR_NO_RANDOMIZE, then this
             script re-executes itself): every process gets the same memory layout
The parent sets environment variables (malloc, thp, OMP settings); everything else happens here.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _cpu_of_self() -> int:
    # field 39 of /proc/self/stat: the CPU this thread last ran on
    with open("/proc/self/stat", encoding="ascii") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[36])


def _steal_s() -> float:
    import psutil

    return float(getattr(psutil.cpu_times(), "steal", 0.0))


ADDR_NO_RANDOMIZE = 0x0040000  # <linux/personality.h>


def _without_aslr() -> None:
    """Re-execute this process with address-space randomization off (it applies at exec)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)  # query
    if current & ADDR_NO_RANDOMIZE:
        return
    if libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) refused")
    os.execv(sys.executable, [sys.executable, *sys.argv])


def main() -> None:
    setting = sys.argv[1] if len(sys.argv) > 1 else "base"
    if setting == "noaslr":
        _without_aslr()
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    warmup = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    if setting == "pin":
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    import psutil
    import torch

    from mlbaseline.config import resolve
    from mlbaseline.measure.step import SingleProcess
    from mlbaseline.runners.sweep import build_step
    from mlbaseline.workloads.factory import build_dataset

    cfg = resolve(profile="demo")
    torch.set_num_threads(2 if setting == "threads2" else 1)
    if setting == "interop1":
        torch.set_num_interop_threads(1)
    if setting == "denormal":
        torch.set_flush_denormal(True)
    step, batches = build_step(cfg, build_dataset(cfg), 16, "cpu", SingleProcess(), None)
    step.model.train()
    a = torch.randn(192, 192, generator=torch.Generator().manual_seed(0))
    n_warm = warmup * 4 if setting == "warm" else warmup
    for _ in range(n_warm):
        step()
    me = psutil.Process()
    import resource

    flt0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu0, own0, steal0, wall0 = psutil.cpu_times(), me.cpu_times(), _steal_s(), time.monotonic()
    times, control, cpus = [], [], []
    for _ in range(steps):
        times.append(step().times.total_s)
        t0 = time.perf_counter_ns()
        for _ in range(24):  # ~2.5 ms here: ~1% of the step, far above the timer's grain
            torch.mm(a, a)
        control.append((time.perf_counter_ns() - t0) / 1e9)
        cpus.append(_cpu_of_self())
    wall = time.monotonic() - wall0
    # minor page faults per measured step: the allocator handing pages back and faulting them in
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt0) / steps
    cpu1, own1 = psutil.cpu_times(), me.cpu_times()
    busy = sum(getattr(cpu1, f) - getattr(cpu0, f) for f in ("user", "system", "nice", "irq"))
    own = (own1.user - own0.user) + (own1.system - own0.system)
    batches.close()
    print(
        json.dumps(
            {
                "setting": setting,
                "step_s": times,
                "control_s": control,
                "cpus": cpus,
                "wall_s": wall,
                "foreign_cores": max(busy - own, 0.0) / wall,
                "steal_cores": (_steal_s() - steal0) / wall,
                "load1": os.getloadavg()[0],
                "threads": torch.get_num_threads(),
                "minor_faults_per_step": faults,
            }
        )
    )


if __name__ == "__main__":
    main()
