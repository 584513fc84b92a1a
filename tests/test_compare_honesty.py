"""mlb compare on a noisy machine (issues 15 and 24): a verdict is only as strong as the noise
measured between processes (one process a side: insufficient data), never weaker than its
evidence (a few replicates can decide), every recommended count can decide, and the threshold
is the configured floor (or the history's sitting bar), the test itself carrying the noise."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mlbaseline import comparison as cmp
from mlbaseline.cli import app
from mlbaseline.comparison.noise import SOURCE_FLOOR
from mlbaseline.config import CompareConfig
from mlbaseline.report import comparison as shown
from mlbaseline.results import Metric, Result, write_result
from mlbaseline.stats import decision

ENV = {"blocking": {"device": "cpu", "cpu_model": "X"}, "informational": {}}
NAMES = ("forward", "backward", "optimizer")
CFG = CompareConfig(n_resamples=500)


def noisy_result(
    rng: np.random.Generator,
    processes: int,
    shift: float = 1.0,
    between: float = 0.20,
    within: float = 0.02,
    n_per: int = 40,
) -> Result:
    """Three stage metrics measured in `processes` fresh processes: each process has its own
    level (lognormal, `between` CV, shared by its stages, as on a shared machine) and its
    in-process samples vary by `within` around it. One process: no replicate ids, as a run
    without --repeats writes it."""
    r = Result(kind="throughput", environment=json.loads(json.dumps(ENV)))
    levels = rng.lognormal(0.0, between, processes) * shift
    rep = np.repeat(np.arange(processes), n_per).tolist() if processes > 1 else None
    for name, base in zip(NAMES, (0.03, 0.055, 0.007), strict=True):
        values = np.concatenate([base * lv * rng.lognormal(0.0, within, n_per) for lv in levels])
        meta = {"group": "train.bs64", "role": "stage", "stage": name}
        r.add_metric(Metric(f"train.bs64.{name}", "s", False, values, replicate=rep, meta=meta))
    return r


def by_name(c: cmp.Comparison) -> dict[str, dict]:
    return {m.name: m.to_dict() for m in c.metrics}


# --------------------------------------------------------------------------- (a) levels


def test_aa_single_process_pairs_never_regress():
    """A/A pairs of single-process runs: the process levels differ by ~20%, the in-process
    samples are tight, so an in-process test would be 'significant'; never a verdict."""
    rng = np.random.default_rng(15)
    for _ in range(7):
        c = cmp.compare_results(noisy_result(rng, 1), noisy_result(rng, 1), CFG)
        for m in by_name(c).values():
            assert m["verdict"] == decision.INSUFFICIENT, m
            assert m["level"] == "in-process" and m["between_process_noise"] is None
            assert m["threshold_source"] == SOURCE_FLOOR
        assert "insufficient_data" in {w["code"] for w in c.warnings}


def test_large_in_process_shift_is_insufficient_data_with_a_reason():
    rng = np.random.default_rng(1)
    old, new = noisy_result(rng, 1, between=0.0), noisy_result(rng, 1, shift=1.3, between=0.0)
    c = cmp.compare_results(old, new, CFG)
    for m in by_name(c).values():
        assert m["verdict"] == decision.INSUFFICIENT and m["samples_needed"] is None
        assert m["reason"].startswith("one process a side: nothing measured the noise")
        assert "--repeats 2 or more" in m["reason"]
        assert m["mde"] is None  # unknown at the level that matters
        assert shown.mde_text(m) == "—"
        assert m["change"] == pytest.approx(0.3, abs=0.05)  # the figures are still shown
    warning = next(w for w in c.warnings if w["code"] == "insufficient_data")
    assert warning["metrics"] == list(by_name(c)) and warning["repeats"] == 2


def test_cli_single_process_shift_passes_regressed_fails_any_and_says_why(tmp_path):
    rng = np.random.default_rng(2)
    old = write_result(noisy_result(rng, 1, between=0.0), tmp_path / "old.json")
    new = write_result(noisy_result(rng, 1, shift=1.3, between=0.0), tmp_path / "new.json")
    args = ["compare", str(old), str(new), "--set", "compare.n_resamples=500"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr
    first = res.stderr.splitlines()[0]
    assert "insufficient data: one process a side" in first  # the headline, before any table
    assert "0 regressed" in res.stderr and "3 insufficient data" in res.stderr
    res = CliRunner().invoke(app, [*args, "--fail-on", "any"])
    assert res.exit_code == 1, res.stderr
    res = CliRunner().invoke(app, [*args, "--json"])
    data = json.loads(res.stdout)["data"]
    assert data["counts"]["regressed"] == 0 and not data["failed"]
    assert data["counts"][decision.INSUFFICIENT] == 3


def test_replicates_with_a_big_real_shift_regress():
    rng = np.random.default_rng(3)
    old = noisy_result(rng, 8, between=0.05, n_per=10)
    new = noisy_result(rng, 8, shift=1.5, between=0.05, n_per=10)
    c = cmp.compare_results(old, new, CFG)
    for m in by_name(c).values():
        assert m["level"] == "process" and m["verdict"] == "regressed", m
        assert m["reason"] is None and m["mde"] > 0 and m["test"] == "t-log"
    assert c.failing()


def test_one_process_against_replicates_is_judged_by_their_spread():
    """One side with replicates measures the noise between processes; the other side's one
    process is one figure against it (the spread of the replicated side, n - 1 dof)."""
    rng = np.random.default_rng(4)
    old = noisy_result(rng, 3, between=0.03)
    small = cmp.compare_results(old, noisy_result(rng, 1, shift=1.02, between=0.0), CFG)
    big = cmp.compare_results(old, noisy_result(rng, 1, shift=2.0, between=0.0), CFG)
    for m in by_name(small).values():
        assert m["level"] == "process" and m["processes"] == [3, 1]
        assert m["verdict"] in ("inconclusive", "unchanged"), m
    for m in by_name(big).values():
        assert m["verdict"] == "regressed" and m["reason"] is None, m
        assert m["n_old"] == 3 and m["n_new"] == 1


def test_five_against_five_can_decide_where_a_rank_test_could_not():
    """5 vs 5 replicates under Holm over 8 metrics: the smallest Mann-Whitney p (0.0079) could
    never pass 0.05/8; the t-test on log process figures can."""
    rng = np.random.default_rng(6)
    old, new = noisy_result(rng, 5, between=0.05), noisy_result(rng, 5, shift=1.5, between=0.05)
    for name in ("a", "b", "c", "d", "e"):  # 8 metrics in one family
        for r, f in ((old, 1.0), (new, 1.5)):
            values = np.concatenate([rng.lognormal(0, 0.02, 40) * f for _ in range(5)])
            r.add_metric(Metric(f"x.{name}", "s", False, values, replicate=r.measurements[
                "train.bs64.forward"].replicate))  # fmt: skip
    c = cmp.compare_results(old, new, CFG)
    assert len(c.metrics) == 8
    assert all(m.verdict == "regressed" for m in c.metrics), [m.verdict for m in c.metrics]


# --------------------------------------------------------------------------- (b) reachable


def test_every_recommendation_in_a_comparison_can_decide():
    rng = np.random.default_rng(5)
    c = cmp.compare_results(noisy_result(rng, 3, n_per=8), noisy_result(rng, 3, n_per=8), CFG)
    for m in by_name(c).values():
        if m["samples_needed"]:
            n = m["samples_needed"]
            assert n > 3 and decision.t_dof(n, n) >= 1, m
            assert shown.verdict_reason(m) == f"need ~{n} repl./side"


# --------------------------------------------------------------------------- (c) threshold


def test_threshold_is_the_floor_the_test_carries_the_noise():
    """The between-process noise is measured by the test (pooled variance of the logs), not
    added to the practical threshold: that would count it twice and hide real changes."""
    rng = np.random.default_rng(7)
    noisy = cmp.compare_results(
        noisy_result(rng, 6, between=0.15, n_per=10),
        noisy_result(rng, 6, between=0.15, n_per=10),
        CFG,
    )
    for m in by_name(noisy).values():
        assert m["between_process_noise"] > 0.03
        assert m["threshold"] == 0.03 and m["threshold_source"] == SOURCE_FLOOR
        assert m["verdict"] != "regressed"
    assert shown.threshold_text(noisy.to_dict()) == "threshold 3% (configured floor)"
    quiet = cmp.compare_results(
        noisy_result(rng, 6, between=0.001, n_per=10),
        noisy_result(rng, 6, between=0.001, n_per=10),
        CompareConfig(n_resamples=500, threshold=0.05),
    )
    for m in by_name(quiet).values():
        assert m["threshold"] == 0.05 and m["threshold_source"] == SOURCE_FLOOR
    assert "threshold 5% (configured floor)" in shown.render_markdown(quiet)


# --------------------------------------------------------------------------- (d) MDE column


def test_mde_column_and_long_reasons_under_the_markdown_table():
    rng = np.random.default_rng(8)
    old, new = noisy_result(rng, 1, between=0.0), noisy_result(rng, 1, shift=1.3, between=0.0)
    md = shown.render_markdown(cmp.compare_results(old, new, CFG))
    assert "| p (adj.) | MDE | verdict |" in md
    assert "| insufficient data [1] |" in md
    assert "\n[1] one process a side: nothing measured the noise between processes" in md


def test_levels_carry_both_sides_variance_components():
    from mlbaseline.stats import noise

    rng = np.random.default_rng(21)
    old, new = noisy_result(rng, 6, between=0.10), noisy_result(rng, 6, between=0.10)
    c = cmp.compare_results(old, new, CFG)
    for m in by_name(c).values():
        sides = m["noise_components"]
        values = old.measurements[m["metric"]]
        expect = noise.components(values.values, values.replicate)
        assert sides["old"] == expect.to_dict() and sides["new"]["processes"] == 6
        assert 0 <= sides["old"]["between_share"] <= 1
