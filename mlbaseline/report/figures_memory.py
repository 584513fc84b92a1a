"""The memory figure: peak memory per batch size, with the device's capacity as a line.

One line per result file and part (training step, inference batch): the median of the
per-step peak at each batch size, whiskers from the smallest to the largest peak measured
(memory is nearly deterministic: the whole range, not a CI). The capacity is a horizontal
line labelled with what it is (a GPU's total memory, the host's RAM or the cgroup's limit).
The y axis is in bytes, labelled in binary units; it turns logarithmic when the capacity is
far above the peaks, so both stay readable. `draw_memory` returns the Figure (the tests read
it back: gid "series|part" on each line, "capacity|label" on each capacity line).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, MultipleLocator

from mlbaseline.formatting import size
from mlbaseline.report.figures_style import SERIES_COLORS, new_figure, plt, save, styled
from mlbaseline.report.sections_memory import Capacity, MemoryGroup, capacities, device_of

# the y axis turns logarithmic when the capacity is this many times the largest peak
LOG_RATIO = 20.0
PARTS = {"train": "training step", "infer": "inference batch"}
CAPACITY_COLORS = ("#d62728", "#9467bd", "#8c564b")


@dataclass(frozen=True)
class PeakSeries:
    """One line: the peaks of one file's part, batch size -> (median, min, max) bytes."""

    name: str  # the file's label ("" for one file)
    part: str  # "training step" / "inference batch"
    points: dict[int, tuple[float, float, float]] = field(default_factory=dict)

    @property
    def legend(self) -> str:
        return f"{self.name}: {self.part}" if self.name else self.part


def peak_series(gs: Sequence[MemoryGroup]) -> list[PeakSeries]:
    """The lines of the figure from the memory groups that have a batch size and a peak."""
    out: dict[tuple[str, str], PeakSeries] = {}
    for g in gs:
        metric = g.metrics.get("peak")
        x = [v for v in metric.values if math.isfinite(v)] if metric is not None else []
        if g.family not in PARTS or g.batch_size is None or not x:
            continue
        s = out.setdefault((g.label, g.family), PeakSeries(g.label, PARTS[g.family]))
        s.points[g.batch_size] = (float(np.median(x)), min(x), max(x))
    return list(out.values())


def memory_figure_job(gs: Sequence[MemoryGroup]) -> Callable[[Path], Path] | None:
    """What draws the report's memory figure into a path, or None without a peak to draw."""
    series = peak_series(gs)
    if not series:
        return None
    results = list({id(g.result): g.result for g in gs}.values())
    devices = ", ".join(dict.fromkeys(d for r in results if (d := device_of(r))))
    title = "Peak memory per batch size" + (f" on {devices}" if devices else "")
    caps = capacities(results)
    return lambda path: memory_figure(series, caps, path, title)


def _binary_step(top: float) -> float:
    """A power of two that puts about 4–8 ticks under `top` (bytes read well in 2^k steps)."""
    return float(2 ** max(0, math.floor(math.log2(max(top, 1.0) / 4))))


def _axis(ax: plt.Axes, peaks: Sequence[float], caps: Sequence[Capacity]) -> None:
    """Linear bytes from 0, or log when the capacity dwarfs the peaks; binary-unit labels."""
    top = max([*peaks, *(c.bytes for c in caps)], default=1.0)
    if caps and peaks and max(c.bytes for c in caps) > LOG_RATIO * max(peaks):
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_locator(LogLocator(base=2, numticks=12))
        # a zero peak (nothing grew) has no place on a log axis: the lowest positive one sets it
        ax.set_ylim(min([p for p in peaks if p > 0] or [1.0]) / 2, top * 2)
    else:
        ax.yaxis.set_major_locator(MultipleLocator(_binary_step(top)))
        ax.set_ylim(0, top * 1.12)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: size(v, ".3g")))


def draw_memory(series: Sequence[PeakSeries], caps: Sequence[Capacity], title: str) -> plt.Figure:
    """Peak memory per batch size (x: the batch sizes, evenly spaced), one line per series,
    the capacity lines across; the legend outside on the right."""
    fig, ax = new_figure()
    sizes = sorted({b for s in series for b in s.points})
    for k, s in enumerate(series):
        pts = np.array([s.points[b] for b in sorted(s.points)])  # rows: median, min, max
        med, lo, hi = pts[:, 0], pts[:, 1], pts[:, 2]
        color = SERIES_COLORS[k % len(SERIES_COLORS)]
        drawn = ax.errorbar([sizes.index(b) for b in sorted(s.points)], med,
                            yerr=[med - lo, hi - med], marker="o", capsize=5, color=color,
                            label=s.legend)  # fmt: skip
        drawn.lines[0].set_gid(f"{s.name}|{s.part}")
    for k, c in enumerate(caps):
        color = CAPACITY_COLORS[k % len(CAPACITY_COLORS)]
        line = ax.axhline(c.bytes, linestyle="--", linewidth=2, color=color, label=c.text)
        line.set_gid(f"capacity|{c.label}")
    ax.set_xticks(range(len(sizes)), [str(b) for b in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("peak memory per step or batch (median, whiskers: min–max)")
    ax.set_title(title)
    _axis(ax, [v for s in series for p in s.points.values() for v in p], caps)
    handles, labels = ax.get_legend_handles_labels()
    order = [lab for lab in (*(s.legend for s in series), *(c.text for c in caps))]
    pairs = sorted(zip(handles, labels, strict=True), key=lambda hl: order.index(hl[1]))
    # the peaks first, then the capacities (matplotlib lists lines before error bars)
    ax.legend(*zip(*pairs, strict=True), loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@styled
def memory_figure(
    series: Sequence[PeakSeries], caps: Sequence[Capacity], path: Path, title: str
) -> Path:
    return save(draw_memory(series, caps, title), path)


__all__ = ["PeakSeries", "draw_memory", "memory_figure", "memory_figure_job", "peak_series"]
