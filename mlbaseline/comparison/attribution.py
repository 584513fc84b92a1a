"""Per-stage attribution of a group's total: deltas with CIs, shares, the stages named."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from mlbaseline.comparison.matching import Pair, medians_and_difference_ci
from mlbaseline.comparison.model import NAME_SHARE, Attribution, MetricResult, StageDelta
from mlbaseline.config import CompareConfig
from mlbaseline.formatting import interval_percent as _interval_pct
from mlbaseline.formatting import share_percent as _share
from mlbaseline.formatting import signed_percent as _pct
from mlbaseline.results import Result


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


def attribute_all(
    old: Result,
    new: Result,
    pairs: Mapping[str, Pair],
    metrics: Sequence[MetricResult],
    cfg: CompareConfig,
    seed: int,
) -> list[Attribution]:
    by_name = {m.name: m for m in metrics}
    out = []
    old_groups = _groups(old)
    for group, total in _groups(new).items():
        if total not in pairs or old_groups.get(group) != total:
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
    pair: Pair,
    old_total: float,
    total_delta: float,
    verdict: str | None,
    cfg: CompareConfig,
    seed: int,
) -> StageDelta:
    m_old, m_new, diff, lo, hi = medians_and_difference_ci(
        pair.old, pair.new, cfg.confidence, cfg.n_resamples, seed
    )
    return StageDelta(
        stage=stage,
        metric=metric,
        median_old=m_old,
        median_new=m_new,
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
    pairs: Mapping[str, Pair],
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
    res_row = _residual_row(residual, pairs, old_total, delta, stage_sum, cfg, seed)
    # with a measured residual, medians need not add up: say how much is left unassigned
    unassigned = delta - stage_sum - res_row.delta if residual is not None else 0.0
    moved = total_verdict if total_verdict in ("regressed", "improved") else None
    rows, named, offsets = _name_stages(rows, moved, delta)
    residual_named = bool(moved) and _is_named(res_row, 1 if delta > 0 else -1, "")
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


def _residual_row(
    residual: str | None,
    pairs: Mapping[str, Pair],
    old_total: float,
    delta: float,
    stage_sum: float,
    cfg: CompareConfig,
    seed: int,
) -> StageDelta:
    """The measured residual's row, or without one the closing term, total minus stages,
    without a CI."""
    if residual is not None:
        return _stage_row("residual", residual, pairs[residual], old_total, delta, None, cfg, seed)
    closing = delta - stage_sum
    return StageDelta(
        "residual", None, math.nan, math.nan, closing, None,
        closing / old_total if old_total else math.nan,
        closing / delta if delta else None, None,
    )  # fmt: skip


def _name_stages(
    rows: list[StageDelta], moved: str | None, delta: float
) -> tuple[list[StageDelta], list[str], list[str]]:
    """(rows marked named, the named stages by share, the stages that moved against it)."""
    if not moved:
        return rows, [], []
    direction = 1 if delta > 0 else -1
    opposite = "improved" if moved == "regressed" else "regressed"
    rows = [replace(r, named=_is_named(r, direction, moved)) for r in rows]
    named = [r.stage for r in sorted(rows, key=lambda r: -(r.share or 0)) if r.named]
    offsets = [r.stage for r in rows if r.verdict == opposite]
    return rows, named, offsets


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
