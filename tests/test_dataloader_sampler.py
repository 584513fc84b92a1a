"""`mlb dataloader` reads the way training reads (issue 17 item 7): a seeded shuffled sampler
over the whole dataset, the files and classes it touched recorded, a warning when few; on a tree
whose classes differ in file size the measured bytes per sample match the tree's mean."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from mlbaseline import config as cfgmod
from mlbaseline.runners.dataloader import run_dataloader
from mlbaseline.workloads.timed_folder import PassSampler

# (class name, files, side in px): noise PNGs, so the file size grows with the side; the
# largest class sorts last, where a sequential pass shorter than the tree reads least of it
CLASSES = (("a_small", 60, 12), ("b_medium", 60, 32), ("c_large", 60, 48))


def write_tree(root: Path, classes: Any = CLASSES) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for name, n, side in classes:
        (root / name).mkdir(parents=True)
        for i in range(n):
            pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            path = root / name / f"{i:03d}.png"
            Image.fromarray(pixels).save(path)
            paths.append(path)
    return paths


def config(root: Path, **overrides: Any) -> cfgmod.Config:
    base = {
        "golden.batch_size": 16,
        "workload.image_size": 16,
        "dataloader.data_dir": str(root),
        "dataloader.workers": [0],
        "dataloader.pin_memory": [False],
        "dataloader.batches": 8,  # + 1 warm-up batch: 144 of the 180 files
        "dataloader.cold_cache": False,
        "dataloader.persistent_epochs": 0,
    }
    base.update(overrides)
    return cfgmod.resolve(None, "demo", base)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    root = tmp_path_factory.mktemp("sizes")
    paths = write_tree(root)
    sizes = [p.stat().st_size for p in paths]
    assert max(sizes) > 10 * min(sizes)  # the classes really differ in file size
    return root, sum(sizes) / len(sizes)


def test_bytes_per_sample_match_the_tree_mean_within_10_percent(tree):
    root, mean = tree
    result = run_dataloader(config(root))
    (row,) = result.data["settings"]
    assert row["status"] == "ok"
    assert row["bytes_per_sample"] == pytest.approx(mean, rel=0.10)
    cov = result.data["coverage"]
    assert cov["samples_touched"] == 144 == row["distinct_samples"]
    assert cov["samples_total"] == 180 and cov["classes_touched"] == cov["classes_total"] == 3
    assert cov["sampler"] == "shuffled" and result.data["loader"]["shuffle"] is True
    assert "permutation" in result.data["loader"]["sampler"]
    assert not [w for w in result.warnings if w["code"] == "coverage"]


def test_the_sequential_sampler_misreads_it_and_says_so(tree):
    """The old behaviour, still selectable: the first 144 files, off the mean."""
    root, mean = tree
    result = run_dataloader(config(root, **{"dataloader.shuffle": False}))
    (row,) = result.data["settings"]
    assert abs(row["bytes_per_sample"] / mean - 1) > 0.10
    assert result.data["coverage"]["samples_touched"] == 144
    assert result.data["coverage"]["sampler"] == "sequential"


def test_a_small_share_of_the_dataset_is_a_warning(tmp_path: Path):
    classes = [(f"c{i}", 30, 8) for i in range(10)]
    write_tree(tmp_path, classes)
    over = {"dataloader.batches": 2, "golden.batch_size": 4}  # 3 batches: 12 samples
    result = run_dataloader(config(tmp_path, **over, **{"dataloader.shuffle": False}))
    (warning,) = [w for w in result.warnings if w["code"] == "coverage"]
    assert "12 of 300 samples (4.0%) from 1 of 10 classes" in warning["message"]
    assert "dataloader.shuffle: true" in warning["message"]
    shuffled = run_dataloader(config(tmp_path, **over))
    cov = shuffled.data["coverage"]
    assert cov["samples_touched"] == 12 and cov["classes_touched"] > 1
    (warning,) = [w for w in shuffled.warnings if w["code"] == "coverage"]
    assert "raise dataloader.batches" in warning["message"]


def test_the_pass_sampler_is_a_seeded_permutation_the_same_in_every_pass():
    s = PassSampler(10, 25, seed=7)
    first = list(s)
    assert first == list(s)  # cold and warm pass read the same files
    keys = [k for k, _ in first]
    assert sorted(keys[:10]) == list(range(10)) and sorted(keys[10:20]) == list(range(10))
    assert keys[:10] != list(range(10)) and keys[:10] != keys[10:20]  # a fresh permutation
    assert keys != [k for k, _ in PassSampler(10, 25, seed=8)]
    s.cold = True
    assert all(cold for _, cold in s)
    assert [k for k, _ in PassSampler(4, 6, shuffle=False)] == [0, 1, 2, 3, 0, 1]
