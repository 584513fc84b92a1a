"""The library API on a real GPU (`make gpu-check` runs the `gpu`-marked tests; skipped where
there is no CUDA device): CUDA events through the API's stage blocks see the device work, and
agree with the synchronized wall time of each step."""

from __future__ import annotations

import statistics

import pytest
import torch

from mlbaseline.api import Baseline

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_api_stages_on_cuda_are_device_time():
    bl = Baseline(
        "gpu-api",
        8,
        "cuda",
        overrides={"throughput.min_time_s": 0.0, "throughput.max_steps": 30},
        telemetry=False,
    )
    for _ in bl.data(range(1000)):
        with bl.step():
            with bl.stage("short"):
                torch.cuda._sleep(20_000_000)  # a device-side busy-wait, host returns at once
            with bl.stage("long"):
                torch.cuda._sleep(60_000_000)
        if bl.done:
            break
    assert bl.timer.kind == "cuda"
    records = bl.loop.records[bl.loop.warmup or 0 :]
    ratios = [r.times.stages["long"] / r.times.stages["short"] for r in records]
    assert 2.5 < statistics.median(ratios) < 3.5
    for r in records:
        assert abs(r.times.total_s - r.times.wall_s) / r.times.wall_s < 0.10
    result = bl.result()
    assert result.data["timer"] == "cuda" and result.environment["blocking"]["device"] == "cuda"
