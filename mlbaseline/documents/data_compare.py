"""The `data` payload of a `compare` result: `comparison.model.Comparison.to_dict()`.

Per judged metric the statistics (`stats.verdicts.MetricComparison`), how it was labelled, the
level it was judged at (`comparison.noise.Level.to_dict`, absent when no level was set) and,
when drift adjusted the verdict, the raw figures; per group the attribution of its total to the
stages; the environment and config rows that differ; the drift record and the headline. A
statistic that came out NaN is written as null (results.py), so derived floats are `Num`.
"""

from __future__ import annotations

from pydantic import Field

from mlbaseline.documents.base import FiniteFloat, JsonValue, Strict

Num = FiniteFloat | None  # a derived figure: null where it was NaN or could not be computed


class Side(Strict):
    """One compared file: its label (the path as given), kind, creation time and status."""

    label: str
    kind: str
    created_at: str
    status: str


class Settings(Strict):
    """`comparison.judge._settings`: the compare config used, and the methods in words."""

    alpha: FiniteFloat
    threshold: FiniteFloat
    thresholds: dict[str, FiniteFloat]  # metric glob -> its threshold
    confidence: FiniteFloat
    n_resamples: int
    min_replicates: int
    fail_on: str
    seed: int
    test: str
    interval: str
    attribution: str
    name_share: FiniteFloat
    threshold_rule: str
    mde_rule: str
    memory_threshold: Num = None  # compare.memory_threshold (issue 28)
    memory_rule: str | None = None


class Difference(Strict):
    """One environment or config key whose value differs. The values are whatever the two
    files hold under that key (a fingerprint string, a config list or mapping, null when one
    side lacks it): free-form JSON by nature, so typed as JSON values, not as a schema."""

    key: str
    old: JsonValue
    new: JsonValue


class NoiseComponents(Strict):
    """`stats.noise.Components` of one side."""

    processes: int
    values: int
    within_sd: FiniteFloat
    between_sd: FiniteFloat
    between_share: FiniteFloat
    process_sd: FiniteFloat
    dof: int


class Raw(Strict):
    """The unadjusted figures of a drift-adjusted metric (`judge._with_raw`)."""

    ratio: Num
    ci_low: Num
    ci_high: Num
    change: Num
    verdict: str
    median_old: Num
    median_new: Num


class MetricRow(Strict):
    """`MetricResult.to_dict()`: one judged metric."""

    metric: str
    n_old: int
    n_new: int
    median_old: Num
    median_new: Num
    ratio: Num
    ci_low: Num
    ci_high: Num
    p_value: Num
    p_adjusted: Num
    change: Num
    verdict: str
    mde: Num = None
    samples_needed: int | None = None
    higher_is_better: bool
    threshold: FiniteFloat
    test: str
    gated: bool
    alpha_eff: FiniteFloat
    df: Num = None
    sd_log: Num = None
    unit: str
    basis: str
    group: str | None = None
    role: str | None = None
    stage: str | None = None
    mismatch: bool
    # the level judged at (comparison.noise.Level.to_dict); absent when none was set
    level: str | None = None
    threshold_source: str | None = None
    threshold_floor: Num = None
    between_process_noise: Num = None
    noise_dof: int | None = None
    processes: list[int] | None = None
    between_sitting_noise: Num = None
    sitting_bar: Num = None
    noise_components: dict[str, NoiseComponents | None] | None = None  # "old"/"new"
    memory_spread: Num = None  # a memory metric: the relative spread its CI was widened by
    memory_base: Num = None  # and the bytes its change was measured against
    reason: str | None = None
    drift_adjusted: bool
    raw: Raw | None = None


class StageRow(Strict):
    """`StageDelta.to_dict()`: one stage (or the residual) of an attribution."""

    stage: str
    metric: str | None
    median_old: Num
    median_new: Num
    delta: Num
    delta_ci: list[Num] | None
    pct_of_old_total: Num
    pct_ci: list[Num] | None
    share: Num
    verdict: str | None
    named: bool


class Attribution(Strict):
    """`Attribution.to_dict()`: how a group's total moved and which stages explain it."""

    group: str
    total: str
    unit: str
    median_old: Num
    median_new: Num
    delta: Num
    total_verdict: str | None
    change: Num
    change_ci: list[Num] | None
    stages: list[StageRow]
    residual: StageRow | None
    unassigned: Num
    named: list[str]
    offsets: list[str]
    residual_named: bool
    method: str
    name_share: FiniteFloat
    sentence: str


class MemoryStage(Strict):
    """One stage's held memory in `comparison.memory.attribute_memory`."""

    stage: str | None
    metric: str
    memory: str | None
    median_old: Num
    median_new: Num
    delta: Num
    change: Num
    scaled: bool = False  # the change is a share of more than median(old) (1 MiB, the peak)
    verdict: str
    named: bool


class MemoryGroup(Strict):
    """`comparison.memory.attribute_memory`: a group's peak memory and the stage named."""

    group: str
    peak: str | None
    peak_verdict: str | None
    peak_change: Num
    peak_ci: list[Num] | None
    stages: list[MemoryStage]
    named: str | None
    sentence: str


class Skipped(Strict):
    metric: str
    code: str
    reason: str


class Finding(Strict):
    """One warning of the comparison (`judge._warnings`): a code, its message, and the fields
    of that code."""

    code: str
    message: str
    ratio: Num = None  # common_mode_drift
    group: str | None = None  # machine_drift
    factor: Num = None
    side: str | None = None  # contaminated_input
    metrics: list[str] | None = None  # insufficient_data
    repeats: int | None = None


class ControlShift(Strict):
    """`drift.ControlShift.to_dict()`: the control kernel's own comparison."""

    metric: str
    ratio: Num
    ci: list[Num]
    verdict: str
    basis: str
    applied: bool
    moved: bool
    reason: str


class Signature(Strict):
    """`drift.Signature.to_dict()`: a group whose stages all moved by one factor."""

    group: str
    factor: FiniteFloat
    stages: list[str]
    message: str


class Drift(Strict):
    control: ControlShift | None = None
    adjusted: bool = False
    signatures: list[Signature] = Field(default_factory=list)
    machine_drift: bool = False
    method: str | None = None


class Headline(Strict):
    """`comparison.headline.headline`: the one line a reader sees first."""

    metric: str
    verdict: str
    change: Num
    ci_low: Num
    ci_high: Num
    mde: Num = None
    processes: list[int | None] | None = None
    text: str


class Data(Strict):
    """`data` of a compare result."""

    old: Side
    new: Side
    kind: str
    settings: Settings
    comparable: bool
    allow_mismatch: bool
    same_input: bool
    blocking_differences: list[Difference]
    informational_differences: list[Difference]
    allowed_differences: list[Difference] = Field(default_factory=list)
    metrics: list[MetricRow]
    attribution: list[Attribution]
    only_old: list[str]
    only_new: list[str]
    skipped: list[Skipped]
    counts: dict[str, int]  # verdict -> how many metrics got it
    warnings: list[Finding]
    drift: Drift
    memory: list[MemoryGroup] = Field(default_factory=list)  # issue 28
    fail_on: str
    failing: list[str]
    failed: bool
    headline: Headline | None = None  # None without any judged metric
