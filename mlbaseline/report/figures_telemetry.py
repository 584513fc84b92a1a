"""The telemetry timeline (`telemetry.png`): one line chart per kind of series, phases as bands.

Panels share the time axis: CPU % (per core, or the mean and range of many cores), memory in
bytes units (RSS, …), and when present GPU kernel-active % and GPU memory. A missing sample is
NaN and breaks its line, so a gap shows as a gap, never as a 0% dip. Every panel carries the
run's phases as shaded bands; the top panel names them above the plot, each label centred on
its own band.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline.report.data import Telemetry, finite
from mlbaseline.report.figures_style import PHASE_COLORS, new_figure, plt, save, styled

MAX_CORE_LINES = 8  # more cores than this: their mean as a line and their range as a band
_BINARY = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


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


def byte_unit(peak: float) -> tuple[str, float]:
    """The binary unit a panel of byte series is drawn in, from its largest value."""
    for name, scale in _BINARY:
        if peak >= scale:
            return name, float(scale)
    return "B", 1.0


def _cpu_panel(ax: Any, tel: Telemetry) -> None:
    cores = tel.cpu_cores
    if len(cores) <= MAX_CORE_LINES:
        for name, v in cores.items():
            ax.plot(tel.t, v, linewidth=1.4, label=name, gid=f"line|{name}")
    else:
        m = tel.cpu_matrix()
        with np.errstate(all="ignore"):  # an all-gap sample is NaN in the mean: a gap
            mean = np.nanmean(np.where(np.isfinite(m), m, np.nan), axis=0)
        ax.fill_between(tel.t, np.nanmin(m, axis=0), np.nanmax(m, axis=0), color="#1f77b4",
                        alpha=0.2, linewidth=0, label=f"range of {len(cores)} cores")  # fmt: skip
        ax.plot(tel.t, mean, color="#1f77b4", linewidth=1.6, label="mean of the cores",
                gid="line|cpu mean")  # fmt: skip
    ax.set_ylabel("CPU %")
    ax.set_ylim(0, 105)


def _bytes_panel(ax: Any, t: np.ndarray, series: dict[str, np.ndarray], what: str) -> None:
    peak = max((float(finite(v).max()) for v in series.values() if finite(v).size), default=0.0)
    unit, scale = byte_unit(peak)
    for name, v in series.items():
        ax.plot(t, v / scale, linewidth=1.6, label=name, gid=f"line|{name}")
    ax.set_ylabel(f"{what} ({unit})")
    ax.set_ylim(bottom=0)


def _panels(tel: Telemetry) -> list[tuple[str, Any]]:
    """(title, drawer) per panel with data: CPU, memory, GPU active, GPU memory."""
    out: list[tuple[str, Any]] = []
    if tel.cpu_cores:
        out.append(("CPU per core", lambda ax: _cpu_panel(ax, tel)))
    if tel.memory:
        out.append(("process memory", lambda ax: _bytes_panel(ax, tel.t, tel.memory, "memory")))
    if tel.gpu_active:

        def gpu(ax: Any) -> None:
            for name, v in tel.gpu_active.items():
                ax.plot(tel.t, v, linewidth=1.4, label=f"{name} kernel-active", gid=f"line|{name}")
            ax.set_ylabel("GPU kernel-active %")
            ax.set_ylim(0, 105)

        out.append(("GPU utilization (NVML)", gpu))
    if tel.gpu_memory:
        mem = {f"{k} memory": v for k, v in tel.gpu_memory.items()}
        out.append(("GPU memory", lambda ax: _bytes_panel(ax, tel.t, mem, "GPU memory")))
    return out


def _bands(axes: list[Any], spans: list[PhaseSpan], t0: float, t1: float) -> None:
    """Phase bands in every panel (gid "phase|LABEL" in the top one); labels above the top
    panel, centred on their band, narrow neighbours staggered so they do not overlap."""
    top = axes[0]
    narrow = 0.1 * (t1 - t0)
    for k, span in enumerate(spans):
        color = PHASE_COLORS[k % len(PHASE_COLORS)]
        for ax in axes:
            band = ax.axvspan(span.start, span.end, color=color, alpha=0.15, linewidth=0)
            if ax is top:
                band.set_gid(f"phase|{span.label}")
        lift = 1.02 if span.end - span.start >= narrow or k % 2 == 0 else 1.12
        top.text((span.start + span.end) / 2, lift, span.label, transform=top.get_xaxis_transform(),
                 ha="center", va="bottom", fontsize=12, color=color, fontweight="bold")  # fmt: skip


def draw_telemetry(tel: Telemetry) -> plt.Figure:
    """The telemetry figure (not saved): one line-chart panel per kind of series, on one time
    axis, with the run's phases as bands (see the module doc)."""
    panels = _panels(tel) or [("no series", lambda ax: None)]
    fig, axes = new_figure(len(panels), 1, sharex=True, squeeze=False)
    axes = [a for row in axes for a in row]
    t0 = float(np.nanmin(tel.t)) if tel.n else 0.0
    t1 = float(np.nanmax(tel.t)) if tel.n > 1 else t0 + 1.0
    spans = phase_spans(tel)
    t1 = max([t1, *(s.end for s in spans)]) if t1 > t0 else t0 + 1.0
    for ax, (title, drawer) in zip(axes, panels, strict=True):
        drawer(ax)
        ax.set_gid(f"panel|{title}")  # no panel title: the top one's place holds the phases
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=11)
        ax.grid(axis="y", alpha=0.3)
    _bands(axes, spans, t0, t1)
    axes[0].set_xlim(t0, t1)
    axes[-1].set_xlabel("time since start (s)")
    heading = "Telemetry timeline (gaps: missing samples)"
    fig.suptitle(f"{heading}; bands: phases of the run" if spans else heading)
    return fig


@styled
def telemetry_figure(tel: Telemetry, path: Path) -> Path:
    """Line charts over time with the run's phases as bands (see draw_telemetry)."""
    return save(draw_telemetry(tel), path)


__all__ = ["MAX_CORE_LINES", "PhaseSpan", "byte_unit", "draw_telemetry", "phase_spans",
           "telemetry_figure"]  # fmt: skip
