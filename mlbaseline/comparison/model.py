"""The data types of a comparison, its constants and the --fail-on gate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlbaseline import stats
from mlbaseline.comparison.headline import headline
from mlbaseline.results import KINDS
from mlbaseline.stats.decision import INSUFFICIENT

COMPARABLE_KINDS = tuple(k for k in KINDS if k != "compare")
FAIL_ON = ("regressed", "any", "never")
FAIL_ON_HELP = {
    "regressed": "exit 1 when any metric is regressed",
    "any": (
        "exit 1 unless every metric of OLD is unchanged or improved in NEW "
        "(regressed, inconclusive, insufficient data, not compared or missing from NEW all fail)"
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
    # the level judged at, its threshold and between-process noise (comparison.noise.Level
    # .to_dict()); why a verdict was held back to inconclusive; the MDE at that level
    level: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    mde: float | None = None
    # the unadjusted ratio, CI and verdict when the verdict used drift-adjusted values
    raw: dict[str, Any] | None = None

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
            **self.level,
            "mde": self.mde,
            "reason": self.reason,
            "drift_adjusted": self.raw is not None,
            "raw": self.raw,
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
    # blocking keys that differ and were allowed (--allow KEY): listed, never marking
    allowed_differences: list[dict[str, Any]] = field(default_factory=list)
    allow_mismatch: bool = False
    same_input: bool = False
    warnings: list[dict[str, Any]] = field(default_factory=list)
    # machine drift: the control's shift, whether verdicts were adjusted, drift signatures
    drift: dict[str, Any] = field(default_factory=dict)
    # per group: the peak memory's verdict and the stage whose held memory moved
    # (comparison.memory.attribute_memory)
    memory: list[dict[str, Any]] = field(default_factory=list)

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
            "allowed_differences": self.allowed_differences,
            "metrics": [m.to_dict() for m in self.metrics],
            "attribution": [a.to_dict() for a in self.attribution],
            "only_old": self.only_old,
            "only_new": self.only_new,
            "skipped": self.skipped,
            "counts": self.counts(),
            "warnings": self.warnings,
            "drift": self.drift,
            "memory": self.memory,
        }
        fails = failing_names(doc)
        doc["fail_on"] = self.fail_on
        doc["failing"] = fails
        doc["failed"] = bool(fails)
        doc["headline"] = headline(doc)
        return doc


def failing_names(doc: Mapping[str, Any]) -> list[str]:
    """Metric names that fail the gate of ``doc["settings"]["fail_on"]``."""
    fail_on = doc["settings"]["fail_on"]
    if fail_on == "never":
        return []
    bad = {"regressed"} if fail_on == "regressed" else {"regressed", "inconclusive", INSUFFICIENT}
    out = [m["metric"] for m in doc["metrics"] if m["verdict"] in bad]
    if fail_on == "any":
        out += [s["metric"] for s in doc["skipped"] if s["code"] != SKIP_RESIDUAL]
        out += list(doc["only_old"])
    return out


# --------------------------------------------------------------------------- comparability
