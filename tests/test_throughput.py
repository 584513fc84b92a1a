"""`mlb throughput` on CPU: stage attribution with known slow-downs, result shape, OOM, Ctrl-C,
inference, telemetry, replicates and the CLI. Tiny models, few steps; ratios, not seconds."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import workloads_slow
from typer.testing import CliRunner

from mlbaseline import stats
from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.memory import RssMeter
from mlbaseline.measure.pooling import pool_metrics
from mlbaseline.measure.step import TRAIN_STAGES, is_oom
from mlbaseline.progress import RecordingProgress
from mlbaseline.results import Metric, load_result
from mlbaseline.runners.throughput import run_throughput

DELAY = 0.03  # injected cost per step, seconds


def config(model: dict[str, Any] | None = None, **over: Any):
    """A tiny training workload on the slow test module; `over` are dotted overrides."""
    base = {
        "workload.model": "workloads_slow:slow_model",
        "workload.model_kwargs": model or {},
        "workload.dataset": "workloads_slow:slow_dataset",
        "workload.dataset_kwargs": {"n": 64},
        "workload.loss": "workloads_slow:SlowLoss",
        "workload.device": "cpu",
        "workload.threads": 1,
        "throughput.mode": "train",
        "throughput.batch_sizes": [4],
        "throughput.min_time_s": 0.0,
        "throughput.repeats": 1,  # one process: replicates are tested apart
        "throughput.min_steps": 10,
        "throughput.max_steps": 10,
        "throughput.window": 4,
        "throughput.warmup_min": 2,
        "throughput.warmup_max": 3,
        "throughput.telemetry": False,
    }
    base.update(over)
    return resolve(None, "demo", base)


def medians(result, prefix: str = "train.bs4") -> dict[str, float]:
    out = {}
    for name in (*TRAIN_STAGES, "step", "residual"):
        out[name] = stats.summarize(result.measurements[f"{prefix}.{name}"].values).median
    return out


def minima(result, prefix: str = "train.bs4") -> dict[str, float]:
    """Each stage's fastest step. A busy machine only adds time (preemption inside a spin
    overshoots it, never shortens it), so the fastest step is the one nearest the true cost."""
    return {s: min(result.measurements[f"{prefix}.{s}"].values) for s in TRAIN_STAGES}


@pytest.fixture(scope="module")
def baseline():
    result = run_throughput(config(), probe=NullProbe())
    return medians(result), minima(result)


@pytest.mark.parametrize(
    ("stage", "over"),
    [
        ("forward", {"workload.model_kwargs": {"forward_s": DELAY}}),
        ("backward", {"workload.model_kwargs": {"backward_s": DELAY}}),
        ("loss", {"workload.loss_kwargs": {"delay_s": DELAY}}),
        # 4 items per batch, num_workers=0: the batch costs DELAY in the loader's next()
        ("data_wait", {"workload.dataset_kwargs": {"n": 64, "item_s": DELAY / 4}}),
    ],
)
def test_a_slower_stage_shows_in_that_stage_only(baseline, stage, over):
    base, base_min = baseline
    result = run_throughput(config(**over), probe=NullProbe())
    slow, slow_min = medians(result), minima(result)
    seen = {"median base": base, "median slow": slow, "fastest base": base_min, "slow": slow_min}
    # the typical step's stage grew by at least the injected cost (a spin never ends early)
    assert slow[stage] - base[stage] >= 0.9 * DELAY, seen
    # ...and by about that cost, not more: a load-robust upper bound is on the fastest step,
    # since load only adds (data_wait is 4 spins per batch, so 4 chances of overshoot per
    # step: a bound on medians was timing luck). Counting a 2nd batch or stage would be 2×.
    grown = {s: slow_min[s] - base_min[s] for s in TRAIN_STAGES}
    assert grown[stage] <= 1.5 * DELAY, grown
    # ...and no other stage took it (a leaked deterministic cost shows in every step, the
    # fastest included)
    for other in TRAIN_STAGES:
        if other != stage:
            assert abs(grown[other]) < DELAY / 3, (other, grown)
    # the step total carries it; the residual does not
    assert slow["step"] - base["step"] >= 0.9 * DELAY, seen
    assert abs(slow["residual"]) < 0.05 * slow["step"], seen


def test_result_shape_and_alignment():
    result = run_throughput(config(), probe=NullProbe())
    ms = result.measurements
    step = ms["train.bs4.step"]
    assert step.meta == {"group": "train.bs4", "role": "total", "stages": list(TRAIN_STAGES)}
    assert ms["train.bs4.forward"].meta == {
        "group": "train.bs4",
        "role": "stage",
        "stage": "forward",
    }
    assert ms["train.bs4.residual"].meta["role"] == "residual"
    assert ms["train.bs4.samples_per_s"].meta["role"] == "rate"
    assert "train.bs4.grad_sync" not in ms  # single process: no sync stage
    n = len(step.values)
    entry = result.data["batch_sizes"]["4"]
    assert n == entry["train"]["measured_steps"] >= 10
    assert len(step.warmup) == entry["train"]["warmup_steps"] >= 2
    for i in range(n):  # aligned per step: residual = step − sum of stages
        parts = sum(ms[f"train.bs4.{s}"].values[i] for s in TRAIN_STAGES)
        assert ms["train.bs4.residual"].values[i] == pytest.approx(step.values[i] - parts)
        assert ms["train.bs4.samples_per_s"].values[i] == pytest.approx(4 / step.values[i])
    assert entry["stop_reason"] in ("stable", "max_steps")
    assert entry["stop_reason"] == entry["train"]["stop_reason"]
    rate = entry["train"]["samples_per_s"]
    assert rate["ci_low"] <= rate["median"] <= rate["ci_high"]
    share = entry["train"]["stage_share"]
    assert sum(share.values()) + entry["train"]["residual_share"] == pytest.approx(1.0)
    assert entry["train"]["memory_kind"].startswith("cpu_rss")
    assert result.data["determinism"]["seed"] == 42
    assert result.data["determinism"]["cudnn_deterministic"] is True
    assert result.environment["informational"]["determinism"] == result.data["determinism"]
    assert result.data["timer"] == "cpu"
    names = [c.name for c in result.verdict.checks]
    assert "train.bs4.stop_rule" in names and "train.bs4.residual" in names
    assert result.status == "complete"


def test_oom_at_one_size_is_recorded_and_the_sweep_goes_on():
    cfg = config({"oom_above": 4}, **{"throughput.batch_sizes": [2, 8, 4]})
    result = run_throughput(cfg, probe=NullProbe())
    sizes = result.data["batch_sizes"]
    assert sizes["8"]["status"] == "oom" and sizes["8"]["train"]["status"] == "oom"
    assert "out of memory" in sizes["8"]["train"]["error"]
    assert sizes["2"]["status"] == sizes["4"]["status"] == "ok"
    assert "train.bs4.step" in result.measurements and "train.bs8.step" not in result.measurements
    assert any(w["code"] == "oom" and w["batch_size"] == 8 for w in result.warnings)
    assert result.status == "complete"
    assert any(c.name == "train.bs8.run" and c.status == "warn" for c in result.verdict.checks)


def test_every_size_failing_marks_the_result_failed():
    cfg = config({"oom_above": 1}, **{"throughput.batch_sizes": [2, 4]})
    result = run_throughput(cfg, probe=NullProbe())
    assert result.status == "failed"


@pytest.mark.parametrize(
    "exc",
    [
        torch.cuda.OutOfMemoryError("x"),
        MemoryError(),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate"),
    ],
)
def test_is_oom(exc):
    expected = not str(exc).startswith("DefaultCPUAllocator")
    assert is_oom(exc) is expected


def test_ctrl_c_keeps_the_steps_so_far_and_marks_interrupted():
    cfg = config({"interrupt_after": 9}, **{"throughput.batch_sizes": [4, 8]})
    result = run_throughput(cfg, probe=NullProbe())
    assert result.status == "interrupted"
    entry = result.data["batch_sizes"]["4"]
    assert entry["status"] == "interrupted" and entry["stop_reason"] == "interrupted"
    step = result.measurements["train.bs4.step"]
    assert len(step.values) + len(step.warmup) == 8  # the 9th forward was the Ctrl-C
    assert "8" not in result.data["batch_sizes"]  # the sweep stopped


def test_inference_mode_blocked_autorange():
    workloads_slow.MODELS.clear()
    cfg = config(
        {"forward_s": 0.005}, **{"throughput.mode": "inference", "throughput.batch_sizes": [2, 4]}
    )
    result = run_throughput(cfg, probe=NullProbe())
    for b in (2, 4):
        batch = result.measurements[f"infer.bs{b}.batch"]
        rate = result.measurements[f"infer.bs{b}.samples_per_s"]
        assert batch.meta["role"] == "total" and rate.meta["role"] == "rate"
        assert batch.meta["number_per_run"] >= 1
        assert len(batch.values) >= 1 and len(batch.warmup) >= 2
        assert min(batch.values) >= 0.005  # every per-run time includes the busy-wait
        assert rate.values == pytest.approx([b / t for t in batch.values])
        assert result.data["batch_sizes"][str(b)]["stop_reason"] == "blocked_autorange"
    assert "train.bs2.step" not in result.measurements
    model = workloads_slow.MODELS[-1]
    assert model.seen_inference_mode and all(model.seen_inference_mode)


def test_telemetry_csv_beside_the_result(tmp_path):
    cfg = config(**{"throughput.telemetry": True, "golden.telemetry_interval_s": 0.01})
    result = run_throughput(
        cfg, probe=NullProbe(), output_dir=tmp_path, telemetry_name="r.telemetry.csv"
    )
    assert result.artifacts["telemetry"] == "r.telemetry.csv"
    text = (tmp_path / "r.telemetry.csv").read_text()
    assert text.startswith("t_s,cpu_pct,")
    tele = result.data["telemetry"]
    assert tele["csv"] == "r.telemetry.csv"
    assert {"overhead_fraction", "cpu_overhead_fraction", "mean_sample_s"} <= set(tele["overhead"])


def test_telemetry_in_memory_without_output():
    cfg = config(**{"throughput.telemetry": True, "golden.telemetry_interval_s": 0.01})
    result = run_throughput(cfg, probe=NullProbe())
    assert "telemetry" not in result.artifacts
    assert result.data["telemetry"]["csv"] is None
    assert "in memory" in result.data["telemetry"]["stored"]


def test_overlong_text_samples_become_a_warning():
    cfg = resolve(
        None,
        "text",
        {
            "workload.device": "cpu",
            "workload.max_length": 24,
            "workload.min_length": 16,
            "workload.vocab_size": 100,
            "golden.subset_size": 32,
            "throughput.mode": "train",
            "throughput.batch_sizes": [8],
            "throughput.min_time_s": 0.0,
            "throughput.repeats": 1,  # one process: replicates are tested apart
            "throughput.min_steps": 4,
            "throughput.max_steps": 4,
            "throughput.window": 4,
            "throughput.warmup_min": 0,
            "throughput.warmup_max": 1,
            "throughput.telemetry": False,
        },
    )
    result = run_throughput(cfg, probe=NullProbe())
    warn = [w for w in result.warnings if w["code"] == "overlong_samples"]
    assert warn and warn[0]["max_length"] == 24 and warn[0]["count"] > 0
    assert "train.bs8.step" in result.measurements


def test_progress_reports_each_size():
    progress = RecordingProgress()
    cfg = config(**{"throughput.mode": "both", "throughput.batch_sizes": [2, 4]})
    run_throughput(cfg, progress, probe=NullProbe())
    assert progress.tasks == [
        "train bs2: warm-up",
        "inference bs2",
        "train bs4: warm-up",
        "inference bs4",
    ]


def test_pool_metrics_tags_every_value():
    a = {"m": Metric("m", "s", False, [1.0, 2.0], [9.0], rank=[0, 0], meta={"group": "g"})}
    b = {"m": Metric("m", "s", False, [3.0], [], rank=[1], meta={"group": "g"})}
    pooled = pool_metrics([(0, a), (1, b)], "replicate")["m"]
    assert pooled.values == [1.0, 2.0, 3.0] and pooled.warmup == [9.0]
    assert pooled.replicate == [0, 0, 1] and pooled.rank == [0, 0, 1]
    by_rank = pool_metrics([(0, {"m": Metric("m", "s", False, [1.0])}), (1, b)], "rank")["m"]
    assert by_rank.rank == [0, 1]


def test_rss_meter_sees_growth():
    import mmap

    meter = RssMeter()
    meter.reset()
    # a fresh anonymous mapping: new pages whatever the allocator kept from earlier tests (a
    # torch tensor here could reuse already-resident freed memory and show no growth)
    block = mmap.mmap(-1, 32 * 1024 * 1024)
    for offset in range(0, len(block), mmap.PAGESIZE):
        block[offset] = 1  # touch every page so it becomes resident
    meter.update()
    assert meter.peak_bytes() >= 24 * 1024 * 1024
    assert meter.kind.startswith("cpu_rss_growth")
    block.close()


# ---------------------------------------------------------------- replicates (fresh processes)


@pytest.mark.slow
def test_replicates_are_fresh_processes_pooled(tmp_path):
    cfg = resolve(
        None,
        "demo",
        {
            "workload.model": "builtin:tiny_mlp",
            "workload.image_size": 8,
            "workload.device": "cpu",
            "workload.threads": 1,
            "golden.subset_size": 32,
            "throughput.mode": "train",
            "throughput.batch_sizes": [4],
            "throughput.min_time_s": 0.0,
            "throughput.min_steps": 6,
            "throughput.max_steps": 6,
            "throughput.window": 4,
            "throughput.warmup_min": 1,
            "throughput.warmup_max": 2,
            "throughput.repeats": 2,
            "golden.telemetry_interval_s": 0.05,
        },
    )
    result = run_throughput(cfg, probe=NullProbe(), output_dir=tmp_path)
    assert result.status == "complete", result.notes
    step = result.measurements["train.bs4.step"]
    assert sorted(set(step.replicate)) == [0, 1]
    assert len(step.replicate) == len(step.values) >= 12
    assert [r["replicate"] for r in result.data["replicates"]] == [0, 1]
    entry = result.data["batch_sizes"]["4"]
    assert len(entry["stop_reasons"]) == 2
    assert set(entry["train"]["replicate_medians"]) == {"0", "1"}
    # one sampler in the parent watched the children too
    assert result.artifacts["telemetry"] == "telemetry.csv"
    with (tmp_path / "telemetry.csv").open() as fh:
        assert max(int(r["nprocs"]) for r in csv.DictReader(fh)) >= 2


# ---------------------------------------------------------------- CLI


runner = CliRunner()


def test_help_has_an_example():
    res = runner.invoke(app, ["throughput", "--help"])
    assert res.exit_code == 0
    assert "Example: mlb throughput" in res.stdout
    for flag in (
        "--batch-sizes",
        "--mode",
        "--nproc",
        "--repeats",
        "--min-time",
        "--device",
        "--model",
    ):
        assert flag in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "fast"], "--mode: 'fast' is not one of train, inference, both"),
        (["--batch-sizes", "8,x"], "--batch-sizes: expected comma-separated integers"),
        (["--model", "nope:missing"], "workload.model: cannot import module 'nope'"),
        (["--set", "throughput.min_steps=0"], "throughput.min_steps: must be ≥ 1"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    res = runner.invoke(app, ["throughput", "--quiet", *args])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"Error: {message}")
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def cli_args(tmp_path: Path) -> list[str]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "workload:\n  model: workloads_slow:slow_model\n  dataset: workloads_slow:slow_dataset\n"
        "  loss: workloads_slow:SlowLoss\n  device: cpu\n  threads: 1\n"
        "throughput:\n  repeats: 1\n  min_steps: 6\n  max_steps: 6\n  window: 4\n  warmup_min: 1\n"
        "  warmup_max: 2\n",
        encoding="utf-8",
    )
    return ["throughput", "-c", str(cfg), "--batch-sizes", "2", "--mode", "both", "--min-time", "0"]


def test_cli_writes_result_and_telemetry(tmp_path):
    out = tmp_path / "t.json"
    res = runner.invoke(app, [*cli_args(tmp_path), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["kind"] == "throughput" and doc["artifacts"]["telemetry"] == "t.telemetry.csv"
    assert (tmp_path / "t.telemetry.csv").exists()
    back = load_result(out, kinds=["throughput"])
    assert "train.bs2.step" in back.measurements and "infer.bs2.batch" in back.measurements
    assert back.config["throughput"]["batch_sizes"] == [2]
    assert "throughput" in res.stderr and "share of the training step" in res.stderr
    again = runner.invoke(app, [*cli_args(tmp_path), "-o", str(out)])
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_cli_ctrl_c_writes_interrupted_result_exit_130(tmp_path):
    out = tmp_path / "t.json"
    args = [*cli_args(tmp_path), "--set", "workload.model_kwargs={interrupt_after: 5}"]
    res = runner.invoke(app, [*args, "-o", str(out), "--quiet"])
    assert res.exit_code == 130, res.output
    back = load_result(out)
    assert back.status == "interrupted"
    assert back.data["batch_sizes"]["2"]["stop_reason"] == "interrupted"


def test_each_part_records_its_telemetry_window(tmp_path):
    from mlbaseline.config import resolve
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.runners.throughput import run_throughput

    cfg = resolve(
        overrides={
            "workload.model": "builtin:tiny_cnn",
            "workload.image_size": 16,
            "throughput.batch_sizes": [2, 4],
            "throughput.min_time_s": 0.0,
            "throughput.repeats": 1,  # one process: replicates are tested apart
            "throughput.min_steps": 3,
            "throughput.max_steps": 4,
            "throughput.window": 2,
            "throughput.stability_windows": 1,
            "throughput.stability_tolerance": 10.0,
        }
    )
    result = run_throughput(cfg, probe=NullProbe(), output_dir=tmp_path)
    windows = [
        result.data["batch_sizes"][b][part]["telemetry_window_s"]
        for b in ("2", "4")
        for part in ("train", "inference")
    ]
    flat = [t for w in windows for t in w]
    assert flat == sorted(flat)  # parts follow one another on the sampler's clock
    assert all(end > start for start, end in windows)
