"""The sections of measurements: training throughput and stages, inference, latency, data
loading."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlbaseline import stats
from mlbaseline.formatting import milliseconds as ms
from mlbaseline.formatting import number as num
from mlbaseline.formatting import percent as pct
from mlbaseline.formatting import size, with_ci
from mlbaseline.report import payloads
from mlbaseline.report.context import (
    LATENCY_QS,
    SECTIONS,
    ReportContext,
    details,
    figure,
    not_measured,
    table,
)
from mlbaseline.report.data import (
    Group,
    all_groups,
    estimate,
    finite,
    stage_shares,
)
from mlbaseline.report.labels import series_labels
from mlbaseline.results import Result


def _train_row(ctx: ReportContext, result: Result, g: Group) -> list[str]:
    rate = estimate(g.rate.values) if g.rate else None
    step = estimate(g.total.values) if g.total else None
    facts = payloads.batch_facts(result, g)
    active = payloads.kernel_active(ctx.telemetry, result, g)
    return [
        g.label,
        with_ci(rate.median, rate.low, rate.high) if rate else "–",
        with_ci(step.median, step.low, step.high, ms) if step else "–",
        active,
        peak_cell(result, g, facts),
        str(step.n) if step else "–",
        facts.stop_reason or "–",
    ]


# Below this, CPU RSS growth is page-level noise, not a workload's memory: a process that
# already holds its model and buffers (inference measured after training, in one process)
# grows by a few pages, e.g. "4.00 KiB", which reads as an absurd peak.
RSS_NOISE_BYTES = 1 << 20


def memory_cell(facts: payloads.BatchFacts) -> str:
    """The memory column: CUDA's allocated peak, or on CPU the process's RSS growth (which is
    not a peak of the workload: memory it held before the block does not count)."""
    peak, kind = facts.peak_memory, facts.memory_kind or ""
    if peak is None:
        return "not measured"
    if kind.startswith("cuda"):
        return f"{size(peak)} (CUDA allocated)"
    if "rss" in kind:
        if peak < RSS_NOISE_BYTES:
            return f"< {size(RSS_NOISE_BYTES, '.0f')} RSS growth (memory already held)"
        return f"{size(peak)} RSS growth"
    return size(peak) + (f" ({kind})" if kind else "")


def peak_cell(result: Result, g: Group, facts: payloads.BatchFacts) -> str:
    """The memory column: the median of the step's measured peak (`mem.peak`, issue 28: the
    peak itself, per step) where the result has it, else what older results recorded."""
    peak = result.measurements.get(f"{g.prefix}.mem.peak")
    x = [v for v in peak.values if np.isfinite(v)] if peak is not None else []
    if not x:
        return memory_cell(facts)
    kind = str((peak.meta or {}).get("kind") or "") if peak is not None else ""
    device = str(result.data.get("device") or "")
    what = "CUDA allocated" if kind.startswith("cuda") or device.startswith("cuda") else "RSS"
    return f"{size(float(np.median(x)))} peak ({what})"


def _labelled_throughput(ctx: ReportContext) -> list[tuple[Result, str]]:
    """The throughput results, each with the label that tells it apart from the others ("" for
    one alone; report.labels): two files' rows of one batch size are not both "16"."""
    tput = [(r, src) for r, src in zip(ctx.results, ctx.sources, strict=True)
            if r.kind == "throughput"]  # fmt: skip
    labels = series_labels([r for r, _ in tput], [src for _, src in tput])
    return [(r, label) for (r, _), label in zip(tput, labels, strict=True)]


def _file_label(text: str, label: str) -> str:
    return f"{text} ({label})" if label else text


