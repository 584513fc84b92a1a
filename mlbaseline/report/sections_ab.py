"""`## A/B verdicts`: an `mlb ab` result in the baseline report (only where one was given).

An A/B result is a verdict, not a baseline: what each arm ran, per stage the paired ratio B/A
with its CI, Holm-adjusted p, MDE and verdict, and how the run went (mode, pairs, why it
stopped). The terminal shows the same through `cli.ab` (which takes `arm_line` from here); the
headline's "Measured" line says what was compared (`measured_ab`).
"""

from __future__ import annotations

from mlbaseline import formatting as fmt
from mlbaseline.documents.data_ab import Data as AbData
from mlbaseline.report.context import ReportContext, table
from mlbaseline.report.payloads import typed_data
from mlbaseline.results import Result

HEADING = "## A/B verdicts"


def ab_payload(result: Result) -> AbData:
    return typed_data(result, AbData)


def arm_line(d: AbData, arm: str) -> str:
    """What one arm ran, plain text: with --attach the script's command and where (its ref
    and commit for a worktree, else its folder); else the config overrides of the arm (and,
    with fresh processes, how its turns were started)."""
    if d.command is not None:
        spec, ref = (d.arms or {}).get(arm), (d.refs or {}).get(arm)
        where = f"{ref.ref} ({(ref.commit or '')[:12]})" if ref is not None else None
        where = where or (spec.cwd if spec is not None else "")
        return f"{arm.upper()}: {' '.join(d.command)} at {where}"
    sets = getattr(d.overrides, arm) if d.overrides is not None else []
    parts = [", ".join(sets) or "(the config as is)"]
    spec = (d.arms or {}).get(arm)
    if spec is not None:  # fresh processes: how this arm's turns were started
        parts.append(" ".join(spec.command))
        parts += [f"in {spec.cwd}"] if spec.cwd else []
        parts += [f"{k}={v}" for k, v in spec.env.items()]
    return f"{arm.upper()}: {'; '.join(parts)}"


def _how(d: AbData) -> str:
    units = f" in {len(d.units)} units of processes" if d.units is not None else ""
    mode = f"{d.mode}, " if d.mode else ""
    return f"{mode}{d.pairs_done} pairs{units}{pinned_to(d)}"


def pinned_to(d: AbData) -> str:
    """ ", on CPUs 1" where --cpus pinned the arms (else nothing)."""
    return f", on CPUs {','.join(map(str, d.cpus))}" if d.cpus else ""


def ab_only(ctx: ReportContext) -> bool:
    """A report of A/B results and no baseline figures (throughput, latency, data loading)."""
    baseline = any(ctx.of_kind(k) for k in ("throughput", "latency", "dataloader"))
    return bool(ctx.of_kind("ab")) and not baseline


def measured_ab(ctx: ReportContext) -> str | None:
    """The headline's "Measured" line for a report of A/B results alone (None otherwise)."""
    if not ab_only(ctx):
        return None
    given = ctx.of_kind("ab")
    d = ab_payload(given[0])
    arms = "; ".join(f"`{arm_line(d, arm)}`" for arm in ("a", "b"))
    more = f" (and {len(given) - 1} more A/B results)" if len(given) > 1 else ""
    return f"- **Measured:** B against A, paired ({_how(d)}): {arms}{more}"


def _stage_rows(d: AbData) -> list[list[str]]:
    rows = []
    for s in d.stages:
        change = s.ratio - 1 if s.ratio is not None else None
        ci = [v - 1 if v is not None else None for v in (s.ci_low, s.ci_high)]
        verdict = f"**{s.verdict}**" if s.verdict in ("regressed", "improved") else s.verdict
        rows.append([
            s.stage,
            fmt.signed_percent(change, 2),
            fmt.interval_percent(ci, 2),
            fmt.p_value(s.p_adjusted),
            fmt.percent(s.mde, 1, fmt.NA),
            verdict,
        ])  # fmt: skip
    return rows


def section_ab(ctx: ReportContext) -> list[str]:
    """One block per A/B result; nothing at all in a report without one."""
    given = ctx.of_kind("ab")
    if not given:
        return []
    lines = [HEADING, ""]
    for result in given:
        d = ab_payload(result)
        lines += [f"- {arm_line(d, arm)}" for arm in ("a", "b")]
        lines += ["", f"B against A, {_how(d)}, band ±{fmt.percent(d.threshold)}:", ""]
        headers = ["stage", "B/A−1", "95% CI", "p (Holm)", "MDE", "verdict"]
        lines += table(headers, _stage_rows(d))
        lines += [
            f"Stopped by {d.stop_reason}; overall: **{d.verdict}** (p: Wilcoxon signed-rank, "
            "Holm-adjusted; MDE at 80% power).",
            "",
        ]
    return lines


__all__ = [
    "HEADING",
    "ab_only",
    "ab_payload",
    "arm_line",
    "measured_ab",
    "pinned_to",
    "section_ab",
]
