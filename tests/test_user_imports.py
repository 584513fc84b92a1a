"""User code by import path, without surprises (issue 17 item 6): the transform reaches any
dataset factory that takes one (else an error), a transform may be a factory or the function
itself, factories are given num_classes / image_size when their signature names them, the
config file's folder and the cwd are searched, and no config field is silently ignored."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.errors import ConfigError, FactoryError
from mlbaseline.workloads.factory import build_dataset, build_model, build_transform

runner = CliRunner()
HERE = __name__
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def cfg(**over: Any):
    return resolve(None, "demo", over)


# ---------------------------------------------------------------- factories used by the tests


class PlusOne:
    def __call__(self, x: Any) -> Any:
        return x + 1


def transform_factory(offset: int = 1) -> Any:
    return lambda x: x + offset


def sized_transform_factory(image_size: int) -> Any:
    return lambda x: (x, image_size)


def plain_transform(x: Any) -> Any:
    return x * 10


class TakesTransform:
    def __init__(self, n: int = 8, transform: Any = None) -> None:
        self.n, self.transform = n, transform

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = torch.full((3, 4, 4), float(i))
        return (self.transform(x) if self.transform else x), i % 2


def no_transform_dataset(n: int = 8) -> TakesTransform:
    return TakesTransform(n)


class Net(nn.Module):
    def __init__(self, num_classes: int, image_size: int, width: int = 4) -> None:
        super().__init__()
        self.num_classes, self.image_size, self.width = num_classes, image_size, width
        self.fc = nn.Linear(1, num_classes)


def net_without_shape(width: int = 4) -> nn.Module:
    return nn.Linear(width, 2)


def net_with_var_kwargs(**kwargs: Any) -> nn.Module:
    assert "num_classes" not in kwargs  # a catch-all is not offered the shape keywords
    return nn.Linear(2, 2)


# ---------------------------------------------------------------- the transform


def test_the_transform_reaches_a_dataset_factory_that_takes_one():
    c = cfg(
        **{
            "workload.dataset": f"{HERE}:TakesTransform",
            "workload.transform": f"{HERE}:transform_factory",
            "workload.transform_kwargs": {"offset": 5},
        }
    )
    ds = build_dataset(c).dataset
    x, _ = ds[2]
    assert float(x[0, 0, 0]) == 7.0  # 2 + offset 5


def test_a_dataset_factory_without_a_transform_argument_is_error_exit_2(tmp_path: Path):
    over = {
        "workload.dataset": f"{HERE}:no_transform_dataset",
        "workload.transform": f"{HERE}:transform_factory",
    }
    with pytest.raises(ConfigError, match="has no `transform` argument"):
        build_dataset(cfg(**over))
    # one process: the factories live in this test module, on pytest's sys.path only
    args = ["throughput", "--quiet", "--repeats", "1", "-o", str(tmp_path / "r.json")]
    for key, value in over.items():
        args += ["--set", f"{key}={value}"]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert res.stderr.startswith("Error: workload.transform: the dataset factory")
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"workload.transform": f"{HERE}:transform_factory"}, "synthetic dataset"),
        ({"workload.transform_kwargs": {"a": 1}}, "workload.transform is not"),
        ({"workload.dataset_kwargs": {"n": 3}}, "takes none"),
        (
            {
                "workload.dataset": f"{HERE}:TakesTransform",
                "workload.dataset_kwargs": {"transform": None},
                "workload.transform": f"{HERE}:transform_factory",
            },
            "sets 'transform' too",
        ),
    ],
)
def test_fields_the_dataset_would_not_read_are_errors(over: dict[str, Any], needle: str):
    with pytest.raises(ConfigError, match=needle):
        build_dataset(cfg(**over))


@pytest.mark.parametrize(
    ("target", "kwargs", "given", "expected"),
    [
        ("transform_factory", {"offset": 2}, 1, 3),  # a factory with its kwargs
        ("PlusOne", {}, 1, 2),  # a class: instantiated, the instance is the transform
        ("plain_transform", {}, 2, 20),  # a one-argument function: the transform itself
        ("sized_transform_factory", {}, 0, (0, 40)),  # offered image_size: a factory
    ],
)
def test_a_transform_is_a_factory_or_the_function_itself(target, kwargs, given, expected):
    over = {"workload.transform": f"{HERE}:{target}", "workload.transform_kwargs": kwargs}
    c = cfg(**over, **{"workload.image_size": 40})
    assert build_transform(c.workload)(given) == expected


def test_a_transform_factory_that_returns_no_callable_is_an_error():
    c = cfg(**{"workload.transform": "builtins:dict"})
    with pytest.raises(FactoryError, match="not a callable transform"):
        build_transform(c.workload)


# ---------------------------------------------------------------- model factory keywords


def test_a_model_factory_gets_num_classes_and_image_size_when_it_names_them():
    c = cfg(
        **{
            "workload.model": f"{HERE}:Net",
            "workload.num_classes": 7,
            "workload.image_size": 48,
            "workload.model_kwargs": {"width": 9},
        }
    )
    model = build_model(c.workload)
    assert (model.num_classes, model.image_size, model.width) == (7, 48, 9)
    # model_kwargs win over the offered keywords
    c = cfg(**{"workload.model": f"{HERE}:Net", "workload.model_kwargs": {"num_classes": 3}})
    assert build_model(c.workload).num_classes == 3


@pytest.mark.parametrize("target", ["net_without_shape", "net_with_var_kwargs"])
def test_a_factory_that_does_not_name_them_is_not_given_them(target: str):
    c = cfg(**{"workload.model": f"{HERE}:{target}", "workload.num_classes": 7})
    assert isinstance(build_model(c.workload), nn.Linear)


# ---------------------------------------------------------------- where modules are found


MODULE = "import torch\n\ndef build(num_classes=10):\n    return torch.nn.Linear(3, num_classes)\n"


@pytest.fixture
def clean_path(monkeypatch: pytest.MonkeyPatch):
    """sys.path and sys.modules restored after the test (the search folders are appended)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("user_mod_"):
            del sys.modules[name]


