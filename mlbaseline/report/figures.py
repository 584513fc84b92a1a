"""PNG figures of the measurements: throughput, training stages, latency, data loading, subset.

Each figure has a ``draw_*`` function that returns its matplotlib Figure (the tests read it back)
and a ``*_figure`` function that draws it under the one style and saves it (figures_style).
A report of several result files draws one series per file, labelled by its run name or path
(:class:`Series`, :func:`result_series`), so no file's bar or row hides another's.
The telemetry timeline, the compare forest and the history trend live in their own modules and
are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbaseline import stats
from mlbaseline.formatting import milliseconds, percent
from mlbaseline.report import payloads
from mlbaseline.report.data import Group, all_groups, estimate, finite, stage_shares
from mlbaseline.report.figures_compare import FOREST_PAD, ForestRow, draw_forest, forest_figure
from mlbaseline.report.figures_style import (
    DPI,
    FIGURE_PX,
    ROW_PX,
    SERIES_COLORS,
    STAGE_COLORS,
    STYLE,
    figure_px,
    new_figure,
    plt,
    save,
    series_labels,
    styled,
    yerr,
)
from mlbaseline.report.figures_telemetry import (
    PhaseSpan,
    draw_telemetry,
    phase_spans,
    telemetry_figure,
)
from mlbaseline.results import Result

_save = save  # the name sections_history imported before the split


@dataclass(frozen=True)
class Series:
    """The groups of one result file: one series of a figure, `name` its legend label ("" when
    the report shows one file)."""

    name: str
    groups: list[Group]


def result_series(
    results: Sequence[Result], sources: Sequence[Path | None], family: str
) -> list[Series]:
    """One series per result that has groups of `family`, labelled by run name or path."""
    labels = series_labels(results, sources)
    out = [Series(n, all_groups([r], family)) for n, r in zip(labels, results, strict=True)]
    return [s for s in out if s.groups]


def _workload(results: Sequence[Result]) -> str:
    """'builtin:tiny_cnn on cpu' (or several, joined) from the results' config and environment."""
    seen: list[str] = []
    for r in results:
        wl = r.config.get("workload") if isinstance(r.config, Mapping) else None
        model = wl.get("model") if isinstance(wl, Mapping) else None
        env = r.environment.get("blocking") if isinstance(r.environment, Mapping) else None
        env = env if isinstance(env, Mapping) else {}
        device = env.get("gpu_name") or env.get("device") or (wl or {}).get("device")
        text = f"{model or 'unknown model'} on {device or 'unknown device'}"
        seen += [text] if text not in seen else []
    return " / ".join(seen)


# ---------------------------------------------------------------- throughput


def _rate(g: Group) -> tuple[float, float, float] | None:
    """(median, CI low, CI high) of a group's rate, as the tables print it."""
    e = estimate(g.rate.values) if g.rate else None
    return (e.median, e.low, e.high) if e is not None else None


