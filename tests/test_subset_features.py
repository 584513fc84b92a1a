"""Feature extractors of the subset's KL validation."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mlbaseline.config import resolve
from mlbaseline.errors import ConfigError
from mlbaseline.runners.subset import run_subset
from mlbaseline.subset import features as feat
from mlbaseline.subset import validate
from mlbaseline.subset.index import index_tree
from mlbaseline.workloads.synthetic import write_image_tree


def test_stats_features_known_values(tmp_path: Path):
    # 40 wide, 20 high: left half (0, 0, 0), right half (200, 100, 50)
    pixels = np.zeros((20, 40, 3), dtype=np.uint8)
    pixels[:, 20:] = (200, 100, 50)
    path = tmp_path / "k" / "half.png"
    path.parent.mkdir()
    Image.fromarray(pixels).save(path)
    store = feat.FeatureStore(index_tree(tmp_path), feat.StatsExtractor())
    store.ensure([(0, 0)])
    row = dict(zip(feat.STATS_FEATURES, store.matrix([(0, 0)])[0], strict=True))
    assert [row["mean_r"], row["mean_g"], row["mean_b"]] == [100, 50, 25]
    assert [row["std_r"], row["std_g"], row["std_b"]] == [100, 50, 25]
    assert (row["height"], row["width"], row["aspect_ratio"]) == (20, 40, 2.0)
    assert row["file_bytes"] == path.stat().st_size
    assert row["entropy"] == pytest.approx(1.0)  # two equally common grey levels: one bit
    entry = store.entries[(0, 0)]
    assert entry.ok and entry.nbytes == path.stat().st_size and len(entry.sha256) == 64


def test_feature_kl_leaves_out_constant_equal_features():
    rng = np.random.default_rng(0)
    full = np.column_stack([rng.normal(0, 1, 200), np.full(200, 7.0)])
    sub = full[:50] + np.array([0.5, 0])
    kl = validate.feature_kl(sub, full, ["x", "size"])
    assert kl.constant == ["size"] and kl.per_feature["size"] == 0
    assert kl.mean == pytest.approx(kl.per_feature["x"])
    # a constant that differs between the sets is informative and counted
    shifted = validate.feature_kl(sub + np.array([0, 1]), full, ["x", "size"])
    assert shifted.constant == [] and shifted.mean > 1


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rn") / "data"
    write_image_tree(root, 24, num_classes=2, size=20, seed=2)
    return root


def _cfg(**subset):
    overrides = {f"subset.{k}": v for k, v in subset.items()}
    return resolve(None, "demo", {"subset.feature_size": 32, "subset.workers": 1, **overrides})


def test_resnet18_random_init_is_fixed_and_said():
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    one = feat.Resnet18Extractor(None, seed=42, feature_size=32)
    two = feat.Resnet18Extractor(None, seed=42, feature_size=32)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG did not move
    assert one.info["weights"] == "random-init" and one.info["init_seed"] == 42
    x = [np.full((32, 32, 3), v, dtype=np.uint8) for v in (10, 200)]
    a, b = one.finish(x), two.finish(x)
    assert a.shape == (2, 512) and np.array_equal(a, b)


def test_resnet18_end_to_end_with_weights_file(small_tree: Path, tmp_path: Path):
    import torchvision

    weights = tmp_path / "r18.pt"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), weights)
    result = run_subset(
        _cfg(n=12, extractor="resnet18", weights=str(weights)), small_tree, tmp_path / "o"
    )
    info = result.data["extractor"]
    assert info["name"] == "resnet18" and info["weights"] == "file"
    assert info["weights_sha256"] == feat.sha256_file(weights)
    assert len(result.data["kl"]["per_feature"]) == 512
    assert result.verdict.checks[0].value is not None


def test_resnet18_bad_weights_file(small_tree: Path, tmp_path: Path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="not a loadable state dict"):
        feat.make_extractor("resnet18", str(bad), 42, 32)
    wrong = tmp_path / "wrong.pt"
    torch.save({"conv1.weight": torch.zeros(1)}, wrong)
    with pytest.raises(ConfigError, match="does not fit resnet18"):
        feat.make_extractor("resnet18", str(wrong), 42, 32)
    with pytest.raises(ConfigError, match="no such file"):
        feat.make_extractor("resnet18", str(tmp_path / "absent.pt"), 42, 32)
