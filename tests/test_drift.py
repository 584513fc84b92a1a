"""Machine drift (issue 15 item 5) on a fake clock, through the real step loop, control kernel,
pooling and compare: a machine that slows every stage by the same factor mid-run is named as
machine drift (and the run contaminated), never a regression; one slower stage is flagged
alone. Seeded, no sleeps, ratios and verdicts only."""

from __future__ import annotations

import numpy as np
import pytest

from mlbaseline import comparison as cmp
from mlbaseline.config import CompareConfig
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.contamination import CpuAccount, record
from mlbaseline.measure.control import ControlKernel
from mlbaseline.measure.loop import StopRule, run_steps
from mlbaseline.measure.pooling import pool_replicates
from mlbaseline.measure.step import TRAIN_STAGES, StepRecord, TrainRun
from mlbaseline.measure.timers import CpuStageTimer
from mlbaseline.results import Result

CFG = CompareConfig(n_resamples=400)
REPLICATES = 8  # Holm over 8 judged metrics needs 6 or more per side
RULE = StopRule(min_steps=24, max_steps=24, warmup_min=2, warmup_max=2, window=4)


class Machine:
    """The machine's speed: every piece of work costs `factor` times more from `at_s` on."""

    def __init__(self, clock: ManualClock, at_s: float = float("inf"), factor: float = 1.0):
        self.clock, self.at_ns, self.factor = clock, at_s * 1e9, factor

    def slowdown(self) -> float:
        return self.factor if self.clock.now_ns() >= self.at_ns else 1.0


class FakeStep:
    """A training step on the fake clock: each stage costs its base × machine × own factor ×
    seeded noise; `level` is this process's own speed (between-process noise)."""

    def __init__(self, clock, machine, level, rng, factors=None):
        self.clock, self.machine, self.level, self.rng = clock, machine, level, rng
        self.timer = CpuStageTimer(clock)
        self.factors = factors or {}

    def __call__(self) -> StepRecord:
        self.timer.begin_step()
        for i, s in enumerate(TRAIN_STAGES):
            with self.timer.stage(s):
                cost = 0.001 * (i + 1) * self.level * self.machine.slowdown()
                cost *= self.factors.get(s, 1.0) * float(np.exp(self.rng.normal(0, 0.01)))
                self.clock.advance(cost)
        self.clock.advance(0.00005)
        return StepRecord(self.timer.end_step(), 4)


def one_process(clock, machine, rng, factors=None, control=True) -> Result:
    """One fake fresh process: the step loop with the control kernel in its step callback."""
    level = float(rng.lognormal(0.0, 0.01))
    step = FakeStep(clock, machine, level, rng, factors)
    kernel = ControlKernel(4, clock, work=lambda: clock.advance(0.002 * level * machine.slowdown()))
    loop = run_steps(step, RULE, value=lambda r: r.times.total_s, clock=clock,
                     on_step=kernel.on_step if control else None)  # fmt: skip
    run = TrainRun(4, "train.bs4", TRAIN_STAGES, loop, 0, "cpu_rss")
    r = Result(kind="throughput")
    for m in run.metrics():
        r.add_metric(m)
    if control:
        r.add_metric(kernel.metric())
    return r


def replicated(seed, *, slow_from=None, factor=1.5, factors=None, control=True) -> Result:
    """REPLICATES fake processes on one clock; from replicate `slow_from` on, the machine is
    `factor` slower for everything (mid-run drift)."""
    rng = np.random.default_rng(seed)
    clock = ManualClock()
    machine = Machine(clock)
    children = []
    for i in range(REPLICATES):
        if slow_from is not None and i == slow_from:
            machine.at_ns, machine.factor = clock.now_ns(), factor
        children.append(one_process(clock, machine, rng, factors, control))
    result = Result(kind="throughput")
    result.data["batch_sizes"] = {}
    pool_replicates(result, children)
    return result


def contaminate(result: Result, foreign_cores: float) -> None:
    """A CPU account whose readers show `foreign_cores` of other programs' load."""
    clock = ManualClock()
    ticks = iter(range(100))

    def busy() -> float:
        return next(ticks) * 0.0 + clock.now_ns() / 1e9 * (1.0 + foreign_cores)

    account = CpuAccount(0.25, clock, busy, lambda: clock.now_ns() / 1e9, lambda: (2.0,) * 3)
    with account.phase("train.bs4"):
        clock.advance(10.0)
    record(result, account)


def verdicts(c: cmp.Comparison) -> dict[str, str]:
    return {m.name.rsplit(".", 1)[1]: m.verdict for m in c.metrics}


