"""mlb attach's hooks (measure.hooks): synthetic loops on a fake clock through the recorder, and
a real tiny loop in this process with the torch hooks installed."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from mlbaseline.measure import hooks
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.hooks import CpuMarker, HookStep, Recorder
from mlbaseline.measure.step_cutter import HANDOVER_GAP_S


class Sink:
    def __init__(self, clock: ManualClock | None = None, cost_s: float = 0.0) -> None:
        self.steps: list[HookStep] = []
        self.clock, self.cost_s = clock, cost_s

    def on_step(self, record: HookStep) -> None:
        self.steps.append(record)
        if self.clock is not None:  # the sink's own work, inside the hook
            self.clock.advance(self.cost_s)


class Loop:
    """Boundary events on a manual clock."""

    def __init__(self, cost_s: float = 0.0) -> None:
        self.clock = ManualClock()
        self.sink = Sink(self.clock, cost_s)
        self.rec = Recorder(self.sink, CpuMarker(self.clock))

    def gap(self, s: float) -> None:
        self.clock.advance(s)

    def span(self, kind: str, s: float, samples: int | None = None, keep: bool = True) -> None:
        self.rec.begin(kind, samples)
        self.clock.advance(s)
        if kind == "opt":
            self.rec.opt_post()
        else:
            self.rec.end(keep)

    def step(self, batch: int = 8) -> None:
        """One plain step: zero_grad, data, h2d, forward, loss, backward, optimizer step."""
        self.span("aux", 0.0003)
        self.gap(0.001)
        self.span("data", 0.002)
        self.gap(0.0005)
        self.span("h2d", 0.001)
        self.span("fwd", 0.003, samples=batch)
        self.gap(0.001)  # the loss function
        self.span("bwd", 0.004)
        self.gap(0.0005)
        self.span("opt", 0.002)


def approx(x: float) -> Any:
    return pytest.approx(x, abs=1e-12)


def test_plain_loop_cuts_each_stage_and_an_explicit_residual() -> None:
    loop = Loop()
    loop.rec.optimizer_created()
    for _ in range(5):
        loop.step()
    loop.span("data", 0.002)  # the next step's first boundary hands the last one over
    assert len(loop.sink.steps) == 5
    step = loop.sink.steps[2]
    assert step.stages == {
        "data_wait": approx(0.002),
        "h2d": approx(0.001),
        "forward": approx(0.003),
        "loss": approx(0.001),
        "backward": approx(0.004),
        "optimizer": approx(0.0005 + 0.002 + 0.0003),  # backward's end to the step, zero_grad
    }
    # the interval is the previous step's end to this one's: the two gaps are the residual
    assert step.total_s == approx(0.0153)
    assert step.residual_s == approx(0.0015)
    assert (step.micro_batches, step.samples, step.boundary) == (1, 8, "optimizer")


def test_gradient_accumulation_is_one_step_of_micro_batches() -> None:
    loop = Loop()
    loop.rec.optimizer_created()
    for _ in range(3):
        for _ in range(4):
            loop.span("data", 0.001)
            loop.span("fwd", 0.002, samples=16)
            loop.span("lossmod", 0.0005)
            loop.span("bwd", 0.003)
        loop.span("aux", 0.0002)  # clip_grad_norm_
        loop.span("opt", 0.001)
        loop.span("aux", 0.0001)  # zero_grad after the step: the next step's
    loop.span("data", 0.001)
    assert len(loop.sink.steps) == 3
    step = loop.sink.steps[1]
    assert (step.micro_batches, step.samples, step.batch_size) == (4, 64, 16)
    assert step.stages["forward"] == approx(0.008)
    assert step.stages["loss"] == approx(0.002)
    assert step.stages["backward"] == approx(0.012)
    assert step.stages["optimizer"] == approx(0.0002 + 0.001 + 0.0001)
    assert step.residual_s == approx(0.0)


def test_manual_update_falls_back_to_the_backward_boundary() -> None:
    loop = Loop()  # no torch.optim optimizer is ever built
    for _ in range(6):
        loop.span("fwd", 0.002, samples=20)
        loop.gap(0.001)
        loop.span("bwd", 0.003)
        loop.span("aux", 0.0004)  # clip_grad_norm_
        loop.gap(0.002)  # p.data.add_(-lr, p.grad)
    steps = loop.sink.steps
    assert len(steps) == 5  # the first backward's step is dropped: where it began is unknown
    step = steps[2]
    assert step.boundary == "backward"
    assert step.micro_batches == 1
    assert step.stages["optimizer"] == approx(0.0024)
    assert step.stages["forward"] == approx(0.002)
    assert step.stages["loss"] == approx(0.001)
    assert step.total_s == approx(0.0084)
    assert step.residual_s == approx(0.0)


def test_an_optimizer_in_the_script_waits_for_its_step_through_accumulation() -> None:
    loop = Loop()
    loop.rec.optimizer_created()
    for _ in range(3):  # three backwards before the first optimizer step: not a manual update
        loop.span("fwd", 0.001, samples=4)
        loop.span("bwd", 0.001)
    loop.span("opt", 0.001)
    loop.span("fwd", 0.001, samples=4)
    assert [s.micro_batches for s in loop.sink.steps] == [3]
    assert loop.rec.mode == "optimizer"


def test_eval_is_kept_apart_with_the_data_it_draws() -> None:
    loop = Loop()
    loop.rec.optimizer_created()
    loop.step()
    loop.step()
    # validation between two training steps: its data and forwards are eval
    for _ in range(3):
        loop.span("data", 0.004)
        loop.span("efwd", 0.01)
    loop.gap(0.002)  # metrics after the validation: still eval
    loop.step()
    loop.span("data", 0.001)
    with_eval = loop.sink.steps[2]
    assert with_eval.eval_s == approx(3 * 0.014 + 0.002)
    plain = loop.sink.steps[1]
    assert with_eval.total_s == approx(plain.total_s)
    assert with_eval.stages == plain.stages


def test_the_training_batch_drawn_after_eval_is_the_steps() -> None:
    loop = Loop()
    loop.rec.optimizer_created()
    loop.step()
    loop.span("data", 0.004)
    loop.span("efwd", 0.01)
    loop.span("data", 0.002)  # the training batch: drawn while eval was the last thing seen
    loop.span("fwd", 0.003, samples=8)
    loop.span("bwd", 0.004)
    loop.span("opt", 0.002)
    loop.span("data", 0.001)
    step = loop.sink.steps[1]
    assert step.stages["data_wait"] == approx(0.002)
    assert step.eval_s == approx(0.014)


def test_closure_optimizer_cuts_the_forward_and_backward_inside_it() -> None:
    loop = Loop()  # Lightning: optimizer.step(closure) runs training_step and backward
    loop.rec.optimizer_created()
    for _ in range(4):
        loop.span("data", 0.001)
        loop.rec.begin("opt")
        loop.gap(0.0002)  # the closure's glue before training_step
        loop.span("fwd", 0.003, samples=32)
        loop.gap(0.0005)  # the loss in training_step
        loop.span("aux", 0.0001)  # zero_grad inside the closure
        loop.span("bwd", 0.004)
        loop.gap(0.001)  # the update itself
        loop.rec.opt_post()
    loop.span("data", 0.001)
    step = loop.sink.steps[2]
    assert step.stages["forward"] == approx(0.003)
    assert step.stages["backward"] == approx(0.004)
    assert step.stages["loss"] == approx(0.0005)
    assert step.stages["optimizer"] == approx(0.0002 + 0.0001 + 0.001)
    assert step.residual_s == approx(0.0)


def test_a_move_between_backward_and_update_leaves_the_rest_to_the_optimizer() -> None:
    loop = Loop()
    loop.rec.optimizer_created()
    for _ in range(3):
        loop.span("data", 0.001)
        loop.span("fwd", 0.002, samples=4)
        loop.span("bwd", 0.002)
        loop.gap(0.0004)
        loop.span("h2d", 0.0001)  # a logged value's move, say
        loop.gap(0.0005)
        loop.span("opt", 0.001)
    loop.span("data", 0.001)
    step = loop.sink.steps[1]
    assert step.stages["optimizer"] == approx(0.0019)
    assert step.stages["h2d"] == approx(0.0001)
    assert step.residual_s == approx(0.0)


def test_an_h2d_that_moves_nothing_leaves_the_stage_it_interrupted() -> None:
    loop = Loop()
    loop.rec.optimizer_created()
    for _ in range(3):
        loop.span("fwd", 0.002, samples=4)
        loop.gap(0.0005)
        loop.span("h2d", 0.0005, keep=False)  # a .to() that stayed on the CPU
        loop.gap(0.0005)
        loop.span("bwd", 0.002)
        loop.span("opt", 0.001)
    loop.span("fwd", 0.002, samples=4)
    step = loop.sink.steps[1]
    assert step.stages["h2d"] == 0.0
    assert step.stages["loss"] == approx(0.0015)


def test_an_h2d_that_moves_nothing_right_after_a_hand_over_stays_in_the_step() -> None:
    """The sink's time, cut out just before it (a step handed over at its first boundary),
    is not the stage it interrupted: its time stays the step's."""
    loop = Loop(cost_s=0.01)
    loop.rec.optimizer_created()
    for _ in range(4):
        loop.span("h2d", 0.0005, keep=False)  # the step's first boundary: a hand-over
        loop.span("data", 0.001)
        loop.span("fwd", 0.002, samples=4)
        loop.span("bwd", 0.002)
        loop.span("opt", 0.001)
    step = loop.sink.steps[1]
    assert step.total_s == approx(0.0065)
    assert step.residual_s == approx(0.0005)


