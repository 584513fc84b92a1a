"""The library API under torch.distributed: a real 2-process gloo group on CPU (forked, a
FileStore, no ports). Rank 1 is slower; both ranks must still take rank 0's decisions and stop
at the same step, and rank 0 writes one result pooled over both ranks with a `grad_sync` stage."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mlbaseline.api import Baseline
from mlbaseline.measure.clock import busy_wait
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.results import load_result

RULE = {
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 6,
    "throughput.max_steps": 24,
    "throughput.window": 3,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 6,
}


def _rank(rank: int, tmp: str) -> None:
    out = Path(tmp)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{out / 'store'}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=60),  # a rank left waiting in a collective fails the test
    )
    torch.set_num_threads(1)
    try:
        bl = Baseline("two-ranks", 8, "cpu", overrides=RULE, telemetry=False, probe=NullProbe())
        grads = torch.ones(4096)
        while not bl.done:
            with bl.step():
                with bl.stage("forward"):
                    busy_wait(0.002 * (1 + rank))  # rank 1 is slower: its own rule would differ
                with bl.stage("grad_sync"):
                    dist.all_reduce(grads)
        written = bl.save(out / "pooled.json")
        (out / f"rank{rank}").write_text(f"{len(bl.loop.records)} {written}")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_take_one_decision_and_pool_into_one_result(tmp_path):
    ctx = mp.start_processes(
        _rank, args=(str(tmp_path),), nprocs=2, start_method="fork", join=False
    )
    deadline = time.monotonic() + 120  # a hung rank fails the test instead of the suite
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            pytest.fail("the two ranks did not finish in 120 s")
    steps0, path0 = (tmp_path / "rank0").read_text().split()
    steps1, path1 = (tmp_path / "rank1").read_text().split()
    assert steps0 == steps1  # same number of steps on both ranks: rank 0's decisions
    assert path1 == "None" and Path(path0) == tmp_path / "pooled.json"
    r = load_result(tmp_path / "pooled.json", ["throughput"])
    step = r.measurements["train.bs8.step"]
    assert sorted(set(step.rank or [])) == [0, 1]
    assert step.rank.count(0) == step.rank.count(1)
    assert r.data["stages"] == ["forward", "grad_sync"]
    assert r.data["distributed"] == {"world_size": 2, "backend": "gloo"}
    train = r.data["batch_sizes"]["8"]["train"]
    assert train["ranks"] == [0, 1] and set(train["peak_memory_bytes_per_rank"]) == {"0", "1"}
    fwd = r.measurements["train.bs8.forward"]
    by_rank = {k: [v for v, q in zip(fwd.values, fwd.rank, strict=True) if q == k] for k in (0, 1)}
    assert min(by_rank[1]) >= 0.004 and min(by_rank[0]) >= 0.002
    # samples/s counts every process, as mlb throughput --nproc does
    rate = r.measurements["train.bs8.samples_per_s"].values[0]
    assert abs(rate - 8 * 2 / step.values[0]) < 1e-6 * rate
