"""The training-step core: one timed training step split into stages, the batches it draws,
the device moves, and the raw outcome of a run of steps (`TrainRun`) as metrics.

Per training step (one `TrainStep` call): data wait (blocked in the loader iterator's `next`),
host→device copy, forward, loss, backward, gradient sync (multi-process only), optimizer step
(`optimizer.step()` + `optimizer.zero_grad()`), and the step's own total; residual = total − sum
of stages, per step. How a process relates to others is a `Parallel`: `SingleProcess` here, the
multi-process ones in `runners.distributed`.

With gradient accumulation (`accum` N > 1) one step is still one optimizer step: N micro-batches,
each drawn, copied, run forward, scored and back-propagated (each loss divided by N, so the
gradient is the mean over the N micro-batches), then one gradient sync and one optimizer step.
The data_wait / h2d / forward / loss / backward stages are the sums over the N micro-batches, and
the step's samples are N × the batch size. Mixed precision is a `Precision`: autocast around
forward and loss, and with float16 on CUDA a GradScaler around backward and the optimizer step.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from mlbaseline.errors import ConfigError, DatasetError
from mlbaseline.measure.clock import Clock
from mlbaseline.measure.loop import Decision, LoopResult
from mlbaseline.measure.memory_step import StepMemory
from mlbaseline.measure.timers import StageTimer, StepTimes
from mlbaseline.results import Metric

TRAIN_STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer")
DIST_STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "grad_sync", "optimizer")

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
        try:
            return next(self._it)
        except StopIteration:  # a fresh epoch with no batch: every epoch is empty
            raise DatasetError(
                "the DataLoader yields no batches (an empty dataset, or drop_last with fewer "
                "samples than the batch size)"
            ) from None

    def worker_pids(self) -> list[int]:
        """The loader's worker processes (persistent workers: alive until `close`)."""
        workers = getattr(self._it, "_workers", None) or []  # torch's iterator keeps them there
        return [w.pid for w in workers if getattr(w, "pid", None) is not None]

    def close(self) -> None:
        self._it = None
        self.loader = None


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
    """One step: its times, samples, and memory (`times.memory`: the bytes each stage left
    held and the step's peak, where the timer had a memory recorder)."""

    times: StepTimes
    samples: int

    @property
    def memory(self) -> StepMemory | None:
        return self.times.memory


class GradScalerLike(Protocol):
    """What a step needs of `torch.amp.GradScaler` (a fake stands in for it on CPU)."""

    def scale(self, loss: torch.Tensor) -> torch.Tensor: ...

    def step(self, optimizer: torch.optim.Optimizer) -> Any: ...

    def update(self) -> None: ...


AMP_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


class Precision:
    """Autocast and loss scaling of one training step. `off` changes nothing; bfloat16 and
    float16 autocast forward and loss; a scaler (float16 on CUDA: its gradients underflow
    without one) scales the loss before backward and unscales in the optimizer step."""

    def __init__(
        self, amp: str = "off", device_type: str = "cpu", scaler: GradScalerLike | None = None
    ) -> None:
        self.amp, self.device_type, self.scaler = amp, device_type, scaler

    def autocast(self) -> Any:
        if self.amp == "off":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=AMP_DTYPES[self.amp])

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()


def make_precision(
    amp: str,
    device: str,
    dtype: torch.dtype,
    scaler_factory: Callable[[], GradScalerLike] | None = None,
) -> Precision:
    """The `Precision` for `workload.amp` on `device`; a combination that cannot run is a
    ConfigError. `scaler_factory` builds the GradScaler (tests pass a fake)."""
    if amp == "off":
        return Precision()
    if amp not in AMP_DTYPES:
        raise ConfigError(f"workload.amp: {amp!r} is not one of off, {', '.join(AMP_DTYPES)}")
    if dtype != torch.float32:
        raise ConfigError(
            "workload.amp: autocast needs a float32 model (workload.dtype: float32); "
            "a half-precision model has nothing to autocast"
        )
    device_type = device.split(":")[0]
    if amp == "float16" and device_type != "cuda":
        raise ConfigError(
            "workload.amp: float16 (autocast + GradScaler) needs CUDA; on CPU use bfloat16"
        )
    scaler = None
    if amp == "float16":
        scaler = (scaler_factory or (lambda: torch.amp.GradScaler("cuda")))()
    return Precision(amp, device_type, scaler)


