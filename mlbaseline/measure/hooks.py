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
- **h2d**: `Tensor.to(device)` / `Tensor.cuda` of a CPU tensor outside the other stages (the
  batch's move; on a CPU-only run a move to the CPU, a near no-op: still the script's h2d);
- **forward**: the outermost `nn.Module` call (`Module.__call__` patched: global forward
  hooks would send every inner module down torch's slow path) while grad is enabled and the
  module trains; a call with grad disabled or in eval mode is **eval**, kept
  apart: never in a step (subtracted from its interval), with the data it drew;
- **loss**: from the end of the forward to the start of the backward (a loss module's call,
  `nn.modules.loss._Loss`, is inside it, not a forward; a zero_grad there is optimizer);
- **backward**: the outermost `torch.autograd.backward`, which `Tensor.backward` calls (its
  own few lines before that call are in the loss stage);
- **optimizer**: from the last backward's end to the step's end, `Optimizer.zero_grad`,
  `Module.zero_grad`, `clip_grad_norm_` and a learning-rate scheduler's `step` wherever they
  run in the step (a zero_grad at the
  next step's start), and inside `optimizer.step(closure)` (Lightning) the time before the
  closure's forward.

The boundaries go to the step cutter (`measure.step_cutter.Recorder`), which cuts the step's
interval (previous step end → this step end) into contiguous segments, each labelled with a
stage or `residual` (what no stage claims): the stages and the residual add up to the interval
exactly, eval and the sink's own time (the stop rule's tests) left out. Every boundary is a
`Marker` mark: the host clock on CPU, a CUDA event on the current stream when the first train
forward runs on a GPU, whose times are read only once the step's last event has completed
(`query()`, polled at the boundaries): nothing in the hot path synchronizes. Steps wait in a
small queue until then; a step is handed over at the next step's first boundary, or, to a sink
that takes its steps in batches (the measuring sink), with the batch (on the host clock the
boundaries are then logged and cut at an optimizer step: `step_cutter.Recorder._replay`).

Memory (issue 28): with `memory=True` (the default) the cutter reads the per-step memory
recorder of `measure.memory_step` (`make_step_memory`, the stage timer's) at every boundary:
the CPU one (malloc's in-use bytes, peak RSS) until the first train forward finds the loop on
a GPU, the CUDA one (the caching allocator's counters) from then on. Each step record then
carries the bytes each stage left held (`forward`: the activations) and the step's peak.

The hooks never change the script's behaviour: every patched function is called with the same
arguments and its return value or exception passes through unchanged; only the main thread of
the installing process records (a DataLoader worker forked from it records nothing).
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable
from threading import get_ident
from typing import Any

from mlbaseline.measure.memory_step import StepMemoryRecorder, make_step_memory
from mlbaseline.measure.step_cutter import (
    EVAL,
    RESIDUAL,
    STAGES,
    CpuMarker,
    CudaMarker,
    HookStep,
    Marker,
    Recorder,
    Sink,
)
from mlbaseline.measure.step_log import _BEGIN, _END, entry


def batch_of(
    module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], tensor: type | None = None
) -> int | None:
    """Samples in a forward's input: the first dim of its first tensor argument (the second
    for an RNN that is not batch_first). `tensor`: torch.Tensor (given by the hot path)."""
    if tensor is None:
        import torch

        tensor = torch.Tensor
    first = args[0] if args else None
    if not isinstance(first, tensor):  # the batch is most often the first argument
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, tensor)), None)
        if first is None:
            return None
    n = first.dim()
    if n == 0:
        return None
    dim = _SEQ_DIM.get(type(module))
    if dim is None:
        dim = _SEQ_DIM[type(module)] = 1 if _seq_first(module) else 0
    return int(first.size(dim if n > dim else 0))


# each model class's batch dim (1: a recurrent model that is not batch_first), found once
_SEQ_DIM: dict[type, int] = {}


def _seq_first(module: Any) -> bool:
    """Whether a model's input is (sequence, batch, …): its first recurrent layer is not
    batch_first (a word-language-model LSTM)."""
    import torch

    rnn = next((m for m in module.modules() if isinstance(m, torch.nn.RNNBase)), None)
    return rnn is not None and not rnn.batch_first


def _to_device(args: tuple[Any, ...], kwargs: dict[str, Any], tensor: type, device: type) -> bool:
    """Whether `Tensor.to(*args, **kwargs)` moves the tensor to a device it names: the CPU
    too (a CPU-only run's batch move, a near no-op, is still its h2d step); a dtype alone is
    a cast, not a move."""
    target = kwargs.get("device") if "device" in kwargs else args[0] if args else None
    if isinstance(target, tensor):
        return True
    if isinstance(target, (str, device)):
        return True
    return isinstance(target, int) and not isinstance(target, bool)


