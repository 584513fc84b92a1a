"""The instrumentation of `mlb attach`: global hooks that cut an unmodified training script's
run into steps and stages, one step record per training step, handed to a sink.

What is hooked (`install`, in the script's own interpreter, before its first line):
- a **step** is one optimizer step (torch.optim's global step pre/post hooks); several
  outermost backwards before it are its micro-batches (gradient accumulation). A script that
  builds no `torch.optim` optimizer and runs a second backward without a step updates its
  weights by hand: from then on a step ends at the end of the outermost backward (boundary
  "backward"), and the time from there to the next forward, less its data wait and h2d, is
  its `optimizer` stage (the manual update);
- **data wait**: the time inside `DataLoader`'s iterator `__next__`;
- **h2d**: `Tensor.to` / `Tensor.cuda` of a CPU tensor that lands on another device;
- **forward**: the outermost `nn.Module` call (global forward pre/post hooks) while grad is
  enabled and the module trains; a call with grad disabled or in eval mode is **eval**, kept
  apart: never in a step (subtracted from its interval), with the data it drew;
- **loss**: from the end of the forward to the start of the backward (a loss module's call,
  `nn.modules.loss._Loss`, is inside it, not a forward);
- **backward**: the outermost `Tensor.backward` / `torch.autograd.backward`;
- **optimizer**: from the last backward's end to the step's end, and `Optimizer.zero_grad` /
  `clip_grad_norm_` wherever they run in the step (a zero_grad at the next step's start).

The boundaries cut the step's interval (previous step end → this step end) into contiguous
segments, each labelled with a stage or `residual` (what no stage claims): the stages and the
residual add up to the interval exactly, eval left out. Every boundary is a `Marker` mark: the
host clock on CPU, a CUDA event on the current stream on a GPU, whose times are read only once
the step's last event has completed (`query()`, polled when a step ends): nothing in the hot
path synchronizes. Steps wait in a small queue until then.

The hooks never change the script's behaviour: every patched function is called with the same
arguments and its return value or exception passes through unchanged; only the main thread of
the installing process records (a DataLoader worker forked from it records nothing).
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlbaseline.measure.clock import Clock, PerfClock

STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer")
RESIDUAL = "residual"
EVAL = "eval"
MLB = "mlb"  # the sink's own time inside a hook: in no step
# each interval's stage; "lossmod" is a loss module's call (inside the loss stage), "efwd" an
# eval forward, "aux" zero_grad or gradient clipping
LABEL = {
    "data": "data_wait",
    "h2d": "h2d",
    "fwd": "forward",
    "efwd": "forward",
    "lossmod": "loss",
    "bwd": "backward",
    "opt": "optimizer",
    "aux": "optimizer",
}
MAX_PENDING = 64  # steps whose CUDA events have not completed; past it the oldest is waited for


@dataclass(frozen=True)
class HookStep:
    """One training step as the hooks saw it, in seconds: the step interval (eval left out),
    each stage (all of STAGES, 0 where absent), the eval time inside the interval (kept
    apart), micro-batches (backwards per optimizer step), samples (the batch size seen at the
    first forward of each micro-batch, summed) and the step's boundary ("optimizer", or
    "backward" for a manual update)."""

    total_s: float
    stages: dict[str, float]
    eval_s: float = 0.0
    micro_batches: int = 1
    samples: int = 0
    boundary: str = "optimizer"
    batch_size: int = 0  # samples of the step's first micro-batch

    @property
    def residual_s(self) -> float:
        return self.total_s - sum(self.stages.values())


class Sink(Protocol):
    """Where step records go (`runners.attach_child`'s measuring sink, or the A/B turns')."""

    def on_step(self, record: HookStep) -> None: ...


class Marker(Protocol):
    """A point in time at a boundary, readable later without synchronizing."""

    kind: str

    def mark(self) -> Any: ...

    def ready(self, mark: Any) -> bool:
        """True once `mark` (and every mark before it) can be read without waiting."""
        ...

    def wait(self, mark: Any) -> None: ...

    def seconds(self, a: Any, b: Any) -> float: ...


class CpuMarker:
    """Host clock marks (`perf_counter_ns`; a `ManualClock` in tests)."""

    kind = "cpu"

    def __init__(self, clock: Clock | None = None) -> None:
        self.now = (clock or PerfClock()).now_ns

    def mark(self) -> int:
        return self.now()

    def ready(self, mark: Any) -> bool:
        return True

    def wait(self, mark: Any) -> None:
        return None

    def seconds(self, a: int, b: int) -> float:
        return (b - a) / 1e9


class CudaMarker:
    """CUDA events recorded on the current stream: a backward's kernels, queued by the time
    `backward()` returns, lie before the event recorded after it."""

    kind = "cuda"

    def __init__(self) -> None:
        import torch

        self._event = torch.cuda.Event
        self._free: list[Any] = []  # events read already: recorded again, not created anew

    def mark(self) -> Any:
        event = self._free.pop() if self._free else self._event(enable_timing=True)
        event.record()
        return event

    def release(self, marks: list[Any]) -> None:
        self._free.extend(marks)

    def ready(self, mark: Any) -> bool:
        return bool(mark.query())

    def wait(self, mark: Any) -> None:
        mark.synchronize()

    def seconds(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) / 1e3  # ms → s


@dataclass
class _Seg:
    label: str
    a: Any
    b: Any
    eval: bool = False


@dataclass
class _Closed:
    segs: list[_Seg]
    micro_batches: int
    samples: list[int]
    boundary: str


@dataclass
class _Step:
    """The step being cut: its segments since the previous step's end."""

    segs: list[_Seg] = field(default_factory=list)
    backwards: int = 0
    samples: list[int] = field(default_factory=list)
    need_samples: bool = True  # the next train forward starts a micro-batch
    forward_seen: bool = False
    candidate: int | None = None  # segments up to here end the step (after an optimizer step)
    cut: int | None = None  # before a mode is known: where the first backward ended


