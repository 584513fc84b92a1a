"""`mlb throughput` core: stage-decomposed training throughput and inference throughput over a
batch-size sweep, with telemetry; multi-process (`nproc`) and fresh-process replicates
(`repeats`) are delegated and pooled into the same result shape.

Per training step (one `TrainStep` call): data wait (blocked in the loader iterator's `next`),
host→device copy, forward, loss, backward, gradient sync (multi-process only), optimizer step
(`optimizer.step()` + `optimizer.zero_grad()`), and the step's own total; residual = total − sum
of stages, per step. Inference: forward only under `torch.inference_mode()`, timed with
`torch.utils.benchmark.Timer.blocked_autorange`.

Metrics (see the metric-naming rules): group `train.bs{B}` → `.step` (total), `.data_wait`,
`.h2d`, `.forward`, `.loss`, `.backward`, [`.grad_sync`], `.optimizer`, `.residual`,
`.samples_per_s`; DDP's overlapped mode adds the group `train.bs{B}.ddp`; inference: group
`infer.bs{B}` → `.batch`, `.samples_per_s`. Per batch size, `result.data["batch_sizes"][str(B)]`
holds the status ("ok", "oom", "error", "interrupted"), `stop_reason`, and "train" / "inference"
summaries (samples/s with a bootstrap CI of the median, step time, stage shares, residual
share, peak memory).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from mlbaseline import stats
from mlbaseline.config import Config
from mlbaseline.envinfo import fingerprint
from mlbaseline.errors import HardwareUnavailableError, MlbError
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.determinism import resolve_device, set_determinism
from mlbaseline.measure.gpu import GpuProbe, default_probe
from mlbaseline.measure.loop import Decision, LoopResult, StopRule, run_steps
from mlbaseline.measure.memory import make_memory_meter
from mlbaseline.measure.telemetry import TelemetrySampler
from mlbaseline.measure.timers import StageTimer, StepTimes, make_timer
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Check, Metric, Result, result_from_dict
from mlbaseline.workloads.factory import (
    DataSpec,
    build_dataset,
    build_loss,
    build_model,
    build_optimizer,
    model_dtype,
)

TRAIN_STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer")
DIST_STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "grad_sync", "optimizer")
RESIDUAL_LIMIT = 0.05  # stage sums within 5% of the step time
CONFIDENCE = 0.95
TELEMETRY_OVERHEAD_LIMIT = 0.02

# ---------------------------------------------------------------- helpers


def is_oom(exc: BaseException) -> bool:
    """Out of memory, in any of the forms torch and Python raise it."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def to_device(obj: Any, device: str, dtype: torch.dtype, non_blocking: bool = False) -> Any:
    """Tensors (nested in tuples, lists, dicts) to `device`; floating ones also to `dtype`."""
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            return obj.to(device=device, dtype=dtype, non_blocking=non_blocking)
        return obj.to(device=device, non_blocking=non_blocking)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(o, device, dtype, non_blocking) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device, dtype, non_blocking) for k, v in obj.items()}
    return obj


def split_batch(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError("the dataset must yield (input, target) pairs")


def batch_len(target: Any) -> int:
    if isinstance(target, torch.Tensor) and target.dim() > 0:
        return int(target.shape[0])
    return len(target)


def short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0][:300] if text else ''}".rstrip(": ")


