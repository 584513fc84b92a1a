"""The sections of findings: telemetry, danger signals, change-impact predictions, warnings
and the method."""

from __future__ import annotations

import math

import numpy as np

from mlbaseline import stats
from mlbaseline.formatting import milliseconds as ms
from mlbaseline.formatting import number as num
from mlbaseline.formatting import percent as pct
from mlbaseline.report.context import (
    SECTIONS,
    ReportContext,
    details,
    figure,
    not_measured,
    table,
)
from mlbaseline.report.data import (
    Telemetry,
    finite,
)
from mlbaseline.report.signals import Signal
from mlbaseline.results import Result
from mlbaseline.stopping import LEFTOVER_NOTE, as_read


def section_telemetry(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[10], ""]
    tel = ctx.telemetry
    if tel is None or tel.n == 0:
        return lines + not_measured(
            ctx.telemetry_note or "no telemetry CSV referenced by the results"
        )
    dt = float(np.nanmedian(np.diff(tel.t))) if tel.n > 1 else math.nan
    lines += [
        f"{tel.n} samples over {num(float(np.nanmax(tel.t) - np.nanmin(tel.t)))} s "
        f"(median interval {ms(dt)} ms) from `{tel.path.name if tel.path else 'telemetry'}`.",
        "",
    ]
    rows = []
    for name, series, unit in _telemetry_series(tel):
        x = finite(series)
        gaps = int(np.size(series) - x.size)
        if x.size:
            rows.append(
                [name, f"{num(float(x.mean()))}{unit}", f"{num(float(x.max()))}{unit}", str(gaps)]
            )
        else:
            rows.append([name, "–", "–", str(gaps)])
    lines += table(["series", "mean", "max", "gaps"], rows)
    if not tel.has_gpu:
        lines += ["GPU kernel-active %: not measured (no GPU telemetry in this run).", ""]
    lines += figure(ctx, "telemetry", "telemetry: one line chart per series, phases as bands")
    return lines


def _telemetry_series(tel: Telemetry) -> list[tuple[str, np.ndarray, str]]:
    out = [(f"{k} kernel-active", v, "%") for k, v in tel.gpu_active.items()]
    out += [(f"{k} temperature", v, " °C") for k, v in tel.gpu_temp.items()]
    out += [(f"{k} memory used (MiB)", v / 2**20, "") for k, v in tel.gpu_memory.items()]
    m = tel.cpu_matrix()
    if m.size:
        ok = np.isfinite(m)
        counts = ok.sum(axis=0)
        mean = np.where(
            counts > 0, np.where(ok, m, 0.0).sum(axis=0) / np.maximum(counts, 1), np.nan
        )
        out.append(("CPU, mean of cores", mean, "%"))
        out += [(f"{k}", v, "%") for k, v in tel.cpu_cores.items()]
    out += [(f"{k} (MiB)", v / 2**20, "") for k, v in tel.memory.items()]
    return out


_SIGNAL_UNITS = {
    "data_wait": pct,
    "residual": pct,
    "cv": pct,
    "cpu_saturated": pct,
    "gpu_low": lambda v: f"{num(v)}%",
    "tail_ratio": lambda v: f"{num(v)}×",
    "thermal": lambda v: f"{num(v)} °C",
    "gpu_sawtooth": lambda v: f"{v:.0f} dips",
    "percentile_floor": lambda v: f"{v:.0f} samples",
    "contaminated": lambda v: f"{v:.2f} cores",
}
_SIGNAL_COMPARATORS = {
    "data_wait": "≥",
    "gpu_sawtooth": "≥",
    "gpu_low": "<",
    "tail_ratio": ">",
    "cv": ">",
    "thermal": ">",
    "cpu_saturated": "≥",
    "residual": "> ±",
    "percentile_floor": "<",
    "contaminated": ">",
}


def signal_value(s: Signal) -> str:
    """A signal's measured value in its unit ('47.8%', '3.20×'), '–' when not measured."""
    return _SIGNAL_UNITS.get(s.name, num)(s.value) if s.value is not None else "–"