def test_the_sinks_own_time_is_in_no_step() -> None:
    loop = Loop(cost_s=0.5)  # a sink that takes half a second per step
    loop.rec.optimizer_created()
    for _ in range(4):
        loop.step()
    loop.span("data", 0.002)
    assert all(s.total_s < 0.02 for s in loop.sink.steps)
    assert loop.sink.steps[1].total_s == approx(loop.sink.steps[2].total_s)


def test_a_sink_may_take_its_steps_in_batches_and_slow_steps_are_not_held_back() -> None:
    """`handover_every = N` (the measuring sink's): the boundaries are logged and the steps cut
    and handed over at an optimizer step, N at a time, the same records as one at a time (the
    sink's own time still in no step); steps that waited HANDOVER_GAP_S or more go at the next
    optimizer step; flush(block) hands over the rest."""
    one, batched = Loop(cost_s=0.01), Loop(cost_s=0.01)
    batched.sink.handover_every = 4  # type: ignore[attr-defined]
    batched.rec = Recorder(batched.sink, CpuMarker(batched.clock))
    seen = []
    for loop in (one, batched):
        loop.rec.optimizer_created()
    for _ in range(12):
        for loop in (one, batched):
            loop.step()
        seen.append((len(one.sink.steps), len(batched.sink.steps)))
    assert seen[1] == (1, 0) and seen[-1][1] >= 8
    assert all(a - b <= 5 for a, b in seen)  # at most N + 1 steps behind
    assert len({b for _, b in seen}) <= 5  # in a few jumps, not step by step
    assert batched.sink.steps == one.sink.steps[: len(batched.sink.steps)]
    before = len(batched.sink.steps)
    batched.gap(HANDOVER_GAP_S)  # a pause after a step (an epoch's end, a save)
    batched.step()
    assert len(batched.sink.steps) >= 12 > before  # not held for N more
    one.gap(HANDOVER_GAP_S)
    one.step()
    for loop in (one, batched):
        loop.span("data", 0.002)  # the last step closes
        loop.rec.flush(block=True)
    assert batched.sink.steps == one.sink.steps and len(one.sink.steps) == 13