class Batches:
    """An endless iterator over a DataLoader: a new epoch starts when one runs out (its cost
    lands in data wait, where it belongs)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.epochs = 0
        self._it = iter(loader)

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._it)
        except StopIteration:
            self.epochs += 1
            sampler = getattr(self.loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(self.epochs)
            self._it = iter(self.loader)
            return next(self._it)

    def close(self) -> None:
        self._it = None
        self.loader = None


def make_loader(
    spec: DataSpec, cfg: Config, batch_size: int, device: str, sampler: Any = None
) -> Any:
    from torch.utils.data import DataLoader

    workers = cfg.throughput.num_workers
    generator = torch.Generator().manual_seed(cfg.golden.seed)
    loader = DataLoader(
        spec.dataset,
        batch_size=batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=workers,
        collate_fn=spec.collate_fn,
        pin_memory=device.startswith("cuda"),
        drop_last=True,
        generator=generator,
        persistent_workers=workers > 0,
    )
    if len(loader) == 0:
        raise ValueError(
            f"the dataset has {len(spec.dataset)} samples per process: fewer than one batch "
            f"of {batch_size}"
        )
    return loader


def materialize(model: nn.Module, spec: DataSpec, device: str, dtype: torch.dtype) -> None:
    """Lazy modules (nn.LazyLinear) get their shapes from one tiny batch, before the optimizer
    or DDP need real parameters."""
    from torch.nn.parameter import is_lazy
    from torch.utils.data import default_collate

    if not any(is_lazy(p) for p in model.parameters()):
        return
    collate = spec.collate_fn or default_collate
    x, _ = split_batch(collate([spec.dataset[i] for i in range(min(2, len(spec.dataset)))]))
    with torch.no_grad():
        model(to_device(x, device, dtype))


# ---------------------------------------------------------------- parallelism


class GradSync(Protocol):
    nbytes: int

    def __call__(self) -> None: ...


class Parallel(Protocol):
    """How a training process relates to others. One implementation per mode, chosen once:
    `SingleProcess` here, explicit all-reduce and DDP-overlapped in `runners.distributed`."""

    rank: int | None
    world_size: int
    suffix: str  # metric group suffix after train.bs{B}
    stages: tuple[str, ...]

    def wrap(self, model: nn.Module, device: str) -> nn.Module: ...

    def sampler(self, dataset: Any) -> Any: ...

    def grad_sync(self, model: nn.Module) -> GradSync | None: ...

    def no_sync(self, model: nn.Module) -> Any: ...

    def agree(self, decision: Decision) -> Decision: ...


class SingleProcess:
    rank: int | None = None
    world_size = 1
    suffix = ""
    stages = TRAIN_STAGES

    def wrap(self, model: nn.Module, device: str) -> nn.Module:
        return model

    def sampler(self, dataset: Any) -> Any:
        return None

    def grad_sync(self, model: nn.Module) -> GradSync | None:
        return None

    def no_sync(self, model: nn.Module) -> Any:
        return contextlib.nullcontext()

    def agree(self, decision: Decision) -> Decision:
        return decision


# ---------------------------------------------------------------- training


@dataclass(frozen=True)
class StepRecord:
    times: StepTimes
    samples: int


class TrainStep:
    """One timed training step; every stage in its own timer block."""

    def __init__(
        self,
        model: nn.Module,
        loss_fn: nn.Module,
        optimizer: torch.optim.Optimizer,
        batches: Iterator[Any],
        device: str,
        dtype: torch.dtype,
        timer: StageTimer,
        sync: GradSync | None = None,
        no_sync: Callable[[], Any] = contextlib.nullcontext,
    ) -> None:
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        self.batches, self.device, self.dtype, self.timer = batches, device, dtype, timer
        self.sync, self.no_sync = sync, no_sync
        self.non_blocking = device.startswith("cuda")

    def __call__(self) -> StepRecord:
        t = self.timer
        t.begin_step()
        with t.stage("data_wait"):
            batch = next(self.batches)
        with t.stage("h2d"):
            x, y = split_batch(to_device(batch, self.device, self.dtype, self.non_blocking))
        with self.no_sync():
            with t.stage("forward"):
                out = self.model(x)
            with t.stage("loss"):
                loss = self.loss_fn(out, y)
            with t.stage("backward"):
                loss.backward()
        if self.sync is not None:
            with t.stage("grad_sync"):
                self.sync()
        with t.stage("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad()
        return StepRecord(t.end_step(), batch_len(y))


@dataclass
class TrainRun:
    """The raw outcome of training at one batch size in one process."""

    batch_size: int
    prefix: str
    stages: tuple[str, ...]
    loop: LoopResult[StepRecord]
    memory_bytes: int
    memory_kind: str
    world_size: int = 1
    rank: int | None = None
    grad_bytes: int | None = None
    epochs: int = 0

    def metrics(self) -> list[Metric]:
        warm, meas = self.loop.warmup_records, self.loop.measured
        p = self.prefix
        ranks = [self.rank] * len(meas) if self.rank is not None else None

        def metric(name: str, unit: str, hib: bool, fn: Callable[[StepRecord], float], **meta):
            values = [fn(r) for r in meas]
            return Metric(
                f"{p}.{name}",
                unit,
                hib,
                values,
                [fn(r) for r in warm],
                rank=list(ranks) if ranks is not None else None,
                meta={"group": p, **meta},
            )

        def stage(s: str) -> Callable[[StepRecord], float]:
            return lambda r: r.times.stages.get(s, 0.0)

        def residual(r: StepRecord) -> float:
            return r.times.total_s - sum(r.times.stages.get(s, 0.0) for s in self.stages)

        n = self.world_size
        out = [
            metric(
                "step",
                "s",
                False,
                lambda r: r.times.total_s,
                role="total",
                stages=list(self.stages),
            )
        ]
        out += [metric(s, "s", False, stage(s), role="stage", stage=s) for s in self.stages]
        out.append(metric("residual", "s", False, residual, role="residual"))
        out.append(
            metric(
                "samples_per_s",
                "items/s",
                True,
                lambda r: r.samples * n / max(r.times.total_s, 1e-9),
                role="rate",
                per="all processes" if n > 1 else "process",
            )
        )
        if self.grad_bytes and n > 1 and "grad_sync" in self.stages:
            factor = 2 * (n - 1) / n  # ring all-reduce: each byte crosses the bus 2(n−1)/n times
            nbytes = self.grad_bytes
            out.append(
                metric(
                    "allreduce_busbw",
                    "B/s",
                    True,
                    lambda r: nbytes / max(r.times.stages["grad_sync"], 1e-12) * factor,
                    role="other",
                    bytes=nbytes,
                    factor="2(n-1)/n",
                    note="gradient bytes / grad_sync time × 2(n−1)/n; grad_sync includes the "
                    "flatten and copy-back of the gradients",
                )
            )
        return out

    def info(self) -> dict[str, Any]:
        return {
            **self.loop.to_dict(),
            "peak_memory_bytes": self.memory_bytes,
            "memory_kind": self.memory_kind,
            "epochs": self.epochs,
            "world_size": self.world_size,
            "grad_bytes": self.grad_bytes,
        }


def train_one_size(
    cfg: Config,
    spec: DataSpec,
    batch_size: int,
    device: str,
    parallel: Parallel | None = None,
    clock: Clock | None = None,
    on_step: Callable[[int, bool], None] | None = None,
) -> TrainRun:
    """Build the workload fresh (same seeds for every size), then run the measurement loop."""
    par = parallel or SingleProcess()
    w = cfg.workload
    set_determinism(cfg.golden.seed, w.deterministic, w.cudnn_benchmark)
    dtype = model_dtype(w)
    model = build_model(w).to(device=device, dtype=dtype)
    loss_fn = build_loss(w).to(device)
    materialize(model, spec, device, dtype)
    model = par.wrap(model, device)
    optimizer = build_optimizer(w, model)
    loader = make_loader(spec, cfg, batch_size, device, par.sampler(spec.dataset))
    batches = Batches(loader)
    meter = make_memory_meter(device)
    sync = par.grad_sync(model)
    step = TrainStep(
        model,
        loss_fn,
        optimizer,
        batches,
        device,
        dtype,
        make_timer(device, clock),
        sync=sync,
        no_sync=functools.partial(par.no_sync, model),
    )

    def measured_step() -> StepRecord:
        record = step()
        meter.update()
        return record

    model.train()
    meter.reset()
    try:
        loop = run_steps(
            measured_step,
            StopRule.from_config(cfg.throughput),
            value=lambda r: r.times.total_s,
            clock=clock,
            on_step=on_step,
            agree=par.agree,
        )
        peak = meter.peak_bytes()
        epochs = batches.epochs
    finally:
        # drop every reference to the loader's iterator: its workers stop now, not at some
        # later garbage collection while the next batch size is being measured
        batches.close()
        step.batches = loader = None  # type: ignore[assignment]
    return TrainRun(
        batch_size=batch_size,
        prefix=f"train.bs{batch_size}{par.suffix}",
        stages=par.stages,
        loop=loop,
        memory_bytes=peak,
        memory_kind=meter.kind,
        world_size=par.world_size,
        rank=par.rank,
        grad_bytes=sync.nbytes if sync is not None else None,
        epochs=epochs,
    )


# ---------------------------------------------------------------- inference


@dataclass
class InferRun:
    batch_size: int
    warmup: list[float]
    per_run: list[float]
    number_per_run: int
    memory_bytes: int
    memory_kind: str

    @property
    def prefix(self) -> str:
        return f"infer.bs{self.batch_size}"

    def metrics(self) -> list[Metric]:
        p, b = self.prefix, self.batch_size
        meta = {"group": p, "number_per_run": self.number_per_run}
        return [
            Metric(
                f"{p}.batch",
                "s",
                False,
                self.per_run,
                self.warmup,
                meta={**meta, "role": "total", "stages": []},
            ),
            Metric(
                f"{p}.samples_per_s",
                "items/s",
                True,
                [b / t for t in self.per_run],
                [b / t for t in self.warmup],
                meta={**meta, "role": "rate"},
            ),
        ]

    def info(self) -> dict[str, Any]:
        return {
            "stop_reason": "blocked_autorange",
            "blocks": len(self.per_run),
            "number_per_run": self.number_per_run,
            "warmup_runs": len(self.warmup),
            "peak_memory_bytes": self.memory_bytes,
            "memory_kind": self.memory_kind,
        }


def _quiet_cpp_extension_log() -> None:
    # torch.utils.benchmark imports cpp_extension, which logs "No CUDA runtime is found" on
    # every CPU-only machine; that line is noise on stderr, not a finding.
    import logging

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)


def infer_one_size(
    cfg: Config,
    spec: DataSpec,
    batch_size: int,
    device: str,
    clock: Clock | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> InferRun:
    """Forward only, under inference_mode, on one fixed batch already on the device."""
    _quiet_cpp_extension_log()
    from torch.utils import benchmark
    from torch.utils.data import DataLoader

    w = cfg.workload
    set_determinism(cfg.golden.seed, w.deterministic, w.cudnn_benchmark)
    dtype = model_dtype(w)
    model = build_model(w).to(device=device, dtype=dtype)
    materialize(model, spec, device, dtype)
    model.eval()
    if len(spec.dataset) < batch_size:
        raise ValueError(f"the dataset has {len(spec.dataset)} samples: fewer than one batch")
    loader = DataLoader(spec.dataset, batch_size=batch_size, collate_fn=spec.collate_fn)
    x, _ = split_batch(next(iter(loader)))
    del loader
    x = to_device(x, device, dtype)
    meter = make_memory_meter(device)
    timer = make_timer(device, clock)
    meter.reset()
    try:
        with torch.inference_mode():
            warm = []
            for _ in range(max(cfg.throughput.warmup_min, 1)):
                timer.begin_step()
                with timer.stage("forward"):
                    model(x)
                warm.append(timer.end_step().total_s)
            t = benchmark.Timer(
                stmt="model(x)",
                globals={"model": model, "x": x},
                num_threads=torch.get_num_threads(),  # Timer defaults to 1 thread
                label="mlb inference",
                description=f"bs{batch_size}",
            )
            m = t.blocked_autorange(
                callback=callback, min_run_time=max(cfg.throughput.min_time_s, 0.05)
            )
        meter.update()
        peak = meter.peak_bytes()
    finally:
        del model, x
        free_memory()
    per_run = [rt / m.number_per_run for rt in m.raw_times]
    return InferRun(batch_size, warm, per_run, m.number_per_run, peak, meter.kind)


# ---------------------------------------------------------------- summaries (from metrics)


def _ci(values: list[float]) -> dict[str, Any]:
    lo, hi = stats.median_ci(values, CONFIDENCE)
    return {"median": stats.summarize(values).median, "ci_low": lo, "ci_high": hi}


def group_summary(measurements: dict[str, Metric], prefix: str) -> dict[str, Any]:
    """Samples/s (median, bootstrap CI of the median), total time, stage shares and residual
    share (ratios of sums over the aligned per-step values), for `train.bs{B}` or
    `infer.bs{B}` groups; works on pooled (multi-rank, multi-replicate) metrics too."""
    total = next(
        (
            m
            for m in measurements.values()
            if m.meta.get("group") == prefix and m.meta.get("role") == "total"
        ),
        None,
    )
    rate = measurements.get(f"{prefix}.samples_per_s")
    if total is None or not total.values or rate is None:
        return {"n": 0}
    out: dict[str, Any] = {
        "n": len(total.values),
        "confidence": CONFIDENCE,
        "samples_per_s": _ci(rate.values),
        "time_s": _ci(total.values),
    }
    stages = total.meta.get("stages") or []
    if stages:
        sum_total = sum(total.values)
        out["stage_share"] = {
            s: sum(measurements[f"{prefix}.{s}"].values) / sum_total for s in stages
        }
        out["stage_median_s"] = {
            s: stats.summarize(measurements[f"{prefix}.{s}"].values).median for s in stages
        }
        out["residual_share"] = sum(measurements[f"{prefix}.residual"].values) / sum_total
    if total.replicate is not None:
        by_rep: dict[int, list[float]] = {}
        for v, r in zip(rate.values, rate.replicate or [], strict=False):
            by_rep.setdefault(r, []).append(v)
        out["replicate_medians"] = {
            str(r): stats.summarize(v).median for r, v in sorted(by_rep.items())
        }
    return out


# ---------------------------------------------------------------- the sweep


@dataclass
class _Run:
    """Everything one `run_throughput` call accumulates."""

    cfg: Config
    device: str
    result: Result
    spec: DataSpec
    progress: Progress
    clock: Clock
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def entry(self, batch_size: int) -> dict[str, Any]:
        key = str(batch_size)
        if key not in self.entries:
            self.entries[key] = {"batch_size": batch_size, "status": "ok"}
            self.result.data["batch_sizes"][key] = self.entries[key]
        return self.entries[key]

    def failed(self, batch_size: int, part: str, exc: BaseException) -> None:
        oom = is_oom(exc)
        status = "oom" if oom else "error"
        msg = short_error(exc)
        entry = self.entry(batch_size)
        entry[part] = {"status": status, "error": msg}
        if entry["status"] == "ok":
            entry["status"] = status
        entry.setdefault("stop_reason", status)
        what = "out of memory" if oom else "failed"
        self.result.warn(
            "oom" if oom else "batch_size_failed",
            f"batch size {batch_size} ({part}): {what} — {msg}; recorded, the sweep goes on",
            batch_size=batch_size,
            part=part,
        )

    def add_train(self, run: TrainRun) -> None:
        for m in run.metrics():
            self.result.add_metric(m)
        entry = self.entry(run.batch_size)
        key = "train" if not run.prefix.endswith(".ddp") else "train_ddp"
        entry[key] = {**group_summary(self.result.measurements, run.prefix), **run.info()}
        if key == "train" or "stop_reason" not in entry:
            entry["stop_reason"] = run.loop.stop_reason
        if run.loop.stop_reason == "interrupted":
            entry["status"] = "interrupted"

    def add_infer(self, run: InferRun) -> None:
        for m in run.metrics():
            self.result.add_metric(m)
        entry = self.entry(run.batch_size)
        entry["inference"] = {**group_summary(self.result.measurements, run.prefix), **run.info()}
        entry.setdefault("stop_reason", "blocked_autorange")


def _guard(run: _Run, batch_size: int, part: str, fn: Callable[[], Any]) -> Any:
    """Run one part of one batch size; an OOM or a crash there is recorded and the sweep goes
    on. Bad input (MlbError) and Ctrl-C propagate."""
    try:
        return fn()
    except (MlbError, KeyboardInterrupt):
        raise
    except Exception as exc:
        run.failed(batch_size, part, exc)
    free_memory()  # after the except block: the traceback no longer pins the tensors
    return None


def _train_local(run: _Run, batch_size: int) -> None:
    with run.progress.task(f"train bs{batch_size}: warm-up", total=None) as task:
        phase = {"measuring": False}

        def on_step(n: int, measuring: bool) -> None:
            task.advance()
            if measuring and not phase["measuring"]:
                phase["measuring"] = True
                task.update(description=f"train bs{batch_size}: measuring")

        tr = _guard(
            run,
            batch_size,
            "train",
            lambda: train_one_size(
                run.cfg, run.spec, batch_size, run.device, None, run.clock, on_step
            ),
        )
    if tr is not None:
        run.add_train(tr)
        if tr.loop.stop_reason == "interrupted":
            raise KeyboardInterrupt


def _infer_local(run: _Run, batch_size: int) -> None:
    with run.progress.task(f"inference bs{batch_size}", total=None) as task:
        ir = _guard(
            run,
            batch_size,
            "inference",
            lambda: infer_one_size(
                run.cfg, run.spec, batch_size, run.device, run.clock, lambda *_: task.advance()
            ),
        )
    if ir is not None:
        run.add_infer(ir)


def _sweep(run: _Run, train: bool, infer: bool, tele: TelemetrySampler | None = None) -> None:
    for batch_size in run.cfg.throughput.batch_sizes:
        entry = run.entry(batch_size)
        if train:
            with _telemetry_window(entry, "train", tele):
                _train_local(run, batch_size)
        if infer:
            with _telemetry_window(entry, "inference", tele):
                _infer_local(run, batch_size)


@contextlib.contextmanager
def _telemetry_window(
    entry: dict[str, Any], part: str, tele: TelemetrySampler | None
) -> Iterator[None]:
    """Record [start, end] of one part on the sampler's `t_s` clock, so the report can tell
    this batch size's GPU kernel-active share from the rest of the timeline."""
    start = tele.elapsed_s() if tele is not None else None
    try:
        yield
    finally:
        info = entry.get(part)
        if tele is not None and start is not None and isinstance(info, dict):
            info["telemetry_window_s"] = [start, tele.elapsed_s()]


