"""`run_subset` end to end on small generated trees: counts, reproducibility, safety, KL."""

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from mlbaseline.config import resolve
from mlbaseline.errors import DatasetError, OutputError, OutputExistsError
from mlbaseline.progress import RecordingProgress
from mlbaseline.runners.subset import RESULT_NAME, TENSORS_NAME, run_subset
from mlbaseline.subset import features as feat
from mlbaseline.subset import validate
from mlbaseline.subset.index import index_tree
from mlbaseline.subset.manifest import MANIFEST_NAME, load_manifest
from mlbaseline.workloads.synthetic import write_image_tree


def cfg(**subset):
    overrides = {f"subset.{k}": v for k, v in subset.items()}
    overrides.setdefault("subset.workers", 2)
    return resolve(None, "demo", overrides)


def tree_hash(root: Path) -> str:
    """Every path (files, folders, links), every byte and every mtime under root."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"{p.relative_to(root)}|{st.st_mtime_ns}|{st.st_mode}".encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    return h.hexdigest()


def chosen(out: Path) -> list[str]:
    return [e.source for e in load_manifest(out).entries]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("src") / "data"
    write_image_tree(root, 120, num_classes=4, size=16, seed=3, class_weights=[4, 3, 2, 1])
    return root


def test_end_to_end_counts_manifest_and_result(data: Path, tmp_path: Path):
    out = tmp_path / "subset"
    progress = RecordingProgress()
    result = run_subset(cfg(n=30), data, out, progress)
    index = index_tree(data)
    counts = index.counts.tolist()
    from mlbaseline.subset.sampling import proportional_quotas

    expected = proportional_quotas(counts, 30, index.classes)
    assert [row["selected"] for row in result.data["plan"]] == expected
    for c, name in enumerate(index.classes):
        files = sorted(os.listdir(out / name))
        assert files == [f"sample_{i:04d}.png" for i in range(expected[c])]
    manifest = load_manifest(out)
    assert len(manifest.entries) == 30
    for e in manifest.entries:  # bytes and hash are the copied file's, and the source's
        blob = (out / e.output).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == e.sha256 == _sha(data / e.source)
        assert len(blob) == e.bytes
    sha = hashlib.sha256((out / MANIFEST_NAME).read_bytes()).hexdigest()
    assert result.data["manifest_sha256"] == sha
    assert result.environment["blocking"]["subset_sha256"] == sha
    assert (out / RESULT_NAME).is_file() and result.status == "complete"
    assert result.verdict.checks[0].name == "subset.kl"
    assert {"indexing classes", "copying files"} <= set(progress.tasks)
    assert not list(tmp_path.glob("*.partial-*"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_balanced_end_to_end(data: Path, tmp_path: Path):
    index = index_tree(data)
    from mlbaseline.subset.sampling import balanced_quotas

    n = 2 * min(index.counts.tolist()) + 7  # the smallest class is short of its quota
    result = run_subset(cfg(n=n, strategy="balanced"), data, tmp_path / "b")
    selected = [row["selected"] for row in result.data["plan"]]
    assert selected == balanced_quotas(index.counts.tolist(), n, index.classes)
    assert sum(selected) == n


def test_same_seed_same_files_other_seed_other_files(data: Path, tmp_path: Path):
    run_subset(cfg(n=20), data, tmp_path / "a")
    run_subset(cfg(n=20), data, tmp_path / "b")
    other = resolve(None, "demo", {"subset.n": 20, "golden.seed": 7})
    run_subset(other, data, tmp_path / "c")
    assert chosen(tmp_path / "a") == chosen(tmp_path / "b")
    assert chosen(tmp_path / "a") != chosen(tmp_path / "c")
    same = (tmp_path / "a" / MANIFEST_NAME).read_bytes() == (
        tmp_path / "b" / MANIFEST_NAME
    ).read_bytes()
    assert same  # the manifest is deterministic, so its hash identifies the subset


@pytest.mark.parametrize("link", ["copy", "hardlink", "symlink"])
def test_source_tree_is_unchanged(data: Path, tmp_path: Path, link: str):
    before = tree_hash(data)
    out = tmp_path / "s"
    run_subset(cfg(n=25, link=link, save_tensors=True), data, out)
    assert tree_hash(data) == before
    first = load_manifest(out).entries[0]
    placed = out / first.output
    if link == "symlink":
        assert placed.is_symlink() and placed.resolve() == (data / first.source).resolve()
    elif link == "hardlink":
        assert placed.stat().st_ino == (data / first.source).stat().st_ino
    else:
        assert (
            not placed.is_symlink() and placed.stat().st_ino != (data / first.source).stat().st_ino
        )


def test_output_inside_or_around_the_source_is_refused(data: Path):
    before = tree_hash(data)
    with pytest.raises(OutputError, match="inside the source tree"):
        run_subset(cfg(n=5), data, data / "class_00" / "out")
    with pytest.raises(OutputError, match="inside the source tree"):
        run_subset(cfg(n=5), data, data)
    with pytest.raises(OutputError, match="contains the source"):
        run_subset(cfg(n=5), data, data.parent, force=True)
    assert tree_hash(data) == before


def test_bad_input(tmp_path: Path, data: Path):
    with pytest.raises(DatasetError, match="no such dataset folder"):
        run_subset(cfg(n=5), tmp_path / "missing", tmp_path / "o")
    (tmp_path / "empty" / "k").mkdir(parents=True)
    with pytest.raises(DatasetError, match="no images found"):
        run_subset(cfg(n=5), tmp_path / "empty", tmp_path / "o")
    with pytest.raises(DatasetError, match="larger than the dataset"):
        run_subset(cfg(n=10_000), data, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_dry_run_writes_nothing(data: Path, tmp_path: Path):
    out = tmp_path / "dry"
    result = run_subset(cfg(n=12), data, out, dry_run=True)
    assert not out.exists() and os.listdir(tmp_path) == []
    assert sum(row["quota"] for row in result.data["plan"]) == 12
    assert result.verdict.checks[0].status == "skip"


def test_force_semantics(data: Path, tmp_path: Path):
    out = tmp_path / "s"
    run_subset(cfg(n=10), data, out)
    old = (out / MANIFEST_NAME).read_bytes()
    with pytest.raises(OutputExistsError, match="use --force"):
        run_subset(cfg(n=12), data, out)
    assert (out / MANIFEST_NAME).read_bytes() == old
    run_subset(cfg(n=12), data, out, force=True)
    assert len(load_manifest(out).entries) == 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no partial or old left
    # an empty folder needs no --force; an unrelated non-empty one is never replaced
    (tmp_path / "empty").mkdir()
    run_subset(cfg(n=5), data, tmp_path / "empty")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(OutputError, match="not an mlb subset"):
        run_subset(cfg(n=5), data, tmp_path / "mine", force=True)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "precious"


def test_interrupted_copy_leaves_nothing_complete_looking(data: Path, tmp_path: Path, monkeypatch):
    out = tmp_path / "s"
    run_subset(cfg(n=10), data, out)
    old = (out / MANIFEST_NAME).read_bytes()
    calls = []
    real_copy = shutil.copyfile

    def flaky(src, dst, *args, **kwargs):
        calls.append(src)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real_copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", flaky)
    result = run_subset(cfg(n=20), data, out, force=True)
    assert result.status == "interrupted" and result.data["output"] is None
    assert "manifest_sha256" not in result.data and not result.artifacts
    assert result.environment["blocking"]["subset_sha256"] is None
    assert (out / MANIFEST_NAME).read_bytes() == old  # the old subset is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # the partial one is gone
    fresh = tmp_path / "fresh"
    calls.clear()
    result = run_subset(cfg(n=20), data, fresh)
    assert result.status == "interrupted" and not fresh.exists()
    assert not list(tmp_path.glob("fresh*"))


def _truncated_png(path: Path) -> None:
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])


def test_corrupt_images_are_listed_and_skipped(tmp_path: Path):
    src = tmp_path / "data"
    paths = write_image_tree(src, 40, num_classes=2, size=16, seed=5)
    broken = sorted(paths)[:3]
    for p in broken:
        _truncated_png(p)
    (src / "class_00" / "not_an_image.png").write_bytes(b"hello")
    broken_rel = sorted([str(p.relative_to(src)) for p in broken] + ["class_00/not_an_image.png"])
    total = 41
    result = run_subset(cfg(n=total - 4), src, tmp_path / "out")  # every good image
    listed = sorted(c["path"] for c in result.data["corrupt"])
    assert listed == broken_rel
    assert all(c["error"] for c in result.data["corrupt"])
    entries = load_manifest(tmp_path / "out").entries
    assert len(entries) == total - 4
    assert not {e.source for e in entries} & set(broken_rel)
    assert any(w["code"] == "corrupt_images" for w in result.warnings)
    # --keep-corrupt keeps them (flagged), and n may then be the whole tree
    kept = run_subset(cfg(n=total, keep_corrupt=True), src, tmp_path / "kept")
    flagged = sorted(e.source for e in load_manifest(tmp_path / "kept").entries if e.corrupt)
    assert flagged == broken_rel == sorted(kept.data["corrupt_kept"])
    with pytest.raises(DatasetError, match="images that decode"):
        run_subset(cfg(n=total), src, tmp_path / "more")


def test_saved_tensors_load_with_weights_only(data: Path, tmp_path: Path):
    out = tmp_path / "t"
    result = run_subset(cfg(n=9, save_tensors=True), data, out)
    blob = torch.load(out / TENSORS_NAME, weights_only=True)
    assert len(blob["images"]) == 9 and blob["labels"].shape == (9,)
    assert all(t.dtype == torch.uint8 and t.shape == (3, 16, 16) for t in blob["images"])
    entries = load_manifest(out).entries
    assert blob["files"] == [e.output for e in entries]
    assert blob["labels"].tolist() == [e.label for e in entries]
    assert result.artifacts["tensors"] == TENSORS_NAME


def test_retries_keep_the_lowest_kl(data: Path, tmp_path: Path):
    result = run_subset(cfg(n=16, retries=3), data, tmp_path / "r")
    tries = result.data["tries"]
    assert [t["seed"] for t in tries] == [42, 43, 44]
    best = min(tries, key=lambda t: t["kl_mean"])
    assert result.data["seed"] == best["seed"] == load_manifest(tmp_path / "r").seed
    assert result.data["kl"]["mean"] == best["kl_mean"]


def test_large_dataset_uses_a_seeded_reference_sample(data: Path, tmp_path: Path):
    result = run_subset(cfg(n=10, reference_max=50), data, tmp_path / "ref")
    ref = result.data["reference"]
    assert ref["size"] == 50 and not ref["whole_dataset"]
    assert set(result.data["kl"]["per_class"]) == set(index_tree(data).classes)
    assert result.data["kl"]["class_proportion"] >= 0


# ---------------------------------------------------------------- KL validation


@pytest.fixture(scope="module")
def bright_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bright") / "data"
    write_image_tree(root, 240, num_classes=2, size=16, seed=11)
    return root


def test_skewed_subset_fails_and_random_subset_passes(bright_tree: Path):
    index = index_tree(bright_tree)
    extractor = feat.StatsExtractor()
    store = feat.FeatureStore(index, extractor, workers=2)
    keys = [(c, i) for c in range(len(index.classes)) for i in range(len(index.files[c]))]
    store.ensure(keys)
    full = store.matrix(keys)
    brightness = full[:, :3].mean(axis=1)
    n = 80  # a third of the tree: the brightest third vs a random third
    brightest = full[np.argsort(brightness)[-n:]]
    random = full[np.random.default_rng(0).choice(len(full), n, replace=False)]
    names = extractor.feature_names
    threshold = 0.05
    skewed = validate.feature_kl(brightest, full, names)
    fair = validate.feature_kl(random, full, names)
    assert not skewed.passed(threshold) and skewed.per_feature["mean_r"] > threshold
    assert fair.passed(threshold)
    assert skewed.mean > 5 * fair.mean
    # all images are 16×16: the size features are constant, reported and not averaged
    assert skewed.constant == ["height", "width", "aspect_ratio"]
    assert skewed.per_feature["height"] == 0


def test_end_to_end_kl_verdicts(bright_tree: Path, tmp_path: Path):
    ok = run_subset(cfg(n=120), bright_tree, tmp_path / "ok")
    assert ok.verdict.status == "pass" and ok.data["kl"]["mean"] < 0.05
    strict = run_subset(cfg(n=120, kl_threshold=1e-6), bright_tree, tmp_path / "strict")
    assert strict.verdict.failed
    assert (tmp_path / "strict" / MANIFEST_NAME).is_file()  # written, and marked failed


def test_class_divergence_matches_scipy():
    from scipy.stats import entropy

    assert validate.class_divergence([1, 1], [1, 1]) == 0
    assert validate.class_divergence([3, 1], [1, 1]) == pytest.approx(
        entropy([0.75, 0.25], [0.5, 0.5])
    )


def test_result_records_the_mean_image_size(tmp_path):
    from mlbaseline.config import resolve
    from mlbaseline.runners.subset import run_subset
    from mlbaseline.workloads.synthetic import write_image_tree

    write_image_tree(tmp_path / "src", 24, num_classes=2, size=20, seed=1)
    cfg = resolve(overrides={"subset.n": 8})
    result = run_subset(cfg, tmp_path / "src", tmp_path / "out")
    assert result.data["image_size"] == {"mean_width": 20.0, "mean_height": 20.0}
