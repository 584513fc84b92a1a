"""mlb dataloader: stage split, sweeps, knee, cold vs warm cache, corrupt files, CLI.

Real timing is only compared as ratios and medians (busy_wait gives a known CPU cost); trees
are tiny (16 px images) so the whole file stays fast.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from mlbaseline import config as cfgmod
from mlbaseline.cli import app
from mlbaseline.errors import ConfigError, DatasetError
from mlbaseline.measure import io as iomod
from mlbaseline.measure.clock import busy_wait
from mlbaseline.progress import RecordingProgress
from mlbaseline.results import Metric, Result, write_result
from mlbaseline.runners import dataloader as dlrun
from mlbaseline.runners.dataloader import run_dataloader
from mlbaseline.runners.dataloader_analysis import (
    cap_workers,
    data_wait_shares,
    find_knee,
    input_bound_check,
    input_bound_verdict,
    rule_of_thumb,
)
from mlbaseline.workloads.synthetic import write_image_tree
from mlbaseline.workloads.timed_folder import (
    FailedSample,
    SampleTimes,
    TimedCollate,
    TimedImageFolder,
    TimedSample,
    decoder_for,
)

BUSY_S = 0.001  # known extra transform cost per sample
HERE = __name__  # the import path of this module, for transform/dataset factories


class BusyTransform:
    """ToTensor after a busy wait of `seconds` (picklable: a module-level class)."""

    def __init__(self, seconds: float = 0.0) -> None:
        from torchvision import transforms

        self.seconds = seconds
        self.to_tensor = transforms.ToTensor()

    def __call__(self, image: Any) -> torch.Tensor:
        if self.seconds:
            busy_wait(self.seconds)
        return self.to_tensor(image)


def busy_transform(seconds: float = 0.0) -> BusyTransform:
    return BusyTransform(seconds)


class CrashInWorker(BusyTransform):
    """Kills the worker process it runs in (a segfaulting decoder, say); fine in the main one."""

    def __call__(self, image: Any) -> torch.Tensor:
        if torch.utils.data.get_worker_info() is not None:
            os._exit(3)
        return super().__call__(image)


def crash_in_worker() -> CrashInWorker:
    return CrashInWorker()


class TinyDataset:
    """A user dataset that hides its steps; index `bad` raises."""

    def __init__(self, n: int = 48, bad: int | None = None) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i == self.bad:
            raise ValueError("broken sample")
        return torch.full((3, 8, 8), float(i)), i % 3


def tiny_dataset(n: int = 48, bad: int | None = None) -> TinyDataset:
    return TinyDataset(n, bad)


def make_tree(root: Path, n: int = 64) -> Path:
    paths = write_image_tree(root, n, num_classes=4, size=16, seed=1, fmt="jpeg")
    iomod.flush_to_disk(paths)
    return root


def config(**overrides: Any) -> cfgmod.Config:
    base = {
        "golden.batch_size": 8,
        "workload.image_size": 16,
        "dataloader.workers": [0],
        "dataloader.batches": 4,
        "dataloader.cold_cache": False,
        "dataloader.persistent_epochs": 0,
        "dataloader.synthetic_images": 48,
    }
    base.update(overrides)
    return cfgmod.resolve(None, "demo", base)


def median(values: list[float]) -> float:
    return float(torch.tensor(values, dtype=torch.float64).median())


def per_batch_split(result: Result, prefix: str, batch_size: int) -> list[float]:
    """(Σ read+decode+transform of the batch's samples + collate) / batch time, per batch."""
    m = result.measurements
    stages = [m[f"{prefix}.{s}"].values for s in ("read", "decode", "transform")]
    per_sample = [sum(v) for v in zip(*stages, strict=True)]
    collate, batch = m[f"{prefix}.collate"].values, m[f"{prefix}.batch"].values
    out = []
    for i, (c, b) in enumerate(zip(collate, batch, strict=True)):
        out.append((sum(per_sample[i * batch_size : (i + 1) * batch_size]) + c) / b)
    return out


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tree(tmp_path_factory.mktemp("tree"), 64)


@pytest.fixture(scope="module")
def busy_run(tree: Path) -> Result:
    cfg = config(
        **{
            "workload.transform": f"{HERE}:busy_transform",
            "workload.transform_kwargs": {"seconds": BUSY_S},
            "dataloader.batches": 16,
        }
    )
    return run_dataloader(cfg, tree)


@pytest.fixture(scope="module")
def plain_run(tree: Path) -> Result:
    cfg = config(
        **{
            "workload.transform": f"{HERE}:busy_transform",
            "workload.transform_kwargs": {"seconds": 0.0},
            "dataloader.batches": 16,
        }
    )
    return run_dataloader(cfg, tree)


# ---------------------------------------------------------------- stage split


def test_stages_add_up_to_the_batch_time_at_zero_workers(busy_run: Result) -> None:
    ratios = per_batch_split(busy_run, "dataloader.w0", 8)
    assert len(ratios) == 16
    assert 0.9 <= median(ratios) <= 1.1
    (row,) = busy_run.data["settings"]
    assert 0.9 <= row["split_coverage"] <= 1.1
    # the structure compare relies on: aligned total, stages and residual per sample
    m = busy_run.measurements
    total = m["dataloader.w0.sample"]
    assert total.meta["role"] == "total" and total.meta["stages"] == ["read", "decode", "transform"]
    n = len(total.values)
    assert n == 16 * 8
    for name in ("read", "decode", "transform", "residual"):
        assert len(m[f"dataloader.w0.{name}"].values) == n
    assert len(total.warmup) == 8  # the warm-up round (one batch at W=0) is kept apart
    assert m["dataloader.w0.samples_per_s"].meta["role"] == "rate"
    assert len(m["dataloader.w0.samples_per_s"].values) == 16


def test_split_is_present_with_worker_processes(tree: Path) -> None:
    cfg = config(**{"dataloader.workers": [2]})
    result = run_dataloader(cfg, tree)
    m = result.measurements
    for stage in ("read", "decode", "transform", "collate"):
        values = m[f"dataloader.w2.{stage}"].values
        assert values and all(v > 0 for v in values), stage
    assert len(m["dataloader.w2.read"].values) == 4 * 8
    (row,) = result.data["settings"]
    assert row["workers"] == 2 and row["status"] == "ok" and row["warmup_batches"] == 2


def test_slower_transform_moves_only_the_transform_stage(
    busy_run: Result, plain_run: Result
) -> None:
    def med(result: Result, stage: str) -> float:
        return median(result.measurements[f"dataloader.w0.{stage}"].values)

    slow, fast = med(busy_run, "transform"), med(plain_run, "transform")
    assert slow / fast > 5
    assert slow - fast >= 0.9 * BUSY_S
    # The delay must not leak into the other stages. Judge each by how much of the injected
    # delay it moved, not by a ratio: read and decode take tens of µs here, and right after a
    # busy-wait (cold caches) they can double without any of the delay landing in them.
    for stage in ("read", "decode"):
        moved = med(busy_run, stage) - med(plain_run, stage)
        assert abs(moved) < 0.1 * BUSY_S, (stage, moved)


# ---------------------------------------------------------------- sweep, knee, corrupt files


def test_sweep_gives_knee_and_recommendation_and_lists_corrupt_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_tree(tmp_path / "data", 48)
    garbage = root / "class_00" / "garbage.jpg"
    garbage.write_bytes(b"not an image at all")
    good = next((root / "class_01").glob("*.jpeg"))
    truncated = root / "class_01" / "truncated.jpg"
    truncated.write_bytes(good.read_bytes()[:60])
    monkeypatch.setattr("mlbaseline.envinfo.usable_cpus", lambda root=None: 2)
    progress = RecordingProgress()
    result = run_dataloader(config(**{"dataloader.workers": [0, 2, 8]}), root, progress)

    assert result.status == "complete"
    assert result.data["workers"] == [0, 2]
    codes = {w["code"] for w in result.warnings}
    assert {"workers_capped", "corrupt_files", "few_batches"} <= codes
    corrupt = result.data["corrupt"]
    assert corrupt["count"] == 2
    assert {e["path"] for e in corrupt["files"]} == {str(garbage), str(truncated)}
    assert all(e["stage"] == "decode" for e in corrupt["files"])
    rows = result.data["settings"]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["failed_samples"] > 0 for r in rows)

    knee = result.data["knee"]
    rates = {int(k): v for k, v in knee["rates"].items()}
    assert knee["workers"] == find_knee(rates, 0.05)
    assert knee["rule_of_thumb"] == {"formula": "min(64, 2·cpus + 1)", "cpus": 2, "value": 5}
    assert set(knee["cpu_util"]) == {0, 2}
    assert all(u >= 0 for u in knee["cpu_util"].values())
    assert result.data["recommendation"].startswith(f"num_workers={knee['workers']}:")
    assert "pin_memory: not applicable on CPU" in result.data["recommendation"]
    assert result.data["pin_memory_effect"]["applicable"] is False
    assert any("num_workers=2" in t for t in progress.tasks)
    json.loads(result.to_json())  # strictly valid JSON


