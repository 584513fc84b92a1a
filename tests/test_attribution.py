"""comparison.attribution: a stage row reports the medians, delta and CI that one call of
medians_and_difference_ci computed."""

from __future__ import annotations

import numpy as np
from test_compare import CAL, GROUP, training_result

from mlbaseline import comparison as cmp
from mlbaseline.comparison import attribution, matching


def test_stage_row_reuses_the_medians_of_the_difference_ci():
    rng = np.random.default_rng(5)
    old, new = rng.lognormal(0.0, 0.1, 41), rng.lognormal(0.1, 0.1, 37)
    pair = matching.Pair(old, new, "samples", (0, 0))
    row = attribution._stage_row("fwd", "g.fwd", pair, 2.0, 0.5, None, CAL, 42)
    _, _, diff, lo, hi = cmp.medians_and_difference_ci(
        old, new, CAL.confidence, CAL.n_resamples, 42
    )
    assert (row.median_old, row.median_new) == (float(np.median(old)), float(np.median(new)))
    assert row.delta == diff and row.ci == (lo, hi)
    assert row.pct_of_total == diff / 2.0 and row.share == diff / 0.5


def test_attribution_rows_state_medians_that_add_to_their_delta():
    rng = np.random.default_rng(6)
    c = cmp.compare_results(training_result(rng), training_result(rng, slow="backward"), CAL)
    (att,) = [a for a in c.attribution if a.group == GROUP]
    for row in [*att.stages, att.residual]:
        assert row.delta == row.median_new - row.median_old
    assert "backward" in att.named
