"""The sections of `baseline_report.md`, as pure functions of a `ReportContext`.

Every section is always present; a section whose input is absent says "not measured" (and why)
instead of disappearing. Numbers come from the results' raw values: medians with seeded
bootstrap CIs (`mlbaseline.stats`), stage shares time-weighted (sum of stage / sum of total).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.report import payloads
from mlbaseline.report.data import (
    Group,
    Telemetry,
    all_groups,
    estimate,
    finite,
    stage_shares,
)
from mlbaseline.report.signals import Prediction, Signal
from mlbaseline.results import Result

TITLE = "# mlb baseline report"
SECTIONS = (
    "## Summary",
    "## Hardware and software",
    "## Golden parameters",
    "## Environment checks",
    "## Data subset",
    "## Training throughput",
    "## Training stage breakdown",
    "## Inference throughput",
    "## Latency",
    "## Data loading",
    "## Telemetry",
    "## Danger signals",
    "## Change-impact predictions",
    "## Warnings and notes",
    "## Method",
)
NOT_MEASURED = "_Not measured"
LATENCY_QS = (50, 90, 95, 99)


@dataclass
class ReportContext:
    """Everything the sections read: results (with their files), telemetry, figures, findings."""

    results: list[Result]
    sources: list[Path | None]
    telemetry: Telemetry | None = None
    telemetry_note: str = ""
    figures: dict[str, str] = field(default_factory=dict)  # figure name -> relative path
    signals: list[Signal] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    subset: payloads.SubsetFacts | None = None

    def of_kind(self, kind: str) -> list[Result]:
        return [r for r in self.results if r.kind == kind]


# ---------------------------------------------------------------- formatting


def num(v: float | None, digits: int = 3) -> str:
    """A number with about `digits` significant figures, never in scientific notation."""
    if v is None or not math.isfinite(v):
        return "–"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    return f"{v:,.{decimals}f}"


def ms(seconds: float | None) -> str:
    return num(seconds * 1e3 if seconds is not None else None)


def pct(share: float | None, decimals: int = 1) -> str:
    return "–" if share is None or not math.isfinite(share) else f"{share * 100:.{decimals}f}%"


def size(n_bytes: float | None) -> str:
    if n_bytes is None or not math.isfinite(n_bytes):
        return "–"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.2f} {unit}"
    return f"{n_bytes:.0f} B"


def with_ci(median: float, low: float, high: float, fmt: Any = num) -> str:
    return f"{fmt(median)} [{fmt(low)}, {fmt(high)}]"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return [*out, ""]


def not_measured(why: str) -> list[str]:
    return [f"{NOT_MEASURED}: {why}._", ""]


def figure(ctx: ReportContext, name: str, alt: str) -> list[str]:
    rel = ctx.figures.get(name)
    return [f"![{alt}]({rel})", ""] if rel else []


# ---------------------------------------------------------------- sections


def section_summary(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[0], ""]
    rows = []
    for r, src in zip(ctx.results, ctx.sources, strict=True):
        rows.append(
            [r.kind, src.name if src else "(in memory)", r.status, r.verdict.status, r.created_at]
        )
    lines += table(["result", "file", "status", "verdict", "created (UTC)"], rows)
    fired: dict[str, list[Signal]] = {}
    for s in ctx.signals:
        if s.fired:
            fired.setdefault(s.name, []).append(s)
    if fired:
        lines.append(f"**{len(fired)} danger signal(s) fired** (details in the table below):")
        for group in fired.values():
            if len(group) == 1:
                lines.append(f"- {group[0].title} — {group[0].message}")
            else:
                on = ", ".join(s.subject for s in group)
                lines.append(f"- {group[0].title} — on {len(group)} subjects: {on}")
    else:
        lines.append("No danger signal fired (see [Danger signals](#danger-signals)).")
    lines.append("")
    return lines


def _environment(ctx: ReportContext) -> dict[str, Any]:
    """The fingerprint to show: the env-check's if present, else the first result's."""
    ordered = ctx.of_kind("env-check") + [r for r in ctx.results if r.kind != "env-check"]
    for r in ordered:
        env = r.environment or {}
        if env.get("blocking") or env.get("informational"):
            return env
    return {}


def _gpu_text(blocking: Mapping[str, Any], info: Mapping[str, Any]) -> str:
    gpus = info.get("gpus") or []
    if gpus:
        names = [f"{g.get('name', '?')} ({size(g.get('memory_total'))})" for g in gpus]
        return ", ".join(names)
    return str(blocking.get("gpu_name") or "none detected (CPU run)")


def section_hardware(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[1], ""]
    env = _environment(ctx)
    if not env:
        return lines + not_measured("no result carries an environment fingerprint")
    b, i = env.get("blocking") or {}, env.get("informational") or {}
    cpus = (
        f"{i.get('cpu_logical', '–')} logical, {i.get('usable_cpus', '–')} usable "
        f"(affinity {i.get('cpu_affinity', '–')}, "
        f"cgroup quota {i.get('cgroup_cpu_quota') or 'none'})"
    )
    ram = size(i.get("ram_total_bytes"))
    if i.get("cgroup_memory_limit_bytes"):
        ram += f" (cgroup limit {size(i.get('cgroup_memory_limit_bytes'))})"
    rows = [
        ("device", b.get("device", "–")),
        ("GPU", _gpu_text(b, i)),
        ("driver", i.get("driver") or b.get("driver_major") or "–"),
        ("CUDA (torch build)", b.get("cuda") or i.get("cuda_build") or "none"),
        ("cuDNN", b.get("cudnn") or i.get("cudnn") or "none"),
        ("CPU", i.get("cpu_model") or b.get("cpu_model") or "–"),
        ("CPUs", cpus),
        ("RAM", ram),
        ("torch", b.get("torch") or i.get("torch") or "–"),
        ("torchvision", i.get("torchvision", "–")),
        ("python", i.get("python", "–")),
        ("OS", i.get("os", "–")),
        ("host", i.get("hostname", "–")),
        (
            "determinism",
            f"cudnn.deterministic={i.get('cudnn_deterministic', '–')}, "
            f"cudnn.benchmark={i.get('cudnn_benchmark', '–')}, "
            f"TF32 matmul={i.get('tf32_matmul', '–')}",
        ),
        (
            "threads",
            f"torch {i.get('torch_threads', '–')}, interop {i.get('torch_interop_threads', '–')}",
        ),
    ]
    lines += table(["", "value"], rows)
    lines += _fingerprint_mismatch(ctx)
    return lines


def _fingerprint_mismatch(ctx: ReportContext) -> list[str]:
    """Blocking keys on which the results disagree: they were not measured on one setup."""
    seen: dict[str, set[str]] = {}
    for r in ctx.results:
        for k, v in ((r.environment or {}).get("blocking") or {}).items():
            seen.setdefault(k, set()).add(repr(v))
    differ = sorted(k for k, vals in seen.items() if len(vals) > 1)
    if not differ:
        return []
    return [
        f"**Note:** the results differ in blocking fingerprint keys ({', '.join(differ)}); "
        "they do not describe one machine and config.",
        "",
    ]


def section_golden(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[2], ""]
    golden = next((r.config.get("golden") for r in ctx.results if r.config.get("golden")), None)
    if not golden:
        return lines + not_measured("no result carries its resolved config")
    profile = next((r.config.get("profile") for r in ctx.results if r.config.get("profile")), "–")
    rows = [(k, v) for k, v in golden.items()] + [("profile", profile)]
    lines += table(["parameter", "value"], rows)
    lines += [
        "`mlb compare` treats a difference in any golden parameter as *not comparable*.",
        "",
    ]
    return lines


def section_env_check(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[3], ""]
    checks = [c for r in ctx.of_kind("env-check") for c in r.verdict.checks]
    if not checks:
        return lines + not_measured("no env-check result (run `mlb env-check`)")
    rows = []
    for c in checks:
        value, threshold = _check_cells(c)
        status = f"**{c.status.upper()}**" if c.status == "fail" else c.status
        rows.append((c.name, status, value, threshold, c.message))
    return lines + table(["check", "status", "value", "threshold", "advice"], rows)


def _check_cells(check: Any) -> tuple[str, str]:
    """(value, threshold) as `mlb env-check` shows them (GB, %, °C), else plain numbers."""
    try:
        from mlbaseline.runners.envcheck import display  # formatting only; imports no torch
    except ImportError:
        return _cell(check.value), _cell(check.threshold)
    try:
        return display(check)
    except (TypeError, ValueError, KeyError):
        return _cell(check.value), _cell(check.threshold)


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return num(v)
    return str(v)


def _opt(v: Any, fmt: Any = str, missing: str = "–") -> str:
    return missing if v is None else fmt(v)


def section_subset(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[4], ""]
    facts = ctx.subset
    if facts is None:
        return lines + not_measured("no subset result or manifest (run `mlb subset`)")
    rows = [
        ("samples", _opt(facts.samples)),
        ("classes", _opt(facts.classes)),
        ("strategy", _opt(facts.strategy)),
        ("seed", _opt(facts.seed)),
        ("mean image size", facts.mean_size or "not measured"),
        ("mean file size", _opt(facts.mean_file_bytes, size, "not measured")),
        ("KL features", _opt(facts.extractor)),
        ("full-set reference", _opt(facts.reference)),
        ("mean Gaussian KL (subset ‖ full)", _opt(facts.kl_mean, num, "not measured")),
        ("KL threshold (pass below)", _opt(facts.kl_threshold, num)),
        ("KL verdict", _opt(facts.kl_verdict)),
        ("class-proportion divergence", _opt(facts.class_kl, num)),
        ("seeds tried", str(facts.tries) if facts.tries else "–"),
        ("corrupt images excluded", str(facts.corrupt)),
        ("manifest sha256", f"`{facts.sha256}`" if facts.sha256 else "–"),
    ]
    lines += table(["", "value"], rows)
    if facts.feature_kl:
        const = set(facts.constant_features)
        feature_rows = [
            (k, num(v) + (" (constant feature)" if k in const else ""))
            for k, v in facts.feature_kl.items()
        ]
        lines += ["Per-feature Gaussian KL:", "", *table(["feature", "KL"], feature_rows)]
    if facts.class_counts:
        total = sum(facts.class_counts.values()) or 1
        full = facts.full_counts or {}
        ftotal = sum(full.values()) or 1
        rows = [
            (
                name,
                n,
                pct(n / total),
                pct(full[name] / ftotal) if name in full else "–",
                _opt(facts.per_class_kl.get(name), num),
            )
            for name, n in facts.class_counts.items()
        ]
        headers = ["class", "samples", "share", "share in full set", "KL within class"]
        lines += ["Class distribution:", "", *table(headers, rows)]
        lines += figure(ctx, "subset", "class distribution")
    return lines


def _train_row(ctx: ReportContext, result: Result, g: Group) -> list[str]:
    rate = estimate(g.rate.values) if g.rate else None
    step = estimate(g.total.values) if g.total else None
    facts = payloads.batch_facts(result, g)
    active = payloads.kernel_active(ctx.telemetry, result, g)
    memory = "not measured"
    if facts.peak_memory is not None:
        memory = size(facts.peak_memory) + _memory_kind(facts.memory_kind)
    return [
        g.label,
        with_ci(rate.median, rate.low, rate.high) if rate else "–",
        with_ci(step.median, step.low, step.high, ms) if step else "–",
        active,
        memory,
        str(step.n) if step else "–",
        facts.stop_reason or "–",
    ]


def _memory_kind(kind: str | None) -> str:
    if not kind:
        return ""
    if kind.startswith("cuda"):
        return " (CUDA allocated)"
    if "rss" in kind:
        return " (RSS growth)"
    return f" ({kind})"


def section_training(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[5], ""]
    rows = [
        _train_row(ctx, r, g) for r in ctx.of_kind("throughput") for g in all_groups([r], "train")
    ]
    if not rows:
        return lines + not_measured("no training throughput result (run `mlb throughput`)")
    for r in ctx.of_kind("throughput"):
        failed = [(b, why) for b, part, why in payloads.failed_sizes(r) if part == "train"]
        rows += [[str(b), why, "–", "–", "–", "0", "not measured"] for b, why in failed]
    headers = [
        "batch size",
        "samples/s [95% CI]",
        "step ms [95% CI]",
        "GPU kernel-active %",
        "peak memory",
        "steps",
        "ended by",
    ]
    lines += table(headers, rows)
    lines += [
        "GPU kernel-active % is NVML's utilization: the share of time a kernel was running, "
        "not SM occupancy or Tensor Core load.",
        "",
    ]
    lines += figure(ctx, "throughput", "samples/s per batch size")
    return lines


def section_stages(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[6], ""]
    gs = all_groups(ctx.of_kind("throughput"), "train")
    gs = [g for g in gs if g.stages]
    if not gs:
        return lines + not_measured("no stage-decomposed training step")
    lines += stage_table(gs, "batch size", lambda g: g.label)
    lines += figure(ctx, "stages", "stage breakdown per batch size")
    return lines


def stage_table(gs: Sequence[Group], key: str, label: Any) -> list[str]:
    """Rows: group; columns: each stage's median ms and time-weighted share, residual last."""
    stage_names: list[str] = []
    for g in gs:
        stage_names += [s for s in g.stages if s not in stage_names]
    headers = [key] + [s.replace("_", " ") for s in stage_names] + ["residual", "total (median)"]
    rows = []
    for g in gs:
        shares = stage_shares(g)
        row = [label(g)]
        for s in stage_names:
            m = g.stages.get(s)
            row.append(
                f"{ms(float(np.median(m.values)))} ms ({pct(shares.get(s))})"
                if m and m.values
                else "–"
            )
        res = g.residual
        row.append(
            f"{ms(float(np.median(res.values)))} ms ({pct(shares.get('residual'))})"
            if res and res.values
            else "–"
        )
        row.append(
            f"{ms(float(np.median(g.total.values)))} ms" if g.total and g.total.values else "–"
        )
        rows.append(row)
    return [
        *table(headers, rows),
        "Cells: median ms per item (time-weighted share of the total: "
        "sum of stage / sum of total).",
        "",
    ]