def _signal_rows(found: list[Signal]) -> list[list[str]]:
    rows = []
    for s in found:
        fmt = _SIGNAL_UNITS.get(s.name, num)
        thr = (
            f"{_SIGNAL_COMPARATORS.get(s.name, '')} {fmt(s.threshold)}"
            if s.threshold is not None
            else "–"
        )
        state = "**FIRED**" if s.fired else s.state
        rows.append([s.title, s.subject or "–", state, signal_value(s), thr, s.message])
    return rows


def section_signals(ctx: ReportContext) -> list[str]:
    """The fired signals in the main flow; the quiet and not-measured ones (most of them, on a
    healthy run) collapsed below, still there for whoever wants to see what was checked."""
    lines = [SECTIONS[11], ""]
    headers = ["signal", "on", "state", "value", "fires when", "detail"]
    fired = [s for s in ctx.signals if s.fired]
    rest = [s for s in ctx.signals if not s.fired]
    if fired:
        lines += table(headers, _signal_rows(fired))
    else:
        lines += [f"None of the {len(ctx.signals)} checks fired.", ""]
    if rest:
        quiet = sum(1 for s in rest if s.measured)
        body = [
            "Each signal is computed from the measured data against the threshold shown; its "
            "definition is in `mlbaseline/report/signals.py`.",
            "",
            *table(headers, _signal_rows(rest)),
        ]
        summary = f"Checked and did not fire: {quiet} quiet, {len(rest) - quiet} not measured"
        lines += details(summary, body)
    return lines


def section_predictions(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[12], ""]
    if not ctx.predictions:
        return lines + not_measured("no stage decomposition or worker sweep to predict from")
    body = [
        "_These are **predictions**, computed only from the measured shares (Amdahl's law) and "
        "the measured worker sweep; they are not measurements. Re-measure after the change._",
        "",
        *(f"- {p.text} _(from: {p.basis})_" for p in ctx.predictions),
        "",
    ]
    summary = (
        f"{len(ctx.predictions)} predictions (arithmetic on measured shares, not measurements)"
    )
    return lines + details(summary, body)


def _status_item(r: Result) -> str:
    """'KIND: status **S** — notes'; a leftover `running` reads as incomplete, saying why."""
    notes = [*r.notes, *([LEFTOVER_NOTE] if r.status == "running" else [])]
    return f"{r.kind}: status **{as_read(r.status)}**" + (f" — {'; '.join(notes)}" if notes else "")


def section_warnings(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[13], ""]
    # a run groups its phases (their warnings are theirs): only its own status, when the run
    # did not finish, e.g. a baseline.json left `running` by a SIGKILL after 3 of 5 phases
    items = [_status_item(r) for r in ctx.runs if r.status != "complete"]
    for r in ctx.results:
        items += [f"{r.kind}: {w.get('message', w.get('code', w))}" for w in r.warnings]
        if r.status != "complete":
            items.append(_status_item(r))
        elif r.notes:
            items += [f"{r.kind}: {n}" for n in r.notes]
    if ctx.telemetry_note and ctx.telemetry is not None:
        items.append(ctx.telemetry_note)
    if not items:
        return [*lines, "None.", ""]
    return lines + [f"- {i}" for i in items] + [""]


def section_method(ctx: ReportContext) -> list[str]:
    body = [
        f"- Percentiles: numpy `{stats.PERCENTILE_METHOD}` method (Hyndman & Fan type 7); "
        "p90/p95/p99 "
        f"need {', '.join(str(v) for v in stats.PERCENTILE_FLOORS.values())} samples.",
        "- Confidence intervals: 95% percentile bootstrap, 2000 resamples, "
        f"seed {stats.DEFAULT_SEED}.",
        "- Location: median; stage shares are time-weighted (sum of stage / sum of total), so "
        "they add up to 100% with the residual.",
        "- Warm-up samples are excluded from every figure and table here (they are kept in the "
        "result files).",
        "- The report never measures: every number is recomputed from the raw values in the "
        "results.",
        "",
    ]
    return [SECTIONS[14], "", *details("How the figures were computed", body)]
