"""What the measured throughput costs: an hour of the machine (the config's `cost` section)
over the samples it processes → cost per 1k samples and per epoch of the configured dataset,
and the energy per step and per sample where it was measured (`measure.energy`).

Cost ∝ 1 / throughput, so the CI of samples/s (the bootstrap CI of its median, as the result
holds it) carries over with its bounds swapped: the fastest plausible throughput is the lowest
plausible cost. The price is exact (what the user set), so it adds no spread. With no price
set, nothing is returned: a cost is never invented.

The price of `cost.per_hour_by_gpu` is matched on the machine the result ran on (its GPU name,
or its CPU model on a CPU run): the longest name that the machine's name contains wins, over
`cost.per_hour`. A price is that of the whole machine the run used (every GPU of a
multi-process run: its samples/s is that of all processes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mlbaseline import stats
from mlbaseline.formatting import number, with_ci
from mlbaseline.results import Result

METHOD = (
    "price per hour / 3600 / samples per second; the CI is that of samples/s (bootstrap CI of "
    "the median), its bounds swapped (cost ∝ 1/throughput); the price adds no spread"
)
PARTS = (("train", "train"), ("inference", "infer"))


def _mapping(cost: Any) -> Mapping[str, Any]:
    """The `cost` section as a mapping (a result's config holds a dict; a Config, a dataclass)."""
    if cost is None:
        return {}
    if dataclasses.is_dataclass(cost) and not isinstance(cost, type):
        return dataclasses.asdict(cost)
    return cost if isinstance(cost, Mapping) else {}


def _section(cost: Any, result: Result) -> Mapping[str, Any]:
    """The section to price `result` with: `cost` where it sets a price, else the result's own
    config's (the price its run was configured with)."""
    given = _mapping(cost)
    if given.get("per_hour") is not None or given.get("per_hour_by_gpu"):
        return given
    return _mapping((result.config or {}).get("cost"))


def machine_name(result: Result) -> str | None:
    """What the result ran on, as the price table names machines: its GPU, else its CPU."""
    blocking = (result.environment or {}).get("blocking") or {}
    return blocking.get("gpu_name") or blocking.get("cpu_model") or None


def price_for(result: Result, cost: Any) -> tuple[float, str, str] | None:
    """(price per hour, currency, where the price came from) for `result`'s machine under the
    `cost` section (a mapping or `CostConfig`); None when no price applies."""
    section = _mapping(cost)
    currency = str(section.get("currency") or "USD")
    by_gpu = section.get("per_hour_by_gpu") or {}
    name = (machine_name(result) or "").lower()
    matches = [k for k in by_gpu if name and str(k).lower() in name]
    if matches:
        key = max(matches, key=len)
        return float(by_gpu[key]), currency, f"cost.per_hour_by_gpu[{key!r}]"
    per_hour = section.get("per_hour")
    if isinstance(per_hour, (int, float)) and per_hour > 0:
        return float(per_hour), currency, "cost.per_hour"
    return None


def dataset_samples(result: Result) -> int | None:
    """Samples in an epoch of the configured dataset, as the run built it (None: unknown)."""
    n = ((result.data or {}).get("dataset") or {}).get("len")
    return int(n) if isinstance(n, int) and n > 0 else None


def _inverse(k: float, rate: Mapping[str, Any]) -> dict[str, float | None]:
    """k / samples per second, with the CI's bounds swapped."""

    def over(x: Any) -> float | None:
        return k / x if isinstance(x, (int, float)) and x > 0 else None

    return {"value": over(rate.get("median")), "ci_low": over(rate.get("ci_high")),
            "ci_high": over(rate.get("ci_low"))}  # fmt: skip


def cost_figures(result: Result, per_hour: float | None, currency: str) -> dict[str, Any] | None:
    """Cost per 1k samples (and per epoch, for training) of each measured part of each batch
    size, at `per_hour` (in `currency`); None without a price or without a samples/s figure."""
    if per_hour is None or not per_hour > 0:
        return None
    per_s = per_hour / 3600.0
    epoch = dataset_samples(result)
    rows = []
    entries = (result.data or {}).get("batch_sizes") or {}
    for key in sorted(entries, key=lambda k: int(k) if str(k).isdigit() else 0):
        for part, prefix in PARTS:
            info = entries[key].get(part)
            rate = info.get("samples_per_s") if isinstance(info, dict) else None
            if not isinstance(rate, dict) or not (rate.get("median") or 0) > 0:
                continue
            rows.append({
                "group": f"{prefix}.bs{key}",
                "samples_per_s": dict(rate),
                "per_1k_samples": _inverse(per_s * 1000.0, rate),
                "per_epoch": _inverse(per_s * epoch, rate) if epoch and part == "train" else None,
            })  # fmt: skip
    if not rows:
        return None
    return {
        "per_hour": per_hour,
        "currency": currency,
        "dataset_samples": epoch,
        "epoch": f"{epoch:,} samples"
        if epoch
        else "unknown: the result does not say how many samples its dataset has",
        "rows": rows,
        "method": METHOD,
    }


def _ci_text(x: Mapping[str, Any]) -> str:
    return with_ci(x["value"], x["ci_low"], x["ci_high"], lambda v: number(v, 3))


def cost_lines(result: Result, cost: Any = None) -> list[str]:
    """One line per priced group, for a terminal or the report's headline; `cost` is the
    section to price with (one without a price: the result's own config's); empty when
    nothing is priced."""
    price = price_for(result, _section(cost, result))
    figures = cost_figures(result, *price[:2]) if price else None
    if figures is None or price is None:
        return []
    cur = figures["currency"]
    out = []
    for row in figures["rows"]:
        text = f"cost {row['group']}: {_ci_text(row['per_1k_samples'])} {cur} per 1k samples"
        if row["per_epoch"] is not None:
            text += f", {_ci_text(row['per_epoch'])} {cur} per epoch ({figures['epoch']})"
        out.append(f"{text} at {number(figures['per_hour'], 3)} {cur}/h ({price[2]})")
    trains = [r for r in figures["rows"] if r["group"].startswith("train")]
    if figures["dataset_samples"] is None and trains:
        out.append(f"cost per epoch: {figures['epoch']}")
    return out


def compare_cost_lines(old: Result, new: Result, cost: Any = None) -> list[str]:
    """Cost per 1k samples of each group both results priced: old → new, each at its own
    machine's price (`cost`, else each result's own config's); empty when neither is priced."""

    def priced(r: Result) -> dict[str, dict[str, Any]]:
        price = price_for(r, _section(cost, r))
        figures = cost_figures(r, *price[:2]) if price else None
        rows = figures["rows"] if figures else []
        return {row["group"]: {**row, "currency": price[1]} for row in rows if price}

    a, b = priced(old), priced(new)
    out = []
    for group in [g for g in a if g in b]:
        x, y = a[group], b[group]
        unit = x["currency"] if x["currency"] == y["currency"] else ""
        old_t = _ci_text(x["per_1k_samples"]) + ("" if unit else f" {x['currency']}")
        new_t = _ci_text(y["per_1k_samples"]) + ("" if unit else f" {y['currency']}")
        out.append(f"cost per 1k samples, {group}: {old_t} → {new_t} {unit}".rstrip())
    return out


def energy_figures(result: Result, confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per group with energy metrics: the median J/step and J/sample with the bootstrap CI of
    the median, the windows they came from and the source (for the report's headline)."""
    out = []
    for name, m in result.measurements.items():
        if (m.meta or {}).get("role") != "energy" or not name.endswith(".energy_per_step"):
            continue
        meta = m.meta
        row: dict[str, Any] = {
            "group": meta.get("group"),
            "source": meta.get("source"),
            "windows": len(m.values),
            "window_s": meta.get("window_s"),
        }
        per_sample = result.measurements.get(name.removesuffix("per_step") + "per_sample")
        for key, metric in (("per_step", m), ("per_sample", per_sample)):
            if metric is not None and metric.values:
                lo, hi = stats.median_ci(metric.values, confidence)
                median = stats.summarize(metric.values).median
                row[key] = {"value": median, "ci_low": lo, "ci_high": hi}
        out.append(row)
    return out


def energy_lines(result: Result) -> list[str]:
    """One line per group with energy figures, or the one line saying why none was measured
    (the result's `data.energy`); empty for a result that predates energy measurement."""
    out = []
    for row in energy_figures(result):
        parts = [
            f"{_ci_text(row[key])} J/{key.removeprefix('per_')}"
            for key in ("per_step", "per_sample")
            if key in row
        ]
        window = number(row["window_s"], 3) if row.get("window_s") is not None else "?"
        out.append(
            f"energy {row['group']}: {', '.join(parts)} ({row['source']}, {row['windows']} "
            f"windows of >= {window} s)"
        )
    block = (result.data or {}).get("energy")
    if not isinstance(block, dict):
        return out
    if not out and block.get("reason"):
        out.append(f"energy: not measured: {block['reason']}")
    for key, entry in (block.get("batch_sizes") or {}).items():
        if entry.get("reason"):  # measured, but no window of this size gave a figure
            out.append(f"energy train.bs{key}: no figure: {entry['reason']}")
    return out


__all__ = [
    "METHOD",
    "compare_cost_lines",
    "cost_figures",
    "cost_lines",
    "dataset_samples",
    "energy_figures",
    "energy_lines",
    "machine_name",
    "price_for",
]