def test_a_module_beside_the_config_file_is_found_from_any_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_path: None
):
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    proj.mkdir()
    elsewhere.mkdir()
    (proj / "user_mod_cfgdir.py").write_text(MODULE)
    config = proj / "mlb.yaml"
    config.write_text("workload:\n  model: user_mod_cfgdir:build\n  num_classes: 5\n")
    monkeypatch.chdir(elsewhere)
    c = resolve(config)
    assert str(proj) in c.workload.import_paths
    assert build_model(c.workload).out_features == 5


def test_import_paths_are_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_path: None
):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "user_mod_rel.py").write_text(MODULE)
    config = tmp_path / "mlb.yaml"
    config.write_text("workload:\n  model: user_mod_rel:build\n  import_paths: [src]\n")
    monkeypatch.chdir(tmp_path.parent)
    c = resolve(config)
    assert c.workload.import_paths == [str(tmp_path / "src"), str(tmp_path)]
    assert isinstance(build_model(c.workload), nn.Linear)


def test_a_module_in_the_cwd_is_found_without_a_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_path: None
):
    (tmp_path / "user_mod_cwd.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    assert isinstance(
        build_model(cfg(**{"workload.model": "user_mod_cwd:build"}).workload), nn.Linear
    )


def test_a_missing_module_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_path: None
):
    config = tmp_path / "mlb.yaml"
    config.write_text("workload:\n  model: user_mod_nowhere:build\n")
    monkeypatch.chdir(tmp_path.parent)
    with pytest.raises(FactoryError) as info:
        build_model(resolve(config).workload)
    msg = info.value.message
    assert msg.startswith("workload.model: cannot import module 'user_mod_nowhere': not found")
    assert f"looked in {tmp_path}, {tmp_path.parent} and the installed packages" in msg


def test_a_module_whose_own_import_fails_names_that_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_path: None
):
    (tmp_path / "user_mod_dep.py").write_text("import user_mod_not_installed\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FactoryError, match="it imports 'user_mod_not_installed'"):
        build_model(cfg(**{"workload.model": "user_mod_dep:build"}).workload)


def test_the_search_folders_never_shadow_installed_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_path: None
):
    (tmp_path / "user_mod_x.py").write_text(MODULE)
    (tmp_path / "yaml.py").write_text("raise SystemExit('shadowed')\n")
    monkeypatch.chdir(tmp_path)
    build_model(cfg(**{"workload.model": "user_mod_x:build"}).workload)
    assert sys.path.index(str(tmp_path)) > sys.path.index(str(Path(torch.__file__).parents[1]))


# ------------------------------------------- the example of docs/REFERENCE.md (own model)


def test_the_example_workload_runs_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_path: None
):
    """examples/my_model.yaml: model, loss, optimizer, dataset and transform from a local
    file, measured by `mlb throughput -c` from a folder that is not the config's."""
    monkeypatch.chdir(tmp_path)
    tiny = [
        "throughput.mode=train",
        "throughput.repeats=1",
        "throughput.min_time_s=0",
        "throughput.min_steps=4",
        "throughput.max_steps=4",
        "throughput.window=2",
        "throughput.warmup_min=1",
        "throughput.warmup_max=2",
        "workload.dataset_kwargs={n: 64}",
    ]
    sets = [a for s in tiny for a in ("--set", s)]
    out = tmp_path / "tp.json"
    res = runner.invoke(
        app, ["throughput", "-c", str(EXAMPLES / "my_model.yaml"), "--quiet", *sets, "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["data"]["batch_sizes"]["16"]["status"] == "ok"
    assert doc["config"]["workload"]["model"] == "my_model:SmallNet"
    assert str(EXAMPLES) in doc["config"]["workload"]["import_paths"]
