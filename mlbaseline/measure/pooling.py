"""Pooling raw values over processes (ranks of one launch, fresh-process replicates) and the
per-group summaries computed from metrics (works on pooled metrics too)."""

from __future__ import annotations

from typing import Any

from mlbaseline import stats
from mlbaseline.results import Metric, Result

CONFIDENCE = 0.95


def _ci(values: list[float]) -> dict[str, Any]:
    lo, hi = stats.median_ci(values, CONFIDENCE)
    return {"median": stats.summarize(values).median, "ci_low": lo, "ci_high": hi}


def group_summary(measurements: dict[str, Metric], prefix: str) -> dict[str, Any]:
    """Samples/s (median, bootstrap CI of the median), total time, stage shares and residual
    share (ratios of sums over the aligned per-step values), for `train.bs{B}` or
    `infer.bs{B}` groups; works on pooled (multi-rank, multi-replicate) metrics too."""
    total = next(
        (
            m
            for m in measurements.values()
            if m.meta.get("group") == prefix and m.meta.get("role") == "total"
        ),
        None,
    )
    rate = measurements.get(f"{prefix}.samples_per_s")
    if total is None or not total.values or rate is None:
        return {"n": 0}
    out: dict[str, Any] = {
        "n": len(total.values),
        "confidence": CONFIDENCE,
        "samples_per_s": _ci(rate.values),
        "time_s": _ci(total.values),
    }
    stages = total.meta.get("stages") or []
    if stages:
        sum_total = sum(total.values)
        out["stage_share"] = {
            s: sum(measurements[f"{prefix}.{s}"].values) / sum_total for s in stages
        }
        out["stage_median_s"] = {
            s: stats.summarize(measurements[f"{prefix}.{s}"].values).median for s in stages
        }
        out["residual_share"] = sum(measurements[f"{prefix}.residual"].values) / sum_total
    if total.replicate is not None:
        by_rep: dict[int, list[float]] = {}
        for v, r in zip(rate.values, rate.replicate or [], strict=False):
            by_rep.setdefault(r, []).append(v)
        out["replicate_medians"] = {
            str(r): stats.summarize(v).median for r, v in sorted(by_rep.items())
        }
    return out


def pool_metrics(parts: list[tuple[int, dict[str, Metric]]], label: str) -> dict[str, Metric]:
    """Concatenate each metric's raw values over processes, tagging every value with its
    process id (`label` "rank" or "replicate"); existing rank ids are kept."""
    pooled: dict[str, Metric] = {}
    for ident, metrics in parts:
        for name, m in metrics.items():
            ids = [ident] * len(m.values)
            if name not in pooled:
                pooled[name] = Metric(name, m.unit, m.higher_is_better, [], [], meta=dict(m.meta))
                setattr(pooled[name], label, [])
            p = pooled[name]
            p.values += m.values
            p.warmup += m.warmup
            getattr(p, label).extend(ids)
            if label == "replicate" and m.rank is not None:
                p.rank = (p.rank or []) + list(m.rank)
            elif label == "rank" and m.replicate is not None:
                p.replicate = (p.replicate or []) + list(m.replicate)
    return pooled


def pool_replicates(result: Result, children: list[Result]) -> None:
    """Fresh-process replicates into `result`: every value keeps its replicate id; per batch
    size, one entry summarising all replicates."""
    result.measurements = pool_metrics(
        [(i, c.measurements) for i, c in enumerate(children)], "replicate"
    )
    result.data["replicates"] = [
        {
            "replicate": i,
            "status": c.status,
            "pid_note": "fresh process",
            "batch_sizes": c.data.get("batch_sizes", {}),
            "notes": c.notes,
        }
        for i, c in enumerate(children)
    ]
    blocking = [c.environment.get("blocking") for c in children]
    if any(b != blocking[0] for b in blocking[1:]):
        result.warn("replicate_environment", "replicates ran in different environments")
    for i, c in enumerate(children):
        for w in c.warnings:
            if w.get("code") not in ("high_cv", "iqr_10", "iqr_25", "first_outlier"):
                result.warnings.append({**w, "replicate": i})
        if c.status != "complete":
            result.mark(c.status, f"replicate {i}: {c.status}")
    keys = list(dict.fromkeys(k for c in children for k in c.data.get("batch_sizes", {})))
    for key in keys:
        parts = [c.data["batch_sizes"].get(key, {}) for c in children]
        result.data["batch_sizes"][key] = _replicate_entry(result, key, parts)


def _replicate_entry(result: Result, key: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    reasons = [p.get("stop_reason") for p in parts]
    entry: dict[str, Any] = {
        "batch_size": int(key),
        "status": "ok"
        if all(p.get("status") == "ok" for p in parts)
        else next(p.get("status") for p in parts if p.get("status") != "ok"),
        "stop_reason": reasons[0] if len(set(reasons)) == 1 else "mixed",
        "stop_reasons": reasons,
    }
    for part, prefix in (
        ("train", f"train.bs{key}"),
        ("train_ddp", f"train.bs{key}.ddp"),
        ("inference", f"infer.bs{key}"),
    ):
        infos = [p[part] for p in parts if isinstance(p.get(part), dict)]
        if not infos:
            continue
        summary = group_summary(result.measurements, prefix)
        entry[part] = {
            **summary,
            "stop_reason": entry["stop_reason"],
            "stop_reasons": [i.get("stop_reason") for i in infos],
            "peak_memory_bytes": max(i.get("peak_memory_bytes") or 0 for i in infos),
            "memory_kind": infos[0].get("memory_kind"),
            "warmup_capped": any(i.get("warmup_capped") for i in infos),
            "warmup_steps": [i.get("warmup_steps") for i in infos],
        }
        bad = [i for i in infos if i.get("status") in ("oom", "error")]
        if bad and not summary.get("n"):
            entry[part].update(status=bad[0]["status"], error=bad[0].get("error", ""))
    return entry


__all__ = ["CONFIDENCE", "group_summary", "pool_metrics", "pool_replicates"]
