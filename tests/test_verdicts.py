"""stats.verdicts: the MDE of a compared metric comes from the standard errors its verdict
computed (no second bootstrap), and compare reports that same figure."""

from __future__ import annotations

import math

import numpy as np
from test_compare_honesty import CFG, noisy_result

from mlbaseline import comparison as cmp
from mlbaseline import stats


def _samples(shift: float, seed: int = 7) -> dict[str, tuple[np.ndarray, np.ndarray, bool]]:
    rng = np.random.default_rng(seed)
    old = rng.lognormal(0.0, 0.05, 30)
    return {"m": (old, rng.lognormal(0.0, 0.05, 30) * shift, False)}


def test_median_mde_is_the_inconclusive_verdicts_own_figure():
    (row,) = stats.compare_samples(_samples(1.03), n_resamples=500)
    assert row.verdict == "inconclusive" and row.mde is not None
    assert stats.median_mde(row, 0.05) == row.mde
    assert row.se_old > 0 and row.se_new > 0


def test_median_mde_of_a_settled_verdict_equals_a_fresh_bootstrap():
    """What compare computed before: a second bootstrap of the medians, same seed."""
    metrics = _samples(1.5)
    (row,) = stats.compare_samples(metrics, n_resamples=500, seed=42)
    assert row.verdict == "regressed" and row.mde is None
    old, new, _ = metrics["m"]
    rep_old, rep_new = stats._median_replicates(old, new, 500, 42)
    s_old = row.ratio * float(np.std(rep_old, ddof=1)) * math.sqrt(old.size) / row.median_old
    s_new = float(np.std(rep_new, ddof=1)) * math.sqrt(new.size) / row.median_old
    expected = stats.min_detectable_effect(s_old, old.size, s_new, new.size, alpha=0.05)
    assert stats.median_mde(row, 0.05) == expected


def test_standard_errors_stay_out_of_the_result_file():
    (row,) = stats.compare_samples(_samples(1.03), n_resamples=200)
    assert "se_old" not in row.to_dict() and "se_new" not in row.to_dict()


def test_compare_reports_the_verdicts_mde_at_the_in_process_level():
    rng = np.random.default_rng(4)
    old = noisy_result(rng, 3, between=0.03)
    c = cmp.compare_results(old, noisy_result(rng, 1, shift=2.0, between=0.0), CFG)
    for m in c.metrics:
        assert m.basis == "samples" and m.verdict == "regressed"
        bar = m.level["noise_bar"]
        assert m.mde == max(stats.median_mde(m.stat, CFG.alpha), bar)


def test_resolved_threshold_is_an_exact_name_lookup():
    table = {"train.*": 0.5, "a.b": 0.2}
    assert stats._resolved_threshold("a.b", table) == 0.2
    assert stats._resolved_threshold("train.x", table) == stats.DEFAULT_THRESHOLD
    assert stats._resolved_threshold("anything", 0.3) == 0.3
