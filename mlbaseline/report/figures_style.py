"""The one style of the report's figures, the one way they are saved, and the series labels.

matplotlib runs on the Agg backend (no display needed). Every figure shares one style
(:func:`new_figure` and :data:`STYLE`): 1600×900 pixels (16:9, fit for a README or a slide;
only figures with one labelled row per item grow taller, see :func:`figure_px`) with fonts
readable at that size. Each figure module has a ``draw_*`` function that returns the Figure
(the tests read it back: labels, artists, scales) and a ``*_figure`` function that saves it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from mlbaseline.report.labels import series_labels
from mlbaseline.safewrite import open_output

DPI = 100
FIGURE_PX = (1600, 900)  # width × height of every figure, pixels
ROW_PX = 26  # height of one labelled row (forest metrics) beyond the default
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

STAGE_COLORS = {
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
PHASE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")
# one colour per series (file); 20 before a colour repeats
SERIES_COLORS = tuple(plt.get_cmap("tab20").colors[::2] + plt.get_cmap("tab20").colors[1::2])


def figure_px(rows: int = 0) -> tuple[int, int]:
    """Pixel size (width, height) of a figure: FIGURE_PX, taller only when `rows` labelled rows
    (one per forest metric) would not fit in it at a readable font size."""
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


def save(fig: plt.Figure, path: Path, force: bool = False) -> Path:
    """The PNG through the one safe writer (matplotlib writes into its file object)."""
    try:
        with open_output(path, force=force, mode="wb") as fh:
            # no bbox_inches="tight": the size is the style
            fig.savefig(fh, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return Path(path)


def yerr(points: Sequence[tuple[float, float, float]]) -> np.ndarray:
    """2×n whiskers (below, above) from (median, low, high); never negative."""
    return np.array(
        [[max(0.0, m - lo) for m, lo, _ in points], [max(0.0, hi - m) for m, _, hi in points]]
    )


__all__ = [
    "DPI",
    "FIGURE_PX",
    "PHASE_COLORS",
    "ROW_PX",
    "SERIES_COLORS",
    "STAGE_COLORS",
    "STYLE",
    "figure_px",
    "new_figure",
    "plt",
    "save",
    "series_labels",
    "styled",
    "yerr",
]
