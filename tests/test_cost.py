"""Cost per 1k samples and per epoch (comparison/cost.py) from the throughput and the config's
price (config_cost.py): exact arithmetic, CI bounds swapped, nothing when no price is set."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.comparison.cost import (
    compare_cost_lines,
    cost_figures,
    cost_lines,
    energy_figures,
    energy_lines,
    price_for,
)
from mlbaseline.config import resolve
from mlbaseline.config_cost import CostConfig
from mlbaseline.errors import ConfigError
from mlbaseline.results import Metric, Result, write_result

runner = CliRunner()


def throughput(
    median: float = 200.0,
    low: float = 180.0,
    high: float = 250.0,
    dataset: int | None = 50_000,
    gpu: str | None = None,
    cost: dict | None = None,
) -> Result:
    """A throughput result whose train part at batch 16 ran `median` [low, high] samples/s."""
    r = Result(kind="throughput", config={"cost": cost} if cost else {})
    r.environment = {"blocking": {"gpu_name": gpu, "cpu_model": None if gpu else "Fake CPU"}}
    rate = {"median": median, "ci_low": low, "ci_high": high}
    r.data = {
        "batch_sizes": {
            "16": {
                "batch_size": 16,
                "status": "ok",
                "train": {"n": 5, "samples_per_s": rate},
                "inference": {"n": 5, "samples_per_s": {k: 2 * v for k, v in rate.items()}},
            }
        }
    }
    if dataset:
        r.data["dataset"] = {"type": "synthetic-vision", "len": dataset}
    r.add_metric(Metric("train.bs16.step", "s", False, [16 / median] * 5))
    return r


def test_cost_per_1k_samples_and_per_epoch_with_the_ci_bounds_swapped():
    # 3.6 per hour = 0.001 per second; 200 samples/s [180, 250]
    figures = cost_figures(throughput(), 3.6, "USD")
    assert figures is not None and figures["currency"] == "USD"
    train, infer = figures["rows"]
    assert train["group"] == "train.bs16" and infer["group"] == "infer.bs16"
    k = train["per_1k_samples"]
    assert k["value"] == pytest.approx(1000 * 0.001 / 200)  # 0.005
    assert k["ci_low"] == pytest.approx(1000 * 0.001 / 250)  # the fast bound: the low cost
    assert k["ci_high"] == pytest.approx(1000 * 0.001 / 180)
    e = train["per_epoch"]
    assert (e["value"], e["ci_low"], e["ci_high"]) == pytest.approx(
        (50_000 * 0.001 / 200, 50_000 * 0.001 / 250, 50_000 * 0.001 / 180)
    )
    assert infer["per_1k_samples"]["value"] == pytest.approx(1000 * 0.001 / 400)
    assert infer["per_epoch"] is None  # an epoch is a training notion
    assert figures["dataset_samples"] == 50_000


def test_no_cost_when_no_price_is_set():
    r = throughput()
    assert cost_figures(r, None, "USD") is None
    assert price_for(r, CostConfig()) is None
    assert price_for(r, {}) is None and price_for(r, None) is None
    assert cost_lines(r) == [] and cost_lines(r, CostConfig()) == []
    assert compare_cost_lines(r, throughput()) == []


def test_unknown_epoch_is_said_not_guessed():
    r = throughput(dataset=None)
    figures = cost_figures(r, 3.6, "EUR")
    assert figures is not None and figures["rows"][0]["per_epoch"] is None
    assert figures["epoch"].startswith("unknown")
    lines = cost_lines(r, {"per_hour": 3.6, "currency": "EUR"})
    assert lines[0].startswith("cost train.bs16: 0.00500 [0.00400, 0.00556] EUR per 1k samples")
    assert lines[-1].startswith("cost per epoch: unknown")


def test_price_by_machine_longest_match_wins_over_per_hour():
    r = throughput(gpu="NVIDIA H100 80GB HBM3")
    cost = {"per_hour": 1.0, "per_hour_by_gpu": {"H100": 2.0, "h100 80gb": 3.0, "A100": 9.0}}
    assert price_for(r, cost) == (3.0, "USD", "cost.per_hour_by_gpu['h100 80gb']")
    assert price_for(throughput(gpu="NVIDIA A10G"), cost) == (1.0, "USD", "cost.per_hour")
    cpu = {"per_hour_by_gpu": {"fake cpu": 0.5}}
    assert price_for(throughput(), cpu) == (0.5, "USD", "cost.per_hour_by_gpu['fake cpu']")


def test_lines_use_the_results_own_price_unless_one_is_given():
    r = throughput(cost={"per_hour": 7.2, "currency": "EUR", "per_hour_by_gpu": {}})
    own = cost_lines(r)
    assert own[0].startswith("cost train.bs16: 0.0100 [0.00800, 0.0111] EUR per 1k samples")
    assert "per epoch (50,000 samples)" in own[0] and "at 7.20 EUR/h (cost.per_hour)" in own[0]
    given = cost_lines(r, {"per_hour": 3.6, "currency": "USD"})
    assert "0.00500 [0.00400, 0.00556] USD per 1k samples" in given[0]


def test_compare_lines_old_to_new():
    old = throughput(median=200, low=180, high=250)
    new = throughput(median=100, low=90, high=125)
    lines = compare_cost_lines(old, new, {"per_hour": 3.6, "currency": "USD"})
    assert lines[0] == (
        "cost per 1k samples, train.bs16: 0.00500 [0.00400, 0.00556] → 0.0100 [0.00800, 0.0111] USD"
    )


def test_energy_figures_median_and_ci_per_group():
    r = throughput()
    meta = {"role": "energy", "group": "train.bs16", "source": "nvml-counter", "window_s": 1.1}
    r.add_metric(Metric("train.bs16.energy_per_step", "J", False, [4.0, 5.0, 6.0], meta=meta))
    r.add_metric(Metric("train.bs16.energy_per_sample", "J", False, [0.25, 0.3, 0.35], meta=meta))
    (row,) = energy_figures(r)
    assert row["group"] == "train.bs16" and row["source"] == "nvml-counter"
    assert row["windows"] == 3 and row["per_step"]["value"] == pytest.approx(5.0)
    assert row["per_sample"]["value"] == pytest.approx(0.3)
    assert row["per_step"]["ci_low"] <= 5.0 <= row["per_step"]["ci_high"]


def test_config_validation():
    assert resolve(None, "demo", {"cost.per_hour": 2.5}).cost.per_hour == 2.5
    assert resolve(None, "demo").cost == CostConfig()
    with pytest.raises(ConfigError, match=r"cost.per_hour: must be > 0, got -1"):
        resolve(None, "demo", {"cost.per_hour": -1})
    with pytest.raises(ConfigError, match=r"cost.per_hour_by_gpu.H100: must be > 0"):
        resolve(None, "demo", {"cost.per_hour_by_gpu": {"H100": 0}})
    with pytest.raises(ConfigError, match=r"cost.per_hour_by_gpu.H100: expected a number"):
        resolve(None, "demo", {"cost.per_hour_by_gpu": {"H100": "cheap"}})
    with pytest.raises(ConfigError, match=r"cost.currency: must not be empty"):
        resolve(None, "demo", {"cost.currency": " "})


def test_cli_bad_price_is_one_error_line_exit_2(tmp_path: Path):
    config = tmp_path / "c.yaml"
    config.write_text("cost:\n  per_hour: -1\n")
    res = runner.invoke(app, ["throughput", "--config", str(config)])
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert res.stderr.strip() == "Error: cost.per_hour: must be > 0, got -1.0"


def test_compare_shows_cost_only_when_a_price_is_set(tmp_path: Path):
    old = write_result(throughput(median=200, low=180, high=250), tmp_path / "old.json")
    new = write_result(throughput(median=100, low=90, high=125), tmp_path / "new.json")
    plain = runner.invoke(app, ["compare", str(old), str(new), "--fail-on", "never"])
    assert plain.exit_code == 0, plain.stdout + plain.stderr
    assert "cost per" not in plain.stdout + plain.stderr
    priced = runner.invoke(
        app,
        ["compare", str(old), str(new), "--fail-on", "never", "--set", "cost.per_hour=3.6"],
    )
    assert priced.exit_code == 0, priced.stdout + priced.stderr
    shown = " ".join((priced.stdout + priced.stderr).split())  # the terminal wraps at 80
    assert "cost per 1k samples, train.bs16: 0.00500 [0.00400, 0.00556] → 0.0100" in shown


def test_the_price_is_outside_the_config_hash():
    """What the machine costs does not change what was measured: same hash, same series."""
    from mlbaseline.history.record import config_hash
    from mlbaseline.report.data import config_hash as report_hash

    a = Result(kind="throughput", config=resolve(None, "demo").to_dict())
    b = Result(kind="throughput", config=resolve(None, "demo", {"cost.per_hour": 9.0}).to_dict())
    assert config_hash(a) == config_hash(b) and report_hash(a) == report_hash(b)
    c = Result(kind="throughput", config=resolve(None, "demo", {"golden.seed": 1}).to_dict())
    assert config_hash(a) != config_hash(c)


def test_energy_lines_say_the_figure_or_why_there_is_none():
    r = throughput()
    meta = {"role": "energy", "group": "train.bs16", "source": "rapl", "window_s": 1.25}
    r.add_metric(Metric("train.bs16.energy_per_step", "J", False, [5.0] * 3, meta=meta))
    r.add_metric(Metric("train.bs16.energy_per_sample", "J", False, [0.3125] * 3, meta=meta))
    assert energy_lines(r) == [
        "energy train.bs16: 5.00 [5.00, 5.00] J/step, 0.312 [0.312, 0.312] J/sample "
        "(rapl, 3 windows of >= 1.25 s)"
    ]
    none = throughput()
    none.data["energy"] = {"measured": False, "reason": "RAPL absent: no zone"}
    assert energy_lines(none) == ["energy: not measured: RAPL absent: no zone"]
    short = throughput()
    short.data["energy"] = {
        "measured": True,
        "source": "nvml-counter",
        "batch_sizes": {"16": {"windows": [], "reason": "too few measured steps"}},
    }
    assert energy_lines(short) == ["energy train.bs16: no figure: too few measured steps"]
    assert energy_lines(throughput()) == []  # a result from before energy was measured


def test_throughput_summary_shows_energy_status_and_cost_when_priced(tmp_path: Path, monkeypatch):
    from mlbaseline.measure import energy

    monkeypatch.setattr(energy, "POWERCAP", tmp_path / "absent")  # this host's RAPL or not
    args = ["throughput", "--batch-sizes", "4", "--mode", "train", "--repeats", "1"]
    sets = {
        "workload.model": "workloads_slow:slow_model",
        "workload.dataset": "workloads_slow:slow_dataset",
        "workload.dataset_kwargs": "{n: 32}",
        "workload.loss": "workloads_slow:SlowLoss",
        "throughput.max_steps": "8",
        "throughput.telemetry": "false",
    }
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    plain = runner.invoke(app, [*args, "-o", str(tmp_path / "a.json")])
    assert plain.exit_code == 0, plain.stdout + plain.stderr
    shown = " ".join((plain.stdout + plain.stderr).split())
    assert "energy: not measured: RAPL absent" in shown and "cost " not in shown
    priced = runner.invoke(
        app, [*args, "--set", "cost.per_hour=3.6", "-o", str(tmp_path / "b.json")]
    )
    assert priced.exit_code == 0, priced.stdout + priced.stderr
    shown = " ".join((priced.stdout + priced.stderr).split())
    assert (
        "cost train.bs4: " in shown and "USD per 1k samples" in shown and "per epoch (32" in shown
    )