def test_a_crashed_worker_fails_its_setting_not_the_sweep(tree: Path) -> None:
    cfg = config(
        **{
            "workload.transform": f"{HERE}:crash_in_worker",
            "dataloader.workers": [0, 1],
            "dataloader.persistent_epochs": 1,
        }
    )
    result = run_dataloader(cfg, tree)
    rows = result.data["settings"]
    assert [(r["workers"], r["status"]) for r in rows] == [(0, "ok"), (1, "failed")]
    assert "exited unexpectedly" in rows[1]["error"]
    assert sum(w["code"] == "setting_failed" for w in result.warnings) == 2
    assert result.status == "complete" and result.data["knee"]["workers"] == 0


def test_knee_rule_and_worker_cap() -> None:
    assert find_knee({0: 100.0, 2: 191.0, 4: 200.0, 8: 198.0}, 0.05) == 2
    assert find_knee({0: 100.0, 2: 150.0, 4: 200.0}, 0.05) == 4
    assert find_knee({0: 100.0}, 0.05) == 0
    assert find_knee({}, 0.05) is None
    assert find_knee({0: math.nan, 2: 0.0}, 0.05) is None
    assert cap_workers([0, 2, 4, 8], 2) == ([0, 2], [4, 8])
    assert cap_workers([0, 1], 4) == ([0, 1], [])
    assert rule_of_thumb(2) == 5 and rule_of_thumb(40) == 64


