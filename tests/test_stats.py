"""Known-answer, property and calibration tests for mlbaseline.stats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy import stats as sps

from mlbaseline import stats as S

PROPS = settings(derandomize=True, deadline=None, max_examples=100)

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
samples = st.lists(finite, min_size=1, max_size=60)
positive_samples = st.lists(positive, min_size=1, max_size=60)


def _noisy(rng: np.random.Generator, n: int, center: float = 1.0, rel_sd: float = 0.02):
    return center * rng.lognormal(0.0, rel_sd, n)


# --------------------------------------------------------------------------- summary


def test_summarize_hand_computed() -> None:
    s = S.summarize([5, 1, 4, 2, 3])
    assert (s.n, s.median, s.q1, s.q3, s.iqr, s.min, s.max) == (5, 3.0, 2.0, 4.0, 2.0, 1.0, 5.0)
    assert s.mean == 3.0
    assert s.stdev == pytest.approx(math.sqrt(2.5))
    assert s.cv == pytest.approx(math.sqrt(2.5) / 3)
    assert s.to_dict()["iqr"] == 2.0 and set(s.to_dict()) >= {"n", "median", "cv"}


def test_summarize_matches_numpy() -> None:
    x = np.random.default_rng(0).normal(10, 2, 501)
    s = S.summarize(x)
    q1, q3 = np.percentile(x, [25, 75])
    assert s.median == pytest.approx(np.median(x))
    assert s.iqr == pytest.approx(sps.iqr(x))
    assert (s.q1, s.q3) == pytest.approx((q1, q3))
    assert s.stdev == pytest.approx(np.std(x, ddof=1))
    assert s.cv == pytest.approx(np.std(x, ddof=1) / np.mean(x))


def test_summarize_edge_cases() -> None:
    one = S.summarize([7.0])
    assert (one.stdev, one.cv, one.iqr, one.median) == (0.0, 0.0, 0.0, 7.0)
    assert S.summarize([-1.0, 1.0]).cv == 0.0  # mean 0 -> CV 0, not inf
    for bad in ([], [1.0, float("nan")], [float("inf")]):
        with pytest.raises(ValueError):
            S.summarize(bad)


# --------------------------------------------------------------------------- percentiles


def test_percentile_hand_computed() -> None:
    x = [4, 1, 3, 2]
    assert S.percentile(x, 50) == 2.5
    assert S.percentile(x, 90) == pytest.approx(3.7)  # virtual index 2.7 -> 3 + 0.7
    assert S.percentile(x, 0) == 1 and S.percentile(x, 100) == 4
    assert S.percentile(x, 90, method="nearest") == np.percentile(x, 90, method="nearest")
    with pytest.raises(ValueError):
        S.percentile(x, 101)


def test_percentiles_keys_and_values() -> None:
    x = np.arange(1, 101, dtype=float)
    got = S.percentiles(x, (50, 90, 99.9))
    assert list(got) == ["p50", "p90", "p99.9"]
    assert got["p50"] == 50.5 and got["p90"] == pytest.approx(90.1)
    assert S.percentiles(x) == {
        f"p{q}": pytest.approx(np.percentile(x, q)) for q in (50, 90, 95, 99)
    }
    assert S.PERCENTILE_METHOD == "linear"


@PROPS
@given(samples, st.floats(0, 100), st.floats(0, 100))
def test_percentile_monotone_in_q(xs: list[float], q1: float, q2: float) -> None:
    lo, hi = sorted((q1, q2))
    assert S.percentile(xs, lo) <= S.percentile(xs, hi)


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_is_scipy_percentile_bootstrap() -> None:
    x = np.random.default_rng(1).exponential(1.0, 80)
    got = S.bootstrap_ci(x, np.mean, n_resamples=999, seed=7)
    ref = sps.bootstrap(
        (x,), np.mean, n_resamples=999, method="percentile", rng=np.random.default_rng(7)
    ).confidence_interval
    assert got == pytest.approx((ref.low, ref.high))
    assert S.bootstrap_ci(x, np.mean, n_resamples=999, seed=7) == got  # deterministic
    vec = S.bootstrap_ci(x, np.mean, n_resamples=999, seed=7, vectorized=True)
    assert vec == pytest.approx(got, rel=0.05)


def test_bootstrap_ci_degenerate() -> None:
    assert S.bootstrap_ci([3.0, 3.0, 3.0], np.median) == (3.0, 3.0)
    assert S.bootstrap_ci([2.0], np.mean) == (2.0, 2.0)
    assert S.median_ci([5.0] * 10) == (5.0, 5.0)
    assert S.percentile_ci([1.5], 99) == (1.5, 1.5)


def test_order_statistic_sampler_matches_exact_bootstrap_distribution() -> None:
    # Efron (1979): for odd n and distinct values, P(median* <= x_(k)) = P(Binom(n, k/n) >= m),
    # m = (n+1)/2, k = 1..n (1-based). The sampler must reproduce it.
    n = 11
    x = np.arange(n, dtype=float)
    reps = S._bootstrap_quantiles(x, 50.0, 200_000, np.random.default_rng(3))
    m = (n + 1) // 2
    for k in range(1, n + 1):
        exact = sps.binom.sf(m - 1, n, k / n)
        assert np.mean(reps <= x[k - 1]) == pytest.approx(exact, abs=0.004)


@pytest.mark.parametrize("q", [50.0, 90.0, 37.5])
def test_order_statistic_sampler_matches_brute_force_resampling(q: float) -> None:
    rng = np.random.default_rng(11)
    x = np.sort(rng.normal(0, 1, 40))
    fast = S._bootstrap_quantiles(x, q, 20_000, np.random.default_rng(5))
    idx = rng.integers(0, x.size, size=(20_000, x.size))
    brute = np.percentile(x[idx], q, axis=1)
    assert sps.ks_2samp(fast, brute).pvalue > 0.001
    assert np.mean(fast) == pytest.approx(np.mean(brute), abs=0.02)


def test_median_and_percentile_ci_agree_with_scipy_bootstrap() -> None:
    x = np.random.default_rng(2).lognormal(0, 0.3, 300)
    for q, ci in ((50, S.median_ci(x)), (90, S.percentile_ci(x, 90))):

        def stat(a: np.ndarray, axis: int = -1, q: float = q) -> np.ndarray:
            return np.percentile(a, q, axis=axis)

        ref = sps.bootstrap(
            (x,), stat, n_resamples=4000, method="percentile", rng=np.random.default_rng(0)
        ).confidence_interval
        width = ref.high - ref.low
        assert ci[0] == pytest.approx(ref.low, abs=0.15 * width)
        assert ci[1] == pytest.approx(ref.high, abs=0.15 * width)


def test_ratio_of_medians_ci_agrees_with_scipy_two_sample_bootstrap() -> None:
    rng = np.random.default_rng(4)
    old, new = _noisy(rng, 120, 1.0, 0.05), _noisy(rng, 90, 1.1, 0.05)
    ratio, lo, hi = S.ratio_of_medians_ci(old, new)
    assert ratio == pytest.approx(np.median(new) / np.median(old))

    def stat(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(b, axis=axis) / np.median(a, axis=axis)

    ref = sps.bootstrap(
        (old, new), stat, n_resamples=4000, paired=False, method="percentile",
        rng=np.random.default_rng(0),
    ).confidence_interval  # fmt: skip
    width = ref.high - ref.low
    assert lo == pytest.approx(ref.low, abs=0.15 * width)
    assert hi == pytest.approx(ref.high, abs=0.15 * width)
    assert S.ratio_of_medians_ci(old, new) == (ratio, lo, hi)  # seeded


def test_ratio_of_medians_ci_rejects_undefined_ratio() -> None:
    with pytest.raises(ValueError, match="median of old"):
        S.ratio_of_medians_ci([0.0, 0.0, 1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="non-negative"):
        S.ratio_of_medians_ci([1.0, -1.0, 2.0], [1.0, 2.0])


def test_large_samples_are_fast_enough_to_run() -> None:
    # 100k values per side: the order-statistic sampler makes this milliseconds, not seconds.
    rng = np.random.default_rng(9)
    x = _noisy(rng, 100_000)
    ratio, lo, hi = S.ratio_of_medians_ci(x, x * 1.01)
    assert lo < ratio < hi and hi - lo < 0.001


@PROPS
@given(samples)
def test_median_ci_contains_median(xs: list[float]) -> None:
    lo, hi = S.median_ci(xs, n_resamples=500)
    assert lo <= np.median(xs) <= hi


@PROPS
@given(samples, st.sampled_from([5.0, 25.0, 90.0, 99.0]))
def test_percentile_ci_contains_percentile(xs: list[float], q: float) -> None:
    lo, hi = S.percentile_ci(xs, q, n_resamples=500)
    est = S.percentile(xs, q)
    assert lo <= est + 1e-9 * (1 + abs(est)) and est <= hi + 1e-9 * (1 + abs(est))


@PROPS
@given(positive_samples, positive_samples)
def test_ratio_ci_contains_ratio(old: list[float], new: list[float]) -> None:
    ratio, lo, hi = S.ratio_of_medians_ci(old, new, n_resamples=500)
    assert lo <= ratio * (1 + 1e-12) and ratio <= hi * (1 + 1e-12)


# --------------------------------------------------------------------------- Mann-Whitney, Holm


def test_mann_whitney_known_answers() -> None:
    assert S.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert S.mann_whitney_p([3.0] * 5, [3.0] * 7) == 1.0
    rng = np.random.default_rng(5)
    a, b = rng.normal(0, 1, 60), rng.normal(0.3, 1, 70)
    ref = sps.mannwhitneyu(a, b, alternative="two-sided").pvalue
    assert S.mann_whitney_p(a, b) == pytest.approx(ref)
    assert S.mann_whitney_p(b, a) == pytest.approx(ref)  # two-sided: symmetric


def _holm_reference(p: list[float]) -> list[float]:
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def test_holm_hand_computed() -> None:
    assert S.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert S.holm([0.5, 0.6]) == [1.0, 1.0]
    assert S.holm([0.02]) == [0.02]
    assert S.holm([]) == []
    with pytest.raises(ValueError):
        S.holm([0.1, 1.5])


@PROPS
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_holm_properties(p: list[float]) -> None:
    adj = S.holm(p)
    assert adj == pytest.approx(_holm_reference(p))
    assert all(a >= r and a <= 1.0 for a, r in zip(adj, p, strict=True))
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(np.asarray(adj)[order]) >= 0)  # monotone in the raw p-values


# --------------------------------------------------------------------------- KL


def _kl_by_integration(mp: float, vp: float, mq: float, vq: float) -> float:
    p = sps.norm(mp, math.sqrt(vp))
    q = sps.norm(mq, math.sqrt(vq))
    lo, hi = mp - 12 * math.sqrt(vp), mp + 12 * math.sqrt(vp)
    return integrate.quad(lambda t: p.pdf(t) * (p.logpdf(t) - q.logpdf(t)), lo, hi)[0]


def test_gaussian_kl_known_answers() -> None:
    assert S.gaussian_kl(0, 1, 1, 1) == pytest.approx(0.5)
    assert S.gaussian_kl(0, 1, 0, 4) == pytest.approx(0.5 * (math.log(4) + 0.25 - 1))
    assert S.gaussian_kl(2, 3, 2, 3) == 0.0
    for args in ((0.3, 2.0, -1.0, 0.5), (10.0, 0.1, 10.5, 0.2)):
        assert S.gaussian_kl(*args) == pytest.approx(_kl_by_integration(*args), rel=1e-6)


def test_gaussian_kl_variance_floor() -> None:
    assert S.gaussian_kl(1.0, 0.0, 1.0, 0.0) == 0.0  # equal constants
    floored = S.gaussian_kl(1.0, 0.0, 2.0, 0.0)
    assert math.isfinite(floored) and floored == pytest.approx(0.5 / S.KL_VARIANCE_FLOOR)
    with pytest.raises(ValueError):
        S.gaussian_kl(0.0, -1.0, 0.0, 1.0)


def test_gaussian_kl_features() -> None:
    rng = np.random.default_rng(6)
    full = np.column_stack([rng.normal(0, 1, 2000), rng.normal(5e3, 7e2, 2000), np.ones(2000)])
    sub = full[rng.choice(2000, 300, replace=False)]
    per, mean = S.gaussian_kl_features(sub, full)
    expect = [
        S.gaussian_kl(sub[:, j].mean(), sub[:, j].var(), full[:, j].mean(), full[:, j].var())
        for j in range(3)
    ]
    assert per == pytest.approx(expect)
    assert mean == pytest.approx(np.mean(expect))
    assert per[2] == 0.0  # constant feature, identical in both
    scale = np.array([1e-3, 1e4, 1.0])  # scale invariance: units do not matter
    per_scaled, _ = S.gaussian_kl_features(sub * scale, full * scale)
    assert per_scaled[:2] == pytest.approx(per[:2], rel=1e-6)
    one, _ = S.gaussian_kl_features(sub[:, 0], full[:, 0])  # 1-D = one feature
    assert one == pytest.approx(per[:1])
    with pytest.raises(ValueError):
        S.gaussian_kl_features(sub[:, :2], full)


@PROPS
@given(finite, positive, finite, positive)
def test_gaussian_kl_nonnegative(mp: float, vp: float, mq: float, vq: float) -> None:
    assert S.gaussian_kl(mp, vp, mq, vq) >= 0.0
    assert S.gaussian_kl(mp, vp, mp, vp) == 0.0


@PROPS
@given(st.lists(st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=30))
def test_gaussian_kl_features_identical_is_zero(rows: list[list[float]]) -> None:
    x = np.asarray(rows)
    per, mean = S.gaussian_kl_features(x, x)
    assert np.all(per == 0.0) and mean == 0.0


# --------------------------------------------------------------------------- sample sizes


def test_z_value() -> None:
    assert S.z_value() == pytest.approx(1.959963984540054)
    assert S.z_value(0.99) == pytest.approx(2.5758293035489004)
    assert S.z_value(0.9) == pytest.approx(sps.norm.ppf(0.95))
    with pytest.raises(ValueError):
        S.z_value(1.0)


def test_samples_needed_hand_computed() -> None:
    z2 = 1.959963984540054**2
    assert S.samples_needed(0.05, 0.02) == math.ceil(4 * z2 * 0.05**2 / 0.02**2)  # 96.04 -> 97
    assert S.samples_needed(0.05, 0.02) == 97
    assert S.samples_needed(1.0, 2 * 1.959963984540054 / 10) == 100  # exact: no extra sample
    assert S.samples_needed(0.0, 0.1) == 2
    with pytest.raises(ValueError):
        S.samples_needed(1.0, 0.0)


def test_min_detectable_effect_hand_computed() -> None:
    z = 1.959963984540054 + 0.8416212335729143
    assert S.min_detectable_effect(1.0, 100, 1.0, 100) == pytest.approx(z * math.sqrt(0.02))
    assert S.min_detectable_effect(2.0, 50, 1.0, 200, alpha=0.01, power=0.9) == pytest.approx(
        (sps.norm.ppf(0.995) + sps.norm.ppf(0.9)) * math.sqrt(4 / 50 + 1 / 200)
    )


# --------------------------------------------------------------------------- warnings


def test_stability_warnings_quiet_sample() -> None:
    x = _noisy(np.random.default_rng(7), 50, 1.0, 0.01)
    assert S.stability_warnings(x, "m") == []


def test_stability_warnings_codes() -> None:
    x = np.array([1.0, 1.0, 1.5, 1.0, 1.0, 1.5, 1.0, 1.5])  # median 1, IQR 0.5 (50%)
    codes = {w.code: w for w in S.stability_warnings(x, "train.step")}
    assert set(codes) == {"high_cv", "iqr_25"}  # only the highest IQR level
    assert codes["iqr_25"].value == pytest.approx(0.5) and codes["iqr_25"].threshold == 0.25
    assert codes["high_cv"].value == pytest.approx(np.std(x, ddof=1) / np.mean(x))
    mid = np.array([1.0, 1.12, 1.0, 1.12, 1.06, 1.0, 1.12])
    assert [w.code for w in S.stability_warnings(mid, "m", cv_limit=0.5)] == ["iqr_10"]
    d = codes["iqr_25"].to_dict()
    assert d["metric"] == "train.step" and "IQR" in d["message"]


def test_stability_warnings_first_outlier() -> None:
    steady = [1.0, 1.02, 0.99, 1.01, 1.0, 0.98, 1.01, 1.0, 1.02, 0.99]
    w = S.stability_warnings([5.0, *steady], "m", cv_limit=10)
    assert [x.code for x in w] == ["first_outlier"]
    rest = np.asarray(steady)
    assert w[0].value == pytest.approx(5.0 - np.median(rest))
    assert w[0].threshold == pytest.approx(3 * sps.iqr(rest))
    assert S.stability_warnings([1.01, *steady], "m") == []
    assert S.stability_warnings([9.0, 1.0, 1.0], "m", cv_limit=10, iqr_limits=()) == []  # n < 4


def test_percentile_floor_warnings() -> None:
    assert S.PERCENTILE_FLOORS == {90: 64, 95: 130, 99: 662}
    w = S.percentile_floor_warnings(100, "latency.request")
    assert [(x.code, x.threshold) for x in w] == [
        ("percentile_floor", 130.0),
        ("percentile_floor", 662.0),
    ]
    assert "p99" in w[1].message and w[1].value == 100.0
    assert [x.threshold for x in S.percentile_floor_warnings(661, "m")] == [662.0]
    assert S.percentile_floor_warnings(662, "m") == []
    assert len(S.percentile_floor_warnings(10, "m")) == 3
    with pytest.raises(ValueError):
        S.percentile_floor_warnings(10, "m", qs=(75,))


# --------------------------------------------------------------------------- warm-up, stop rule


def test_split_half_settled_rules() -> None:
    assert S.split_half_settled([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01])
    assert not S.split_half_settled([2.0, 1.9, 1.8, 1.7, 1.0, 1.0, 1.0, 1.0])  # medians 1.85/1
    assert not S.split_half_settled([1.0, 1.0, 1.0])  # too few values
    assert S.split_half_settled([0.0, 0.0, 0.0, 0.0])  # equal zero medians agree
    # A running trend under the tolerance but beyond tolerance/2 and significant: not settled.
    trend = [1.0, 1.005, 1.01, 1.015, 1.02, 1.05, 1.055, 1.06, 1.065, 1.07]
    assert abs(np.median(trend[5:]) / np.median(trend[:5]) - 1) < 0.05
    assert not S.split_half_settled(trend)
    assert S.split_half_settled(trend, test_alpha=0)  # test disabled: medians rule only
    # A tiny but perfectly consistent drift (quiet data) does not block forever.
    tiny = [1.0 + 1e-4 * i for i in range(10)]
    assert S.split_half_settled(tiny)


def test_detect_warmup() -> None:
    rng = np.random.default_rng(8)
    steady = list(_noisy(rng, 40, 1.0, 0.01))
    assert S.detect_warmup([3.0, 2.0, 1.5, *steady]) == 3
    assert S.detect_warmup(steady) == 3  # never fewer than min_warmup
    slow = [5.0, 4.0, 3.0, 2.5, 2.0, 1.6, 1.3, *steady]
    k = S.detect_warmup(slow)
    assert k is not None and 5 <= k <= 7
    assert S.detect_warmup(list(np.linspace(10, 1, 40))) is None  # still descending
    assert S.detect_warmup(steady[:13]) == 3 and S.detect_warmup(steady[:13], window=11) is None


def test_windows_stable() -> None:
    rng = np.random.default_rng(9)
    steady = _noisy(rng, 30, 1.0, 0.01)
    assert S.windows_stable(steady)
    assert not S.windows_stable(steady[:29])  # too few values
    drift = np.concatenate([steady[:10], steady[10:20] * 1.1, steady[20:] * 1.2])
    assert not S.windows_stable(drift)
    assert S.windows_stable(drift, tolerance=0.15)
    meds = [1.0, 1.04, 1.08]  # window medians; mean 1.04, spread ±0.04
    x = np.repeat(meds, 10)
    assert S.windows_stable(x, tolerance=0.0385) and not S.windows_stable(x, tolerance=0.038)


# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    ("ci", "p", "hib", "verdict"),
    [
        ((1.10, 1.05, 1.15), 0.001, False, "regressed"),
        ((1.10, 1.05, 1.15), 0.001, True, "improved"),
        ((0.90, 0.85, 0.95), 0.001, False, "improved"),
        ((0.90, 0.85, 0.95), 0.001, True, "regressed"),
        ((1.10, 1.05, 1.15), 0.20, False, "inconclusive"),  # p gate
        ((1.05, 1.02, 1.08), 0.001, False, "inconclusive"),  # CI straddles the band edge
        ((1.01, 0.99, 1.03), 0.001, False, "unchanged"),  # significant but inside the band
        ((1.00, 0.97, 1.03), 0.90, True, "unchanged"),  # edges are inside
        ((1.00, 0.90, 1.10), 0.90, False, "inconclusive"),
    ],
)
def test_decide(ci: tuple[float, float, float], p: float, hib: bool, verdict: str) -> None:
    assert S.decide(ci, p, hib) == verdict


def test_decide_threshold_and_alpha() -> None:
    assert S.decide((1.05, 1.02, 1.08), 0.001, False, threshold=0.01) == "regressed"
    assert S.decide((1.10, 1.05, 1.15), 0.02, False, alpha=0.01) == "inconclusive"


def test_compare_samples_fields_and_holm() -> None:
    rng = np.random.default_rng(10)
    base = _noisy(rng, 60)
    metrics = {
        "train.step": (base, _noisy(rng, 60, 1.10), False),
        "train.forward": (base, _noisy(rng, 60, 1.00), False),
        "throughput": (base, _noisy(rng, 60, 0.90), True),
        "latency.p99": (_noisy(rng, 8, 1.0, 0.2), _noisy(rng, 8, 1.05, 0.2), False),
    }
    res = S.compare_samples(metrics)
    assert [r.metric for r in res] == list(metrics)
    by = {r.metric: r for r in res}
    assert by["train.step"].verdict == "regressed"
    assert by["train.forward"].verdict == "unchanged"
    assert by["throughput"].verdict == "regressed" and by["throughput"].higher_is_better
    inc = by["latency.p99"]
    assert inc.verdict == "inconclusive"
    assert inc.mde is not None and inc.mde > 0.03
    assert inc.samples_needed is not None and inc.samples_needed > 8
    # every tested verdict states what it could see; only an inconclusive one needs more
    assert by["train.step"].mde is not None and by["train.step"].samples_needed is None
    raw = [r.p_value for r in res]
    assert [r.p_adjusted for r in res] == pytest.approx(S.holm(raw))
    for name, (old, new, _) in metrics.items():
        r = by[name]
        if r.test == "rank":  # from RANK_MIN values a side; latency.p99's 8: t on logs
            assert r.p_value == pytest.approx(S.mann_whitney_p(old, new))
            assert (r.ratio, r.ci_low, r.ci_high) == pytest.approx(S.ratio_of_medians_ci(old, new))
        else:
            assert r.test == "t-log" and r.ci_low < r.ratio < r.ci_high
        assert r.change == pytest.approx(r.ratio - 1)
        assert (r.n_old, r.n_new) == (len(old), len(new))
    d = res[0].to_dict()
    assert d["verdict"] == "regressed" and d["threshold"] == 0.03
    assert S.compare_samples(metrics) == res  # deterministic


def test_compare_samples_threshold_override_and_zero_metric() -> None:
    rng = np.random.default_rng(12)
    old, new = _noisy(rng, 80), _noisy(rng, 80, 1.05)
    both = {"a": (old, new, False), "b": (old, new, False), "z": ([0.0] * 5, [0.0] * 5, False)}
    res = {r.metric: r for r in S.compare_samples(both, threshold={"b": 0.10})}
    assert (res["a"].verdict, res["a"].threshold) == ("regressed", 0.03)
    # +5% with a CI that excludes 1, inside a ±10% band: a change, if a small one, so never
    # "unchanged" (issue 24); it is below what this band can call
    assert (res["b"].verdict, res["b"].threshold) == ("inconclusive", 0.10)
    assert (res["z"].verdict, res["z"].ratio, res["z"].p_value) == ("unchanged", 1.0, 1.0)
    with pytest.raises(ValueError, match="bad: "):
        S.compare_samples({"bad": ([0.0, 0.0, 1.0], [1.0], False)})


def test_samples_needed_settles_an_inconclusive_comparison() -> None:
    rng = np.random.default_rng(13)
    first = S.compare_samples({"m": (_noisy(rng, 10, 1, 0.05), _noisy(rng, 10, 1, 0.05), False)})
    assert first[0].verdict == "inconclusive"
    n = first[0].samples_needed
    assert n is not None and 10 < n < 1000
    again = S.compare_samples({"m": (_noisy(rng, n, 1, 0.05), _noisy(rng, n, 1, 0.05), False)})
    assert again[0].verdict == "unchanged"


# --------------------------------------------------------------------------- calibration


def _calls(shift: float, higher_is_better: bool = False, pairs: int = 200) -> list[str]:
    rng = np.random.default_rng(2024)
    verdicts = []
    for _ in range(pairs):
        old, new = _noisy(rng, 50), _noisy(rng, 50, shift)
        metrics = {"m": (old, new, higher_is_better)}
        verdicts.append(S.compare_samples(metrics, n_resamples=500)[0].verdict)
    return verdicts


def test_calibration_aa_pairs_rarely_called() -> None:
    verdicts = _calls(1.0)
    false_calls = sum(v in ("regressed", "improved") for v in verdicts)
    assert false_calls <= 10  # <= 5 % of 200 A/A pairs at 2 % noise
    # a 95% CI excludes 1 in ~5% of A/A pairs by chance: those are inconclusive, not unchanged
    assert verdicts.count("unchanged") >= 180


def test_calibration_ten_percent_slowdown_detected() -> None:
    assert _calls(1.10).count("regressed") >= 190  # >= 95 % of 200 pairs
    assert _calls(0.90, higher_is_better=True).count("regressed") >= 190
