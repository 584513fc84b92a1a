"""`mlb dataloader` core: per-stage split of data loading, worker / pin_memory sweeps, knee.

The runner drives the sweep; `dataloader_passes` measures one setting (source, loader, pass,
metrics) and `dataloader_analysis` plans the sweep and reads its outcome (knee, pin_memory and
persistent_workers effects, recommendation, input-bound verdict).

The module imports no torch at import time (the report reuses `input_bound_verdict`); the
measuring functions import it when called.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbaseline import scratch
from mlbaseline.config import Config
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import DatasetError
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Metric, Result
from mlbaseline.runners.dataloader_analysis import (
    Plan,
    cold_check,
    input_bound_check,
    input_bound_verdict,
    knee_summary,
    pin_memory_effect,
    plan_sweep,
    recommendation,
)
from mlbaseline.runners.dataloader_passes import (
    MEASUREMENT_NOTES,
    PassRecord,
    Source,
    add_pass_metrics,
    epoch_startups,
    finite_median,
    make_loader,
    metric_prefix,
    open_source,
    pass_row,
    prime_cache,
    run_pass,
    source_kind,
    touched,
)

__all__ = ["input_bound_verdict", "run_dataloader"]

# A measurement that touched fewer files than both of these, or fewer than this share of the
# classes, is a small, possibly unrepresentative sample of the dataset: a warning says so.
COVERAGE_MIN_SHARE = 0.10
COVERAGE_MIN_FILES = 500
COVERAGE_MIN_CLASS_SHARE = 0.5


def _coverage(cfg: Config, result: Result, source: Source, seen: set[int]) -> None:
    """How many distinct files (and classes) the passes read, and a warning when few."""
    n = len(source.dataset)
    labels = source.labels
    classes = len(set(labels)) if labels else None
    hit = len({labels[i] for i in seen}) if labels else None
    cov = {
        "samples_touched": len(seen),
        "samples_total": n,
        "share": len(seen) / n if n else None,
        "classes_touched": hit,
        "classes_total": classes,
        "sampler": "shuffled" if cfg.dataloader.shuffle else "sequential",
    }
    result.data["coverage"] = cov
    few = len(seen) < min(n, COVERAGE_MIN_FILES) and len(seen) < COVERAGE_MIN_SHARE * n
    few_classes = classes is not None and (hit or 0) < COVERAGE_MIN_CLASS_SHARE * classes
    if few or few_classes:
        what = f"{len(seen)} of {n} samples ({len(seen) / n:.1%})"
        if classes is not None:
            what += f" from {hit} of {classes} classes"
        advice = (
            "raise dataloader.batches"
            if cfg.dataloader.shuffle
            else "set dataloader.shuffle: true, or raise dataloader.batches"
        )
        result.warn(
            "coverage",
            f"the measurement read {what}: a small, possibly unrepresentative share of the "
            f"dataset (file sizes and formats can differ by class); {advice}",
            **{k: v for k, v in cov.items() if k != "sampler"},
        )


def _failed_row(workers: int, pin: bool, cold: bool, exc: BaseException) -> dict[str, Any]:
    return {
        "key": metric_prefix(workers, pin, cold),
        "workers": workers,
        "pin_memory": pin,
        "cache": "cold" if cold else "warm",
        "status": "failed",
        "error": f"{exc.__class__.__name__}: {exc}",
    }


def _collect_failed(record: PassRecord, corrupt: dict[str, dict[str, Any]]) -> None:
    for b in record.batches:
        for f in b.failed:
            key = f.path or f"index {f.index}"
            entry = corrupt.setdefault(
                key,
                {
                    "path": f.path,
                    "index": f.index,
                    "stage": f.stage,
                    "error": f.error,
                    "times_seen": 0,
                },
            )
            entry["times_seen"] += 1


def _check_any_loaded(record: PassRecord, corrupt: Mapping[str, Mapping[str, Any]]) -> None:
    if record.batches and not any(b.size for b in record.batches):
        first = next(iter(corrupt.values()), None)
        where = f"; first: {first['path'] or first['index']}: {first['error']}" if first else ""
        raise DatasetError(f"no sample could be loaded ({len(corrupt)} failed){where}")


@dataclass
class _Sweep:
    """What every setting of one sweep shares; `state` collects rows, corrupt files, the
    persistent_workers effects and the setting now measured (for an interruption)."""

    cfg: Config
    source: Source
    plan: Plan
    result: Result
    progress: Progress
    state: dict[str, Any]


def _sweep(sw: _Sweep) -> None:
    for workers in sw.plan.workers:
        for pin in sw.plan.pins:
            sw.state["current"] = metric_prefix(workers, pin, False)
            _measure_setting(sw, workers, pin)
    epochs = sw.cfg.dataloader.persistent_epochs
    for workers in (w for w in sw.plan.workers if w > 0 and epochs > 0):
        sw.state["current"] = f"persistent_workers at num_workers={workers}"
        try:
            sw.state["persistent"].append(_persistent_effect(sw, workers))
        except (RuntimeError, OSError) as exc:
            _setting_failed(sw.result, f"persistent_workers at num_workers={workers}", exc)


def _setting_failed(result: Result, what: str, exc: BaseException) -> None:
    result.warn("setting_failed", f"{what}: {exc.__class__.__name__}: {exc}; the sweep went on")


def _measure_setting(sw: _Sweep, workers: int, pin: bool) -> None:
    """The cold pass (when on), then the warm pass, of one loader."""
    cfg, source, plan, state = sw.cfg, sw.source, sw.plan, sw.state
    n_batches = plan.n_batches + max(1, workers)
    length = n_batches * plan.batch_size
    loader, sampler = make_loader(
        source, workers, pin, cfg.dataloader.persistent_workers, length, plan.batch_size, cfg
    )
    for cold in [True, False] if plan.cold else [False]:
        if not cold and source.paths:  # the files this pass reads, once each
            prime_cache([source.paths[i] for i in dict.fromkeys(sampler.indices())])
        try:
            record = run_pass(
                loader, sampler, workers, pin, cold, n_batches, plan.device, plan.cpus, sw.progress
            )
        except (RuntimeError, OSError) as exc:  # a crashed worker, too many open files
            state["rows"].append(_failed_row(workers, pin, cold, exc))
            _setting_failed(sw.result, metric_prefix(workers, pin, cold), exc)
            break  # the loader's workers are gone: its other pass is not measured
        _collect_failed(record, state["corrupt"])
        state["touched"].update(touched(record))
        _check_any_loaded(record, state["corrupt"])
        add_pass_metrics(sw.result, record, source.split)
        row = pass_row(record, source.split, plan.batch_size, cfg.compare.confidence)
        state["rows"].append(row)
    del loader


def _persistent_effect(sw: _Sweep, workers: int) -> dict[str, Any]:
    """Epoch start-up with persistent_workers off and on, at one worker count."""
    epochs = sw.cfg.dataloader.persistent_epochs
    entry: dict[str, Any] = {"workers": workers, "epochs": epochs}
    with sw.progress.task(f"persistent_workers off/on, num_workers={workers}", total=2) as task:
        for flag in (False, True):
            values = epoch_startups(sw.source, workers, flag, epochs, sw.plan.batch_size, sw.cfg)
            name = f"dataloader.w{workers}{'.persistent' if flag else ''}.epoch_start"
            meta = {"group": f"dataloader.w{workers}", "role": "other", "persistent_workers": flag}
            sw.result.add_metric(Metric(name, "s", False, values, meta=meta))
            entry["on_s" if flag else "off_s"] = finite_median(values)
            task.advance()
    entry["saved_s"] = entry["off_s"] - entry["on_s"]
    return entry


def run_dataloader(
    cfg: Config,
    data_dir: Path | None = None,
    progress: Progress | None = None,
    throughput_result: Result | None = None,
) -> Result:
    """Measure the data pipeline of `cfg`: the stage split, the worker / pin_memory sweep, cold
    and warm page cache, the knee and a recommendation; with a throughput result, the
    input-bound verdict. Ctrl-C keeps the passes done so far, marked interrupted."""
    from mlbaseline.measure.memory import refuse_oversized_batches

    batch, where = cfg.dataloader.batch_size, "dataloader.batch_size"
    if batch is None:
        batch, where = cfg.golden.batch_size, "golden.batch_size"
    refuse_oversized_batches(cfg, where, [batch])  # the host, before torch is even imported
    import torch

    from mlbaseline.measure.determinism import resolve_device, set_determinism

    progress = progress or NullProgress()
    device = resolve_device(cfg.workload.device)
    if device.startswith("cuda"):
        refuse_oversized_batches(cfg, where, [batch], device)  # and the device
    flags = set_determinism(
        cfg.golden.seed, cfg.workload.deterministic, cfg.workload.cudnn_benchmark
    )
    if cfg.workload.threads:
        torch.set_num_threads(cfg.workload.threads)
    result = Result(kind="dataloader", config=cfg.to_dict())
    tmp: Path | None = None
    source: Source | None = None
    state: dict[str, Any] = {
        "rows": [],
        "corrupt": {},
        "persistent": [],
        "current": "setup",
        "touched": set(),
    }
    plan: Plan | None = None
    try:
        if source_kind(cfg, data_dir) == "synthetic":
            tmp = scratch.make("dataloader")
            progress.log(f"generating {cfg.dataloader.synthetic_images} synthetic images")
        source = open_source(cfg, data_dir, tmp)
        result.environment = fingerprint(cfg.to_dict(), None, device)
        plan = plan_sweep(cfg, source, result, device)
        _describe_run(cfg, result, source, plan, flags)
        _sweep(_Sweep(cfg, source, plan, result, progress, state))
    except KeyboardInterrupt:
        result.mark(
            "interrupted",
            f"interrupted during {state['current']}: the passes completed before it are kept",
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    _finish(cfg, result, plan, state, throughput_result, source)
    return result


def _describe_run(
    cfg: Config, result: Result, source: Source, plan: Plan, flags: Mapping[str, Any]
) -> None:
    from mlbaseline.workloads.timed_folder import PassSampler  # imports torch: not at import

    if not source.split:
        result.warn(
            "whole_sample",
            f"dataset {source.description.get('type')} does not expose read/decode/transform: "
            "each sample is measured as a whole",
        )
    result.data.update(
        dataset=source.description,
        split="stages" if source.split else "whole-sample",
        batch_size=plan.batch_size,
        device=plan.device,
        usable_cpus=plan.cpus,
        workers=plan.workers,
        pin_memory_settings=plan.pins,
        persistent_workers=cfg.dataloader.persistent_workers,
        cold_cache=plan.cold,
        decoder=cfg.dataloader.decoder,
        loader={
            "shuffle": cfg.dataloader.shuffle,
            "drop_last": True,
            "seed": cfg.golden.seed,
            "sampler": PassSampler(
                len(source.dataset), 1, seed=cfg.golden.seed, shuffle=cfg.dataloader.shuffle
            ).describe(),
            "prefetch_factor": cfg.dataloader.prefetch_factor,
            "worker_init_fn": "seeds random and numpy from torch.initial_seed()",
        },
        determinism=dict(flags),
        confidence=cfg.compare.confidence,
        ci_method="seeded percentile bootstrap of the median (stats.median_ci)",
        notes=MEASUREMENT_NOTES,
    )


def _finish(
    cfg: Config,
    result: Result,
    plan: Plan | None,
    state: Mapping[str, Any],
    throughput_result: Result | None,
    source: Source | None = None,
) -> None:
    rows = state["rows"]
    corrupt = sorted(state["corrupt"].values(), key=lambda e: str(e["path"] or e["index"]))
    result.data["settings"] = rows
    result.data["corrupt"] = {"count": len(corrupt), "files": corrupt}
    result.data["persistent_workers_effect"] = state["persistent"]
    if corrupt:
        shown = ", ".join(str(e["path"] or e["index"]) for e in corrupt[:3])
        more = f" and {len(corrupt) - 3} more" if len(corrupt) > 3 else ""
        result.warn(
            "corrupt_files",
            f"{len(corrupt)} unreadable or corrupt samples were skipped: {shown}{more}",
            count=len(corrupt),
        )
    if plan is None:
        return
    if source is not None and rows:
        _coverage(cfg, result, source, state["touched"])
    if "generated" in result.data.get("dataset", {}):
        result.data["dataset"]["generated"]["deleted"] = True
    cold_check(result, rows)
    knee = knee_summary(cfg, rows, plan)
    pin = pin_memory_effect(rows, plan, knee["workers"])
    result.data["knee"] = knee
    result.data["pin_memory_effect"] = pin
    result.data["recommendation"] = recommendation(knee, plan, pin, state["persistent"])
    result.data["io"] = {
        r["key"]: {**(r.get("io") or {}), "bytes_read_by_dataset": r["bytes_read_by_dataset"]}
        for r in rows
        if r["status"] == "ok"
    }
    if any(r["status"] == "ok" for r in rows) and all(
        r.get("io") is None for r in rows if r["status"] == "ok"
    ):
        result.warn("io_unavailable", "/proc/<pid>/io is not readable here: no I/O accounting")
    if throughput_result is not None:
        check, data = input_bound_check(throughput_result, plan.batch_size, knee["workers"])
        result.verdict.checks.append(check)
        result.data["input_bound"] = data
    if rows and all(r["status"] == "failed" for r in rows):
        result.mark("failed", "every setting of the sweep failed")
