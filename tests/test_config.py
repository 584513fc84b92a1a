from pathlib import Path

import pytest

from mlbaseline import config as cfg
from mlbaseline.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_and_golden_parameters():
    c = cfg.Config()
    assert (c.golden.seed, c.golden.batch_size, c.golden.subset_size) == (42, 64, 1024)
    assert c.golden.telemetry_interval_s == pytest.approx(0.1)


@pytest.mark.parametrize(("name", "batch"), [("vision", 64), ("text", 16), ("demo", 16)])
def test_profiles(name, batch):
    c = cfg.resolve(profile=name)
    assert c.profile == name
    assert c.golden.batch_size == batch


def test_precedence_cli_over_file_over_profile(tmp_path):
    f = write(tmp_path, "profile: vision\nthroughput:\n  min_steps: 40\n  window: 5\n")
    c = cfg.resolve(f)
    assert c.profile == "vision" and c.golden.batch_size == 64  # from the profile
    assert c.throughput.min_steps == 40  # file over profile/default
    c2 = cfg.resolve(f, profile="text", overrides={"throughput.min_steps": 7, "latency.rate": None})
    assert c2.profile == "text" and c2.golden.batch_size == 16  # --profile over file's profile
    assert c2.throughput.min_steps == 7 and c2.throughput.window == 5
    assert c2.latency.rate is None


def test_unknown_key_did_you_mean(tmp_path):
    f = write(tmp_path, "throughput:\n  batch_size: [1]\n")
    with pytest.raises(
        ConfigError, match=r"^throughput.batch_size: unknown key \(did you mean 'batch_sizes'\?\)$"
    ):
        cfg.resolve(f)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("golden:\n  seed: abc\n", "golden.seed: expected an integer, got 'abc'"),
        ("golden:\n  batch_size: -4\n", "golden.batch_size: must be ≥ 1, got -4"),
        (
            "golden:\n  telemetry_interval_s: 0\n",
            "golden.telemetry_interval_s: must be > 0, got 0.0",
        ),
        (
            "throughput:\n  batch_sizes: [1, x]\n",
            "throughput.batch_sizes[1]: expected an integer, got 'x'",
        ),
        (
            "subset:\n  strategy: random\n",
            "subset.strategy: 'random' is not one of proportional, balanced",
        ),
        ("workload: 3\n", "workload: expected a mapping, got int"),
        ("- 1\n- 2\n", "top level must be a mapping"),
        ("a: [\n", "invalid YAML at line"),
    ],
)
def test_errors_name_the_field(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        cfg.resolve(write(tmp_path, text))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_and_bad_profile(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        cfg.resolve(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"unknown profile 'visoin' \(did you mean 'vision'\?\)"):
        cfg.resolve(profile="visoin")


def test_config_is_frozen():
    c = cfg.Config()
    with pytest.raises(AttributeError):
        c.golden.seed = 1  # type: ignore[misc]


def test_parse_set_yaml_values():
    assert cfg.parse_set(["throughput.batch_sizes=[8, 16]", "latency.rate=5"]) == {
        "throughput": {"batch_sizes": [8, 16]},
        "latency": {"rate": 5},
    }
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        cfg.parse_set(["nonsense"])


def test_reference_lists_every_field():
    ref = cfg.config_reference()
    for name, *_ in cfg.iter_fields():
        assert f"`{name}`" in ref


def test_profiles_only_use_known_keys():
    for name in cfg.available_profiles():
        cfg.resolve(profile=name)  # raises on any unknown key


def test_exponent_floats_without_a_dot(tmp_path):
    c = cfg.resolve(write(tmp_path, "subset:\n  kl_threshold: 1e-9\n"))
    assert c.subset.kl_threshold == pytest.approx(1e-9)
    with pytest.raises(ConfigError, match="expected a number"):
        cfg.resolve(write(tmp_path, "subset:\n  kl_threshold: 1e-x\n"))
