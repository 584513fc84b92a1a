"""Kind-specific facts the report reads from `result.data` (the runners' payloads).

Metric names and roles are the stable contract; payloads are each runner's own. Everything
here reads a payload when it is there and otherwise computes the figure from the raw metrics
(with `mlbaseline.stats`), or says "not measured". No function here measures anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline.report.data import Group, Telemetry, all_groups, estimate, finite, share
from mlbaseline.results import Result

DEFAULT_KNEE_TOLERANCE = 0.05
MANIFEST_NAME = "subset_manifest.json"  # as mlbaseline.subset.manifest writes it


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
    mean_file_bytes: float | None = None
    kl_mean: float | None = None
    kl_threshold: float | None = None
    kl_verdict: str | None = None
    class_kl: float | None = None
    sha256: str | None = None
    reference: str | None = None
    extractor: str | None = None
    feature_kl: dict[str, float] = field(default_factory=dict)
    constant_features: list[str] = field(default_factory=list)
    per_class_kl: dict[str, float | None] = field(default_factory=dict)
    class_counts: dict[str, int] = field(default_factory=dict)
    full_counts: dict[str, int] = field(default_factory=dict)
    tries: int = 0
    corrupt: int = 0


def _per_class(counts: Any, key: str) -> dict[str, int]:
    """{class: n} from {class: n} or from the manifest's {class: {available, selected}}."""
    out: dict[str, int] = {}
    if isinstance(counts, Mapping):
        for name, v in counts.items():
            if isinstance(v, Mapping):
                v = v.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[str(name)] = int(v)
    return out


def _plan_counts(plan: Any, key: str) -> dict[str, int]:
    """{class: n} from the subset runner's plan rows ({class, images, quota, selected})."""
    out: dict[str, int] = {}
    for row in plan if isinstance(plan, list) else []:
        if isinstance(row, Mapping) and isinstance(row.get(key), int):
            out[str(row.get("class"))] = int(row[key])
    return out


def _image_sizes(folder: Path, outputs: Sequence[str], limit: int = 2048) -> str | None:
    """Mean width × height of the subset's images, read from their headers (PIL opens lazily:
    no pixel is decoded). None when the folder is gone. This reads data, it measures nothing."""
    from PIL import Image, UnidentifiedImageError

    sizes = []
    for rel in outputs[:limit]:
        try:
            with Image.open(folder / rel) as im:
                sizes.append(im.size)
        except (OSError, UnidentifiedImageError, ValueError):
            continue
    if not sizes:
        return None
    w = float(np.mean([s[0] for s in sizes]))
    h = float(np.mean([s[1] for s in sizes]))
    return f"{w:.0f} × {h:.0f} px (mean over {len(sizes)} image headers)"


def _manifest_facts(f: SubsetFacts, manifest: Mapping[str, Any], folders: list[Path]) -> None:
    entries = [e for e in manifest.get("entries") or [] if isinstance(e, Mapping)]
    sizes = [e["bytes"] for e in entries if isinstance(e.get("bytes"), (int, float))]
    if sizes:
        f.mean_file_bytes = float(np.mean(sizes))
    outputs = [str(e.get("output", "")) for e in entries]
    for folder in folders:  # the first folder that still holds the subset's images
        if f.mean_size is None and outputs:
            f.mean_size = _image_sizes(folder, outputs)
    f.corrupt = f.corrupt or len(manifest.get("excluded_corrupt") or [])


def subset_facts(
    results: Sequence[Result], manifest: Mapping[str, Any] | None, manifest_dir: Path | None = None
) -> SubsetFacts | None:
    """Subset statistics from a subset result (preferred) and/or its manifest.

    Sources: the subset runner's `data` (plan rows, `counts.per_class`, `kl` with `mean`,
    `threshold`, `per_feature`, `class_proportion`, `per_class`, `tries`, `manifest_sha256`);
    the manifest (`counts` {class: {available, selected}}, `entries` with bytes). The mean image
    size comes from `data["image_size"]` when the runner records it, else from the image
    headers in the subset folder when it still exists, else "not measured"."""
    if not results and not manifest:
        return None
    r = results[-1] if results else None
    d: Mapping[str, Any] = r.data if r is not None else {}
    m: Mapping[str, Any] = manifest or {}
    f = SubsetFacts()
    f.class_counts = (
        _per_class(pick(d, "counts.per_class"), "selected")
        or _plan_counts(d.get("plan"), "selected")
        or _per_class(m.get("counts"), "selected")
    )
    f.full_counts = _plan_counts(d.get("plan"), "images") or _per_class(
        m.get("counts"), "available"
    )
    selected = pick(d, "counts.selected", "n", default=m.get("n"))
    f.samples = int(selected) if isinstance(selected, int) else sum(f.class_counts.values()) or None
    f.classes = len(f.class_counts) or None
    f.strategy = pick(d, "strategy", default=m.get("strategy"))
    f.seed = pick(d, "seed", default=m.get("seed"))
    f.sha256 = pick(d, "manifest_sha256")
    _kl_facts(f, d, r)
    f.tries = len(d.get("tries") or [])
    f.corrupt = len(d.get("corrupt") or [])
    ref = d.get("reference")
    if isinstance(ref, Mapping) and ref.get("size") is not None:
        whole = " (the whole dataset)" if ref.get("whole_dataset") else " (seeded sample)"
        f.reference = f"{ref['size']} images{whole}"
    if r is not None:
        checks = [c for c in r.verdict.checks if "kl" in c.name.lower()]
        f.kl_verdict = ", ".join(f"{c.name}: {c.status}" for c in checks) or r.verdict.status
    size = d.get("image_size")
    if isinstance(size, Mapping) and _float(size.get("mean_width")) is not None:
        f.mean_size = f"{size['mean_width']:.0f} × {size.get('mean_height', 0):.0f} px"
    folders = [manifest_dir] if manifest_dir is not None else []
    if isinstance(d.get("output"), str):
        folders.append(Path(d["output"]))
    if not m and folders:
        m = _read_manifest(folders[-1])
    if m:
        _manifest_facts(f, m, folders)
    return f


