"""`mlb dataloader` core: per-stage split of data loading, worker / pin_memory sweeps, knee.

For every setting (num_workers × pin_memory) the same DataLoader (shuffle off, drop_last on,
seeded generator and worker_init_fn) runs a cold page-cache pass, then a warm one:

- **cold**: each file is evicted (`posix_fadvise DONTNEED`) just before it is read;
- **warm**: every file of the pass is read once, untimed, before the pass.

Each pass fetches `batches` measured batches after one warm-up round (one batch per worker: the
round that pays worker start-up). Per sample the dataset times read / decode / transform; per
batch the collate is timed in the worker and the time the main process blocks in `next()` is
the batch time. Throughput per batch is a rolling rate over one round of workers (samples in
the last max(1, W) batches / the time they took to arrive): with W workers batches arrive in
bursts of W, so a per-batch inter-arrival rate would be meaningless.

The module imports no torch at import time (the report reuses `input_bound_verdict`); the
measuring functions import it when called.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline import stats
from mlbaseline.config import Config
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import DatasetError
from mlbaseline.measure import io as iomod
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Check, Metric, Result

MIN_BATCHES = 16  # the floor: 1024 samples at batch 64
INPUT_BOUND_MODERATE = 0.05
INPUT_BOUND_HIGH = 0.20
SPLIT_STAGES = ("read", "decode", "transform")
COLD_MIN_STORAGE_SHARE = 0.10  # a cold pass that fetched less than this from storage was not cold

MEASUREMENT_NOTES = {
    "batch": "time the main process blocks in next(loader): the data wait a training loop "
    "with zero compute would see",
    "sample": "read + decode + transform of one sample, timed inside the dataset "
    "(in the worker process when num_workers > 0)",
    "collate": "collate of one batch, timed inside the collate_fn (in the worker)",
    "samples_per_s": "rolling rate per batch: samples in the last max(1, W) batches / the time "
    "they took to arrive",
    "cold": "each file evicted with posix_fadvise(POSIX_FADV_DONTNEED) just before it is "
    "read (the eviction is outside the timed read, inside the batch time)",
    "warm": "every file of the pass read once, untimed, before the pass",
    "cpu_util": "user+system CPU seconds of this process and its workers over the pass / "
    "wall time / usable CPUs",
    "io": "/proc/<pid>/io of this process plus its workers: rchar (bytes returned by read "
    "calls, cache hits included), read_bytes (bytes fetched from storage)",
}


# ---------------------------------------------------------------- verdicts and rules


def input_bound_verdict(data_wait_share: float) -> tuple[str, str]:
    """(level, message) for the share of training step time spent waiting for data:
    below 5% "none", 5–20% "moderate", 20% and above "high"."""
    share = float(data_wait_share)
    if not math.isfinite(share) or share < 0:
        raise ValueError(f"data-wait share must be a finite number ≥ 0, got {data_wait_share!r}")
    pct = f"{share:.1%}"
    if share < INPUT_BOUND_MODERATE:
        return "none", f"data wait is {pct} of step time: not input-bound"
    if share < INPUT_BOUND_HIGH:
        return (
            "moderate",
            f"data wait is {pct} of step time: moderately input-bound; more DataLoader "
            "workers or cheaper decode/transform would shorten the step",
        )
    return (
        "high",
        f"data wait is {pct} of step time: strongly input-bound; the model waits for data: "
        "raise num_workers, cache decoded samples or use a faster decoder first",
    )


_TRAIN_METRIC = re.compile(r"^train\.bs(\d+)\.(data_wait|step)$")


def data_wait_shares(throughput: Result) -> dict[int, dict[str, Any]]:
    """Per training batch size: Σ data_wait / Σ step over the measured steps of a throughput
    result (metrics `train.bs{B}.data_wait` and `train.bs{B}.step`)."""
    found: dict[int, dict[str, list[float]]] = {}
    for name, metric in throughput.measurements.items():
        m = _TRAIN_METRIC.match(name)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = metric.values
    out: dict[int, dict[str, Any]] = {}
    for bs, pair in sorted(found.items()):
        wait, step = pair.get("data_wait"), pair.get("step")
        if not wait or not step:
            continue
        n = min(len(wait), len(step))
        total = sum(step[:n])
        if total <= 0:
            continue
        share = sum(wait[:n]) / total
        out[bs] = {"share": share, "steps": n, "level": input_bound_verdict(share)[0]}
    return out


def input_bound_check(
    throughput: Result, batch_size: int, knee: int | None
) -> tuple[Check, dict[str, Any]]:
    """The input-bound verdict from a throughput result: at the dataloader's batch size when
    it was trained at, else at the batch size with the highest share."""
    shares = data_wait_shares(throughput)
    workers = (throughput.config.get("throughput") or {}).get("num_workers")
    data: dict[str, Any] = {"per_batch_size": shares, "throughput_num_workers": workers}
    if not shares:
        msg = "the throughput result has no train.bs*.data_wait/step metrics (inference only?)"
        data["message"] = msg
        return Check("input_bound", "skip", None, None, msg), data
    bs = batch_size if batch_size in shares else max(shares, key=lambda b: shares[b]["share"])
    share = shares[bs]["share"]
    level, message = input_bound_verdict(share)
    message = f"training at batch {bs} (num_workers={workers}): {message}"
    if level != "none" and knee is not None:
        message += f"; the knee measured here is num_workers={knee}"
    data.update(batch_size=bs, share=share, level=level, message=message)
    status = "pass" if level == "none" else "warn"
    return Check(
        "input_bound", status, share, [INPUT_BOUND_MODERATE, INPUT_BOUND_HIGH], message
    ), data


def rule_of_thumb(cpus: int) -> int:
    """The common num_workers rule of thumb: min(64, 2·cpus + 1)."""
    return min(64, 2 * cpus + 1)


def cap_workers(requested: Sequence[int], cpus: int) -> tuple[list[int], list[int]]:
    """Worker counts capped at the usable CPUs, deduplicated in order; and the ones capped."""
    capped = [w for w in requested if w > cpus]
    out: list[int] = []
    for w in requested:
        v = min(w, cpus)
        if v not in out:
            out.append(v)
    return out, capped


def find_knee(rates: Mapping[int, float], tolerance: float) -> int | None:
    """The smallest worker count whose throughput is within `tolerance` of the best."""
    valid = {w: r for w, r in rates.items() if r is not None and math.isfinite(r) and r > 0}
    if not valid:
        return None
    best = max(valid.values())
    return min(w for w, r in valid.items() if r >= (1.0 - tolerance) * best)


def metric_prefix(workers: int, pin: bool, cold: bool) -> str:
    return f"dataloader.w{workers}" + (".pin" if pin else "") + (".cold" if cold else "")


# ---------------------------------------------------------------- data source


@dataclass
class Source:
    """What is loaded: a dataset (timed), its collate, and how it was obtained."""

    dataset: Any
    inner_collate: Callable[..., Any] | None
    split: bool  # True: read/decode/transform exposed; False: timed per sample as a whole
    paths: list[str]
    description: dict[str, Any]


def source_kind(cfg: Config, data_dir: Path | None) -> str:
    """ "dir" (an image folder given), "factory" (the workload's own dataset: a user factory,
    or synthetic text) or "synthetic" (a generated image tree)."""
    w = cfg.workload
    if data_dir is not None or cfg.dataloader.data_dir:
        return "dir"
    if w.dataset == "imagefolder" and w.data_dir:
        return "dir"
    if w.dataset == "synthetic" and w.task == "vision":
        return "synthetic"
    return "factory"  # build_dataset reports an imagefolder without data_dir


def _open_source(cfg: Config, data_dir: Path | None, tmp_root: Path | None) -> Source:
    from mlbaseline.workloads.factory import build_dataset, build_transform
    from mlbaseline.workloads.synthetic import write_image_tree
    from mlbaseline.workloads.timed_folder import TimedImageFolder, WholeSampleDataset

    dl, w = cfg.dataloader, cfg.workload
    kind = source_kind(cfg, data_dir)
    if kind == "factory":
        spec = build_dataset(cfg)
        ds = WholeSampleDataset(spec.dataset)
        desc = {**spec.description, "split": "whole-sample"}
        return Source(ds, spec.collate_fn, False, [], desc)
    if kind == "dir":
        if data_dir is not None or dl.data_dir:
            root, origin = Path(data_dir or dl.data_dir or ""), "dataloader.data_dir"
        else:
            root, origin = Path(w.data_dir or ""), "workload.data_dir"
        if not root.is_dir():
            raise DatasetError(f"{origin}: {root}: no such directory")
        try:
            ds = TimedImageFolder(root, build_transform(w), dl.decoder)
        except DatasetError as exc:
            raise DatasetError(f"{origin}: {exc.message}") from None
        desc = {"type": "imagefolder", "root": str(root), "len": len(ds), "split": "stages"}
        return Source(ds, None, True, ds.paths, {**desc, "classes": len(ds.classes)})
    assert tmp_root is not None
    fmt = dl.synthetic_format
    paths = write_image_tree(
        tmp_root, dl.synthetic_images, min(w.num_classes, 16), w.image_size, cfg.golden.seed, fmt
    )
    iomod.flush_to_disk(paths)  # clean pages: only clean pages can be evicted for a cold pass
    ds = TimedImageFolder(tmp_root, build_transform(w), dl.decoder)
    desc = {
        "type": "synthetic-imagefolder",
        "len": len(ds),
        "split": "stages",
        "generated": {
            "images": dl.synthetic_images,
            "image_size": w.image_size,
            "format": fmt,
            "classes": len(ds.classes),
            "bytes": sum(Path(p).stat().st_size for p in paths),
            "location": "a temporary directory, deleted after the run",
        },
    }
    return Source(ds, None, True, ds.paths, desc)


# ---------------------------------------------------------------- one pass


@dataclass
class BatchRecord:
    """What is kept of one batch (the tensors are dropped at once)."""

    fetch_s: float
    arrival_ns: int
    times: list[Any]
    failed: list[Any]
    collate_s: float
    pin_s: float | None
    h2d_s: float | None

    @property
    def size(self) -> int:
        return len(self.times)


@dataclass
class PassRecord:
    workers: int
    pin: bool
    cold: bool
    warmup: int
    start_ns: int
    batches: list[BatchRecord] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    system_cpu_percent: float | None = None

    @property
    def measured(self) -> list[BatchRecord]:
        return self.batches[self.warmup :]

    @property
    def startup_s(self) -> float | None:
        if not self.batches:
            return None
        return (self.batches[0].arrival_ns - self.start_ns) / 1e9

    def rolling_rates(self) -> list[float]:
        """Samples per second per measured batch, over a window of max(1, W) batches."""
        span = max(1, self.workers)
        out = []
        for i in range(self.warmup, len(self.batches)):
            j = i - span
            t_from = self.batches[j].arrival_ns if j >= 0 else self.start_ns
            dt = (self.batches[i].arrival_ns - t_from) / 1e9
            samples = sum(b.size for b in self.batches[max(j + 1, 0) : i + 1])
            out.append(samples / dt if dt > 0 else math.inf)
        return [r for r in out if math.isfinite(r)]


def _tensors_to(data: Any, device: str, non_blocking: bool) -> Any:
    import torch

    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, (list, tuple)):
        return [_tensors_to(v, device, non_blocking) for v in data]
    if isinstance(data, dict):
        return {k: _tensors_to(v, device, non_blocking) for k, v in data.items()}
    return data


def _h2d_seconds(data: Any, device: str, non_blocking: bool) -> float:
    """Host→device copy of one batch, timed with a CUDA event pair on the current stream."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    _tensors_to(data, device, non_blocking)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _prime(paths: Sequence[str]) -> None:
    """Read each file once so that the warm pass finds it in the page cache."""
    for path in paths:
        with contextlib.suppress(OSError), open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass


def run_pass(
    loader: Any,
    sampler: Any,
    workers: int,
    pin: bool,
    cold: bool,
    n_batches: int,
    device: str,
    cpus: int,
    progress: Progress,
) -> PassRecord:
    """Fetch `n_batches` batches; the first max(1, W) are the warm-up round. The last batch
    is taken without exhausting the iterator, so the workers are still alive when their I/O
    and CPU counters are read."""
    import psutil

    sampler.cold = cold
    warmup = max(1, workers)
    label = f"num_workers={workers}{' pin' if pin else ''} {'cold' if cold else 'warm'}"
    psutil.cpu_percent(None)  # start the system-wide window
    start = iomod.UsageSnapshot.take(time.perf_counter_ns())
    record = PassRecord(workers, pin, cold, warmup, start.wall_ns)
    on_gpu = device.startswith("cuda")
    with progress.task(label, total=n_batches) as task:
        it = iter(loader)
        try:
            for _ in range(n_batches):
                t0 = time.perf_counter_ns()
                batch = next(it)
                t1 = time.perf_counter_ns()
                h2d = None
                if on_gpu and batch.data is not None:
                    h2d = _h2d_seconds(batch.data, device, non_blocking=pin)
                record.batches.append(
                    BatchRecord(
                        fetch_s=(t1 - t0) / 1e9,
                        arrival_ns=time.perf_counter_ns(),
                        times=batch.times,
                        failed=batch.failed,
                        collate_s=batch.collate_s,
                        pin_s=batch.pin_s,
                        h2d_s=h2d,
                    )
                )
                del batch
                task.advance()
            end = iomod.UsageSnapshot.take(time.perf_counter_ns())
            record.system_cpu_percent = psutil.cpu_percent(None)
            record.usage = iomod.usage_between(start, end, cpus)
        finally:
            del it
    return record