class FakeEventMarker:
    """CUDA events, faked: a mark completes when the test says the device got there."""

    kind = "cuda"

    def __init__(self, clock: ManualClock) -> None:
        self.clock, self.done, self.waited = clock, 0, 0
        self.marks: list[list[int]] = []

    def mark(self) -> list[int]:
        m = [len(self.marks), self.clock.now_ns()]
        self.marks.append(m)
        return m

    def ready(self, mark: list[int]) -> bool:
        return mark[0] < self.done

    def wait(self, mark: list[int]) -> None:
        self.waited += 1
        self.done = max(self.done, mark[0] + 1)

    def seconds(self, a: list[int], b: list[int]) -> float:
        return (b[1] - a[1]) / 1e9


def test_device_marks_are_read_only_once_completed_never_waited_for() -> None:
    loop = Loop()
    marker = FakeEventMarker(loop.clock)
    loop.rec = Recorder(loop.sink, marker)
    loop.rec.optimizer_created()
    for _ in range(3):
        loop.step()
    loop.span("data", 0.002)
    assert loop.sink.steps == []  # the device is behind: nothing read, nothing waited for
    marker.done = len(marker.marks)  # the device caught up
    loop.step()
    assert len(loop.sink.steps) == 3
    assert marker.waited == 0
    assert loop.sink.steps[1].stages["backward"] == approx(0.004)
    loop.span("data", 0.001)
    loop.rec.flush(block=True)  # at the script's end only
    assert len(loop.sink.steps) == 4 and marker.waited == 1


