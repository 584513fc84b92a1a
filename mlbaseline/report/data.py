"""What the report reads out of results: metric groups, their statistics, and telemetry timelines.

Pure functions over `Result` objects and CSV text; nothing here measures and nothing imports
torch. Groups follow the naming contract of the rules file: every decomposed quantity is a set
of metrics sharing a dotted prefix, with `Metric.meta` roles total / stage / residual / rate /
other. Results written before the roles existed (or by hand) fall back to the name suffixes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.comparison.matching import replicate_medians as comparison_medians
from mlbaseline.results import Metric, Result

# Suffixes of the totals per family, used only when a metric carries no `meta.role`.
_TOTAL_SUFFIXES = ("step", "batch", "request", "sample")
_KNOWN_STAGES = (
    "data_wait",
    "h2d",
    "forward",
    "loss",
    "backward",
    "optimizer",
    "grad_sync",
    "queue",
    "preprocess",
    "compute",
    "postprocess",
    "read",
    "decode",
    "transform",
)

_BATCH_RE = re.compile(r"^(?:train|infer)\.bs(\d+)((?:\.[a-z_]+)*)$")
_LATENCY_RE = re.compile(r"^latency(?:\.(c|r)([0-9p]+))?$")
_LOADER_RE = re.compile(r"^dataloader\.w(\d+)((?:\.[a-z_]+)*)$")


@dataclass
class Group:
    """One decomposed quantity: a total, its stages (in the total's order), a residual, a rate."""

    prefix: str
    total: Metric | None = None
    stages: dict[str, Metric] = field(default_factory=dict)
    residual: Metric | None = None
    rate: Metric | None = None
    other: dict[str, Metric] = field(default_factory=dict)

    @property
    def family(self) -> str:
        """train / infer / latency / dataloader / other, from the prefix."""
        head = self.prefix.split(".", 1)[0]
        return head if head in ("train", "infer", "latency", "dataloader") else "other"

    @property
    def batch_size(self) -> int | None:
        m = _BATCH_RE.match(self.prefix)
        return int(m.group(1)) if m else None

    @property
    def label(self) -> str:
        """Short label for tables and axes: "16", "16 ddp", "4 pin cold", "c4", or the prefix."""
        m = _BATCH_RE.match(self.prefix) or _LOADER_RE.match(self.prefix)
        if m:
            return " ".join([m.group(1), *(p for p in m.group(2).split(".") if p)])
        return self.level or self.prefix

    @property
    def workers(self) -> int | None:
        m = _LOADER_RE.match(self.prefix)
        return int(m.group(1)) if m else None

    @property
    def variant(self) -> tuple[str, ...]:
        """Dataloader setting flags from the prefix: ("pin",), ("cold",), ("pin", "cold")."""
        m = _LOADER_RE.match(self.prefix)
        return tuple(p for p in m.group(2).split(".") if p) if m else ()

    @property
    def level(self) -> str:
        """Latency load level: "c4" (closed loop, 4 clients), "r50" (open loop), or ""."""
        m = _LATENCY_RE.match(self.prefix)
        return f"{m.group(1)}{m.group(2).replace('p', '.')}" if m and m.group(1) else ""


def _role(metric: Metric) -> str:
    role = metric.meta.get("role") if metric.meta else None
    if isinstance(role, str):
        return role
    last = metric.name.rsplit(".", 1)[-1]
    if last in _TOTAL_SUFFIXES:
        return "total"
    if last == "residual":
        return "residual"
    if last in _KNOWN_STAGES or (metric.meta or {}).get("stage"):
        return "stage"
    if metric.unit == "items/s" or last.endswith("_per_s"):
        return "rate"
    return "other"


def _prefix(metric: Metric) -> str:
    group = metric.meta.get("group") if metric.meta else None
    if isinstance(group, str) and group:
        return group
    return metric.name.rsplit(".", 1)[0] if "." in metric.name else metric.name


def groups(result: Result) -> dict[str, Group]:
    """The metric groups of one result, keyed by prefix, in measurement order."""
    out: dict[str, Group] = {}
    for metric in result.measurements.values():
        prefix = _prefix(metric)
        g = out.setdefault(prefix, Group(prefix))
        role = _role(metric)
        last = metric.name.rsplit(".", 1)[-1]
        if role == "total" and g.total is None:
            g.total = metric
        elif role == "stage":
            g.stages[str(metric.meta.get("stage") or last)] = metric
        elif role == "residual":
            g.residual = metric
        elif role == "rate" and g.rate is None:
            g.rate = metric
        else:
            g.other[last] = metric
    for g in out.values():
        order = (g.total.meta.get("stages") if g.total and g.total.meta else None) or []
        ranked = {s: i for i, s in enumerate(order)}
        g.stages = dict(
            sorted(g.stages.items(), key=lambda kv: (ranked.get(kv[0], len(ranked)), kv[0]))
        )
    return out


def all_groups(results: Iterable[Result], family: str) -> list[Group]:
    """Every group of one family across results, in input order."""
    return [g for r in results for g in groups(r).values() if g.family == family]


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Estimate:
    """A median with its seeded bootstrap CI (stats.median_ci), plus n and CV."""

    median: float
    low: float
    high: float
    n: int
    cv: float


def estimate(values: Sequence[float]) -> Estimate | None:
    """Median, 95% bootstrap CI of the median, n and CV; None for an empty sample."""
    x = [v for v in values if math.isfinite(v)]
    if not x:
        return None
    s = stats.summarize(x)
    lo, hi = stats.median_ci(x)
    return Estimate(s.median, lo, hi, s.n, s.cv)


def share(part: Metric | None, total: Metric | None) -> float | None:
    """The time-weighted share of `part` in `total`: sum(part)/sum(total) over aligned samples.

    Means (not medians) because shares of means add up to 1 with the residual; medians of the
    parts do not sum to the median of the total.
    """
    if part is None or total is None:
        return None
    n = min(len(part.values), len(total.values))
    if n == 0:
        return None
    denom = float(np.sum(total.values[:n]))
    return float(np.sum(part.values[:n])) / denom if denom > 0 else None


def stage_shares(g: Group) -> dict[str, float]:
    """Share of each stage (and "residual") in the group's total."""
    out: dict[str, float] = {}
    for name, metric in g.stages.items():
        s = share(metric, g.total)
        if s is not None:
            out[name] = s
    s = share(g.residual, g.total)
    if s is not None:
        out["residual"] = s
    return out


def replicate_medians(metric: Metric) -> list[float]:
    """Per-replicate medians when the metric carries ≥ 2 replicate ids, else []."""
    if not metric.replicate or len(set(metric.replicate)) < 2:
        return []
    values = np.asarray(metric.values, dtype=np.float64)
    return [float(m) for m in comparison_medians(values, metric.replicate)]


# ---------------------------------------------------------------- identity and time


def config_hash(result: Result) -> str:
    """The hash `mlb history show` gives for this result's config (history.record.config_hash:
    SHA-256 of its canonical JSON, the `history` and `cost` sections left out). Computed here
    because the report sits beside, not above, the history layer; a test keeps the two equal."""
    body = {k: v for k, v in (result.config or {}).items() if k not in ("history", "cost")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def timestamp(text: str | None) -> str:
    """A result's ISO time to the second: '2026-12-02T18:32:26.762335Z' -> '2026-12-02
    18:32:26 UTC' (microseconds say nothing to a reader); text that is not a time is kept."""
    if not text:
        return "–"
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    offset = when.utcoffset()
    zone = "" if offset is None else " UTC" if not offset else when.strftime(" %z")
    return when.strftime("%Y-%m-%d %H:%M:%S") + zone


# ---------------------------------------------------------------- telemetry


@dataclass
class Telemetry:
    """A telemetry timeline: seconds since start, and per-series columns (NaN = gap)."""

    path: Path | None
    t: np.ndarray
    gpu_active: dict[str, np.ndarray] = field(default_factory=dict)  # percent, per GPU
    gpu_memory: dict[str, np.ndarray] = field(default_factory=dict)  # bytes, per GPU
    gpu_temp: dict[str, np.ndarray] = field(default_factory=dict)  # °C, per GPU
    gpu_throttle: dict[str, list[str]] = field(default_factory=dict)  # reasons text per sample
    cpu_cores: dict[str, np.ndarray] = field(default_factory=dict)  # percent, per core
    memory: dict[str, np.ndarray] = field(default_factory=dict)  # bytes (RSS, …)
    phases: list[str] = field(default_factory=list)  # phase label per sample, if recorded
    errors: list[str] = field(default_factory=list)  # per sample: "" or what failed (a gap)

    @property
    def n(self) -> int:
        return int(self.t.size)

    @property
    def has_gpu(self) -> bool:
        return any(np.isfinite(v).any() for v in self.gpu_active.values())

    def cpu_matrix(self) -> np.ndarray:
        """cores × samples, percent (NaN = gap); shape (0, n) without CPU columns."""
        if not self.cpu_cores:
            return np.empty((0, self.n))
        return np.vstack([self.cpu_cores[k] for k in self.cpu_cores])

    def window(self, start: float, end: float) -> Telemetry:
        """The samples with start ≤ t ≤ end."""
        return self.select((self.t >= start) & (self.t <= end))

    def select(self, m: np.ndarray) -> Telemetry:
        """The samples where the boolean mask `m` is true."""
        idx = np.flatnonzero(m)

        def cut(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {k: v[m] for k, v in d.items()}

        return Telemetry(
            path=self.path,
            t=self.t[m],
            gpu_active=cut(self.gpu_active),
            gpu_memory=cut(self.gpu_memory),
            gpu_temp=cut(self.gpu_temp),
            gpu_throttle={k: [v[i] for i in idx] for k, v in self.gpu_throttle.items()},
            cpu_cores=cut(self.cpu_cores),
            memory=cut(self.memory),
            phases=[self.phases[i] for i in idx] if self.phases else [],
            errors=[self.errors[i] for i in idx] if self.errors else [],
        )

    def phase(self, label: str) -> Telemetry:
        """The samples recorded under one phase label (see the `phase` column)."""
        if not self.phases:
            return self.window(math.inf, -math.inf)
        m = np.array([p == label for p in self.phases])
        lo = float(self.t[m].min()) if m.any() else math.inf
        hi = float(self.t[m].max()) if m.any() else -math.inf
        return self.window(lo, hi)


# Column patterns, tolerant of small naming differences between telemetry writers.
_TIME_COLUMNS = ("t_s", "elapsed_s", "time_s", "t", "time", "timestamp_s", "timestamp")
_GPU_ACTIVE = re.compile(r"^gpu(\d*)[._]?(kernel_active|util(ization)?)(_pct|_percent)?$")
_GPU_MEM = re.compile(r"^gpu(\d*)[._]?mem(ory)?(_used)?(_bytes|_b)?$")
_GPU_TEMP = re.compile(r"^gpu(\d*)[._]?temp(erature)?(_c)?$")
_GPU_THROTTLE = re.compile(r"^gpu(\d*)[._]?(throttle|clocks_event)(_reasons)?$")
_CPU_CORE = re.compile(r"^cpu[._]?(\d+)(_pct|_percent)?$")
_MEMORY = re.compile(r"^(rss|mem|memory|ram)([._a-z]*)?(_bytes|_b)?$")


def _float(text: str | None) -> float:
    if text is None or text.strip() == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def read_telemetry(path: Path) -> Telemetry:
    """Parse a telemetry CSV. Unknown columns are ignored; empty cells are gaps (NaN).

    Raises OSError / ValueError for an unreadable file or one without a time column; callers
    turn that into a "not measured" section with the reason.
    """
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    if not rows:
        raise ValueError(f"{path}: no telemetry samples")
    columns = list(rows[0].keys())
    tcol = next((c for c in _TIME_COLUMNS if c in columns), None)
    if tcol is None:
        raise ValueError(f"{path}: no time column (one of {', '.join(_TIME_COLUMNS)})")
    t = np.array([_float(r[tcol]) for r in rows])
    if tcol.startswith("timestamp") and t.size and np.isfinite(t[0]):
        t = t - t[0]
    tel = Telemetry(path=Path(path), t=t)
    for col in columns:
        key = col.strip().lower()
        values = [r.get(col) for r in rows]
        if m := _GPU_THROTTLE.match(key):
            tel.gpu_throttle[f"gpu{m.group(1) or 0}"] = [(v or "").strip() for v in values]
        elif m := _GPU_ACTIVE.match(key):
            tel.gpu_active[f"gpu{m.group(1) or 0}"] = np.array([_float(v) for v in values])
        elif m := _GPU_MEM.match(key):
            tel.gpu_memory[f"gpu{m.group(1) or 0}"] = np.array([_float(v) for v in values])
        elif m := _GPU_TEMP.match(key):
            tel.gpu_temp[f"gpu{m.group(1) or 0}"] = np.array([_float(v) for v in values])
        elif m := _CPU_CORE.match(key):
            tel.cpu_cores[f"cpu{m.group(1)}"] = np.array([_float(v) for v in values])
        elif _MEMORY.match(key):
            tel.memory[key] = np.array([_float(v) for v in values])
        elif key == "phase":
            tel.phases = [(v or "").strip() for v in values]
        elif key == "error":
            tel.errors = [(v or "").strip() for v in values]
    return tel


def telemetry_path(result: Result, source: Path | None) -> Path | None:
    """The telemetry CSV a result references (`artifacts["telemetry"]`, relative to the JSON)."""
    rel = result.artifacts.get("telemetry") if result.artifacts else None
    if not rel:
        return None
    p = Path(rel)
    if p.is_absolute() or source is None:
        return p
    return source.parent / p


def finite(values: Any) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    return a[np.isfinite(a)]
