"""Comparability (environment differences), thresholds, and the samples compared per metric."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.model import SKIP_RESIDUAL
from mlbaseline.config import (
    BLOCKING_CONFIG_KEYS,
    WORKLOAD_OPTION_KEYS,
    CompareConfig,
    Config,
    flatten,
    workload_identity,
)
from mlbaseline.errors import ConfigError
from mlbaseline.results import Metric, Result

# --------------------------------------------------------------------------- comparability


_ABSENT = "(absent)"
_OPTION_DEFAULTS = {
    k: v for k, v in flatten(Config().to_dict()).items() if k in WORKLOAD_OPTION_KEYS
}
# the keys envinfo.fingerprint writes besides the config's, and the node layout of a
# multi-process run (runners.distributed): with BLOCKING_CONFIG_KEYS, what --allow may name
HOST_BLOCKING_KEYS = (
    "device",
    "torch",
    "cuda",
    "cudnn",
    "gpu_name",
    "driver_major",
    "cpu_model",
    "subset_sha256",
    "node_layout",
)
KNOWN_BLOCKING_KEYS = (*HOST_BLOCKING_KEYS, *BLOCKING_CONFIG_KEYS)
# the change under test (DESIGN "Comparability"): informational, on a line of their own
UNDER_TEST_KEYS = (
    "workload.model",
    "workload.model_kwargs",
    "workload.loss",
    "workload.loss_kwargs",
    "workload.optimizer",
    "workload.optimizer_kwargs",
)


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    a, b = flatten(old), flatten(new)
    rows = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if va != vb:
            rows.append({"key": key, "old": va, "new": vb})
    return rows


def _under(key: str, keys: Iterable[str]) -> bool:
    """`key` is one of `keys` or a part of one's value (`workload.dataset_kwargs.root`)."""
    return any(key == k or key.startswith(f"{k}.") for k in keys)


def comparable_blocking(
    environment: Mapping[str, Any] | None, config: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The blocking keys of a result as compare and the history key it. A result written
    before a workload option was blocking ran with its default: it compares as that default,
    not '(absent)' (an empty fingerprint stays empty). One written before the workload
    identity was blocking gets it from its own resolved config, by the rules the fingerprint
    uses (config.workload_identity), so an old and a new result of one workload are equal."""
    out = dict((environment or {}).get("blocking") or {})
    if out:
        for key in WORKLOAD_OPTION_KEYS:
            out.setdefault(key, _OPTION_DEFAULTS[key])
    for key, value in workload_identity(config or {}).items():
        out.setdefault(key, value)
    return out


def environment_differences(
    old: Result, new: Result
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(blocking, informational) differences as rows {key, old, new}. Blocking: the
    fingerprint's blocking keys, workload identity included (:func:`comparable_blocking`);
    informational: the informational keys and the config values that differ, prefixed
    ``config.``, less the blocking ones (listed once, as blocking)."""
    env_old, env_new = old.environment or {}, new.environment or {}
    blocking = _diff(
        comparable_blocking(env_old, old.config), comparable_blocking(env_new, new.config)
    )
    info = _diff(env_old.get("informational") or {}, env_new.get("informational") or {})
    info += [
        {**row, "key": f"config.{row['key']}"}
        for row in _diff(old.config or {}, new.config or {})
        if not _under(row["key"], BLOCKING_CONFIG_KEYS)
    ]
    return blocking, info


def _names(key: str, blocking_key: str) -> bool:
    """--allow KEY names `blocking_key` exactly or by its last dotted part."""
    return key == blocking_key or key == blocking_key.rpartition(".")[2]


def split_allowed(
    blocking_rows: Iterable[Mapping[str, Any]], allow: Sequence[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(still blocking, allowed) rows. A KEY of `allow` (--allow KEY) names a blocking key
    exactly or by its last dotted part (`image_size` → `workload.image_size`); a row of a
    nested value (`node_layout.nnodes`) belongs to its key too. A KEY that names no blocking
    key at all is a ConfigError (exit 2): a typo must not let a difference through unseen."""
    rows = [dict(r) for r in blocking_rows]
    known = list(dict.fromkeys([*KNOWN_BLOCKING_KEYS, *(r["key"] for r in rows)]))
    for key in allow:
        if not any(_names(key, k) for k in known):
            raise ConfigError(
                f"--allow {key}: not a blocking key; known: {', '.join(KNOWN_BLOCKING_KEYS)}"
            )
    kept: list[dict[str, Any]] = []
    allowed: list[dict[str, Any]] = []
    for row in rows:
        owners = [k for k in known if _under(row["key"], [k])]
        hit = any(_names(key, k) for key in allow for k in owners)
        (allowed if hit else kept).append(row)
    return kept, allowed


def under_test_differences(info_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The informational rows of the change under test (model, loss, optimizer: their
    ``config.`` rows), for a line of their own."""
    keys = [f"config.{k}" for k in UNDER_TEST_KEYS]
    return [dict(r) for r in info_rows if _under(str(r["key"]), keys)]


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


def _process_figures(values: np.ndarray, metric: Metric) -> np.ndarray:
    """One figure per fresh process: each replicate's median; a side without replicate ids
    ran in one process, so its one figure is the median of all its values."""
    if metric.replicate and values.size:
        return replicate_medians(values, metric.replicate)
    return np.array([np.median(values)]) if values.size else values


def pair_samples(old: Metric, new: Metric, min_replicates: int) -> Pair:
    """The values compared: the process figures of both sides when at least one side has
    `min_replicates` processes (its spread is the noise the test needs; a one-process side is
    then one figure against it); otherwise the in-process samples, shown but never judged
    (insufficient data)."""
    a = np.asarray(old.values, dtype=np.float64)
    b = np.asarray(new.values, dtype=np.float64)
    ra, rb = _n_replicates(old), _n_replicates(new)
    if max(ra, rb) >= min_replicates and a.size and b.size:
        return Pair(_process_figures(a, old), _process_figures(b, new), "replicates", (ra, rb))
    return Pair(a, b, "samples", (ra, rb))


def skip_reason(old: Metric, new: Metric, pair: Pair | None) -> tuple[str, str] | None:
    """(code, reason) when this metric cannot be judged by a ratio of medians."""
    if old.unit != new.unit:
        return "unit", f"unit changed ({old.unit} → {new.unit})"
    if old.higher_is_better != new.higher_is_better:
        return "direction", "higher_is_better changed"
    if pair is None or pair.old.size == 0 or pair.new.size == 0:
        return "empty", "no samples on one side"
    if (new.meta or old.meta).get("role") == "memory":
        return None  # memory's rule measures held bytes <= 0 against the peak (.memory)
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