def test_to_device_reads_the_target_cheaply() -> None:
    t, d = torch.Tensor, torch.device
    assert hooks._to_device(("cuda",), {}, t, d)
    assert hooks._to_device((), {"device": d("cuda", 0)}, t, d)
    assert hooks._to_device((0,), {}, t, d)
    assert not hooks._to_device((torch.float16,), {}, t, d)
    assert hooks._to_device(("cpu",), {}, t, d)  # a CPU-only run's batch move
    assert hooks._to_device((torch.zeros(1),), {}, t, d)
    assert not hooks._to_device((), {"dtype": torch.float16}, t, d)
    assert not hooks._to_device((), {}, t, d)


# ---------------------------------------------------------------- the real hooks, in-process


@pytest.fixture
def installed() -> Any:
    sink = Sink()
    h = hooks.install(sink)
    try:
        yield h, sink
    finally:
        h.uninstall()


def _tiny_loop(steps: int, accum: int = 1) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    done = 0
    while done < steps:
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
                done += 1
                if done == steps:
                    break
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 8))
        model.train()


def test_a_nested_module_call_goes_where_torchs_own_call_sends_it(installed: Any) -> None:
    """The patched call does torch's `_wrapped_call_impl` itself for a layer inside the
    model's forward: a compiled layer's compiled call, else its `_call_impl`, same result."""
    assert hooks._torch_call(torch.nn.Module._wrapped_call_impl)
    assert not hooks._torch_call(lambda module: module)  # any other body is called, not copied
    torch.manual_seed(0)
    plain, compiled = torch.nn.Linear(4, 3), torch.nn.Linear(3, 3)
    seen: list[int] = []

    def compiled_call(*args: Any, **kwargs: Any) -> Any:
        seen.append(len(args))
        return compiled._call_impl(*args, **kwargs) * 2

    compiled._compiled_call_impl = compiled_call
    model = torch.nn.Sequential(plain, compiled)
    x = torch.randn(2, 4)
    want = compiled(plain(x))  # outside a timed interval: torch's own call, the compiled one
    assert seen == [1]
    got = model(x)  # a train forward: the two layers are nested calls
    assert seen == [1, 1] and torch.equal(got, want)


