"""The rendering of a comparison document: display rows (shared by the rich tables of
`mlb compare` and the Markdown), the summary line, and the Markdown of a CI comment.

Works from the plain comparison document (``Comparison.to_dict()``, also stored as ``data`` of a
``compare`` result file), so ``mlb report --compare`` renders a saved comparison as is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mlbaseline.comparison.headline import headline_text
from mlbaseline.comparison.matching import describe_differences, under_test_differences
from mlbaseline.comparison.model import ATTRIBUTION_METHOD, SKIP_RESIDUAL, Comparison
from mlbaseline.comparison.noise import SOURCE_SITTINGS
from mlbaseline.comparison.result import verdict_text
from mlbaseline.formatting import interval_percent as _interval_pct
from mlbaseline.formatting import markdown_table as _md_table
from mlbaseline.formatting import p_value as format_p
from mlbaseline.formatting import percent as _percent
from mlbaseline.formatting import share_percent as _share
from mlbaseline.formatting import signed_percent as _pct
from mlbaseline.formatting import value as format_value

MEMORY_NOTE = "\\* of 1 MiB at least (of the peak where the stage frees memory)"

__all__ = [  # with the names of the comparison the `mlb compare` tables show
    "ATTRIBUTION_METHOD",
    "MEMORY_NOTE",
    "SKIP_RESIDUAL",
    "describe_differences",
    "difference_lines",
    "drift_adjusted",
    "format_value",
    "headline_text",
    "mde_text",
    "memory_rows",
    "render_markdown",
    "stage_rows",
    "summary_line",
    "table_rows",
    "threshold_text",
    "verdict_reason",
    "verdict_text",
]


def _minus1(x: float | None) -> float | None:
    return None if x is None else x - 1.0


def mde_text(m: Mapping[str, Any], compact: bool = False) -> str:
    """'4.2%' (the minimum detectable effect at the level judged; ``compact``: whole percent,
    '<1%', for an 80-column table), '—' when unknown (in-process samples without a measured
    between-process noise)."""
    mde = m.get("mde")
    if mde is None or not math.isfinite(mde):
        return "—"
    if not compact:
        return _percent(mde)
    if mde < 0.01:
        return "<1%"
    return f"{round(100 * mde)}%" if mde < 10 else ">999%"


def verdict_reason(m: Mapping[str, Any]) -> str:
    """The reason behind a verdict, '' for none: 'need ~437 repl./side' (short), or why an
    in-process verdict was held back to inconclusive (long)."""
    if m.get("reason"):
        return str(m["reason"])
    if m["verdict"] == "inconclusive" and m.get("samples_needed"):
        unit = "repl." if m.get("basis") == "replicates" else "samples"
        return f"need ~{m['samples_needed']} {unit}/side"
    return ""


def threshold_text(doc: Mapping[str, Any]) -> str:
    """'threshold 4.2% (measured between-sitting noise (history)) / 3% (configured floor)', or
    'threshold 3% (configured floor)' when the history set no wider bar."""
    floor = f"{100 * doc['settings']['threshold']:g}% (configured floor)"
    sitting = [m for m in doc["metrics"] if m.get("threshold_source") == SOURCE_SITTINGS]
    if sitting:  # the history's sittings set the bar: say so, with the widest
        floor = f"{100 * max(m['threshold'] for m in sitting):.1f}% ({SOURCE_SITTINGS}) / {floor}"
    return f"threshold {floor}"


def drift_adjusted(doc: Mapping[str, Any]) -> bool:
    """Whether the verdicts used drift-adjusted values (then the tables add a column)."""
    return any(m.get("raw") for m in doc["metrics"])


def table_rows(doc: Mapping[str, Any]) -> list[dict[str, str]]:
    """Display rows (metric, old, new, delta, ci, adjusted, p, mde, verdict, reason) from a
    comparison document; shared by the rich table and the Markdown table. ``verdict`` holds
    the word, its reason in parentheses and † when compared across a blocking difference.
    Old, new, Δ and CI are always the measured figures; when the verdicts used drift-adjusted
    values, ``adjusted`` holds the adjusted Δ (marked ‡), never in place of the measured one."""
    mark = " †" if doc.get("blocking_differences") else ""
    rows = []
    for m in doc["metrics"]:
        verdict = m["verdict"]
        reason = verdict_reason(m)
        if reason:
            verdict += f" ({reason})"
        shown = m.get("raw") or m  # the measured figures
        rows.append(
            {
                "metric": m["metric"],
                "old": format_value(shown.get("median_old", m["median_old"]), m["unit"]),
                "new": format_value(shown.get("median_new", m["median_new"]), m["unit"]),
                "delta": _pct(shown["change"]),
                "ci": _interval_pct([_minus1(shown["ci_low"]), _minus1(shown["ci_high"])]),
                "adjusted": _pct(m["change"]) + " ‡" if m.get("raw") else "",
                # memory's p is 0/1 (its CI beyond the band or not): no test to show
                "p": "—" if m.get("test") == "memory" else format_p(m["p_adjusted"]),
                "mde": mde_text(m),
                "mde_compact": mde_text(m, compact=True),
                "verdict": verdict + mark,
                "status": m["verdict"],
                "reason": reason,
            }
        )
    return rows


def stage_rows(a: Mapping[str, Any]) -> list[dict[str, str]]:
    """Display rows of one group's attribution table (stages, then the residual)."""
    unit = a["unit"]
    out = []
    for row in [*a["stages"], *([a["residual"]] if a.get("residual") else [])]:
        ci = row.get("pct_ci")
        out.append(
            {
                "stage": row["stage"] + (" ◀" if row.get("named") else ""),
                "old": format_value(row["median_old"], unit),
                "new": format_value(row["median_new"], unit),
                "delta": format_value(row["delta"], unit, signed=True),
                "pct": _pct(row["pct_of_old_total"]),
                "ci": _interval_pct(ci, 2) if ci else "—",
                "share": _share(row["share"]),
                "verdict": row.get("verdict") or "—",
            }
        )
    return out


