"""The step cutter's log (`Recorder._replay`): for a sink that takes its steps in batches
(`handover_every`, the measuring sink's) the hot path logs each boundary and the steps are cut
later, many at a time. Whatever the loop does, the records must be those of a cutter that cuts
each boundary as it comes: the same stages, residual, eval, micro-batches, samples, memory."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from test_attach_memory import FakeMemory

from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.step_cutter import MAX_LOG, CpuMarker, HookStep, Recorder


class Sink:
    def __init__(self, every: int, settle: bool = False) -> None:
        self.steps: list[HookStep] = []
        self.handover_every = every
        self.settle_at_end = settle
        self.totals: list[float] = []  # each step's total as the sink first saw it

    def on_step(self, record: HookStep) -> None:
        self.steps.append(record)
        self.totals.append(record.total_s)


class Run:
    """One recorder on a manual clock; each span's length and allocation drawn from `rng`
    (two runs with the same seed see the same loop)."""

    def __init__(self, every: int, seed: int, memory: bool, settle: bool = False) -> None:
        self.clock = ManualClock()
        self.rng = random.Random(seed)
        self.sink = Sink(every, settle)
        self.mem = FakeMemory(self.clock)
        memory_for = (lambda kind: self.mem) if memory else None
        self.rec = Recorder(self.sink, CpuMarker(self.clock), memory_for)
        self.rec.optimizer_created()

    def gap(self, scale: float = 0.001) -> None:
        self.clock.advance(self.rng.uniform(0.2, 1.0) * scale)

    def span(self, kind: str, keep: bool = True) -> None:
        self.rec.begin(kind, 8 if kind == "fwd" else None)
        self.gap(0.003)
        self.mem.alloc(self.rng.randrange(-64, 256))
        if kind == "opt":
            self.rec.opt_post()
        else:
            self.rec.end(keep)


def plain(r: Run) -> None:
    for kind in ("aux", "data", "h2d", "fwd"):
        r.span(kind)
    r.gap()  # the loss
    r.span("bwd")
    r.gap()
    r.span("opt")


def accumulation(r: Run) -> None:
    for _ in range(3):
        for kind in ("data", "fwd", "lossmod", "bwd"):
            r.span(kind)
    r.span("aux")  # clipping
    r.span("opt")
    r.span("aux")  # a scheduler's step


def with_eval(r: Run) -> None:
    plain(r)
    if r.rng.random() < 0.3:  # a validation pass between steps
        for _ in range(r.rng.randrange(1, 4)):
            r.span("data")
            r.span("efwd")
        r.gap()


def closure(r: Run) -> None:  # Lightning: optimizer.step(closure)
    r.span("data")
    r.rec.begin("opt")
    r.gap()
    r.span("fwd")
    r.gap()
    r.span("aux")
    r.span("bwd")
    r.gap()
    r.rec.opt_post()


def moves(r: Run) -> None:  # an h2d that moves nothing, a move before the update
    r.span("fwd")
    r.gap()
    r.span("h2d", keep=False)
    r.span("bwd")
    r.span("h2d")
    r.gap()
    r.span("opt")


def two_optimizers(r: Run) -> None:  # a GAN: two updates in one step
    for kind in ("data", "fwd", "bwd", "opt", "fwd", "bwd", "opt"):
        r.span(kind)


def pauses(r: Run) -> None:  # a save now and then: a step that waits past the hand-over gap
    plain(r)
    if r.rng.random() < 0.1:
        r.gap(0.4)


def long_eval(r: Run) -> None:  # more boundaries than the log holds, no optimizer step
    plain(r)
    if r.rng.random() < 0.05:
        for _ in range(MAX_LOG):
            r.span("efwd")


SCENARIOS: dict[str, Callable[[Run], None]] = {
    f.__name__: f
    for f in (plain, accumulation, with_eval, closure, moves, two_optimizers, pauses, long_eval)
}


@pytest.mark.parametrize("memory", [False, True], ids=["no-memory", "memory"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_logged_boundaries_cut_later_give_the_same_records(name: str, memory: bool) -> None:
    scenario = SCENARIOS[name]
    runs = [Run(every, seed=7, memory=memory) for every in (1, 4, 16)]
    runs.append(Run(16, seed=7, memory=memory, settle=True))  # cut only at the end
    logged = []
    replay = runs[2].rec._replay

    def counted() -> None:  # the batched run logs boundaries: what this test is about
        logged.append(len(runs[2].rec.log))
        replay()

    runs[2].rec._replay = counted  # type: ignore[method-assign]
    settled = []  # the settling run's cuts: one, at its flush
    cut_at_end = runs[3].rec._replay

    def once() -> None:
        settled.append(len(runs[3].rec.log))
        cut_at_end()

    runs[3].rec._replay = once  # type: ignore[method-assign]
    for r in runs:
        for _ in range(60):
            scenario(r)
        r.span("data")  # the last step closes
        r.rec.flush(block=True)
    eager, *batched = (r.sink.steps for r in runs)
    assert len(eager) >= 55
    for steps in batched:
        assert steps == eager
    # the sink that settles at the end saw each step's total first from the log's marks alone
    # (its stop rule's value): the same, but where a step's interval held an eval stretch
    seen, final = runs[3].sink.totals, [s.total_s for s in eager]
    for first, step in zip(seen, eager, strict=True):
        near = {"rel": 1e-9, "abs": 1e-12}
        assert first == pytest.approx(step.total_s, **near) or (
            step.eval_s > 0 and first == pytest.approx(step.total_s + step.eval_s, **near)
        )
    assert len(seen) == len(final)
    assert len(settled) == 1 and settled[0] > 5 * len(eager)  # the whole run's boundaries
    if memory:  # the readings are on the same steps, and some steps are read
        assert 0 < sum(s.memory is not None for s in eager) < len(eager)
    assert sum(logged) > 2 * len(eager)


def test_a_sink_that_takes_each_step_at_once_is_cut_as_it_comes() -> None:
    r = Run(1, seed=1, memory=False)
    for _ in range(5):
        plain(r)
    assert not r.rec._lazy and not r.rec.log


def test_a_sink_that_settles_when_its_rule_is_met_has_every_record_filled() -> None:
    """The measuring sink's stop rule is met inside a tally (a record known by its total
    alone): it turns the recorder off and flushes it, which cuts the whole log; each record
    it was handed is then whole, and the steps after the stop are not handed over."""
    r = Run(16, seed=3, memory=True, settle=True)
    got: list[HookStep] = []

    class Stopping:
        def on_step(self, record: HookStep) -> None:
            if r.rec.off:
                return
            got.append(record)
            if len(got) == 40:
                r.rec.turn_off()
                r.rec.flush(block=True)

    r.rec.sink = Stopping()  # type: ignore[assignment]
    for _ in range(70):
        plain(r)
    assert len(got) == 40 and not r.rec._unfilled and not r.rec._settling
    assert all(s.stages["forward"] > 0 and s.stages["backward"] > 0 for s in got)
    assert all(s.total_s > 0 and s.residual_s >= -1e-12 for s in got)
    assert any(s.memory is not None for s in got[10:])  # read steps logged, then cut