def test_persistent_workers_effect_is_measured(tree: Path) -> None:
    cfg = config(**{"dataloader.workers": [1], "dataloader.persistent_epochs": 2})
    result = run_dataloader(cfg, tree)
    (effect,) = result.data["persistent_workers_effect"]
    assert effect["workers"] == 1 and effect["off_s"] > 0 and effect["on_s"] > 0
    assert len(result.measurements["dataloader.w1.epoch_start"].values) == 2
    assert len(result.measurements["dataloader.w1.persistent.epoch_start"].values) == 2


# ---------------------------------------------------------------- page cache


def test_cold_and_warm_passes_are_both_reported_and_cold_is_not_faster(
    tree: Path, tmp_path: Path
) -> None:
    result = run_dataloader(config(**{"dataloader.cold_cache": True}), tree)
    m = result.measurements
    cold, warm = m["dataloader.w0.cold.read"].values, m["dataloader.w0.read"].values
    assert cold and warm
    assert median(cold) >= 0.9 * median(warm)
    caches = [r["cache"] for r in result.data["settings"]]
    assert caches == ["cold", "warm"]
    cold_row, warm_row = result.data["settings"]
    if cold_row["io"] is None:
        return
    assert result.data["io"]["dataloader.w0.cold"]["bytes_read_by_dataset"] > 0
    codes = {w["code"] for w in result.warnings}
    if eviction_works(tmp_path):
        # here the page cache can be dropped: the cold pass must have gone to storage
        assert cold_row["io"]["read_bytes"] > 0 and "cold_not_cold" not in codes
        assert warm_row["io"]["read_bytes"] < cold_row["io"]["read_bytes"]
        assert median(cold) > median(warm)
    else:  # tmpfs, overlay: the result must say that its cold figures are not cold
        assert "cold_not_cold" in codes


def eviction_works(folder: Path) -> bool:
    """Does posix_fadvise DONTNEED make a re-read go to storage on this file system?"""
    path = folder / "probe.bin"
    path.write_bytes(os.urandom(1 << 20))
    iomod.flush_to_disk([path])
    iomod.evict_file(path)
    before = iomod.read_proc_io(os.getpid())
    path.read_bytes()
    after = iomod.read_proc_io(os.getpid())
    path.unlink()
    return before is not None and after is not None and (after - before).read_bytes > 0


def test_io_counters_and_eviction_leave_files_unchanged(tmp_path: Path) -> None:
    text = "rchar: 10\nwchar: 0\nsyscr: 1\nread_bytes: 4096\nwrite_bytes: 0\n"
    assert iomod.parse_proc_io(text) == iomod.IoCounters(10, 4096)
    with pytest.raises(ValueError):
        iomod.parse_proc_io("nothing here")
    assert iomod.read_proc_io(123, tmp_path) is None
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 10000)
    before = path.stat()
    assert iomod.evict_file(path) is True
    assert iomod.evict_file(tmp_path / "missing") is False
    after = path.stat()
    assert path.read_bytes() == b"x" * 10000
    assert (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size)
    if Path("/proc/self/io").exists():
        start = iomod.tree_io()
        assert start is not None
        path.read_bytes()
        assert (iomod.tree_io() - start).rchar >= 10000


# ---------------------------------------------------------------- datasets and collate