def section_inference(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[7], ""]
    rows = []
    for r in ctx.of_kind("throughput"):
        for g in all_groups([r], "infer"):
            rate = estimate(g.rate.values) if g.rate else None
            batch = estimate(g.total.values) if g.total else None
            facts = payloads.batch_facts(r, g)
            memory = "not measured"
            if facts.peak_memory is not None:
                memory = size(facts.peak_memory) + _memory_kind(facts.memory_kind)
            rows.append(
                [
                    g.label,
                    with_ci(rate.median, rate.low, rate.high) if rate else "–",
                    with_ci(batch.median, batch.low, batch.high, ms) if batch else "–",
                    memory,
                    str(batch.n) if batch else "–",
                ]
            )
        failed = [(b, why) for b, part, why in payloads.failed_sizes(r) if part == "inference"]
        rows += [[str(b), why, "–", "–", "0"] for b, why in failed]
    if not rows:
        return lines + not_measured(
            "no inference throughput result (`mlb throughput --mode inference`)"
        )
    headers = ["batch size", "samples/s [95% CI]", "batch ms [95% CI]", "peak memory", "runs"]
    lines += table(headers, rows)
    lines += [
        "Timed with `torch.utils.benchmark.Timer.blocked_autorange` under "
        "`torch.inference_mode()`; one run is one block of calls, its time per call.",
        "",
    ]
    return lines


