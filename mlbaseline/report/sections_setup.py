"""The sections about the setup: summary, hardware and software, golden parameters,
environment checks and the data subset."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlbaseline.formatting import number as num
from mlbaseline.formatting import percent as pct
from mlbaseline.formatting import size
from mlbaseline.report.checks import check_rows
from mlbaseline.report.context import (
    SECTIONS,
    ReportContext,
    figure,
    not_measured,
    opt,
    table,
)
from mlbaseline.report.data import timestamp


def section_summary(ctx: ReportContext) -> list[str]:
    """The result files this report read (the fired signals lead the report, in the headline)."""
    lines = [SECTIONS[0], ""]
    rows = []
    for r, src in zip(ctx.results, ctx.sources, strict=True):
        name = src.name if src else "(in memory)"
        rows.append([r.kind, name, r.status, r.verdict.status, timestamp(r.created_at)])
    return lines + table(["result", "file", "status", "verdict", "created"], rows)


def _environment(ctx: ReportContext) -> dict[str, Any]:
    """The fingerprint to show: the env-check's if present, else the first result's."""
    ordered = ctx.of_kind("env-check") + [r for r in ctx.results if r.kind != "env-check"]
    for r in ordered:
        env = r.environment or {}
        if env.get("blocking") or env.get("informational"):
            return env
    return {}


def _measuring_info(ctx: ReportContext, fallback: Mapping[str, Any]) -> tuple[Mapping, str]:
    """The informational fingerprint of the process that *measured* the training step (the
    throughput result's): determinism flags and thread counts are set by the measuring process,
    so the env-check's (taken before any phase set them) would describe another process."""
    for r in ctx.of_kind("throughput"):
        info = (r.environment or {}).get("informational") or {}
        if info:
            return info, " (as the throughput phase ran)"
    return fallback, ""


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
    m, where = _measuring_info(ctx, i)
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
            f"cudnn.deterministic={m.get('cudnn_deterministic', '–')}, "
            f"cudnn.benchmark={m.get('cudnn_benchmark', '–')}, "
            f"TF32 matmul={m.get('tf32_matmul', '–')}{where}",
        ),
        (
            "threads",
            f"torch {m.get('torch_threads', '–')}, "
            f"interop {m.get('torch_interop_threads', '–')}{where}",
        ),
    ]
    layout = b.get("node_layout")
    if isinstance(layout, dict):  # a multi-process run: its nodes (a blocking key)
        hosts = ", ".join(dict.fromkeys(map(str, i.get("hostnames_by_rank") or []))) or "–"
        nodes = f"{layout.get('nnodes')} × {layout.get('nproc_per_node')} processes ({hosts})"
        rows.append(("nodes", nodes))
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
    rows = check_rows(checks)  # identical skips (no GPU: eleven of them) fold into one row
    return lines + table(["check", "status", "value", "threshold", "advice"], rows)


def section_subset(ctx: ReportContext) -> list[str]:
    lines = [SECTIONS[4], ""]
    facts = ctx.subset
    if facts is None:
        return lines + not_measured("no subset result or manifest (run `mlb subset`)")
    rows = [
        ("samples", opt(facts.samples)),
        ("classes", opt(facts.classes)),
        ("strategy", opt(facts.strategy)),
        ("seed", opt(facts.seed)),
        ("mean image size", facts.mean_size or "not measured"),
        ("mean file size", opt(facts.mean_file_bytes, size, "not measured")),
        ("KL features", opt(facts.extractor)),
        ("full-set reference", opt(facts.reference)),
        ("mean Gaussian KL (subset ‖ full)", opt(facts.kl_mean, num, "not measured")),
        ("KL threshold (pass below)", opt(facts.kl_threshold, num)),
        ("KL verdict", opt(facts.kl_verdict)),
        ("class-proportion divergence", opt(facts.class_kl, num)),
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
                opt(facts.per_class_kl.get(name), num),
            )
            for name, n in facts.class_counts.items()
        ]
        headers = ["class", "samples", "share", "share in full set", "KL within class"]
        lines += ["Class distribution:", "", *table(headers, rows)]
        lines += figure(ctx, "subset", "class distribution")
    return lines
