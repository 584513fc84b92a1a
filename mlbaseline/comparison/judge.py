"""Compare two loaded results: match their metrics, judge them, attribute, warn."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from mlbaseline import stats
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
    threshold_for,
)
from mlbaseline.comparison.model import ATTRIBUTION_METHOD, NAME_SHARE, Comparison, MetricResult
from mlbaseline.comparison.noise import (
    Level,
    in_process_reason,
    level_of,
    min_mann_whitney_p,
    repeats_advice,
    replicates_reachable,
    sitting_noise,
)
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
        "seed": seed,
        "test": "two-sided Mann-Whitney U, Holm-corrected across all judged metrics",
        "interval": "percentile bootstrap CI of the ratio of medians new/old",
        "attribution": ATTRIBUTION_METHOD,
        "name_share": NAME_SHARE,
        "threshold_rule": "max(configured floor, between-process noise: CV of the replicate "
        "medians pooled over both sides)",
        "in_process_rule": "in-process samples never give regressed/improved unless |ratio-1| "
        "exceeds t·noise·sqrt(1/p_old+1/p_new) of a measured between-process noise",
    }


_min_mann_whitney_p = min_mann_whitney_p  # the name the Holm-floor warning has always used


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
    check_thresholds(cfg)
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
    controls = control_names(old) | control_names(new)
    common = [n for n in _match_names(comp, old, new) if n not in controls]
    shift = control_shift(old, new, cfg, seed)
    judged_new = adjusted(new, shift.ratio, controls) if shift and shift.applied else new
    pairs, judged = _pairs(comp, old, judged_new, common, cfg)
    with progress.task("comparing metrics", total=len(common)) as task:
        comp.metrics = _judge(judged, old, judged_new, cfg, seed, bool(blocking))
        if judged_new is not new:
            _, raw = _pairs(comp, old, new, common, cfg, record=False)
            comp.metrics = _with_raw(comp.metrics, _judge(raw, old, new, cfg, seed, False))
        task.advance(len(common))
    comp.metrics, comp.drift = _drift(comp.metrics, shift, cfg)
    comp.attribution = attribute_all(old, judged_new, pairs, comp.metrics, cfg, seed)
    comp.warnings = _warnings(comp, old, new, judged, cfg)
    return comp


def _with_raw(adjusted: list[MetricResult], raw: list[MetricResult]) -> list[MetricResult]:
    """Each drift-adjusted metric with its raw (unadjusted) ratio, CI and verdict beside it."""
    by_name = {m.name: m for m in raw}
    out = []
    for m in adjusted:
        r = by_name[m.name].stat
        raw_doc = {"ratio": r.ratio, "ci_low": r.ci_low, "ci_high": r.ci_high,
                   "change": r.change, "verdict": r.verdict}  # fmt: skip
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
) -> list[MetricResult]:
    """Judge every metric at its level: the threshold is max(configured floor, measured
    between-process noise, between-sitting bar); an in-process regressed/improved verdict is
    held back to inconclusive unless it exceeds the measured noise bar (see :mod:`.noise`)."""
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
    inputs = {
        name: (p.old, p.new, new.measurements[name].higher_is_better) for name, p in judged.items()
    }
    stat_rows = stats.compare_samples(
        inputs,
        threshold={name: lv.threshold for name, lv in levels.items()},
        alpha=cfg.alpha,
        confidence=cfg.confidence,
        n_resamples=cfg.n_resamples,
        seed=seed,
    )
    repeats = repeats_advice(len(judged), cfg.alpha, cfg.min_replicates)
    out = []
    for row in stat_rows:
        metric = new.measurements[row.metric]
        meta = metric.meta or old.measurements[row.metric].meta or {}
        pair, level = judged[row.metric], levels[row.metric]
        row, reason = _honest(row, level, cfg, len(judged), repeats)
        mde = _mde(row, level, cfg, len(judged))
        out.append(
            MetricResult(
                row, metric.unit, pair.basis, dict(meta), mismatch,
                level.to_dict(cfg.confidence), reason, mde,
            )
        )  # fmt: skip
    return out


def _honest(
    row: stats.MetricComparison, level: Level, cfg: CompareConfig, k: int, repeats: int
) -> tuple[stats.MetricComparison, str | None]:
    """(the row, why it was held back): in-process regressed/improved without measured noise
    beyond it becomes inconclusive; every count recommended can reach alpha/k."""
    reason = None
    if level.basis == "samples" and row.verdict in ("regressed", "improved"):
        reason = in_process_reason(level, row.change, cfg.confidence, repeats)
        if reason is not None:
            row = replace(row, verdict="inconclusive", mde=None, samples_needed=None)
    if row.samples_needed is not None:
        reachable = replicates_reachable(k, cfg.alpha, row.samples_needed)
        row = replace(row, samples_needed=reachable)
    return row, reason


def _mde(row: stats.MetricComparison, level: Level, cfg: CompareConfig, k: int) -> float | None:
    """Minimum detectable effect (fraction of median_old) at the level judged: for replicates,
    from both sides' process-level noise at alpha/k, Holm's first step over the k judged
    metrics (stats.noise.relative_mde, the figure a throughput result states for itself);
    else from the bootstrap standard errors of the two medians (as the verdicts' own MDE),
    never below the between-process noise bar, and None when that was not measured."""
    if row.median_old <= 0:
        return None
    by_process = level.replicate_mde(cfg.alpha / k) if level.basis == "replicates" else None
    if by_process is not None:
        return by_process
    # the verdict's own figure (an inconclusive row's mde), from the standard errors it carries
    mde = stats.median_mde(row, cfg.alpha)
    if level.basis == "replicates":
        return mde
    bar = level.noise_bar(cfg.confidence)
    return None if bar is None else max(mde, bar)


def _warnings(
    comp: Comparison, old: Result, new: Result, judged: Mapping[str, Pair], cfg: CompareConfig
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
    out += _in_process_warning(comp, judged, cfg)
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
    for label, result in ((comp.old["label"], old), (comp.new["label"], new)):
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


def _in_process_warning(
    comp: Comparison, judged: Mapping[str, Pair], cfg: CompareConfig
) -> list[dict[str, Any]]:
    in_process = [n for n, p in judged.items() if p.basis == "samples"]
    if not in_process:
        return []
    repeats = repeats_advice(len(judged), cfg.alpha, cfg.min_replicates)
    held = [m.name for m in comp.metrics if m.reason]
    return [
        {
            "code": "in_process_samples",
            "message": f"{len(in_process)} of {len(judged)} metrics compared on in-process "
            f"samples (fewer than {cfg.min_replicates} process-level replicates on a side): "
            "process-to-process noise is not covered, so they are never regressed/improved "
            "unless the change exceeds a measured between-process noise"
            + (f" ({len(held)} held back to inconclusive)" if held else "")
            + f"; measure with --repeats {repeats} or more",
            "metrics": in_process,
            "held_back": held,
            "repeats": repeats,
        }
    ]


def _holm_floor_warning(judged: Mapping[str, Pair], cfg: CompareConfig) -> list[dict[str, Any]]:
    """Few replicates cap how small a Mann-Whitney p can get; say when Holm makes every
    significant verdict impossible instead of letting 'inconclusive' look like bad luck, and
    how many per side could reach it."""
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
    need = replicates_reachable(m, cfg.alpha, max(p.old.size, p.new.size) + 1)
    unit = "replicates" if p.basis == "replicates" else "samples"
    return [
        {
            "code": "holm_floor",
            "message": f"{len(blocked)} metrics cannot reach significance: with "
            f"{p.old.size} vs {p.new.size} values the smallest Mann-Whitney p is {floor:.2g}, "
            f"×{m} metrics (Holm) ≥ α={cfg.alpha}; measure {need} or more {unit} per side "
            "or compare fewer metrics",
            "metrics": blocked,
            "needed": need,
        }
    ]