def _percentile_cells(x: np.ndarray, level: Mapping[str, Any]) -> list[str]:
    """Each percentile with its CI: as the latency runner stored it, else computed here."""
    cells = []
    for q in LATENCY_QS:
        stored = payloads.level_percentile(level, q)
        if stored is not None:
            cells.append(with_ci(*stored, ms))
            continue
        p = stats.percentile(x, q)
        lo, hi = stats.percentile_ci(x, q)
        cells.append(with_ci(p, lo, hi, ms))
    return cells


def section_latency(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[8], ""]
    results = ctx.of_kind("latency")
    gs = [(r, g) for r in results for g in all_groups([r], "latency") if g.total and g.total.values]
    if not gs:
        return lines + not_measured("no latency result (run `mlb latency`)")
    sla = payloads.sla_p99(results)
    rows = []
    for r, g in gs:
        x = finite(g.total.values)
        level = payloads.latency_level(r, g.prefix)
        p99 = stats.percentile(x, 99)
        verdict = "–" if sla is None else ("meets" if p99 <= sla else "**MISSES**")
        rows.append(
            [
                g.level or g.prefix,
                str(x.size),
                *_percentile_cells(x, level),
                ms(float(x.mean())),
                ms(float(x.max())),
                verdict,
            ]
        )
    headers = ["level", "n", *(f"p{q} ms [95% CI]" for q in LATENCY_QS), "mean ms", "max ms"]
    headers.append(f"SLA p99 ≤ {ms(sla)} ms" if sla is not None else "SLA")
    lines += table(headers, rows)
    lines += [
        "Level `cN`: closed loop with N clients; `rQ`: open loop at Q requests/s (latency from the "
        "scheduled send time). The first and last share of requests by send order are trimmed.",
        "",
    ]
    for r in results:
        lines += payloads.latency_extras(r)
    staged = [g for _, g in gs if g.stages]
    if staged:
        lines += ["Request stage split:", ""]
        lines += stage_table(staged, "level", lambda g: g.label)
    lines += figure(ctx, "latency", "latency histogram and CDF with the SLA line")
    return lines