# ---------------------------------------------------------------- verdict and warnings


def _finish(result: Result) -> None:
    """Checks, stability warnings and the overall status, from the data (works for local,
    multi-process and pooled results alike)."""
    entries = result.data.get("batch_sizes", {})
    tolerance = result.config.get("throughput", {}).get("stability_tolerance")
    for key, entry in entries.items():
        for part in ("train", "train_ddp", "inference"):
            info = entry.get(part)
            if not isinstance(info, dict):
                continue
            name = f"{'infer' if part == 'inference' else part.replace('_', '.')}.bs{key}"
            if info.get("status") in ("oom", "error"):
                result.verdict.checks.append(
                    Check(f"{name}.run", "warn", info["status"], None, info.get("error", ""))
                )
                continue
            if part != "inference":
                _train_checks(result, name, info, tolerance)
    for metric in result.measurements.values():
        if metric.meta.get("role") == "total" and len(metric.values) >= 2:
            for w in stats.stability_warnings(metric.values, metric.name):
                result.warn(
                    w.code, w.message, metric=w.metric, value=w.value, threshold=w.threshold
                )
    done = [e for e in entries.values() if e.get("status") in ("ok", "interrupted")]
    if entries and not done and result.status == "complete":
        result.mark("failed", "no batch size could be measured")