def memory_rows(a: Mapping[str, Any]) -> list[dict[str, str]]:
    """Display rows of one group's memory attribution (comparison.memory): each stage's bytes
    held at its end, old and new, the change and its verdict (◀: the stage named; * a change
    measured against more than the stage's own bytes: stats.decision.memory_base)."""
    return [
        {
            "stage": str(row["stage"]) + (" ◀" if row.get("named") else ""),
            "old": format_value(row["median_old"], "B"),
            "new": format_value(row["median_new"], "B"),
            "delta": format_value(row["delta"], "B", signed=True),
            "change": _pct(row["change"]) + (" *" if row.get("scaled") else ""),
            "verdict": row["verdict"],
        }
        for row in a["stages"]
    ]


def summary_line(doc: Mapping[str, Any]) -> str:
    c = doc["counts"]
    gate = "FAIL" if doc["failed"] else "pass"
    insufficient = c.get("insufficient data", 0)
    return (
        f"{c['regressed']} regressed, {c['improved']} improved, {c['unchanged']} unchanged, "
        f"{c['inconclusive']} inconclusive"
        + (f", {insufficient} insufficient data" if insufficient else "")
        + f"; --fail-on {doc['fail_on']}: {gate}"
    )


def render_markdown(comparison: Comparison | Mapping[str, Any]) -> str:
    """Markdown for a CI comment: a heading with the gate outcome, the per-metric table (metric,
    old, new, Δ%, CI, p after Holm, verdict), each group's attribution sentence and stage table,
    then unmatched/skipped metrics, warnings and differences in the environment.

    Accepts a :class:`Comparison` or its document (``to_dict()``, or ``data`` of a ``compare``
    result file), so ``mlb report --compare`` can render a saved comparison as is."""
    doc = comparison.to_dict() if isinstance(comparison, Comparison) else comparison
    conf = round(100 * doc["settings"]["confidence"])
    lines = [
        f"## mlb compare: `{doc['old']['label']}` → `{doc['new']['label']}` ({doc['kind']})",
        "",
        f"**{headline_text(doc)}**",
        "",
        summary_line(doc),
        "",
    ]
    if doc.get("blocking_differences"):
        lines += [
            "> **Not comparable** — compared anyway (`--allow-mismatch`); every verdict is "
            f"marked †. Blocking differences: {describe_differences(doc['blocking_differences'])}",
            "",
        ]
    lines += _md_metric_table(doc, conf)
    for a in doc["attribution"]:
        lines += ["", f"**Attribution ({a['group']}):** {a['sentence']}", ""]
        headers = [
            "stage",
            "old",
            "new",
            "Δ",
            "Δ % of old total",
            f"{conf}% CI",
            "share",
            "verdict",
        ]
        srows = [list(r.values()) for r in stage_rows(a)]
        lines += _md_table(headers, srows, "lrrrrrrl")
    for mem in doc.get("memory") or []:  # a document from before issue 28 has none
        lines += ["", f"**Memory ({mem['group']}):** {mem['sentence']}", ""]
        if mem["stages"]:
            headers = ["stage", "held old", "held new", "Δ", "Δ%", "verdict"]
            mrows = [list(r.values()) for r in memory_rows(mem)]
            lines += _md_table(headers, mrows, "lrrrrl")
            lines += ["", MEMORY_NOTE]
    lines += _md_notes(doc)
    return "\n".join(lines) + "\n"