def _kl_facts(f: SubsetFacts, d: Mapping[str, Any], r: Result | None) -> None:
    """The KL part of the subset facts: mean, threshold, extractor, per feature and class."""
    kl = d.get("kl") if isinstance(d.get("kl"), Mapping) else {}
    f.kl_mean = _float(kl.get("mean"))
    f.kl_threshold = _float(kl.get("threshold"))
    if f.kl_threshold is None and r is not None:
        f.kl_threshold = _float(_config([r], "subset", "kl_threshold"))
    f.extractor = pick(kl, "extractor", default=pick(d, "extractor.name"))
    per_feature = kl.get("per_feature")
    if isinstance(per_feature, Mapping):
        f.feature_kl = {str(k): float(v) for k, v in per_feature.items() if _float(v) is not None}
    f.constant_features = [str(c) for c in kl.get("constant_features") or []]
    per_class = kl.get("per_class")
    if isinstance(per_class, Mapping):
        f.per_class_kl = {str(k): _float(v) for k, v in per_class.items()}
    f.class_kl = _float(kl.get("class_proportion"))


def _read_manifest(folder: Path) -> Mapping[str, Any]:
    """The subset folder's manifest, only if it validates (no '..' or absolute entries), since
    its entries are opened to read image headers; anything else counts as absent."""
    import json

    from mlbaseline.errors import MlbError
    from mlbaseline.subset.manifest import load_manifest

    try:
        load_manifest(folder / MANIFEST_NAME)
        doc = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (MlbError, OSError, UnicodeDecodeError, ValueError):
        return {}
    return doc if isinstance(doc, Mapping) else {}


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
    memory_kind: str | None = None  # e.g. cuda_max_memory_allocated, cpu_rss_growth_hwm
    stop_reason: str | None = None
    status: str | None = None
    window: tuple[float, float] | None = None  # on the telemetry clock, when recorded


def _batch_entry(result: Result, family: str, batch: int | None) -> dict[str, Any]:
    """The throughput runner's entry for one batch size and mode:
    `data["batch_sizes"][str(B)]` (status, stop_reason) merged with its "train" or
    "inference" part (summary, loop facts, peak memory)."""
    if batch is None:
        return {}
    entries = result.data.get("batch_sizes")
    if not isinstance(entries, Mapping):
        return {}
    entry = entries.get(str(batch))
    if not isinstance(entry, Mapping):
        return {}
    part = entry.get("train" if family == "train" else "inference")
    return {**entry, **(part if isinstance(part, Mapping) else {})}


def batch_facts(result: Result, g: Group) -> BatchFacts:
    entry = _batch_entry(result, g.family, g.batch_size)
    facts = BatchFacts()
    facts.peak_memory = _float(entry.get("peak_memory_bytes"))
    kind = entry.get("memory_kind")
    facts.memory_kind = str(kind) if kind else None
    reason = entry.get("stop_reason")
    facts.stop_reason = str(reason) if reason is not None else None
    facts.status = str(entry["status"]) if entry.get("status") is not None else None
    window = entry.get("telemetry_window_s")
    if isinstance(window, list) and len(window) == 2 and all(_float(v) is not None for v in window):
        facts.window = (float(window[0]), float(window[1]))
    return facts


def failed_sizes(result: Result) -> list[tuple[int, str, str]]:
    """Batch sizes (and parts) the throughput runner recorded as out of memory or failed:
    (batch size, part, "oom: message")."""
    out = []
    entries = result.data.get("batch_sizes")
    if not isinstance(entries, Mapping):
        return out
    for key, entry in entries.items():
        if not isinstance(entry, Mapping):
            continue
        for part in ("train", "inference"):
            info = entry.get(part)
            if isinstance(info, Mapping) and info.get("status") in ("oom", "error"):
                b = int(entry.get("batch_size", key))
                out.append((b, part, f"{info['status']}: {info.get('error', '')}".rstrip(": ")))
    return out


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
        return f"{x.mean():.0f}% (run mean: per-size window not recorded)" if x.size else "–"
    x = np.concatenate([finite(v) for v in part.gpu_active.values()])
    return f"{x.mean():.0f}%" if x.size else "not measured"


