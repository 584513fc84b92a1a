"""Multi-process throughput through torch.distributed's elastic launcher (gloo on CPU)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from mlbaseline.config import resolve
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.loop import Decision
from mlbaseline.measure.step import DIST_STAGES, TRAIN_STAGES
from mlbaseline.progress import RecordingProgress
from mlbaseline.runners.distributed import AllReduceParallel, FlatAllReduce
from mlbaseline.runners.throughput import run_throughput

SMALL = {
    "workload.model": "builtin:tiny_cnn",
    "workload.image_size": 16,
    "workload.device": "cpu",
    "golden.subset_size": 64,
    "throughput.mode": "train",
    "throughput.batch_sizes": [4],
    "throughput.nproc": 2,
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 6,
    "throughput.max_steps": 6,
    "throughput.window": 4,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 2,
    "throughput.telemetry": False,
}


@pytest.fixture(scope="module")
def two_procs():
    progress = RecordingProgress()
    return run_throughput(resolve(None, "demo", SMALL), progress, NullProbe()), progress


def test_two_gloo_processes_report_gradient_sync(two_procs):
    result, progress = two_procs
    assert result.status == "complete", result.notes
    ms = result.measurements
    step = ms["train.bs4.step"]
    assert step.meta["stages"] == list(DIST_STAGES)
    sync = ms["train.bs4.grad_sync"]
    assert sync.meta == {"group": "train.bs4", "role": "stage", "stage": "grad_sync"}
    assert all(v > 0 for v in sync.values)
    # both ranks' raw values pooled, tagged with rank ids, aligned per step
    assert sorted(set(step.rank)) == [0, 1]
    assert step.rank.count(0) == step.rank.count(1) == 6
    for name in ("grad_sync", "forward", "residual", "samples_per_s"):
        assert ms[f"train.bs4.{name}"].rank == step.rank
    for i, total in enumerate(step.values):
        parts = sum(ms[f"train.bs4.{s}"].values[i] for s in DIST_STAGES)
        assert ms["train.bs4.residual"].values[i] == pytest.approx(total - parts)
    # samples/s counts both processes' batches
    assert ms["train.bs4.samples_per_s"].values[0] == pytest.approx(2 * 4 / step.values[0])
    entry = result.data["batch_sizes"]["4"]
    assert entry["train"]["world_size"] == 2 and entry["train"]["ranks"] == [0, 1]
    assert entry["stop_reason"] == "max_steps"
    assert progress.tasks == ["train, 2 processes"]


def test_bus_bandwidth_uses_the_ring_factor(two_procs):
    result, _ = two_procs
    bw = result.measurements["train.bs4.allreduce_busbw"]
    sync = result.measurements["train.bs4.grad_sync"]
    nbytes = bw.meta["bytes"]
    assert nbytes == result.data["batch_sizes"]["4"]["train"]["grad_bytes"] > 0
    # factor 2(n−1)/n = 1 for n = 2
    assert bw.values == pytest.approx([nbytes / t * 1.0 for t in sync.values])
    assert bw.meta["factor"] == "2(n-1)/n"


def test_ddp_overlapped_mode_is_the_second_figure(two_procs):
    result, _ = two_procs
    ddp = result.measurements["train.bs4.ddp.step"]
    assert ddp.meta["group"] == "train.bs4.ddp" and ddp.meta["stages"] == list(TRAIN_STAGES)
    assert "train.bs4.ddp.grad_sync" not in result.measurements
    overlap = result.data["batch_sizes"]["4"]["ddp_overlap"]
    assert overlap["ddp_step_s"] > 0 and overlap["allreduce_step_s"] > 0
    d = result.data["distributed"]
    assert d["backend"] == "gloo" and d["world_size"] == 2
    assert d["launcher"].endswith("elastic_launch")
    assert len({r["pid"] for r in d["launches"][0]["ranks"]}) == 2


@pytest.mark.slow
def test_oom_in_a_worker_is_recorded_and_the_sweep_relaunches():
    over = {
        **SMALL,
        "workload.model": "workloads_slow:slow_model",
        "workload.model_kwargs": {"oom_above": 4},
        "workload.dataset": "workloads_slow:slow_dataset",
        "workload.dataset_kwargs": {"n": 64},
        "throughput.batch_sizes": [2, 8, 4],
        "throughput.sync_mode": "allreduce",
    }
    result = run_throughput(resolve(None, "demo", over), RecordingProgress(), NullProbe())
    sizes = result.data["batch_sizes"]
    assert sizes["8"]["status"] == "oom", sizes["8"]
    assert sizes["2"]["status"] == sizes["4"]["status"] == "ok"
    assert "train.bs4.grad_sync" in result.measurements
    assert len(result.data["distributed"]["launches"]) == 2
    assert result.status == "complete"


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_decision_broadcast_round_trip(one_rank_group):
    par = AllReduceParallel(0, 1, "cpu", 42)
    for d in (Decision(), Decision(5, True, "stable"), Decision(3, False, "interrupted")):
        assert par.agree(d) == d


def test_flat_allreduce_keeps_the_mean_gradient(one_rank_group):
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2, bias=False))
    model(torch.ones(2, 4)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    sync = FlatAllReduce(model, 1)
    assert sync.nbytes == sum(p.numel() * 4 for p in model.parameters())
    sync()
    for p, g in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.grad, g)