def section_dataloader(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[9], ""]
    results = ctx.of_kind("dataloader")
    sweep = payloads.loader_sweep(results)
    if not sweep:
        return lines + not_measured("no dataloader result (run `mlb dataloader`)")
    rows = []
    for p in sweep:
        rows.append(
            [
                p.label,
                with_ci(p.median, p.low, p.high),
                *(
                    f"{num(p.split_ms[s])}" if s in p.split_ms else "–"
                    for s in ("read", "decode", "transform")
                ),
                f"{num(p.cpu_pct)}%" if p.cpu_pct is not None else "not measured",
                "**knee**" if p.is_knee else "",
            ]
        )
    headers = [
        "setting",
        "samples/s [95% CI]",
        "read ms",
        "decode ms",
        "transform ms",
        "CPU (% of usable)",
        "",
    ]
    lines += table(headers, rows)
    lines += payloads.loader_extras(results, sweep)
    lines += figure(ctx, "dataloader", "dataloader sweep with the knee")
    return lines


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
    lines += figure(ctx, "telemetry", "telemetry heat map over the run")
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
}


def section_signals(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[11], ""]
    lines += [
        "Each signal is computed from the measured data against the threshold shown; its "
        "definition is in `mlbaseline/report/signals.py`.",
        "",
    ]
    rows = []
    for s in ctx.signals:
        fmt = _SIGNAL_UNITS.get(s.name, num)
        value = fmt(s.value) if s.value is not None else "–"
        thr = (
            f"{_SIGNAL_COMPARATORS.get(s.name, '')} {fmt(s.threshold)}"
            if s.threshold is not None
            else "–"
        )
        state = "**FIRED**" if s.fired else s.state
        rows.append([s.title, s.subject or "–", state, value, thr, s.message])
    return lines + table(["signal", "on", "state", "value", "fires when", "detail"], rows)


