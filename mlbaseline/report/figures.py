"""PNG figures for the report: one function per figure, each saves one file and closes it.

matplotlib runs on the Agg backend (no display needed). Figures are small (dpi 80) because they
illustrate a Markdown report; the numbers themselves are in its tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from mlbaseline import stats
from mlbaseline.report.data import Group, Telemetry, estimate, finite, stage_shares

DPI = 80
_STAGE_COLORS = {
    "data_wait": "#d62728",
    "h2d": "#ff7f0e",
    "forward": "#1f77b4",
    "loss": "#17becf",
    "backward": "#2ca02c",
    "optimizer": "#9467bd",
    "grad_sync": "#8c564b",
    "queue": "#d62728",
    "preprocess": "#ff7f0e",
    "compute": "#1f77b4",
    "postprocess": "#2ca02c",
    "read": "#d62728",
    "decode": "#ff7f0e",
    "transform": "#1f77b4",
    "residual": "#bbbbbb",
}


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path


def _rate_points(gs: Sequence[Group]) -> dict[int, tuple[float, float, float]]:
    """Batch size -> (median, CI low, CI high) of each group's rate."""
    out: dict[int, tuple[float, float, float]] = {}
    for g in gs:
        e = estimate(g.rate.values) if g.rate else None
        if e is not None and g.batch_size is not None:
            out[g.batch_size] = (e.median, e.low, e.high)
    return out


def throughput_figure(train: Sequence[Group], infer: Sequence[Group], path: Path) -> Path:
    """Samples/s (median, 95% bootstrap CI) per batch size, training beside inference."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    series = [
        ("training", _rate_points(train), "#1f77b4"),
        ("inference", _rate_points(infer), "#ff7f0e"),
    ]
    sizes = sorted({b for _, pts, _ in series for b in pts})
    width = 0.4
    for offset, (name, pts, color) in zip((-width / 2, width / 2), series, strict=True):
        if not pts:
            continue
        pos = [i + offset for i, b in enumerate(sizes) if b in pts]
        med = np.array([pts[b][0] for b in sizes if b in pts])
        err = np.array(
            [[pts[b][0] - pts[b][1], pts[b][2] - pts[b][0]] for b in sizes if b in pts]
        ).T
        ax.bar(pos, med, width, yerr=err, capsize=3, label=name, color=color)
    ax.set_xticks(range(len(sizes)), [str(b) for b in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples/s (median, 95% CI)")
    ax.set_title("Throughput per batch size")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _stage_means(g: Group) -> dict[str, float]:
    """Mean seconds per sample of each stage and the residual (they stack to the mean total)."""
    if g.total is None:
        return {}
    mean_total = float(np.mean(g.total.values)) if g.total.values else 0.0
    return {k: v * mean_total for k, v in stage_shares(g).items()}


def stages_figure(gs: Sequence[Group], path: Path, title: str, xlabel: str) -> Path:
    """Stacked bars: mean milliseconds of each stage (and the residual) per group."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    means = [_stage_means(g) for g in gs]
    labels = [g.label for g in gs]
    stages: list[str] = []
    for m in means:
        stages += [s for s in m if s not in stages and s != "residual"]
    stages.append("residual")
    bottom_pos = np.zeros(len(gs))
    bottom_neg = np.zeros(len(gs))
    for stage in stages:
        vals = np.array([m.get(stage, 0.0) * 1e3 for m in means])
        base = np.where(vals >= 0, bottom_pos, bottom_neg)
        ax.bar(
            labels, vals, bottom=base, label=stage.replace("_", " "), color=_STAGE_COLORS.get(stage)
        )
        bottom_pos += np.where(vals >= 0, vals, 0)
        bottom_neg += np.where(vals < 0, vals, 0)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms (mean per item)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    return _save(fig, path)