def _train_checks(result: Result, name: str, info: dict[str, Any], tolerance: Any) -> None:
    reason = info.get("stop_reason")
    reasons = info.get("stop_reasons")
    stable = reason == "stable" if not reasons else all(r == "stable" for r in reasons)
    msg = (
        ""
        if stable
        else (
            f"stopped by {reason} before the last windows agreed within {tolerance}; "
            "raise throughput.max_time_s / max_steps or quiet the machine"
        )
    )
    result.verdict.checks.append(
        Check(f"{name}.stop_rule", "pass" if stable else "warn", reason, tolerance, msg)
    )
    share = info.get("residual_share")
    if share is not None:
        ok = abs(share) <= RESIDUAL_LIMIT
        result.verdict.checks.append(
            Check(
                f"{name}.residual",
                "pass" if ok else "warn",
                share,
                RESIDUAL_LIMIT,
                ""
                if ok
                else "stages do not add up to the step: time is spent outside them "
                "(Python glue, hooks, the machine being busy)",
            )
        )
    if info.get("warmup_capped"):
        steps = info.get("warmup_steps")
        by = "throughput.max_time_s ended it" if reason == "max_time" else "throughput.warmup_max"
        result.warn(
            "warmup_capped",
            f"{name}: warm-up did not settle (cut after {steps} steps: {by}); measured anyway",
            metric=f"{name}.step",
        )


