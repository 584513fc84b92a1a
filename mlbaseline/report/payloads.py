"""Kind-specific facts the report reads from `result.data` (the runners' payloads).

Metric names and roles are the stable contract; payloads are each runner's own. Everything
here reads a payload when it is there and otherwise computes the figure from the raw metrics
(with `mlbaseline.stats`), or says "not measured". No function here measures anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlbaseline.report.data import Group, Telemetry, all_groups, estimate, finite, share
from mlbaseline.results import Result

DEFAULT_KNEE_TOLERANCE = 0.05


def pick(doc: Any, *paths: str, default: Any = None) -> Any:
    """The first dotted path present (and not None) in a nested mapping."""
    for path in paths:
        node = doc
        for part in path.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                node = None
                break
        if node is not None:
            return node
    return default


def _walk(doc: Any) -> Iterator[Mapping[str, Any]]:
    """Every mapping nested anywhere in a payload (depth first)."""
    if isinstance(doc, Mapping):
        yield doc
        for v in doc.values():
            yield from _walk(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _walk(v)


def _config(results: Sequence[Result], section: str, key: str) -> Any:
    for r in results:
        v = (r.config.get(section) or {}).get(key)
        if v is not None:
            return v
    return None


# ---------------------------------------------------------------- subset


@dataclass
class SubsetFacts:
    samples: int | None = None
    classes: int | None = None
    strategy: str | None = None
    seed: int | None = None
    mean_size: str | None = None
    kl_mean: float | None = None
    kl_threshold: float | None = None
    kl_verdict: str | None = None
    class_kl: float | None = None
    sha256: str | None = None
    feature_kl: dict[str, float] = field(default_factory=dict)
    class_counts: dict[str, int] = field(default_factory=dict)
    full_counts: dict[str, int] = field(default_factory=dict)


def _counts(value: Any) -> dict[str, int]:
    """{class: n} from a mapping, or from a list of {class|name, n|count|chosen|selected}."""
    if isinstance(value, Mapping):
        return {str(k): int(v) for k, v in value.items() if isinstance(v, (int, float))}
    out: dict[str, int] = {}
    if isinstance(value, list):
        for row in value:
            if not isinstance(row, Mapping):
                continue
            name = pick(row, "class", "name", "label")
            n = pick(row, "n", "count", "chosen", "selected", "quota", "subset")
            if name is not None and isinstance(n, (int, float)):
                out[str(name)] = int(n)
    return out


def _full_counts(value: Any) -> dict[str, int]:
    if isinstance(value, list):
        out = {}
        for row in value:
            if isinstance(row, Mapping):
                name = pick(row, "class", "name", "label")
                n = pick(row, "available", "full", "total", "images")
                if name is not None and isinstance(n, (int, float)):
                    out[str(name)] = int(n)
        return out
    return _counts(value)


def subset_facts(
    results: Sequence[Result], manifest: Mapping[str, Any] | None
) -> SubsetFacts | None:
    """Subset statistics from a subset result (preferred) or a manifest JSON."""
    if not results and not manifest:
        return None
    r = results[-1] if results else None
    doc: Mapping[str, Any] = r.data if r is not None else (manifest or {})
    f = SubsetFacts()
    f.class_counts = _counts(
        pick(doc, "class_counts", "counts.per_class", "counts", "plan", "classes")
    )
    f.full_counts = _full_counts(pick(doc, "full_counts", "source_counts", "plan"))
    f.samples = pick(doc, "n", "samples", "counts.total", "total")
    if not isinstance(f.samples, int):
        f.samples = sum(f.class_counts.values()) if f.class_counts else None
    f.classes = len(f.class_counts) if f.class_counts else pick(doc, "num_classes")
    f.strategy = pick(doc, "strategy", "plan.strategy")
    f.seed = pick(doc, "seed", "chosen_seed")
    f.sha256 = pick(doc, "manifest_sha256", "sha256", "manifest.sha256")
    kl = pick(doc, "kl", "validation") or {}
    f.kl_mean = _float(pick(kl, "mean", "kl_mean") if isinstance(kl, Mapping) else kl)
    f.kl_mean = f.kl_mean if f.kl_mean is not None else _float(pick(doc, "kl_mean"))
    f.kl_threshold = _float(pick(kl, "threshold") if isinstance(kl, Mapping) else None)
    if f.kl_threshold is None and r is not None:
        f.kl_threshold = _float(_config([r], "subset", "kl_threshold"))
    per_feature = pick(kl, "per_feature", "features") if isinstance(kl, Mapping) else None
    if isinstance(per_feature, Mapping):
        f.feature_kl = {
            str(k): float(v) for k, v in per_feature.items() if isinstance(v, (int, float))
        }
    f.class_kl = _float(
        pick(kl, "class_proportion", "class_divergence") if isinstance(kl, Mapping) else None
    )
    f.class_kl = f.class_kl if f.class_kl is not None else _float(pick(doc, "class_proportion_kl"))
    if r is not None:
        checks = [c for c in r.verdict.checks if "kl" in c.name.lower()]
        f.kl_verdict = ", ".join(f"{c.name}: {c.status}" for c in checks) or r.verdict.status
    w, h = (
        _float(pick(doc, "mean_width", "image_size.mean_width")),
        _float(pick(doc, "mean_height", "image_size.mean_height")),
    )
    if w is not None and h is not None:
        f.mean_size = f"{w:.0f} × {h:.0f} px"
    return f


def _float(v: Any) -> float | None:
    return (
        float(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        else None
    )


# ---------------------------------------------------------------- throughput


@dataclass
class BatchFacts:
    peak_memory: float | None = None
    stop_reason: str | None = None
    window: tuple[float, float] | None = None  # on the telemetry clock, when recorded


def _batch_entry(result: Result, family: str, batch: int | None) -> Mapping[str, Any]:
    """The payload entry describing one batch size of one mode, if the runner wrote one."""
    if batch is None:
        return {}
    mode_words = {"train": ("train", "training"), "infer": ("infer", "inference")}[family]
    best: Mapping[str, Any] = {}
    for d in _walk(result.data):
        if d.get("batch_size") == batch:
            mode = str(d.get("mode", d.get("phase", "")))
            if (not mode or mode in mode_words) and (mode in mode_words or not best):
                best = d
    return best


def batch_facts(result: Result, g: Group) -> BatchFacts:
    entry = _batch_entry(result, g.family, g.batch_size)
    facts = BatchFacts()
    peak = next((m for k, m in g.other.items() if "peak" in k or "memory" in k), None)
    if peak is not None and peak.values:
        facts.peak_memory = float(max(peak.values))
    else:
        facts.peak_memory = _float(
            pick(entry, "peak_memory_bytes", "peak_memory", "memory.peak_bytes")
        )
    reason = pick(entry, "stop_reason", "ended_by", "stop.reason", "stopped_by")
    facts.stop_reason = str(reason) if reason is not None else None
    start, end = (
        pick(entry, "telemetry_start_s", "t_start_s", "t0_s"),
        pick(entry, "telemetry_end_s", "t_end_s", "t1_s"),
    )
    if isinstance(start, (int, float)) and isinstance(end, (int, float)):
        facts.window = (float(start), float(end))
    return facts


def oom_sizes(result: Result) -> list[tuple[int, str]]:
    """Batch sizes recorded as out of memory: (batch size, message)."""
    out = []
    for d in _walk(result.data):
        b = d.get("batch_size")
        oom = d.get("oom") is True or str(d.get("status", "")).lower() in ("oom", "out_of_memory")
        if isinstance(b, int) and oom:
            out.append((b, str(d.get("message") or d.get("error") or "out of memory")))
    return sorted(set(out))


def kernel_active(tel: Telemetry | None, result: Result, g: Group) -> str:
    """Mean GPU kernel-active % while this batch size ran, or why it is not known."""
    if tel is None or not tel.has_gpu:
        return "not measured (no GPU telemetry)"
    part = tel.phase(g.prefix) if g.prefix in set(tel.phases) else None
    if part is None:
        facts = batch_facts(result, g)
        part = tel.window(*facts.window) if facts.window else None
    if part is None or part.n == 0:
        x = np.concatenate([finite(v) for v in tel.gpu_active.values()])
        return f"{x.mean():.0f}% (whole run)" if x.size else "not measured"
    x = np.concatenate([finite(v) for v in part.gpu_active.values()])
    return f"{x.mean():.0f}%" if x.size else "not measured"


# ---------------------------------------------------------------- latency


def sla_p99(results: Sequence[Result]) -> float | None:
    return _float(_config(results, "latency", "sla_p99_s"))


def latency_extras(result: Result) -> list[str]:
    """Open-loop achieved vs target rate, late sends, the SLA knee of a sweep, when recorded."""
    lines = []
    for d in _walk(result.data):
        target, achieved = _float(d.get("target_rate")), _float(d.get("achieved_rate"))
        if target is not None and achieved is not None:
            late = _float(pick(d, "late_share", "late_fraction"))
            where = d.get("level") or d.get("key") or d.get("prefix") or ""
            text = f"- {where}: achieved {achieved:.1f} of {target:.1f} requests/s".replace(
                "- :", "-"
            )
            if late is not None:
                text += f"; {late:.1%} of sends started late"
            lines.append(text)
    knee = pick(result.data, "sla_knee", "max_concurrency_meeting_sla", "sweep.knee", "knee")
    if knee is not None:
        lines.append(f"- Highest concurrency whose p99 meets the SLA: **{knee}**")
    note = pick(result.data, "coordinated_omission_note", "note")
    if isinstance(note, str):
        lines.append(f"- {note}")
    return [*lines, ""] if lines else []


# ---------------------------------------------------------------- dataloader


@dataclass
class LoaderPoint:
    label: str
    workers: int
    variant: tuple[str, ...]
    median: float
    low: float
    high: float
    split_ms: dict[str, float]
    cpu_pct: float | None = None
    is_knee: bool = False
    prefix: str = ""


def _setting_entry(result: Result, g: Group) -> Mapping[str, Any]:
    for d in _walk(result.data):
        if d.get("prefix") == g.prefix or d.get("group") == g.prefix:
            return d
    for d in _walk(result.data):
        if d.get("num_workers", d.get("workers")) == g.workers:
            pin = bool(d.get("pin_memory", False))
            cold = bool(d.get("cold", False)) or d.get("cache") == "cold"
            if pin == ("pin" in g.variant) and cold == ("cold" in g.variant):
                return d
    return {}


def _rate_estimate(g: Group) -> tuple[float, float, float] | None:
    if g.rate is not None and g.rate.values:
        e = estimate(g.rate.values)
        return (e.median, e.low, e.high) if e else None
    batch = g.other.get("batch")
    if g.total is not None and g.total.values:
        e = estimate(g.total.values)  # seconds per sample -> samples/s; the CI flips
        if e and e.median > 0 and e.low > 0:
            return (1 / e.median, 1 / e.high, 1 / e.low)
    del batch
    return None


def _cpu_of(result: Result, g: Group, entry: Mapping[str, Any]) -> float | None:
    cpu = next((m for k, m in g.other.items() if k.startswith("cpu")), None)
    if cpu is not None and cpu.values:
        return float(np.mean(cpu.values))
    v = _float(
        pick(entry, "cpu_pct", "cpu_percent", "cpu_util_pct", "cpu.mean_pct", "cpu_pct_mean")
    )
    if v is None:
        util = _float(pick(entry, "cpu_utilization", "cpu_util"))
        v = util * 100 if util is not None and util <= 1.0 else util
    return v


def loader_sweep(results: Sequence[Result]) -> list[LoaderPoint]:
    """Every dataloader setting: samples/s with CI, the per-sample split, CPU, the knee."""
    points: list[LoaderPoint] = []
    for r in results:
        for g in all_groups([r], "dataloader"):
            est = _rate_estimate(g)
            if g.workers is None or est is None:
                continue
            split = {}
            for s, m in g.stages.items():
                if m.values:
                    split[s] = float(np.mean(m.values)) * 1e3
            label = " ".join([str(g.workers), *g.variant])
            entry = _setting_entry(r, g)
            points.append(
                LoaderPoint(
                    label, g.workers, g.variant, *est, split, _cpu_of(r, g, entry), prefix=g.prefix
                )
            )
    knee = loader_knee(results, points)
    for p in points:
        p.is_knee = knee is not None and p.workers == knee and not p.variant
    return points


def loader_knee(results: Sequence[Result], points: Sequence[LoaderPoint]) -> int | None:
    """The runner's knee if it recorded one, else computed the same way: the smallest worker
    count (warm cache, no pin) whose median samples/s is within the knee tolerance of the best."""
    for r in results:
        k = pick(r.data, "knee.workers", "knee.num_workers", "knee")
        if isinstance(k, int) and not isinstance(k, bool):
            return k
    plain = [p for p in points if not p.variant]
    if not plain:
        return None
    tol = _float(_config(results, "dataloader", "knee_tolerance")) or DEFAULT_KNEE_TOLERANCE
    best = max(p.median for p in plain)
    return min(p.workers for p in plain if p.median >= (1 - tol) * best)


def loader_extras(results: Sequence[Result], points: Sequence[LoaderPoint]) -> list[str]:
    lines = []
    knee = loader_knee(results, points)
    cpus = None
    for r in results:
        cpus = pick(r.data, "usable_cpus", "cpus.usable", "cpus") or pick(
            r.environment, "informational.usable_cpus"
        )
        if cpus:
            break
    if knee is not None:
        tol = _tol(results)
        text = f"- Knee: **{knee} workers** (smallest within {tol:.0%} of the best samples/s)"
        if isinstance(cpus, int):
            thumb = min(64, 2 * cpus + 1)
            text += f"; rule of thumb min(64, 2·cpus + 1) = {thumb} for {cpus} usable CPUs"
        lines.append(text)
    for r in results:
        rec = pick(r.data, "recommendation", "knee.recommendation")
        if isinstance(rec, str):
            lines.append(f"- Recommendation: {rec}")
        capped = pick(r.data, "workers_capped", "capped")
        if capped:
            lines.append(f"- Worker sweep capped at the usable CPUs: {capped}")
        corrupt = pick(r.data, "corrupt", "corrupt_files", "unreadable")
        if isinstance(corrupt, list) and corrupt:
            lines.append(f"- {len(corrupt)} unreadable or corrupt file(s) skipped")
        whole = pick(r.data, "split_available")
        if whole is False:
            lines.append(
                "- The dataset does not expose read/decode/transform: "
                "measured per sample as a whole"
            )
    lines += _cold_warm(points)
    return [*lines, ""] if lines else []


def _tol(results: Sequence[Result]) -> float:
    return _float(_config(results, "dataloader", "knee_tolerance")) or DEFAULT_KNEE_TOLERANCE


def _cold_warm(points: Sequence[LoaderPoint]) -> list[str]:
    out = []
    warm = {p.workers: p for p in points if not p.variant}
    for p in points:
        if p.variant == ("cold",) and p.workers in warm:
            w = warm[p.workers]
            out.append(
                f"- Cold page cache at {p.workers} workers: {p.median:.1f} samples/s vs "
                f"{w.median:.1f} warm ({p.median / w.median - 1:+.0%})"
            )
    return out


def data_wait_level(g: Group) -> str | None:
    s = share(g.stages.get("data_wait"), g.total)
    if s is None:
        return None
    return "high" if s >= 0.20 else "moderate" if s >= 0.05 else "none"
