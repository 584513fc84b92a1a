"""`workload.collate` (issue 26, item 5): a user dataset's own `collate_fn`, by import path,
on the config path. A dataset torch's default collate cannot batch (variable-length token
sequences) runs a tiny `mlb throughput` with the user's padding collate; a bad path is one
`Error:` line, exit 2; a built-in dataset refuses it; and the collate is part of what the
workload is (a different collate, a different series: blocking in compare and the history)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
from torch.utils.data import default_collate
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.comparison.matching import comparable_blocking, environment_differences
from mlbaseline.config import resolve, workload_identity
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import ConfigError
from mlbaseline.history.record import config_hash, fingerprint_hash
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.results import load_result
from mlbaseline.workloads.factory import build_dataset

runner = CliRunner()

# the user's module, beside the config file (its folder is searched for imports)
MODULE = '''
import torch

CALLS = []


class Ragged:
    """Token sequences of 3 to 9 ids: torch's default collate cannot stack them."""

    def __init__(self, n=64):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(1, 50, (3 + i % 7,), generator=g), i % 2


def pad(samples):
    CALLS.append(len(samples))
    width = max(len(x) for x, _ in samples)
    out = torch.zeros(len(samples), width, dtype=torch.long)
    for row, (x, _) in enumerate(samples):
        out[row, : len(x)] = x
    return out, torch.tensor([y for _, y in samples])


def pad_other(samples):
    return pad(samples)
'''
TINY = {
    "throughput.mode": "train",
    "throughput.repeats": 1,
    "throughput.batch_sizes": [8],
    "throughput.min_time_s": 0,
    "throughput.min_steps": 4,
    "throughput.max_steps": 4,
    "throughput.window": 2,
    "throughput.warmup_min": 1,
    "throughput.warmup_max": 2,
    "throughput.num_workers": 0,
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the user's module (a unique name per test: no stale import) and a
    config naming it; the cwd is elsewhere."""
    name = f"user_collate_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    (tmp_path / "mlb.yaml").write_text(
        "workload:\n"
        f"  dataset: {name}:Ragged\n"
        f"  collate: {name}:pad\n"
        "  model: builtin:tiny_text\n"
        "  model_kwargs: {vocab_size: 50, dim: 8}\n"
        "  num_classes: 2\n"
        "  device: cpu\n"
    )
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return tmp_path


def _module(project: Path) -> str:
    return next(p.stem for p in project.glob("user_collate_*.py"))


def _sets(over: dict[str, object]) -> list[str]:
    return [a for k, v in over.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def test_a_user_collate_batches_a_dataset_the_default_cannot(project: Path):
    cfg = resolve(project / "mlb.yaml", "demo", TINY)
    spec = build_dataset(cfg)
    samples = [spec.dataset[i] for i in range(8)]
    with pytest.raises(RuntimeError):
        default_collate(samples)  # ragged: what the config path could not express before
    x, y = spec.collate_fn(samples)
    assert x.shape == (8, 9) and y.tolist() == [i % 2 for i in range(8)]
    assert spec.collate_fn.__module__ == _module(project)

    out = project / "tp.json"
    args = ["throughput", "-c", str(project / "mlb.yaml"), "--quiet", "-o", str(out)]
    res = runner.invoke(app, [*args, *_sets(TINY)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["data"]["batch_sizes"]["8"]["status"] == "ok"
    assert doc["config"]["workload"]["collate"] == f"{_module(project)}:pad"
    blocking = doc["environment"]["blocking"]
    assert blocking["workload.collate"] == f"{_module(project)}:pad"
    calls = sys.modules[_module(project)].CALLS
    assert len(calls) >= 4 and set(calls) == {8}  # every batch went through the user's collate

    # the same run as if its collate had been another: compare lists the collate as a
    # blocking difference, and the history puts the two in different series
    old = load_result(out, ["throughput"])
    new = copy.deepcopy(old)
    new.config["workload"]["collate"] = f"{_module(project)}:pad_other"
    new.environment["blocking"]["workload.collate"] = f"{_module(project)}:pad_other"
    blocking, _info = environment_differences(old, new)
    assert [r["key"] for r in blocking] == ["workload.collate"]
    assert fingerprint_hash(old) != fingerprint_hash(new)
    assert config_hash(old) != config_hash(new)


@pytest.mark.parametrize(
    ("collate", "needle"),
    [
        ("{mod}:missing", "Error: workload.collate: '{mod}' has no attribute 'missing'"),
        ("not a path", "Error: workload.collate: 'not a path' is not an import path"),
        ("user_collate_nowhere:pad", "Error: workload.collate: cannot import module"),
    ],
)
def test_a_bad_collate_path_is_one_error_line_exit_2(project: Path, collate: str, needle: str):
    mod = _module(project)
    over = {**TINY, "workload.collate": collate.format(mod=mod)}
    args = ["throughput", "-c", str(project / "mlb.yaml"), "--quiet", "-o", "x.json"]
    res = runner.invoke(app, [*args, *_sets(over)])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(needle.format(mod=mod))
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert not Path("x.json").exists()


def test_a_built_in_dataset_refuses_a_collate():
    cfg = resolve(None, "demo", {"workload.collate": "torch.utils.data:default_collate"})
    with pytest.raises(ConfigError, match=r"workload\.collate: the built-in dataset 'synthetic'"):
        build_dataset(cfg)


def test_the_collate_is_part_of_the_workload_identity(project: Path):
    mod = _module(project)
    a = resolve(project / "mlb.yaml", "demo", TINY)
    b = resolve(project / "mlb.yaml", "demo", {**TINY, "workload.collate": f"{mod}:pad_other"})
    assert workload_identity(a.to_dict())["workload.collate"] == f"{mod}:pad"
    assert workload_identity(a.to_dict()) != workload_identity(b.to_dict())
    fa, fb = (fingerprint(c.to_dict(), NullProbe()) for c in (a, b))
    assert fa["blocking"]["workload.collate"] != fb["blocking"]["workload.collate"]
    # a result written before the field existed compares as "no collate" (torch's default)
    old_env = copy.deepcopy(fa)
    del old_env["blocking"]["workload.collate"]
    old_cfg = a.to_dict()
    del old_cfg["workload"]["collate"]
    assert comparable_blocking(old_env, old_cfg)["workload.collate"] is None
