"""The report's memory and energy: what the results hold of them (read here once, for the
section, the headline and the memory figure) and the section `## Memory and energy`.

Memory metrics (issue 28) carry `meta.role = "memory"`, their group (`train.bs16`), what they
are (`meta.memory`: peak, reserved, held, workers_peak) and, when held by a stage, the stage.
Energy metrics carry `meta.role = "energy"` (`…energy_per_step`, `…energy_per_sample`, J).
A result measured before these existed simply has none: the section says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlbaseline.comparison.cost import cost_figures, price_for
from mlbaseline.formatting import number as num
from mlbaseline.formatting import size, with_ci
from mlbaseline.report.context import ReportContext, figure, not_measured, table
from mlbaseline.report.data import estimate, groups
from mlbaseline.report.labels import series_labels
from mlbaseline.results import Metric, Result

MEMORY_HEADING = "## Memory and energy"
HELD = "held"  # meta.memory of a stage's held bytes; its column key is "held.<stage>"
# the columns of the memory table, in this order (held stages go between reserved and workers)
LEADING, TRAILING = ("peak", "reserved"), ("workers_peak",)
FAMILY_WORDS = {"train": "training", "infer": "inference", "latency": "latency"}


def batch_of(prefix: str) -> int | None:
    """16 of 'train.bs16' (or 'infer.bs16.ddp'); None for a group without a batch size."""
    head = prefix.split(".")
    ok = len(head) > 1 and head[1].startswith("bs") and head[1][2:].isdigit()
    return int(head[1][2:]) if ok else None


def group_name(prefix: str, label: str = "") -> str:
    """'training, batch 16 (a/throughput.json)', 'latency'."""
    word = FAMILY_WORDS.get(prefix.split(".", 1)[0], prefix)
    batch = batch_of(prefix)
    text = f"{word}, batch {batch}" if batch is not None else word
    return f"{text} ({label})" if label else text


@dataclass
class MemoryGroup:
    """The memory metrics of one group of one result file: `metrics` keyed "peak", "reserved",
    "workers_peak" or "held.<stage>" (stages in the step's order)."""

    result: Result
    prefix: str
    label: str  # the file's label ("" when the report shows one file)
    metrics: dict[str, Metric] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.prefix.split(".", 1)[0]

    @property
    def batch_size(self) -> int | None:
        return batch_of(self.prefix)

    @property
    def name(self) -> str:
        return group_name(self.prefix, self.label)

    @property
    def peak_kind(self) -> str:
        """How the peak was read (`meta.kind`: cuda_max_allocated, cpu_rss_hwm, …), or ""."""
        peak = self.metrics.get("peak")
        return str((peak.meta or {}).get("kind") or "") if peak is not None else ""

    def median(self, key: str) -> float | None:
        m = self.metrics.get(key)
        x = [v for v in m.values if np.isfinite(v)] if m is not None else []
        return float(np.median(x)) if x else None


def _memory_key(metric: Metric) -> str | None:
    """The column a memory metric fills, or None for any other metric."""
    meta = metric.meta or {}
    if meta.get("role") != "memory" and ".mem." not in metric.name:
        return None
    what = str(meta.get("memory") or metric.name.rsplit(".", 1)[-1])
    if what == HELD:
        return f"{HELD}.{meta.get('stage') or metric.name.rsplit('.', 1)[-1]}"
    if what in (*LEADING, *TRAILING):
        return what
    return f"{HELD}.{what}"  # `….mem.forward` without a meta: a stage's held bytes


def _group_of(metric: Metric) -> str:
    group = (metric.meta or {}).get("group")
    return str(group) if group else metric.name.split(".mem.", 1)[0]


def _ordered(keys: Sequence[str], stages: Sequence[str]) -> list[str]:
    """peak, reserved, held per stage in the step's order (others after), workers' peak."""
    rank = {f"{HELD}.{s}": i for i, s in enumerate(stages)}
    held = sorted((k for k in keys if k.startswith(f"{HELD}.")),
                  key=lambda k: (rank.get(k, len(rank)), list(keys).index(k)))  # fmt: skip
    return [k for k in LEADING if k in keys] + held + [k for k in TRAILING if k in keys]


def result_memory(result: Result, label: str = "") -> list[MemoryGroup]:
    """The memory groups of one result, in measurement order."""
    found: dict[str, MemoryGroup] = {}
    for metric in result.measurements.values():
        key = _memory_key(metric)
        if key is not None:
            prefix = _group_of(metric)
            found.setdefault(prefix, MemoryGroup(result, prefix, label)).metrics[key] = metric
    timed = groups(result)
    for g in found.values():
        total = timed[g.prefix].total if g.prefix in timed else None
        stages = list((total.meta or {}).get("stages") or []) if total is not None else []
        g.metrics = {k: g.metrics[k] for k in _ordered(list(g.metrics), stages)}
    return list(found.values())


def kind_labels(ctx: ReportContext, holds: Callable[[Result], bool]) -> list[tuple[Result, str]]:
    """The results that hold something, each with the label that tells it apart from the other
    results of its kind (report.labels): a run folder's throughput and latency files need none,
    two throughput files each get theirs."""
    pairs = [(r, s) for r, s in zip(ctx.results, ctx.sources, strict=True) if holds(r)]
    label: dict[int, str] = {}
    for kind in dict.fromkeys(r.kind for r, _ in pairs):
        same = [(r, s) for r, s in pairs if r.kind == kind]
        names = series_labels([r for r, _ in same], [s for _, s in same])
        label.update({id(r): n for (r, _), n in zip(same, names, strict=True)})
    return [(r, label[id(r)]) for r, _ in pairs]


def memory_groups(ctx: ReportContext) -> list[MemoryGroup]:
    """Every result's memory groups, in the report's order of results."""
    return [g for r, lab in kind_labels(ctx, lambda r: bool(result_memory(r)))
            for g in result_memory(r, lab)]  # fmt: skip


# ---------------------------------------------------------------- device and capacity


def device_of(result: Result) -> str:
    blocking = (result.environment or {}).get("blocking") or {}
    return str(result.data.get("device") or blocking.get("device") or "")


@dataclass(frozen=True)
class Capacity:
    """What the device can hold: a GPU's total memory, or on CPU the host's RAM (the cgroup's
    limit when it is lower: the process can use no more)."""

    bytes: float
    label: str  # "GPU total memory (NVIDIA H100 80GB HBM3)", "host RAM", "cgroup memory limit"

    @property
    def text(self) -> str:
        return f"{self.label}, {size(self.bytes)}"


def _gpu_capacity(device: str, info: Mapping[str, Any]) -> Capacity | None:
    ordinal = device.partition(":")[2]
    index = int(ordinal) if ordinal.isdigit() else 0  # "cuda" alone is the current device, 0
    gpus = [g for g in info.get("gpus") or [] if isinstance(g, Mapping)]
    gpu = next((g for g in gpus if g.get("index") == index), gpus[0] if gpus else None)
    total = gpu.get("memory_total") if gpu is not None else None
    if not total:
        return None  # never the host's RAM in its place: that is not what a GPU can hold
    name = gpu.get("name") if gpu is not None else None
    return Capacity(float(total), "GPU total memory" + (f" ({name})" if name else ""))


def capacity_of(result: Result) -> Capacity | None:
    """The device's capacity from the result's environment fingerprint (informational half:
    `gpus[].memory_total`, `ram_total_bytes`, `cgroup_memory_limit_bytes`), or None."""
    info = (result.environment or {}).get("informational") or {}
    device = device_of(result)
    if device.startswith("cuda"):
        return _gpu_capacity(device, info)
    ram, limit = info.get("ram_total_bytes"), info.get("cgroup_memory_limit_bytes")
    if limit and (not ram or limit < ram):
        return Capacity(float(limit), "cgroup memory limit")
    return Capacity(float(ram), "host RAM") if ram else None


def capacities(results: Sequence[Result]) -> list[Capacity]:
    """The distinct capacities of these results' devices, in order."""
    out: list[Capacity] = []
    for r in results:
        c = capacity_of(r)
        if c is not None and c not in out:
            out.append(c)
    return out


# ---------------------------------------------------------------- energy


@dataclass
class EnergyGroup:
    """The energy metrics of one group of one result file (J per step and per sample)."""

    result: Result
    prefix: str
    label: str
    per_step: Metric | None = None
    per_sample: Metric | None = None

    def flagged(self) -> dict[str, int]:
        """The windows of this batch size that gave no figure, by flag (`data["energy"]`):
        too short for the counter's update period, no counter update, under the minimum."""
        entry = (energy_block(self.result).get("batch_sizes") or {}).get(str(batch_of(self.prefix)))
        flags = [str(w.get("flag")) for w in (entry or {}).get("windows") or [] if w.get("flag")]
        return {f: flags.count(f) for f in dict.fromkeys(flags)}

    @property
    def name(self) -> str:
        return group_name(self.prefix, self.label)


def result_energy(result: Result, label: str = "") -> list[EnergyGroup]:
    found: dict[str, EnergyGroup] = {}
    for metric in result.measurements.values():
        last = metric.name.rsplit(".", 1)[-1]
        if (metric.meta or {}).get("role") != "energy" and not last.startswith("energy_per_"):
            continue
        prefix = str((metric.meta or {}).get("group") or metric.name.rsplit(".", 1)[0])
        g = found.setdefault(prefix, EnergyGroup(result, prefix, label))
        if last == "energy_per_sample":
            g.per_sample = metric
        else:
            g.per_step = metric
    return list(found.values())


def energy_groups(ctx: ReportContext) -> list[EnergyGroup]:
    return [g for r, lab in kind_labels(ctx, lambda r: bool(result_energy(r)))
            for g in result_energy(r, lab)]  # fmt: skip


def joules(metric: Metric | None) -> str:
    """'12.3 [12.1, 12.5] J': the median with its bootstrap CI (as the headline writes ms)."""
    e = estimate(metric.values) if metric is not None else None
    return f"{with_ci(e.median, e.low, e.high)} J" if e is not None else "–"


def energy_block(result: Result) -> Mapping[str, Any]:
    """The result's `data["energy"]`: how energy was measured, or why not ({} when absent)."""
    block = result.data.get("energy") if isinstance(result.data, Mapping) else None
    return block if isinstance(block, Mapping) else {}


def energy_not_measured(results: Sequence[Result]) -> list[str]:
    """Why energy is missing: a result's reason for measuring none, or a batch size's reason
    for giving no figure ('training, batch 32: no window gave a figure …'), distinct."""
    reasons = []
    for r in results:
        block = energy_block(r)
        if block.get("measured") is False:
            reasons.append(str(block.get("reason") or "no reason recorded"))
            continue
        for key, entry in (block.get("batch_sizes") or {}).items():
            if isinstance(entry, Mapping) and entry.get("reason"):
                reasons.append(f"{group_name(f'train.bs{key}')}: {entry['reason']}")
        if not block.get("batch_sizes") and block.get("reason"):
            reasons.append(str(block["reason"]))
    return list(dict.fromkeys(reasons))


# ---------------------------------------------------------------- cost


@dataclass(frozen=True)
class Priced:
    """One throughput result's cost figures (comparison.cost.cost_figures) and its label."""

    label: str
    figures: Mapping[str, Any]  # per_hour, currency, epoch, rows: group, per_1k_samples, …
    source: str  # where the price came from: "cost.per_hour", "cost.per_hour_by_gpu['H100']"

    def money(self, x: Mapping[str, Any] | None) -> str:
        """'0.0123 [0.0110, 0.0140] USD', or '–'."""
        if not x or x.get("value") is None:
            return "–"
        return f"{with_ci(x['value'], x['ci_low'], x['ci_high'])} {self.figures['currency']}"

    @property
    def rate(self) -> str:
        """'2.50 USD/h'."""
        return f"{num(self.figures['per_hour'], 3)} {self.figures['currency']}/h"

    @property
    def price(self) -> str:
        """'2.50 USD/h (cost.per_hour)': the rate and where it was set."""
        return f"{self.rate} ({self.source})"


def priced(ctx: ReportContext) -> list[Priced]:
    """The throughput results a price applies to (each its own config's `cost` section, the
    price its run was configured with), with their cost figures; none is ever invented."""
    out = []
    for r, label in kind_labels(ctx, lambda r: r.kind == "throughput"):
        price = price_for(r, (r.config or {}).get("cost"))
        figures = cost_figures(r, price[0], price[1]) if price is not None else None
        if price is not None and figures is not None:
            out.append(Priced(label, figures, price[2]))
    return out


def _cost_part(ctx: ReportContext) -> list[str]:
    found = priced(ctx)
    if not found:
        return ["**Cost:** not shown: no price set (`cost.per_hour`), and none is invented.", ""]
    lines = []
    for p in found:
        rows = [[group_name(row["group"], p.label), p.money(row["per_1k_samples"]),
                 p.money(row["per_epoch"])] for row in p.figures["rows"]]  # fmt: skip
        epoch = f"per epoch ({p.figures['epoch']}) [95% CI]"
        lines += [f"**Cost** at {p.price}:", ""]
        lines += table(["cost", "per 1k samples [95% CI]", epoch], rows)
    return [*lines, f"Cost = {found[0].figures['method']}.", ""]


# ---------------------------------------------------------------- the section

_PEAK_HEADER = {"cuda": "peak allocated", "cpu": "peak RSS"}
_METHOD = {
    "cuda": (
        "CUDA: peak = `torch.cuda.max_memory_allocated` over each step (its peak reset before "
        "the step), reserved = the caching allocator's peak reserved bytes; held after a stage "
        "= `memory_allocated` at its end minus at its start (after forward: the activations "
        "kept for backward)."
    ),
    "cpu": (
        "CPU: peak = the process's peak RSS over each step (VmHWM, reset through `clear_refs` "
        "where the kernel allows); held after a stage = the bytes glibc's malloc has handed out "
        "(`mallinfo2`, where tensors live; RSS where malloc is not glibc's) at its end minus at "
        "its start, 0 where it freed more; workers' peak = the DataLoader workers' peak RSS, "
        "summed. Reserved memory exists on CUDA only."
    ),
}


def _kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def column_header(key: str, kind: str | None) -> str:
    if key == "peak":
        return _PEAK_HEADER.get(kind or "", "peak")
    if key == "reserved":
        return "peak reserved (CUDA)"
    if key == "workers_peak":
        return "workers' peak"
    stage = key.removeprefix(f"{HELD}.")
    return "held after forward (activations)" if stage == "forward" else (
        f"held after {stage.replace('_', ' ')}")  # fmt: skip


def memory_table(gs: Sequence[MemoryGroup]) -> list[str]:
    """Rows: a group (training / inference batch size, latency) of a file; columns: peak,
    reserved, held after each stage, workers' peak; cells: medians over the measured values."""
    keys: list[str] = []
    for g in gs:
        keys += [k for k in g.metrics if k not in keys]
    stages = [k for g in gs for k in g.metrics if k.startswith(f"{HELD}.")]
    keys = _ordered(keys, [k.removeprefix(f"{HELD}.") for k in dict.fromkeys(stages)])
    kinds = {_kind(device_of(g.result)) for g in gs}
    kind = next(iter(kinds)) if len(kinds) == 1 else None
    rows = [[g.name, *(size(g.median(k)) for k in keys)] for g in gs]
    return table(["", *(column_header(k, kind) for k in keys)], rows)


def _memory_part(ctx: ReportContext) -> list[str]:
    gs = memory_groups(ctx)
    if not gs:
        return not_measured(
            "no memory metrics in these results (measured before memory was a metric)"
        )
    lines = memory_table(gs)
    kinds = dict.fromkeys(_kind(device_of(g.result)) for g in gs)
    lines += [
        "Medians over the measured steps (inference: batches; latency: the phase). "
        + " ".join(_METHOD[k] for k in kinds),
        "",
    ]
    sampled = [g.name for g in gs if g.peak_kind == "cpu_rss_sampled"]
    if sampled:
        lines += [
            f"The peak of {', '.join(sampled)} is the highest RSS read at the stage edges (the "
            "kernel refused the VmHWM reset): a peak inside a stage can be missed.",
            "",
        ]
    caps = capacities(list({id(g.result): g.result for g in gs}.values()))
    where = "; ".join(c.text for c in caps) or "not recorded in the results' environment"
    lines += [f"Device capacity (the figure's line): {where}.", ""]
    return lines + figure(ctx, "memory", "peak memory per batch size with the device's capacity")


def _windows(g: EnergyGroup) -> str:
    """'5', or '5 (2 more flagged: short_window)': the windows that gave a figure, and those
    that could not."""
    n = len(g.per_step.values) if g.per_step is not None else 0
    flagged = g.flagged()
    more = ", ".join(f"{k} {f}" for f, k in flagged.items())
    return f"{n} ({sum(flagged.values())} more flagged: {more})" if flagged else str(n)


def _energy_part(ctx: ReportContext) -> list[str]:
    gs = energy_groups(ctx)
    reasons = energy_not_measured(ctx.results)
    if not gs:
        why = "; ".join(reasons) if reasons else "no energy metrics in these results"
        return [f"**Energy:** not measured ({why}).", ""]
    rows = [[g.name, joules(g.per_step), joules(g.per_sample), _windows(g)] for g in gs]
    headers = ["energy", "per step, median [95% CI]", "per sample [95% CI]", "windows"]
    note = (
        "Each value is one measured window of at least 1 s: the energy the device used in it "
        "(NVML's total-energy counter, or power polling integrated where there is none; RAPL "
        "on CPU) over the steps in it. A window shorter than the counter's update period is "
        "flagged and gives no figure, never 0 J."
    )
    lines = [*table(headers, rows), note, ""]
    return lines + ([f"Not measured: {'; '.join(reasons)}.", ""] if reasons else [])


def section_memory(ctx: ReportContext) -> list[str]:
    """`## Memory and energy`: the memory table and figure, energy, then cost (when set)."""
    return [MEMORY_HEADING, "", *_memory_part(ctx), *_energy_part(ctx), *_cost_part(ctx)]


__all__ = [
    "MEMORY_HEADING",
    "Capacity",
    "EnergyGroup",
    "MemoryGroup",
    "Priced",
    "capacities",
    "capacity_of",
    "energy_groups",
    "memory_groups",
    "priced",
    "section_memory",
]