class TrainStep:
    """One timed training step (one optimizer step over `accum` micro-batches); every stage
    in its own timer block."""

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
        *,
        precision: Precision | None = None,
        accum: int = 1,
        memory_format: torch.memory_format = torch.contiguous_format,
    ) -> None:
        if accum < 1:
            raise ValueError("accum must be >= 1")
        self.model, self.loss_fn, self.optimizer = model, loss_fn, optimizer
        self.batches, self.device, self.dtype, self.timer = batches, device, dtype, timer
        self.sync, self.no_sync = sync, no_sync
        self.precision = precision or Precision()
        self.accum, self.memory_format = accum, memory_format
        self.non_blocking = device.startswith("cuda")
        # built once, not per micro-batch: autocast and nullcontext re-enter in sequence
        self._autocast = self.precision.autocast()
        self._skip_sync = getattr(model, "no_sync", None)

    def _inputs(self, batch: Any) -> tuple[Any, Any]:
        x, y = split_batch(to_device(batch, self.device, self.dtype, self.non_blocking))
        if self.memory_format is not torch.contiguous_format and _is_image(x):
            x = x.contiguous(memory_format=self.memory_format)
        return x, y

    def _micro_batch(self, last: bool) -> int:
        t = self.timer
        with t.stage("data_wait"):
            batch = next(self.batches)
        with t.stage("h2d"):
            x, y = self._inputs(batch)
        # DDP syncs in backward: skip it on all but the last micro-batch, then the parallel
        # mode decides (explicit all-reduce keeps it off there too)
        skip = self._skip_sync
        with self.no_sync() if last or skip is None else skip():
            with t.stage("forward"), self._autocast:
                out = self.model(x)
            with t.stage("loss"), self._autocast:
                loss = self.loss_fn(out, y)
                if self.accum > 1:
                    loss = loss / self.accum
            with t.stage("backward"):
                self.precision.backward(loss)
        return batch_len(y)

    def __call__(self) -> StepRecord:
        t = self.timer
        t.begin_step()
        samples = sum(self._micro_batch(i == self.accum - 1) for i in range(self.accum))
        if self.sync is not None:
            with t.stage("grad_sync"):
                self.sync()
        with t.stage("optimizer"):
            self.precision.step(self.optimizer)
            self.optimizer.zero_grad()
        return StepRecord(t.end_step(), samples)