def latency_figure(gs: Sequence[Group], sla_s: float | None, path: Path) -> Path:
    """Histogram (left) and empirical CDF (right) of request latency per level, SLA line.

    The x axis follows the data; an SLA far beyond the slowest request is written as a note
    instead of squeezing the distribution into a corner."""
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(7.5, 3.2))
    hi = 0.0
    for g in gs:
        if g.total is None:
            continue
        x = np.sort(finite(g.total.values)) * 1e3
        if x.size == 0:
            continue
        hi = max(hi, float(x[-1]))
        label = g.level or g.prefix
        hist.hist(x, bins=min(50, max(5, x.size // 10)), alpha=0.6, label=label)
        cdf.plot(x, np.arange(1, x.size + 1) / x.size, label=label)
        cdf.axvline(stats.percentile(x, 99), linestyle=":", linewidth=0.8, color="grey")
    if sla_s is not None:
        sla_ms = sla_s * 1e3
        for ax in (hist, cdf):
            if sla_ms <= 2.0 * hi or hi == 0:
                ax.axvline(sla_ms, color="red", linewidth=1.2, label=f"SLA p99 {sla_ms:g} ms")
            else:
                ax.set_xlim(0, hi * 1.1)
                ax.text(
                    0.98,
                    0.5,
                    f"SLA p99 {sla_ms:g} ms →",
                    transform=ax.transAxes,
                    color="red",
                    ha="right",
                    fontsize=7,
                )
    hist.set_xlabel("latency (ms)")
    hist.set_ylabel("requests")
    hist.set_title("Latency histogram")
    cdf.set_xlabel("latency (ms)")
    cdf.set_ylabel("share of requests ≤ x")
    cdf.set_title("Latency CDF (dotted: p99)")
    cdf.set_ylim(0, 1.01)
    hist.legend(fontsize=7)
    cdf.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


@dataclass(frozen=True)
class SweepPoint:
    """One dataloader setting for the sweep chart."""

    label: str
    workers: int
    median: float
    low: float
    high: float
    split_ms: Mapping[str, float]  # mean ms per sample of read / decode / transform


def dataloader_figure(points: Sequence[SweepPoint], knee: int | None, path: Path) -> Path:
    """Samples/s per setting with CI and the knee marked (left); read/decode/transform (right)."""
    fig, (rate, split) = plt.subplots(1, 2, figsize=(8, 3.2))
    labels = [p.label for p in points]
    med = np.array([p.median for p in points])
    err = np.array([[p.median - p.low for p in points], [p.high - p.median for p in points]])
    colors = [
        "#2ca02c" if knee is not None and p.workers == knee and p.label == str(knee) else "#1f77b4"
        for p in points
    ]
    rate.bar(labels, med, yerr=err, capsize=3, color=colors)
    if knee is not None:
        rate.set_title(f"Loader throughput (knee: {knee} workers)")
    else:
        rate.set_title("Loader throughput")
    rate.set_xlabel("num_workers")
    rate.set_ylabel("samples/s (median, 95% CI)")
    bottom = np.zeros(len(points))
    stages = [s for s in ("read", "decode", "transform") if any(s in p.split_ms for p in points)]
    stages += sorted({s for p in points for s in p.split_ms} - set(stages))
    for stage in stages:
        vals = np.array([p.split_ms.get(stage, 0.0) for p in points])
        split.bar(labels, vals, bottom=bottom, label=stage, color=_STAGE_COLORS.get(stage))
        bottom += vals
    split.set_xlabel("num_workers")
    split.set_ylabel("ms per sample (mean, in a worker)")
    split.set_title("read / decode / transform")
    if stages:
        split.legend(fontsize=7)
    return _save(fig, path)


def telemetry_figure(tel: Telemetry, path: Path) -> Path:
    """Heat map over time: GPU kernel-active %, per-core CPU %, memory (% of its peak)."""
    rows: list[np.ndarray] = []
    names: list[str] = []
    for gpu, v in tel.gpu_active.items():
        rows.append(v)
        names.append(f"{gpu} kernel-active %")
    for core, v in tel.cpu_cores.items():
        rows.append(v)
        names.append(f"{core} %")
    for label, series in [
        *tel.memory.items(),
        *((f"{k} memory", v) for k, v in tel.gpu_memory.items()),
    ]:
        x = finite(series)
        peak = float(x.max()) if x.size and x.max() > 0 else 1.0
        rows.append(100.0 * series / peak)  # % of its own peak: growth and leaks stand out
        names.append(f"{label} (% of max {peak / 2**20:.0f} MiB)")
    height = 1.2 + 0.22 * max(1, len(rows))
    fig, ax = plt.subplots(figsize=(8, min(height, 8.0)))
    data = np.ma.masked_invalid(np.vstack(rows)) if rows else np.ma.masked_all((1, max(1, tel.n)))
    t0 = float(tel.t[0]) if tel.n else 0.0
    t1 = float(tel.t[-1]) if tel.n > 1 else t0 + 1.0
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")  # gaps (failed reads): grey
    im = ax.imshow(
        data,
        aspect="auto",
        interpolation="nearest",
        cmap=cmap,
        vmin=0,
        vmax=100,
        extent=(t0, t1, len(rows) - 0.5, -0.5),
    )
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_xlabel("time since start (s)")
    ax.set_title("Telemetry timeline (grey: gaps)")
    fig.colorbar(im, ax=ax, label="%")
    return _save(fig, path)


def subset_figure(
    class_counts: Mapping[str, int], full_counts: Mapping[str, int] | None, path: Path
) -> Path:
    """Class distribution of the subset (bars), beside the full set's shares when known."""
    names = list(class_counts)
    fig, ax = plt.subplots(figsize=(max(4.0, min(10.0, 0.35 * len(names) + 2)), 3.0))
    total = sum(class_counts.values()) or 1
    x = np.arange(len(names))
    ax.bar(
        x - 0.2 if full_counts else x,
        [class_counts[n] / total for n in names],
        0.4 if full_counts else 0.8,
        label="subset",
    )
    if full_counts:
        ftotal = sum(full_counts.values()) or 1
        ax.bar(x + 0.2, [full_counts.get(n, 0) / ftotal for n in names], 0.4, label="full set")
        ax.legend(fontsize=7)
    ax.set_xticks(x, names, rotation=60 if len(names) > 8 else 0, fontsize=7)
    ax.set_ylabel("share of samples")
    ax.set_title("Class distribution")
    return _save(fig, path)


@dataclass(frozen=True)
class ForestRow:
    """One metric of a comparison: ratio new/old with its CI and the verdict."""

    metric: str
    ratio: float
    low: float
    high: float
    verdict: str
    threshold: float


_VERDICT_COLORS = {
    "regressed": "#d62728",
    "improved": "#2ca02c",
    "unchanged": "#7f7f7f",
    "inconclusive": "#ff7f0e",
}


FOREST_LIMITS = (0.5, 2.0)  # x range of the forest plot; longer CIs end in an arrow


def forest_figure(rows: Sequence[ForestRow], path: Path) -> Path:
    """Forest plot: ratio of medians new/old with 95% CI per metric, on a log axis (a ratio is
    multiplicative: 0.8 and 1.25 are equally far from 1); the ±threshold band shaded. CI ends
    outside FOREST_LIMITS (or the data's own range, when narrower) are drawn as arrows."""
    fig, ax = plt.subplots(figsize=(6.5, 1.0 + 0.22 * max(1, len(rows))))
    thr = max((r.threshold for r in rows), default=0.03)
    ends = [v for r in rows for v in (r.low, r.high) if np.isfinite(v) and v > 0]
    lo = max(FOREST_LIMITS[0], min([*ends, 1 - 2 * thr]) * 0.98)
    hi = min(FOREST_LIMITS[1], max([*ends, 1 + 2 * thr]) * 1.02)
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows, strict=True):
        color = _VERDICT_COLORS.get(r.verdict, "black")
        a = min(max(r.low, lo), hi) if np.isfinite(r.low) and r.low > 0 else lo
        b = max(min(r.high, hi), lo) if np.isfinite(r.high) else hi
        ax.plot([a, b], [yi, yi], color=color, linewidth=1.2)
        ax.plot([min(max(r.ratio, lo), hi)], [yi], "o", color=color, markersize=4)
        if r.low < lo or not np.isfinite(r.low):
            ax.plot([lo], [yi], "<", color=color, markersize=5)
        if r.high > hi or not np.isfinite(r.high):
            ax.plot([hi], [yi], ">", color=color, markersize=5)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    wide = hi / lo > 1.6  # fine ticks only where they do not collide
    grid = (0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0) if wide else (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25)
    ticks = [t for t in grid if lo <= t <= hi]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.axvspan(1 - thr, 1 + thr, color="#eeeeee", zorder=0)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(y, [r.metric for r in rows], fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("ratio of medians new/old (95% CI, log scale); band: ±threshold")
    ax.set_title(
        "red: regressed · green: improved · orange: inconclusive · grey: unchanged", fontsize=7
    )
    return _save(fig, path)
