"""Comparability (environment differences), thresholds, and the samples compared per metric."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.model import SKIP_RESIDUAL
from mlbaseline.config import WORKLOAD_OPTION_KEYS, CompareConfig, Config, flatten
from mlbaseline.errors import ConfigError
from mlbaseline.results import Metric, Result

# --------------------------------------------------------------------------- comparability


_ABSENT = "(absent)"
_OPTION_DEFAULTS = {
    k: v for k, v in flatten(Config().to_dict()).items() if k in WORKLOAD_OPTION_KEYS
}


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    a, b = flatten(old), flatten(new)
    rows = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if va != vb:
            rows.append({"key": key, "old": va, "new": vb})
    return rows


def _predated(blocking: Mapping[str, Any] | None) -> dict[str, Any]:
    """A result written before a workload option was a blocking key ran with its default:
    it compares as that default, not as '(absent)' (an empty fingerprint stays empty)."""
    out = dict(blocking or {})
    if out:
        for key in WORKLOAD_OPTION_KEYS:
            out.setdefault(key, _OPTION_DEFAULTS[key])
    return out


def environment_differences(
    old: Result, new: Result
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(blocking, informational) differences as rows {key, old, new}; informational also
    lists config values that differ, prefixed ``config.``."""
    env_old, env_new = old.environment or {}, new.environment or {}
    blocking = _diff(_predated(env_old.get("blocking")), _predated(env_new.get("blocking")))
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


def check_thresholds(cfg: CompareConfig) -> None:
    for key, value in cfg.thresholds.items():
        if not (isinstance(value, (int, float)) and 0 < value < 1):
            raise ConfigError(
                f"compare.thresholds.{key}: must be a fraction in (0, 1), got {value}"
            )


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class Pair:
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


def pair_samples(old: Metric, new: Metric, min_replicates: int) -> Pair:
    a = np.asarray(old.values, dtype=np.float64)
    b = np.asarray(new.values, dtype=np.float64)
    ra, rb = _n_replicates(old), _n_replicates(new)
    if ra >= min_replicates and rb >= min_replicates:
        assert old.replicate is not None and new.replicate is not None
        a, b = replicate_medians(a, old.replicate), replicate_medians(b, new.replicate)
        return Pair(a, b, "replicates", (ra, rb))
    return Pair(a, b, "samples", (ra, rb))


def skip_reason(old: Metric, new: Metric, pair: Pair | None) -> tuple[str, str] | None:
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


def medians_and_difference_ci(
    old: np.ndarray,
    new: np.ndarray,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = stats.DEFAULT_SEED,
) -> tuple[float, float, float, float, float]:
    """median(new) − median(old) with a seeded, unpaired two-sample percentile-bootstrap CI:
    each side is resampled on its own. Uses the stats module's exact order-statistic sampler
    of bootstrap medians (O(n log n + n_resamples), so 100k samples take milliseconds).

    Returns (median(old), median(new), difference, low, high): the medians too, for a caller
    that reports them (attribution)."""
    m_old, m_new = np.median(old), np.median(new)
    rep_old, rep_new = stats._median_replicates(old, new, n_resamples, seed)
    lo, hi = stats._interval(rep_new - rep_old, confidence)
    return float(m_old), float(m_new), float(m_new - m_old), lo, hi


# --------------------------------------------------------------------------- the comparison
