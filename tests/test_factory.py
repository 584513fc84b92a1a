"""`workloads.factory`: each user factory is imported and resolved once, the import caches are
invalidated only for a new search path, and a transform whose one parameter has a default is
the transform itself (a factory with defaulted options still a factory)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

from mlbaseline.config import resolve
from mlbaseline.workloads import imports
from mlbaseline.workloads.factory import build_dataset, build_transform

HERE = __name__


def cfg(**over: Any):
    return resolve(None, "demo", over)


def defaulted_transform(img: Any = None) -> Any:
    return ("t", img)


def defaulted_factory(offset: int = 1) -> Any:
    return lambda x: x + offset


def sampled_factory(image_size: int = 8) -> Any:
    return lambda x: (x, image_size)


class Dataset:
    def __init__(self, n: int = 4, transform: Any = None) -> None:
        self.n, self.transform = n, transform

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return self.transform(i), 0


@pytest.mark.parametrize(
    "target,given,expected",
    [
        ("defaulted_transform", 3, ("t", 3)),  # one parameter with a default: the transform
        ("defaulted_factory", 3, 4),  # defaulted options, returns a callable: a factory
        ("sampled_factory", 3, (3, 32)),  # names an offered keyword: a factory, given it
    ],
)
def test_a_defaulted_parameter_does_not_make_a_transform_a_factory(target, given, expected):
    c = cfg(**{"workload.transform": f"{HERE}:{target}", "workload.image_size": 32})
    assert build_transform(c.workload)(given) == expected


def test_a_dataset_and_its_transform_are_each_resolved_once(monkeypatch):
    seen: list[str] = []
    real = imports.resolve_callable

    def counting(path: str, *a: Any, **k: Any) -> Any:
        seen.append(path)
        return real(path, *a, **k)

    monkeypatch.setattr(imports, "resolve_callable", counting)
    monkeypatch.setattr("mlbaseline.workloads.factory.resolve_callable", counting)
    c = cfg(
        **{
            "workload.dataset": f"{HERE}:Dataset",
            "workload.transform": f"{HERE}:defaulted_factory",
        }
    )
    ds = build_dataset(c).dataset
    assert ds[2] == (3, 0)
    assert sorted(seen) == [f"{HERE}:Dataset", f"{HERE}:defaulted_factory"]


def test_import_caches_are_invalidated_once_per_new_search_path(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(importlib, "invalidate_caches", lambda: calls.append(1))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the test's additions go with it
    (tmp_path / "mlb_factory_probe_mod.py").write_text("def make():\n    return 1\n")
    for _ in range(3):
        assert (
            imports.call_factory(
                "mlb_factory_probe_mod:make", {}, "t", import_paths=[str(tmp_path)]
            )
            == 1
        )
    assert len(calls) == 1
    sys.modules.pop("mlb_factory_probe_mod", None)
