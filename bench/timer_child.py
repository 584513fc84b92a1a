"""One fresh process: `torch.utils.benchmark.Timer.blocked_autorange` on the demo profile's
forward pass (the reproducibility section's reference), printed as JSON on stdout.

    python bench/timer_child.py [BATCH_SIZE] [MIN_RUN_TIME_S]
"""

from __future__ import annotations

import json
import sys

import torch
from torch.utils import benchmark

from mlbaseline.config import resolve
from mlbaseline.measure.determinism import set_determinism
from mlbaseline.workloads.factory import build_model


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    min_run_time = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5
    w = resolve(profile="demo").workload
    seed = resolve(profile="demo").golden.seed
    set_determinism(seed, w.deterministic, w.cudnn_benchmark)
    model = build_model(w).eval()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, w.image_size, w.image_size, generator=g)
    with torch.inference_mode():
        timer = benchmark.Timer(
            stmt="model(x)",
            globals={"model": model, "x": x},
            num_threads=torch.get_num_threads(),  # Timer defaults to 1 thread; mlb uses torch's
        )
        m = timer.blocked_autorange(min_run_time=min_run_time)
    out = {
        "median_s": m.median,
        "iqr_s": m.iqr,
        "times_s": list(m.times),
        "number_per_run": m.number_per_run,
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
