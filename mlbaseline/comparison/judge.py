"""Compare two loaded results: match their metrics, judge them, attribute, warn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mlbaseline import stats
from mlbaseline.comparison.advice import sides_advice, source_of
from mlbaseline.comparison.attribution import attribute_all
from mlbaseline.comparison.drift import (
    METHOD as DRIFT_METHOD,
)
from mlbaseline.comparison.drift import (
    ControlShift,
    adjusted,
    control_names,
    control_shift,
    signatures,
)
from mlbaseline.comparison.matching import (
    Pair,
    check_thresholds,
    describe_differences,
    environment_differences,
    pair_samples,
    skip_reason,
    split_allowed,
    threshold_for,
)
from mlbaseline.comparison.memory import RULE as MEMORY_RULE
from mlbaseline.comparison.memory import attribute_memory, judge_memory, memory_names
from mlbaseline.comparison.model import ATTRIBUTION_METHOD, NAME_SHARE, Comparison, MetricResult
from mlbaseline.comparison.noise import gates, level_of, sitting_noise
from mlbaseline.config import CompareConfig
from mlbaseline.errors import NotComparableError
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Result

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
        "memory_threshold": cfg.memory_threshold,
        "seed": seed,
        "test": "one figure per process (its median): Student's t on their logs, pooled "
        f"variance (Mann-Whitney U from {stats.decision.RANK_MIN} a side); gatekeeping: each "
        "group's total (the step) first, Holm among the totals at alpha, then its stages and "
        "rate, Holm among them at alpha·r/m (r of m totals moved); one process a side: "
        "insufficient data",
        "interval": "t interval of the ratio of geometric means new/old (percentile bootstrap "
        "CI of the ratio of medians with the rank test)",
        "attribution": ATTRIBUTION_METHOD,
        "name_share": NAME_SHARE,
        "threshold_rule": "max(configured floor, between-sitting bar from the history)",
        "memory_rule": MEMORY_RULE,
        "mde_rule": "the smallest change flagged with 80% power: p < alpha' and the CI beyond "
        "the threshold (stats.decision.detectable_change)",
    }


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
    allow: Sequence[str] = (),
) -> Comparison:
    """Compare two loaded results (see the module docstring for every rule).

    Raises NotComparableError (exit 3) for a blocking difference without ``allow_mismatch``
    or when the two results share no metric; ConfigError for a bad threshold."""
    check_thresholds(cfg)
    progress = progress or NullProgress()
    blocking, info, allowed = _comparable(old, new, old_label, new_label, allow, allow_mismatch)
    comp = Comparison(
        old=_label(old, old_label),
        new=_label(new, new_label),
        kind=new.kind,
        settings=_settings(cfg, seed),
        blocking_differences=blocking,
        informational_differences=info,
        allowed_differences=allowed,
        allow_mismatch=allow_mismatch,
        same_input=same_input,
    )
    controls = control_names(old) | control_names(new)
    common = [n for n in _match_names(comp, old, new) if n not in controls]
    memory = memory_names(new, common)  # their own rule, never drift-adjusted (.memory)
    shift = control_shift(old, new, cfg, seed)
    keep = controls | memory
    judged_new = adjusted(new, shift.ratio, keep) if shift and shift.applied else new
    pairs, judged = _pairs(comp, old, judged_new, common, cfg)
    mem_judged = {n: p for n, p in judged.items() if n in memory}
    judged = {n: p for n, p in judged.items() if n not in memory}
    # --repeats is advised only to a side measured by a command that has it (comparison.advice)
    advice = sides_advice((source_of(old), source_of(new)), _repeats_needed(cfg),
                          (old_label, new_label))  # fmt: skip
    with progress.task("comparing metrics", total=len(common)) as task:
        comp.metrics = _judge(judged, old, judged_new, cfg, seed, bool(blocking), advice)
        if judged_new is not new:
            _, raw = _pairs(comp, old, new, common, cfg, record=False)
            raw = {n: p for n, p in raw.items() if n not in memory}
            raw_rows = _judge(raw, old, new, cfg, seed, False, advice)
            comp.metrics = _with_raw(comp.metrics, raw_rows)
        task.advance(len(common))
    comp.metrics, comp.drift = _drift(comp.metrics, shift, cfg)
    mem_rows = judge_memory(mem_judged, old, new, cfg, bool(blocking), pairs)
    comp.metrics = _in_order(comp.metrics + mem_rows, common)
    comp.attribution = attribute_all(old, judged_new, pairs, comp.metrics, cfg, seed)
    comp.memory = attribute_memory(mem_rows)
    comp.warnings = _warnings(comp, old, new, judged, cfg, advice)
    return comp


def _comparable(
    old: Result, new: Result, old_label: str, new_label: str, allow: Sequence[str], anyway: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(blocking, informational, allowed) differences; NotComparableError for a blocking one
    without --allow-mismatch. --allow KEY: a difference the user intends (the workload's image
    size, say) is listed, not blocking and not marking the verdicts."""
    blocking, info = environment_differences(old, new)
    blocking, allowed = split_allowed(blocking, allow)
    if blocking and not anyway:
        example = blocking[0]["key"].rpartition(".")[2]
        raise NotComparableError(
            f"{old_label} and {new_label} are not comparable: blocking keys differ "
            f"({describe_differences(blocking)}); --allow KEY to compare anyway (e.g. --allow "
            f"{example}; repeat it per key), or --allow-mismatch for every key, marked"
        )
    return blocking, info, allowed


