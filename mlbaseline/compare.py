"""Compare two results: comparability, per-metric two-gate verdicts, per-stage attribution.

No torch and no I/O here (the runner loads the files). The pieces, in order:

1. **Comparability.** Every key of ``environment["blocking"]`` (GPU model, driver major, CUDA,
   cuDNN, torch, device, dtype, CPU model on CPU runs, the golden parameters, the subset
   manifest hash) must be equal on both sides, else :class:`NotComparableError` (exit 3) with
   the diff, unless ``allow_mismatch`` — then every verdict is marked. Informational keys and
   config values that differ are listed, never blocking.
2. **Matching.** Metrics are matched by name; names on one side only are listed, not compared.
   A metric whose unit or direction changed, that has no samples, negative values, or a zero
   old median (no ratio) is listed as skipped with the reason. Residuals (``role: residual``)
   are not judged: their median sits near 0 and may be negative, so a ratio means nothing;
   they appear in the attribution instead.
3. **Unit of comparison.** When both sides have at least ``min_replicates`` distinct replicate
   ids (fresh processes, ``--repeats``) for a metric, the per-replicate medians are compared;
   otherwise the in-process samples, with a warning that process-to-process noise is not
   covered.
4. **Verdicts** (:func:`mlbaseline.stats.compare_samples`): two-sided Mann-Whitney U, Holm over
   all judged metrics, AND the seeded bootstrap CI of the ratio of medians beyond the practical
   threshold. Thresholds: ``compare.thresholds`` by exact metric name, then by glob pattern
   (``latency.*.request``), else ``compare.threshold``.
5. **Attribution**, per group with a ``role: total`` metric (see "Metric naming" in the rules):
   each stage's delta = median(new) − median(old) of that stage, with a percentile-bootstrap CI
   of that *difference of medians* (both sides resampled independently; old and new are
   separate runs, so there are no pairs to difference), the delta as % of the old total (CI
   scaled by the old total's median), its share of the total's delta, and the residual. A
   stage is *named* as explaining the change when the total is regressed/improved and either
   the stage's own verdict is regressed/improved in the same direction, or its share of the
   total delta is at least :data:`NAME_SHARE` and its delta CI excludes 0 on that side.

``--fail-on`` (see :data:`FAIL_ON_HELP`): ``regressed`` fails on any regressed metric; ``any``
fails unless every metric of OLD is shown unchanged or improved in NEW (so also on inconclusive,
skipped and missing-from-NEW metrics); ``never`` reports only.

Rendering works from the plain comparison document (``Comparison.to_dict()``, also stored as
``data`` of a ``compare`` result file), so ``mlb report --compare`` can call
:func:`render_markdown` on a loaded file without recomputing anything.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.config import CompareConfig, flatten
from mlbaseline.errors import ConfigError, NotComparableError
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import KINDS, Check, Metric, Result

COMPARABLE_KINDS = tuple(k for k in KINDS if k != "compare")
FAIL_ON = ("regressed", "any", "never")
FAIL_ON_HELP = {
    "regressed": "exit 1 when any metric is regressed",
    "any": (
        "exit 1 unless every metric of OLD is unchanged or improved in NEW "
        "(regressed, inconclusive, not compared or missing from NEW all fail)"
    ),
    "never": "always exit 0 after a comparison (report only; 2 and 3 still apply)",
}
# A stage whose own verdict did not cross the gates is still named when it carries at least this
# share of the total's delta and its delta CI excludes zero (e.g. a tiny, noisy stage that grew).
NAME_SHARE = 0.25
ATTRIBUTION_METHOD = (
    "delta = median(new) - median(old) per stage; 95% CI: percentile bootstrap of the "
    "difference of medians, old and new resampled independently (unpaired runs)"
)
# skip reasons; every one but "residual" fails --fail-on any
SKIP_RESIDUAL = "residual"


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class MetricResult:
    """One judged metric: the statistics, plus what was compared and how it was labelled."""

    stat: stats.MetricComparison
    unit: str
    basis: str  # "replicates" (per-replicate medians) | "samples" (in-process samples)
    meta: dict[str, Any]
    mismatch: bool  # judged although a blocking key differs (--allow-mismatch)

    @property
    def name(self) -> str:
        return self.stat.metric

    @property
    def verdict(self) -> str:
        return self.stat.verdict

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.stat.to_dict(),
            "unit": self.unit,
            "basis": self.basis,
            "group": self.meta.get("group"),
            "role": self.meta.get("role"),
            "stage": self.meta.get("stage"),
            "mismatch": self.mismatch,
        }


@dataclass(frozen=True)
class StageDelta:
    """One row of an attribution table (a stage, or the residual)."""

    stage: str
    metric: str | None
    median_old: float
    median_new: float
    delta: float  # seconds (the group's unit)
    ci: tuple[float, float] | None  # CI of delta; None for a residual computed by difference
    pct_of_total: float  # delta / median(old total)
    share: float | None  # delta / total delta; None when the total did not move at all
    verdict: str | None  # the stage's own verdict; None when not judged
    named: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "metric": self.metric,
            "median_old": self.median_old,
            "median_new": self.median_new,
            "delta": self.delta,
            "delta_ci": list(self.ci) if self.ci else None,
            "pct_of_old_total": self.pct_of_total,
            "pct_ci": None,  # filled by Attribution.to_dict (needs the old total)
            "share": self.share,
            "verdict": self.verdict,
            "named": self.named,
        }


@dataclass(frozen=True)
class Attribution:
    """How a group's total moved and which stages explain it."""

    group: str
    total: str
    unit: str
    median_old: float
    median_new: float
    delta: float
    total_verdict: str | None
    change: float | None  # ratio - 1 of the total (from its verdict), None if not judged
    change_ci: tuple[float, float] | None
    stages: list[StageDelta]
    residual: StageDelta | None
    unassigned: float  # total delta - sum(stage deltas) - residual delta (medians do not add)
    named: list[str]
    offsets: list[str]  # stages that moved against the total (regressed while it improved, …)
    residual_named: bool
    sentence: str

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for row in [*self.stages, *([self.residual] if self.residual else [])]:
            d = row.to_dict()
            if row.ci is not None and self.median_old > 0:
                d["pct_ci"] = [row.ci[0] / self.median_old, row.ci[1] / self.median_old]
            rows.append(d)
        return {
            "group": self.group,
            "total": self.total,
            "unit": self.unit,
            "median_old": self.median_old,
            "median_new": self.median_new,
            "delta": self.delta,
            "total_verdict": self.total_verdict,
            "change": self.change,
            "change_ci": list(self.change_ci) if self.change_ci else None,
            "stages": rows[: len(self.stages)],
            "residual": rows[len(self.stages)] if self.residual else None,
            "unassigned": self.unassigned,
            "named": self.named,
            "offsets": self.offsets,
            "residual_named": self.residual_named,
            "method": ATTRIBUTION_METHOD,
            "name_share": NAME_SHARE,
            "sentence": self.sentence,
        }