def section_predictions(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[12], ""]
    lines += [
        "_These are **predictions**, computed only from the measured shares (Amdahl's law) and the "
        "measured worker sweep; they are not measurements. Re-measure after the change._",
        "",
    ]
    if not ctx.predictions:
        return lines + not_measured("no stage decomposition or worker sweep to predict from")
    for p in ctx.predictions:
        lines.append(f"- {p.text} _(from: {p.basis})_")
    return [*lines, ""]


def section_warnings(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[13], ""]
    items = []
    for r in ctx.results:
        items += [f"{r.kind}: {w.get('message', w.get('code', w))}" for w in r.warnings]
        if r.status != "complete":
            items.append(
                f"{r.kind}: status **{r.status}**" + (f" — {'; '.join(r.notes)}" if r.notes else "")
            )
        elif r.notes:
            items += [f"{r.kind}: {n}" for n in r.notes]
    if ctx.telemetry_note and ctx.telemetry is not None:
        items.append(ctx.telemetry_note)
    if not items:
        return [*lines, "None.", ""]
    return lines + [f"- {i}" for i in items] + [""]


def section_method(ctx: ReportContext) -> list[str]:
    return [
        SECTIONS[14],
        "",
        f"- Percentiles: numpy `{stats.PERCENTILE_METHOD}` method (Hyndman & Fan type 7); "
        "p90/p95/p99 "
        f"need {', '.join(str(v) for v in stats.PERCENTILE_FLOORS.values())} samples.",
        "- Confidence intervals: 95% percentile bootstrap, 2000 resamples, "
        f"seed {stats.DEFAULT_SEED}.",
        "- Location: median; stage shares are time-weighted (sum of stage / sum of total), so "
        "they "
        "add up to 100% with the residual.",
        "- Warm-up samples are excluded from every figure and table here (they are kept in the "
        "result files).",
        "- The report never measures: every number is recomputed from the raw values in the "
        "results.",
        "",
    ]


SECTION_FUNCTIONS = (
    section_summary,
    section_hardware,
    section_golden,
    section_env_check,
    section_subset,
    section_training,
    section_stages,
    section_inference,
    section_latency,
    section_dataloader,
    section_telemetry,
    section_signals,
    section_predictions,
    section_warnings,
    section_method,
)


def render_markdown(ctx: ReportContext) -> str:
    """The whole report, every section in order."""
    lines = [TITLE, ""]
    for fn in SECTION_FUNCTIONS:
        lines += fn(ctx)
    return "\n".join(lines).rstrip() + "\n"