def _in_order(metrics: list[MetricResult], names: list[str]) -> list[MetricResult]:
    """The judged metrics in the results' order (memory's beside the times of its group)."""
    pos = {n: i for i, n in enumerate(names)}
    return sorted(metrics, key=lambda m: pos.get(m.name, len(pos)))


def _with_raw(adjusted: list[MetricResult], raw: list[MetricResult]) -> list[MetricResult]:
    """Each drift-adjusted metric with its raw (unadjusted) ratio, CI and verdict beside it."""
    by_name = {m.name: m for m in raw}
    out = []
    for m in adjusted:
        r = by_name[m.name].stat
        raw_doc = {"ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high,
                   "change": r.change, "verdict": r.verdict, "median_old": r.median_old,
                   "median_new": r.median_new}  # fmt: skip
        out.append(replace(m, raw=raw_doc))
    return out


def _drift(
    metrics: list[MetricResult], shift: ControlShift | None, cfg: CompareConfig
) -> tuple[list[MetricResult], dict[str, Any]]:
    """The drift record, and the metrics with every regressed/improved verdict of a group that
    shows the drift signature held back to inconclusive (see :mod:`.drift`)."""
    sigs = signatures(metrics, {m.name: m.stat.threshold for m in metrics})
    held = {s.group: s for s in sigs}
    out = []
    for m in metrics:
        sig = held.get(str(m.meta.get("group")))
        if sig is not None and m.verdict in ("regressed", "improved"):
            stat = replace(m.stat, verdict="inconclusive", mde=None, samples_needed=None)
            m = replace(m, stat=stat, reason=sig.message())
        out.append(m)
    record = {
        "control": shift.to_dict() if shift else None,
        "adjusted": bool(shift and shift.applied),
        "signatures": [s.to_dict() for s in sigs],
        "machine_drift": bool(sigs) or bool(shift and shift.applied),
        "method": DRIFT_METHOD,
    }
    return out, record


def _match_names(comp: Comparison, old: Result, new: Result) -> list[str]:
    """Names on both sides (in OLD's order); fills only_old / only_new."""
    old_label, new_label = comp.old["label"], comp.new["label"]
    names_old, names_new = list(old.measurements), set(new.measurements)
    common = [n for n in names_old if n in names_new]
    comp.only_old = [n for n in names_old if n not in names_new]
    comp.only_new = [n for n in new.measurements if n not in set(names_old)]
    if not common:
        raise NotComparableError(
            f"{old_label} and {new_label} have no metric in common (the workload changed?): "
            f"{len(comp.only_old)} only in {old_label}, {len(comp.only_new)} only in {new_label}"
        )
    return common


def _pairs(
    comp: Comparison,
    old: Result,
    new: Result,
    common: list[str],
    cfg: CompareConfig,
    record: bool = True,
) -> tuple[dict[str, Pair], dict[str, Pair]]:
    """(every valid pair, the pairs to judge); what cannot be judged goes to comp.skipped."""
    pairs: dict[str, Pair] = {}
    judged: dict[str, Pair] = {}
    for name in common:
        m_old, m_new = old.measurements[name], new.measurements[name]
        pair = pair_samples(m_old, m_new, cfg.min_replicates) if m_old.unit == m_new.unit else None
        reason = skip_reason(m_old, m_new, pair)
        if pair is not None and pair.old.size and pair.new.size:
            pairs[name] = pair  # attribution uses every valid sample, judged or not
        if reason is None:
            judged[name] = pair  # type: ignore[assignment]
        elif record:
            comp.skipped.append({"metric": name, "code": reason[0], "reason": reason[1]})
    return pairs, judged