# ---------------------------------------------------------------- telemetry


def _telemetry_data(
    result: Result, sampler: TelemetrySampler, csv_name: str | None, owned: bool
) -> None:
    overhead = sampler.overhead()
    data: dict[str, Any] = {
        "interval_s": sampler.interval_s,
        "overhead": overhead,
        "summary": sampler.summary(),
        "columns": sampler.columns,
        "owned": owned,
    }
    if owned and csv_name is not None and sampler.csv_error is None:
        result.artifacts["telemetry"] = csv_name
        data["csv"] = csv_name
    else:
        data["csv"] = None
        data["stored"] = (
            f"not written ({sampler.csv_error})"
            if sampler.csv_error
            else "in memory only: no output path was given (use -o to keep the CSV)"
            if owned
            else "by the caller's sampler"
        )
        if sampler.csv_error:
            result.warn("telemetry_csv", f"telemetry CSV not written: {sampler.csv_error}")
    if sampler.gaps:
        result.warn(
            "telemetry_gaps",
            f"telemetry: {sampler.gaps} of {len(sampler.rows)} samples have gaps (failed reads; "
            "see the error column)",
            gaps=sampler.gaps,
        )
    # the CPU share is what the sampler takes from the measured code; its wall time also
    # counts the waits for the GIL while the measured code runs
    if overhead["cpu_overhead_fraction"] > TELEMETRY_OVERHEAD_LIMIT:
        result.warn(
            "telemetry_overhead",
            f"telemetry sampler used {overhead['cpu_overhead_fraction']:.1%} of a core "
            f"(> {TELEMETRY_OVERHEAD_LIMIT:.0%}); raise golden.telemetry_interval_s",
            value=overhead["cpu_overhead_fraction"],
        )
    result.data["telemetry"] = data


