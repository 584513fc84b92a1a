"""The first screen of `baseline_report.md`: what was measured, the headline figures with their
CIs, what this baseline can see (its MDE) in a sentence, and the danger signals that fired,
each with what to do. Everything else (quiet signals, predictions, the method) is further down
or collapsed; a reader who stops after this screen has the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mlbaseline import stats
from mlbaseline.comparison.advice import ATTACH, CLI, repeats_advice, source_of
from mlbaseline.comparison.labels import names_of
from mlbaseline.formatting import milliseconds as ms
from mlbaseline.formatting import number as num
from mlbaseline.formatting import percent as pct
from mlbaseline.formatting import size, with_ci
from mlbaseline.report import payloads
from mlbaseline.report.context import ReportContext, table
from mlbaseline.report.data import Group, all_groups, config_hash, estimate, finite, timestamp
from mlbaseline.report.labels import series_labels
from mlbaseline.report.sections_ab import ab_only, measured_ab
from mlbaseline.report.sections_findings import signal_value
from mlbaseline.report.sections_memory import (
    capacity_of,
    column_header,
    device_of,
    energy_groups,
    group_name,
    joules,
    memory_groups,
    priced,
)
from mlbaseline.report.sections_performance import percentile_cell
from mlbaseline.report.signals import Signal
from mlbaseline.results import Result

HEADLINE = "## At a glance"
HEADLINE_QS = (50, 95)  # the latency percentiles a first screen shows (p99 is in the table)


def _workload(ctx: ReportContext) -> Mapping[str, Any]:
    """The measuring result's resolved workload (the throughput one, else any that has one)."""
    ordered = ctx.of_kind("throughput") + ctx.results + ctx.runs
    for r in ordered:
        w = (r.config or {}).get("workload")
        if isinstance(w, Mapping) and w:
            return w
    return {}


def _shape(w: Mapping[str, Any], dataset: Mapping[str, Any]) -> str:
    """'32×32 px images' or 'sequences of 16–512 tokens'."""
    if w.get("task") == "text":
        return f"sequences of {w.get('min_length', '?')}–{w.get('max_length', '?')} tokens"
    side = dataset.get("image_size") or w.get("image_size")
    return f"{side}×{side} px images" if side else "input size not recorded"