def _subclasses(cls: type) -> list[type]:
    """A class and every subclass defined so far (torch's schedulers: some override `step`)."""
    out, queue = [], [cls]
    while queue:
        kind = queue.pop()
        if kind not in out:
            out.append(kind)
            queue += kind.__subclasses__()
    return out


def _torch_call(call: Any) -> bool:
    """Whether `Module.__call__` is torch's `_wrapped_call_impl` as this module knows it (the
    compiled call if there is one, else `_call_impl`), so that the patched call may do its two
    lines itself for a nested module (the model's layers: most calls) instead of calling it:
    one Python frame fewer each. Any other body (another torch, another patch): called."""
    code = getattr(call, "__code__", None)
    return (
        getattr(call, "__name__", "") == "_wrapped_call_impl"
        and code is not None
        and set(code.co_names) == {"_compiled_call_impl", "_call_impl"}
    )


_OPT_BEGIN = entry(_BEGIN, "opt")  # an optimizer step's begin's code in the log
CLIP_NAMES = ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_")
_ACTIVE: list[Recorder] = []  # recorders installed in this process (a fork disables them)


def _disable_all() -> None:
    for rec in _ACTIVE:
        rec.turn_off()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disable_all)


class Hooks:
    """The installed hooks of one recorder; `uninstall()` puts everything back."""

    def __init__(
        self, rec: Recorder, choose_marker: Callable[[bool], Marker | None] | None
    ) -> None:
        self.rec = rec
        self._choose = choose_marker
        self._tid = rec.tid = threading.get_ident()
        # (owner, name, wrapper, original) of each patch; the global optimizer step hooks' handles
        self._patched: list[tuple[Any, str, Any, Any]] = []
        self._handles: list[Any] = []
        self._stepping = 0  # optimizer steps inside the step wrapper (its hooks then idle)
        self._global_hooks = True  # whether torch's global step hooks are needed (`install`)
        self._iters: weakref.WeakSet[Any] = weakref.WeakSet()  # multi-process loader iterators

    def install(self) -> Hooks:
        import torch
        import torch.nn.utils.clip_grad as clip_mod
        from torch.nn.modules import module as mod
        from torch.optim import optimizer as opt
        from torch.utils.data import dataloader

        self._loss_type = torch.nn.modules.loss._Loss
        self._grad_enabled = torch.is_grad_enabled
        self._tensor = torch.Tensor
        self._wrap_call(mod.Module)
        # torch's global step hooks serve only an optimizer class whose `step` torch wrapped
        # before now: a class first made from here on goes through the step factory's wrapper
        # (below), and without them torch's wrapper calls no hook of ours on each step (two
        # calls a step that would return at once under the wrapper: `mlb attach`'s case)
        self._global_hooks = any(
            getattr(kind.__dict__.get("step"), "hooked", False)
            for kind in _subclasses(opt.Optimizer)
        )
        self._register_step_hooks()
        self._wrap(dataloader._BaseDataLoaderIter, "__next__", "data")
        self._watch_workers(dataloader._MultiProcessingDataLoaderIter)
        # `Tensor.backward` calls `torch.autograd.backward` (looked up at each call): one
        # wrapper times both (a second, around `Tensor.backward`, was a frame more a step)
        self._wrap(torch.autograd, "backward", "bwd")
        self._wrap(opt.Optimizer, "zero_grad", "aux")
        self._wrap(mod.Module, "zero_grad", "aux")
        # gradient clipping, by any of its names (accelerate calls the two halves itself)
        for owner, names in (
            (clip_mod, (*CLIP_NAMES, "_get_total_norm", "_clip_grads_with_norm_")),
            (torch.nn.utils, (*CLIP_NAMES, "get_total_norm", "clip_grads_with_norm_")),
        ):
            for name in names:
                if callable(getattr(owner, name, None)):
                    self._wrap(owner, name, "aux")
        # a learning-rate scheduler's step (after the optimizer's, or at the next step's start)
        # is the update's bookkeeping: optimizer, like a zero_grad, not residual
        for owner in _subclasses(torch.optim.lr_scheduler.LRScheduler):
            if "step" in owner.__dict__:
                self._wrap(owner, "step", "aux")
        self._wrap_h2d(torch.Tensor, "to")
        self._wrap_h2d(torch.Tensor, "cuda")
        self._wrap_init(opt.Optimizer)
        self._wrap_step_factory(opt.Optimizer)
        _ACTIVE.append(self.rec)
        return self

    def uninstall(self) -> None:
        self.rec.turn_off()
        self.suspend()
        self._patched.clear()
        if self.rec in _ACTIVE:
            _ACTIVE.remove(self.rec)

    def suspend(self) -> None:
        """Put torch's own functions back, the recorder kept as it is (`resume()` puts the
        hooks back): `make bench` alternates hooked and plain steps over one recorder."""
        while self._handles:
            self._handles.pop().remove()
        for owner, name, _new, old in reversed(self._patched):
            setattr(owner, name, old)

    def resume(self) -> None:
        for owner, name, new, _old in self._patched:
            setattr(owner, name, new)
        self._register_step_hooks()

    def _register_step_hooks(self) -> None:
        from torch.optim import optimizer as opt

        if not self._global_hooks:
            return
        self._handles += [
            opt.register_optimizer_step_pre_hook(self._opt_pre),
            opt.register_optimizer_step_post_hook(self._opt_post),
        ]

    def _patch(self, owner: Any, name: str, new: Callable[..., Any]) -> None:
        old = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
        setattr(owner, name, new)
        self._patched.append((owner, name, new, old))

    def _mine(self) -> bool:
        return not self.rec.off and threading.get_ident() == self._tid

    def _wrap(self, owner: Any, name: str, kind: str) -> None:
        orig = getattr(owner, name)
        rec = self.rec
        begin, end = entry(_BEGIN, kind), entry(_END, kind)  # their codes in the log

        # (what a boundary reads is in `rec`'s first cache line, not in closure cells: each
        # cell is an object of its own, a cache line more after torch's work evicted it)
        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # `_mine()` inlined: this runs for every data batch, backward and zero_grad
            if rec.busy:
                return orig(*args, **kwargs)
            if rec.hot and rec.open is None and get_ident() == rec.tid:
                log = rec.log
                if len(log) < rec.max_log:
                    # the hot path (`Recorder.hot`): `begin` and `end`'s logging, written out
                    rec.open, rec.busy = kind, True
                    now = rec.now
                    log += (begin, now())  # (one step: `step_log`)
                    try:
                        return orig(*args, **kwargs)
                    finally:
                        if rec.hot:
                            rec.open, rec.busy = None, False
                            now = rec.now
                            log += (end, now())
                        else:
                            rec.end()
            if rec.off or get_ident() != rec.tid or not rec.begin(kind):
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
            done = False
            try:
                out = orig(self, *args, **kwargs)
                done = True
                return out
            finally:
                rec.end(keep=done)  # a move that raised was none

        self._patch(owner, name, wrapper)

    def _watch_workers(self, owner: Any) -> None:
        """Keep (weakly) each multi-process DataLoader iterator the script makes, once per
        epoch at most: its workers' peak memory is read at the end (`worker_pids`)."""
        orig = owner.__init__
        iters = self._iters

        @functools.wraps(orig)
        def init(it: Any, *args: Any, **kwargs: Any) -> None:
            orig(it, *args, **kwargs)
            iters.add(it)

        self._patch(owner, "__init__", init)

    def worker_pids(self) -> list[int]:
        """The worker processes of the script's live multi-process DataLoader iterators."""
        workers = [w for it in list(self._iters) for w in getattr(it, "_workers", None) or []]
        return list(dict.fromkeys(w.pid for w in workers if getattr(w, "pid", None)))

    def _wrap_init(self, owner: Any) -> None:
        orig = owner.__init__
        rec = self.rec

        @functools.wraps(orig)
        def init(*args: Any, **kwargs: Any) -> None:
            rec.optimizer_created()
            orig(*args, **kwargs)

        self._patch(owner, "__init__", init)

    # ------------------------------------------------------------ module and optimizer hooks

    def _wrap_call(self, owner: Any) -> None:
        """`nn.Module.__call__`, patched (global forward hooks send every module call down
        torch's slow path): the outermost call is timed, one inside any interval goes straight
        on. A loss module's call is `lossmod`, one without grad or in eval mode `efwd`, else a
        train forward `fwd`, whose batch size it reads (the first, its device). Written out,
        not in helper calls: each costs microseconds in the caches a step left cold."""
        orig = owner.__call__
        rec, hooks, tensor = self.rec, self, self._tensor
        loss_type, grad_enabled, seq_dim = self._loss_type, self._grad_enabled, _SEQ_DIM
        begin, end = entry(_BEGIN, "fwd"), entry(_END, "fwd")  # (`_wrap`'s)
        inline = _torch_call(orig)

        @functools.wraps(orig)
        def call(module: Any, *args: Any, **kwargs: Any) -> Any:
            if rec.busy:  # a call inside a timed interval (most calls): straight on
                if inline:  # torch's own `_wrapped_call_impl`, its two lines here: no frame more
                    compiled = module._compiled_call_impl
                    if compiled is not None:
                        return compiled(*args, **kwargs)
                    return module._call_impl(*args, **kwargs)
                return orig(module, *args, **kwargs)
            if rec.off or get_ident() != rec.tid:
                return orig(module, *args, **kwargs)
            samples = None
            if isinstance(module, loss_type):
                kind = "lossmod"
            elif not (module.training and grad_enabled()):
                kind = "efwd"
            else:
                kind = "fwd"
                first, dim = args[0] if args else None, seq_dim.get(type(module))
                if isinstance(first, tensor) and dim is not None and first.dim() > dim:
                    samples = first.size(dim)  # `batch_of`'s common case, written out
                else:
                    samples = batch_of(module, args, kwargs, tensor)
                if not rec.marker_chosen:
                    hooks._choose_marker(module, args, kwargs)
                log = rec.log
                if rec.hot and rec.open is None and len(log) < rec.max_log:
                    # the hot path, as in `_wrap` (a shared helper: the call this saves)
                    rec.open, rec.busy = kind, True
                    now = rec.now
                    log += ((samples or 0) << 8 | begin, now())
                    try:
                        return orig(module, *args, **kwargs)
                    finally:
                        if rec.hot:
                            rec.open, rec.busy = None, False
                            now = rec.now
                            log += (end, now())
                        else:
                            rec.end()
            if not rec.begin(kind, samples):
                return orig(module, *args, **kwargs)
            try:
                return orig(module, *args, **kwargs)
            finally:
                rec.end()

        self._patch(owner, "__call__", call)

    def _choose_marker(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """At the first train forward: the loop's clock, by where it runs."""
        chosen = self._choose(self._on_gpu(module, args, kwargs)) if self._choose else None
        self.rec.switch_marker(chosen)

    def _on_gpu(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, self._tensor)]
        first = next(iter(module.parameters()), None)
        tensors += [first] if first is not None else []
        return any(t.device.type == "cuda" for t in tensors)

    def _wrap_step_factory(self, owner: Any) -> None:
        """torch wraps each optimizer class's `step` once, at its first instance, in
        `Optimizer.profile_hook_step` (a profiler range around the step hooks). Wrapping that
        factory times the whole `step()` call, the range's own cost included; the global step
        hooks then stand by for a class wrapped before the hooks were installed."""
        factory = owner.__dict__["profile_hook_step"].__func__
        rec, mine, hooks = self.rec, self._mine, self

        def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
            stepped = factory(func)

            @functools.wraps(stepped)
            def step(*args: Any, **kwargs: Any) -> Any:
                if rec.busy:
                    return stepped(*args, **kwargs)
                if (
                    rec.hot
                    and rec.open is None
                    and get_ident() == rec.tid
                    and len(rec.log) < rec.max_log
                ):
                    rec.open = "opt"  # the hot path (`Recorder.hot`): `begin`'s logging
                    now = rec.now
                    rec.log += (_OPT_BEGIN, now())
                elif not mine() or not rec.begin("opt"):
                    return stepped(*args, **kwargs)
                hooks._stepping += 1
                try:
                    return stepped(*args, **kwargs)
                finally:
                    hooks._stepping -= 1
                    rec.opt_post()

            return step

        self._patch(owner, "profile_hook_step", staticmethod(profile_hook_step))

    def _opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        rec = self.rec
        if self._stepping or rec.busy or rec.off or get_ident() != self._tid:
            return
        if rec.hot and rec.open is None and len(rec.log) < rec.max_log:
            rec.open = "opt"  # the hot path (`Recorder.hot`): `begin`'s logging, written out
            now = rec.now
            rec.log += (_OPT_BEGIN, now())
        else:
            rec.begin("opt")

    def _opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        rec = self.rec
        if not (self._stepping or rec.busy or rec.off) and get_ident() == self._tid:
            rec.opt_post()


def default_marker(on_gpu: bool) -> Marker | None:
    """The clock of a loop: CUDA events when its first train forward runs on a GPU (None:
    the host clock it started on)."""
    return CudaMarker() if on_gpu else None


def step_memory(kind: str) -> StepMemoryRecorder:
    """The memory recorder for a marker's kind: the stage timer's, by device."""
    return make_step_memory("cuda" if kind == "cuda" else "cpu")


def install(
    sink: Sink,
    marker: Marker | None = None,
    choose_marker: Callable[[bool], Marker | None] | None = default_marker,
    memory: bool | Callable[[str], StepMemoryRecorder | None] = True,
) -> Hooks:
    """Install the hooks in this process (imports torch); step records go to `sink.on_step`.
    `marker`: the clock until the first train forward, where `choose_marker(on_gpu)` picks
    the loop's (None: keep `marker`). `memory`: read the per-step memory recorder at the
    boundaries (True: `step_memory`; or a function of the marker's kind)."""
    memory_for = step_memory if memory is True else memory or None
    rec = Recorder(sink, marker or CpuMarker(), memory_for)
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
    "step_memory",
]