@dataclass
class Comparison:
    """Everything `mlb compare` found; `to_dict()` is the comparison document."""

    old: dict[str, Any]  # {"label", "kind", "created_at", "status"}
    new: dict[str, Any]
    kind: str
    settings: dict[str, Any]
    metrics: list[MetricResult] = field(default_factory=list)
    attribution: list[Attribution] = field(default_factory=list)
    only_old: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"metric", "code", "reason"}
    blocking_differences: list[dict[str, Any]] = field(default_factory=list)
    informational_differences: list[dict[str, Any]] = field(default_factory=list)
    allow_mismatch: bool = False
    same_input: bool = False
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fail_on(self) -> str:
        return str(self.settings["fail_on"])

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(stats.VERDICTS, 0)
        for m in self.metrics:
            out[m.verdict] += 1
        return out

    def failing(self) -> list[str]:
        """Names that make the comparison fail under its fail_on (see :data:`FAIL_ON_HELP`)."""
        return failing_names(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "old": self.old,
            "new": self.new,
            "kind": self.kind,
            "settings": self.settings,
            "comparable": not self.blocking_differences,
            "allow_mismatch": self.allow_mismatch,
            "same_input": self.same_input,
            "blocking_differences": self.blocking_differences,
            "informational_differences": self.informational_differences,
            "metrics": [m.to_dict() for m in self.metrics],
            "attribution": [a.to_dict() for a in self.attribution],
            "only_old": self.only_old,
            "only_new": self.only_new,
            "skipped": self.skipped,
            "counts": self.counts(),
            "warnings": self.warnings,
        }
        fails = failing_names(doc)
        doc["fail_on"] = self.fail_on
        doc["failing"] = fails
        doc["failed"] = bool(fails)
        return doc


def failing_names(doc: Mapping[str, Any]) -> list[str]:
    """Metric names that fail the gate of ``doc["settings"]["fail_on"]``."""
    fail_on = doc["settings"]["fail_on"]
    if fail_on == "never":
        return []
    bad = {"regressed"} if fail_on == "regressed" else {"regressed", "inconclusive"}
    out = [m["metric"] for m in doc["metrics"] if m["verdict"] in bad]
    if fail_on == "any":
        out += [s["metric"] for s in doc["skipped"] if s["code"] != SKIP_RESIDUAL]
        out += list(doc["only_old"])
    return out


# --------------------------------------------------------------------------- comparability