# ---------------------------------------------------------------- entry points


def run_throughput(
    cfg: Config,
    progress: Progress | None = None,
    probe: GpuProbe | None = None,
    output_dir: Path | None = None,
    clock: Clock | None = None,
    *,
    telemetry_name: str = "telemetry.csv",
    sampler: TelemetrySampler | None = None,
) -> Result:
    """Measure training and/or inference throughput over `cfg.throughput.batch_sizes`.

    `output_dir`: where the telemetry CSV (`telemetry_name`) is written, beside the result JSON;
    None keeps the timeline in memory. `sampler`: a caller-owned, already running sampler
    (mlb run's, for the whole run); then none is started here. Ctrl-C returns the result so
    far, marked `interrupted`. Bad config raises MlbError; OOM/crash at one size is recorded."""
    progress = progress or NullProgress()
    own_probe = probe is None
    probe = probe or default_probe()
    try:
        if cfg.throughput.repeats > 1:
            return run_replicates(cfg, progress, probe, output_dir, telemetry_name, sampler)
        return _run_once(cfg, progress, probe, output_dir, clock, telemetry_name, sampler)
    finally:
        if own_probe:
            probe.close()


def _prepare(cfg: Config, probe: GpuProbe) -> tuple[str, Result]:
    t, w = cfg.throughput, cfg.workload
    device = resolve_device(w.device)
    if t.nproc > 1 and device.startswith("cuda") and torch.cuda.device_count() < t.nproc:
        raise HardwareUnavailableError(
            f"throughput.nproc: {t.nproc} processes need {t.nproc} GPUs; "
            f"{torch.cuda.device_count()} visible"
        )
    if w.threads:
        torch.set_num_threads(w.threads)
    flags = set_determinism(cfg.golden.seed, w.deterministic, w.cudnn_benchmark)
    result = Result(kind="throughput", config=cfg.to_dict())
    result.environment = fingerprint(cfg.to_dict(), probe, device)
    result.environment["informational"]["determinism"] = flags
    result.data = {
        "device": device,
        "mode": t.mode,
        "nproc": t.nproc,
        "repeats": t.repeats,
        "determinism": flags,
        "timer": make_timer(device).kind,
        "torch_threads": torch.get_num_threads(),
        "stages": list(DIST_STAGES if t.nproc > 1 else TRAIN_STAGES),
        "residual_limit": RESIDUAL_LIMIT,
        "batch_sizes": {},
    }
    return device, result


