"""Noise decomposition (issue 15 item 2): variance components on log values recover a known
within/between split on seeded data, the MDE is one formula used by throughput results and
`mlb compare` alike, and the advice it gives can pass the gate it is given for."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlbaseline import comparison as cmp
from mlbaseline import stats
from mlbaseline.comparison.noise import result_noise
from mlbaseline.config import CompareConfig
from mlbaseline.results import Metric, Result
from mlbaseline.stats import noise

CFG = CompareConfig(n_resamples=300)


def replicated(rng, processes, n, between, within, base=0.01):
    levels = rng.lognormal(0.0, between, processes)
    values = np.concatenate([base * lv * rng.lognormal(0.0, within, n) for lv in levels])
    return values, np.repeat(np.arange(processes), n)


@pytest.mark.parametrize(("between", "within"), [(0.20, 0.02), (0.01, 0.10), (0.0, 0.05)])
def test_components_recover_a_known_split(between, within):
    rng = np.random.default_rng(7)
    values, ids = replicated(rng, 60, 50, between, within)
    c = noise.components(values, ids)
    assert c is not None and c.processes == 60 and c.values == 3000 and c.dof == 59
    assert c.within_sd == pytest.approx(within, rel=0.05)
    assert c.between_sd == pytest.approx(between, rel=0.25, abs=0.005)
    expected_share = between**2 / (between**2 + within**2)
    assert c.between_share == pytest.approx(expected_share, abs=0.1)
    # the noise of one process's median: between plus what n steps leave of within (a median
    # of n normal values has sd sqrt(pi/2)·sigma/sqrt(n))
    left = math.sqrt(math.pi / 2) * within / math.sqrt(50)
    assert c.process_sd == pytest.approx(math.hypot(between, left), rel=0.25)


def test_components_need_two_processes_and_drop_bad_values():
    assert noise.components([1.0, 2.0, 3.0], [0, 0, 0]) is None
    assert noise.components([1.0, 2.0], [0, 1]) is None  # no within-process dof
    c = noise.components([1.0, 1.1, 0.0, 2.0, 2.2, float("nan")], [0, 0, 0, 1, 1, 1])
    assert c is not None and c.values == 4
    with pytest.raises(ValueError):
        noise.components([1.0, 2.0], [0])


def test_relative_mde_is_the_t_test_compare_runs():
    """expm1((t_{1-a/2} + t_power)·se) with the pooled-variance dof; with a threshold, the CI
    must clear it too (decision.detectable_change)."""
    got = noise.relative_mde(0.1, 5, 0.1, 5, 0.05)
    t = stats._sps().t
    z = t.ppf(0.975, 8) + t.ppf(0.8, 8)
    assert got == pytest.approx(math.expm1(z * 0.1 * math.sqrt(2 / 5)))
    assert noise.relative_mde(0.1, 20, 0.1, 20, 0.05) < got  # more processes, smaller MDE
    assert noise.relative_mde(0.1, 5, 0.1, 5, 0.05, threshold=0.03) > got
    assert noise.relative_mde(0.1, 1, 0.1, 1, 0.05) == math.inf  # nothing measures the spread


def test_replicates_for_mde_is_the_fewest_that_meets_the_target():
    for sd, target, k in [(0.05, 0.06, 8), (0.2, 0.1, 8), (0.01, 0.06, 1), (0.1, 0.2, 3)]:
        n = noise.replicates_for_mde(sd, target, 0.05 / k, threshold=0.03)
        assert noise.relative_mde(sd, n, sd, n, 0.05 / k, threshold=0.03) <= target
        if n > 2:
            assert noise.relative_mde(sd, n - 1, sd, n - 1, 0.05 / k, threshold=0.03) > target
    # a target at the threshold itself can never be met (the CI must clear it): the cap
    assert noise.replicates_for_mde(0.05, 0.03, 0.05, threshold=0.03) == noise.MAX_REPLICATES


def _result(rng, processes, between=0.1, within=0.03):
    r = Result(kind="throughput")
    for name, base in (("step", 0.02), ("backward", 0.01), ("residual", 0.0001)):
        values, ids = replicated(rng, processes, 20, between, within, base)
        role = {"step": "total", "residual": "residual"}.get(name, "stage")
        meta = {"group": "train.bs8", "role": role, "stage": name}
        rep = ids.tolist() if processes > 1 else None
        r.add_metric(Metric(f"train.bs8.{name}", "s", False, values, replicate=rep, meta=meta))
    return r


def test_result_noise_states_the_mde_compare_will_use():
    rng = np.random.default_rng(3)
    a, b = _result(rng, 8), _result(rng, 8)
    doc = result_noise(a, CFG)
    assert set(doc) == {"train.bs8.step", "train.bs8.backward"}  # residuals are not judged
    rec = doc["train.bs8.backward"]
    # gatekeeping: the step is its own family, the stages after it another (k = 1 each here)
    assert rec["metrics_judged"] == 1 and rec["decidable"] and rec["processes"] == 8
    sd = rec["process_sd"]
    assert rec["mde"] == pytest.approx(noise.relative_mde(sd, 8, sd, 8, CFG.alpha, threshold=0.03))
    # compare of two such results states its MDE by the same formula from both sides' noise
    c = cmp.compare_results(a, b, CFG)
    m = {x.name: x for x in c.metrics}["train.bs8.backward"]
    sd_b = result_noise(b, CFG)["train.bs8.backward"]["process_sd"]
    # (rel: compare logs each process's median, components take the median of the logs)
    expected = noise.relative_mde(sd, 8, sd_b, 8, CFG.alpha, threshold=0.03)
    assert m.mde == pytest.approx(expected, rel=1e-4)
    sides = m.level["noise_components"]
    assert sides["old"]["process_sd"] == pytest.approx(sd)
    assert result_noise(_result(rng, 1), CFG) == {}


def test_summary_advice_is_a_count_that_decides_and_meets_its_target():
    rng = np.random.default_rng(4)
    values, ids = replicated(rng, 5, 10, 0.05, 0.02)
    rec = noise.summary(values, ids.tolist(), alpha=0.05, k=8, threshold=0.03)
    assert rec is not None and rec["decidable"] and rec["replicates_to_decide"] == 2
    assert rec["target"] == 0.06
    n, sd = rec["replicates_for_target"], rec["process_sd"]
    assert noise.relative_mde(sd, n, sd, n, 0.05 / 8, threshold=0.03) <= 0.06


def test_throughput_output_shows_the_mde_per_stage_compactly():
    from pathlib import Path

    from rich.console import Console

    from mlbaseline.cli.throughput import noise_lines, summary_table
    from mlbaseline.results import load_result

    golden = Path(__file__).resolve().parent / "golden" / "signals"
    r = load_result(golden / "replicated_noisy.json")
    console = Console(width=80, record=True)
    console.print(summary_table(r))
    text = console.export_text()
    row = next(line for line in text.splitlines() if "MDE ±" in line)
    bwd = r.data["noise"]["train.bs8.backward"]["mde"]
    assert f"{bwd * 100:.0f}" in [c.strip() for c in row.split("│")]
    assert all(len(line) <= 80 for line in text.splitlines())
    (line,) = noise_lines(r)
    assert "6 processes" in line and f"{r.data['noise']['train.bs8.step']['mde']:.0%}" in line
    one = load_result(golden / "one_process.json")
    console = Console(width=80, record=True)
    console.print(summary_table(one))
    assert noise_lines(one) == [] and "MDE" not in console.export_text()


def test_the_control_kernel_is_not_counted_among_the_judged_metrics():
    from mlbaseline.comparison.noise import judged_names
    from mlbaseline.measure.control import ControlKernel

    r = _result(np.random.default_rng(5), 6)
    kernel = ControlKernel(1, work=lambda: None)
    kernel.sample()
    r.add_metric(kernel.metric())
    assert judged_names(r) == ["train.bs8.step", "train.bs8.backward"]
    assert result_noise(r, CFG)["train.bs8.step"]["metrics_judged"] == 1  # the totals


def test_replicates_for_mde_bisection_matches_stepping():
    """Bisection gives the same count as stepping up one by one (the definition)."""
    from mlbaseline.stats import noise as sn

    def stepping(sd: float, target: float, alpha: float) -> int:
        n = 2
        while (
            n < sn.MAX_REPLICATES and sn.relative_mde(sd, n, sd, n, alpha, threshold=0.03) > target
        ):
            n += 1
        return n

    for sd in (0.0, 0.002, 0.02, 0.1):
        for target in (0.04, 0.08):
            for k in (1, 8):
                alpha = 0.05 / k
                got = sn.replicates_for_mde(sd, target, alpha, threshold=0.03)
                assert got == stepping(sd, target, alpha)
