"""Indexing an ImageFolder tree, and reading manifests safely."""

import json
import os
from pathlib import Path

import pytest

from mlbaseline.errors import DatasetError, ResultFileError
from mlbaseline.progress import RecordingProgress
from mlbaseline.subset.index import index_tree
from mlbaseline.subset.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestEntry,
    load_manifest,
    write_manifest,
)


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    for rel in [
        "dogs/b.png",
        "dogs/a.JPG",
        "dogs/sub/d.jpeg",
        "dogs/c.txt",
        "dogs/.hidden.png",
        "dogs/.cache/e.png",
        "cats/x.WebP",
        "cats/y.bmp",
        "cats/z.gif",
        "empty/notes.md",
        ".git/objects/f.png",
        "README",
    ]:
        touch(root / rel)
    (root / "nothing").mkdir()
    return root


def test_index_rules(tree: Path):
    progress = RecordingProgress()
    index = index_tree(tree, progress)
    assert index.classes == ["cats", "dogs"]
    assert index.files == [["x.WebP", "y.bmp"], ["a.JPG", "b.png", "sub/d.jpeg"]]
    assert index.empty_classes == ["empty", "nothing"]
    assert index.ignored_files == 4  # c.txt, z.gif, notes.md, README
    assert index.ignored_by_suffix == {".txt": 1, ".gif": 1, ".md": 1, "(none)": 1}
    assert index.hidden_skipped == 3  # .hidden.png, .cache/, .git/
    assert index.total == 5 and index.counts.tolist() == [2, 3]
    assert index.relpath(1, 2) == "dogs/sub/d.jpeg"
    assert progress.tasks == ["indexing classes"]


def test_index_makes_no_stat_calls_per_file(tree: Path, monkeypatch):
    # scandir's DirEntry answers is_dir/is_file from the listing: only the root is stat'ed
    calls = []
    real_stat, real_lstat = os.stat, os.lstat

    def counting(real):
        def stat(*args, **kwargs):
            calls.append(args[0])
            return real(*args, **kwargs)

        return stat

    with monkeypatch.context() as m:
        m.setattr(os, "stat", counting(real_stat))
        m.setattr(os, "lstat", counting(real_lstat))
        index = index_tree(tree)
    assert index.total == 5
    assert len(calls) <= 2, calls  # root exists + is_dir


def test_index_is_sorted_and_reproducible(tmp_path: Path):
    for name in ["b10.png", "b2.png", "B1.png", "a.png"]:
        touch(tmp_path / "k" / name)
    assert index_tree(tmp_path).files == [["B1.png", "a.png", "b10.png", "b2.png"]]


def test_missing_and_non_folder(tmp_path: Path):
    with pytest.raises(DatasetError, match="no such dataset folder"):
        index_tree(tmp_path / "nope")
    touch(tmp_path / "file.png")
    with pytest.raises(DatasetError, match="not a folder"):
        index_tree(tmp_path / "file.png")


def test_symlink_loop_does_not_hang(tmp_path: Path):
    touch(tmp_path / "k" / "a.png")
    os.symlink(tmp_path / "k", tmp_path / "k" / "loop")
    assert index_tree(tmp_path).files == [["a.png"]]


# ---------------------------------------------------------------- manifest


def _manifest() -> Manifest:
    entry = ManifestEntry("cats/x.png", "cats/sample_0000.png", "cats", 0, 12, "ab" * 32)
    return Manifest(
        "proportional", 42, 1, ["cats"], {"cats": {"available": 3, "selected": 1}}, [entry]
    )


def test_manifest_round_trip_and_deterministic_hash(tmp_path: Path):
    m = _manifest()
    sha = write_manifest(m, tmp_path / MANIFEST_NAME)
    assert sha == m.sha256() == _manifest().sha256()
    loaded = load_manifest(tmp_path)  # a folder means its manifest
    assert loaded.entries == m.entries and loaded.seed == 42


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("path", "../../etc/passwd", "'..' is not allowed"),
        ("path", "/etc/passwd", "absolute paths"),
        ("output", "cats/../../x.png", "'..' is not allowed"),
        ("output", "C:/x.png", "absolute paths"),
        ("path", "cats\\x.png", "backslashes"),
        ("class", "..", "single folder name"),
    ],
)
def test_manifest_refuses_unsafe_paths(tmp_path: Path, field, value, error):
    doc = json.loads(_manifest().to_text())
    doc["entries"][0][field] = value
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match=error):
        load_manifest(path)


def test_manifest_malformed(tmp_path: Path):
    path = tmp_path / "m.json"
    path.write_text("{")
    with pytest.raises(ResultFileError, match="not valid JSON"):
        load_manifest(path)
    path.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(ResultFileError, match="not an mlb subset manifest"):
        load_manifest(path)
    doc = json.loads(_manifest().to_text())
    del doc["entries"][0]["sha256"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultFileError, match=r"m\.json: entries\[0\]\.sha256: expected a value"):
        load_manifest(path)
    with pytest.raises(ResultFileError, match="no such manifest"):
        load_manifest(tmp_path / "absent.json")
