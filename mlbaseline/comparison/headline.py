"""The headline of a comparison: one line, before any table, with the step's verdict, its change
and CI, and the smallest change this pair of results could see (its MDE).

A memory metric (role ``memory``, judged by its own rule) that regressed is named on the same
line, even when every time is unchanged: it fails ``--fail-on regressed`` like a time does.

Computed from the comparison document alone (``Comparison.to_dict()``, or ``data`` of a saved
``compare`` result), so `mlb compare`, its ``--markdown``, `mlb history gate` and the report all
print the same line for the same comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mlbaseline.formatting import interval_percent, percent, signed_percent
from mlbaseline.stats.decision import INSUFFICIENT

# which total leads when there are several: the one a gate would fail on first
_SEVERITY = ("regressed", INSUFFICIENT, "inconclusive", "improved", "unchanged")


def _lead(metrics: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    totals = [m for m in metrics if m.get("role") == "total"] or list(metrics)
    if not totals:
        return None
    return min(totals, key=lambda m: _SEVERITY.index(m["verdict"]) if m["verdict"] in
               _SEVERITY else len(_SEVERITY))  # fmt: skip


def _sees(m: Mapping[str, Any]) -> str:
    mde = m.get("mde")
    if mde is None or not math.isfinite(mde):
        return "this comparison cannot say which changes it would see"
    return f"this comparison sees changes above {percent(mde)}"


def _change(m: Mapping[str, Any]) -> str:
    """The measured change with its CI; the drift-adjusted one beside it when it was used."""
    raw = m.get("raw")
    measured = raw if raw else m
    text = (
        f"{signed_percent(measured['change'])} "
        f"{interval_percent([measured['ci_low'] - 1.0, measured['ci_high'] - 1.0])}"
    )
    if raw:
        text += f" (drift-adjusted {signed_percent(m['change'])})"
    return text


def memory_label(m: Mapping[str, Any]) -> str:
    """'train.bs16 peak memory', 'train.bs16 forward memory' (held at its end): a memory
    metric (``GROUP.mem.WHAT``) as a reader names it."""
    name = str(m["metric"])
    what = m.get("stage") or name.rpartition(".mem.")[2].replace("_", " ")
    group = m.get("group")
    if ".mem." not in name or not group:
        return name
    return f"{group} {what} memory"


def _memory_part(metrics: list[Mapping[str, Any]]) -> str:
    """'; memory regressed: train.bs16 peak memory +100.0%, …' ('' when no memory regressed)."""
    moved = [x for x in metrics if x.get("role") == "memory" and x["verdict"] == "regressed"]
    if not moved:
        return ""
    return "; memory regressed: " + ", ".join(
        f"{memory_label(x)} {signed_percent(x['change'])}" for x in moved
    )


def headline(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """{metric, verdict, change, ci_low, ci_high, mde, processes, text}, None without metrics."""
    metrics = list(doc.get("metrics") or [])
    m = _lead(metrics)
    if m is None:
        return None
    procs = m.get("processes") or [m.get("n_old"), m.get("n_new")]
    if m["verdict"] == INSUFFICIENT:
        tail = f"{INSUFFICIENT}: {m.get('reason') or 'one process a side'}"
    else:
        why = f" ({m['reason']})" if m.get("reason") else ""  # e.g. the drift signature
        tail = f"{m['verdict']}{why}; {_sees(m)} ({procs[0]} vs {procs[1]} processes)"
    text = f"{m['metric']} {_change(m)}, {tail}"
    others = [x["verdict"] for x in metrics if x.get("role") == "total" and x is not m]
    if others:
        counts = {v: others.count(v) for v in _SEVERITY if v in others}
        text += "; other totals: " + ", ".join(f"{n} {v}" for v, n in counts.items())
    moved = [x for x in metrics if x.get("role") not in ("total", "memory")
             and x["verdict"] == "regressed"]  # fmt: skip
    if moved and m["verdict"] != "regressed":  # a stage fails the gate on its own: say so here
        text += "; regressed: " + ", ".join(
            f"{x.get('stage') or x['metric']} {signed_percent(x['change'])}" for x in moved
        )
    if m.get("role") != "memory":
        text += _memory_part(metrics)
    return {
        "metric": m["metric"],
        "verdict": m["verdict"],
        "change": m["change"],
        "ci_low": m["ci_low"],
        "ci_high": m["ci_high"],
        "mde": m.get("mde"),
        "processes": list(procs),
        "text": text,
    }


def headline_text(doc: Mapping[str, Any]) -> str:
    """The line itself ('' when the document has no metric); a saved document that predates
    the headline gets it computed here."""
    h = doc.get("headline") or headline(doc)
    return h["text"] if h else ""


__all__ = ["headline", "headline_text", "memory_label"]
