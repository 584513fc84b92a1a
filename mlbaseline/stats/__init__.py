"""Statistics for baselines and comparisons: pure NumPy/SciPy, no torch, no I/O.

Every function is deterministic (resampling is seeded, default seed 42) and its docstring names
the statistical method it implements. Location and spread lead with the median and IQR; mean,
standard deviation and CV are reported beside them. Percentiles use NumPy's ``"linear"`` method
(Hyndman & Fan type 7), recorded in results as :data:`PERCENTILE_METHOD`.

A comparison has two gates (see DESIGN.md, "Statistics"): a two-sided test (Student's t on the logs
of process figures, or Mann-Whitney U where the counts allow) after gatekeeping — the headline
metric first at the full alpha, its stages after it with Holm — AND a confidence interval of the
ratio lying entirely beyond the practical threshold; :func:`decision.decide` is the one function
that turns them into a verdict.
"""

# One package, five modules: the core (summaries, bootstrap, tests, KL, MDE), stability
# warnings and warm-up detection, per-metric verdicts, paired (A/B per-pair ratio)
# statistics, and noise (variance components and the MDE they imply; used as stats.noise).
# The rest is re-exported here so that `from mlbaseline import stats; stats.X` keeps working.
from mlbaseline.stats import decision, noise  # noqa: F401  (stats.decision.decide, stats.noise…)
from mlbaseline.stats.core import (  # noqa: F401
    DEFAULT_SEED,
    DEFAULT_THRESHOLD,
    KL_VARIANCE_FLOOR,
    OUTLIER_IQR_FACTOR,
    PERCENTILE_FLOORS,
    PERCENTILE_METHOD,
    VERDICTS,
    ArrayLike,
    Summary,
    _as_feature_matrix,
    _as_sample,
    _bootstrap_quantiles,
    _check_confidence,
    _check_q,
    _check_ratio_inputs,
    _interval,
    _kl_normal,
    _lerp,
    _median_replicates,
    _sps,
    bootstrap_ci,
    gaussian_kl,
    gaussian_kl_features,
    holm,
    mann_whitney_p,
    median_ci,
    min_detectable_effect,
    percentile,
    percentile_ci,
    percentile_key,
    percentiles,
    ratio_of_medians_ci,
    relative_t_half_width,
    replicates_for_half_width,
    samples_needed,
    summarize,
    z_value,
)
from mlbaseline.stats.decision import INSUFFICIENT, decide  # noqa: F401
from mlbaseline.stats.paired import (  # noqa: F401
    PAIRED_THRESHOLD,
    PAIRED_VERDICTS,
    PairedStage,
    compare_paired,
    log_ratios,
    overall_verdict,
    paired_mde,
    paired_verdict,
    wilcoxon_p,
)
from mlbaseline.stats.stability import (  # noqa: F401
    StatWarning,
    _first_outlier_warning,
    _iqr_warning,
    detect_warmup,
    percentile_floor_warnings,
    split_half_settled,
    stability_warnings,
    windows_stable,
)
from mlbaseline.stats.verdicts import (  # noqa: F401
    MetricComparison,
    _all_zero,
    _Raw,
    _raw_comparison,
    _resolved_threshold,
    _zero_raw,
    compare_samples,
)