def test_uniform_mid_run_slowdown_is_machine_drift_not_a_regression():
    old = replicated(1)
    new = replicated(2, slow_from=1, factor=1.5)
    contaminate(new, 0.9)
    assert new.data["contamination"]["contaminated"]
    assert [w["code"] for w in new.warnings] == ["contaminated"]
    raw = cmp.compare_results(old, replicated(2, slow_from=1, factor=1.5, control=False), CFG)
    # without a control: the signature (every stage ×1.5, data_wait and h2d included) holds back
    # what the gates alone would call regressed
    assert "regressed" not in verdicts(raw).values()
    held = [m for m in raw.metrics if m.reason and "machine drift" in m.reason]
    assert {m.name.rsplit(".", 1)[1] for m in held} >= {"step", "backward", "data_wait"}
    # 7 of 8 processes ran ×1.5: the ratio of geometric means of the process figures
    assert raw.drift["machine_drift"] and raw.drift["signatures"][0]["factor"] == pytest.approx(
        1.5 ** (7 / 8), rel=0.03
    )
    assert "machine_drift" in {w["code"] for w in raw.warnings} and not raw.failing()
    # not a silent pass: the first line says why the step has no regressed verdict
    assert "signature of machine drift" in raw.to_dict()["headline"]["text"]
    # with the control: it moved ×1.5 too, so the verdicts use drift-adjusted deltas
    c = cmp.compare_results(old, new, CFG)
    drift = 1.5 ** (7 / 8)  # 7 of 8 processes: the ratio of geometric means
    assert c.drift["adjusted"] and c.drift["control"]["ratio"] == pytest.approx(drift, rel=0.03)
    assert "regressed" not in verdicts(c).values() and not c.failing()
    step = next(m for m in c.metrics if m.name == "train.bs4.step")
    assert step.raw["ratio"] == pytest.approx(drift, rel=0.03)
    assert step.raw["verdict"] == "regressed"
    assert step.stat.ratio == pytest.approx(1.0, abs=0.02)
    codes = {w["code"]: w["message"] for w in c.warnings}
    assert {"common_mode_drift", "contaminated_input"} <= set(codes)
    assert "train.bs4.step +4" in codes["common_mode_drift"]  # the raw delta, beside
    assert "its CI beyond ±3%" in codes["common_mode_drift"]  # adjusted on evidence only
    doc = c.to_dict()
    assert doc["drift"]["machine_drift"] and doc["metrics"][0]["drift_adjusted"]


def test_one_slower_stage_is_flagged_alone():
    old, new = replicated(3), replicated(4, factors={"backward": 1.5})
    c = cmp.compare_results(old, new, CFG)
    v = verdicts(c)
    assert v["backward"] == "regressed"
    stages = {s: v[s] for s in TRAIN_STAGES}
    assert [s for s, x in stages.items() if x == "regressed"] == ["backward"]
    assert not c.drift["machine_drift"] and not c.drift["signatures"]
    assert c.drift["control"]["verdict"] == "unchanged" and not c.drift["adjusted"]
    assert all(m.raw is None for m in c.metrics)
    assert c.attribution[0].named == ["backward"]
    assert c.failing()


def test_control_with_another_kernel_is_not_used():
    old, new = replicated(5), replicated(6, slow_from=0, factor=1.3)
    new.measurements["control.matmul"].meta["threads"] = 7
    c = cmp.compare_results(old, new, CFG)
    assert not c.drift["control"]["applied"] and "differs" in c.drift["control"]["reason"]
    # still named by the signature, and never judged as a metric itself
    assert c.drift["signatures"] and "control.matmul" not in {m.name for m in c.metrics}


def test_signature_needs_a_stage_the_change_cannot_reach():
    rows = [("forward", 1.5, 1.45, 1.55), ("backward", 1.5, 1.4, 1.6), ("loss", 1.49, 1.4, 1.6)]
    assert cmp.drift.signature("g", rows, 0.03) is None
    sig = cmp.drift.signature("g", [*rows, ("data_wait", 1.52, 1.4, 1.6)], 0.03)
    assert sig is not None and "data_wait included" in sig.message()
    assert cmp.drift.signature("g", [*rows, ("data_wait", 1.0, 0.99, 1.01)], 0.03) is None
    # a noisy run: wide CIs agree with any common factor, but nothing moved for sure
    wide = [(s, 0.96, 0.8, 1.1) for s in ("data_wait", "h2d", "forward", "backward")]
    assert cmp.drift.signature("g", wide, 0.01) is None
