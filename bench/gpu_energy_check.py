"""CUDA memory and energy per step of a real training step (part of `make gpu-check`).

Runs real training steps (torchvision resnet18, synthetic data, on the GPU) through the same
`TrainStep` that `mlb throughput` uses, and prints two lines:
- memory: the peak allocated and reserved CUDA memory over the measured steps
  (`torch.cuda.max_memory_allocated` / `max_memory_reserved` after a reset);
- energy: joules per step and per sample from `measure.energy` (NVML's total-energy counter
  over windows of >= 1 s; where the counter is absent, the power readings of a telemetry
  sampler at 0.1 s integrated), and the mean power.
The check passes when the energy was measured (at least one window gave a figure) and the
mean power is plausible for a busy GPU (between 1 W and 2,000 W).

Exit codes: 0 measured, 1 not measured or implausible, 3 no CUDA device here (skipped).

    python bench/gpu_energy_check.py --seconds 3 --batch-size 64 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _step(args: argparse.Namespace) -> Any:
    import torch

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
            "golden.subset_size": args.batch_size * 8,
        },
    )
    torch.manual_seed(cfg.golden.seed)
    model = build_model(cfg.workload).to("cuda")
    loss_fn = build_loss(cfg.workload).to("cuda")
    optimizer = build_optimizer(cfg.workload, model)
    batches = Batches(make_loader(build_dataset(cfg), cfg, args.batch_size, "cuda"))
    model.train()
    return TrainStep(
        model, loss_fn, optimizer, batches, "cuda", torch.float32, CudaStageTimer("cuda")
    )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Warm-up, then `args.seconds` of measured steps, each marked for the energy meter."""
    import torch

    from mlbaseline.measure.energy import open_meter
    from mlbaseline.measure.gpu import default_probe
    from mlbaseline.measure.telemetry import TelemetrySampler

    step = _step(args)
    for _ in range(args.warmup):
        step()
    probe = default_probe()
    try:
        # the sampler's power readings are the fallback where the GPU has no energy counter
        with TelemetrySampler(probe, 0.1) as sampler:
            meter = open_meter("cuda", probe, sampler)
            torch.cuda.reset_peak_memory_stats()
            meter.begin()
            records, start = [], time.perf_counter()
            while time.perf_counter() - start < args.seconds:
                records.append(step())
                meter.mark(len(records))
            metrics = meter.end("check", args.batch_size, 0, [r.samples for r in records])
            block = meter.block()
    finally:
        probe.close()
    windows = (block.get("batch_sizes") or {}).get(str(args.batch_size), {}).get("windows", [])
    good = [w for w in windows if not w["flag"]]
    per_step = metrics[0].values if metrics else []
    per_sample = metrics[1].values if metrics else []
    return {
        "gpu": torch.cuda.get_device_name(0),
        "model": args.model,
        "batch_size": args.batch_size,
        "steps": len(records),
        "median_step_s": statistics.median(r.times.total_s for r in records),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "energy": block,
        "energy_per_step_j": statistics.median(per_step) if per_step else None,
        "energy_per_sample_j": statistics.median(per_sample) if per_sample else None,
        "mean_power_w": (
            sum(w["joules"] for w in good) / sum(w["seconds"] for w in good) if good else None
        ),
    }


def lines(f: dict[str, Any]) -> tuple[list[str], bool]:
    """The memory and energy lines, and whether the check passed."""
    mib = 2**20
    out = [
        f"gpu energy check: CUDA memory: peak allocated {f['peak_allocated_bytes'] / mib:,.0f} "
        f"MiB, peak reserved {f['peak_reserved_bytes'] / mib:,.0f} MiB "
        f"({f['model']}, batch {f['batch_size']}, {f['gpu']})"
    ]
    e, watts = f["energy"], f["mean_power_w"]
    if f["energy_per_step_j"] is None or watts is None:
        why = e.get("reason") or next(iter((e.get("batch_sizes") or {}).values()), {}).get(
            "reason", "no window gave a figure"
        )
        out.append(f"gpu energy check: energy NOT measured: {why}")
        return out, False
    n = len([w for w in e["batch_sizes"][str(f["batch_size"])]["windows"] if not w["flag"]])
    out.append(
        f"gpu energy check: energy: {f['energy_per_step_j']:.3g} J/step, "
        f"{f['energy_per_sample_j']:.3g} J/sample, mean {watts:,.0f} W over {n} window(s) "
        f"of >= {e['min_window_s']:g} s ({e['source']}, step {f['median_step_s'] * 1e3:.1f} ms)"
    )
    ok = 1.0 <= watts <= 2000.0
    if not ok:
        out.append(f"gpu energy check: FAILED: a mean power of {watts:,.1f} W is implausible")
    return out, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds (>= 1)")
    parser.add_argument("--warmup", type=int, default=10, help="steps before measuring")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--model", default="torchvision:resnet18")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gpu energy check: no GPU: skipped (torch.cuda.is_available() is False)")
        return 3
    figures = measure(args)
    text, ok = lines(figures)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print("\n".join(text))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
