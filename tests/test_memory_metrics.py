"""Memory as measurements (issue 28): the per-step recorders in the stage timer, and the
`mem.*` metrics of a real tiny `mlb throughput`, the library API and `mlb latency`.

Known allocations are tensors of a known size kept alive through the step; the CPU recorder is
the real one (malloc's in-use counter, /proc/self), the CUDA one runs on a fake allocator."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from mlbaseline import config
from mlbaseline.api import Baseline
from mlbaseline.cli import app
from mlbaseline.measure import allocator
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.memory_step import (
    CpuStepMemory,
    CudaStepMemory,
    PhasePeak,
    ProcSelf,
    TorchCuda,
    malloc_in_use,
)
from mlbaseline.measure.timers import CpuStageTimer, make_timer
from mlbaseline.progress import RecordingProgress
from mlbaseline.runners.latency import run_latency
from mlbaseline.runners.throughput import run_throughput

MIB = 2**20
OVER = {
    "throughput.min_time_s": 0.0,
    "throughput.min_steps": 6,
    "throughput.max_steps": 6,
    "throughput.window": 3,
    "throughput.warmup_min": 2,
    "throughput.warmup_max": 2,
}
runner = CliRunner()


def floats(nbytes: int) -> torch.Tensor:
    """A tensor of exactly `nbytes`, every page written (so RSS sees it too)."""
    return torch.ones(nbytes // 4, dtype=torch.float32)


def api_steps(nbytes: int, tuned: bool) -> dict[str, Any]:
    """A real tiny step through the library API: `forward` allocates `nbytes` kept to the
    step's end, `scratch` allocates and frees as much, `update` allocates nothing."""
    if tuned:  # the measuring process's malloc settings: freed memory stays in the process
        allocator.tune(True)
    bl = Baseline("mem", 4, "cpu", overrides=OVER, telemetry=False, probe=NullProbe(), quiet=True)
    while not bl.done:
        with bl.step():
            with bl.stage("forward"):
                kept = floats(nbytes)
            with bl.stage("scratch"):
                tmp = floats(nbytes)
                del tmp
            with bl.stage("update"):
                kept.add_(1.0)
            del kept
    return bl.result().measurements


@pytest.mark.skipif(malloc_in_use() is None, reason="needs glibc's mallinfo2")
@pytest.mark.parametrize("tuned", [False, True])
def test_a_known_allocation_is_measured_and_attributed_to_its_stage(tuned):
    ms = api_steps(64 * MIB, tuned)
    forward = ms["train.bs4.mem.forward"]
    assert forward.unit == "B" and forward.higher_is_better is False
    assert forward.meta == {"group": "train.bs4", "role": "memory", "memory": "held",
                            "stage": "forward", "kind": "cpu_malloc"}  # fmt: skip
    # every step, steady state included: where malloc keeps freed pages (tuned) RSS would
    # not move after the first step, the in-use counter does
    for value in [*forward.values, *forward.warmup]:
        assert value == pytest.approx(64 * MIB, rel=0.05)
    for stage in ("scratch", "update"):
        assert max(ms[f"train.bs4.mem.{stage}"].values) < 0.05 * 64 * MIB
    peak = ms["train.bs4.mem.peak"]
    assert len(peak.values) == len(ms["train.bs4.step"].values) == len(forward.values)
    assert peak.meta["memory"] == "peak" and peak.meta["kind"].startswith("cpu_rss")
    assert min(peak.values) >= 64 * MIB  # the whole process's RSS, the tensor included


@pytest.mark.skipif(malloc_in_use() is None, reason="needs glibc's mallinfo2")
def test_held_memory_follows_the_allocation_size():
    small, big = (api_steps(n * MIB, True)["train.bs4.mem.forward"] for n in (8, 256))
    ratio = statistics.median(big.values) / statistics.median(small.values)
    assert ratio == pytest.approx(32, rel=0.05)


def test_a_timer_without_a_recorder_gives_no_memory():
    timer = CpuStageTimer(ManualClock())
    timer.begin_step()
    with timer.stage("forward"):
        pass
    assert timer.end_step().memory is None
    assert make_timer("cpu", ManualClock(), memory=False).end_step().memory is None


# ---------------------------------------------------------------- CPU recorder on a fake /proc


def fake_proc(tmp_path: Path, rss_pages: int, hwm_kib: int | None, clear: bool) -> Path:
    (tmp_path / "statm").write_text(f"1000 {rss_pages} 10 1 0 100 0\n")
    status = "Name:\tpython\n" + (f"VmHWM:\t {hwm_kib} kB\n" if hwm_kib is not None else "")
    (tmp_path / "status").write_text(status + "VmRSS:\t 4 kB\n")
    if clear:
        (tmp_path / "clear_refs").write_text("")
    return tmp_path


