"""One fresh process: `torch.utils.benchmark.Timer.blocked_autorange` on the demo profile's
training step (the `repro` section's reference), printed as JSON on stdout.

    python bench/timer_child.py [BATCH_SIZE] [MIN_RUN_TIME_S]

The step is built by the same core `mlb` uses (`runners.sweep.build_step`), so the two tools
time the same work; the Timer runs it at the profile's thread count (its own default is 1).
"""

from __future__ import annotations

import json
import sys

import torch
from torch.utils import benchmark

from mlbaseline.config import resolve
from mlbaseline.measure.step import SingleProcess
from mlbaseline.runners.sweep import build_step
from mlbaseline.workloads.factory import build_dataset


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    min_run_time = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5
    cfg = resolve(profile="demo")
    threads = cfg.workload.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    step, batches = build_step(cfg, build_dataset(cfg), batch, "cpu", SingleProcess(), None)
    step.model.train()
    timer = benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    batches.close()
    out = {
        "median_s": m.median,
        "iqr_s": m.iqr,
        "times_s": list(m.times),
        "number_per_run": m.number_per_run,
        "threads": threads,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
