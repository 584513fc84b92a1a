"""Change-point detection on synthetic series with known steps (issue 16's "shown when")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlbaseline.errors import UsageError
from mlbaseline.history.changepoints import Detection, SeriesError, detect

CV = 0.015  # 1.5% noise, the middle of the 1–2% the issue names


def noisy(seed: int, n: int, *, step_at: int | None = None, factor: float = 1.05) -> np.ndarray:
    """n points around 100 ms with CV noise; from `step_at` on, the level is × factor."""
    level = np.full(n, 100.0)
    if step_at is not None:
        level[step_at:] *= factor
    return level * (1.0 + CV * np.random.default_rng(seed).standard_normal(n))


def confirmed(det: Detection) -> list[int]:
    return [c.index for c in det.change_points if c.status == "confirmed"]


def test_a_5pct_step_after_30_points_is_found_within_2_positions():
    hits = 0
    for seed in range(100):
        det = detect(noisy(seed, 45, step_at=30), seed=seed)
        hits += any(abs(i - 30) <= 2 for i in confirmed(det))
    assert hits >= 95, f"found in {hits} of 100 seeds"


def test_a_flat_noisy_series_of_60_has_no_change_point_in_95_of_100_seeds():
    clean = sum(not detect(noisy(seed, 60), seed=seed).change_points for seed in range(100))
    assert clean >= 95, f"no change point in {clean} of 100 seeds"


@pytest.mark.parametrize("seed", range(10))
def test_a_single_run_spike_is_an_outlier_not_a_change_point(seed):
    x = noisy(seed, 60)
    x[30] *= 1.30
    det = detect(x, seed=seed)
    assert 30 in [o.index for o in det.outliers]
    assert [o.value for o in det.outliers if o.index == 30] == [x[30]]
    assert not [c for c in det.change_points if abs(c.index - 30) <= 2]


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("seed", range(10))
def test_a_step_in_the_last_one_or_two_points_is_suspected_not_confirmed(k, seed):
    det = detect(noisy(seed, 60, step_at=60 - k, factor=1.10), seed=seed)
    assert [(c.index, c.status) for c in det.change_points if c.index >= 55] == [
        (60 - k, "suspected")
    ]
    assert not [i for i in confirmed(det) if i >= 55]


def test_a_suspected_step_is_confirmed_once_min_segment_runs_show_it():
    x = noisy(1, 63, step_at=60, factor=1.10)
    assert [(c.index, c.status) for c in detect(x[:61]).change_points] == [(60, "suspected")]
    assert [(c.index, c.status) for c in detect(x).change_points] == [(60, "confirmed")]


def test_a_larger_min_segment_keeps_a_3_point_tail_suspected():
    x = noisy(1, 63, step_at=60, factor=1.10)
    (cp,) = detect(x, min_segment=5).change_points
    assert (cp.index, cp.status) == (60, "suspected")


def test_the_step_size_has_a_bootstrap_ci_around_the_true_step():
    (cp,) = detect(noisy(3, 60, step_at=30), seed=3).change_points
    assert cp.status == "confirmed"
    assert cp.rel_change == pytest.approx(cp.after / cp.before - 1)
    assert 0 < cp.ci_low < 0.05 < cp.ci_high < 0.10
    assert cp.before == pytest.approx(100, rel=0.02)
    assert cp.p_value <= 0.05


def test_two_steps_are_both_found():
    x = np.r_[noisy(1, 30), noisy(2, 30, step_at=0), noisy(3, 30)]
    assert [abs(i - j) <= 2 for i, j in zip(confirmed(detect(x)), [30, 60], strict=True)] == [
        True,
        True,
    ]


def test_a_speedup_is_a_change_point_with_a_negative_step():
    (cp,) = detect(noisy(4, 60, step_at=30, factor=0.95)).change_points
    assert cp.rel_change < 0 and cp.ci_high < 0


def test_the_result_is_deterministic_for_a_seed_and_independent_of_units():
    x = noisy(5, 60, step_at=30)
    assert detect(x, seed=7) == detect(x, seed=7)
    in_s = detect(x / 1000.0, seed=7)
    assert [c.index for c in in_s.change_points] == [
        c.index for c in detect(x, seed=7).change_points
    ]


def test_a_noise_free_step_is_one_change_point_and_its_neighbours_are_not_outliers():
    det = detect([5.0] * 20 + [6.0] * 20)
    assert det.outliers == []
    (cp,) = det.change_points
    assert (cp.index, cp.status, cp.before, cp.after) == (20, "confirmed", 5.0, 6.0)
    assert cp.ci_low == pytest.approx(0.2) and cp.ci_high == pytest.approx(0.2)


def test_a_change_below_a_part_per_million_of_a_noise_free_series_is_not_a_change():
    assert detect([5.0] * 20 + [5.000001] * 20).change_points == []
    assert detect([5.0] * 20 + [5.0001] * 20).change_points != []


def test_whole_millisecond_values_do_not_turn_every_difference_into_a_step():
    # rounding makes most first differences 0, so their MAD is 0: the noise scale falls back
    clean = sum(
        not detect(np.round(noisy(seed, 60) / 3.0), seed=seed).change_points for seed in range(20)
    )
    assert clean >= 19


def test_an_empty_series_gives_an_empty_detection():
    det = detect([])
    assert (det.change_points, det.outliers, det.n) == ([], [], 0)


def test_a_constant_series_has_no_change_point_and_no_outlier():
    det = detect([5.0] * 40)
    assert (det.change_points, det.outliers, det.n) == ([], [], 40)


def test_a_constant_series_with_one_spike_has_one_outlier():
    x = [5.0] * 40
    x[20] = 9.0
    det = detect(x)
    assert [o.index for o in det.outliers] == [20]
    assert det.change_points == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_value_is_a_clear_value_error(bad):
    x = list(noisy(0, 10))
    x[4] = bad
    with pytest.raises(ValueError, match="position 4"):
        detect(x)


@pytest.mark.parametrize(
    ("values", "kwargs", "match"),
    [
        ([[1.0, 2.0]], {}, "one-dimensional"),
        (["a", "b"], {}, "numbers"),
        ([1.0, 2.0], {"alpha": 0.0}, "alpha"),
        ([1.0, 2.0], {"confidence": 1.0}, "confidence"),
        ([1.0, 2.0], {"min_segment": 1}, "min_segment"),
    ],
)
def test_bad_input_is_a_usage_error_for_the_cli(values, kwargs, match):
    with pytest.raises(SeriesError, match=match) as err:
        detect(values, **kwargs)
    assert isinstance(err.value, UsageError) and isinstance(err.value, ValueError)


def test_to_dict_is_strict_json_with_null_for_a_ci_it_cannot_compute():
    x = noisy(2, 40, step_at=39, factor=1.2)
    x[20] *= 1.5
    d = detect(x).to_dict()
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text) == d
    assert d["n"] == 40 and "ruptures" in d["method"]
    assert [o["index"] for o in d["outliers"]] == [20]
    (cp,) = d["change_points"]
    assert (cp["index"], cp["status"], cp["ci_low"], cp["ci_high"]) == (39, "suspected", None, None)
