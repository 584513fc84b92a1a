"""One batch size, measured in one process: the workload built fresh (`train_one_size`,
`infer_one_size`), and the state one throughput sweep accumulates (`SweepState`), shared by the
local sweep (`runners.throughput`) and the multi-process one (`runners.distributed`): they
append to its records (`runners.throughput_records`), never to a result."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlbaseline.config import Config
from mlbaseline.measure.clock import Clock, PerfClock
from mlbaseline.measure.determinism import set_determinism
from mlbaseline.measure.loop import StopRule, run_steps
from mlbaseline.measure.memory import MemoryMeter, make_memory_meter, workers_peak
from mlbaseline.measure.memory_step import StepMemory, StepMemoryRecorder, make_step_memory
from mlbaseline.measure.pooling import group_summary
from mlbaseline.measure.step import (
    Batches,
    Parallel,
    SingleProcess,
    StepRecord,
    TrainRun,
    TrainStep,
    first_call,
    free_memory,
    is_oom,
    make_precision,
    short_error,
    split_batch,
    to_device,
)
from mlbaseline.measure.timers import make_timer
from mlbaseline.progress import Progress
from mlbaseline.results import Metric
from mlbaseline.runners.throughput_records import Records, SizeRecord
from mlbaseline.workloads.factory import (
    DataSpec,
    build_loss,
    build_model,
    build_optimizer,
    compile_model,
    memory_format,
    model_dtype,
)


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


def train_one_size(
    cfg: Config,
    spec: DataSpec,
    batch_size: int,
    device: str,
    parallel: Parallel | None = None,
    clock: Clock | None = None,
    on_step: Callable[[int, bool], None] | None = None,
    tracer: Callable[[TrainStep], None] | None = None,
) -> TrainRun:
    """Build the workload fresh (same seeds for every size), then run the measurement loop;
    `tracer` (--trace) then runs its profiler window on the same step, after the measurement."""
    par = parallel or SingleProcess()
    step, batches = build_step(cfg, spec, batch_size, device, par, clock)
    meter = make_memory_meter(device)
    step.model.train()
    compile_s = None
    try:
        compile_s = compile_first(step, cfg, clock)
        meter.reset()
        loop = run_steps(
            _metered(step, meter),
            StopRule.from_config(cfg.throughput),
            value=lambda r: r.times.total_s,
            clock=clock,
            on_step=on_step,
            agree=par.agree,
        )
        peak = meter.peak_bytes()
        workers_peak = loader_workers_peak(batches)
        epochs = batches.epochs
        if tracer is not None and loop.stop_reason != "interrupted":
            tracer(step)  # K extra steps: never in the samples, the memory peak or the epochs
    finally:
        # drop every reference to the loader's iterator: its workers stop now, not at some
        # later garbage collection while the next batch size is being measured
        batches.close()
        step.batches = batches = None  # type: ignore[assignment]
    return TrainRun(
        batch_size=batch_size,
        prefix=f"train.bs{batch_size}{par.suffix}",
        stages=par.stages,
        loop=loop,
        memory_bytes=peak,
        memory_kind=meter.kind,
        world_size=par.world_size,
        rank=par.rank,
        grad_bytes=step.sync.nbytes if step.sync is not None else None,
        epochs=epochs,
        compile_s=compile_s,
        accum=step.accum,
        workers_peak=workers_peak,
    )


def _metered(step: TrainStep, meter: Any) -> Callable[[], StepRecord]:
    """The step, with the phase's memory meter read after it: the timer resets its per-step
    peak at each step, which would hide an earlier step's higher peak from the meter."""

    def measured_step() -> StepRecord:
        record = step()
        meter.update()
        if record.memory is not None:
            meter.fold(record.memory.peak)
        return record

    return measured_step


def loader_workers_peak(batches: Batches, proc: Path = Path("/proc")) -> int | None:
    """The DataLoader workers' peak RSS (VmHWM) summed, read at the phase's end while they are
    still alive; None without workers (or where none could be read)."""
    return workers_peak(batches.worker_pids(), proc)


def compile_first(step: TrainStep, cfg: Config, clock: Clock | None) -> float | None:
    """Under workload.compile, run the compiling first step on its own and return its seconds
    (`compile_s`): it is then neither a warm-up nor a measured step. None when not compiled."""
    if cfg.workload.compile == "off":
        return None
    _quiet_cpp_extension_log()  # inductor imports cpp_extension too
    return first_call(step, clock or PerfClock())


