"""stats.verdicts and stats.decision: the test follows the counts (t on logs of process figures
below RANK_MIN a side, Mann-Whitney from there), gatekeeping, and the MDE a verdict states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from test_compare_honesty import CFG, noisy_result

from mlbaseline import comparison as cmp
from mlbaseline import stats
from mlbaseline.stats import decision


def _samples(shift: float, n: int = 30, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    old = rng.lognormal(0.0, 0.05, n)
    return {"m": (old, rng.lognormal(0.0, 0.05, n) * shift, False)}


def test_few_values_use_students_t_on_logs():
    metrics = _samples(1.2, n=5)
    (row,) = stats.compare_samples(metrics)
    old, new, _ = metrics["m"]
    ref = sps.ttest_ind(np.log(new), np.log(old), equal_var=True)
    assert row.test == "t-log" and row.p_value == pytest.approx(ref.pvalue)
    d = np.log(new).mean() - np.log(old).mean()
    assert row.ratio == pytest.approx(math.exp(d))
    ci = ref.confidence_interval(0.95)
    assert (row.ci_low, row.ci_high) == pytest.approx((math.exp(ci.low), math.exp(ci.high)))
    assert row.verdict == "regressed"


def test_many_values_keep_the_rank_test():
    metrics = _samples(1.2, n=decision.RANK_MIN)
    (row,) = stats.compare_samples(metrics, n_resamples=500)
    assert row.test == "rank"
    assert row.p_value == stats.mann_whitney_p(metrics["m"][0], metrics["m"][1])


def test_one_value_a_side_is_insufficient_data_with_its_figures():
    (row,) = stats.compare_samples({"m": ([1.0], [3.0], False)})
    assert row.verdict == decision.INSUFFICIENT and row.test == "none"
    assert row.ratio == 3.0 and row.mde is None and row.samples_needed is None


def test_every_tested_verdict_states_its_mde_and_it_includes_the_threshold():
    for shift in (1.0, 1.03, 1.5):
        (row,) = stats.compare_samples(_samples(shift, n=6))
        assert row.mde is not None and row.mde > row.threshold
    assert decision.detectable_change(0.0, 10, 0.05, 0.03, 0.95) == pytest.approx(0.03)
    small = decision.detectable_change(0.01, 18, 0.05, 0.03, 0.95)
    assert small < decision.detectable_change(0.02, 18, 0.05, 0.03, 0.95)


def test_standard_errors_stay_out_of_the_result_file():
    (row,) = stats.compare_samples(_samples(1.03), n_resamples=200)
    d = row.to_dict()
    assert "se_old" not in d and "se_new" not in d and "se_log" not in d


def test_compare_reports_the_verdicts_own_mde():
    rng = np.random.default_rng(4)
    old = noisy_result(rng, 3, between=0.03)
    c = cmp.compare_results(old, noisy_result(rng, 3, shift=2.0, between=0.03), CFG)
    for m in c.metrics:
        assert m.basis == "replicates" and m.verdict == "regressed"
        assert m.mde == m.stat.mde


def test_gatekeeping_tests_stages_only_after_their_total():
    gate = {"step": None, "fwd": "step", "bwd": "step"}
    moved = decision.gatekeep({"step": 0.01, "fwd": 0.02, "bwd": 0.5}, gate, 0.05)
    assert moved.p_adjusted["step"] == 0.01  # full alpha: one total
    assert moved.p_adjusted["fwd"] == pytest.approx(0.04)  # Holm among the stages
    assert moved.closed == set()
    still = decision.gatekeep({"step": 0.2, "fwd": 0.001, "bwd": 0.5}, gate, 0.05)
    assert still.closed == {"fwd", "bwd"} and still.p_adjusted["fwd"] == 1.0


def test_parallel_gatekeeping_passes_on_the_share_of_totals_that_moved():
    gate = {"t1": None, "t2": None, "s1": "t1", "s2": "t2"}
    g = decision.gatekeep({"t1": 0.001, "t2": 0.4, "s1": 0.01, "s2": 0.001}, gate, 0.05)
    assert g.closed == {"s2"}
    assert g.p_adjusted["s1"] == pytest.approx(0.01 * 2)  # alpha·r/m with r=1, m=2


def test_one_decision_function_for_unpaired_and_paired():
    assert stats.decide is decision.decide
    assert stats.paired_verdict(1.05, 1.10, 0.001, 0.05, 0.01) == "regressed"
    assert stats.paired_verdict(math.nan, 1.1, 0.001, 0.05, 0.01) == "inconclusive"


def test_resolved_threshold_is_an_exact_name_lookup():
    table = {"train.*": 0.5, "a.b": 0.2}
    assert stats._resolved_threshold("a.b", table) == 0.2
    assert stats._resolved_threshold("train.x", table) == stats.DEFAULT_THRESHOLD
    assert stats._resolved_threshold("anything", 0.3) == 0.3