def _run_once(
    cfg: Config,
    progress: Progress,
    probe: GpuProbe,
    output_dir: Path | None,
    clock: Clock | None,
    telemetry_name: str,
    sampler: TelemetrySampler | None,
) -> Result:
    t = cfg.throughput
    device, result = _prepare(cfg, probe)
    spec = build_dataset(cfg)
    result.data["dataset"] = spec.description
    if spec.description.get("overlong"):
        d = spec.description
        result.warn(
            "overlong_samples",
            f"{d['overlong']} of {d['len']} synthetic text samples were longer than "
            f"workload.max_length={d['max_length']} and were cut to it",
            count=d["overlong"],
            max_length=d["max_length"],
        )
    run = _Run(cfg, device, result, spec, progress, clock or PerfClock())
    owned = sampler is None and t.telemetry
    csv_path = output_dir / telemetry_name if owned and output_dir is not None else None
    tele = sampler
    if owned:
        tele = TelemetrySampler(probe, cfg.golden.telemetry_interval_s, csv_path=csv_path)
    train = t.mode in ("train", "both")
    infer = t.mode in ("inference", "both")
    try:
        with tele if owned else contextlib.nullcontext():
            if t.nproc > 1 and train:
                from mlbaseline.runners.distributed import train_distributed

                train_distributed(run)
                train = False
            _sweep(run, train, infer, tele)
    except MlbError:
        # bad input (a model factory that fails, say) writes nothing: not even the telemetry
        # CSV opened beside the result, which would also block the rerun without --force
        if csv_path is not None:
            csv_path.unlink(missing_ok=True)
        raise
    except KeyboardInterrupt:
        result.mark("interrupted", "Ctrl-C: the result holds what was measured until then")
        for entry in run.entries.values():
            entry.setdefault("stop_reason", "interrupted")
    if tele is not None:
        _telemetry_data(result, tele, telemetry_name if csv_path else None, owned)
    _finish(result)
    return result


# ---------------------------------------------------------------- replicates


def pool_metrics(parts: list[tuple[int, dict[str, Metric]]], label: str) -> dict[str, Metric]:
    """Concatenate each metric's raw values over processes, tagging every value with its
    process id (`label` "rank" or "replicate"); existing rank ids are kept."""
    pooled: dict[str, Metric] = {}
    for ident, metrics in parts:
        for name, m in metrics.items():
            ids = [ident] * len(m.values)
            if name not in pooled:
                pooled[name] = Metric(name, m.unit, m.higher_is_better, [], [], meta=dict(m.meta))
                setattr(pooled[name], label, [])
            p = pooled[name]
            p.values += m.values
            p.warmup += m.warmup
            getattr(p, label).extend(ids)
            if label == "replicate" and m.rank is not None:
                p.rank = (p.rank or []) + list(m.rank)
            elif label == "rank" and m.replicate is not None:
                p.replicate = (p.replicate or []) + list(m.replicate)
    return pooled


def _child_command(config_path: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mlbaseline",
        "throughput",
        "-c",
        str(config_path),
        "--json",
        "--quiet",
    ]