def build_step(
    cfg: Config,
    spec: DataSpec,
    batch_size: int,
    device: str,
    par: Parallel,
    clock: Clock | None,
) -> tuple[TrainStep, Batches]:
    """Model, loss, optimizer and loader built fresh under the configured seeds, with the
    workload options (amp, grad_accum, channels_last, compile) applied: the one place a
    training step is built from a config."""
    w = cfg.workload
    set_determinism(cfg.golden.seed, w.deterministic, w.cudnn_benchmark)
    dtype = model_dtype(w)
    precision = make_precision(w.amp, device, dtype)
    fmt = memory_format(w)
    model = build_model(w).to(device=device, dtype=dtype)
    loss_fn = build_loss(w).to(device)
    materialize(model, spec, device, dtype)
    model = par.wrap(model.to(memory_format=fmt), device)
    optimizer = build_optimizer(w, model)
    batches = Batches(make_loader(spec, cfg, batch_size, device, par.sampler(spec.dataset)))
    step = TrainStep(
        compile_model(model, w),
        loss_fn,
        optimizer,
        batches,
        device,
        dtype,
        make_timer(device, clock),
        sync=par.grad_sync(model),
        no_sync=functools.partial(par.no_sync, model),
        precision=precision,
        accum=w.grad_accum,
        memory_format=fmt,
    )
    return step, batches


# ---------------------------------------------------------------- inference


@dataclass
class InferRun:
    batch_size: int
    warmup: list[float]
    per_run: list[float]
    number_per_run: int
    memory_bytes: int
    memory_kind: str
    compile_s: float | None = None  # the first (compiling) call, outside warm-up and measurement
    memory: list[StepMemory] = field(default_factory=list)  # per measured block
    warmup_memory: list[StepMemory] = field(default_factory=list)  # per warm-up call

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
            *self.memory_metrics(),
        ]

    def memory_metrics(self) -> list[Metric]:
        """`infer.bs{B}.mem.peak` per measured block (and `.mem.reserved` on CUDA), where each
        block has its reading (issue 28)."""
        mem, warm = self.memory, self.warmup_memory
        if not mem or len(mem) != len(self.per_run) or len(warm) != len(self.warmup):
            return []
        p = self.prefix
        meta = {"group": p, "role": "memory", "number_per_run": self.number_per_run}
        out = [
            Metric(
                f"{p}.mem.peak",
                "B",
                False,
                [m.peak or 0 for m in mem],
                [m.peak or 0 for m in warm],
                meta={**meta, "memory": "peak", "kind": mem[0].peak_kind},
            ),
        ]
        if mem[0].reserved is not None:
            out.append(
                Metric(
                    f"{p}.mem.reserved",
                    "B",
                    False,
                    [m.reserved or 0 for m in mem],
                    [m.reserved or 0 for m in warm],
                    meta={**meta, "memory": "reserved", "kind": "cuda_max_reserved"},
                )
            )
        return out

    def info(self) -> dict[str, Any]:
        return {
            "stop_reason": "blocked_autorange",
            "blocks": len(self.per_run),
            "number_per_run": self.number_per_run,
            "warmup_runs": len(self.warmup),
            "peak_memory_bytes": self.memory_bytes,
            "memory_kind": self.memory_kind,
            "compile_s": self.compile_s,
        }


def _quiet_cpp_extension_log() -> None:
    # torch.utils.benchmark imports cpp_extension, which logs "No CUDA runtime is found" on
    # every CPU-only machine; that line is noise on stderr, not a finding.
    import logging

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)


def _infer_input(
    spec: DataSpec, batch_size: int, device: str, dtype: torch.dtype, fmt: torch.memory_format
) -> Any:
    """The one fixed input batch inference is timed on, already on the device."""
    from torch.utils.data import DataLoader

    if len(spec.dataset) < batch_size:
        raise ValueError(f"the dataset has {len(spec.dataset)} samples: fewer than one batch")
    loader = DataLoader(spec.dataset, batch_size=batch_size, collate_fn=spec.collate_fn)
    x, _ = split_batch(next(iter(loader)))
    del loader
    x = to_device(x, device, dtype)
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        x = x.contiguous(memory_format=fmt)
    return x


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

    w = cfg.workload
    set_determinism(cfg.golden.seed, w.deterministic, w.cudnn_benchmark)
    dtype = model_dtype(w)
    precision = make_precision(w.amp, device, dtype)
    fmt = memory_format(w)
    model = build_model(w).to(device=device, dtype=dtype)
    materialize(model, spec, device, dtype)
    model = compile_model(model.to(memory_format=fmt).eval(), w)
    x = _infer_input(spec, batch_size, device, dtype, fmt)

    def forward(m: nn.Module = model, inp: Any = x) -> Any:
        with precision.autocast():
            return m(inp)

    meter = make_memory_meter(device)
    timer = make_timer(device, clock)
    meter.reset()
    blocks = BlockMemory(make_step_memory(device), meter, callback)
    compile_s = None
    try:
        with torch.inference_mode():
            if w.compile != "off":  # the compiling first call: neither warm-up nor measured
                compile_s = first_call(forward, clock or PerfClock())
            warm = _infer_warmup(forward, timer, blocks, max(cfg.throughput.warmup_min, 1))
            t = benchmark.Timer(
                stmt="model(x)" if w.amp == "off" else "forward()",
                globals={"model": model, "x": x, "forward": forward},
                num_threads=torch.get_num_threads(),  # Timer defaults to 1 thread
                label="mlb inference",
                description=f"bs{batch_size}",
            )
            blocks.start()
            m = t.blocked_autorange(
                callback=blocks, min_run_time=max(cfg.throughput.min_time_s, 0.05)
            )
        meter.update()
        peak = meter.peak_bytes()
    finally:
        del forward, model, x
        free_memory()
    per_run = [rt / m.number_per_run for rt in m.raw_times]
    run = InferRun(batch_size, warm, per_run, m.number_per_run, peak, meter.kind, compile_s)
    run.memory, run.warmup_memory = blocks.measured, blocks.warmup
    return run


