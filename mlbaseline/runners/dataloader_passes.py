"""Measuring one DataLoader setting: the data source, the loader, one timed pass, its metrics.

For every setting (num_workers × pin_memory) the same DataLoader (drop_last on, seeded generator
and worker_init_fn) runs a cold page-cache pass, then a warm one. Its sampler reads the way a
training loop does: a seeded random permutation of the whole dataset (`dataloader.shuffle`), the
same files in every pass, so that a pass is a fair sample of every class and file size:

- **cold**: each file is evicted (`posix_fadvise DONTNEED`) just before it is read;
- **warm**: every file of the pass is read once, untimed, before the pass.

Each pass fetches `batches` measured batches after one warm-up round (one batch per worker: the
round that pays worker start-up). Per sample the dataset times read / decode / transform; per
batch the collate is timed in the worker and the time the main process blocks in `next()` is
the batch time. Throughput per batch is a rolling rate over one round of workers (samples in
the last max(1, W) batches / the time they took to arrive): with W workers batches arrive in
bursts of W, so a per-batch inter-arrival rate would be meaningless.

The module imports no torch at import time; the measuring functions import it when called.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline import stats
from mlbaseline.config import Config
from mlbaseline.errors import DatasetError
from mlbaseline.measure import io as iomod
from mlbaseline.progress import Progress
from mlbaseline.results import Metric, Result

SPLIT_STAGES = ("read", "decode", "transform")

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
    labels: list[int] | None = None  # class index per sample, when the dataset says


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


def open_source(cfg: Config, data_dir: Path | None, tmp_root: Path | None) -> Source:
    from mlbaseline.workloads.factory import build_dataset, build_transform
    from mlbaseline.workloads.synthetic import write_image_tree
    from mlbaseline.workloads.timed_folder import TimedImageFolder, WholeSampleDataset

    dl, w = cfg.dataloader, cfg.workload
    kind = source_kind(cfg, data_dir)
    if kind == "factory":
        spec = build_dataset(cfg)
        ds = WholeSampleDataset(spec.dataset)
        desc = {**spec.description, "split": "whole-sample"}
        return Source(ds, spec.collate_fn, False, [], desc, _labels(spec.dataset))
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
        desc["classes"] = len(ds.classes)
        return Source(ds, None, True, ds.paths, desc, [c for _, c in ds.samples])
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
    return Source(ds, None, True, ds.paths, desc, [c for _, c in ds.samples])


def _labels(dataset: Any) -> list[int] | None:
    """A user dataset's class per sample, when it exposes `targets` (torchvision's habit)."""
    targets = getattr(dataset, "targets", None)
    try:
        labels = [int(t) for t in targets]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return None
    return labels if len(labels) == len(dataset) else None


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


def prime_cache(paths: Sequence[str]) -> None:
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

    sampler = PassSampler(
        len(source.dataset), length, seed=cfg.golden.seed, shuffle=cfg.dataloader.shuffle
    )
    loader = DataLoader(
        source.dataset,
        batch_size=batch_size,
        sampler=sampler,  # shuffled (or not) by the sampler, the same files in every pass
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


def touched(record: PassRecord) -> set[int]:
    """Dataset indices the pass asked for, loaded or failed (warm-up batches included)."""
    out = {t.index for b in record.batches for t in b.times}
    out.update(f.index for b in record.batches for f in b.failed)
    out.discard(-1)
    return out


def finite_median(values: Sequence[float]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(stats.summarize(finite).median) if finite else None


def pass_row(record: PassRecord, split: bool, batch_size: int, confidence: float) -> dict[str, Any]:
    """One row of the sweep table (JSON-safe)."""
    meas = record.measured
    rates = record.rolling_rates()
    med = finite_median(rates)
    nbytes = sum(t.nbytes for b in record.batches for t in b.times)
    loaded = sum(b.size for b in record.batches)
    ci = list(stats.median_ci(rates, confidence)) if rates else [None, None]
    stage_medians: dict[str, float | None] = {"sample": finite_median(_stage_values(meas, "total"))}
    if split:
        for stage in SPLIT_STAGES:
            stage_medians[stage] = finite_median(_stage_values(meas, stage))
    stage_medians["collate"] = finite_median([b.collate_s for b in meas])
    stage_medians["batch"] = finite_median([b.fetch_s for b in meas])
    stage_medians["pin_memory"] = finite_median([b.pin_s for b in meas if b.pin_s is not None])
    stage_medians["h2d"] = finite_median([b.h2d_s for b in meas if b.h2d_s is not None])
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
        "bytes_read_by_dataset": nbytes,
        "bytes_per_sample": nbytes / loaded if loaded else None,
        "distinct_samples": len(touched(record)),
        "wall_s": record.usage.get("wall_s"),
    }
    if record.workers == 0 and split and meas:
        # at W=0 the batch is built in the main process: the stages should add up to it
        cover = [
            (sum(t.total for t in b.times) + b.collate_s) / b.fetch_s for b in meas if b.fetch_s > 0
        ]
        row["split_coverage"] = finite_median(cover)
    return row