# ---------------------------------------------------------------- latency


def sla_p99(results: Sequence[Result]) -> float | None:
    return _float(_config(results, "latency", "sla_p99_s"))


def latency_level(result: Result, prefix: str) -> Mapping[str, Any]:
    """The latency runner's record of one level (`data["levels"][key]`), matched by prefix."""
    levels = result.data.get("levels")
    if isinstance(levels, Mapping):
        for level in levels.values():
            if isinstance(level, Mapping) and level.get("prefix") == prefix:
                return level
    return {}


def level_percentile(level: Mapping[str, Any], q: float) -> tuple[float, float, float] | None:
    """(value, CI low, CI high) of a percentile as the latency runner stored it."""
    entry = pick(level, f"stats.p{q:g}")
    if not isinstance(entry, Mapping):
        return None
    value, ci = _float(entry.get("value")), entry.get("ci")
    if value is None or not isinstance(ci, list) or len(ci) != 2:
        return None
    lo, hi = _float(ci[0]), _float(ci[1])
    return (value, lo, hi) if lo is not None and hi is not None else None


def latency_extras(result: Result) -> list[str]:
    """Open-loop achieved vs target rate and late sends, failed requests, the sweep's SLA knee,
    and what the closed loop hides (coordinated omission), as the latency runner recorded them."""
    lines = []
    levels = result.data.get("levels")
    for key, level in levels.items() if isinstance(levels, Mapping) else []:
        if not isinstance(level, Mapping):
            continue
        target, achieved = _float(level.get("target_rate")), _float(level.get("achieved_rate"))
        if target is not None:
            text = f"- {key}: open loop, target {target:g} requests/s"
            text += f", achieved {achieved:.3g}" if achieved is not None else ""
            late = _float(level.get("late_share"))
            if late is not None:
                text += f"; {late:.1%} of sends started late"
            lines.append(text)
        errors = level.get("errors")
        if isinstance(errors, Mapping) and errors.get("count"):
            lines.append(
                f"- {key}: {errors['count']} failed request(s) ({errors.get('share', 0):.2%})"
            )
    knee = pick(result.data, "sweep.knee")
    if "sweep" in result.data:
        shown = knee if knee is not None else "none (no swept level meets it)"
        lines.append(f"- Highest concurrency whose p99 meets the SLA: **{shown}**")
    omission = pick(result.data, "coordinated_omission.explanation")
    if isinstance(omission, str):
        lines.append(f"- Coordinated omission: {omission}")
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
    """The dataloader runner's sweep row for one setting (`data["settings"]`, by `key`)."""
    for row in result.data.get("settings") or []:
        if isinstance(row, Mapping) and row.get("key") == g.prefix:
            return row
    return {}


def _rate_estimate(g: Group) -> tuple[float, float, float] | None:
    """Median samples/s with its bootstrap CI, from the rate metric, else from per-sample time."""
    if g.rate is not None and g.rate.values:
        e = estimate(g.rate.values)
        return (e.median, e.low, e.high) if e else None
    if g.total is not None and g.total.values:
        e = estimate(g.total.values)  # seconds per sample -> samples/s; the CI flips
        if e and e.median > 0 and e.low > 0:
            return (1 / e.median, 1 / e.high, 1 / e.low)
    return None


def _cpu_of(entry: Mapping[str, Any]) -> float | None:
    """CPU use during a setting, % of the usable CPUs (the runner's `cpu_util` is a share)."""
    util = _float(entry.get("cpu_util"))
    return util * 100 if util is not None else None


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
                    label, g.workers, g.variant, *est, split, _cpu_of(entry), prefix=g.prefix
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
        corrupt = pick(r.data, "corrupt.count")
        if isinstance(corrupt, int) and corrupt:
            lines.append(f"- {corrupt} unreadable or corrupt file(s) listed and skipped")
        pin = r.data.get("pin_memory_effect")
        if isinstance(pin, Mapping) and pin.get("applicable") is False:
            lines.append(f"- pin_memory: not applicable ({pin.get('reason', 'no CUDA device')})")
        bound = pick(r.data, "input_bound.message")
        if isinstance(bound, str):
            lines.append(f"- Input-bound: {bound}")
    whole = [g.prefix for g in all_groups(results, "dataloader") if g.total and not g.stages]
    if whole:
        lines.append(
            "- The dataset does not expose read/decode/transform: measured per sample as a "
            f"whole ({', '.join(whole[:4])}{'…' if len(whole) > 4 else ''})"
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