def _infer_warmup(
    forward: Callable[[], Any], timer: Any, blocks: BlockMemory, n: int
) -> list[float]:
    """`n` warm-up calls, each timed as a one-stage step (its memory to `blocks`): seconds."""
    warm = []
    for _ in range(n):
        timer.begin_step()
        with timer.stage("forward"):
            forward()
        times = timer.end_step()
        warm.append(times.total_s)
        blocks.warm(times.memory)
    return warm


class BlockMemory:
    """The memory of each measured block of `blocked_autorange`: the recorder's "step" is reset
    before the first block and again in the callback after each block (outside the timed
    block), so each block has its own peak. Each peak, and each warm-up call's, goes to the
    phase's meter too (the per-call resets would hide an earlier peak from it)."""

    def __init__(
        self,
        recorder: StepMemoryRecorder,
        meter: MemoryMeter,
        callback: Callable[[int, float], None] | None = None,
    ) -> None:
        self.recorder, self.meter, self.callback = recorder, meter, callback
        self.measured: list[StepMemory] = []
        self.warmup: list[StepMemory] = []

    def warm(self, memory: StepMemory | None) -> None:
        if memory is not None:
            self.warmup.append(memory)
            self.meter.fold(memory.peak)

    def start(self) -> None:
        self.recorder.begin_step()

    def __call__(self, number: int, seconds: float) -> None:
        memory = self.recorder.end_step()
        if memory is not None:
            self.measured.append(memory)
            self.meter.fold(memory.peak)
        self.recorder.begin_step()
        if self.callback is not None:
            self.callback(number, seconds)


@dataclass
class SweepState:
    """One `run_throughput` call while it measures (local and multi-process alike): what it
    measures with, and the records it appends to (`records`; the result is built from them
    once, at the end: `runners.throughput.assemble`)."""

    cfg: Config
    device: str
    records: Records
    spec: DataSpec
    progress: Progress
    clock: Clock
    trace: Any = None  # measure.trace.TraceSession under --trace

    def size(self, batch_size: int) -> SizeRecord:
        return self.records.size(batch_size)

    def failed(self, batch_size: int, part: str, exc: BaseException) -> None:
        oom = is_oom(exc)
        status = "oom" if oom else "error"
        msg = short_error(exc)
        size = self.size(batch_size)
        size.parts[part] = {"status": status, "error": msg}
        if size.status == "ok":
            size.status = status
        if size.stop_reason is None:
            size.stop_reason = status
        what = "out of memory" if oom else "failed"
        self.records.note(
            "oom" if oom else "batch_size_failed",
            f"batch size {batch_size} ({part}): {what} — {msg}; recorded, the sweep goes on",
            batch_size=batch_size,
            part=part,
        )

    def add_train(self, run: TrainRun) -> None:
        for m in run.metrics():
            self.records.add_metric(m)
        size = self.size(run.batch_size)
        key = "train" if not run.prefix.endswith(".ddp") else "train_ddp"
        size.parts[key] = {**group_summary(self.records.metrics, run.prefix), **run.info()}
        if key == "train" or size.stop_reason is None:
            size.stop_reason = run.loop.stop_reason
        if run.loop.stop_reason == "interrupted":
            size.status = "interrupted"

    def add_infer(self, run: InferRun) -> None:
        for m in run.metrics():
            self.records.add_metric(m)
        size = self.size(run.batch_size)
        size.parts["inference"] = {
            **group_summary(self.records.metrics, run.prefix),
            **run.info(),
        }
        if size.stop_reason is None:
            size.stop_reason = "blocked_autorange"


__all__ = [
    "InferRun",
    "SweepState",
    "build_step",
    "compile_first",
    "infer_one_size",
    "make_loader",
    "materialize",
    "train_one_size",
]