def _judge(
    judged: Mapping[str, Pair],
    old: Result,
    new: Result,
    cfg: CompareConfig,
    seed: int,
    mismatch: bool,
    advice: str,
) -> list[MetricResult]:
    """Judge every metric on its process figures (stats.compare_samples: the t-test on logs,
    gatekeeping from the step to its stages); the threshold is max(configured floor,
    between-sitting bar). One process a side: insufficient data (see :mod:`.noise`), with
    `advice` (how these results' sources measure more processes)."""
    if not judged:
        return []
    levels = {
        name: level_of(
            old.measurements[name],
            new.measurements[name],
            p.basis,
            threshold_for(name, cfg),
            sitting_noise(old, new, name),
            cfg.confidence,
        )
        for name, p in judged.items()
    }
    metas = {n: new.measurements[n].meta or old.measurements[n].meta or {} for n in judged}
    stat_rows = stats.compare_samples(
        {
            name: (p.old, p.new, new.measurements[name].higher_is_better)
            for name, p in judged.items()
        },
        threshold={name: lv.threshold for name, lv in levels.items()},
        alpha=cfg.alpha,
        confidence=cfg.confidence,
        n_resamples=cfg.n_resamples,
        seed=seed,
        gate=(gate_of := gates(metas)),
        insufficient=[n for n, p in judged.items() if p.basis == "samples"],
    )
    out = []
    for row in stat_rows:
        pair, level = judged[row.metric], levels[row.metric]
        out.append(
            MetricResult(
                row, new.measurements[row.metric].unit, pair.basis, dict(metas[row.metric]),
                mismatch, level.to_dict(cfg.confidence), _reason(row, gate_of, advice), row.mde,
            )
        )  # fmt: skip
    return out


def _repeats_needed(cfg: CompareConfig) -> int:
    """The processes a side to advise for one process a side: the fewest a comparison can
    judge (worded for each side's source by `comparison.advice`)."""
    return max(cfg.min_replicates, stats.decision.min_decidable())


def _reason(
    row: stats.MetricComparison, gate_of: Mapping[str, str | None], advice: str
) -> str | None:
    """Why a metric has no verdict of its own: one process a side, or its total did not move."""
    if row.verdict == stats.INSUFFICIENT:
        return f"one process a side: nothing measured the noise between processes ({advice})"
    if row.gated:
        return f"not tested: {gate_of.get(row.metric)} did not move (the step is judged first)"
    ci = (row.ratio, row.ci_low, row.ci_high)
    if row.verdict == "inconclusive" and stats.decision.below_band(ci, row.threshold):
        return (
            f"moved {row.change:+.1%} (its CI excludes 0) but inside the ±{row.threshold:.1%} "
            "band: a change below what this comparison can call"
        )
    return None


def _warnings(
    comp: Comparison,
    old: Result,
    new: Result,
    judged: Mapping[str, Pair],
    cfg: CompareConfig,
    advice: str,
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
    out += _drift_warnings(comp, old, new)
    out += _insufficient_warning(comp, judged, cfg, advice)
    if comp.only_old or comp.only_new:
        out.append(
            {
                "code": "unmatched_metrics",
                "message": f"{len(comp.only_old)} metrics only in {comp.old['label']}, "
                f"{len(comp.only_new)} only in {comp.new['label']}: listed, not compared",
            }
        )
    return out


def _drift_warnings(comp: Comparison, old: Result, new: Result) -> list[dict[str, Any]]:
    """Common-mode drift (the control moved too), the drift signature, contaminated inputs."""
    out: list[dict[str, Any]] = []
    control = comp.drift.get("control")
    if control and control["applied"]:
        raw = [f"{m.name} {m.raw['change']:+.1%} → {m.stat.change:+.1%}" for m in comp.metrics
               if m.raw is not None and m.meta.get("role") == "total"]  # fmt: skip
        out.append({"code": "common_mode_drift", "message": control["reason"]
                    + (f" (raw → adjusted: {'; '.join(raw)})" if raw else ""),
                    "ratio": control["ratio"]})  # fmt: skip
    for sig in comp.drift.get("signatures", []):
        out.append({"code": "machine_drift", "message": sig["message"], "group": sig["group"],
                    "factor": sig["factor"]})  # fmt: skip
    sides = [(comp.old["label"], old), (comp.new["label"], new)]
    if comp.old["label"] == comp.new["label"]:
        sides = sides[:1]  # a file against itself: said once, not twice word for word
    for label, result in sides:
        info = result.data.get("contamination") or {}
        if info.get("contaminated"):
            out.append({
                "code": "contaminated_input",
                "message": f"{label} ran contaminated: other programs used "
                f"{info['max_foreign_cores']:.2f} cores during {info['worst_phase']} (limit "
                f"{info['threshold_cores']:g}); its figures include their load",
                "side": label,
            })  # fmt: skip
    return out


def _insufficient_warning(
    comp: Comparison, judged: Mapping[str, Pair], cfg: CompareConfig, advice: str
) -> list[dict[str, Any]]:
    """One process a side: the figures are shown, no verdict is possible (never a silent pass)."""
    names = [n for n, p in judged.items() if p.basis == "samples"]
    if not names:
        return []
    need = _repeats_needed(cfg)
    return [
        {
            "code": "insufficient_data",
            "message": f"{len(names)} of {len(judged)} metrics have one process a side: nothing "
            "measured the noise between processes, so they get no verdict (insufficient data; "
            f"--fail-on any fails on it); {advice}",
            "metrics": names,
            "repeats": need,
        }
    ]