def test_collate_drops_failed_samples_and_carries_timings() -> None:
    ok = TimedSample((torch.zeros(3), 1), SampleTimes(0.3, 0.1, 0.1, 0.1, 10))
    bad = FailedSample(5, "/x.jpg", "decode", "OSError: truncated")
    batch = TimedCollate()([ok, bad, ok])
    assert batch.size == 2 and batch.failed == [bad]
    assert batch.data[0].shape == (2, 3) and batch.collate_s >= 0
    empty = TimedCollate()([bad])
    assert empty.data is None and empty.size == 0


def test_user_dataset_is_measured_per_sample_as_a_whole() -> None:
    cfg = config(
        **{
            "workload.dataset": f"{HERE}:tiny_dataset",
            "workload.dataset_kwargs": {"n": 48, "bad": 3},
            "dataloader.cold_cache": True,
        }
    )
    result = run_dataloader(cfg)
    assert result.data["split"] == "whole-sample"
    names = set(result.measurements)
    assert "dataloader.w0.sample" in names and "dataloader.w0.read" not in names
    assert result.measurements["dataloader.w0.sample"].meta["split"] == "whole-sample"
    codes = {w["code"] for w in result.warnings}
    assert {"whole_sample", "cold_not_applicable", "corrupt_files"} <= codes
    assert result.data["corrupt"]["files"][0]["index"] == 3
    assert [r["cache"] for r in result.data["settings"]] == ["warm"]


def test_dataset_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such directory"):
        TimedImageFolder(tmp_path / "missing")
    with pytest.raises(DatasetError, match="no class sub-folders"):
        TimedImageFolder(tmp_path)
    (tmp_path / "a").mkdir()
    with pytest.raises(DatasetError, match="no image files"):
        TimedImageFolder(tmp_path)
    (tmp_path / "a" / "x.jpg").write_bytes(b"junk")
    with pytest.raises(DatasetError, match="no sample could be loaded"):
        run_dataloader(config(), tmp_path)


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("cv2") is not None, reason="OpenCV is installed"
)
def test_opencv_decoder_without_opencv_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="'opencv' needs OpenCV"):
        decoder_for("opencv")


# ---------------------------------------------------------------- synthetic tree, Ctrl-C