def test_real_loop_gives_one_record_per_optimizer_step(installed: Any) -> None:
    h, sink = installed
    _tiny_loop(10, accum=2)
    h.rec.flush(block=True)
    assert len(sink.steps) == 10  # the last one handed over by the eval forward after it
    for step in sink.steps[1:]:
        assert (step.micro_batches, step.samples, step.boundary) == (2, 8, "optimizer")
        assert step.stages["forward"] > 0 and step.stages["backward"] > 0
        assert step.total_s == pytest.approx(sum(step.stages.values()) + step.residual_s)
    assert sum(s.eval_s for s in sink.steps) > 0  # the eval forward after each epoch


def test_the_optimizer_stage_is_the_whole_step_call(installed: Any) -> None:
    h, sink = installed
    # an SGD made earlier in this process (another test) has its class's step wrapped by torch
    # already: then the global step hooks time the optimizer stage, not mlb's wrapper
    fresh = not hasattr(torch.optim.SGD.step, "hooked")

    class FreshSGD(torch.optim.SGD):  # a class torch wraps only now, under the hooks
        pass

    model = torch.nn.Linear(4, 1)
    opt = FreshSGD(model.parameters(), lr=0.1)
    spin = 0.002

    def slow_pre_hook(*_: Any) -> None:  # inside step(), before the update
        end = time.perf_counter() + spin
        while time.perf_counter() < end:
            pass

    opt.register_step_pre_hook(slow_pre_hook)
    for _ in range(4):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    model(torch.ones(2, 4))
    assert h._stepping == 0 and len(sink.steps) == 4
    if fresh:
        assert FreshSGD.step.__code__.co_filename == hooks.__file__  # mlb's wrapper, outermost
    assert all(s.stages["optimizer"] >= spin for s in sink.steps)
    assert all(s.boundary == "optimizer" for s in sink.steps)


