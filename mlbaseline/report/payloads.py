"""Kind-specific facts the report reads from `result.data` (the runners' payloads).

Metric names and roles are the stable contract; payloads are each runner's own. Everything
here reads a payload when it is there and otherwise computes the figure from the raw metrics
(with `mlbaseline.stats`), or says "not measured". No function here measures anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from mlbaseline.documents.base import one_line
from mlbaseline.documents.data_throughput import BatchEntry, Noise, PartSummary
from mlbaseline.documents.data_throughput import Data as ThroughputData
from mlbaseline.errors import ResultFileError
from mlbaseline.report.data import Group, Telemetry, all_groups, estimate, finite, share
from mlbaseline.results import Result

# the one mapping of in-memory values to a file's (NaN as null, numpy scalars as numbers)
from mlbaseline.results import _jsonable as jsonable

M = TypeVar("M", bound=BaseModel)
DEFAULT_KNEE_TOLERANCE = 0.05
MANIFEST_NAME = "subset_manifest.json"  # as mlbaseline.subset.manifest writes it


def _section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """`doc[key]` when it is there, else empty. The payload's fields have the types of its
    kind's model (`documents.data_<kind>`: a file is validated when it is read); a section
    is absent only where the writer omits it (a dry run, an interrupted run, a CPU run) or in
    a `Result` built in memory with part of a payload."""
    value = doc.get(key)
    return value if isinstance(value, Mapping) else {}


def _first(*values: Any) -> Any:
    """The first value that is not None (a payload's own field before the manifest's)."""
    return next((v for v in values if v is not None), None)


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
        _per_class(_section(d, "counts").get("per_class"), "selected")
        or _plan_counts(d.get("plan"), "selected")
        or _per_class(m.get("counts"), "selected")
    )
    f.full_counts = _plan_counts(d.get("plan"), "images") or _per_class(
        m.get("counts"), "available"
    )
    selected = _first(_section(d, "counts").get("selected"), d.get("n"), m.get("n"))
    f.samples = int(selected) if isinstance(selected, int) else sum(f.class_counts.values()) or None
    f.classes = len(f.class_counts) or None
    f.strategy = _first(d.get("strategy"), m.get("strategy"))
    f.seed = _first(d.get("seed"), m.get("seed"))
    f.sha256 = d.get("manifest_sha256")
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
    kl = _section(d, "kl")
    f.kl_mean = _float(kl.get("mean"))
    f.kl_threshold = _float(kl.get("threshold"))
    if f.kl_threshold is None and r is not None:
        f.kl_threshold = _float(_config([r], "subset", "kl_threshold"))
    f.extractor = _first(kl.get("extractor"), _section(d, "extractor").get("name"))
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


def typed_data(result: Result, model: type[M]) -> M:
    """`result.data` as its kind's typed model (documents.data_<kind>). A file was validated
    when it was read; a result still in memory (`mlb run` renders its report from them, each
    command prints its summary) goes through its JSON form, as its file holds it (NaN as null,
    numpy scalars as numbers)."""
    body = json.dumps(jsonable(result.data))
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        where = f"{result.kind} result: data"
        raise ResultFileError(one_line(exc, where, json.loads(body))) from None


def throughput_data(result: Result) -> ThroughputData | None:
    """The payload of a throughput result (None for another kind)."""
    return typed_data(result, ThroughputData) if result.kind == "throughput" else None


def noise_records(results: Sequence[Result]) -> dict[str, Noise]:
    """Per metric, the noise record (`data.noise`, stats.noise) of the throughput results."""
    out: dict[str, Noise] = {}
    for r in results:
        data = throughput_data(r)
        if data is not None and data.noise:
            out.update(data.noise)
    return out


def _batch_entry(
    result: Result, family: str, batch: int | None
) -> tuple[BatchEntry | None, PartSummary | None]:
    """The throughput runner's entry for one batch size (status, stop reason) and its "train"
    or "inference" part (summary, loop facts, peak memory); (None, None) when not recorded."""
    data = throughput_data(result)
    entry = data.batch_sizes.get(str(batch)) if data is not None and batch is not None else None
    if entry is None:
        return None, None
    return entry, entry.train if family == "train" else entry.inference


def batch_facts(result: Result, g: Group) -> BatchFacts:
    entry, part = _batch_entry(result, g.family, g.batch_size)
    facts = BatchFacts()
    if entry is None:
        return facts
    facts.status = entry.status
    facts.stop_reason = entry.stop_reason
    if part is None:
        return facts
    # the part's own account wins over the entry's: a part that failed says so itself
    facts.status = part.status or facts.status
    facts.stop_reason = part.stop_reason or facts.stop_reason
    if part.peak_memory_bytes is not None:
        facts.peak_memory = float(part.peak_memory_bytes)
    facts.memory_kind = part.memory_kind or None
    window = part.telemetry_window_s
    if window is not None and len(window) == 2:
        facts.window = (window[0], window[1])
    return facts


def failed_sizes(result: Result) -> list[tuple[int, str, str]]:
    """Batch sizes (and parts) the throughput runner recorded as out of memory or failed:
    (batch size, part, "oom: message")."""
    data = throughput_data(result)
    out: list[tuple[int, str, str]] = []
    for entry in data.batch_sizes.values() if data is not None else []:
        for name, part in (("train", entry.train), ("inference", entry.inference)):
            if part is not None and part.status in ("oom", "error"):
                out.append(
                    (entry.batch_size, name, f"{part.status}: {part.error or ''}".rstrip(": "))
                )
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
    entry = _section(level, "stats").get(f"p{q:g}")
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
    knee = _section(result.data, "sweep").get("knee")
    if "sweep" in result.data:
        shown = knee if knee is not None else "none (no swept level meets it)"
        lines.append(f"- Highest concurrency whose p99 meets the SLA: **{shown}**")
    omission = _section(result.data, "coordinated_omission").get("explanation")
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
        k = _section(r.data, "knee").get("workers")
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
        cpus = r.data.get("usable_cpus") or _section(r.environment, "informational").get(
            "usable_cpus"
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
        rec = r.data.get("recommendation")
        if isinstance(rec, str):
            lines.append(f"- Recommendation: {rec}")
        corrupt = _section(r.data, "corrupt").get("count")
        if isinstance(corrupt, int) and corrupt:
            lines.append(f"- {corrupt} unreadable or corrupt file(s) listed and skipped")
        pin = r.data.get("pin_memory_effect")
        if isinstance(pin, Mapping) and pin.get("applicable") is False:
            lines.append(f"- pin_memory: not applicable ({pin.get('reason', 'no CUDA device')})")
        bound = _section(r.data, "input_bound").get("message")
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