class Recorder:
    """The step cutter, fed boundary events by the hooks (or by a test, on a fake marker):
    `begin(kind)` / `end()` around an interval (`data`, `h2d`, `fwd`, `efwd`, `lossmod`,
    `bwd`, `opt`, `aux`), `optimizer_created()`. Pure Python, no torch."""

    def __init__(self, sink: Sink, marker: Marker) -> None:
        self.sink, self.marker = sink, marker
        self.off = False
        self.open: str | None = None  # the outermost interval now open
        self.inner = 0  # module calls nested inside it
        self.mode = "undecided"  # "optimizer" | "backward" once known
        self.optimizers = 0
        self.marker_chosen = False
        self._step = _Step()
        self._last: Any = None  # the last boundary's mark
        self._prev = ("start", "end")  # the last boundary: (kind, "begin" | "end")
        self._eval = False
        self._pending: int | None = None  # first data segment since the last other interval
        self._queue: deque[_Closed] = deque()
        self._closure = False  # an optimizer step's closure is running
        self._in_loss = False  # after a train forward, before its backward
        self._undo: tuple[tuple[str, str], int | None] = (self._prev, None)

    # ------------------------------------------------------------ events

    @property
    def need_samples(self) -> bool:
        return self._step.need_samples

    def add_samples(self, samples: int | None) -> None:
        """The batch size of the open forward, found at its end (keyword inputs)."""
        step = self._step
        if samples and step.need_samples:
            step.samples.append(samples)
            step.need_samples = False

    def optimizer_created(self) -> None:
        self.optimizers += 1

    def switch_marker(self, marker: Marker | None) -> None:
        """Another clock from here (the first train forward found the loop on a GPU): what
        was cut so far on the old one is dropped (the first step: warm-up anyway). None:
        keep this one."""
        self.marker_chosen = True
        if marker is None or marker is self.marker:
            return
        self.marker, self._last, self._step = marker, None, _Step()
        self._pending = None
        self._queue.clear()  # marks of the old clock: this one cannot read them

    @property
    def busy(self) -> bool:
        """An interval is open that nothing else may cut (an optimizer step may: its closure)."""
        return self.open is not None and self.open != "opt"

    def begin(self, kind: str, samples: int | None = None) -> bool:
        """An interval of `kind` starts; nested in an open one it is counted, not timed
        (`end()` must follow either way). False: the recorder is off."""
        if self.off:
            return False
        if self.open is not None:
            if self.open != "opt" or self.inner or kind == "opt":
                self.inner += 1
                return True
            # optimizer.step(closure) runs the forward and backward itself (Lightning): they
            # are cut as usual, and the step's end closes the optimizer stage
            self.open, self._closure, self._prev = None, True, ("opt", "begin")
        step = self._step
        if step.candidate is not None:
            if kind == "opt":  # a second optimizer in the same step: the step goes on
                for seg in step.segs[step.candidate :]:
                    if seg.label == RESIDUAL:
                        seg.label = "optimizer"
                step.candidate = None
            elif kind != "aux":
                self._close(step.candidate, "optimizer")
                step = self._step
        if kind == "efwd":
            self._eval_edge(kind)  # the time up to an eval forward is eval's
        self._cut(self._gap(kind))
        if kind != "efwd":
            self._eval_edge(kind)  # the time up to a train forward's data is eval's
        self._undo = (self._prev, self._pending)  # an h2d that moves nothing was none
        if kind in ("data", "h2d") and self._pending is None:
            self._pending = len(self._step.segs)
        if kind in ("bwd", "data", "fwd", "efwd", "opt"):
            self._in_loss = False
        if kind == "fwd":
            step.forward_seen = True
            self.add_samples(samples)
        self.open, self._prev = kind, (kind, "begin")
        self._drain()
        return True

    def end(self, keep: bool = True) -> None:
        """The open interval ends (`keep=False`: an h2d that moved nothing: residual)."""
        if self.off or self.open is None:
            return
        if self.inner:
            self.inner -= 1
            return
        kind, self.open = self.open, None
        if not keep:  # the time goes to whatever it interrupted
            segs = self._step.segs
            self._cut(segs[-1].label if segs else RESIDUAL)
            self._prev, self._pending = self._undo
            self._drain()
            return
        self._cut(LABEL[kind])
        self._prev = (kind, "end")
        if kind == "fwd":
            self._in_loss = True
        if kind not in ("data", "h2d"):
            self._pending = None
        if kind == "bwd":
            self._backward_end()
        elif kind == "opt":
            self._optimizer_end()
        self._drain()

    def opt_post(self) -> None:
        """An optimizer step returned (its post hook)."""
        if self.off:
            return
        if self.open == "opt":
            self.end()
        elif self.open is None and self._closure:
            # the step ran a closure: the optimizer stage is its last backward's end to here
            self._cut(self._gap("opt"))
            self._prev, self._pending = ("opt", "end"), None
            self._optimizer_end()

    def _optimizer_end(self) -> None:
        self._closure = False
        self.mode = "optimizer"
        self._step.candidate = len(self._step.segs)

    def flush(self, block: bool = False) -> None:
        """Hand every step whose marks can be read to the sink (`block`: wait for them)."""
        while self._queue:
            closed = self._queue[0]
            last = closed.segs[-1].b
            if not self.marker.ready(last):
                if not block and len(self._queue) <= MAX_PENDING:
                    return
                self.marker.wait(last)
            self._queue.popleft()
            record = self._resolve(closed)
            release = getattr(self.marker, "release", None)
            if release is not None:  # the step's last mark begins the next step: kept
                release([seg.a for seg in closed.segs])
            self.sink.on_step(record)

    # ------------------------------------------------------------ cutting

    def _gap(self, kind: str) -> str:
        """The label of the time between the last boundary and this `kind`'s start."""
        prev, step = self._prev, self._step
        if self._in_loss and kind in ("bwd", "lossmod", "aux", "h2d"):
            return "loss"  # a forward's end to its backward's start (a zero_grad is cut out)
        if self.mode == "backward" and not step.forward_seen:
            return "optimizer"  # the manual update: backward's end to the next forward
        if prev == ("opt", "begin"):
            return "optimizer"  # inside optimizer.step(closure), before the closure's forward
        if (
            kind in ("opt", "aux")
            and prev[1] == "end"
            and prev[0] in ("bwd", "opt", "aux")
            and step.candidate is None
        ):
            return "optimizer"
        return RESIDUAL

    def _eval_edge(self, kind: str) -> None:
        """An eval forward opens an eval stretch (the data drawn for it included); a train
        forward, backward, optimizer step or zero_grad closes it (the data drawn for that
        forward, and what came after it, is the step's again)."""
        segs = self._step.segs
        if kind == "efwd" and not self._eval:
            self._eval = True
            for seg in segs[self._pending :] if self._pending is not None else ():
                seg.eval = True
        elif kind in ("fwd", "bwd", "opt", "aux") and self._eval:
            self._eval = False
            if kind == "fwd" and self._pending is not None:
                for seg in segs[self._pending :]:
                    seg.eval = False

    def _cut(self, label: str) -> None:
        mark = self.marker.mark()
        if self._last is None:  # the first boundary (on this marker): the first step starts
            self._last = mark
            return
        self._step.segs.append(_Seg(label, self._last, mark, self._eval))
        self._last = mark

    def _backward_end(self) -> None:
        step = self._step
        step.backwards += 1
        step.need_samples = True
        if self.mode == "backward":
            self._close(len(step.segs), "backward")
        elif self.mode == "undecided":
            if step.cut is None:
                step.cut = len(step.segs)
            elif self.optimizers == 0:
                # a second backward and no torch.optim optimizer: a manual update; the step
                # starts at the first backward's end (what came before it is dropped)
                self.mode = "backward"
                step.segs = step.segs[step.cut :]
                step.backwards, step.samples = 1, step.samples[-1:]
                self._close(len(step.segs), "backward")

    def _close(self, upto: int, boundary: str) -> None:
        step = self._step
        if upto == 0:
            return
        micro = step.backwards if boundary == "optimizer" else 1
        closed = _Closed(step.segs[:upto], max(micro, 1), step.samples, boundary)
        rest = _Step(segs=step.segs[upto:])
        self._step, self._pending = rest, None
        self._queue.append(closed)

    def _drain(self) -> None:
        """Hand the steps whose marks can be read to the sink, from inside a hook: the sink's
        own time (the stop rule's tests, say) is cut out as a segment no step counts."""
        queue = self._queue
        if not queue or (len(queue) <= MAX_PENDING and not self.marker.ready(queue[0].segs[-1].b)):
            return
        self.flush()
        if self._last is not None and not self.off:
            mark = self.marker.mark()
            self._step.segs.append(_Seg(MLB, self._last, mark))
            self._last = mark

    def _resolve(self, closed: _Closed) -> HookStep:
        stages = dict.fromkeys(STAGES, 0.0)
        total = eval_s = 0.0
        seconds = self.marker.seconds
        for seg in closed.segs:
            if seg.label == MLB:
                continue
            d = seconds(seg.a, seg.b)
            if seg.eval:
                eval_s += d
                continue
            total += d
            if seg.label != RESIDUAL:
                stages[seg.label] += d
        samples = closed.samples
        return HookStep(
            total_s=total,
            stages=stages,
            eval_s=eval_s,
            micro_batches=closed.micro_batches,
            samples=sum(samples),
            boundary=closed.boundary,
            batch_size=samples[0] if samples else 0,
        )