def _run_child(cmd: list[str]) -> tuple[str, str, int, bool]:
    """Run one replicate; on Ctrl-C give the child (which got the SIGINT too) time to write its
    partial result, and pass SIGINT on if it did not."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate()
        return out, err, proc.returncode, False
    except KeyboardInterrupt:
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
        return out, err, proc.returncode, True


def run_replicates(
    cfg: Config,
    progress: Progress,
    probe: GpuProbe,
    output_dir: Path | None,
    telemetry_name: str = "telemetry.csv",
    sampler: TelemetrySampler | None = None,
) -> Result:
    """`repeats` fresh processes (`python -m mlbaseline throughput --json`), pooled: every value
    keeps its replicate id. One telemetry sampler here watches all of them."""
    import yaml

    n = cfg.throughput.repeats
    child = cfg.to_dict()
    child["throughput"] = {**child["throughput"], "repeats": 1, "telemetry": False}
    device, result = _prepare(cfg, probe)
    owned = sampler is None and cfg.throughput.telemetry
    csv_path = output_dir / telemetry_name if owned and output_dir is not None else None
    tele = TelemetrySampler(probe, cfg.golden.telemetry_interval_s, csv_path) if owned else sampler
    children: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="mlb-replicates-") as tmp:
        config_path = Path(tmp) / "config.yaml"
        config_path.write_text(yaml.safe_dump(child, sort_keys=False), encoding="utf-8")
        with (
            tele if owned else contextlib.nullcontext(),
            progress.task(f"replicates (fresh processes, {device})", total=n) as task,
        ):
            for r in range(n):
                out, err, code, interrupted = _run_child(_child_command(config_path))
                doc = _parse_child(out)
                if doc is None:
                    tail = (err.strip().splitlines() or [f"exit code {code}"])[-1]
                    if interrupted:
                        result.mark("interrupted", f"Ctrl-C during replicate {r}")
                    else:
                        result.mark("failed", f"replicate {r} produced no result: {tail}")
                    break
                children.append(doc)
                task.advance()
                if interrupted or doc.status == "interrupted":
                    result.mark("interrupted", f"Ctrl-C during replicate {r}")
                    break
    _pool_replicates(result, children)
    if tele is not None:
        _telemetry_data(result, tele, telemetry_name if csv_path else None, owned)
    _finish(result)
    return result


def _parse_child(out: str) -> Result | None:
    if not out.strip():
        return None
    try:
        return result_from_dict(json.loads(out), "replicate")
    except (ValueError, MlbError):
        return None


def _pool_replicates(result: Result, children: list[Result]) -> None:
    result.measurements = pool_metrics(
        [(i, c.measurements) for i, c in enumerate(children)], "replicate"
    )
    result.data["replicates"] = [
        {
            "replicate": i,
            "status": c.status,
            "pid_note": "fresh process",
            "batch_sizes": c.data.get("batch_sizes", {}),
            "notes": c.notes,
        }
        for i, c in enumerate(children)
    ]
    blocking = [c.environment.get("blocking") for c in children]
    if any(b != blocking[0] for b in blocking[1:]):
        result.warn("replicate_environment", "replicates ran in different environments")
    for i, c in enumerate(children):
        for w in c.warnings:
            if w.get("code") not in ("high_cv", "iqr_10", "iqr_25", "first_outlier"):
                result.warnings.append({**w, "replicate": i})
        if c.status != "complete":
            result.mark(c.status, f"replicate {i}: {c.status}")
    keys = list(dict.fromkeys(k for c in children for k in c.data.get("batch_sizes", {})))
    for key in keys:
        parts = [c.data["batch_sizes"].get(key, {}) for c in children]
        reasons = [p.get("stop_reason") for p in parts]
        entry: dict[str, Any] = {
            "batch_size": int(key),
            "status": "ok"
            if all(p.get("status") == "ok" for p in parts)
            else next(p.get("status") for p in parts if p.get("status") != "ok"),
            "stop_reason": reasons[0] if len(set(reasons)) == 1 else "mixed",
            "stop_reasons": reasons,
        }
        for part, prefix in (
            ("train", f"train.bs{key}"),
            ("train_ddp", f"train.bs{key}.ddp"),
            ("inference", f"infer.bs{key}"),
        ):
            infos = [p[part] for p in parts if isinstance(p.get(part), dict)]
            if not infos:
                continue
            summary = group_summary(result.measurements, prefix)
            entry[part] = {
                **summary,
                "stop_reason": entry["stop_reason"],
                "stop_reasons": [i.get("stop_reason") for i in infos],
                "peak_memory_bytes": max(i.get("peak_memory_bytes") or 0 for i in infos),
                "memory_kind": infos[0].get("memory_kind"),
                "warmup_capped": any(i.get("warmup_capped") for i in infos),
                "warmup_steps": [i.get("warmup_steps") for i in infos],
            }
            bad = [i for i in infos if i.get("status") in ("oom", "error")]
            if bad and not summary.get("n"):
                entry[part].update(status=bad[0]["status"], error=bad[0].get("error", ""))
        result.data["batch_sizes"][key] = entry


__all__ = [
    "DIST_STAGES",
    "TRAIN_STAGES",
    "Batches",
    "InferRun",
    "Parallel",
    "SingleProcess",
    "StepRecord",
    "TrainRun",
    "TrainStep",
    "group_summary",
    "infer_one_size",
    "is_oom",
    "pool_metrics",
    "run_replicates",
    "run_throughput",
    "train_one_size",
]