def _spy_mkdtemp(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record the scratch folders the runner makes (through `mlbaseline.scratch`)."""
    made: list[Path] = []
    real = dlrun.scratch.make

    def spy(*args: Any, **kwargs: Any) -> Path:
        path = real(*args, **kwargs)
        made.append(Path(path))
        return path

    monkeypatch.setattr(dlrun.scratch, "make", spy)
    return made


def test_synthetic_tree_is_generated_and_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _spy_mkdtemp(monkeypatch)
    result = run_dataloader(config())
    generated = result.data["dataset"]["generated"]
    assert generated["images"] == 48 and generated["format"] == "jpeg"
    assert generated["deleted"] is True
    assert len(made) == 1 and not made[0].exists()
    assert result.data["dataset"]["len"] == 48


def test_ctrl_c_keeps_the_passes_done(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _spy_mkdtemp(monkeypatch)
    real = dlrun.run_pass
    calls = {"n": 0}

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(dlrun, "run_pass", interrupted)
    result = run_dataloader(config(**{"dataloader.workers": [0, 1]}))
    assert result.status == "interrupted"
    assert "interrupted during dataloader.w1" in result.notes[0]
    assert [r["key"] for r in result.data["settings"]] == ["dataloader.w0"]
    assert result.data["knee"]["workers"] == 0
    assert not made[0].exists()
    json.loads(result.to_json())


# ---------------------------------------------------------------- input-bound verdict


def throughput_result(wait: float, step: float, bs: int = 8) -> Result:
    result = Result(kind="throughput", config={"throughput": {"num_workers": 0}})
    result.add_metric(Metric(f"train.bs{bs}.data_wait", "s", False, [wait] * 10))
    result.add_metric(Metric(f"train.bs{bs}.step", "s", False, [step] * 10))
    return result


def test_input_bound_levels() -> None:
    assert input_bound_verdict(0.0)[0] == "none"
    assert input_bound_verdict(0.049)[0] == "none"
    assert input_bound_verdict(0.05)[0] == "moderate"
    assert input_bound_verdict(0.199)[0] == "moderate"
    assert input_bound_verdict(0.20)[0] == "high"
    assert "35.0%" in input_bound_verdict(0.35)[1]
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError):
            input_bound_verdict(bad)


def test_input_bound_from_a_throughput_result() -> None:
    shares = data_wait_shares(throughput_result(0.01, 0.1))
    assert shares[8]["share"] == pytest.approx(0.1) and shares[8]["level"] == "moderate"
    check, data = input_bound_check(throughput_result(0.03, 0.1), 8, knee=2)
    assert check.status == "warn" and data["level"] == "high"
    assert "num_workers=2" in check.message
    check, _ = input_bound_check(throughput_result(0.001, 0.1), 8, knee=2)
    assert check.status == "pass"
    check, _ = input_bound_check(Result(kind="throughput"), 8, knee=None)
    assert check.status == "skip"


def test_runner_adds_the_input_bound_check() -> None:
    result = run_dataloader(config(), throughput_result=throughput_result(0.002, 0.1))
    (check,) = result.verdict.checks
    assert check.name == "input_bound" and check.status == "pass"
    assert result.data["input_bound"]["level"] == "none"


def test_runner_module_imports_no_torch() -> None:
    code = "import sys, mlbaseline.runners.dataloader; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---------------------------------------------------------------- CLI


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


SMALL = ["--set", "golden.batch_size=8", "--set", "workload.image_size=16"]
SMALL += ["--set", "dataloader.persistent_epochs=0", "--workers", "0", "--batches", "2"]


def test_cli_json_and_output(runner: CliRunner, tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "dl.json"
    res = runner.invoke(
        app, ["dataloader", "--data-dir", str(tree), "--no-cold", "--json", "-o", str(out), *SMALL]
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "dataloader" and doc["status"] == "complete"
    assert doc["data"]["cold_cache"] is False
    assert json.loads(out.read_text())["kind"] == "dataloader"
    assert "recommendation" in res.stderr
    again = runner.invoke(app, ["dataloader", "--data-dir", str(tree), "-o", str(out), *SMALL])
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_cli_bad_input_is_one_line_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    res = runner.invoke(app, ["dataloader", "--data-dir", str(tmp_path / "nope"), *SMALL])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"Error: dataloader.data_dir: {tmp_path / 'nope'}: no such directory"
    ]
    assert "Traceback" not in res.stderr
    res = runner.invoke(app, ["dataloader", "--workers", "a,b"])
    assert res.exit_code == 2 and res.stderr.startswith("Error: --workers")
    res = runner.invoke(app, ["dataloader", "--data-dir", str(tmp_path), *SMALL])
    assert res.exit_code == 2 and "no class sub-folders" in res.stderr


def test_cli_throughput_result_file(runner: CliRunner, tree: Path, tmp_path: Path) -> None:
    tp = tmp_path / "tp.json"
    write_result(throughput_result(0.05, 0.1), tp)
    res = runner.invoke(
        app,
        [
            "dataloader",
            "--data-dir",
            str(tree),
            "--no-cold",
            "--json",
            "--throughput-result",
            str(tp),
            *SMALL,
        ],
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["data"]["input_bound"]["level"] == "high"
    assert doc["verdict"]["checks"][0]["status"] == "warn"
    wrong = tmp_path / "wrong.json"
    write_result(Result(kind="latency"), wrong)
    res = runner.invoke(app, ["dataloader", "--throughput-result", str(wrong), *SMALL])
    assert res.exit_code == 2 and "expected throughput" in res.stderr
    res = runner.invoke(app, ["dataloader", "--throughput-result", str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_cli_opencv_without_opencv(runner: CliRunner, tree: Path) -> None:
    if __import__("importlib").util.find_spec("cv2") is not None:
        pytest.skip("OpenCV is installed")
    res = runner.invoke(
        app, ["dataloader", "--data-dir", str(tree), "--set", "dataloader.decoder=opencv", *SMALL]
    )
    assert res.exit_code == 2 and "needs OpenCV" in res.stderr


def test_cli_help_has_an_example(runner: CliRunner) -> None:
    res = runner.invoke(app, ["dataloader", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "Example: mlb dataloader" in res.stdout
    for flag in ("--data-dir", "--workers", "--batches", "--no-cold", "--throughput-result"):
        assert flag in res.stdout


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pin_memory_effect_on_gpu(tree: Path) -> None:
    cfg = config(
        **{
            "workload.device": "cuda",
            "dataloader.pin_memory": [False, True],
            "dataloader.workers": [0, 1],
        }
    )
    result = run_dataloader(cfg, tree)
    assert "dataloader.w0.pin.h2d" in result.measurements
    assert "dataloader.w0.pin.pin_memory" in result.measurements
    effect = result.data["pin_memory_effect"]
    assert effect["applicable"] is True and effect["h2d_on_s"] is not None
    assert os.environ.get("CUDA_VISIBLE_DEVICES", "0") != ""
