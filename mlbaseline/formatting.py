"""How numbers are written for people: one implementation of each, shared by the report, the
comparison and the CLI tables.

Plain functions of plain values; no torch, no rich, nothing from the rest of mlbaseline. A value
that is absent (``None``) or not finite is written as ``missing`` (each function has the default
its callers have always shown: "–" in the report, "n/a" in comparisons).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

DASH = "–"
NA = "n/a"

_BINARY = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_SECONDS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"))


def _absent(v: float | None) -> bool:
    return v is None or not math.isfinite(v)


def number(v: float | None, digits: int = 3, missing: str = DASH) -> str:
    """About `digits` significant figures with thousands separators, never scientific:
    1234.5 -> '1,234', 0.01234 -> '0.0123'."""
    if _absent(v):
        return missing
    assert v is not None
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    return f"{v:,.{decimals}f}"


def fixed(v: float | None, decimals: int = 1, missing: str = DASH) -> str:
    """A fixed number of decimals: 12.345 -> '12.3'."""
    return missing if _absent(v) else f"{v:.{decimals}f}"


def general(v: float | None, digits: int = 3, missing: str = DASH) -> str:
    """Python's ``g`` format: 0.0123 -> '0.0123', 12345 -> '1.23e+04'."""
    return missing if _absent(v) else f"{v:.{digits}g}"


def compact(v: float | None, digits: int = 3, missing: str = DASH) -> str:
    """Whole numbers with separators from 100 up ('5,521'), `digits` significant below ('12.3')."""
    if _absent(v):
        return missing
    assert v is not None
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{digits}g}"


def milliseconds(
    seconds: float | None, digits: int = 3, *, style: str = "number", missing: str = DASH
) -> str:
    """Seconds written in milliseconds, without the unit: 0.01234 -> '12.3'. ``style`` is
    "number" (see :func:`number`) or "general" (see :func:`general`)."""
    v = None if seconds is None else seconds * 1e3
    if style == "general":
        return general(v, digits, missing)
    return number(v, digits, missing)


def duration(seconds: float | None, signed: bool = False, missing: str = NA) -> str:
    """Seconds scaled for reading, with the unit: 1.5 -> '1.5 s', 0.0123 -> '12.3 ms'."""
    if _absent(seconds):
        return missing
    assert seconds is not None
    sign = "+" if signed and seconds > 0 else ""
    for scale, suffix in _SECONDS:
        if abs(seconds) >= scale:
            return f"{sign}{seconds / scale:.3g} {suffix}"
    return f"{sign}{seconds / 1e-9:.3g} ns"


def size(
    n_bytes: float | None,
    fmt: str = ".2f",
    *,
    signed: bool = False,
    missing: str = DASH,
) -> str:
    """Bytes in binary units: 2.5e6 -> '2.38 MiB' (`fmt` formats the scaled number; bytes
    below 1 KiB are whole: '512 B')."""
    if _absent(n_bytes):
        return missing
    assert n_bytes is not None
    sign = "+" if signed and n_bytes > 0 else ""
    for unit, scale in _BINARY:
        if abs(n_bytes) >= scale:
            return f"{sign}{n_bytes / scale:{fmt}} {unit}"
    return f"{sign}{n_bytes:.0f} B"


def gigabytes(n_bytes: float | None, missing: str = "?") -> str:
    """Decimal gigabytes, like the numbers printed on cards and DIMMs: 16e9 -> '16.0 GB'."""
    return missing if _absent(n_bytes) else f"{n_bytes / 1e9:.1f} GB"


def _percent_points(x: float, decimals: int) -> float:
    v = round(100 * x, decimals)
    return 0.0 if v == 0 else v  # no "-0.0"


def percent(share: float | None, decimals: int = 1, missing: str = DASH) -> str:
    """A fraction as a percentage: 0.1234 -> '12.3%'."""
    return missing if _absent(share) else f"{share * 100:.{decimals}f}%"


def signed_percent(x: float | None, decimals: int = 1, missing: str = NA) -> str:
    """A relative change with its sign: 0.06 -> '+6.0%', -0.00001 -> '+0.0%' (never '-0.0%')."""
    if _absent(x):
        return missing
    assert x is not None
    return f"{_percent_points(x, decimals):+.{decimals}f}%"


def share_percent(x: float | None, missing: str = NA) -> str:
    """A share as a whole percentage: 0.912 -> '91%' (never '-0%')."""
    if _absent(x):
        return missing
    assert x is not None
    return f"{_percent_points(x, 0):.0f}%"


def interval_percent(ci: Sequence[float | None] | None, digits: int = 1) -> str:
    """A CI of relative changes in percent: (0.049, 0.071) -> '[4.9, 7.1]'; '[n/a]' if absent."""
    if not ci or any(_absent(v) for v in ci):
        return "[n/a]"
    lo, hi = (_percent_points(v, digits) for v in ci)  # type: ignore[arg-type]
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def with_ci(
    median: float | None,
    low: float | None,
    high: float | None,
    fmt: Callable[[Any], str] = number,
) -> str:
    """'12.3 [11.9, 12.8]': a median and its interval, each written by `fmt`."""
    return f"{fmt(median)} [{fmt(low)}, {fmt(high)}]"


def p_value(p: float | None, missing: str = NA) -> str:
    """'<0.001' or three decimals."""
    if _absent(p):
        return missing
    assert p is not None
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def value(v: float | None, unit: str, signed: bool = False, missing: str = NA) -> str:
    """A value with its unit scaled for reading: 0.0123 s -> '12.3 ms', 2.5e6 B -> '2.38 MiB',
    items/s -> '1234/s'; any other unit is appended as is."""
    if _absent(v):
        return missing
    assert v is not None
    if unit == "s":
        return duration(v, signed)
    if unit == "B":
        return size(v, ".3g", signed=signed)
    sign = "+" if signed and v > 0 else ""
    if unit == "items/s":  # the metric name says what the items are; keep tables narrow
        return f"{sign}{v:.4g}/s"
    return f"{sign}{v:.4g} {unit}".rstrip()


def markdown_cell(text: Any) -> str:
    """A table cell: pipes escaped, newlines flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None
) -> list[str]:
    """The lines of a Markdown table. `align` has one letter per column, "r" for right-aligned
    (``---:``), anything else for the default (``---``); None: all default."""
    letters = align if align is not None else "l" * len(headers)
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for a in letters) + "|")
    lines += ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows]
    return lines


def plain_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], gap: int = 2) -> list[str]:
    """The lines of a plain-text table, columns padded to their widest cell."""
    body = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, c in enumerate(row):
            if i < len(widths):
                widths[i] = max(widths[i], len(c))
            else:
                widths.append(len(c))
    pad = " " * gap

    def line(cells: Sequence[str]) -> str:
        return pad.join(c.ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()

    return [line(list(headers)), line(["-" * w for w in widths]), *(line(r) for r in body)]