# ---------------------------------------------------------------- the torch side


def batch_of(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Samples in a forward's input: the first dim of its first tensor argument (the second
    for an RNN that is not batch_first)."""
    import torch

    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if first is None:
        first = next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
    if first is None or first.dim() == 0:
        return None
    dim = 1 if _seq_first(module) else 0
    return int(first.shape[dim]) if first.dim() > dim else int(first.shape[0])


_SEQ_FIRST: dict[type, bool] = {}


def _seq_first(module: Any) -> bool:
    """Whether a model's input is (sequence, batch, …): its first recurrent layer is not
    batch_first (a word-language-model LSTM); found once per model class."""
    import torch

    kind = type(module)
    if kind not in _SEQ_FIRST:
        rnn = next((m for m in module.modules() if isinstance(m, torch.nn.RNNBase)), None)
        _SEQ_FIRST[kind] = rnn is not None and not rnn.batch_first
    return _SEQ_FIRST[kind]


def _to_device(args: tuple[Any, ...], kwargs: dict[str, Any], tensor: type, device: type) -> bool:
    """Whether `Tensor.to(*args, **kwargs)` names a device other than the CPU (a dtype, a
    CPU device or none: not a host-to-device copy)."""
    target = kwargs.get("device") if "device" in kwargs else args[0] if args else None
    if isinstance(target, tensor):
        target = target.device
    if isinstance(target, str):
        return not target.startswith("cpu")
    if isinstance(target, device):
        return target.type != "cpu"
    return isinstance(target, int) and not isinstance(target, bool)


_ACTIVE: list[Recorder] = []  # recorders installed in this process (a fork disables them)


def _disable_all() -> None:
    for rec in _ACTIVE:
        rec.off = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disable_all)


class Hooks:
    """The installed hooks of one recorder; `uninstall()` puts everything back."""

    def __init__(
        self, rec: Recorder, choose_marker: Callable[[bool], Marker | None] | None
    ) -> None:
        self.rec = rec
        self._choose = choose_marker
        self._tid = threading.get_ident()
        self._undo: list[Callable[[], None]] = []

    def install(self) -> Hooks:
        import torch
        import torch.nn.utils.clip_grad as clip_mod
        from torch.nn.modules import module as mod
        from torch.optim import optimizer as opt
        from torch.utils.data import dataloader

        self._loss_type = torch.nn.modules.loss._Loss
        self._grad_enabled = torch.is_grad_enabled
        self._tensor = torch.Tensor
        handles = [
            mod.register_module_forward_pre_hook(self._forward_pre),
            mod.register_module_forward_hook(
                self._forward_post, with_kwargs=True, always_call=True
            ),
            opt.register_optimizer_step_pre_hook(self._opt_pre),
            opt.register_optimizer_step_post_hook(self._opt_post),
        ]
        self._undo += [h.remove for h in handles]
        self._wrap(dataloader._BaseDataLoaderIter, "__next__", "data")
        self._wrap(torch.Tensor, "backward", "bwd")
        self._wrap(torch.autograd, "backward", "bwd")
        self._wrap(opt.Optimizer, "zero_grad", "aux")
        self._wrap(mod.Module, "zero_grad", "aux")
        self._wrap(clip_mod, "clip_grad_norm_", "aux")
        self._wrap(torch.nn.utils, "clip_grad_norm_", "aux")
        self._wrap_h2d(torch.Tensor, "to")
        self._wrap_h2d(torch.Tensor, "cuda")
        self._wrap_init(opt.Optimizer)
        _ACTIVE.append(self.rec)
        return self

    def uninstall(self) -> None:
        self.rec.off = True
        while self._undo:
            self._undo.pop()()
        if self.rec in _ACTIVE:
            _ACTIVE.remove(self.rec)

    def _patch(self, owner: Any, name: str, new: Callable[..., Any]) -> None:
        old = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
        setattr(owner, name, new)
        self._undo.append(lambda: setattr(owner, name, old))

    def _mine(self) -> bool:
        return not self.rec.off and threading.get_ident() == self._tid

    def _wrap(self, owner: Any, name: str, kind: str) -> None:
        orig = getattr(owner, name)
        rec, mine = self.rec, self._mine

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if rec.busy or not mine() or not rec.begin(kind):
                return orig(*args, **kwargs)
            try:
                return orig(*args, **kwargs)
            finally:
                rec.end()

        self._patch(owner, name, wrapper)

    def _wrap_h2d(self, owner: Any, name: str) -> None:
        import torch

        orig = getattr(owner, name)
        rec, mine = self.rec, self._mine
        tensor_type, device_type = torch.Tensor, torch.device

        @functools.wraps(orig)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            # cheap checks first: most calls are dtype casts inside a forward
            if rec.busy or self.device.type != "cpu" or not mine():
                return orig(self, *args, **kwargs)
            if name == "to" and not _to_device(args, kwargs, tensor_type, device_type):
                return orig(self, *args, **kwargs)
            if not rec.begin("h2d"):
                return orig(self, *args, **kwargs)
            moved = False
            try:
                out = orig(self, *args, **kwargs)
                moved = getattr(out, "device", None) is not None and out.device.type != "cpu"
                return out
            finally:
                rec.end(keep=moved)

        self._patch(owner, name, wrapper)

    def _wrap_init(self, owner: Any) -> None:
        orig = owner.__init__
        rec = self.rec

        @functools.wraps(orig)
        def init(*args: Any, **kwargs: Any) -> None:
            rec.optimizer_created()
            orig(*args, **kwargs)

        self._patch(owner, "__init__", init)

    # ------------------------------------------------------------ module and optimizer hooks

    def _forward_pre(self, module: Any, args: tuple[Any, ...]) -> None:
        # a global pre hook sees no keyword arguments: a forward called with keywords only
        # (a Hugging Face model's **batch) gets its batch size in the post hook
        rec = self.rec
        if not self._mine():
            return None
        if rec.busy:
            rec.inner += 1
            return None
        if isinstance(module, self._loss_type):
            rec.begin("lossmod")
            return None
        if not (module.training and self._grad_enabled()):
            rec.begin("efwd")
            return None
        samples = batch_of(module, args, {}) if rec.need_samples else None
        if not rec.marker_chosen:
            chosen = self._choose(self._on_gpu(module, args, {})) if self._choose else None
            rec.switch_marker(chosen)
        rec.begin("fwd", samples)
        return None

    def _on_gpu(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, self._tensor)]
        first = next(iter(module.parameters()), None)
        tensors += [first] if first is not None else []
        return any(t.device.type == "cuda" for t in tensors)

    def _forward_post(self, module: Any, args: Any, kwargs: Any, output: Any = None) -> None:
        # on an exception in the forward, torch calls it without the output
        rec = self.rec
        if self._mine():
            if rec.open == "fwd" and not rec.inner and rec.need_samples and kwargs:
                rec.add_samples(batch_of(module, (), kwargs))
            rec.end()
        return None

    def _opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.rec.busy and self._mine():
            self.rec.begin("opt")

    def _opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.rec.busy and self._mine():
            self.rec.opt_post()


def default_marker(on_gpu: bool) -> Marker | None:
    """The clock of a loop: CUDA events when its first train forward runs on a GPU (None:
    the host clock it started on)."""
    return CudaMarker() if on_gpu else None


def install(
    sink: Sink,
    marker: Marker | None = None,
    choose_marker: Callable[[bool], Marker | None] | None = default_marker,
) -> Hooks:
    """Install the hooks in this process (imports torch); step records go to `sink.on_step`.
    `marker`: the clock until the first train forward, where `choose_marker(on_gpu)` picks
    the loop's (None: keep `marker`)."""
    rec = Recorder(sink, marker or CpuMarker())
    return Hooks(rec, choose_marker).install()


__all__ = [
    "EVAL",
    "RESIDUAL",
    "STAGES",
    "CpuMarker",
    "CudaMarker",
    "HookStep",
    "Hooks",
    "Marker",
    "Recorder",
    "Sink",
    "batch_of",
    "default_marker",
    "install",
]