def _md_metric_table(doc: Mapping[str, Any], conf: int) -> list[str]:
    """The per-metric table; a long reason (an in-process verdict held back) is a numbered
    note under it, a short one (`need ~N repl./side`) stays in the cell."""
    headers = ["metric", "old", "new", "Δ%", f"{conf}% CI", "p (adj.)", "MDE", "verdict"]
    keys = ["old", "new", "delta", "ci", "p", "mde"]
    if drift_adjusted(doc):  # the adjusted Δ in a column of its own, after the measured one
        headers.insert(5, "Δ% drift-adj. ‡")
        keys.insert(4, "adjusted")
    notes: list[str] = []
    rows = []
    for r in table_rows(doc):
        verdict = r["verdict"]
        if r["reason"] and not r["reason"].startswith("need ~"):
            if r["reason"] not in notes:
                notes.append(r["reason"])
            verdict = verdict.replace(f"({r['reason']})", f"[{notes.index(r['reason']) + 1}]")
        rows.append([f"`{r['metric']}`", *(r[k] for k in keys), verdict])
    lines = _md_table(headers, rows, "l" + "r" * (len(headers) - 2) + "l")
    if notes:
        lines += [""] + [f"[{i}] {text}  " for i, text in enumerate(notes, 1)]
    return lines


def _md_notes(doc: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    notes = []
    if doc["only_old"]:
        notes.append(
            f"Only in `{doc['old']['label']}` (not compared): {', '.join(doc['only_old'])}"
        )
    if doc["only_new"]:
        notes.append(
            f"Only in `{doc['new']['label']}` (not compared): {', '.join(doc['only_new'])}"
        )
    notes += [f"Not judged: `{s['metric']}` — {s['reason']}" for s in doc["skipped"]]
    notes += [f"⚠ {w['message']}" for w in doc["warnings"]]
    notes += [line[0].upper() + line[1:] for line in difference_lines(doc, limit=10)]
    s = doc["settings"]
    notes.append(
        f"Method: {s['test']}, α={s['alpha']}; {s['interval']} ({s['n_resamples']} resamples, "
        f"seed {s['seed']}); practical {threshold_text(doc)}"
        + (" with per-metric overrides" if s["thresholds"] else "")
        + f"; attribution: {s['attribution']}"
        + (f"; {s['memory_rule']} ({100 * s['memory_threshold']:g}%)" if s.get("memory_rule")
           else "")
        + "."
    )  # fmt: skip
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return lines


def difference_lines(doc: Mapping[str, Any], limit: int | None = None) -> list[str]:
    """One line each, when there are any: the blocking keys allowed by --allow, the change under
    test (model, loss, optimizer: informational, apart so it is not lost among host details)
    and the other informational differences (at most `limit` of them). Shared by the terminal
    and the Markdown; a comparison document from before --allow has no allowed line."""
    info = list(doc.get("informational_differences") or [])
    under = under_test_differences(info)
    rest = [r for r in info if r not in under]
    allowed = doc.get("allowed_differences") or []
    lines = []
    if allowed:
        lines.append(f"allowed differences (--allow): {describe_differences(allowed)}")
    if under:
        named = [{**r, "key": str(r["key"]).removeprefix("config.")} for r in under]
        lines.append(f"changed under test (informational): {describe_differences(named)}")
    if rest:
        shown = rest if limit is None else rest[:limit]
        more = f" (and {len(rest) - len(shown)} more)" if len(shown) < len(rest) else ""
        lines.append(f"informational differences: {describe_differences(shown)}{more}")
    return lines
