"""The hooks' hot path (`measure.hooks` logging a boundary itself while the recorder is `hot`)
against the cutter taking each boundary as it comes: a real torch loop whose every stage moves
a fake clock by a known time, run under the hooks once with a sink that takes each step at
once and once with the measuring sink's way (steps logged, tallied 16 at a time, cut at the
end). The records must be the same, and the known times."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch

from mlbaseline.measure import hooks
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.hooks import CpuMarker, HookStep

MS = 1e-3
# what each stage moves the clock by: a sample drawn (4 a batch), the forward, the loss, the
# backward, the optimizer's step, and a learning-rate scheduler's step after it
DRAW, FORWARD, LOSS, BACKWARD, STEP, SCHEDULE = 1 * MS, 2 * MS, 0.5 * MS, 3 * MS, 1 * MS, 0.25 * MS


class Eager:
    """Each step at the next step's first boundary, cut as it came."""

    def __init__(self) -> None:
        self.steps: list[HookStep] = []

    def on_step(self, record: HookStep) -> None:
        self.steps.append(record)


class Settling(Eager):
    """The measuring sink's way: logged, tallied 16 at a time, cut once at the end."""

    handover_every = 16
    settle_at_end = True

    def on_steps(self, records: list[HookStep]) -> None:
        self.steps.extend(records)


def _stages(clock: ManualClock) -> tuple[Any, ...]:
    """The loop's parts, each moving the clock by its stage's time."""

    class Draws(torch.utils.data.Dataset[Any]):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            clock.advance(DRAW)
            return torch.ones(3), torch.zeros(1)

    class Slow(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            clock.advance(BACKWARD)
            return grad

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            clock.advance(FORWARD)
            return Slow.apply(self.lin(x))

    class TimedSGD(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            clock.advance(STEP)
            return super().step(closure)

    class TimedStepLR(torch.optim.lr_scheduler.StepLR):
        def step(self, epoch: Any = None) -> None:
            clock.advance(SCHEDULE)
            super().step(epoch)

    return Draws, Model, TimedSGD, TimedStepLR


def _run(sink: Eager, before: bool, memory: bool, steps: int = 60) -> list[HookStep]:
    clock = ManualClock()
    Draws, Model, TimedSGD, TimedStepLR = _stages(clock)
    model = Model()
    made = lambda: TimedSGD(model.parameters(), lr=0.01)  # noqa: E731
    opt = made() if before else None  # created before the hooks: their global step hooks
    h = hooks.install(sink, marker=CpuMarker(clock), choose_marker=None, memory=memory)
    try:
        opt = opt or made()  # created after: the step factory's wrapper
        sched = TimedStepLR(opt, 10)
        loader = torch.utils.data.DataLoader(Draws(), batch_size=4)
        done = 0
        while done < steps:
            for x, y in loader:
                opt.zero_grad()
                out = model(x)
                clock.advance(LOSS)
                ((out - y) ** 2).mean().backward()
                opt.step()
                sched.step()
                done += 1
                if done == steps:
                    break
        h.rec.flush(block=True)
        # every attribute the hot path reads is a slot (`Recorder.__slots__`): one set
        # anywhere else lands in an instance dict, a slower lookup on every boundary
        assert vars(h.rec) == {}
    finally:
        h.uninstall()
    return sink.steps


@pytest.mark.parametrize("memory", [False, True])
@pytest.mark.parametrize("before", [False, True])
def test_the_hot_path_gives_the_records_of_the_cut_as_it_comes(before: bool, memory: bool):
    eager = _run(Eager(), before, memory)
    settled = _run(Settling(), before, memory)
    assert len(settled) == len(eager) >= 58
    for a, b in zip(eager[1:], settled[1:], strict=False):
        assert (b.total_s, b.stages, b.micro_batches, b.samples) == (
            a.total_s,
            a.stages,
            a.micro_batches,
            a.samples,
        )
        assert (a.memory is None) == (b.memory is None)
    step = settled[5]
    want = {"data_wait": 4 * DRAW, "forward": FORWARD, "loss": LOSS, "backward": BACKWARD}
    assert {k: step.stages[k] for k in want} == pytest.approx(want)
    # the optimizer's step, and the scheduler's after it: the update's bookkeeping
    assert step.stages["optimizer"] == pytest.approx(STEP + SCHEDULE)
    assert step.residual_s == pytest.approx(0.0, abs=1e-12)
    assert step.samples == 4
    if memory:
        assert sum(s.memory is not None for s in settled) >= 4


_FRESH = """
import torch
from torch.optim import optimizer as opt
from mlbaseline.measure import hooks

class Sink:
    def __init__(self):
        self.steps = []
    def on_step(self, record):
        self.steps.append(record)

sink = Sink()
h = hooks.install(sink, memory=False)
print(len(opt._global_optimizer_pre_hooks), len(opt._global_optimizer_post_hooks))
model = torch.nn.Linear(4, 1)
sgd = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    sgd.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    sgd.step()
h.rec.flush(block=True)
h.uninstall()
print(len(sink.steps), all(s.stages["optimizer"] > 0 for s in sink.steps))
"""


def test_a_process_whose_optimizers_come_after_the_hooks_has_no_global_step_hook():
    """As under `mlb attach` (the hooks in before the script's first line): every optimizer
    class is wrapped by the step factory's wrapper, torch's global step hooks (two calls a
    step, idle under that wrapper) are left out, and the steps are cut all the same."""
    done = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=300, check=True
    )
    hooks_seen, steps = done.stdout.split("\n")[:2]
    assert hooks_seen == "0 0"
    assert steps == "5 True"  # (the last step closes at the next step's first boundary)


def _tracked_per_step(sink: Eager | None, steps: int = 64) -> float:
    """Objects the garbage collector tracks, made and kept, per step of the loop (with the
    hooks and `sink`, or plain): counted with collections off (`gc.get_count()`'s youngest
    generation: tracked allocations less deallocations)."""
    import gc

    clock = ManualClock()
    Draws, Model, TimedSGD, _ = _stages(clock)
    model = Model()
    h = hooks.install(sink, marker=CpuMarker(clock), choose_marker=None) if sink else None
    try:
        opt = TimedSGD(model.parameters(), lr=0.01)
        loader = torch.utils.data.DataLoader(Draws(), batch_size=4)

        def run(n: int) -> None:
            while n > 0:
                for x, y in loader:
                    opt.zero_grad()
                    ((model(x) - y) ** 2).mean().backward()
                    opt.step()
                    n -= 1
                    if n == 0:
                        break

        run(40)  # past the first steps (the hot path begins once steps are optimizer steps)
        gc.collect()
        gc.disable()
        try:
            before = gc.get_count()[0]
            run(steps)
            return (gc.get_count()[0] - before) / steps
        finally:
            gc.enable()
    finally:
        if h is not None:
            h.uninstall()


def test_the_hot_path_leaves_the_garbage_collector_nothing_to_track():
    """A plain loop keeps next to nothing the collector tracks; the hooks' log must not add
    a tracked object a boundary (a tuple an entry did: ~10 a step, a collection every ~60
    steps and a full one, ~150 ms, every few thousand, inside the measured steps). What is
    left is the measuring sink's record a step, and its tally's lists."""
    plain = _tracked_per_step(None)
    hooked = _tracked_per_step(Settling())
    assert hooked - plain <= 4, (plain, hooked)  # (a tuple an entry: 13 more)
