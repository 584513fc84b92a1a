"""PNG figures for the report: one function per figure, each saves one file and closes it.

matplotlib runs on the Agg backend (no display needed). Every figure shares one style
(:func:`new_figure` and :data:`STYLE`): 1600×900 pixels (16:9, fit for a README or a slide;
only figures with one labelled row per item grow taller, see :func:`figure_px`) with fonts
readable at that size. Each figure plots the statistic its report table prints: medians with
95% bootstrap CIs of the median (``data.estimate`` → ``stats.median_ci``) where the table has
them, medians of the stage times beside the stage table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from mlbaseline import stats
from mlbaseline.report.data import Estimate, Group, Telemetry, estimate, finite
from mlbaseline.safewrite import open_output

DPI = 100
FIGURE_PX = (1600, 900)  # width × height of every figure, pixels
ROW_PX = 26  # height of one labelled row (telemetry series, forest metrics) beyond the default
STYLE: dict[str, Any] = {
    "font.size": 14,
    "axes.titlesize": 17,
    "axes.labelsize": 15,
    "xtick.labelsize": 13,
    "ytick.labelsize": 13,
    "legend.fontsize": 13,
    "figure.titlesize": 18,
    "axes.grid": False,
    "savefig.dpi": DPI,
}
_F = TypeVar("_F", bound=Callable[..., Any])

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
    "total": "#444444",
}
_PHASE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")


# ---------------------------------------------------------------- the one style


def figure_px(rows: int = 0) -> tuple[int, int]:
    """Pixel size (width, height) of a figure: FIGURE_PX, taller only when `rows` labelled rows
    (one per telemetry series or forest metric) would not fit in it at a readable font size."""
    width, height = FIGURE_PX
    return width, max(height, 220 + ROW_PX * rows)


def new_figure(nrows: int = 1, ncols: int = 1, rows: int = 0, **kw: Any) -> tuple[plt.Figure, Any]:
    """A figure in the report's style: size from :func:`figure_px`, constrained layout (it keeps
    the pixel size exact and makes room for outside legends and colour bars)."""
    width, height = figure_px(rows)
    return plt.subplots(
        nrows, ncols, figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained", **kw
    )


def styled(fn: _F) -> _F:
    """Draw (and save) the figure under :data:`STYLE`; fonts are fixed when text is created."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with plt.rc_context(STYLE):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _save(fig: plt.Figure, path: Path, force: bool = False) -> Path:
    """The PNG through the one safe writer (matplotlib writes into its file object)."""
    try:
        with open_output(path, force=force, mode="wb") as fh:
            # no bbox_inches="tight": the size is the style
            fig.savefig(fh, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return Path(path)


def _yerr(points: Sequence[tuple[float, float, float]]) -> np.ndarray:
    """2×n whiskers (below, above) from (median, low, high); never negative."""
    return np.array(
        [[max(0.0, m - lo) for m, lo, _ in points], [max(0.0, hi - m) for m, _, hi in points]]
    )


# ---------------------------------------------------------------- throughput


def _rate_points(gs: Sequence[Group]) -> dict[int, tuple[float, float, float]]:
    """Batch size -> (median, CI low, CI high) of each group's rate (as the tables print it)."""
    out: dict[int, tuple[float, float, float]] = {}
    for g in gs:
        e = estimate(g.rate.values) if g.rate else None
        if e is not None and g.batch_size is not None:
            out[g.batch_size] = (e.median, e.low, e.high)
    return out


@styled
def throughput_figure(train: Sequence[Group], infer: Sequence[Group], path: Path) -> Path:
    """Samples/s (median, 95% bootstrap CI) per batch size, training beside inference."""
    fig, ax = new_figure()
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
        vals = [pts[b] for b in sizes if b in pts]
        med = np.array([v[0] for v in vals])
        ax.bar(pos, med, width, yerr=_yerr(vals), capsize=6, label=name, color=color)
    ax.set_xticks(range(len(sizes)), [str(b) for b in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples/s (median, whiskers: 95% CI)")
    ax.set_title("Throughput per batch size")
    ax.legend()
    return _save(fig, path)


# ---------------------------------------------------------------- stages


@dataclass(frozen=True)
class StagePoint:
    """One bar of the stage figure: a stage (or "residual" / "total") of one group, seconds."""

    group: str  # Group.label, the stage table's first column
    stage: str
    median: float  # np.median of the raw values: the number the stage table prints
    low: float  # 95% bootstrap CI of the median (data.estimate → stats.median_ci)
    high: float


def stage_columns(gs: Sequence[Group]) -> list[str]:
    """The stages in the stage table's column order, then "residual" and "total"."""
    names: list[str] = []
    for g in gs:
        names += [s for s in g.stages if s not in names]
    return [*names, "residual", "total"]


def stage_points(gs: Sequence[Group]) -> list[StagePoint]:
    """What the stage figure plots: per group and column, the median seconds per item (the
    stage table's cells: medians, not means) with its 95% CI. Medians of the stages need not add
    up to the median of the total, so the figure draws them side by side, not stacked."""
    out: list[StagePoint] = []
    for g in gs:
        parts = {**g.stages, "residual": g.residual, "total": g.total}
        for name in stage_columns(gs):
            m = parts.get(name)
            e: Estimate | None = estimate(m.values) if m is not None and m.values else None
            if m is None or e is None:
                continue
            out.append(StagePoint(g.label, name, float(np.median(m.values)), e.low, e.high))
    return out


def draw_stages(gs: Sequence[Group], title: str, xlabel: str) -> plt.Figure:
    """The stage figure (not saved): grouped bars of median ms per item, 95% CI whiskers. Each
    bar's gid is "group|stage"."""
    fig, ax = new_figure()
    points = stage_points(gs)
    labels = list(dict.fromkeys(g.label for g in gs))
    columns = [c for c in stage_columns(gs) if any(p.stage == c for p in points)]
    width = 0.8 / max(1, len(columns))
    for k, col in enumerate(columns):
        pts = [p for p in points if p.stage == col]
        pos = [labels.index(p.group) - 0.4 + width * (k + 0.5) for p in pts]
        bars = ax.bar(
            pos,
            [p.median * 1e3 for p in pts],
            width,
            yerr=_yerr([(p.median * 1e3, p.low * 1e3, p.high * 1e3) for p in pts]),
            capsize=4,
            label=col.replace("_", " "),
            color=_STAGE_COLORS.get(col),
        )
        for rect, p in zip(bars.patches, pts, strict=True):
            rect.set_gid(f"{p.group}|{p.stage}")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms per item (median, whiskers: 95% CI)")
    ax.set_title(
        f"{title}\nmedians, as in the stage table; stage medians need not sum to the total"
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@styled
def stages_figure(gs: Sequence[Group], path: Path, title: str, xlabel: str) -> Path:
    """Grouped bars: median milliseconds of each stage, the residual and the total per group."""
    return _save(draw_stages(gs, title, xlabel), path)


# ---------------------------------------------------------------- latency


@styled
def latency_figure(gs: Sequence[Group], sla_s: float | None, path: Path) -> Path:
    """Histogram (left) and empirical CDF (right) of request latency per level, SLA line.

    The x axis follows the data; an SLA far beyond the slowest request is written as a note
    instead of squeezing the distribution into a corner."""
    fig, (hist, cdf) = new_figure(1, 2)
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
        cdf.plot(x, np.arange(1, x.size + 1) / x.size, label=label, linewidth=2)
        cdf.axvline(stats.percentile(x, 99), linestyle=":", linewidth=1.5, color="grey")
    if sla_s is not None:
        sla_ms = sla_s * 1e3
        for ax in (hist, cdf):
            if sla_ms <= 2.0 * hi or hi == 0:
                ax.axvline(sla_ms, color="red", linewidth=2, label=f"SLA p99 {sla_ms:g} ms")
            else:
                ax.set_xlim(0, hi * 1.1)
                ax.text(
                    0.98,
                    0.5,
                    f"SLA p99 {sla_ms:g} ms →",
                    transform=ax.transAxes,
                    color="red",
                    ha="right",
                )
    hist.set_xlabel("latency (ms)")
    hist.set_ylabel("requests")
    hist.set_title("Latency histogram")
    cdf.set_xlabel("latency (ms)")
    cdf.set_ylabel("share of requests ≤ x")
    cdf.set_title("Latency CDF (dotted: p99)")
    cdf.set_ylim(0, 1.01)
    hist.legend()
    cdf.legend(loc="lower right")
    return _save(fig, path)


# ---------------------------------------------------------------- dataloader


@dataclass(frozen=True)
class SweepPoint:
    """One dataloader setting for the sweep chart."""

    label: str
    workers: int
    median: float
    low: float
    high: float
    split_ms: Mapping[str, float]  # mean ms per sample of read / decode / transform


@styled
def dataloader_figure(points: Sequence[SweepPoint], knee: int | None, path: Path) -> Path:
    """Samples/s per setting with CI and the knee marked (left); read/decode/transform (right),
    the same numbers as the dataloader table."""
    fig, (rate, split) = new_figure(1, 2)
    labels = [p.label for p in points]
    med = np.array([p.median for p in points])
    colors = [
        "#2ca02c" if knee is not None and p.workers == knee and p.label == str(knee) else "#1f77b4"
        for p in points
    ]
    rate.bar(
        labels,
        med,
        yerr=_yerr([(p.median, p.low, p.high) for p in points]),
        capsize=6,
        color=colors,
    )
    if knee is not None:
        rate.set_title(f"Loader throughput (knee: {knee} workers, green)")
    else:
        rate.set_title("Loader throughput")
    rate.set_xlabel("num_workers")
    rate.set_ylabel("samples/s (median, whiskers: 95% CI)")
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
        split.legend()
    return _save(fig, path)


# ---------------------------------------------------------------- telemetry


@dataclass(frozen=True)
class PhaseSpan:
    """One phase of the run on the telemetry timeline: its label and first / last sample time."""

    label: str
    start: float
    end: float


def phase_spans(tel: Telemetry) -> list[PhaseSpan]:
    """One span per phase label in the `phase` column (in order of first appearance), from its
    first to its last sample (the window `Telemetry.phase` selects); a one-sample phase is one
    sampling interval wide. Empty labels are no phase; no column, no spans."""
    if not tel.phases or tel.n == 0:
        return []
    finite_t = np.isfinite(tel.t)
    dt = float(np.nanmedian(np.diff(tel.t))) if tel.n > 1 else 1.0
    dt = dt if np.isfinite(dt) and dt > 0 else 1.0
    out: list[PhaseSpan] = []
    for label in dict.fromkeys(p for p in tel.phases if p):
        m = np.array([p == label for p in tel.phases]) & finite_t
        if m.any():
            lo, hi = float(tel.t[m].min()), float(tel.t[m].max())
            out.append(PhaseSpan(label, lo, hi if hi > lo else lo + dt))
    return out


def _telemetry_rows(tel: Telemetry) -> tuple[list[np.ndarray], list[str]]:
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
    return rows, names


def draw_telemetry(tel: Telemetry) -> plt.Figure:
    """The telemetry figure (not saved): a phase strip on top (one shaded, labelled band per
    phase, gid "phase|LABEL"), under it a heat map over time of GPU kernel-active %, per-core
    CPU % and memory (% of its peak), with the phase starts as dashed lines."""
    rows, names = _telemetry_rows(tel)
    spans = phase_spans(tel)
    if spans:
        fig, (strip, ax) = new_figure(
            2, 1, rows=len(rows), sharex=True, gridspec_kw={"height_ratios": [1, 9]}
        )
    else:
        fig, ax = new_figure(rows=len(rows))
        strip = None
    data = np.ma.masked_invalid(np.vstack(rows)) if rows else np.ma.masked_all((1, max(1, tel.n)))
    t0 = float(np.nanmin(tel.t)) if tel.n else 0.0
    t1 = float(np.nanmax(tel.t)) if tel.n > 1 else t0 + 1.0
    t1 = max([t1, *(s.end for s in spans)]) if t1 > t0 else t0 + 1.0
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
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("time since start (s)")
    title = "Telemetry timeline (grey: gaps)"
    if strip is not None:
        narrow = 0.08 * (t1 - t0)
        for k, span in enumerate(spans):
            color = _PHASE_COLORS[k % len(_PHASE_COLORS)]
            band = strip.axvspan(span.start, span.end, color=color, alpha=0.55, linewidth=0)
            band.set_gid(f"phase|{span.label}")
            if span.end - span.start >= narrow:
                strip.text((span.start + span.end) / 2, 0.5, span.label, ha="center", va="center")
            else:  # a narrow band: its label starts (or, on the right half, ends) at the band
                left = span.start < (t0 + t1) / 2
                x, ha = (span.start, "left") if left else (span.end, "right")
                strip.text(x, 0.78 if k % 2 == 0 else 0.22, span.label, ha=ha, va="center")
            if k:
                ax.axvline(span.start, color="white", linestyle="--", linewidth=1.5)
        strip.set_ylim(0, 1)
        strip.set_yticks([])
        strip.set_xlim(t0, t1)
        strip.tick_params(axis="x", labelbottom=False)
        strip.set_title(f"{title}; top: phases of the run")
    else:
        ax.set_title(title)
    fig.colorbar(im, ax=[strip, ax] if strip is not None else ax, label="%")
    return fig


@styled
def telemetry_figure(tel: Telemetry, path: Path) -> Path:
    """Heat map over time with the run's phases as labelled bands (see draw_telemetry)."""
    return _save(draw_telemetry(tel), path)


# ---------------------------------------------------------------- subset


@styled
def subset_figure(
    class_counts: Mapping[str, int], full_counts: Mapping[str, int] | None, path: Path
) -> Path:
    """Class distribution of the subset (bars), beside the full set's shares when known."""
    names = list(class_counts)
    fig, ax = new_figure()
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
        ax.legend()
    ax.set_xticks(
        x,
        names,
        rotation=60 if len(names) > 12 else 0,
        fontsize=max(7, STYLE["xtick.labelsize"] - len(names) // 10),
    )
    ax.set_ylabel("share of samples")
    ax.set_title("Class distribution")
    return _save(fig, path)


# ---------------------------------------------------------------- compare


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


@styled
def forest_figure(rows: Sequence[ForestRow], path: Path) -> Path:
    """Forest plot: ratio of medians new/old with 95% CI per metric, on a log axis (a ratio is
    multiplicative: 0.8 and 1.25 are equally far from 1); the ±threshold band shaded. CI ends
    outside FOREST_LIMITS (or the data's own range, when narrower) are drawn as arrows."""
    fig, ax = new_figure(rows=len(rows))
    thr = max((r.threshold for r in rows), default=0.03)
    ends = [v for r in rows for v in (r.low, r.high) if np.isfinite(v) and v > 0]
    lo = max(FOREST_LIMITS[0], min([*ends, 1 - 2 * thr]) * 0.98)
    hi = min(FOREST_LIMITS[1], max([*ends, 1 + 2 * thr]) * 1.02)
    y = np.arange(len(rows))[::-1]
    for yi, r in zip(y, rows, strict=True):
        color = _VERDICT_COLORS.get(r.verdict, "black")
        a = min(max(r.low, lo), hi) if np.isfinite(r.low) and r.low > 0 else lo
        b = max(min(r.high, hi), lo) if np.isfinite(r.high) else hi
        ax.plot([a, b], [yi, yi], color=color, linewidth=2.5)
        ax.plot([min(max(r.ratio, lo), hi)], [yi], "o", color=color, markersize=8)
        if r.low < lo or not np.isfinite(r.low):
            ax.plot([lo], [yi], "<", color=color, markersize=10)
        if r.high > hi or not np.isfinite(r.high):
            ax.plot([hi], [yi], ">", color=color, markersize=10)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    wide = hi / lo > 1.6  # fine ticks only where they do not collide
    grid = (0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0) if wide else (0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25)
    ticks = [t for t in grid if lo <= t <= hi]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.axvspan(1 - thr, 1 + thr, color="#eeeeee", zorder=0)
    ax.axvline(1.0, color="black", linewidth=1.2)
    ax.set_yticks(y, [r.metric for r in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("ratio of medians new/old (95% CI, log scale); band: ±threshold")
    ax.set_title("red: regressed · green: improved · orange: inconclusive · grey: unchanged")
    return _save(fig, path)
