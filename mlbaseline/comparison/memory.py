"""Memory metrics in a comparison: judged by the memory rule as their own family, and the stage
whose memory moved.

Memory metrics (meta ``role: memory``: ``train.bsN.mem.peak``, ``.mem.reserved``, the held bytes
of each stage ``.mem.<stage>``, ``.mem.workers_peak``, ``infer.bsN.mem.peak``, …) are nearly
deterministic, so they are not tested like time: :func:`mlbaseline.stats.decision.memory_rule`
(the ratio of medians widened by the measured spread, p 0/1 beyond the band) decides each one
through the one decision function, at ``compare.memory_threshold``. They take no part in the
time gatekeeping (they neither open nor close a group's stages) nor in the drift adjustment
(a slower machine does not hold more bytes).

**Attribution** (:func:`attribute_memory`): per group, the peak's verdict and the held bytes of
each stage; the stage named is the one with the largest regressed held-bytes change (forward:
the activations; optimizer: the optimizer state).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.matching import Pair
from mlbaseline.comparison.model import MetricResult
from mlbaseline.config import CompareConfig
from mlbaseline.formatting import interval_percent, signed_percent
from mlbaseline.formatting import value as format_value
from mlbaseline.results import Result

MEMORY_ROLE = "memory"
# what a stage's held bytes are, in a sentence
STAGE_MEANING = {
    "forward": "the activations",
    "backward": "the gradients",
    "optimizer": "the optimizer state",
}
RULE = (
    "memory (role memory): ratio of medians new/old, CI widened by the larger side's relative "
    "spread (max−min)/median (at least a quarter of the threshold), p 0 when that CI lies "
    "beyond 1 ± compare.memory_threshold, else 1; no gatekeeping, no drift adjustment"
)
SOURCE = "configured memory threshold"


def is_memory(meta: Mapping[str, Any] | None) -> bool:
    return (meta or {}).get("role") == MEMORY_ROLE


def memory_names(result: Result, names: Sequence[str]) -> set[str]:
    return {n for n in names if n in result.measurements and is_memory(result.measurements[n].meta)}


def memory_threshold_for(name: str, cfg: CompareConfig) -> float:
    """compare.thresholds by exact name, or by a glob pattern that names memory (``*.mem.*``:
    a pattern meant for the times, ``train.*``, does not set memory's band); else
    compare.memory_threshold."""
    if name in cfg.thresholds:
        return float(cfg.thresholds[name])
    for pattern, value in cfg.thresholds.items():
        if ".mem" in pattern and fnmatch.fnmatchcase(name, pattern):
            return float(value)
    return float(cfg.memory_threshold)


def _peak_scale(old: Result, meta: Mapping[str, Any], pairs: Mapping[str, Pair]) -> float | None:
    """The median old peak of the metric's group: what a stage that frees memory (held bytes
    <= 0) is measured against."""
    for name, m in old.measurements.items():
        mm = m.meta or {}
        peak = is_memory(mm) and mm.get("memory") == "peak"
        if peak and mm.get("group") == meta.get("group") and name in pairs:
            return float(np.median(pairs[name].old))
    return None


def judge_memory(
    judged: Mapping[str, Pair],
    old: Result,
    new: Result,
    cfg: CompareConfig,
    mismatch: bool,
    pairs: Mapping[str, Pair],
) -> list[MetricResult]:
    """Each memory metric's verdict by the memory rule (module doc), at every process count."""
    out = []
    for name, pair in judged.items():
        m_new = new.measurements[name]
        meta = dict(m_new.meta or old.measurements[name].meta or {})
        thr = memory_threshold_for(name, cfg)
        j = stats.decision.memory_rule(
            pair.old, pair.new, m_new.higher_is_better, thr, cfg.alpha,
            _peak_scale(old, meta, pairs),
        )  # fmt: skip
        stat = stats.MetricComparison(
            metric=name, n_old=int(pair.old.size), n_new=int(pair.new.size),
            median_old=j.median_old, median_new=j.median_new, ratio=j.ratio, ci_low=j.ci_low,
            ci_high=j.ci_high, p_value=j.p, p_adjusted=j.p, change=j.ratio - 1.0,
            verdict=j.verdict, mde=j.mde, samples_needed=None,
            higher_is_better=m_new.higher_is_better, threshold=thr, test="memory",
            alpha_eff=cfg.alpha,
        )  # fmt: skip
        procs = [max(1, r) for r in pair.n_replicates]
        level = {
            "level": "process" if pair.basis == "replicates" else "in-process",
            "threshold": thr,
            "threshold_source": SOURCE,
            "threshold_floor": thr,
            "memory_spread": j.spread,
            "memory_base": j.base,
            "processes": procs,
        }
        out.append(MetricResult(stat, m_new.unit, pair.basis, meta, mismatch, level, None, j.mde))
    return out