def _is_image(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.dim() == 4


def first_call(step: Callable[[], Any], clock: Clock, what: str = "workload.compile") -> float:
    """Run one call outside the measurement and return its wall seconds: under torch.compile
    the first call traces and compiles (forward, and backward in a training step) and also
    does that call's own work. A compile failure is one ConfigError line, not a traceback."""
    t0 = clock.now_ns()
    try:
        step()
    except Exception as exc:
        from torch._dynamo.exc import TorchDynamoException  # InductorError derives from it

        if isinstance(exc, TorchDynamoException):
            raise ConfigError(
                f"{what}: torch.compile failed at the first call ({short_error(exc)}); "
                "set workload.compile: off to measure eagerly"
            ) from None
        raise
    return (clock.now_ns() - t0) / 1e9


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
    compile_s: float | None = None  # the first (compiling) step, outside warm-up and measurement
    accum: int = 1
    workers_peak: int | None = None  # summed VmHWM of the DataLoader workers over the phase

    def _metric(
        self,
        name: str,
        unit: str,
        hib: bool,
        fn: Callable[[StepRecord], float],
        only: Callable[[StepRecord], bool] | None = None,
        **meta: Any,
    ) -> Metric:
        """A metric over the measured steps (warm-up kept apart); `only`: over those it keeps."""
        warm, meas = self.loop.warmup_records, self.loop.measured
        if only is not None:
            warm, meas = [r for r in warm if only(r)], [r for r in meas if only(r)]
        p = self.prefix
        ranks = [self.rank] * len(meas) if self.rank is not None else None
        return Metric(
            f"{p}.{name}",
            unit,
            hib,
            [fn(r) for r in meas],
            [fn(r) for r in warm],
            rank=list(ranks) if ranks is not None else None,
            meta={"group": p, **meta},
        )

    def metrics(self) -> list[Metric]:
        metric = self._metric

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
            out.append(self._busbw())
        return out + self.memory_metrics()

    def memory_metrics(self) -> list[Metric]:
        """`{prefix}.mem.*` (issue 28): per step the peak (`mem.peak`), on CUDA the peak reserved
        pool (`mem.reserved`), per stage the bytes it left held (`mem.{stage}`); per phase the
        DataLoader workers' summed peak RSS (`mem.workers_peak`). Over the steps that were read:
        every step, or on `mlb attach`'s host clock one in several (`measure.step_cutter`'s
        MEMORY_EVERY); none where no measured step was."""
        workers = [] if self.workers_peak is None else [self._workers_metric(self.workers_peak)]
        read = [r for r in self.loop.measured if r.memory is not None]
        if not read:
            return workers
        first = read[0].memory
        assert first is not None  # kept above

        def has(r: StepRecord) -> bool:
            return r.memory is not None

        def mem(r: StepRecord) -> StepMemory:
            return r.memory  # type: ignore[return-value]  # `only=has` on every metric

        def metric(name: str, fn: Callable[[StepMemory], float], **meta: Any) -> Metric:
            return self._metric(name, "B", False, lambda r: fn(mem(r)), has, role="memory", **meta)

        out = [metric("mem.peak", lambda m: m.peak or 0, memory="peak", kind=first.peak_kind)]
        if first.reserved is not None:
            out.append(
                metric(
                    "mem.reserved",
                    lambda m: m.reserved or 0,
                    memory="reserved",
                    kind="cuda_max_reserved",
                )
            )
        for s in self.stages:
            out.append(
                metric(
                    f"mem.{s}",
                    lambda m, s=s: m.held.get(s, 0),
                    memory="held",
                    stage=s,
                    kind=first.kind,
                )
            )
        return out + workers

    def _workers_metric(self, nbytes: int) -> Metric:
        p = self.prefix
        return Metric(
            f"{p}.mem.workers_peak",
            "B",
            False,
            [nbytes],
            rank=[self.rank] if self.rank is not None else None,
            meta={
                "group": p,
                "role": "memory",
                "memory": "workers_peak",
                "per": "phase",
                "kind": "cpu_rss_hwm_workers_sum",
                "note": "VmHWM summed over the DataLoader worker processes; pages they "
                "share with the main process count in each",
            },
        )

    def _busbw(self) -> Metric:
        n = self.world_size
        factor = 2 * (n - 1) / n  # ring all-reduce: each byte crosses the bus 2(n−1)/n times
        nbytes = self.grad_bytes or 0
        return self._metric(
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

    def info(self) -> dict[str, Any]:
        return {
            **self.loop.to_dict(),
            "peak_memory_bytes": self.memory_bytes,
            "memory_kind": self.memory_kind,
            "epochs": self.epochs,
            "world_size": self.world_size,
            "grad_bytes": self.grad_bytes,
            "grad_accum": self.accum,
            "samples_per_step": self.batch_size * self.accum,
            "compile_s": self.compile_s,
        }


__all__ = [
    "AMP_DTYPES",
    "DIST_STAGES",
    "TRAIN_STAGES",
    "Batches",
    "GradScalerLike",
    "GradSync",
    "Parallel",
    "Precision",
    "SingleProcess",
    "StepRecord",
    "TrainRun",
    "TrainStep",
    "batch_len",
    "first_call",
    "free_memory",
    "is_oom",
    "make_precision",
    "short_error",
    "split_batch",
    "to_device",
]
