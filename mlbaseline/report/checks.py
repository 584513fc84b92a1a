"""How env-check results read in a table: a check's value and threshold in units (GB, %, °C),
and the rows of the report's environment table, identical skips folded into one row.

Shared by `mlb env-check` (its rich table) and the report; formatting only, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mlbaseline.formatting import gigabytes, number, percent
from mlbaseline.results import Check

# How the table shows a value, by the last part of the check name.
_BYTES = {"memory_total", "available", "cgroup_limit", "swap"}
_SHARES = {"memory_used", "idle"}
_OPS = {"temperature": "≤", "memory_used": "≤", "idle": "≥", "load": "≤", "swap": "≤"}
_OPS |= {"memory_total": "≥", "available": "≥", "processes": "≤", "threads": "≤"}


def _value_text(kind: str, v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "none"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if kind in _BYTES:
        return gigabytes(v)
    if kind in _SHARES:
        return percent(v, 0, missing="?")
    if kind == "temperature":
        return f"{v:.0f} °C"
    if kind == "load":
        return f"{v:.2f}/CPU"
    return f"{v:g}"


def display(check: Check) -> tuple[str, str]:
    """(value, threshold) as the table shows them; the JSON keeps SI numbers."""
    kind = check.name.rsplit(".", 1)[-1]
    threshold = (
        "—"
        if check.threshold is None
        else f"{_OPS.get(kind, '')} {_value_text(kind, check.threshold)}"
    )
    return _value_text(kind, check.value), threshold.strip()


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return number(v)
    return str(v)


def check_cells(check: Any) -> tuple[str, str]:
    """(value, threshold) as `mlb env-check` shows them (GB, %, °C), else plain numbers."""
    try:
        return display(check)
    except (TypeError, ValueError, KeyError):
        return _cell(check.value), _cell(check.threshold)


def _family(name: str) -> str:
    """'gpu0.temperature' -> 'GPU', 'cpu.idle' -> 'CPU', 'torch' -> 'torch'."""
    head = name.split(".", 1)[0]
    if head.startswith("gpu") and (head[3:].isdigit() or head == "gpu"):
        return "GPU"
    return head.upper() if head in ("cpu",) else head


def check_rows(checks: Iterable[Any]) -> list[tuple[str, str, str, str, str]]:
    """(check, status, value, threshold, advice) per check, in order; skipped checks of one
    family that say the same thing (eleven 'NVML Shared Library Not Found' on a machine without
    a GPU) become one row at the place of the first: 'GPU checks (11)', 'skip', the message."""
    checks = list(checks)
    skips: dict[tuple[str, str], list[Any]] = {}
    for c in checks:
        if c.status == "skip":
            skips.setdefault((_family(c.name), c.message), []).append(c)
    rows: list[tuple[str, str, str, str, str]] = []
    done: set[tuple[str, str]] = set()
    for c in checks:
        key = (_family(c.name), c.message)
        if c.status == "skip" and len(skips[key]) > 1:
            if key not in done:
                done.add(key)
                rows.append(_folded_row(key[0], skips[key]))
            continue
        value, threshold = check_cells(c)
        status = f"**{c.status.upper()}**" if c.status == "fail" else c.status
        rows.append((c.name, status, value, threshold, c.message))
    return rows


def _folded_row(family: str, checks: Sequence[Any]) -> tuple[str, str, str, str, str]:
    cells = {check_cells(c) for c in checks}
    value, threshold = cells.pop() if len(cells) == 1 else ("–", "–")
    return (f"{family} checks ({len(checks)})", "skip", value, threshold, checks[0].message)