def section_training(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[5], ""]
    rows = [
        [_file_label(g.label, label), *_train_row(ctx, r, g)[1:]]
        for r, label in _labelled_throughput(ctx)
        for g in all_groups([r], "train")
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
        "memory",
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
    tput = _labelled_throughput(ctx)
    named = [(g, _file_label(g.label, label)) for r, label in tput
             for g in all_groups([r], "train") if g.stages]  # fmt: skip
    gs = [g for g, _ in named]
    if not gs:
        return lines + not_measured("no stage-decomposed training step")
    text = {id(g): t for g, t in named}
    lines += stage_table(gs, "batch size", lambda g: text[id(g)])
    lines += noise_table([r for r, _ in tput], gs, [label for _, label in tput])
    lines += figure(ctx, "stages", "stage breakdown per batch size")
    return lines


def _noise_rows(
    noise: Mapping[str, Any], gs: Sequence[Group], names: Sequence[str], label: str
) -> list[list[str]]:
    rows = []
    for g in gs:
        step = noise.get(f"{g.prefix}.step")
        if step is None:
            continue
        cells = [pct(noise[f"{g.prefix}.{s}"].mde) if f"{g.prefix}.{s}" in noise else "–"
                 for s in names]  # fmt: skip
        sit = step.sittings
        across = [f"{pct(sit.between_sd)} ({sit.sittings})", pct(sit.mde_across_sittings)
                  ] if sit is not None else ["–", "–"]  # fmt: skip
        rows.append([_file_label(g.label, label), str(step.processes), *cells, pct(step.mde),
                     pct(step.between_share), pct(step.within_sd),
                     pct(step.between_sd), *across])  # fmt: skip
    return rows


def noise_table(
    results: Sequence[Result], gs: Sequence[Group], labels: Sequence[str] = ()
) -> list[str]:
    """Per group with fresh-process replicates (`data["noise"]`, stats.noise): the MDE of a
    compare of two such runs per stage and for the step, and where the step's noise lies. One
    row per file and group (`labels`: report.labels.series_labels), each from its own file's
    records: a second file's `train.bs16` never replaces the first's."""
    names = list(dict.fromkeys(s for g in gs for s in g.stages))
    wanted = {g.prefix for g in gs}
    rows = []
    for i, r in enumerate(results):
        noise = payloads.noise_records([r])
        label = labels[i] if i < len(labels) else ""
        rows += _noise_rows(noise, [g for g in all_groups([r], "train") if g.prefix in wanted],
                            names, label)  # fmt: skip
    if not rows:
        return []
    headers = ["batch size", "processes", *(s.replace("_", " ") for s in names), "step",
               "between share", "within sd", "between sd", "between sittings sd (sittings)",
               "step MDE across sittings"]  # fmt: skip
    intro = (
        "Minimum detectable effect (MDE) of a compare of two runs like this one, per stage: "
        "changes smaller than this cannot be seen (at `compare.alpha`/k, Holm over the k metrics "
        "judged, power 80%, from the spread of the per-process medians). Noise of the step: "
        "share of its variance between processes, and the within/between-process standard "
        "deviations (log scale ≈ relative). Between sittings: from the history's earlier "
        "results of the same config and commit, how much whole invocations differ beyond their "
        "processes, and the MDE of a compare against another sitting (– without 3 sittings in "
        "the history)."
    )
    # the step's MDE leads the report (headline); this per-stage table is for those who dig
    return details("Minimum detectable effect per stage", [intro, "", *table(headers, rows)])


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
    for r, label in _labelled_throughput(ctx):
        for g in all_groups([r], "infer"):
            rate = estimate(g.rate.values) if g.rate else None
            batch = estimate(g.total.values) if g.total else None
            memory = peak_cell(r, g, payloads.batch_facts(r, g))
            rows.append(
                [
                    _file_label(g.label, label),
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
    headers = ["batch size", "samples/s [95% CI]", "batch ms [95% CI]", "memory", "runs"]
    lines += table(headers, rows)
    lines += [
        "Timed with `torch.utils.benchmark.Timer.blocked_autorange` under "
        "`torch.inference_mode()`; one run is one block of calls, its time per call.",
        "",
    ]
    return lines


def percentile_cell(x: np.ndarray, level: Mapping[str, Any], q: float) -> str:
    """A latency percentile with its CI, in ms: as the latency runner stored it, else computed
    here from the samples."""
    stored = payloads.level_percentile(level, q)
    if stored is not None:
        return with_ci(*stored, ms)
    lo, hi = stats.percentile_ci(x, q)
    return with_ci(stats.percentile(x, q), lo, hi, ms)


def _percentile_cells(x: np.ndarray, level: Mapping[str, Any]) -> list[str]:
    return [percentile_cell(x, level, q) for q in LATENCY_QS]


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
