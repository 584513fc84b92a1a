"""`mlb subset` on the command line: exit codes, one-line errors, --json, --result, --dry-run."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.results import load_result
from mlbaseline.runners.subset import RESULT_NAME
from mlbaseline.subset.manifest import MANIFEST_NAME, load_manifest
from mlbaseline.workloads.synthetic import write_image_tree

runner = CliRunner()


def mlb(*args: str):
    return runner.invoke(app, ["subset", *args, "--set", "subset.workers=1"])


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "data"
    write_image_tree(root, 160, num_classes=3, size=16, seed=4)
    return root


def test_pass_exit_0_with_result_in_the_folder_and_json(data: Path, tmp_path: Path):
    out = tmp_path / "s"
    res = mlb(str(data), "-o", str(out), "--n", "90", "--json", "--quiet")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "subset" and doc["verdict"]["status"] == "pass"
    saved = load_result(out / RESULT_NAME, kinds=["subset"])
    assert saved.data["manifest_sha256"] == doc["data"]["manifest_sha256"]
    assert saved.artifacts["manifest"] == MANIFEST_NAME
    assert len(load_manifest(out).entries) == 90


def test_kl_fail_exits_1(data: Path, tmp_path: Path):
    res = mlb(
        str(data),
        "-o",
        str(tmp_path / "s"),
        "--n",
        "20",
        "--set",
        "subset.kl_threshold=0.000000001",
    )
    assert res.exit_code == 1, res.stderr
    assert "fail" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}", "-o", "{tmp}/o"], "no such dataset folder"),
        (["{data}", "-o", "{tmp}/o", "--n", "100000"], "larger than the dataset"),
        (["{data}", "-o", "{data}/class_00/o"], "inside the source tree"),
        (["{empty}", "-o", "{tmp}/o"], "no images found"),
        (["{data}"], "no output folder"),
        (["-o", "{tmp}/o"], "no dataset given"),
        (["{data}", "--dry-run", "--result", "{tmp}/r.json"], "--dry-run writes nothing"),
        (["{data}", "-o", "{tmp}/o", "--set", "subset.strategy=random"], "is not one of"),
    ],
)
def test_bad_input_exits_2_with_one_line(data: Path, tmp_path: Path, args, message):
    (tmp_path / "empty" / "k").mkdir(parents=True)
    subs = {
        "missing": str(tmp_path / "missing"),
        "tmp": str(tmp_path),
        "data": str(data),
        "empty": str(tmp_path / "empty"),
    }
    res = mlb(*[a.format(**subs) for a in args])
    assert res.exit_code == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]
    assert not (tmp_path / "o").exists()


def test_existing_output_needs_force(data: Path, tmp_path: Path):
    out = tmp_path / "s"
    assert mlb(str(data), "-o", str(out), "--n", "30", "-q").exit_code in (0, 1)
    res = mlb(str(data), "-o", str(out), "--n", "30")
    assert res.exit_code == 2 and "--force" in res.stderr
    assert mlb(str(data), "-o", str(out), "--n", "31", "-q", "--force").exit_code in (0, 1)
    assert len(load_manifest(out).entries) == 31


def test_dry_run_prints_the_plan_and_writes_nothing(data: Path, tmp_path: Path):
    before = sorted(os.listdir(tmp_path))
    res = mlb(
        str(data), "-o", str(tmp_path / "s"), "--n", "10", "--dry-run", "--strategy", "balanced"
    )
    assert res.exit_code == 0, res.stderr
    assert "class_00" in res.stderr and "dry run" in res.stderr
    assert sorted(os.listdir(tmp_path)) == before and res.stdout == ""


def test_result_elsewhere_rebases_artifacts(data: Path, tmp_path: Path):
    out, extra = tmp_path / "s", tmp_path / "results" / "subset.json"
    res = mlb(str(data), "-o", str(out), "--n", "30", "-q", "--result", str(extra), "--seed", "5")
    assert res.exit_code in (0, 1), res.stderr
    saved = load_result(extra, kinds=["subset"])
    assert (extra.parent / saved.artifacts["manifest"]).resolve() == (out / MANIFEST_NAME).resolve()
    assert saved.config["golden"]["seed"] == 5 and load_manifest(out).seed == 5


def test_help_has_an_example():
    res = runner.invoke(app, ["subset", "--help"])
    assert res.exit_code == 0 and "Example: mlb subset" in res.stdout


def test_interrupt_exits_130_with_a_marked_result(data: Path, tmp_path: Path, monkeypatch):
    import shutil

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "copyfile", interrupted)
    extra = tmp_path / "r.json"
    res = mlb(str(data), "-o", str(tmp_path / "s"), "--n", "20", "-q", "--result", str(extra))
    assert res.exit_code == 130
    assert load_result(extra).status == "interrupted"
    assert not (tmp_path / "s").exists()
