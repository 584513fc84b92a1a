"""The workload identity is a blocking key (issue 24, item 2): dataset, image size, sequence
shape, classes, batch sizes and data pipeline make two results not comparable (exit 3) unless
each is allowed with --allow KEY; model, loss and optimizer stay informational on a line of their
own; history series and the gate never pool two workloads, old records included; an image
folder's class count and a configured workload.num_classes that differs are an error (exit 2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.comparison.matching import (
    KNOWN_BLOCKING_KEYS,
    comparable_blocking,
    environment_differences,
    split_allowed,
    under_test_differences,
)
from mlbaseline.config import WORKLOAD_IDENTITY_KEYS, resolve, workload_identity
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import ConfigError
from mlbaseline.history import schema as sc
from mlbaseline.history.record import GitInfo, canonical_hash, fingerprint_hash, record_of
from mlbaseline.history.store import Query, Store, _sqlite_engine, open_store
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.results import Metric, Result, write_result
from mlbaseline.workloads.factory import build_dataset
from mlbaseline.workloads.synthetic import write_image_tree

runner = CliRunner()
FAST = ["--set", "compare.n_resamples=200"]
SYNTH_32 = {"workload.image_size": 32, "workload.model": "builtin:tiny_cnn"}
FOLDER_64 = {
    **SYNTH_32,
    "workload.dataset": "imagefolder",
    "workload.data_dir": "data/folder",
    "workload.image_size": 64,
}


def _config(**over: Any) -> dict[str, Any]:
    return resolve(None, "demo", {**SYNTH_32, **over}).to_dict()


def _result(config: dict[str, Any], seed: int = 0, created_at: str | None = None) -> Result:
    """A throughput result as mlb writes it: the fingerprint of `config`, and a step metric
    over six process-level replicates."""
    r = Result(kind="throughput", config=config)
    if created_at:
        r.created_at = created_at
    r.environment = fingerprint(config, NullProbe(), "cpu")
    rng = np.random.default_rng(seed)
    values = list(0.1 * rng.lognormal(0.0, 0.01, 24))
    meta = {"group": "train.bs64", "role": "total"}
    r.add_metric(
        Metric(
            "train.bs64.step", "s", False, values, replicate=[i % 6 for i in range(24)], meta=meta
        )
    )
    return r


def _old_style(result: Result) -> Result:
    """The same result as written before the workload identity was a fingerprint key."""
    for key in WORKLOAD_IDENTITY_KEYS:
        result.environment["blocking"].pop(key)
    return result


def _pair(tmp_path: Path, old: dict[str, Any], new: dict[str, Any]) -> tuple[Path, Path]:
    a = write_result(_result(_config(**old), 1), tmp_path / "old.json")
    b = write_result(_result(_config(**new), 2), tmp_path / "new.json")
    return a, b


def mlb(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- compare


@pytest.mark.parametrize(
    ("new", "named"),
    [
        (
            FOLDER_64,
            [
                "workload.dataset: synthetic → imagefolder",
                "workload.data_dir: None → data/folder",
                "workload.image_size: 32 → 64",
            ],
        ),
        ({"workload.num_classes": 8}, ["workload.num_classes: 10 → 8"]),
        ({"throughput.batch_sizes": [16]}, ["throughput.batch_sizes: [8, 16] → [16]"]),
        ({"workload.task": "text", "workload.max_length": 128}, ["workload.task: vision → text"]),
    ],
)
def test_each_identity_difference_is_exit_3_naming_every_key(tmp_path, new, named):
    old, new_path = _pair(tmp_path, {}, new)
    res = mlb("compare", old, new_path, *FAST)
    assert res.exit_code == 3, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.stderr
    for text in named:
        assert text in lines[0]
    assert "--allow KEY to compare anyway" in lines[0]


def test_allow_turns_each_key_into_an_allowed_line_and_the_compare_proceeds(tmp_path):
    old, new = _pair(tmp_path, {}, FOLDER_64)
    res = mlb("compare", old, new, "--allow", "image_size", *FAST)
    assert res.exit_code == 3  # the dataset still differs: named, the allowed key not
    assert "workload.dataset: synthetic → imagefolder" in res.stderr
    assert "image_size" not in res.stderr
    md, out = tmp_path / "c.md", tmp_path / "c.json"
    allow = ["--allow", "image_size", "--allow", "workload.dataset", "--allow", "data_dir"]
    res = mlb("compare", old, new, *allow, "--fail-on", "never", "--markdown", md, "-o", out, *FAST)
    assert res.exit_code == 0, res.output
    assert "allowed differences (--allow): workload.data_dir: None → data/folder; " in flat(
        res.stderr
    )
    assert "workload.image_size: 32 → 64" in flat(res.stderr)
    doc = json.loads(out.read_text())["data"]
    assert {r["key"] for r in doc["allowed_differences"]} == {
        "workload.dataset",
        "workload.data_dir",
        "workload.image_size",
    }
    assert doc["blocking_differences"] == [] and doc["comparable"]
    assert not any(m["mismatch"] for m in doc["metrics"])  # allowed: verdicts not marked †
    assert "- Allowed differences (--allow): " in md.read_text()
    keys = {r["key"] for r in doc["informational_differences"]}
    assert not keys & {"config.workload.image_size", "config.workload.dataset"}  # listed once


def test_allow_of_a_key_that_is_not_blocking_is_bad_input(tmp_path):
    old, new = _pair(tmp_path, {}, {"workload.image_size": 64})
    res = mlb("compare", old, new, "--allow", "imgsize", *FAST)
    assert res.exit_code == 2
    assert res.stderr.startswith("Error: --allow imgsize: not a blocking key; known: ")


def test_a_model_change_is_informational_on_a_line_of_its_own(tmp_path):
    old, new = _pair(tmp_path, {}, {"workload.model": "builtin:tiny_mlp"})
    md = tmp_path / "c.md"
    res = mlb("compare", old, new, "--fail-on", "never", "--markdown", md, *FAST)
    assert res.exit_code == 0, res.output
    text = flat(res.stderr)
    assert (
        "changed under test (informational): workload.model: builtin:tiny_cnn → builtin:tiny_mlp"
        in text
    )
    assert "informational differences: config.workload.model" not in text
    assert "- Changed under test (informational): workload.model: " in md.read_text()
    assert "allowed differences" not in text


def test_report_compare_takes_allow_too(tmp_path):
    old, new = _pair(tmp_path, {}, {"workload.image_size": 64})
    out = tmp_path / "rep"
    assert mlb("report", "--compare", old, new, "-o", out, *FAST).exit_code == 3
    res = mlb("report", "--compare", old, new, "--allow", "image_size", "-o", out, *FAST)
    assert res.exit_code == 0, res.output


def test_split_allowed_matches_a_key_its_last_part_or_its_nested_rows():
    rows = [
        {"key": "workload.image_size", "old": 32, "new": 64},
        {"key": "node_layout.nnodes", "old": 1, "new": 2},
        {"key": "workload.dataset_kwargs.root", "old": "a", "new": "b"},
    ]
    kept, allowed = split_allowed(rows, ["image_size", "node_layout"])
    assert [r["key"] for r in kept] == ["workload.dataset_kwargs.root"]
    assert [r["key"] for r in allowed] == ["workload.image_size", "node_layout.nnodes"]
    assert split_allowed(rows, ["dataset_kwargs"])[1] == [rows[2]]
    assert split_allowed(rows, [])[0] == rows
    with pytest.raises(ConfigError, match="--allow dataset_kwarg: not a blocking key"):
        split_allowed(rows, ["dataset_kwarg"])
    info = [
        {"key": "config.workload.optimizer_kwargs.lr", "old": 0.1, "new": 0.2},
        {"key": "hostname", "old": "a", "new": "b"},
    ]
    assert under_test_differences(info) == [info[0]]


def test_the_fingerprint_carries_the_identity_and_every_key_is_known():
    config = _config(**{"workload.data_dir": "./data/x/"})
    blocking = fingerprint(config, NullProbe(), "cpu")["blocking"]
    assert blocking["workload.data_dir"] == "data/x"  # the path as written, normalised
    assert {k: blocking[k] for k in WORKLOAD_IDENTITY_KEYS} == workload_identity(config)
    assert set(blocking) <= set(KNOWN_BLOCKING_KEYS)


def test_an_old_result_compares_equal_to_a_new_one_of_the_same_workload():
    old, new = _old_style(_result(_config(), 1)), _result(_config(), 2)
    assert environment_differences(old, new)[0] == []
    assert fingerprint_hash(old) == fingerprint_hash(new)
    # an old result of another workload: its own value from its config, never "(absent)"
    other = _old_style(_result(_config(**{"workload.image_size": 48}), 3))
    rows = environment_differences(other, new)[0]
    assert rows == [{"key": "workload.image_size", "old": 48, "new": 32}]
    assert fingerprint_hash(other) != fingerprint_hash(new)
    # a config written before a field existed: the built-in default, what that run used
    del old.config["throughput"]["num_workers"]
    assert comparable_blocking(old.environment, old.config)["throughput.num_workers"] == 0


# ---------------------------------------------------------------- history


def _add(tmp_path: Path, name: str, result: Result) -> Path:
    path = write_result(result, tmp_path / f"{name}.json")
    res = mlb("history", "add", path)
    assert res.exit_code == 0, res.output
    return path


def test_the_gate_never_pools_two_workloads(tmp_path, monkeypatch):
    monkeypatch.setenv("MLB_HISTORY", str(tmp_path / "h.sqlite"))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    small, large = _config(), _config(**{"workload.image_size": 64})
    stamp = "2026-01-01T00:{:02d}:00.000000Z".format
    for i in range(3):  # interleaved, as two jobs of one CI would record them
        _add(tmp_path, f"s{i}", _result(small, i, stamp(2 * i)))  # ids 1, 3, 5
        _add(tmp_path, f"l{i}", _result(large, 10 + i, stamp(2 * i + 1)))  # ids 2, 4, 6
    new = write_result(_result(large, 20, stamp(30)), tmp_path / "new.json")
    res = mlb("history", "gate", new, "--fail-on", "never", "--json", *FAST)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["data"]
    assert doc["history"]["baselines"] == [2, 4, 6]
    assert doc["allowed_differences"] == [] and doc["blocking_differences"] == []


def test_the_gate_with_allow_judges_against_one_other_workload(tmp_path, monkeypatch):
    monkeypatch.setenv("MLB_HISTORY", str(tmp_path / "h.sqlite"))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    stamp = "2026-01-01T00:{:02d}:00.000000Z".format
    for i in range(3):
        _add(tmp_path, f"s{i}", _result(_config(), i, stamp(i)))
    for i in range(2):  # an older third workload, never pooled with the first
        cfg = _config(**{"workload.image_size": 48})
        _add(tmp_path, f"m{i}", _result(cfg, 5 + i, stamp(i)))
    new = write_result(
        _result(_config(**{"workload.image_size": 64}), 20, stamp(30)), tmp_path / "new.json"
    )
    res = mlb("history", "gate", new, *FAST)
    assert res.exit_code == 3 and "nothing comparable in history" in res.stderr
    res = mlb("history", "gate", new, "--allow", "image_size", "--fail-on", "never", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["data"]
    assert doc["history"]["baselines"] == [1, 2, 3]  # the newest series: 32 px only
    assert doc["allowed_differences"] == [{"key": "workload.image_size", "old": 32, "new": 64}]
    assert mlb("history", "gate", new, "--allow", "imgsize").exit_code == 2


def test_migration_3_recomputes_old_fingerprints_into_their_workloads_series(tmp_path):
    path = tmp_path / "h.sqlite"
    old_store = Store(_sqlite_engine(path), str(path))
    assert old_store.migrate(upto=2) == 2
    small = _old_style(_result(_config(), 1))
    large = _old_style(_result(_config(**{"workload.image_size": 64}), 2))
    ids = []
    for name, result in (("s", small), ("l", large)):
        body = write_result(result, tmp_path / f"{name}.json").read_bytes()
        rec = record_of(result, body, tmp_path / f"{name}.json", GitInfo())
        # as mlb before this change recorded it: the hash of the blocking keys as they were
        legacy = canonical_hash(result.environment["blocking"])
        ids.append(old_store.add(replace(rec, fingerprint=legacy))[0])
    with old_store.engine.connect() as conn:
        before = conn.execute(sa.select(sc.results.c.fingerprint)).scalars().all()
    assert before[0] == before[1]  # two workloads, one series: what the migration fixes
    old_store.close()
    store = open_store(str(path), create=False)  # opening upgrades it
    assert store.version() == sc.LATEST == 4
    now = {e.id: e.fingerprint for e in store.entries(Query())}
    assert now[ids[0]] != now[ids[1]]
    # and each joins the series new records of its workload get
    assert now[ids[0]] == fingerprint_hash(_result(_config(), 3))
    assert now[ids[1]] == fingerprint_hash(_result(_config(**{"workload.image_size": 64}), 4))
    store.close()


# ---------------------------------------------------------------- num_classes of an image folder


def _folder(tmp_path: Path, classes: int = 3) -> Path:
    root = tmp_path / "folder"
    write_image_tree(root, 2 * classes, num_classes=classes, size=8)
    return root


def test_the_resolved_config_takes_the_folders_class_count(tmp_path):
    root = _folder(tmp_path)
    over = {"workload.dataset": "imagefolder", "workload.data_dir": str(root)}
    assert resolve(None, "vision", over).workload.num_classes == 3  # not the profile's 1000
    assert resolve(None, "demo", {**over, "workload.data_dir": None}).workload.num_classes == 10
    explicit = resolve(None, "demo", {**over, "workload.num_classes": 10})
    assert explicit.workload.num_classes == 10
    with pytest.raises(ConfigError, match=r"workload.num_classes: 10, but the image folder .* 3 "):
        build_dataset(explicit)
    assert len(build_dataset(resolve(None, "demo", over)).dataset.classes) == 3


def test_a_configured_num_classes_the_folder_contradicts_is_exit_2(tmp_path):
    root = _folder(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(
        "workload:\n"
        "  dataset: imagefolder\n"
        f"  data_dir: {root}\n"
        "  num_classes: 10\n"
        "  model: builtin:tiny_cnn\n"
        "  image_size: 8\n"
        "  device: cpu\n"
        "throughput:\n"
        "  mode: train\n"
        "  batch_sizes: [2]\n"
        "  repeats: 1\n"
        "  telemetry: false\n"
    )
    res = mlb("throughput", "-c", config, "-o", tmp_path / "t.json", "--no-history")
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(
        f"Error: workload.num_classes: 10, but the image folder {root} has 3 classes ("
    )