def make_loader(
    source: Source,
    workers: int,
    pin: bool,
    persistent: bool,
    length: int,
    batch_size: int,
    cfg: Config,
) -> tuple[Any, Any]:
    import torch
    from torch.utils.data import DataLoader

    from mlbaseline.workloads.timed_folder import PassSampler, TimedCollate, seed_worker

    sampler = PassSampler(len(source.dataset), length)
    loader = DataLoader(
        source.dataset,
        batch_size=batch_size,
        sampler=sampler,  # sequential: shuffle is off
        drop_last=True,
        num_workers=workers,
        pin_memory=pin,
        persistent_workers=persistent and workers > 0,
        collate_fn=TimedCollate(source.inner_collate),
        worker_init_fn=seed_worker if workers > 0 else None,
        generator=torch.Generator().manual_seed(cfg.golden.seed),
        prefetch_factor=cfg.dataloader.prefetch_factor if workers > 0 else None,
    )
    return loader, sampler


def epoch_startups(
    source: Source, workers: int, persistent: bool, epochs: int, batch_size: int, cfg: Config
) -> list[float]:
    """Time to the first batch of epochs 2..epochs+1 of a one-batch loader: with
    persistent_workers off every epoch forks its workers again, with it on they are reused."""
    loader, _ = make_loader(source, workers, False, persistent, batch_size, batch_size, cfg)
    out = []
    for epoch in range(epochs + 1):
        t0 = time.perf_counter_ns()
        it = iter(loader)
        next(it)
        t1 = time.perf_counter_ns()
        for _ in it:  # let the epoch end cleanly
            pass
        if epoch:
            out.append((t1 - t0) / 1e9)
    del loader
    return out


