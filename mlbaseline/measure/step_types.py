"""The records of `mlb attach`'s step cutter (`measure.step_cutter`): the stages a step is
cut into, the step record handed to a sink (`HookStep`), the sink's protocol, and the cutter's
own segments and steps. Pure Python, no torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from mlbaseline.measure.memory_step import StepMemory

STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer")
RESIDUAL = "residual"
EVAL = "eval"
MLB = "mlb"  # the sink's own time inside a hook: in no step
MEMREAD = "memread"  # a memory reading's own time: mlb's cost, in no step (like MLB)
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
ZERO_STAGES = dict.fromkeys(STAGES, 0.0)  # copied for each step's record
MINE = frozenset((MLB, MEMREAD))  # mlb's own time: in no step


@dataclass(slots=True)  # not frozen: one is made every step, and frozen's init is 4x dearer
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
    memory: StepMemory | None = None  # held bytes per stage, the step's peak (with a recorder)

    @property
    def residual_s(self) -> float:
        return self.total_s - sum(self.stages.values())


class Sink(Protocol):
    """Where step records go (`runners.attach_child`'s measuring sink, or the A/B turns').
    An optional `handover_every: int` attribute batches the hand-over (see HANDOVER_GAP_S);
    without it each step is handed over at the next step's first boundary. Optional
    `memory_every: int` and `memory_gap_s: float` set how often a step's memory is read on
    the host clock after the first MEMORY_DENSE reads (MEMORY_EVERY, MEMORY_GAP_S before
    them and without them). One that settles at the end (`settle_at_end = True`) may take the
    records of a tally together (`on_steps(records)`), else each goes to `on_step`."""

    def on_step(self, record: HookStep) -> None: ...


@dataclass(slots=True)
class Seg:
    label: str
    a: Any
    b: Any
    eval: bool = False
    ma: int = 0  # bytes held at `a` and at `b` (with a memory recorder)
    mb: int = 0
    c: Any = None  # host clock: the mark after the reading at `b` (b → c: mlb's, cut out)


@dataclass(slots=True)
class Closed:
    segs: list[Seg]
    micro_batches: int
    samples: list[int]
    boundary: str
    memory: StepMemory | None = None


@dataclass(slots=True)
class OpenStep:
    """The step being cut: its segments since the previous step's end."""

    segs: list[Seg] = field(default_factory=list)
    backwards: int = 0
    samples: list[int] = field(default_factory=list)
    need_samples: bool = True  # the next train forward starts a micro-batch
    forward_seen: bool = False
    candidate: int | None = None  # segments up to here end the step (after an optimizer step)
    cut: int | None = None  # before a mode is known: where the first backward ended


def resolve(closed: Closed, seconds: Callable[[Any, Any], float] | None) -> HookStep:
    """A closed step's record: its segments summed by stage (eval apart, mlb's own time in no
    step), its held bytes by stage where memory was read. `seconds(a, b)` between two marks;
    None: the marks are nanoseconds (the host clock)."""
    stages = dict(ZERO_STAGES)
    memory = closed.memory
    held = dict.fromkeys(STAGES, 0) if memory is not None else None
    total = eval_s = 0.0
    for seg in closed.segs:
        label = seg.label
        if label in MINE:  # mlb's own time (seg.c too): in no step
            continue
        d = (seg.b - seg.a) / 1e9 if seconds is None else seconds(seg.a, seg.b)
        if seg.eval:
            eval_s += d
            continue
        total += d
        if label in stages:
            stages[label] += d
            if held is not None and seg.mb > seg.ma:
                held[label] += seg.mb - seg.ma
    samples = closed.samples
    if memory is not None:
        memory = replace(memory, held=held)
    # positional: this runs every step
    return HookStep(
        total,
        stages,
        eval_s,
        closed.micro_batches,
        sum(samples),
        closed.boundary,
        samples[0] if samples else 0,
        memory,
    )


__all__ = [
    "EVAL",
    "LABEL",
    "MEMREAD",
    "MINE",
    "MLB",
    "RESIDUAL",
    "STAGES",
    "ZERO_STAGES",
    "Closed",
    "HookStep",
    "OpenStep",
    "Seg",
    "Sink",
    "resolve",
]