def test_cpu_peak_is_vmhwm_after_a_reset_per_step(tmp_path):
    root = fake_proc(tmp_path, 10, 4096, clear=True)
    held = iter([100, 100 + 5000, 0, 0])
    rec = CpuStepMemory(ProcSelf(root), allocated=lambda: next(held))
    timer = CpuStageTimer(ManualClock(), rec)
    timer.begin_step()
    assert (root / "clear_refs").read_text() == "5"  # the kernel's VmHWM reset
    with timer.stage("forward"):
        pass
    with timer.stage("optimizer"):  # frees more than it allocates: nothing held
        pass
    memory = timer.end_step().memory
    assert memory is not None
    assert memory.held == {"forward": 5000, "optimizer": 0}
    assert memory.peak == 4096 * 1024 and memory.peak_kind == "cpu_rss_hwm"
    assert memory.kind == "cpu_malloc" and memory.reserved is None


def test_cpu_peak_without_clear_refs_is_the_highest_rss_at_the_edges(tmp_path):
    page = os.sysconf("SC_PAGE_SIZE")
    root = fake_proc(tmp_path, 10, 4096, clear=False)
    rec = CpuStepMemory(ProcSelf(root), use_malloc=False)
    assert rec.kind == "cpu_rss"
    timer = CpuStageTimer(ManualClock(), rec)
    timer.begin_step()
    with timer.stage("forward"):
        (root / "statm").write_text("1000 50 10 1 0 100 0\n")  # RSS rises in the stage...
    with timer.stage("backward"):
        (root / "statm").write_text("1000 30 10 1 0 100 0\n")  # ...and falls in the next
    memory = timer.end_step().memory
    assert memory is not None and memory.peak_kind == "cpu_rss_sampled"
    assert memory.held == {"forward": 40 * page, "backward": 0}
    assert memory.peak == 50 * page  # VmHWM (4 MiB) is not used without a reset


# ---------------------------------------------------------------- CUDA recorder, fake allocator


