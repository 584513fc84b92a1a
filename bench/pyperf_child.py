"""pyperf's default runner on the demo training step (bench section `repro`'s second reference).

    python bench/pyperf_child.py -o OUT.json [pyperf options]

pyperf spawns its own worker processes (20 by default, plus calibration) and re-runs this file
in each of them with --worker; every worker builds the step once and times `loops` steps per
value. The parent prints nothing of ours: the bench reads OUT.json.
"""

from __future__ import annotations

import time

import pyperf


def _step() -> object:
    import torch

    from mlbaseline.config import resolve
    from mlbaseline.measure.step import SingleProcess
    from mlbaseline.runners.sweep import build_step
    from mlbaseline.workloads.factory import build_dataset

    cfg = resolve(profile="demo")
    torch.set_num_threads(cfg.workload.threads or torch.get_num_threads())
    step, _ = build_step(cfg, build_dataset(cfg), 16, "cpu", SingleProcess(), None)
    step.model.train()
    return step


_STEP = None


def bench(loops: int) -> float:
    global _STEP
    if _STEP is None:
        _STEP = _step()
    t0 = time.perf_counter()
    for _ in range(loops):
        _STEP()
    return time.perf_counter() - t0


if __name__ == "__main__":
    runner = pyperf.Runner()
    runner.bench_time_func("demo_train_step_bs16", bench)