# ---------------------------------------------------------------- metrics and summaries


def _stage_values(batches: Sequence[BatchRecord], stage: str) -> list[float]:
    return [float(getattr(t, stage)) for b in batches for t in b.times]


def _per_batch(batches: Sequence[BatchRecord], attr: str) -> list[float]:
    return [float(getattr(b, attr)) for b in batches if getattr(b, attr) is not None]


def _residuals(batches: Sequence[BatchRecord]) -> list[float]:
    return [t.total - (t.read + t.decode + t.transform) for b in batches for t in b.times]


def add_pass_metrics(result: Result, record: PassRecord, split: bool) -> None:
    """Raw values of one pass, named `dataloader.w{W}[.pin][.cold].*`, warm-up kept apart.
    Sample-level metrics are aligned per sample, batch-level ones per batch."""
    prefix = metric_prefix(record.workers, record.pin, record.cold)
    warm, meas = record.batches[: record.warmup], record.measured

    def add(
        name: str,
        get: Callable[[Sequence[BatchRecord]], list[float]],
        role: str,
        keep_warmup: bool = True,
        **meta: Any,
    ) -> None:
        unit, hib = ("items/s", True) if role == "rate" else ("s", False)
        metric = Metric(
            f"{prefix}.{name}",
            unit,
            hib,
            get(meas),
            get(warm) if keep_warmup else [],
            meta={"group": prefix, "role": role, **meta},
        )
        if metric.values:
            result.add_metric(metric)

    total_meta = {
        "stages": list(SPLIT_STAGES) if split else [],
        "split": "stages" if split else "whole-sample",
        "per": "sample",
    }
    add("sample", lambda bs: _stage_values(bs, "total"), "total", **total_meta)
    if split:
        for stage in SPLIT_STAGES:
            add(stage, lambda bs, s=stage: _stage_values(bs, s), "stage", stage=stage, per="sample")
        add("residual", _residuals, "residual", per="sample")
    for name, attr in (
        ("collate", "collate_s"),
        ("batch", "fetch_s"),
        ("pin_memory", "pin_s"),
        ("h2d", "h2d_s"),
    ):
        add(name, lambda bs, a=attr: _per_batch(bs, a), "other", per="batch")
    add(
        "samples_per_s",
        lambda _: record.rolling_rates(),
        "rate",
        keep_warmup=False,
        per="batch",
        method=MEASUREMENT_NOTES["samples_per_s"],
    )