class FakeCuda:
    """The counters of a caching allocator: allocations move `allocated` and the peaks."""

    def __init__(self) -> None:
        self.allocated = self.reserved = 0
        self.peak = self.peak_reserved = 0
        self.resets = 0

    def alloc(self, n: int) -> None:
        self.allocated += n
        self.reserved = max(self.reserved, self.allocated + 2 * MIB)  # the pool rounds up
        self.peak = max(self.peak, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def memory_allocated(self, device: Any) -> int:
        return self.allocated

    def reset_peak_memory_stats(self, device: Any) -> None:
        self.resets += 1
        self.peak, self.peak_reserved = self.allocated, self.reserved

    def max_memory_allocated(self, device: Any) -> int:
        return self.peak

    def max_memory_reserved(self, device: Any) -> int:
        return self.peak_reserved


def test_cuda_recorder_held_peak_and_reserved_per_step():
    cuda = FakeCuda()
    cuda.alloc(100 * MIB)  # the model, before the step
    timer = CpuStageTimer(ManualClock(), CudaStepMemory("cuda:0", cuda))
    for _ in range(2):
        timer.begin_step()
        with timer.stage("forward"):
            cuda.alloc(64 * MIB)  # activations
        with timer.stage("backward"):
            cuda.alloc(32 * MIB)  # a transient...
            cuda.alloc(-32 * MIB - 64 * MIB)  # ...and the activations freed
        memory = timer.end_step().memory
        assert memory is not None
        assert memory.held == {"forward": 64 * MIB, "backward": 0}
        assert memory.peak == 196 * MIB and memory.reserved == 198 * MIB
        assert memory.kind == "cuda_allocated"
    assert cuda.resets == 2  # the peak is reset at every step's start


def test_torch_cuda_reads_the_nested_statistics(monkeypatch):
    stats = {"allocated_bytes": {"all": {"current": 7, "peak": 9}},
             "reserved_bytes": {"all": {"peak": 11}}}  # fmt: skip
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device=None: stats)
    api = TorchCuda()
    assert (api.memory_allocated(0), api.max_memory_allocated(0)) == (7, 9)
    assert api.max_memory_reserved(0) == 11
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device=None: {})
    assert api.memory_allocated(0) == 0  # CUDA not initialized yet: torch's own answer


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_cuda_recorder_measures_a_known_tensor():
    timer = make_timer("cuda")
    for _ in range(3):
        timer.begin_step()
        with timer.stage("forward"):
            kept = torch.ones(64 * MIB // 4, device="cuda")
        with timer.stage("backward"):
            kept.mul_(2)
        memory = timer.end_step().memory
        del kept
        assert memory is not None and memory.held["forward"] == 64 * MIB
        assert memory.held["backward"] == 0
        assert memory.peak is not None and memory.peak >= 64 * MIB
        assert memory.reserved is not None and memory.reserved >= memory.peak


# ---------------------------------------------------------------- the commands


def test_mlb_throughput_result_has_the_memory_metrics(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "workload:\n  model: builtin:tiny_mlp\n  device: cpu\n  threads: 1\n"
        "throughput:\n  repeats: 1\n  min_steps: 4\n  max_steps: 4\n  window: 2\n"
        "  warmup_min: 1\n  warmup_max: 1\n  num_workers: 1\n  telemetry: false\n",
        encoding="utf-8",
    )
    out = tmp_path / "t.json"
    args = ["throughput", "-c", str(cfg), "--batch-sizes", "4", "--mode", "both",
            "--min-time", "0", "-o", str(out), "--json"]  # fmt: skip
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    ms = json.loads(res.stdout)["measurements"]
    steps = len(ms["train.bs4.step"]["values"])
    for stage in ("data_wait", "h2d", "forward", "loss", "backward", "optimizer", "peak"):
        m = ms[f"train.bs4.mem.{stage}"]
        assert m["unit"] == "B" and m["higher_is_better"] is False
        assert m["meta"]["role"] == "memory" and m["meta"]["group"] == "train.bs4"
        assert len(m["values"]) == steps and all(v >= 0 for v in m["values"])
        assert len(m["warmup"]) == len(ms["train.bs4.step"]["warmup"])
    assert ms["train.bs4.mem.forward"]["meta"]["stage"] == "forward"
    assert ms["train.bs4.mem.backward"]["values"][0] > 0  # the gradients it leaves
    workers = ms["train.bs4.mem.workers_peak"]
    assert workers["meta"]["memory"] == "workers_peak" and len(workers["values"]) == 1
    assert workers["values"][0] > 0
    infer = ms["infer.bs4.mem.peak"]
    assert len(infer["values"]) == len(ms["infer.bs4.batch"]["values"])
    assert "train.bs4.mem.reserved" not in ms  # CUDA only
    assert "fwd" in res.stderr  # the throughput table's memory line


def test_memory_doubles_with_the_activations_in_a_real_model():
    def held(hidden: int) -> float:
        cfg = config.resolve(None, "demo", {
            **OVER, "workload.model": "builtin:tiny_mlp", "workload.model_kwargs":
            {"hidden": hidden}, "workload.device": "cpu", "workload.threads": 1,
            "throughput.mode": "train", "throughput.batch_sizes": [256],
            "throughput.repeats": 1, "throughput.telemetry": False})  # fmt: skip
        ms = run_throughput(cfg, probe=NullProbe()).measurements
        return statistics.median(ms["train.bs256.mem.forward"].values)

    assert held(2048) / held(1024) == pytest.approx(2.0, rel=0.1)


def test_latency_has_the_serving_process_peak():
    cfg = config.resolve(None, "demo", {
        "workload.task": "text", "workload.model": "builtin:tiny_text",
        "workload.max_length": 64, "latency.requests": 40, "latency.warmup_requests": 0,
        "latency.concurrency": 1})  # fmt: skip
    result = run_latency(cfg, RecordingProgress())
    peak = result.measurements["latency.mem.peak"]
    assert peak.unit == "B" and peak.meta["role"] == "memory" and peak.meta["per"] == "phase"
    assert len(peak.values) == 1 and peak.values[0] > 0


def test_phase_peak_on_the_fake_allocator():
    cuda = FakeCuda()
    phase = PhasePeak("cuda", CudaStepMemory("cuda", cuda))
    cuda.alloc(10 * MIB)
    cuda.alloc(-10 * MIB)
    metric = phase.metric("latency.mem.peak", "latency")
    assert metric is not None and metric.values == [10 * MIB]


def test_the_phase_meter_keeps_the_highest_step_peak(tmp_path):
    """The per-step resets leave VmHWM at the last step's peak: the phase's peak is the highest
    step peak folded in (absolute bytes, less the RSS at the phase's start)."""
    from mlbaseline.measure.memory import RssMeter

    class FixedRss(RssMeter):
        def _rss(self) -> int:
            return 100 * MIB

    (tmp_path / "clear_refs").write_text("")
    (tmp_path / "status").write_text("VmHWM:\t 122880 kB\n")  # the last step's peak: 120 MiB
    meter = FixedRss(tmp_path)
    meter.reset()
    meter.fold(300 * MIB)  # an earlier step's peak
    meter.fold(None)
    assert meter.peak_bytes() == 200 * MIB
