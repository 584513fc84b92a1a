"""Do CUDA-event stage timings agree with synchronized wall-clock time? (part of `make gpu-check`)

Runs real training steps (torchvision resnet18, synthetic data, on the GPU) through the same
`TrainStep` and `CudaStageTimer` that `mlb throughput` uses. For every step it has the sum of the
CUDA-event stage times and the event total, and `StepTimes.wall_s`: perf_counter between the
synchronize at the step's start and the synchronize at its end. The check passes when the
median relative difference |sum(stages) − wall| / wall, and likewise |event total − wall| / wall,
are within the tolerance (10%).

Exit codes: 0 agree, 1 disagree, 3 no CUDA device here (skipped).

    python bench/gpu_timing_check.py --steps 40 --batch-size 64 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="measured steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed warm-up steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--model", default="torchvision:resnet18")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu timing check: no GPU: skipped (torch.cuda.is_available() is False)")
        return 3

    from mlbaseline.config import resolve
    from mlbaseline.measure.step import Batches, TrainStep
    from mlbaseline.measure.timers import CudaStageTimer
    from mlbaseline.runners.sweep import make_loader
    from mlbaseline.workloads.factory import (
        build_dataset,
        build_loss,
        build_model,
        build_optimizer,
    )

    cfg = resolve(
        None,
        "vision",
        {
            "workload.model": args.model,
            "workload.image_size": args.image_size,
            "workload.device": "cuda",
            "golden.subset_size": args.batch_size * 4,
        },
    )
    device = "cuda"
    torch.manual_seed(cfg.golden.seed)
    model = build_model(cfg.workload).to(device)
    loss_fn = build_loss(cfg.workload).to(device)
    optimizer = build_optimizer(cfg.workload, model)
    spec = build_dataset(cfg)
    batches = Batches(make_loader(spec, cfg, args.batch_size, device))
    timer = CudaStageTimer(device)
    step = TrainStep(model, loss_fn, optimizer, batches, device, torch.float32, timer)
    model.train()
    for _ in range(args.warmup):
        step()
    records = [step() for _ in range(args.steps)]

    def rel(a: float, b: float) -> float:
        return abs(a - b) / b if b > 0 else float("inf")

    stage_vs_wall = [rel(sum(r.times.stages.values()), r.times.wall_s) for r in records]
    total_vs_wall = [rel(r.times.total_s, r.times.wall_s) for r in records]
    figures = {
        "gpu": torch.cuda.get_device_name(0),
        "model": args.model,
        "batch_size": args.batch_size,
        "steps": len(records),
        "tolerance": args.tolerance,
        "median_wall_s": statistics.median(r.times.wall_s for r in records),
        "median_event_total_s": statistics.median(r.times.total_s for r in records),
        "median_stage_sum_s": statistics.median(sum(r.times.stages.values()) for r in records),
        "median_rel_diff_stages_vs_wall": statistics.median(stage_vs_wall),
        "median_rel_diff_total_vs_wall": statistics.median(total_vs_wall),
        "stage_median_s": {
            s: statistics.median(r.times.stages[s] for r in records)
            for s in records[0].times.stages
        },
    }
    ok = (
        figures["median_rel_diff_stages_vs_wall"] <= args.tolerance
        and figures["median_rel_diff_total_vs_wall"] <= args.tolerance
    )
    figures["agree"] = ok
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")
    verdict = "agree" if ok else "DISAGREE"
    print(
        f"gpu timing check: CUDA events vs synchronized wall clock {verdict} "
        f"(stages {figures['median_rel_diff_stages_vs_wall']:.1%}, "
        f"total {figures['median_rel_diff_total_vs_wall']:.1%}, tolerance {args.tolerance:.0%})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