# --------------------------------------------------------------------------- attribution


def _stage_row(m: MetricResult) -> dict[str, Any]:
    s = m.stat
    base = float(m.level.get("memory_base") or s.median_old)
    return {
        "stage": m.meta.get("stage"),
        "metric": m.name,
        "memory": m.meta.get("memory"),
        "median_old": s.median_old,
        "median_new": s.median_new,
        "delta": s.median_new - s.median_old,
        "change": s.change,
        # measured against more than its own median: under 1 MiB, or it frees memory (the peak)
        "scaled": base != s.median_old,
        "verdict": s.verdict,
        "named": False,
    }


def attribute_memory(metrics: Sequence[MetricResult]) -> list[dict[str, Any]]:
    """Per group with judged memory metrics: its peak (verdict, change, CI), each stage's held
    bytes (old, new, delta, verdict) and the stage named: the largest regressed held-bytes
    change (none when no stage's held bytes regressed)."""
    groups: dict[str, list[MetricResult]] = {}
    for m in metrics:
        if is_memory(m.meta):
            groups.setdefault(str(m.meta.get("group")), []).append(m)
    out = []
    for group, rows in groups.items():
        peak = next((m for m in rows if m.meta.get("memory") == "peak"), None)
        stages = [_stage_row(m) for m in rows if m.meta.get("stage")]
        regressed = [r for r in stages if r["verdict"] == "regressed" and r["delta"] > 0]
        named = max(regressed, key=lambda r: r["delta"], default=None)
        if named is not None:
            named["named"] = True
        doc = {
            "group": group,
            "peak": None if peak is None else peak.name,
            "peak_verdict": None if peak is None else peak.verdict,
            "peak_change": None if peak is None else peak.stat.change,
            "peak_ci": None if peak is None else [peak.stat.ci_low - 1, peak.stat.ci_high - 1],
            "stages": stages,
            "named": None if named is None else named["stage"],
        }
        doc["sentence"] = memory_sentence(doc)
        out.append(doc)
    return out


def memory_sentence(a: Mapping[str, Any]) -> str:
    """'train.bs16 peak memory +100.0% [+98.8, +101.3] regressed; forward moved most: +4.00 MiB
    held at its end (+100.0%, the activations)'."""
    if a.get("peak"):
        head = (
            f"{a['group']} peak memory {signed_percent(a['peak_change'])} "
            f"{interval_percent(a['peak_ci'])} {a['peak_verdict']}"
        )
    else:
        head = f"{a['group']} memory (no peak measured)"
    row = next((r for r in a["stages"] if r["named"]), None)
    if row is None:
        return head + ("; no stage's held memory regressed" if a["stages"] else "")
    what = STAGE_MEANING.get(str(row["stage"]))
    # its own relative change (the verdict's may be of a larger scale: decision.memory_base)
    own = row["delta"] / row["median_old"] if row["median_old"] > 0 else math.nan
    parts = [signed_percent(own)] if math.isfinite(own) else []
    parts += [what] if what else []
    return (
        f"{head}; {row['stage']} moved most: {format_value(row['delta'], 'B', signed=True)} "
        "held at its end" + (f" ({', '.join(parts)})" if parts else "")
    )


__all__ = [
    "MEMORY_ROLE",
    "RULE",
    "STAGE_MEANING",
    "attribute_memory",
    "is_memory",
    "judge_memory",
    "memory_names",
    "memory_sentence",
    "memory_threshold_for",
]
