"""`mlb run`: every phase into one folder, a combined baseline, env-check gate, Ctrl-C."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.results import load_result
from mlbaseline.runners import run as runmod

TINY = {
    "workload.model": "builtin:tiny_cnn",
    "workload.image_size": 16,
    "throughput.batch_sizes": [4],
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 4,
    "throughput.max_steps": 8,
    "throughput.window": 2,
    "throughput.stability_windows": 1,
    "throughput.warmup_max": 4,
    "throughput.stability_tolerance": 10.0,
    "dataloader.workers": [0],
    "dataloader.batches": 2,
    "dataloader.batch_size": 4,
    "dataloader.synthetic_images": 16,
    "dataloader.cold_cache": False,
    "latency.requests": 40,
    "latency.warmup_requests": 2,
    "env_check.cpu_min_idle": 0.0,
    "env_check.cpu_idle_window_s": 0.01,
    "env_check.cpu_max_load": 1000.0,
    "env_check.min_ram_gb": 0.0,
}
SET_ARGS = [a for k, v in TINY.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def tiny(**extra):
    return resolve(overrides={**TINY, **extra})


def test_run_writes_every_phase_and_a_combined_baseline(tmp_path):
    out = tmp_path / "run"
    outcome = runmod.run_baseline(tiny(), out, NullProbe())
    names = {p.name for p in out.iterdir()}
    expected = {"env_check.json", "dataloader.json", "throughput.json", "latency.json"}
    assert expected | {"baseline.json", "telemetry.csv", "baseline_report.md", "figures"} <= names
    base = load_result(out / "baseline.json", kinds=["run"])
    assert base.status == "complete", base.notes
    phases = [p["phase"] for p in base.data["phases"]]
    assert phases == ["env-check", "dataloader", "throughput", "latency", "report"]
    assert "train.bs4.step" in base.measurements and "latency.c2.request" in base.measurements
    assert any(n.startswith("dataloader.w0.") for n in base.measurements)
    assert base.environment["blocking"]["device"] == "cpu"
    assert outcome.report_path == out / "baseline_report.md"
    for entry in base.data["phases"][:-1]:
        assert load_result(out / entry["file"]).kind == entry["kind"]


def test_failed_env_check_stops_unless_ignored(tmp_path):
    cfg = tiny(**{"env_check.expect": {"torch": "0.0.1"}})
    stopped = runmod.run_baseline(cfg, tmp_path / "a", NullProbe(), skip={"report"})
    assert [p["phase"] for p in stopped.baseline.data["phases"]] == ["env-check"]
    assert stopped.baseline.verdict.failed
    assert not (tmp_path / "a" / "throughput.json").exists()
    ran = runmod.run_baseline(
        cfg, tmp_path / "b", NullProbe(), ignore_env=True, skip={"report", "dataloader"}
    )
    assert [p["phase"] for p in ran.baseline.data["phases"]] == [
        "env-check",
        "throughput",
        "latency",
    ]
    assert ran.baseline.data["env_check_ignored"] is True
    # ignored failures stay visible as warnings and no longer fail the run's exit code
    env = [c for c in ran.baseline.verdict.checks if c.name.startswith("env-check/")]
    assert any(c.status == "warn" and "ignored (--ignore-env)" in c.message for c in env)
    assert not ran.baseline.verdict.failed
    assert load_result(tmp_path / "b" / "env_check.json").verdict.failed


def test_ctrl_c_keeps_finished_phases_and_marks_the_run(tmp_path, monkeypatch):
    def interrupt(run, sampler):
        raise KeyboardInterrupt

    monkeypatch.setitem(runmod._RUNNERS, "latency", interrupt)
    out = tmp_path / "run"
    outcome = runmod.run_baseline(tiny(), out, NullProbe(), skip={"dataloader"})
    base = load_result(out / "baseline.json")
    assert base.status == "interrupted" and outcome.baseline.status == "interrupted"
    assert [p["phase"] for p in base.data["phases"]] == ["env-check", "throughput"]
    assert load_result(out / "throughput.json").status == "complete"


def test_a_phase_fault_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    from mlbaseline.errors import HardwareUnavailableError

    def no_gpu(run, sampler):
        raise HardwareUnavailableError("workload.device: 'cuda' requested but no CUDA device")

    monkeypatch.setitem(runmod._RUNNERS, "throughput", no_gpu)
    out = tmp_path / "run"
    outcome = runmod.run_baseline(tiny(), out, NullProbe(), skip={"dataloader", "report"})
    phases = {p["phase"]: p for p in outcome.baseline.data["phases"]}
    assert phases["throughput"]["status"] == "failed"
    assert phases["latency"]["status"] == "complete"
    assert outcome.baseline.status == "failed"
    assert load_result(out / "baseline.json").status == "failed"


def test_output_dir_needs_force(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    runner = CliRunner()
    res = runner.invoke(app, ["run", "-o", str(out), "--quiet"])
    assert res.exit_code == 2
    assert res.stderr.strip().startswith("Error: ") and "--force" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert (out / "keep.txt").read_text() == "mine"


def test_cli_run_json_and_exit_code(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(
        app, ["run", "-o", str(out), "--json", "--quiet", "--skip", "report,dataloader", *SET_ARGS]
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kind"] == "run" and doc["status"] == "complete"


def test_unknown_skip_phase_is_bad_input(tmp_path):
    res = CliRunner().invoke(app, ["run", "-o", str(tmp_path / "x"), "--skip", "lateny"])
    assert res.exit_code == 2 and "unknown phase" in res.stderr


def test_default_output_dir_is_a_utc_timestamp():
    path = runmod.default_output_dir(Path("mlb-results"))
    assert path.parent == Path("mlb-results") and path.name.endswith("Z")
    assert len(path.name) == len("20261202T182700Z")


@pytest.mark.parametrize("phase", ["subset"])
def test_subset_phase_only_with_a_dataset(phase):
    assert phase not in runmod._phase_list(tiny(), set())
    assert phase in runmod._phase_list(tiny(**{"subset.source": "/data"}), set())