def test_hooks_change_nothing_the_script_sees(installed: Any) -> None:
    h, _ = installed
    model = torch.nn.Linear(3, 1)
    out = model(torch.ones(2, 3)).sum()
    assert out.backward() is None
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    assert isinstance(norm, torch.Tensor) and float(norm) > 0
    x = torch.ones(2)
    assert x.to("cpu") is x and x.to(torch.float64).dtype == torch.float64
    assert torch.Tensor.backward.__name__ == "backward"

    class Boom(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("the script's own error")

    with pytest.raises(ValueError, match="the script's own error"):
        Boom()(torch.ones(1))
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.ones(1).backward()
    assert h.rec.open is None and h.rec.inner == 0  # nothing left open by the errors
    with pytest.raises(StopIteration):
        next(iter(torch.utils.data.DataLoader([])))


def test_uninstall_puts_everything_back() -> None:
    before = (
        torch.nn.Module.__call__,
        torch.Tensor.backward,
        torch.autograd.backward,
        torch.Tensor.to,
        torch.optim.Optimizer.zero_grad,
        torch.nn.utils.clip_grad_norm_,
        torch.utils.data.dataloader._BaseDataLoaderIter.__next__,
    )
    h = hooks.install(Sink())
    assert torch.Tensor.backward is not before[0]
    h.uninstall()
    after = (
        torch.nn.Module.__call__,
        torch.Tensor.backward,
        torch.autograd.backward,
        torch.Tensor.to,
        torch.optim.Optimizer.zero_grad,
        torch.nn.utils.clip_grad_norm_,
        torch.utils.data.dataloader._BaseDataLoaderIter.__next__,
    )
    assert after == before
    assert "to" not in torch.Tensor.__dict__ or torch.Tensor.__dict__["to"] is before[3]


def test_suspended_hooks_leave_torch_as_it_was_and_resume_over_the_same_recorder() -> None:
    """`make bench` alternates hooked and plain steps: suspended, torch's own functions and no
    global step hook; resumed, the same recorder goes on cutting steps."""
    from torch.optim import optimizer as opt

    plain = (torch.nn.Module.__call__, torch.Tensor.backward, torch.optim.Optimizer.zero_grad)
    hooks_before = (len(opt._global_optimizer_pre_hooks), len(opt._global_optimizer_post_hooks))
    sink = Sink()
    h = hooks.install(sink)
    try:
        _tiny_loop(3)
        h.suspend()
        now = (torch.nn.Module.__call__, torch.Tensor.backward, torch.optim.Optimizer.zero_grad)
        assert now == plain
        assert (len(opt._global_optimizer_pre_hooks), len(opt._global_optimizer_post_hooks)) == (
            hooks_before
        )
        seen = len(sink.steps)
        _tiny_loop(3)  # unhooked: nothing recorded
        h.rec.flush(block=True)
        assert len(sink.steps) <= seen + 1  # (at most the step the flush hands over)
        h.resume()
        assert torch.nn.Module.__call__ is not plain[0]
        _tiny_loop(4)
        h.rec.flush(block=True)
        assert len(sink.steps) >= seen + 3
    finally:
        h.uninstall()
    assert torch.nn.Module.__call__ is plain[0] and torch.Tensor.backward is plain[1]


def test_batch_of_a_sequence_first_model_reads_its_batch_dimension() -> None:
    class LM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.LSTM(4, 4)

    assert hooks.batch_of(LM(), (torch.zeros(35, 20, 4),), {}) == 20
    assert hooks.batch_of(torch.nn.Linear(4, 4), (torch.zeros(16, 4),), {}) == 16
    assert hooks.batch_of(torch.nn.Linear(4, 4), (), {"input_ids": torch.zeros(8, 3)}) == 8


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_stages_are_device_time_read_without_synchronizing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Slow(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.cuda._sleep(60_000_000)  # device-side: the host returns at once
            return self.fc(x)

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch.cuda._sleep(20_000_000)
        return torch.nn.functional.cross_entropy(out, y)

    model = Slow().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    sink = Sink()
    h = hooks.install(sink)
    syncs: list[int] = []
    real_sync = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(1) or real_sync(*a))
    try:
        for _ in range(12):
            loss = loss_fn(model(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
            opt.zero_grad()
        assert syncs == []  # nothing in the loop waited for the device
        model(x.cuda())
        h.rec.flush(block=True)
    finally:
        h.uninstall()
    assert h.rec.marker.kind == "cuda"
    steps = sink.steps[2:]
    assert len(steps) >= 8
    ratios = [s.stages["forward"] / s.stages["loss"] for s in steps]
    assert 2.5 < sorted(ratios)[len(ratios) // 2] < 3.5
    assert all(s.stages["h2d"] > 0 for s in steps)
    assert all(abs(s.residual_s) < 0.1 * s.total_s for s in steps)


def test_training_starts_at_the_first_backward_before_any_whole_step() -> None:
    loop = Loop()
    started: list[int] = []
    loop.sink.on_training_started = lambda: started.append(len(loop.sink.steps))  # type: ignore[attr-defined]
    loop.rec.optimizer_created()
    loop.span("fwd", 0.001, samples=4)
    assert started == []
    loop.span("bwd", 0.001)  # the first of 64 micro-batches: no step for a while yet
    loop.span("fwd", 0.001, samples=4)
    loop.span("bwd", 0.001)
    assert started == [0]


def test_a_schedulers_step_is_the_optimizers_not_the_residual(installed: Any) -> None:
    """`scheduler.step()` after `optimizer.step()` is the update's bookkeeping: it lands in the
    optimizer stage (of the next step, like a zero_grad at its start), not in the residual."""
    h, sink = installed
    spin = 0.002

    class SlowLR(torch.optim.lr_scheduler.StepLR):  # defined under the hooks: inherits step
        def get_lr(self) -> Any:
            end = time.perf_counter() + spin
            while time.perf_counter() < end:
                pass
            return super().get_lr()

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = SlowLR(opt, step_size=1)
    for _ in range(5):
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        sched.step()
    model(torch.ones(2, 4))
    h.rec.flush(block=True)
    assert len(sink.steps) == 5
    for step in sink.steps[1:]:
        assert step.stages["optimizer"] >= spin
        assert step.residual_s < spin / 2
