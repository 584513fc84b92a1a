"""CUDA-event timers, the CUDA memory meter, NVML and GPU runs. Run by `make gpu-check`
(`pytest -m gpu`); skipped where there is no CUDA device. Ratios and agreement, not seconds."""

from __future__ import annotations

import statistics

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

DEVICE = "cuda"


def spin(cycles: int) -> None:
    """Occupy the GPU for a fixed number of clock cycles (a device-side busy-wait)."""
    torch.cuda._sleep(cycles)


def test_cuda_timer_measures_device_time_per_stage():
    from mlbaseline.measure.timers import CudaStageTimer, make_timer

    timer = make_timer(DEVICE)
    assert isinstance(timer, CudaStageTimer) and timer.kind == "cuda"
    ratios = []
    for _ in range(5):
        timer.begin_step()
        with timer.stage("short"):
            spin(20_000_000)
        with timer.stage("long"):
            spin(60_000_000)
        t = timer.end_step()
        ratios.append(t.stages["long"] / t.stages["short"])
        assert t.total_s >= t.stages["long"] + t.stages["short"]
        # the host enqueued both in microseconds; the events saw the device work
        assert abs(t.total_s - t.wall_s) / t.wall_s < 0.10
        assert t.residual_s < 0.10 * t.total_s
    assert 2.5 < statistics.median(ratios) < 3.5


def test_cuda_timer_synchronizes_at_block_edges():
    """Work queued before begin_step must not leak into the step."""
    from mlbaseline.measure.timers import CudaStageTimer

    timer = CudaStageTimer(DEVICE)
    spin(100_000_000)  # queued before the step
    timer.begin_step()
    with timer.stage("small"):
        spin(1_000_000)
    t = timer.end_step()
    spin(1_000_000)
    timer.begin_step()
    with timer.stage("big"):
        spin(100_000_000)
    big = timer.end_step()
    assert t.total_s < 0.2 * big.total_s


def test_cuda_memory_meter_peak():
    from mlbaseline.measure.memory import CudaMemoryMeter, make_memory_meter

    meter = make_memory_meter(DEVICE)
    assert isinstance(meter, CudaMemoryMeter)
    meter.reset()
    block = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=DEVICE)
    del block
    assert meter.peak_bytes() >= 64 * 1024 * 1024
    assert meter.kind == "cuda_max_memory_allocated"


def test_nvml_probe_reads_kernel_active():
    from mlbaseline.measure.gpu import default_probe
    from mlbaseline.measure.telemetry import TelemetrySampler

    probe = default_probe()
    try:
        ok, reason = probe.available()
        if not ok:
            pytest.skip(f"NVML not available: {reason}")
        sampler = TelemetrySampler(probe, 0.1)
        spin(50_000_000)
        row = sampler.sample_once()
        assert "gpu0_kernel_active_pct" in sampler.columns
        assert row["error"] == "" or "gpu" not in row["error"]
        assert 0 <= float(row["gpu0_kernel_active_pct"]) <= 100
        assert float(row["gpu0_memory_used_bytes"]) > 0
    finally:
        probe.close()


def _cfg(**over):
    from mlbaseline.config import resolve

    base = {
        "workload.model": "builtin:tiny_cnn",
        "workload.image_size": 32,
        "workload.device": DEVICE,
        "golden.subset_size": 256,
        "throughput.batch_sizes": [16],
        "throughput.min_time_s": 0.0,
        "throughput.repeats": 1,  # one process: replicates are tested apart
        "throughput.min_steps": 10,
        "throughput.max_steps": 20,
        "throughput.window": 4,
        "throughput.warmup_min": 2,
        "throughput.warmup_max": 5,
        "throughput.telemetry": False,
    }
    return resolve(None, "demo", {**base, **over})


def test_throughput_on_gpu_uses_events_and_allocator_memory():
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.runners.throughput import run_throughput

    result = run_throughput(_cfg(), probe=NullProbe())
    assert result.status == "complete", result.notes
    assert result.data["timer"] == "cuda"
    entry = result.data["batch_sizes"]["16"]
    assert entry["train"]["memory_kind"] == "cuda_max_memory_allocated"
    assert entry["train"]["peak_memory_bytes"] > 0
    assert "infer.bs16.batch" in result.measurements
    step = result.measurements["train.bs16.step"]
    assert len(step.values) >= 10 and step.warmup


def test_slow_forward_on_gpu_lands_in_forward():
    """A device-side spin inside forward grows the forward stage, not the others."""
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.runners.throughput import TRAIN_STAGES, run_throughput

    def medians(result):
        ms = result.measurements
        return {s: statistics.median(ms[f"train.bs16.{s}"].values) for s in TRAIN_STAGES}

    over = {
        "throughput.mode": "train",
        "workload.model": "workloads_slow:spin_model",
        "workload.model_kwargs": {"cycles": 0},
    }
    base = medians(run_throughput(_cfg(**over), probe=NullProbe()))
    over["workload.model_kwargs"] = {"cycles": 50_000_000}
    slow = medians(run_throughput(_cfg(**over), probe=NullProbe()))
    extra = slow["forward"] - base["forward"]
    assert extra > 0
    for s in TRAIN_STAGES:
        if s != "forward":
            assert abs(slow[s] - base[s]) < 0.3 * extra, s


def test_timing_check_script_agrees():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import gpu_timing_check

    assert gpu_timing_check.main(["--steps", "15", "--warmup", "5", "--batch-size", "32"]) == 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_process_nccl():
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.runners.throughput import run_throughput

    result = run_throughput(
        _cfg(**{"throughput.nproc": 2, "throughput.mode": "train"}), probe=NullProbe()
    )
    assert result.data["distributed"]["backend"] == "nccl"
    assert sorted(set(result.measurements["train.bs16.grad_sync"].rank)) == [0, 1]
