"""Stability and sample-size warnings, warm-up detection and the stop rule's window test."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from mlbaseline.stats.core import (
    OUTLIER_IQR_FACTOR,
    PERCENTILE_FLOORS,
    PERCENTILE_METHOD,
    ArrayLike,
    Summary,
    _as_sample,
    mann_whitney_p,
    percentile_key,
    summarize,
)

# --------------------------------------------------------------------------- warnings


@dataclass(frozen=True)
class StatWarning:
    """A stability or sample-size warning, kept as data in the result."""

    code: str  # "high_cv", "iqr_10", "iqr_25", "first_outlier", "percentile_floor"
    metric: str
    message: str
    value: float
    threshold: float

    def to_dict(self) -> dict[str, str | float]:
        return asdict(self)


def _iqr_warning(s: Summary, metric: str, iqr_limits: Sequence[float]) -> StatWarning | None:
    if s.median == 0:
        return None  # relative spread is undefined around 0
    rel = s.iqr / abs(s.median)
    crossed = [lim for lim in sorted(iqr_limits) if rel >= lim]
    if not crossed:
        return None
    lim = crossed[-1]
    msg = f"{metric}: IQR is {rel:.1%} of the median (>= {lim:.0%})"
    return StatWarning(f"iqr_{round(lim * 100)}", metric, msg, rel, lim)


def _first_outlier_warning(x: np.ndarray, metric: str) -> StatWarning | None:
    if x.size < 4:
        return None
    rest = x[1:]
    q1, med, q3 = np.percentile(rest, [25, 50, 75], method=PERCENTILE_METHOD)
    bound = OUTLIER_IQR_FACTOR * float(q3 - q1)
    dev = abs(float(x[0] - med))
    if dev <= bound:
        return None
    msg = f"{metric}: first sample {x[0]:.6g} is an outlier (median of the rest {med:.6g})"
    return StatWarning("first_outlier", metric, msg, dev, bound)


def stability_warnings(
    values: ArrayLike,
    metric: str,
    cv_limit: float = 0.10,
    iqr_limits: Sequence[float] = (0.10, 0.25),
) -> list[StatWarning]:
    """Stability warnings as data:

    - ``high_cv``: coefficient of variation stdev/mean >= cv_limit;
    - ``iqr_<pct>``: IQR/|median| >= a limit; only the highest limit crossed is reported
      (``iqr_25`` replaces ``iqr_10``); skipped when the median is 0;
    - ``first_outlier``: the first sample lies beyond median ± 3·IQR, both computed over the
      *other* samples (so the outlier cannot hide itself); needs n >= 4. ``value`` is its
      distance from that median, ``threshold`` is 3·IQR.
    """
    x = _as_sample(values, metric)
    s = summarize(x)
    out: list[StatWarning] = []
    if s.cv >= cv_limit:
        msg = f"{metric}: coefficient of variation {s.cv:.1%} (>= {cv_limit:.0%})"
        out.append(StatWarning("high_cv", metric, msg, s.cv, cv_limit))
    for w in (_iqr_warning(s, metric, iqr_limits), _first_outlier_warning(x, metric)):
        if w is not None:
            out.append(w)
    return out


def percentile_floor_warnings(
    n: int, metric: str, qs: Sequence[float] = (90, 95, 99)
) -> list[StatWarning]:
    """A ``percentile_floor`` warning for each tail percentile in ``qs`` whose sample floor
    (:data:`PERCENTILE_FLOORS`: p90/p95/p99 need 64/130/662 samples) exceeds n. A q without a
    floor is a ValueError, not silence."""
    out: list[StatWarning] = []
    for q in qs:
        if q not in PERCENTILE_FLOORS:
            raise ValueError(f"no sample floor is defined for p{q:g}")
        floor = PERCENTILE_FLOORS[q]
        if n < floor:
            key = percentile_key(q)
            msg = f"{metric}: {key} from {n} samples is unreliable (needs >= {floor})"
            out.append(StatWarning("percentile_floor", metric, msg, float(n), float(floor)))
    return out


# --------------------------------------------------------------------------- warm-up / stop rule


def split_half_settled(
    values: ArrayLike, tolerance: float = 0.05, test_alpha: float = 0.05
) -> bool:
    """Split-half stability test. With h = n // 2, the halves are a = values[:h] and
    b = values[n-h:] (an odd middle value is left out). Settled when both hold:

    1. |median(b) - median(a)| <= tolerance·|median(a)| (the medians agree within tolerance);
    2. the halves do not show a *significant and sizeable* shift: NOT (two-sided Mann-Whitney
       p < test_alpha AND |median(b)/median(a) - 1| > tolerance/2).

    Rule 2 catches a trend that is still running but has not yet crossed the tolerance; the
    tolerance/2 floor keeps a tiny, practically irrelevant drift in very quiet data from
    blocking forever. Fewer than 4 values (halves of 1) are never settled. ``test_alpha=0``
    disables rule 2.
    """
    x = _as_sample(values)
    h = x.size // 2
    if h < 2:
        return False
    a, b = x[:h], x[x.size - h :]
    ma, mb = float(np.median(a)), float(np.median(b))
    shift = abs(mb - ma)
    if shift > tolerance * abs(ma):
        return False
    if test_alpha > 0 and shift > 0.5 * tolerance * abs(ma):
        return mann_whitney_p(a, b) >= test_alpha
    return True


def detect_warmup(
    values: ArrayLike,
    min_warmup: int = 3,
    window: int = 10,
    tolerance: float = 0.05,
    test_alpha: float = 0.05,
) -> int | None:
    """Warm-up length by split-half testing: the smallest k >= min_warmup such that the full
    window values[k:k+window] passes :func:`split_half_settled`; None if no window settles."""
    x = _as_sample(values)
    if window < 4:
        raise ValueError("window must be >= 4 (two values per half)")
    for k in range(min_warmup, x.size - window + 1):
        if split_half_settled(x[k : k + window], tolerance, test_alpha):
            return k
    return None


def windows_stable(
    values: ArrayLike, n_windows: int = 3, window: int = 10, tolerance: float = 0.05
) -> bool:
    """Stop-rule stability: split the last n_windows·window values into n_windows consecutive
    windows; stable when every window median lies within ±tolerance·|M| of their mean M.
    False when there are too few values."""
    if n_windows < 1 or window < 1:
        raise ValueError("n_windows and window must be >= 1")
    if len(values) == 0:
        raise ValueError("values: empty sample")
    need = n_windows * window
    if len(values) < need:
        return False
    # plain Python on the few values tested (NumPy's per-call cost was 8× this): the stop
    # rule runs it after every step, inside the user's loop too (mlbaseline.api); the same
    # medians as np.median, the mean to rounding (tests/test_api.py checks it against NumPy)
    tail = [float(v) for v in values[-need:]]
    if not all(math.isfinite(v) for v in tail):
        raise ValueError("values: contains NaN or infinite values")
    meds = [statistics.median(tail[i * window : (i + 1) * window]) for i in range(n_windows)]
    center = sum(meds) / n_windows
    return all(abs(m - center) <= tolerance * abs(center) for m in meds)
