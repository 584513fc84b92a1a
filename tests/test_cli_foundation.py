"""CLI contract through `mlb env-check`: bad input is one `Error:` line and exit 2, --json is
JSON and nothing else, -o never overwrites without --force, help shows an example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import mlbaseline.cli.env_check as env_check_cli
from mlbaseline.cli import app
from mlbaseline.envinfo import CpuTimes
from mlbaseline.measure.gpu import GpuInfo, NullProbe
from mlbaseline.results import load_result
from mlbaseline.runners import envcheck
from mlbaseline.runners.envcheck import HostReadings

runner = CliRunner()
FAST = ["--set", "env_check.cpu_idle_window_s=0.01"]

QUIET_HOST = HostReadings(
    cpu_before={"cpu": CpuTimes(busy=100, idle=900)},
    cpu_after={"cpu": CpuTimes(busy=101, idle=999)},
    window_s=0.01,
    loadavg=(0.0, 0.0, 0.0),
    logical_cpus=64,
    affinity=list(range(64)),
    cgroup_version=2,
    meminfo={"MemTotal": 512 * 10**9, "MemAvailable": 400 * 10**9, "SwapTotal": 0, "SwapFree": 0},
)


class HotProbe:
    """One GPU at 90 °C: env-check must fail."""

    def available(self) -> tuple[bool, str]:
        return True, ""

    def driver_version(self) -> str | None:
        return "550.54.15"

    def devices(self) -> list[GpuInfo]:
        return [GpuInfo(0, "Fake GPU", "GPU-0", 80 * 10**9, 0, 90.0, ["hw_thermal"])]

    def sample(self, index: int):  # pragma: no cover - env-check does not sample
        raise NotImplementedError

    def close(self) -> None:
        pass


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(env_check_cli, "default_probe", lambda: NullProbe("no NVIDIA driver"))


@pytest.fixture
def quiet_machine(monkeypatch, no_gpu):
    """A host that passes every CPU/memory check, so the exit code depends only on the test."""
    monkeypatch.setattr(envcheck, "read_host", lambda *a, **k: QUIET_HOST)


def invoke(*args: str):
    return runner.invoke(app, list(args))


def assert_one_error_line(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""


# ---------------------------------------------------------------- bad input: exit 2, one line


def test_missing_config_file(tmp_path):
    result = invoke("env-check", "-c", str(tmp_path / "nope.yaml"))
    assert_one_error_line(result, "nope.yaml", "config file not found")


def test_invalid_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("golden: [1, 2\n")
    assert_one_error_line(invoke("env-check", "-c", str(bad)), "invalid YAML at line")


def test_unknown_key_did_you_mean(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("env_check:\n  gpu_max_temp: 70\n")
    assert_one_error_line(
        invoke("env-check", "-c", str(bad)),
        "env_check.gpu_max_temp: unknown key (did you mean 'gpu_max_temp_c'?)",
    )


def test_unknown_pin_key_did_you_mean(tmp_path):
    bad = tmp_path / "pins.yaml"
    bad.write_text("env_check:\n  expect:\n    torhc: '2.14'\n")
    assert_one_error_line(
        invoke("env-check", "-c", str(bad)), "env_check.expect.torhc", "did you mean 'torch'"
    )


def test_wrong_type(tmp_path):
    bad = tmp_path / "type.yaml"
    bad.write_text("env_check:\n  cpu_min_idle: lots\n")
    assert_one_error_line(
        invoke("env-check", "-c", str(bad)), "env_check.cpu_min_idle: expected a number"
    )


def test_wrong_type_via_set():
    assert_one_error_line(
        invoke("env-check", "--set", "golden.seed=abc"), "golden.seed: expected an integer"
    )


def test_bad_profile_name():
    assert_one_error_line(
        invoke("env-check", "--profile", "visoin"), "unknown profile 'visoin'", "vision"
    )


def test_bad_device_is_bad_input(no_gpu):
    assert_one_error_line(
        invoke("env-check", "--set", "workload.device=gpu"), "workload.device: unknown device"
    )


def test_unknown_option_is_a_usage_error():
    result = invoke("env-check", "--no-such-option")
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr + result.stdout


# ---------------------------------------------------------------- output contract


def test_json_stdout_is_the_result(no_gpu):
    result = invoke("env-check", "--json", *FAST)
    assert result.exit_code in (0, 1), result.stderr
    doc = json.loads(result.stdout)  # nothing but JSON on stdout
    assert doc["kind"] == "env-check" and doc["schema_version"] == "1.1"
    gpu = [c for c in doc["verdict"]["checks"] if c["name"].startswith("gpu")]
    assert gpu and {c["status"] for c in gpu} == {"skip"}
    assert result.exit_code == (1 if doc["verdict"]["status"] == "fail" else 0)
    assert "env-check" in result.stderr and "verdict" in result.stderr  # the table


def test_quiet_machine_exits_0_and_a_hot_gpu_exits_1(quiet_machine, monkeypatch):
    ok = invoke("env-check", "--json", "--quiet")
    assert ok.exit_code == 0, ok.stdout
    assert json.loads(ok.stdout)["verdict"]["status"] in ("pass", "warn")
    assert ok.stderr == ""  # --quiet: no table
    monkeypatch.setattr(env_check_cli, "default_probe", HotProbe)
    hot = invoke("env-check", "--json", "--quiet", "--profile", "vision")  # device: auto
    assert hot.exit_code == 1
    checks = {c["name"]: c for c in json.loads(hot.stdout)["verdict"]["checks"]}
    assert checks["gpu0.temperature"]["status"] == "fail"
    assert checks["gpu0.throttle"]["status"] == "fail"
    # the demo profile runs on the CPU: a hot GPU is then a warning, not a failure
    demo = invoke("env-check", "--json", "--quiet")
    demo_checks = {c["name"]: c for c in json.loads(demo.stdout)["verdict"]["checks"]}
    assert demo_checks["gpu0.temperature"]["status"] == "warn"


def test_show_config_prints_yaml():
    result = invoke("env-check", "--show-config", "--set", "env_check.gpu_max_temp_c=70")
    assert result.exit_code == 0
    doc = yaml.safe_load(result.stdout)
    assert doc["env_check"]["gpu_max_temp_c"] == 70.0
    assert doc["profile"] == "demo" and doc["golden"]["seed"] == 42


def test_output_file_and_no_overwrite_without_force(quiet_machine, tmp_path):
    out = tmp_path / "env.json"
    first = invoke("env-check", "-q", "-o", str(out))
    assert first.exit_code == 0 and first.stdout == ""
    loaded = load_result(out, kinds=["env-check"])
    assert loaded.kind == "env-check" and loaded.verdict.checks
    before = out.read_bytes()
    again = invoke("env-check", "-q", "-o", str(out))
    assert_one_error_line(again, "already exists", "--force")
    assert out.read_bytes() == before
    forced = invoke("env-check", "-q", "-o", str(out), "--force")
    assert forced.exit_code == 0
    assert json.loads(out.read_text())["kind"] == "env-check"


def test_env_check_writes_nothing_without_output(quiet_machine, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("env-check", "-q").exit_code == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--help"], ["env-check", "--help"]])
def test_help_shows_an_example(args):
    result = invoke(*args)
    assert result.exit_code == 0
    assert "Example" in result.stdout
    if args[0] == "env-check":
        assert "mlb env-check" in result.stdout


def test_python_dash_m_entry_point_exists():
    main = Path(__file__).resolve().parent.parent / "mlbaseline" / "__main__.py"
    assert "main" in main.read_text()


def test_table_folds_identical_skips_into_one_row(quiet_machine):
    result = invoke("env-check")
    assert result.exit_code == 0
    assert "gpu.* (9)" in result.stderr  # nine GPU skips with one reason: one row
    assert "memory.available" in result.stderr and "verdict: " in result.stderr
    assert result.stdout == ""  # without --json nothing goes to stdout
