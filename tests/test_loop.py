"""Warm-up detection, the stop rule and the stage timers, driven by a fake clock (no sleeps)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from mlbaseline.config import ThroughputConfig
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.loop import Decision, StepLoop, StopRule, run_steps
from mlbaseline.measure.timers import CpuStageTimer, StepTimes, make_timer


def scripted(values: Iterator[float], clock: ManualClock) -> Callable[[], float]:
    """A step that takes the next scripted time on the fake clock and returns it."""

    def step() -> float:
        v = next(values)
        clock.advance(v)
        return v

    return step


def flat_after(warm: list[float], level: float = 0.1) -> Iterator[float]:
    yield from warm
    while True:
        yield level


def trend(start: float = 0.1, growth: float = 1.05) -> Iterator[float]:
    """Never settles: every step 5% slower than the last."""
    v = start
    while True:
        yield v
        v *= growth


RULE = StopRule(
    min_time_s=0.0,
    min_steps=10,
    max_steps=200,
    max_time_s=1e9,
    tolerance=0.03,
    n_windows=3,
    window=6,
    warmup_min=3,
    warmup_max=20,
    warmup_window=6,
)


def test_warmup_is_detected_and_kept():
    clock = ManualClock()
    warm = [1.0, 0.6, 0.4, 0.3, 0.2]
    res = run_steps(scripted(flat_after(warm), clock), RULE, float, clock)
    # the slow first steps are warm-up; the split-half test (medians) tolerates one straggler
    # at the start of the first settled window
    assert len(warm) - 1 <= res.warmup <= len(warm)
    assert res.warmup_records == warm[: res.warmup]
    assert res.warmup_settled and not res.warmup_capped
    assert sum(v != 0.1 for v in res.measured) <= 1
    assert res.stop_reason == "stable"
    assert len(res.measured) >= RULE.min_steps


def test_warmup_min_is_respected_even_when_flat():
    clock = ManualClock()
    res = run_steps(scripted(flat_after([]), clock), RULE, float, clock)
    assert res.warmup == RULE.warmup_min


def test_warmup_capped_when_it_never_settles():
    clock = ManualClock()
    rule = StopRule(**{**RULE.__dict__, "max_steps": 30})
    res = run_steps(scripted(trend(), clock), rule, float, clock)
    assert res.warmup == rule.warmup_max and res.warmup_capped and not res.warmup_settled
    assert res.stop_reason == "max_steps"
    assert len(res.measured) == 30


def test_min_time_holds_the_stop_until_reached():
    clock = ManualClock()
    rule = StopRule(**{**RULE.__dict__, "min_time_s": 5.0})
    res = run_steps(scripted(flat_after([]), clock), rule, float, clock)
    assert res.stop_reason == "stable"
    # 0.1 s per step: 5 s of measuring needs ~50 steps, far beyond min_steps
    assert len(res.measured) >= 49
    assert res.measured_time_s >= 5.0 - 1e-9


def test_max_time_caps_an_unstable_run():
    clock = ManualClock()
    rule = StopRule(**{**RULE.__dict__, "max_time_s": 10.0, "warmup_max": 3})
    res = run_steps(scripted(trend(growth=1.02), clock), rule, float, clock)
    assert res.stop_reason == "max_time"
    assert res.total_time_s >= 10.0


def test_max_time_during_warmup_still_leaves_a_measured_step():
    clock = ManualClock()
    rule = StopRule(**{**RULE.__dict__, "max_time_s": 2.0})
    res = run_steps(scripted(iter([1.5, 1.5, 1.5]), clock), rule, float, clock)
    assert res.stop_reason == "max_time"
    assert res.warmup_capped
    assert len(res.measured) >= 1


def test_ctrl_c_keeps_the_steps_so_far():
    clock = ManualClock()
    values = flat_after([0.5, 0.3])

    def step() -> float:
        if len(seen) == 7:
            raise KeyboardInterrupt
        v = next(values)
        clock.advance(v)
        seen.append(v)
        return v

    seen: list[float] = []
    res = run_steps(step, RULE, float, clock)
    assert res.stop_reason == "interrupted"
    assert len(res.records) == 7


@pytest.mark.parametrize("where", ["on_step", "value"])
def test_ctrl_c_between_steps_keeps_the_steps_so_far(where: str):
    """A SIGTERM on a busy runner landed in the progress bar's redraw, between two steps: it
    used to escape the loop and take every measured step with it."""
    clock = ManualClock()

    def progress(n: int, measuring: bool) -> None:
        if where == "on_step" and n == 9:
            raise KeyboardInterrupt

    def value(v: float) -> float:
        if where == "value" and clock.now_ns() > 0 and len(seen) == 9:
            raise KeyboardInterrupt  # inside end(): the step being recorded is dropped
        return v

    seen: list[float] = []
    step = scripted(flat_after([0.5, 0.3]), clock)

    def counted() -> float:
        v = step()
        seen.append(v)
        return v

    res = run_steps(counted, RULE, value, clock, on_step=progress)
    assert res.stop_reason == "interrupted"
    assert len(res.records) == (9 if where == "on_step" else 8)
    assert len(res.values) == len(res.records)


def test_other_exceptions_propagate():
    def step() -> float:
        raise MemoryError("boom")

    with pytest.raises(MemoryError):
        run_steps(step, RULE, float, ManualClock())


def test_agree_overrides_the_local_decision():
    """Ranks follow one decision: here a fake 'rank 0' ends warm-up at 4 and stops at 9."""
    clock = ManualClock()
    calls: list[Decision] = []

    def agree(local: Decision) -> Decision:
        calls.append(local)
        n = len(calls)
        return Decision(warmup=4 if n >= 4 else None, stop="max_steps" if n == 9 else None)

    res = run_steps(scripted(trend(), clock), RULE, float, clock, agree=agree)
    assert res.warmup == 4 and len(res.records) == 9 and res.stop_reason == "max_steps"


def test_progress_callback_sees_phases():
    clock = ManualClock()
    seen: list[tuple[int, bool]] = []
    run_steps(
        scripted(flat_after([1.0, 0.5]), clock),
        RULE,
        float,
        clock,
        on_step=lambda n, m: seen.append((n, m)),
    )
    assert seen[0] == (1, False) and seen[-1][1] is True
    assert [n for n, _ in seen] == list(range(1, len(seen) + 1))


def test_rule_from_config():
    t = ThroughputConfig(window=2, warmup_min=5, warmup_max=3)
    rule = StopRule.from_config(t)
    assert rule.warmup_window == 4  # split-half needs two values per half
    assert rule.warmup_max == 5  # never below warmup_min
    assert rule.tolerance == t.stability_tolerance and rule.n_windows == t.stability_windows


# ---------------------------------------------------------------- timers


def test_cpu_timer_stages_and_residual_exact_with_fake_clock():
    clock = ManualClock()
    timer = CpuStageTimer(clock)
    timer.begin_step()
    clock.advance(0.001)  # glue before the first stage → residual
    with timer.stage("forward"):
        clock.advance(0.010)
    with timer.stage("backward"):
        clock.advance(0.020)
    clock.advance(0.002)
    t = timer.end_step()
    assert list(t.stages) == ["forward", "backward"]
    assert t.stages["forward"] == pytest.approx(0.010)
    assert t.stages["backward"] == pytest.approx(0.020)
    assert t.total_s == pytest.approx(0.033)
    assert t.residual_s == pytest.approx(0.003)
    assert t.wall_s == t.total_s


def test_cpu_timer_records_a_stage_that_raised():
    clock = ManualClock()
    timer = CpuStageTimer(clock)
    timer.begin_step()
    with pytest.raises(ValueError), timer.stage("loss"):
        clock.advance(0.5)
        raise ValueError
    assert timer.end_step().stages["loss"] == pytest.approx(0.5)


def test_cpu_timer_resets_between_steps():
    clock = ManualClock()
    timer = CpuStageTimer(clock)
    for _ in range(2):
        timer.begin_step()
        with timer.stage("forward"):
            clock.advance(0.1)
        t = timer.end_step()
    assert t.stages == {"forward": pytest.approx(0.1)}


def test_make_timer_chooses_by_device():
    assert make_timer("cpu").kind == "cpu"
    assert StepTimes(1.0, {"a": 0.25, "b": 0.5}).residual_s == pytest.approx(0.25)


def test_the_warmup_test_runs_once_per_step_on_the_newest_window_only(monkeypatch):
    """The warm-up never settles here, so every step until the cap asks again: each asks one
    split-half test of one window (O(window) per step, not a rescan of all windows so far)."""
    from mlbaseline.stats import stability

    seen: list[int] = []

    def never_settled(window, tolerance, alpha):  # the window each test is handed
        seen.append(len(window))
        return False

    monkeypatch.setattr(stability, "split_half_settled", never_settled)
    rule = StopRule(warmup_min=2, warmup_max=60, warmup_window=8, max_steps=5, max_time_s=1e9)
    clock = ManualClock()
    loop: StepLoop[float] = StepLoop(rule, clock)
    for _ in range(200):
        loop.begin()
        clock.advance(0.01)
        loop.end(0.01, 0.01)
        if loop.warmup is not None:
            break
    assert loop.warmup == 60 and loop.capped
    # steps 10..68 test (the newest window starts at j >= warmup_min = 2): one test each
    assert len(seen) == 68 - (2 + 8) + 1 and set(seen) == {8}


@pytest.mark.parametrize(
    "rule",
    [
        StopRule(min_time_s=3.0, max_steps=10_000, max_time_s=1e6, warmup_max=40),  # stable
        StopRule(min_time_s=1e6, max_steps=150, max_time_s=1e6, warmup_max=40),  # max_steps
        StopRule(min_time_s=1e6, max_steps=10_000, max_time_s=9.0, warmup_max=40),  # max_time
    ],
)
def test_steps_ended_together_take_the_decisions_of_steps_ended_one_by_one(rule: StopRule):
    """`end_quiet` (attach's hand-over of 16 steps at a time) records a batch in one go only
    where none of its steps could decide: the warm-up, the stop and the steps recorded are
    those of the same batches ended one by one, whichever threshold ends the run."""
    import random

    rng = random.Random(7)
    times = [0.3 / (i + 1) + 0.02 + rng.gauss(0, 0.0005) for i in range(4000)]
    loops = []
    quiet = 0
    for batched in (False, True):
        clock = ManualClock()
        loop: StepLoop[float] = StepLoop(rule, clock)
        for at in range(0, len(times), 16):
            batch = times[at : at + 16]
            clock.advance(sum(batch))  # handed over together, at the last one's end
            if batched and not loop.done and loop.end_quiet(batch, batch):
                quiet += 1
                continue
            for v in batch:
                if loop.done:
                    break
                loop.begin()
                loop.end(v, v)
        loops.append(loop)
    one, together = loops
    assert one.done and quiet > 0
    assert (together.warmup, together.capped, together.reason) == (
        one.warmup,
        one.capped,
        one.reason,
    )
    assert together.records == one.records and together.values == one.values
    assert len(together.starts) == len(one.starts) == len(one.ends) == len(together.ends)