def _median(values: Sequence[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(stats.summarize(finite).median) if finite else None


def pass_row(record: PassRecord, split: bool, batch_size: int, confidence: float) -> dict[str, Any]:
    """One row of the sweep table (JSON-safe)."""
    meas = record.measured
    rates = record.rolling_rates()
    med = _median(rates)
    ci = list(stats.median_ci(rates, confidence)) if rates else [None, None]
    stage_medians: dict[str, float | None] = {"sample": _median(_stage_values(meas, "total"))}
    if split:
        for stage in SPLIT_STAGES:
            stage_medians[stage] = _median(_stage_values(meas, stage))
    stage_medians["collate"] = _median([b.collate_s for b in meas])
    stage_medians["batch"] = _median([b.fetch_s for b in meas])
    stage_medians["pin_memory"] = _median([b.pin_s for b in meas if b.pin_s is not None])
    stage_medians["h2d"] = _median([b.h2d_s for b in meas if b.h2d_s is not None])
    row: dict[str, Any] = {
        "key": metric_prefix(record.workers, record.pin, record.cold),
        "workers": record.workers,
        "pin_memory": record.pin,
        "cache": "cold" if record.cold else "warm",
        "status": "ok",
        "batches": len(meas),
        "warmup_batches": record.warmup,
        "samples": sum(b.size for b in meas),
        "failed_samples": sum(len(b.failed) for b in record.batches),
        "samples_per_s": {"median": med, "ci": ci},
        "batches_per_s": {
            "median": None if med is None else med / batch_size,
            "ci": [None if v is None else v / batch_size for v in ci],
        },
        "stage_median_s": stage_medians,
        "startup_s": record.startup_s,
        "cpu_util": record.usage.get("cpu_util"),
        "system_cpu_percent": record.system_cpu_percent,
        "io": record.usage.get("io"),
        "bytes_read_by_dataset": sum(t.nbytes for b in record.batches for t in b.times),
        "wall_s": record.usage.get("wall_s"),
    }
    if record.workers == 0 and split and meas:
        # at W=0 the batch is built in the main process: the stages should add up to it
        cover = [
            (sum(t.total for t in b.times) + b.collate_s) / b.fetch_s for b in meas if b.fetch_s > 0
        ]
        row["split_coverage"] = _median(cover)
    return row


# ---------------------------------------------------------------- the sweep


@dataclass
class Plan:
    batch_size: int
    workers: list[int]
    pins: list[bool]
    device: str
    cpus: int
    cold: bool
    n_batches: int


def _plan(cfg: Config, source: Source, result: Result, device: str) -> Plan:
    from mlbaseline.envinfo import affinity_cpus, cgroup_cpu_quota, usable_cpus

    dl = cfg.dataloader
    cpus = usable_cpus()
    workers, capped = cap_workers(dl.workers, cpus)
    if capped:
        result.warn(
            "workers_capped",
            f"dataloader.workers {', '.join(map(str, capped))} exceed the {cpus} CPUs this "
            f"process may use (affinity {affinity_cpus()}, cgroup quota "
            f"{cgroup_cpu_quota() or 'none'}); capped at {cpus}",
            requested=list(dl.workers),
            usable_cpus=cpus,
        )
    pins = list(dict.fromkeys(dl.pin_memory))
    if not device.startswith("cuda"):
        if True in pins:
            result.warn(
                "pin_memory_not_applicable",
                "pin_memory: not applicable on CPU (no CUDA device to copy to); only "
                "pin_memory=False was measured",
            )
        pins = [False]
    bs = dl.batch_size or cfg.golden.batch_size
    if dl.batches < MIN_BATCHES:
        result.warn(
            "few_batches",
            f"dataloader.batches={dl.batches} is below {MIN_BATCHES}: medians and CIs rest on "
            "few batches",
        )
    cold = dl.cold_cache and source.split
    if dl.cold_cache and not source.split:
        result.warn(
            "cold_not_applicable",
            "cold cache: not applicable: the dataset does not expose its files",
        )
    elif cold and not iomod.eviction_supported():
        result.warn(
            "cold_not_supported",
            "cold cache: posix_fadvise is not available on this platform; skipped",
        )
        cold = False
    n = len(source.dataset)
    needed = (dl.batches + max(1, max(workers))) * bs
    if needed > n:
        result.warn(
            "dataset_cycled",
            f"the dataset has {n} samples and a pass needs up to {needed}: samples are read "
            "more than once (cycled); warm figures are unaffected, and the cold pass evicts "
            "each file before every read",
            samples=n,
            needed=needed,
        )
    return Plan(bs, workers, pins, device, cpus, cold, dl.batches)


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


def _sweep(
    cfg: Config,
    source: Source,
    plan: Plan,
    result: Result,
    progress: Progress,
    state: dict[str, Any],
) -> None:
    for workers in plan.workers:
        for pin in plan.pins:
            state["current"] = metric_prefix(workers, pin, False)
            _measure_setting(cfg, source, plan, result, progress, state, workers, pin)
    epochs = cfg.dataloader.persistent_epochs
    for workers in (w for w in plan.workers if w > 0 and epochs > 0):
        state["current"] = f"persistent_workers at num_workers={workers}"
        try:
            state["persistent"].append(
                _persistent_effect(cfg, source, plan, result, progress, workers)
            )
        except (RuntimeError, OSError) as exc:
            _setting_failed(result, f"persistent_workers at num_workers={workers}", exc)


def _setting_failed(result: Result, what: str, exc: BaseException) -> None:
    result.warn("setting_failed", f"{what}: {exc.__class__.__name__}: {exc}; the sweep went on")


def _measure_setting(
    cfg: Config,
    source: Source,
    plan: Plan,
    result: Result,
    progress: Progress,
    state: dict[str, Any],
    workers: int,
    pin: bool,
) -> None:
    """The cold pass (when on), then the warm pass, of one loader."""
    n_batches = plan.n_batches + max(1, workers)
    length = n_batches * plan.batch_size
    loader, sampler = make_loader(
        source, workers, pin, cfg.dataloader.persistent_workers, length, plan.batch_size, cfg
    )
    for cold in [True, False] if plan.cold else [False]:
        if not cold:
            _prime(source.paths[:length])  # the files this pass reads
        try:
            record = run_pass(
                loader, sampler, workers, pin, cold, n_batches, plan.device, plan.cpus, progress
            )
        except (RuntimeError, OSError) as exc:  # a crashed worker, too many open files
            state["rows"].append(_failed_row(workers, pin, cold, exc))
            _setting_failed(result, metric_prefix(workers, pin, cold), exc)
            break  # the loader's workers are gone: its other pass is not measured
        _collect_failed(record, state["corrupt"])
        _check_any_loaded(record, state["corrupt"])
        add_pass_metrics(result, record, source.split)
        row = pass_row(record, source.split, plan.batch_size, cfg.compare.confidence)
        state["rows"].append(row)
    del loader


def _persistent_effect(
    cfg: Config, source: Source, plan: Plan, result: Result, progress: Progress, workers: int
) -> dict[str, Any]:
    """Epoch start-up with persistent_workers off and on, at one worker count."""
    epochs = cfg.dataloader.persistent_epochs
    entry: dict[str, Any] = {"workers": workers, "epochs": epochs}
    with progress.task(f"persistent_workers off/on, num_workers={workers}", total=2) as task:
        for flag in (False, True):
            values = epoch_startups(source, workers, flag, epochs, plan.batch_size, cfg)
            name = f"dataloader.w{workers}{'.persistent' if flag else ''}.epoch_start"
            meta = {"group": f"dataloader.w{workers}", "role": "other", "persistent_workers": flag}
            result.add_metric(Metric(name, "s", False, values, meta=meta))
            entry["on_s" if flag else "off_s"] = _median(values)
            task.advance()
    entry["saved_s"] = entry["off_s"] - entry["on_s"]
    return entry


def _knee(cfg: Config, rows: Sequence[Mapping[str, Any]], plan: Plan) -> dict[str, Any]:
    """The knee over the warm passes (pin_memory off when it was measured)."""
    pin = False not in plan.pins  # pin_memory off when it was measured
    chosen = [
        r for r in rows if r["status"] == "ok" and r["cache"] == "warm" and r["pin_memory"] == pin
    ]
    rates = {r["workers"]: r["samples_per_s"]["median"] for r in chosen}
    util = {r["workers"]: r["cpu_util"] for r in chosen}
    knee = find_knee(rates, cfg.dataloader.knee_tolerance)
    thumb = rule_of_thumb(plan.cpus)
    out: dict[str, Any] = {
        "workers": knee,
        "tolerance": cfg.dataloader.knee_tolerance,
        "pin_memory": pin,
        "rates": rates,
        "cpu_util": util,
        "rule_of_thumb": {"formula": "min(64, 2·cpus + 1)", "cpus": plan.cpus, "value": thumb},
    }
    if knee is not None:
        best = max((w for w in rates if rates[w]), key=lambda w: rates[w])
        out.update(samples_per_s=rates[knee], best_workers=best, best_samples_per_s=rates[best])
    return out


def recommendation(
    knee: Mapping[str, Any],
    plan: Plan,
    pin_effect: Mapping[str, Any] | None,
    persistent: Sequence[Mapping[str, Any]],
) -> str:
    """One line: the worker count to use, why, and what pin/persistent workers do here."""
    k = knee.get("workers")
    if k is None:
        return "no setting produced a throughput figure: no recommendation"
    tol = f"{knee['tolerance']:.0%}"
    thumb = knee["rule_of_thumb"]
    util = knee["cpu_util"].get(k)
    util_text = f", CPU use {util:.0%} of {plan.cpus}" if util is not None else ""
    line = (
        f"num_workers={k}: within {tol} of the best {knee['best_samples_per_s']:.4g} samples/s "
        f"(at {knee['best_workers']} workers){util_text}; rule of thumb "
        f"min(64, 2·{thumb['cpus']}+1)={thumb['value']}"
    )
    if pin_effect and pin_effect.get("applicable") and pin_effect.get("saved_s") is not None:
        saved = pin_effect["saved_s"]
        verb = "saves" if saved > 0 else "costs"
        line += f"; pin_memory=True {verb} {abs(saved) * 1e3:.3g} ms of host→device copy per batch"
    elif pin_effect and not pin_effect.get("applicable"):
        line += "; pin_memory: not applicable on CPU"
    at_k = next((p for p in persistent if p["workers"] == k), None)
    if at_k and at_k.get("saved_s") is not None and k > 0:
        line += f"; persistent_workers=True saves {at_k['saved_s']:.3g} s per epoch start"
    return line


def _pin_effect(rows: Sequence[Mapping[str, Any]], plan: Plan, knee: int | None) -> dict[str, Any]:
    if not plan.device.startswith("cuda"):
        return {
            "applicable": False,
            "reason": "no CUDA device: there is no host→device copy for pinned memory to speed up",
        }
    warm = {
        (r["workers"], r["pin_memory"]): r
        for r in rows
        if r["status"] == "ok" and r["cache"] == "warm"
    }
    w = knee if knee is not None else (plan.workers[0] if plan.workers else 0)
    off, on = warm.get((w, False)), warm.get((w, True))
    out: dict[str, Any] = {"applicable": True, "workers": w}
    if off and on:
        h_off, h_on = off["stage_median_s"]["h2d"], on["stage_median_s"]["h2d"]
        out.update(
            h2d_off_s=h_off,
            h2d_on_s=h_on,
            saved_s=None if h_off is None or h_on is None else h_off - h_on,
            pin_memory_s=on["stage_median_s"]["pin_memory"],
        )
    else:
        out["note"] = "pin_memory was not measured both on and off"
    return out


def _cold_check(result: Result, rows: Sequence[Mapping[str, Any]]) -> None:
    """A cold pass that fetched almost nothing from storage did not evict (tmpfs, overlay or
    a network file system): say so instead of reporting warm figures as cold."""
    for row in rows:
        if row.get("cache") != "cold" or row.get("status") != "ok" or not row.get("io"):
            continue
        wanted = row["bytes_read_by_dataset"]
        got = row["io"]["read_bytes"]
        if wanted and got < COLD_MIN_STORAGE_SHARE * wanted:
            result.warn(
                "cold_not_cold",
                f"{row['key']}: the cold pass fetched {got} B from storage for {wanted} B read: "
                "the page-cache eviction did not take effect here (tmpfs/overlay/network file "
                "system?), so its figures are not cold",
            )
            return


def run_dataloader(
    cfg: Config,
    data_dir: Path | None = None,
    progress: Progress | None = None,
    throughput_result: Result | None = None,
) -> Result:
    """Measure the data pipeline of `cfg`: the stage split, the worker / pin_memory sweep, cold
    and warm page cache, the knee and a recommendation; with a throughput result, the
    input-bound verdict. Ctrl-C keeps the passes done so far, marked interrupted."""
    import torch

    from mlbaseline.measure.determinism import resolve_device, set_determinism

    progress = progress or NullProgress()
    device = resolve_device(cfg.workload.device)
    flags = set_determinism(
        cfg.golden.seed, cfg.workload.deterministic, cfg.workload.cudnn_benchmark
    )
    if cfg.workload.threads:
        torch.set_num_threads(cfg.workload.threads)
    result = Result(kind="dataloader", config=cfg.to_dict())
    tmp: Path | None = None
    state: dict[str, Any] = {"rows": [], "corrupt": {}, "persistent": [], "current": "setup"}
    plan: Plan | None = None
    try:
        if source_kind(cfg, data_dir) == "synthetic":
            tmp = Path(tempfile.mkdtemp(prefix="mlb-dataloader-"))
            progress.log(f"generating {cfg.dataloader.synthetic_images} synthetic images")
        source = _open_source(cfg, data_dir, tmp)
        result.environment = fingerprint(cfg.to_dict(), None, device)
        plan = _plan(cfg, source, result, device)
        _describe_run(cfg, result, source, plan, flags)
        _sweep(cfg, source, plan, result, progress, state)
    except KeyboardInterrupt:
        result.mark(
            "interrupted",
            f"interrupted during {state['current']}: the passes completed before it are kept",
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    _finish(cfg, result, plan, state, throughput_result)
    return result


def _describe_run(
    cfg: Config, result: Result, source: Source, plan: Plan, flags: Mapping[str, Any]
) -> None:
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
            "shuffle": False,
            "drop_last": True,
            "seed": cfg.golden.seed,
            "sampler": "sequential, cycled when the dataset is smaller than a pass",
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
    if "generated" in result.data.get("dataset", {}):
        result.data["dataset"]["generated"]["deleted"] = True
    _cold_check(result, rows)
    knee = _knee(cfg, rows, plan)
    pin = _pin_effect(rows, plan, knee["workers"])
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