def _dataset(ctx: ReportContext, w: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """'synthetic data (256 samples, 10 classes)', a folder, or the subset that was used."""
    facts: Mapping[str, Any] = {}
    for r in ctx.of_kind("throughput"):
        data = payloads.throughput_data(r)
        if data is not None and data.dataset is not None:
            facts = data.dataset.model_dump()
            break
    name = w.get("dataset") or facts.get("type")
    where = w.get("data_dir") or facts.get("root")
    text = f"`{where}`" if where else f"{name} data" if name else "data not recorded"
    parts = [f"{facts['len']} samples"] if facts.get("len") else []
    if w.get("num_classes"):
        parts.append(f"{w['num_classes']} classes")
    if ctx.subset is not None and ctx.subset.samples:
        parts.append(f"a subset of {ctx.subset.samples}" + _kl(ctx))
    return text + (f" ({', '.join(parts)})" if parts else ""), facts


def _own_loop(ctx: ReportContext) -> Result | None:
    """The measuring result when the user's own script made it (the library API, the Lightning
    callback, `mlb attach`): its config's dataset section is a default, not what the script
    trained on, so the headline must not describe it."""
    for r in ctx.of_kind("throughput"):
        return None if source_of(r) == CLI else r
    return None


def _kl(ctx: ReportContext) -> str:
    """', mean KL 0.162 ≥ 0.05: fails': the subset's judgement against its full set."""
    facts = ctx.subset
    if facts is None or facts.kl_mean is None or facts.kl_threshold is None:
        return ""
    ok = facts.kl_mean < facts.kl_threshold
    sign, word = ("<", "passes") if ok else ("≥", "fails")
    return f", mean KL {num(facts.kl_mean)} {sign} {num(facts.kl_threshold)}: {word}"


def _batch_sizes(ctx: ReportContext) -> str:
    sizes = {g.batch_size for f in ("train", "infer") for g in all_groups(ctx.results, f)}
    known = sorted(b for b in sizes if b is not None)
    return ", ".join(map(str, known)) if known else "–"


def _device(ctx: ReportContext) -> str:
    for r in ctx.of_kind("throughput") + ctx.results:
        env = r.environment or {}
        blocking, info = env.get("blocking") or {}, env.get("informational") or {}
        device = r.data.get("device") or blocking.get("device")
        if device:
            hw = blocking.get("gpu_name") or info.get("cpu_model") or blocking.get("cpu_model")
            return f"{device}" + (f" ({hw})" if hw else "")
    return "device not recorded"


def _made_by(r: Result) -> str:
    if source_of(r) == ATTACH:  # a command of its own, not the library API
        return "`mlb attach`"
    if source_of(r) != CLI:
        model = str(((r.config or {}).get("workload") or {}).get("model") or "")
        if model.startswith("lightning:"):  # api.lightning names the LightningModule's class
            return f"the Lightning callback (`{model.removeprefix('lightning:')}`)"
        return f"the library API (`{model or r.data.get('name', '?')}`)"
    profile = (r.config or {}).get("profile")
    return f"`mlb {r.kind}" + (f" --profile {profile}`" if profile else "`")


def _command(ctx: ReportContext) -> str:
    """How the results were made: the mlb command(s) with their profile, or the library API;
    a `run` stands for its phases. (A result records its resolved config, not its command
    line: the config hash names what ran.)"""
    phases = {p.get("kind") for r in ctx.runs for p in r.data.get("phases") or []}
    made = [_made_by(r) for r in ctx.runs]
    made += [_made_by(r) for r in ctx.results if r.kind not in phases]
    return ", ".join(dict.fromkeys(made)) or "–"


def _hashes(ctx: ReportContext) -> str:
    """The config hash(es): one when every result ran one config, else each with its kinds."""
    kinds: dict[str, list[str]] = {}
    for r in ctx.results:
        if r.config:
            kinds.setdefault(config_hash(r)[:12], []).append(r.kind)
    if len(kinds) == 1:
        return f"`{next(iter(kinds))}`"
    return ", ".join(f"`{h}` ({', '.join(dict.fromkeys(k))})" for h, k in kinds.items()) or "–"


def _measured(ctx: ReportContext) -> tuple[str, str]:
    """(model or script, 'DATA, SHAPE, batch sizes …, on DEVICE'): what was measured."""
    w = _workload(ctx)
    data, facts = _dataset(ctx, w)
    model = w.get("model") or "model not recorded"
    shape = _shape(w, facts)
    own = _own_loop(ctx)
    if own is not None:  # the user's script drew its own data: the config's dataset is not it
        data, shape = "the script's own data", "input size not recorded"
        attach = (own.data.get("attach") or {}) if source_of(own) == ATTACH else {}
        model = str(attach.get("script") or model)
    return str(model), f"{data}, {shape}, batch sizes {_batch_sizes(ctx)}, on {_device(ctx)}"


def workload_text(results: Sequence[Result]) -> str:
    """The same as the report's "Measured" line, as plain text for a terminal: `mlb
    throughput`'s and `mlb attach`'s summary and `mlb compare`'s headline name what ran."""
    model, rest = _measured(ReportContext(list(results), [None] * len(results)))
    return f"{model} on {rest}"


def measured_lines(ctx: ReportContext) -> list[str]:
    """What was measured, in three lines a reader can check against what they meant to run."""
    model, rest = _measured(ctx)
    times = [timestamp(r.created_at) for r in ctx.results if r.created_at]
    when = f"{min(times)} – {max(times)}" if len(set(times)) > 1 else (times[0] if times else "–")
    named = names_of([r.config for r in ctx.results])  # --name / --tag
    measured = measured_ab(ctx) or f"- **Measured:** `{model}` on {rest}"
    return [
        *([f"- **Run:** `{named}`"] if named else []),
        measured,
        f"- **Made by:** {_command(ctx)}; config hash {_hashes(ctx)}, as `mlb history show` "
        "gives it (the resolved config is in each result file)",
        f"- **When:** {when}",
        "",
    ]


def _file_label(ctx: ReportContext, r: Result, kind: str) -> str:
    """' (LABEL)' when several results of the kind are shown side by side, else '': the run's
    --name, else the shortest path tail that tells the files apart (report.labels, as the
    tables and figures label them)."""
    pairs = [(x, s) for x, s in zip(ctx.results, ctx.sources, strict=True) if x.kind == kind]
    labels = series_labels([x for x, _ in pairs], [s for _, s in pairs])
    # by identity: two files with the same content are equal Results, yet two rows
    label = next((lab for (x, _), lab in zip(pairs, labels, strict=True) if x is r), "")
    return f" ({label})" if label else ""


def _rate_and_time(g: Group) -> tuple[str, str]:
    step = estimate(g.total.values) if g.total else None
    rate = estimate(g.rate.values) if g.rate else None
    time_cell = f"{with_ci(step.median, step.low, step.high, ms)} ms" if step else "–"
    rate_cell = with_ci(rate.median, rate.low, rate.high) if rate else "–"
    return time_cell, rate_cell


def figure_rows(ctx: ReportContext) -> list[list[str]]:
    """One row per training / inference batch size, latency level and the loader's knee."""
    rows = []
    for family, what in (("train", "training step"), ("infer", "inference batch")):
        for r in ctx.of_kind("throughput"):
            for g in all_groups([r], family):
                label = f"{what}, batch {g.label}{_file_label(ctx, r, 'throughput')}"
                rows.append([label, *_rate_and_time(g)])
    for r in ctx.of_kind("latency"):
        for g in all_groups([r], "latency"):
            if g.total is None or not g.total.values:
                continue
            x, level = finite(g.total.values), payloads.latency_level(r, g.prefix)
            where = f" ({g.level})" if g.level else ""
            for q in HEADLINE_QS:
                cell = f"{percentile_cell(x, level, q)} ms"
                rows.append([f"latency p{q}{where}{_file_label(ctx, r, 'latency')}", cell, "–"])
    knee = next((p for p in payloads.loader_sweep(ctx.of_kind("dataloader")) if p.is_knee), None)
    if knee is not None:
        what = f"{knee.label} workers" if not knee.variant else f"setting {knee.label}"
        rows.append([f"data loading at the knee ({what})", "–",
                     with_ci(knee.median, knee.low, knee.high)])  # fmt: skip
    return rows


def resource_rows(ctx: ReportContext) -> list[list[str]]:
    """Peak memory per training step and, where measured, energy per step and sample, and where
    a price is set, cost per 1k samples and per epoch: one row per batch size. Nothing for what
    was not measured or set (the section says why, further down)."""
    rows = []
    for g in memory_groups(ctx):
        peak = g.median("peak")
        if g.family != "train" or peak is None:
            continue
        kind = "cuda" if device_of(g.result).startswith("cuda") else "cpu"
        cell = f"{size(peak)} {column_header('peak', kind)}"
        cap = capacity_of(g.result)
        cell += f", {pct(peak / cap.bytes)} of the {cap.label}" if cap is not None else ""
        rows.append([f"peak memory, {g.name.replace('training', 'training step')}", cell])
    for e in energy_groups(ctx):
        if e.per_step is not None or e.per_sample is not None:
            cell = f"{joules(e.per_step)} per step; {joules(e.per_sample)} per sample"
            rows.append([f"energy, {e.name.replace('training', 'training step')}", cell])
    for p in priced(ctx):  # training: per 1k samples and per epoch (inference: the section)
        for row in (x for x in p.figures["rows"] if x["group"].startswith("train.")):
            cell = f"{p.money(row['per_1k_samples'])} per 1k samples"
            if row["per_epoch"] is not None:
                cell += f"; {p.money(row['per_epoch'])} per epoch ({p.figures['epoch']})"
            what = group_name(row["group"], p.label).replace("training", "training step")
            rows.append([f"cost at {p.rate}, {what}", cell])
    return rows


def mde_sentence(ctx: ReportContext) -> str:
    """What a compare against this baseline could see: the step's MDE from the noise between
    processes (stats.noise), or why it cannot be known (one process), in the source's terms."""
    results = ctx.of_kind("throughput")
    if not results:
        return (
            "No training throughput result: this report cannot say how small a change a "
            "compare of two runs like it could see."
        )
    seen, power = [], None
    for r in results:  # each file's own noise: two files' records share metric names
        noise = payloads.noise_records([r])
        label = _file_label(ctx, r, "throughput")
        for g in all_groups([r], "train"):
            rec = noise.get(f"{g.prefix}.step")
            if rec is not None and rec.mde is not None:
                where = f"batch {g.label}{label}"
                seen.append(f"{pct(rec.mde)} at {where} ({rec.processes} processes)")
                power = rec.power
    if seen:
        return (
            "**What it can see:** a compare of two runs like this one can tell a change in the "
            f"training step of {', '.join(seen)} or more from noise; smaller changes it "
            f"cannot see (the MDE, at power {pct(power, 0)}; per stage under Training stage "
            "breakdown)."
        )
    r = results[0]
    return (
        "**What it can see:** unknown — each batch size ran in one process, so the noise "
        "between processes (most of the noise on a shared machine) was not measured and a "
        f"compare could give no verdict ({repeats_advice(source_of(r), _need(r))})."
    )


def _need(result: Result) -> int:
    """The processes a side a comparison can judge (as comparison.judge advises)."""
    compare = (result.config or {}).get("compare") or {}
    return max(int(compare.get("min_replicates") or 0), stats.decision.min_decidable())


def fired_groups(found: Sequence[Signal]) -> list[tuple[str, str, str]]:
    """Per fired signal kind: its title, where it fired (subject and value, each), and what
    to do; the headline's lines and the terminal's (`mlb report`) are made from these."""
    groups: dict[str, list[Signal]] = {}
    for s in found:
        if s.fired:
            groups.setdefault(s.name, []).append(s)
    out = []
    for group in groups.values():
        where = ", ".join(f"{s.subject or 'run'} {signal_value(s)}" for s in group)
        out.append((group[0].title, where, group[0].action))
    return out


def fired_lines(found: Sequence[Signal]) -> list[str]:
    """One line per fired signal kind: its title, where it fired (value), and what to do."""
    groups = fired_groups(found)
    if not groups:
        checked = len(found)
        return [f"**Danger signals:** none of the {checked} checks fired.", ""]
    lines = [f"**Danger signals that fired ({len(groups)}):**", ""]
    lines += [f"- **{title}** ({where}): {action}." for title, where, action in groups]
    return [*lines, ""]


def section_headline(ctx: ReportContext) -> list[str]:
    lines = [HEADLINE, "", *measured_lines(ctx)]
    rows = figure_rows(ctx)
    verdicts_only = ab_only(ctx)  # A/B results: their verdicts come next
    if rows:
        lines += table(["", "time, median [95% CI]", "samples/s [95% CI]"], rows)
    elif not verdicts_only:
        lines += ["No throughput, latency or data-loading figures in these results.", ""]
    resources = resource_rows(ctx)
    if resources:
        lines += table(["", "median [95% CI]"], resources)
    if not verdicts_only:  # an A/B result gives each stage's MDE in its own table
        lines += [mde_sentence(ctx), ""]
    lines += fired_lines(ctx.signals)
    return lines