def draw_throughput(
    train: Sequence[Series], infer: Sequence[Series], results: Sequence[Result] = ()
) -> plt.Figure:
    """Samples/s (median, 95% bootstrap CI) per batch size: one bar per file and part (training,
    inference) at each batch size; gid "series|part|batch". The title names model and device."""
    fig, ax = new_figure()
    bars = [(s, "training") for s in train] + [(s, "inference") for s in infer]
    sizes = sorted({g.batch_size for s, _ in bars for g in s.groups if g.batch_size is not None})
    width = 0.8 / max(1, len(bars))
    names = list(dict.fromkeys(s.name for s, _ in bars))
    for k, (s, part) in enumerate(bars):
        pts = {g.batch_size: p for g in s.groups if (p := _rate(g)) and g.batch_size is not None}
        if not pts:
            continue
        if len(names) == 1:
            color, hatch = ("#1f77b4" if part == "training" else "#ff7f0e"), None
        else:
            color = SERIES_COLORS[names.index(s.name) % len(SERIES_COLORS)]
            hatch = None if part == "training" else "//"
        xs = [i - 0.4 + width * (k + 0.5) for i, b in enumerate(sizes) if b in pts]
        vals = [pts[b] for b in sizes if b in pts]
        drawn = ax.bar(
            xs,
            [v[0] for v in vals],
            width,
            yerr=yerr(vals),
            capsize=5,
            label=f"{s.name}: {part}" if s.name else part,
            color=color,
            hatch=hatch,
            edgecolor="white" if hatch else None,
        )
        for rect, b in zip(drawn.patches, [b for b in sizes if b in pts], strict=True):
            rect.set_gid(f"{s.name}|{part}|{b}")
    ax.set_xticks(range(len(sizes)), [str(b) for b in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("samples/s (median, whiskers: 95% CI)")
    ax.set_title(f"Throughput per batch size: {_workload(results)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@styled
def throughput_figure(
    train: Sequence[Series], infer: Sequence[Series], path: Path, results: Sequence[Result] = ()
) -> Path:
    return save(draw_throughput(train, infer, results), path)


# ---------------------------------------------------------------- stages


@dataclass(frozen=True)
class StageStack:
    """One stacked bar of the stage figure: a group's median step, split by time-weighted share."""

    label: str  # x tick: the group's label, with the file's when there are several
    step: float  # median of the step (seconds): the height of the stack
    low: float  # 95% bootstrap CI of that median
    high: float
    shares: dict[str, float]  # stage -> time-weighted share (table's), "residual" last; sum 1


def stage_stack(g: Group, label: str) -> StageStack | None:
    """The stack of one group. Shares are the stage table's (sum of stage / sum of step); the
    residual is what the stages leave of the step, so the stack sums to the step median. Stages
    that overlap (their shares add up past 1) are scaled down to fit, with no residual."""
    e = estimate(g.total.values) if g.total is not None else None
    if e is None:
        return None
    shares = {s: max(0.0, v) for s, v in stage_shares(g).items() if s != "residual"}
    used = sum(shares.values())
    if used > 1.0:
        shares = {s: v / used for s, v in shares.items()}
    shares["residual"] = max(0.0, 1.0 - sum(shares.values()))
    return StageStack(label, e.median, e.low, e.high, shares)


def stage_stacks(series: Sequence[Series]) -> list[StageStack]:
    """The stacks, files side by side at each group (A's 16 next to B's 16)."""
    pairs = [(s, g) for s in series for g in s.groups]
    order = list(dict.fromkeys(g.label for _, g in pairs))
    out: list[StageStack] = []
    for s, g in sorted(pairs, key=lambda sg: order.index(sg[1].label)):  # stable: file order
        stack = stage_stack(g, f"{g.label}\n{s.name}" if s.name else g.label)
        out += [stack] if stack is not None else []
    return out


def draw_stages(series: Sequence[Series], title: str, xlabel: str) -> plt.Figure:
    """Stacked bars, one per group and file: each stage's time-weighted share of the median step
    (gid "label|stage"), the residual on top, the step's 95% CI as a whisker; shares ≥ 4% of the
    tallest bar printed inside."""
    fig, ax = new_figure()
    stacks = stage_stacks(series)
    columns = list(dict.fromkeys(c for st in stacks for c in st.shares))
    columns = [c for c in columns if c != "residual"] + ["residual"]
    tallest = max((st.step for st in stacks), default=0.0) * 1e3
    bottoms = np.zeros(len(stacks))
    for col in columns:
        heights = np.array([st.shares.get(col, 0.0) * st.step * 1e3 for st in stacks])
        drawn = ax.bar(
            range(len(stacks)),
            heights,
            0.6,
            bottom=bottoms,
            label=col.replace("_", " "),
            color=STAGE_COLORS.get(col, "#7f7f7f"),
            edgecolor="white",
            linewidth=0.5,
        )
        for i, (rect, st) in enumerate(zip(drawn.patches, stacks, strict=True)):
            rect.set_gid(f"{st.label}|{col}")
            if heights[i] >= 0.04 * tallest and col in st.shares:
                ax.text(i, bottoms[i] + heights[i] / 2, percent(st.shares[col], 0),
                        ha="center", va="center", fontsize=11)  # fmt: skip
        bottoms += heights
    ax.errorbar(  # right of the centre, clear of the share labels
        np.arange(len(stacks)) + 0.22,
        [st.step * 1e3 for st in stacks],
        yerr=yerr([(st.step * 1e3, st.low * 1e3, st.high * 1e3) for st in stacks]),
        fmt="none",
        ecolor="black",
        capsize=6,
        gid="step-ci",
    )
    for i, st in enumerate(stacks):
        ax.annotate(f"{milliseconds(st.step)} ms", (i, max(st.high, st.step) * 1e3), xytext=(0, 6),
                    textcoords="offset points", ha="center", va="bottom")  # fmt: skip
    ax.set_xticks(range(len(stacks)), [st.label for st in stacks])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms per step (median of the step)")
    ax.set_ylim(0, max((st.high for st in stacks), default=0.0) * 1e3 * 1.12 or 1.0)
    ax.set_title(
        f"{title}\neach stage's time-weighted share of the median step (as in the stage "
        "table); whisker: 95% CI of the step"
    )
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@styled
def stages_figure(series: Sequence[Series], path: Path, title: str, xlabel: str) -> Path:
    return save(draw_stages(series, title, xlabel), path)


# ---------------------------------------------------------------- latency


def draw_latency(series: Sequence[Series], sla_s: float | None) -> plt.Figure:
    """Histogram (left) and empirical CDF (right) of request latency per level and file, SLA
    line. The x axis follows the data; an SLA far beyond the slowest request is written as a
    note instead of squeezing the distribution into a corner."""
    fig, (hist, cdf) = new_figure(1, 2)
    hi = 0.0
    for s in series:
        for g in s.groups:
            x = np.sort(finite(g.total.values)) * 1e3 if g.total is not None else np.empty(0)
            if x.size == 0:
                continue
            hi = max(hi, float(x[-1]))
            label = " · ".join(p for p in (g.level or g.prefix, s.name) if p)
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
                ax.text(0.98, 0.5, f"SLA p99 {sla_ms:g} ms →", transform=ax.transAxes,
                        color="red", ha="right")  # fmt: skip
    hist.set_xlabel("latency (ms)")
    hist.set_ylabel("requests")
    hist.set_title("Latency histogram")
    cdf.set_xlabel("latency (ms)")
    cdf.set_ylabel("share of requests ≤ x")
    cdf.set_title("Latency CDF (dotted: p99)")
    cdf.set_ylim(0, 1.01)
    hist.legend()
    cdf.legend(loc="lower right")
    return fig


@styled
def latency_figure(series: Sequence[Series], sla_s: float | None, path: Path) -> Path:
    return save(draw_latency(series, sla_s), path)


# ---------------------------------------------------------------- dataloader


@dataclass(frozen=True)
class SweepPoint:
    """One dataloader setting for the sweep chart: medians with their 95% CIs."""

    label: str  # "2", "2 pin", with the file's label on a second line when there are several
    workers: int
    median: float  # samples/s
    low: float
    high: float
    split: Mapping[str, tuple[float, float, float]]  # stage -> ms per sample (median, low, high)
    knee: bool = False  # the knee of its own file's sweep


def sweep_points(results: Sequence[Result], sources: Sequence[Path | None]) -> list[SweepPoint]:
    """The chart's points, file by file (payloads.loader_sweep of each, so a second file's
    `w2` never stands for the first's): samples/s with CI, and each stage's per-sample median
    and CI from the group's raw values."""
    out = []
    for r, name in zip(results, series_labels(results, sources), strict=True):
        groups = {g.prefix: g for g in all_groups([r], "dataloader")}
        for p in payloads.loader_sweep([r]):
            g = groups.get(p.prefix)
            split: dict[str, tuple[float, float, float]] = {}
            for stage, m in (g.stages if g is not None else {}).items():
                e = estimate(m.values)
                if e is not None:
                    split[stage] = (e.median * 1e3, e.low * 1e3, e.high * 1e3)
            label = f"{p.label}\n{name}" if name else p.label
            out.append(SweepPoint(label, p.workers, p.median, p.low, p.high, split, p.is_knee))
    return out


def draw_dataloader(points: Sequence[SweepPoint], knee: int | None) -> plt.Figure:
    """Both panels on the median with its 95% CI: samples/s per setting with the knee marked
    (left); per-sample read / decode / transform, one bar each per setting (right; medians do
    not add up, so they are side by side, not stacked)."""
    fig, (rate, split) = new_figure(1, 2)
    labels = [p.label for p in points]
    colors = ["#2ca02c" if p.knee else "#1f77b4" for p in points]
    rate.bar(labels, [p.median for p in points], capsize=6, color=colors,
             yerr=yerr([(p.median, p.low, p.high) for p in points]))  # fmt: skip
    files = any("\n" in p.label for p in points)  # several files: a knee each
    knee_note = f" (knee: {knee} workers, green)" if knee is not None and not files else ""
    knee_note = " (green: each file's knee)" if files and any(p.knee for p in points) else knee_note
    rate.set_title(f"Loader throughput{knee_note}")
    rate.set_xlabel("num_workers")
    rate.set_ylabel("samples/s (median, whiskers: 95% CI)")
    stages = [s for s in ("read", "decode", "transform") if any(s in p.split for p in points)]
    stages += sorted({s for p in points for s in p.split} - set(stages))
    width = 0.8 / max(1, len(stages))
    for k, stage in enumerate(stages):
        idx = [i for i, p in enumerate(points) if stage in p.split]
        vals = [points[i].split[stage] for i in idx]
        split.bar([i - 0.4 + width * (k + 0.5) for i in idx], [v[0] for v in vals], width,
                  yerr=yerr(vals), capsize=4, label=stage,
                  color=STAGE_COLORS.get(stage, "#7f7f7f"))  # fmt: skip
    split.set_xticks(range(len(points)), labels)
    split.set_xlabel("num_workers")
    split.set_ylabel("ms per sample (median in a worker, whiskers: 95% CI)")
    split.set_title("read / decode / transform per sample")
    if stages:
        split.legend()
    return fig


@styled
def dataloader_figure(points: Sequence[SweepPoint], knee: int | None, path: Path) -> Path:
    return save(draw_dataloader(points, knee), path)


# ---------------------------------------------------------------- subset


def draw_subset(
    class_counts: Mapping[str, int], full_counts: Mapping[str, int] | None
) -> plt.Figure:
    """Class distribution of the subset (bars), beside the full set's shares when known."""
    names = list(class_counts)
    fig, ax = new_figure()
    total = sum(class_counts.values()) or 1
    x = np.arange(len(names))
    ax.bar(x - 0.2 if full_counts else x, [class_counts[n] / total for n in names],
           0.4 if full_counts else 0.8, label="subset")  # fmt: skip
    if full_counts:
        ftotal = sum(full_counts.values()) or 1
        ax.bar(x + 0.2, [full_counts.get(n, 0) / ftotal for n in names], 0.4, label="full set")
        ax.legend()
    ax.set_xticks(x, names, rotation=60 if len(names) > 12 else 0,
                  fontsize=max(7, STYLE["xtick.labelsize"] - len(names) // 10))  # fmt: skip
    ax.set_ylabel("share of samples")
    ax.set_title("Class distribution")
    return fig


@styled
def subset_figure(
    class_counts: Mapping[str, int], full_counts: Mapping[str, int] | None, path: Path
) -> Path:
    return save(draw_subset(class_counts, full_counts), path)


__all__ = [
    "DPI",
    "FIGURE_PX",
    "FOREST_PAD",
    "ROW_PX",
    "STYLE",
    "ForestRow",
    "PhaseSpan",
    "Series",
    "StageStack",
    "SweepPoint",
    "dataloader_figure",
    "draw_dataloader",
    "draw_forest",
    "draw_latency",
    "draw_stages",
    "draw_subset",
    "draw_telemetry",
    "draw_throughput",
    "figure_px",
    "forest_figure",
    "latency_figure",
    "new_figure",
    "phase_spans",
    "plt",
    "result_series",
    "series_labels",
    "stage_stack",
    "stage_stacks",
    "stages_figure",
    "styled",
    "subset_figure",
    "sweep_points",
    "telemetry_figure",
    "throughput_figure",
]