_ABSENT = "(absent)"


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    a, b = flatten(old), flatten(new)
    rows = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if va != vb:
            rows.append({"key": key, "old": va, "new": vb})
    return rows


def environment_differences(
    old: Result, new: Result
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(blocking, informational) differences as rows {key, old, new}; informational also
    lists config values that differ, prefixed ``config.``."""
    env_old, env_new = old.environment or {}, new.environment or {}
    blocking = _diff(env_old.get("blocking") or {}, env_new.get("blocking") or {})
    info = _diff(env_old.get("informational") or {}, env_new.get("informational") or {})
    info += [
        {**row, "key": f"config.{row['key']}"} for row in _diff(old.config or {}, new.config or {})
    ]
    return blocking, info


def describe_differences(rows: Iterable[Mapping[str, Any]]) -> str:
    """'gpu_name: A100 → H100; torch: 2.3.0 → 2.4.0'."""
    return "; ".join(f"{r['key']}: {r['old']} → {r['new']}" for r in rows)


# --------------------------------------------------------------------------- thresholds


def threshold_for(name: str, cfg: CompareConfig) -> float:
    """Practical threshold of a metric: exact name in compare.thresholds, then the first glob
    pattern that matches (dict order), else compare.threshold."""
    if name in cfg.thresholds:
        return float(cfg.thresholds[name])
    for pattern, value in cfg.thresholds.items():
        if fnmatch.fnmatchcase(name, pattern):
            return float(value)
    return float(cfg.threshold)


def _check_thresholds(cfg: CompareConfig) -> None:
    for key, value in cfg.thresholds.items():
        if not (isinstance(value, (int, float)) and 0 < value < 1):
            raise ConfigError(
                f"compare.thresholds.{key}: must be a fraction in (0, 1), got {value}"
            )


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class _Pair:
    """The two samples compared for one metric, already reduced to the comparison unit."""

    old: np.ndarray
    new: np.ndarray
    basis: str
    n_replicates: tuple[int, int]


def replicate_medians(values: np.ndarray, replicate: Sequence[int]) -> np.ndarray:
    """Median of each replicate's values, in replicate-id order."""
    ids = np.asarray(replicate)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    chunks = np.split(values[order], starts[1:])
    return np.array([np.median(c) for c in chunks], dtype=np.float64)


def _n_replicates(metric: Metric) -> int:
    return len(set(metric.replicate)) if metric.replicate else 0


def _pair(old: Metric, new: Metric, min_replicates: int) -> _Pair:
    a = np.asarray(old.values, dtype=np.float64)
    b = np.asarray(new.values, dtype=np.float64)
    ra, rb = _n_replicates(old), _n_replicates(new)
    if ra >= min_replicates and rb >= min_replicates:
        assert old.replicate is not None and new.replicate is not None
        a, b = replicate_medians(a, old.replicate), replicate_medians(b, new.replicate)
        return _Pair(a, b, "replicates", (ra, rb))
    return _Pair(a, b, "samples", (ra, rb))


def _skip_reason(old: Metric, new: Metric, pair: _Pair | None) -> tuple[str, str] | None:
    """(code, reason) when this metric cannot be judged by a ratio of medians."""
    if old.unit != new.unit:
        return "unit", f"unit changed ({old.unit} → {new.unit})"
    if old.higher_is_better != new.higher_is_better:
        return "direction", "higher_is_better changed"
    if pair is None or pair.old.size == 0 or pair.new.size == 0:
        return "empty", "no samples on one side"
    if (new.meta or old.meta).get("role") == "residual":
        return SKIP_RESIDUAL, "residual: not judged (median near 0), see the attribution"
    if np.any(pair.old < 0) or np.any(pair.new < 0):
        return "negative", "negative values: a ratio of medians is undefined"
    if np.median(pair.old) == 0 and (np.any(pair.old != 0) or np.any(pair.new != 0)):
        return "zero", "median of OLD is 0: a ratio of medians is undefined"
    return None


def difference_of_medians_ci(
    old: np.ndarray,
    new: np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = stats.DEFAULT_SEED,
) -> tuple[float, float, float]:
    """median(new) − median(old) with a seeded, unpaired two-sample percentile-bootstrap CI:
    each side is resampled on its own. Uses the stats module's exact order-statistic sampler
    of bootstrap medians (O(n log n + n_resamples), so 100k samples take milliseconds).

    Returns (difference, low, high)."""
    diff = float(np.median(new) - np.median(old))
    rep_old, rep_new = stats._median_replicates(old, new, n_resamples, seed)
    lo, hi = stats._interval(rep_new - rep_old, confidence)
    return diff, lo, hi


# --------------------------------------------------------------------------- the comparison


def _label(result: Result, label: str) -> dict[str, Any]:
    return {
        "label": label,
        "kind": result.kind,
        "created_at": result.created_at,
        "status": result.status,
    }


def _settings(cfg: CompareConfig, seed: int) -> dict[str, Any]:
    return {
        "alpha": cfg.alpha,
        "threshold": cfg.threshold,
        "thresholds": dict(cfg.thresholds),
        "confidence": cfg.confidence,
        "n_resamples": cfg.n_resamples,
        "min_replicates": cfg.min_replicates,
        "fail_on": cfg.fail_on,
        "seed": seed,
        "test": "two-sided Mann-Whitney U, Holm-corrected across all judged metrics",
        "interval": "percentile bootstrap CI of the ratio of medians new/old",
        "attribution": ATTRIBUTION_METHOD,
        "name_share": NAME_SHARE,
    }


def _min_mann_whitney_p(n1: int, n2: int) -> float:
    """Smallest p the test can give for n1 vs n2 values: that of two fully separated samples
    (computed by the same function, so exact/asymptotic method choice matches; for small tie-free
    samples it is 2 / C(n1+n2, n1))."""
    return stats.mann_whitney_p(np.arange(n1, dtype=float), np.arange(n1, n1 + n2, dtype=float))


def compare_results(
    old: Result,
    new: Result,
    cfg: CompareConfig,
    *,
    old_label: str = "OLD",
    new_label: str = "NEW",
    allow_mismatch: bool = False,
    same_input: bool = False,
    seed: int = stats.DEFAULT_SEED,
    progress: Progress | None = None,
) -> Comparison:
    """Compare two loaded results (see the module docstring for every rule).

    Raises NotComparableError (exit 3) for a blocking difference without ``allow_mismatch``
    or when the two results share no metric; ConfigError for a bad threshold."""
    _check_thresholds(cfg)
    progress = progress or NullProgress()
    blocking, info = environment_differences(old, new)
    if blocking and not allow_mismatch:
        raise NotComparableError(
            f"{old_label} and {new_label} are not comparable: blocking environment keys differ "
            f"({describe_differences(blocking)}); use --allow-mismatch to compare anyway"
        )
    comp = Comparison(
        old=_label(old, old_label),
        new=_label(new, new_label),
        kind=new.kind,
        settings=_settings(cfg, seed),
        blocking_differences=blocking,
        informational_differences=info,
        allow_mismatch=allow_mismatch,
        same_input=same_input,
    )
    names_old, names_new = list(old.measurements), set(new.measurements)
    common = [n for n in names_old if n in names_new]
    comp.only_old = [n for n in names_old if n not in names_new]
    comp.only_new = [n for n in new.measurements if n not in set(names_old)]
    if not common:
        raise NotComparableError(
            f"{old_label} and {new_label} have no metric in common (the workload changed?): "
            f"{len(comp.only_old)} only in {old_label}, {len(comp.only_new)} only in {new_label}"
        )
    pairs: dict[str, _Pair] = {}
    judged: dict[str, _Pair] = {}
    with progress.task("comparing metrics", total=len(common)) as task:
        for name in common:
            m_old, m_new = old.measurements[name], new.measurements[name]
            pair = _pair(m_old, m_new, cfg.min_replicates) if m_old.unit == m_new.unit else None
            reason = _skip_reason(m_old, m_new, pair)
            if pair is not None and pair.old.size and pair.new.size:
                pairs[name] = pair  # attribution uses every valid sample, judged or not
            if reason is None:
                judged[name] = pair  # type: ignore[assignment]
            else:
                comp.skipped.append({"metric": name, "code": reason[0], "reason": reason[1]})
        comp.metrics = _judge(judged, old, new, cfg, seed, bool(blocking))
        task.advance(len(common))
    comp.attribution = _attribute_all(old, new, pairs, comp.metrics, cfg, seed)
    comp.warnings = _warnings(comp, old, new, judged, cfg)
    return comp


def _judge(
    judged: Mapping[str, _Pair],
    old: Result,
    new: Result,
    cfg: CompareConfig,
    seed: int,
    mismatch: bool,
) -> list[MetricResult]:
    if not judged:
        return []
    inputs = {
        name: (p.old, p.new, new.measurements[name].higher_is_better) for name, p in judged.items()
    }
    thresholds = {name: threshold_for(name, cfg) for name in judged}
    stat_rows = stats.compare_samples(
        inputs,
        threshold=thresholds,
        alpha=cfg.alpha,
        confidence=cfg.confidence,
        n_resamples=cfg.n_resamples,
        seed=seed,
    )
    out = []
    for row in stat_rows:
        metric = new.measurements[row.metric]
        meta = metric.meta or old.measurements[row.metric].meta or {}
        basis = judged[row.metric].basis
        out.append(MetricResult(row, metric.unit, basis, dict(meta), mismatch))
    return out


def _warnings(
    comp: Comparison, old: Result, new: Result, judged: Mapping[str, _Pair], cfg: CompareConfig
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if comp.same_input:
        out.append(
            {
                "code": "same_input",
                "message": "comparing a result with itself (same file or identical content): "
                "this says nothing about a change, only how wide the CIs of these samples are",
            }
        )
    if comp.blocking_differences:
        out.append(
            {
                "code": "mismatch_allowed",
                "message": "not comparable, compared anyway (--allow-mismatch); every verdict "
                f"is marked: {describe_differences(comp.blocking_differences)}",
            }
        )
    for label, result in ((comp.old["label"], old), (comp.new["label"], new)):
        if result.status != "complete":
            note = "; ".join(result.notes)
            msg = f"{label} is marked {result.status}" + (f" ({note})" if note else "")
            out.append({"code": "incomplete_input", "message": msg})
    in_process = [n for n, p in judged.items() if p.basis == "samples"]
    if in_process:
        out.append(
            {
                "code": "in_process_samples",
                "message": f"{len(in_process)} of {len(judged)} metrics compared on in-process "
                f"samples (fewer than {cfg.min_replicates} process-level replicates on a side): "
                "process-to-process noise is not covered; measure with --repeats "
                f"{cfg.min_replicates} or more",
                "metrics": in_process,
            }
        )
    out += _holm_floor_warning(judged, cfg)
    if comp.only_old or comp.only_new:
        out.append(
            {
                "code": "unmatched_metrics",
                "message": f"{len(comp.only_old)} metrics only in {comp.old['label']}, "
                f"{len(comp.only_new)} only in {comp.new['label']}: listed, not compared",
            }
        )
    return out


def _holm_floor_warning(judged: Mapping[str, _Pair], cfg: CompareConfig) -> list[dict[str, Any]]:
    """Few replicates cap how small a Mann-Whitney p can get; say when Holm makes every
    significant verdict impossible instead of letting 'inconclusive' look like bad luck."""
    m = len(judged)
    blocked = [
        name
        for name, p in judged.items()
        if max(p.old.size, p.new.size) <= 30
        and m * _min_mann_whitney_p(p.old.size, p.new.size) >= cfg.alpha
    ]
    if not blocked:
        return []
    p = judged[blocked[0]]
    floor = _min_mann_whitney_p(p.old.size, p.new.size)
    return [
        {
            "code": "holm_floor",
            "message": f"{len(blocked)} metrics cannot reach significance: with "
            f"{p.old.size} vs {p.new.size} values the smallest Mann-Whitney p is {floor:.2g}, "
            f"×{m} metrics (Holm) ≥ α={cfg.alpha}; add replicates or compare fewer metrics",
            "metrics": blocked,
        }
    ]


# --------------------------------------------------------------------------- attribution


def _groups(result: Result) -> dict[str, str]:
    """group prefix -> name of its total metric."""
    return {
        m.meta["group"]: name
        for name, m in result.measurements.items()
        if m.meta.get("role") == "total" and m.meta.get("group")
    }


def _members(result: Result, group: str, role: str) -> dict[str, str]:
    """stage (or 'residual') -> metric name, for one group."""
    out = {}
    for name, m in result.measurements.items():
        if m.meta.get("group") == group and m.meta.get("role") == role:
            out[m.meta.get("stage", role) if role == "stage" else role] = name
    return out


def _attribute_all(
    old: Result,
    new: Result,
    pairs: Mapping[str, _Pair],
    metrics: Sequence[MetricResult],
    cfg: CompareConfig,
    seed: int,
) -> list[Attribution]:
    by_name = {m.name: m for m in metrics}
    out = []
    for group, total in _groups(new).items():
        if total not in pairs or _groups(old).get(group) != total:
            continue
        order = list(new.measurements[total].meta.get("stages") or [])
        stages = _members(new, group, "stage")
        order += [s for s in stages if s not in order]
        stage_metrics = [(s, stages[s]) for s in order if s in stages and stages[s] in pairs]
        if not stage_metrics:
            continue  # a total without stages (infer.bs64.batch): nothing to attribute
        residual = _members(new, group, "residual").get("residual")
        out.append(
            _attribute(
                group, total, stage_metrics, residual if residual in pairs else None,
                pairs, by_name, new.measurements[total].unit, cfg, seed,
            )
        )  # fmt: skip
    return out


def _stage_row(
    stage: str,
    metric: str,
    pair: _Pair,
    old_total: float,
    total_delta: float,
    verdict: str | None,
    cfg: CompareConfig,
    seed: int,
) -> StageDelta:
    diff, lo, hi = difference_of_medians_ci(
        pair.old, pair.new, cfg.confidence, cfg.n_resamples, seed
    )
    return StageDelta(
        stage=stage,
        metric=metric,
        median_old=float(np.median(pair.old)),
        median_new=float(np.median(pair.new)),
        delta=diff,
        ci=(lo, hi),
        pct_of_total=diff / old_total if old_total else math.nan,
        share=diff / total_delta if total_delta else None,
        verdict=verdict,
    )


def _is_named(row: StageDelta, direction: int, moved: str) -> bool:
    """Named: its own verdict crossed both gates the same way as the total, or it carries
    >= NAME_SHARE of the total delta with a CI that excludes zero on the total's side."""
    if row.verdict == moved:
        return True
    if row.share is None or row.share < NAME_SHARE or row.ci is None:
        return False
    return row.ci[0] > 0 if direction > 0 else row.ci[1] < 0


def _attribute(
    group: str,
    total: str,
    stage_metrics: Sequence[tuple[str, str]],
    residual: str | None,
    pairs: Mapping[str, _Pair],
    by_name: Mapping[str, MetricResult],
    unit: str,
    cfg: CompareConfig,
    seed: int,
) -> Attribution:
    tp = pairs[total]
    old_total, new_total = float(np.median(tp.old)), float(np.median(tp.new))
    delta = new_total - old_total
    total_res = by_name.get(total)
    total_verdict = total_res.verdict if total_res else None
    rows = []
    for stage, metric in stage_metrics:
        verdict = by_name[metric].verdict if metric in by_name else None
        rows.append(_stage_row(stage, metric, pairs[metric], old_total, delta, verdict, cfg, seed))
    stage_sum = sum(r.delta for r in rows)
    if residual is not None:
        res_row = _stage_row(
            "residual", residual, pairs[residual], old_total, delta, None, cfg, seed
        )
    else:  # no measured residual: the closing term, total minus stages, without a CI
        closing = delta - stage_sum
        res_row = StageDelta(
            "residual", None, math.nan, math.nan, closing, None,
            closing / old_total if old_total else math.nan,
            closing / delta if delta else None, None,
        )  # fmt: skip
    # with a measured residual, medians need not add up: say how much is left unassigned
    unassigned = delta - stage_sum - res_row.delta if residual is not None else 0.0
    moved = total_verdict if total_verdict in ("regressed", "improved") else None
    direction = 1 if delta > 0 else -1
    named, offsets = [], []
    if moved:
        opposite = "improved" if moved == "regressed" else "regressed"
        rows = [replace(r, named=_is_named(r, direction, moved)) for r in rows]
        named = [r.stage for r in sorted(rows, key=lambda r: -(r.share or 0)) if r.named]
        offsets = [r.stage for r in rows if r.verdict == opposite]
    residual_named = bool(moved) and _is_named(res_row, direction, "")
    attribution = Attribution(
        group=group,
        total=total,
        unit=unit,
        median_old=old_total,
        median_new=new_total,
        delta=delta,
        total_verdict=total_verdict,
        change=total_res.stat.change if total_res else None,
        change_ci=(total_res.stat.ci_low - 1, total_res.stat.ci_high - 1) if total_res else None,
        stages=rows,
        residual=res_row,
        unassigned=unassigned,
        named=named,
        offsets=offsets,
        residual_named=residual_named,
        sentence="",
    )
    return replace(attribution, sentence=attribution_sentence(attribution))


def _percent(x: float, digits: int) -> float:
    v = round(100 * x, digits)
    return 0.0 if v == 0 else v  # no "-0.0"


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{_percent(x, 1):+.1f}%"


def _interval_pct(ci: Sequence[float | None] | None, digits: int = 1) -> str:
    if not ci or any(v is None or not math.isfinite(v) for v in ci):
        return "[n/a]"
    lo, hi = (_percent(v, digits) for v in ci)  # type: ignore[arg-type]
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _join(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def attribution_sentence(a: Attribution) -> str:
    """'train.bs64.step +18.2% [16.9, 19.4]; backward explains 91% of it'."""
    head = f"{a.total} {_pct(a.change)} {_interval_pct(a.change_ci)}"
    by_stage = {r.stage: r for r in a.stages}
    if a.total_verdict not in ("regressed", "improved"):
        verdict = a.total_verdict or "not judged"
        moved = [r for r in a.stages if r.verdict in ("regressed", "improved")]
        tail = ""
        if moved:
            tail = "; stages that moved: " + _join(
                [f"{r.stage} {_pct(r.pct_of_total)} of the total ({r.verdict})" for r in moved]
            )
        return f"{a.total} {verdict}: {_pct(a.change)} {_interval_pct(a.change_ci)}{tail}"
    parts = [f"{s} {_share(by_stage[s].share)}" for s in a.named]
    if len(parts) == 1:
        text = f"{head}; {a.named[0]} explains {_share(by_stage[a.named[0]].share)} of it"
    elif parts:
        text = f"{head}; {_join(parts)} of it"
    else:
        largest = max(a.stages, key=lambda r: r.share or 0, default=None)
        hint = f" (largest share: {largest.stage} {_share(largest.share)})" if largest else ""
        text = f"{head}; no single stage explains it{hint}"
    if a.residual_named and a.residual is not None:
        text += (
            f"; the residual (time outside the measured stages) carries {_share(a.residual.share)}"
        )
    if a.offsets:
        text += "; partly offset by " + _join(
            [f"{s} ({_pct(by_stage[s].pct_of_total)} of the total)" for s in a.offsets]
        )
    return text


def _share(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{_percent(x, 0):.0f}%"


# --------------------------------------------------------------------------- the result file


def to_result(comparison: Comparison, config: dict[str, Any]) -> Result:
    """A result of kind "compare": the comparison document in ``data``, one verdict check per
    judged metric (fail/warn/pass by fail_on), plus fail checks for what --fail-on any counts."""
    doc = comparison.to_dict()
    result = Result(kind="compare", config=config, data=doc)
    failing = set(doc["failing"])
    mark = "[not comparable] " if comparison.allow_mismatch and doc["blocking_differences"] else ""
    for m in doc["metrics"]:
        name = m["metric"]
        if name in failing:
            status = "fail"
        elif m["verdict"] in ("regressed", "inconclusive"):
            status = "warn"
        else:
            status = "pass"
        result.verdict.checks.append(
            Check(
                name=f"compare.{name}",
                status=status,
                value=m["change"],
                threshold=m["threshold"],
                message=f"{mark}{verdict_text(m)}",
            )
        )
    for s in doc["skipped"]:
        status = "fail" if s["metric"] in failing else "skip"
        result.verdict.checks.append(Check(f"compare.{s['metric']}", status, message=s["reason"]))
    for name in doc["only_old"]:
        status = "fail" if name in failing else "skip"
        msg = f"only in {doc['old']['label']}"
        result.verdict.checks.append(Check(f"compare.{name}", status, message=msg))
    for w in doc["warnings"]:
        result.warn(
            w["code"], w["message"], **{k: v for k, v in w.items() if k not in ("code", "message")}
        )
    return result


# --------------------------------------------------------------------------- rendering


def format_value(value: float | None, unit: str, signed: bool = False) -> str:
    """A value with its unit scaled for reading: 0.0123 s -> '12.3 ms', 2.5e6 B -> '2.38 MiB'."""
    if value is None or not math.isfinite(value):
        return "n/a"
    sign = "+" if signed and value > 0 else ""
    if unit == "s":
        for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(value) >= scale:
                return f"{sign}{value / scale:.3g} {suffix}"
        return f"{sign}{value / 1e-9:.3g} ns"
    if unit == "B":
        for scale, suffix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= scale:
                return f"{sign}{value / scale:.3g} {suffix}"
        return f"{sign}{value:.0f} B"
    if unit == "items/s":  # the metric name says what the items are; keep tables narrow
        return f"{sign}{value:.4g}/s"
    return f"{sign}{value:.4g} {unit}".rstrip()


def format_p(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def verdict_text(m: Mapping[str, Any]) -> str:
    """'regressed +6.0% [4.9, 7.1], p=<0.001' / 'inconclusive (MDE 4.2%, ~120 samples/side)'."""
    ci = _interval_pct([_minus1(m["ci_low"]), _minus1(m["ci_high"])])
    text = f"{m['verdict']} {_pct(m['change'])} {ci}, p(Holm)={format_p(m['p_adjusted'])}"
    if m["verdict"] == "inconclusive" and m.get("samples_needed"):
        unit = "replicates" if m.get("basis") == "replicates" else "samples"
        mde = m.get("mde")
        mde_text = f"MDE {100 * mde:.1f}%, " if mde is not None and math.isfinite(mde) else ""
        text += f" ({mde_text}~{m['samples_needed']} {unit}/side would settle it)"
    return text


def _minus1(x: float | None) -> float | None:
    return None if x is None else x - 1.0


def table_rows(doc: Mapping[str, Any]) -> list[dict[str, str]]:
    """Display rows (metric, old, new, delta, ci, p, verdict) from a comparison document;
    shared by the rich table and the Markdown table."""
    mark = " †" if doc.get("blocking_differences") else ""
    rows = []
    for m in doc["metrics"]:
        verdict = m["verdict"]
        if verdict == "inconclusive" and m.get("samples_needed"):
            unit = "repl." if m.get("basis") == "replicates" else "samples"
            verdict += f" (need ~{m['samples_needed']} {unit}/side)"
        rows.append(
            {
                "metric": m["metric"],
                "old": format_value(m["median_old"], m["unit"]),
                "new": format_value(m["median_new"], m["unit"]),
                "delta": _pct(m["change"]),
                "ci": _interval_pct([_minus1(m["ci_low"]), _minus1(m["ci_high"])]),
                "p": format_p(m["p_adjusted"]),
                "verdict": verdict + mark,
                "status": m["verdict"],
            }
        )
    return rows


def stage_rows(a: Mapping[str, Any]) -> list[dict[str, str]]:
    """Display rows of one group's attribution table (stages, then the residual)."""
    unit = a["unit"]
    out = []
    for row in [*a["stages"], *([a["residual"]] if a.get("residual") else [])]:
        ci = row.get("pct_ci")
        out.append(
            {
                "stage": row["stage"] + (" ◀" if row.get("named") else ""),
                "old": format_value(row["median_old"], unit),
                "new": format_value(row["median_new"], unit),
                "delta": format_value(row["delta"], unit, signed=True),
                "pct": _pct(row["pct_of_old_total"]),
                "ci": _interval_pct(ci, 2) if ci else "—",
                "share": _share(row["share"]),
                "verdict": row.get("verdict") or "—",
            }
        )
    return out


def summary_line(doc: Mapping[str, Any]) -> str:
    c = doc["counts"]
    gate = "FAIL" if doc["failed"] else "pass"
    return (
        f"{c['regressed']} regressed, {c['improved']} improved, {c['unchanged']} unchanged, "
        f"{c['inconclusive']} inconclusive; --fail-on {doc['fail_on']}: {gate}"
    )


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(comparison: Comparison | Mapping[str, Any]) -> str:
    """Markdown for a CI comment: a heading with the gate outcome, the per-metric table (metric,
    old, new, Δ%, CI, p after Holm, verdict), each group's attribution sentence and stage table,
    then unmatched/skipped metrics, warnings and differences in the environment.

    Accepts a :class:`Comparison` or its document (``to_dict()``, or ``data`` of a ``compare``
    result file), so ``mlb report --compare`` can render a saved comparison as is."""
    doc = comparison.to_dict() if isinstance(comparison, Comparison) else comparison
    conf = round(100 * doc["settings"]["confidence"])
    lines = [
        f"## mlb compare: `{doc['old']['label']}` → `{doc['new']['label']}` ({doc['kind']})",
        "",
        f"**{summary_line(doc)}**",
        "",
    ]
    if doc.get("blocking_differences"):
        lines += [
            "> **Not comparable** — compared anyway (`--allow-mismatch`); every verdict is "
            f"marked †. Blocking differences: {describe_differences(doc['blocking_differences'])}",
            "",
        ]
    headers = ["metric", "old", "new", "Δ%", f"{conf}% CI", "p (Holm)", "verdict"]
    keys = ["metric", "old", "new", "delta", "ci", "p", "verdict"]
    rows = [[f"`{r['metric']}`", *(r[k] for k in keys[1:])] for r in table_rows(doc)]
    lines += _md_table(headers, rows, "lrrrrrl")
    for a in doc["attribution"]:
        lines += ["", f"**Attribution ({a['group']}):** {a['sentence']}", ""]
        headers = [
            "stage",
            "old",
            "new",
            "Δ",
            "Δ % of old total",
            f"{conf}% CI",
            "share",
            "verdict",
        ]
        srows = [list(r.values()) for r in stage_rows(a)]
        lines += _md_table(headers, srows, "lrrrrrrl")
    lines += _md_notes(doc)
    return "\n".join(lines) + "\n"


def _md_notes(doc: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    notes = []
    if doc["only_old"]:
        notes.append(
            f"Only in `{doc['old']['label']}` (not compared): {', '.join(doc['only_old'])}"
        )
    if doc["only_new"]:
        notes.append(
            f"Only in `{doc['new']['label']}` (not compared): {', '.join(doc['only_new'])}"
        )
    notes += [f"Not judged: `{s['metric']}` — {s['reason']}" for s in doc["skipped"]]
    notes += [f"⚠ {w['message']}" for w in doc["warnings"]]
    info = doc.get("informational_differences") or []
    if info:
        shown = describe_differences(info[:10])
        more = f" (and {len(info) - 10} more)" if len(info) > 10 else ""
        notes.append(f"Informational differences: {shown}{more}")
    s = doc["settings"]
    notes.append(
        f"Method: {s['test']}, α={s['alpha']}; {s['interval']} ({s['n_resamples']} resamples, "
        f"seed {s['seed']}); practical threshold ±{100 * s['threshold']:g}%"
        + (" with per-metric overrides" if s["thresholds"] else "")
        + f"; attribution: {s['attribution']}."
    )
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return lines
