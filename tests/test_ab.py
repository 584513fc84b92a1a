"""`mlb ab`: the ABBA scheduler, the paired statistics on seeded synthetic data, common-mode
drift on a fake clock (pairing cancels it), Ctrl-C and the budget, and the CLI end to end on a
tiny demo workload. Ratios and verdicts, never absolute times."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from typer.testing import CliRunner

from mlbaseline import stats
from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.interleave import abba_order, arms_of
from mlbaseline.measure.step import TRAIN_STAGES, StepRecord
from mlbaseline.measure.timers import CpuStageTimer
from mlbaseline.results import load_result, write_result
from mlbaseline.runners.ab import COMPARED, ab_result, run_pairs

runner = CliRunner()

# ---------------------------------------------------------------- the ABBA scheduler


@pytest.mark.parametrize("seed", [0, 1, 42])
def test_abba_blocks_are_balanced(seed):
    order = abba_order(40, seed)
    assert len(order) == 40 and set(order) <= {"AB", "BA"}
    blocks = [tuple(order[i : i + 2]) for i in range(0, 40, 2)]
    assert set(blocks) <= {("AB", "BA"), ("BA", "AB")}
    # each arm runs first in exactly half the pairs
    assert Counter(order) == {"AB": 20, "BA": 20}


def test_abba_is_seeded_and_deterministic():
    assert abba_order(30, 7) == abba_order(30, 7)
    assert abba_order(30, 7) != abba_order(30, 8)
    # both block kinds occur: the choice is random, not fixed
    starts = {abba_order(30, 7)[i] for i in range(0, 30, 2)}
    assert starts == {"AB", "BA"}


def test_abba_odd_count_and_prefix():
    assert len(abba_order(7, 3)) == 7
    assert abba_order(7, 3) == abba_order(8, 3)[:7]
    assert abba_order(0, 3) == []
    with pytest.raises(ValueError):
        abba_order(-1, 3)
    assert arms_of("BA") == ("b", "a")


# ---------------------------------------------------------------- paired statistics


def synthetic(n, slow=None, factor=1.05, seed=0, noise=0.01, drift=0.3):
    """Per-pair stage times for A and B: a shared per-pair drift (common mode, up to `drift`)
    times independent noise; stage `slow` of B is `factor` slower."""
    rng = np.random.default_rng(seed)
    base = {s: 0.01 * (i + 1) for i, s in enumerate(COMPARED)}
    common = 1 + drift * rng.random(n)
    a, b = {}, {}
    for s, t in base.items():
        a[s] = t * common * np.exp(rng.normal(0, noise, n))
        b[s] = t * common * np.exp(rng.normal(0, noise, n)) * (factor if s == slow else 1)
    return a, b


def test_aa_is_never_regressed():
    for seed in range(5):
        a, b = synthetic(55, seed=seed)
        judged = stats.compare_paired(a, b, seed=seed)
        assert [s.stage for s in judged] == list(COMPARED)
        assert all(s.verdict != "regressed" for s in judged)
        assert stats.overall_verdict(judged) != "regressed"
        assert all(0.98 < s.ratio < 1.02 for s in judged)


def test_a_five_percent_slowdown_in_one_stage_is_found():
    a, b = synthetic(55, slow="backward", factor=1.05, seed=3)
    judged = {s.stage: s for s in stats.compare_paired(a, b)}
    assert judged["backward"].verdict == "regressed"
    assert judged["backward"].ci_low > 1.01 and judged["backward"].p_adjusted < 0.05
    assert all(s.verdict != "regressed" for k, s in judged.items() if k != "backward")
    assert stats.overall_verdict(list(judged.values())) == "regressed"


def test_improved_unchanged_inconclusive():
    a, b = synthetic(80, slow="forward", factor=0.95, seed=4, noise=0.005)
    judged = {s.stage: s for s in stats.compare_paired(a, b)}
    assert judged["forward"].verdict == "improved"
    assert judged["loss"].verdict == "unchanged"
    few_a, few_b = synthetic(4, seed=5, noise=0.05)
    few = stats.compare_paired(few_a, few_b)
    assert all(s.verdict == "inconclusive" for s in few)
    assert all(s.mde > 0.01 for s in few)


def test_paired_statistics_are_seeded_and_handle_zeros():
    a, b = synthetic(30, seed=6)
    assert stats.compare_paired(a, b, seed=1) == stats.compare_paired(a, b, seed=1)
    assert stats.log_ratios([0.0, 1.0, 2.0], [1.0, 0.0, 4.0]).tolist() == [np.log(2.0)]
    zero = stats.compare_paired({"x": [0.0] * 5}, {"x": [0.0] * 5})
    assert zero[0].n == 0 and zero[0].verdict == "inconclusive"
    same = stats.compare_paired({"x": [1.0] * 5}, {"x": [1.0] * 5})
    assert same[0].p == 1.0 and same[0].verdict == "unchanged"


# ---------------------------------------------------------------- the pair loop, fake clock


class FakeArm:
    """A training step on a ManualClock: each stage advances the clock by its base cost, times
    the machine's current slowdown (the same for both arms), times this arm's own factor per
    stage, times seeded noise."""

    def __init__(self, clock, machine, factors=None, seed=0, interrupt_at=None):
        self.clock, self.machine = clock, machine
        self.timer = CpuStageTimer(clock)
        self.factors = factors or {}
        self.rng = np.random.default_rng(seed)
        self.calls, self.interrupt_at = 0, interrupt_at

    def __call__(self) -> StepRecord:
        self.calls += 1
        if self.interrupt_at is not None and self.calls >= self.interrupt_at:
            raise KeyboardInterrupt
        self.timer.begin_step()
        for i, s in enumerate(TRAIN_STAGES):
            with self.timer.stage(s):
                cost = 0.001 * (i + 1) * self.machine.slowdown() * self.factors.get(s, 1.0)
                self.clock.advance(cost * float(np.exp(self.rng.normal(0, 0.01))))
        self.clock.advance(0.0001)  # glue between stages: the residual
        return StepRecord(self.timer.end_step(), 4)


class Machine:
    """Every stage of every step slows by `factor` once the clock passes `at_s`."""

    def __init__(self, clock, at_s, factor):
        self.clock, self.at_ns, self.factor = clock, at_s * 1e9, factor

    def slowdown(self) -> float:
        return self.factor if self.clock.now_ns() >= self.at_ns else 1.0


def _cfg():
    return resolve(None, "demo", {"compare.n_resamples": 500})


def test_common_mode_drift_cancels_in_the_pairs():
    clock = ManualClock()
    machine = Machine(clock, at_s=0.6, factor=1.3)  # ~ mid-run: 60 pairs of ~0.022 s each
    steps = {"a": FakeArm(clock, machine, seed=1), "b": FakeArm(clock, machine, seed=2)}
    log = run_pairs(steps, abba_order(60, 42), None, clock, warmup=2)
    assert log.stop_reason == "pairs" and len(log.done) == 60
    a_steps = [t.total_s for t in log.times["a"]]
    assert max(a_steps) / min(a_steps) > 1.25  # the drift is there, in both arms
    result = ab_result(_cfg(), _cfg(), log, stats.PAIRED_THRESHOLD, 42)
    verdicts = {s["stage"]: s["verdict"] for s in result.data["stages"]}
    assert "regressed" not in verdicts.values() and result.data["verdict"] != "regressed"
    assert not result.verdict.failed


def test_a_slower_stage_in_b_survives_the_drift():
    clock = ManualClock()
    machine = Machine(clock, at_s=0.6, factor=1.3)
    slow_b = FakeArm(clock, machine, {"forward": 1.05}, seed=2)
    steps = {"a": FakeArm(clock, machine, seed=1), "b": slow_b}
    log = run_pairs(steps, abba_order(60, 42), None, clock)
    result = ab_result(_cfg(), _cfg(), log, stats.PAIRED_THRESHOLD, 42)
    verdicts = {s["stage"]: s["verdict"] for s in result.data["stages"]}
    assert verdicts["forward"] == "regressed"
    assert [k for k, v in verdicts.items() if v == "regressed"] == ["forward"]
    assert result.verdict.failed and result.data["verdict"] == "regressed"


def test_budget_and_ctrl_c_keep_finished_pairs(tmp_path):
    clock = ManualClock()
    machine = Machine(clock, at_s=1e9, factor=1.0)
    steps = {"a": FakeArm(clock, machine), "b": FakeArm(clock, machine)}
    log = run_pairs(steps, abba_order(100, 1), 0.2, clock)
    assert log.stop_reason == "budget" and 0 < len(log.done) < 100
    stopped = {"a": FakeArm(clock, machine), "b": FakeArm(clock, machine, interrupt_at=8)}
    log = run_pairs(stopped, abba_order(20, 1), None, clock)
    assert log.stop_reason == "interrupted" and len(log.done) == 7
    result = ab_result(_cfg(), _cfg(), log, stats.PAIRED_THRESHOLD, 1)
    assert result.status == "interrupted"
    back = load_result(write_result(result, tmp_path / "ab.json"), kinds=["ab"])
    assert back.kind == "ab" and back.data["order"] == log.done
    m = back.measurements["ab.b.forward"]
    assert len(m.values) == 7 and m.replicate == list(range(7))


# ---------------------------------------------------------------- the CLI, end to end

TINY = [
    "--profile",
    "demo",
    "--set",
    "workload.model=builtin:tiny_mlp",
    "--set",
    "workload.image_size=8",
    "--set",
    "workload.dataset_size=32",
    "--set",
    "throughput.batch_sizes=[4]",
    "--set",
    "throughput.warmup_min=1",
    "--set",
    "compare.n_resamples=200",
]


def test_cli_ab_end_to_end(tmp_path):
    out = tmp_path / "ab.json"
    args = ["ab", *TINY, "--set-b", "workload.optimizer_kwargs={lr: 0.1}", "--pairs", "6"]
    res = runner.invoke(app, [*args, "-o", str(out), "--json"])
    # 6 pairs: the smallest Wilcoxon p (1/32), Holm across 7 stages, is never < 0.05
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["kind"] == "ab" and doc["data"]["pairs_done"] == 6
    assert doc["data"]["overrides"]["b"] == ["workload.optimizer_kwargs={lr: 0.1}"]
    assert doc["config"]["b"]["workload"]["optimizer_kwargs"] == {"lr": 0.1}
    assert doc["config"]["a"]["workload"]["optimizer_kwargs"] == {"lr": 0.01}
    assert [s["stage"] for s in doc["data"]["stages"]] == list(COMPARED)
    assert len(doc["measurements"]["ab.a.step"]["values"]) == 6
    assert load_result(out, kinds=["ab"]).data["order"] == abba_order(6, 42)
    assert "verdict" in res.stderr and "overall:" in res.stderr
    for line in res.stderr.splitlines():
        assert len(line) <= 80, line


def test_cli_ab_ctrl_c_keeps_the_finished_pairs(tmp_path):
    out = tmp_path / "ab.json"
    slow = ["--set", "workload.model=workloads_slow:slow_model"]
    slow += ["--set", "workload.dataset=workloads_slow:slow_dataset"]
    slow += ["--set", "workload.loss=workloads_slow:SlowLoss"]
    # B's 6th forward raises KeyboardInterrupt: 1 warm-up step, then 4 pairs, then the 5th cut
    b = ["--set-b", "workload.model_kwargs={interrupt_after: 6}"]
    res = runner.invoke(app, ["ab", *TINY, *slow, *b, "--pairs", "10", "-o", str(out), "-q"])
    assert res.exit_code == 130, res.output
    saved = load_result(out, kinds=["ab"])
    assert saved.status == "interrupted" and saved.data["stop_reason"] == "interrupted"
    assert saved.data["pairs_done"] == 4 and saved.data["order"] == abba_order(10, 42)[:4]
    assert len(saved.measurements["ab.a.forward"].values) == 4


def test_cli_ab_bad_input():
    res = runner.invoke(app, ["ab", *TINY, "--set-b", "nope.key=1", "--pairs", "2"])
    assert res.exit_code == 2 and "nope" in res.output
    res = runner.invoke(app, ["ab", *TINY, "--set-b", "workload.device=cuda:7", "--pairs", "2"])
    assert res.exit_code in (2, 3), res.output


# ---------------------------------------------------------------- drift control (issue 15 item 5)


def _control(clock, machine):
    from mlbaseline.measure.control import ControlKernel

    return ControlKernel(2, clock, work=lambda: clock.advance(0.002 * machine.slowdown()))


def test_control_kernel_sees_the_drift_that_pairing_cancels():
    clock = ManualClock()
    machine = Machine(clock, at_s=1.0, factor=1.3)  # ~ pair 23 of 60
    steps = {"a": FakeArm(clock, machine, seed=1), "b": FakeArm(clock, machine, seed=2)}
    control = _control(clock, machine)
    log = run_pairs(steps, abba_order(60, 42), None, clock, warmup=2, control=control)
    assert len(log.control) == 30 and [p for p, _ in log.control][:2] == [1, 3]
    result = ab_result(_cfg(), _cfg(), log, stats.PAIRED_THRESHOLD, 42, None, control.meta())
    m = result.measurements["ab.control.matmul"]
    assert m.meta["role"] == "control" and m.replicate == [p for p, _ in log.control]
    assert result.data["drift"]["control"]["late_over_early"] == pytest.approx(1.3, rel=0.01)
    assert result.data["verdict"] != "regressed" and result.data["drift"]["signature"] is None


def test_b_slower_in_every_stage_alike_is_named_machine_drift():
    clock = ManualClock()
    machine = Machine(clock, at_s=1e9, factor=1.0)
    uniform = dict.fromkeys(TRAIN_STAGES, 1.2)
    steps = {"a": FakeArm(clock, machine, seed=1), "b": FakeArm(clock, machine, uniform, seed=2)}
    log = run_pairs(steps, abba_order(60, 42), None, clock)
    result = ab_result(_cfg(), _cfg(), log, stats.PAIRED_THRESHOLD, 42)
    verdicts = {s["stage"]: s["verdict"] for s in result.data["stages"]}
    assert "regressed" not in verdicts.values() and result.data["verdict"] != "regressed"
    sig = result.data["drift"]["signature"]
    assert sig["factor"] == pytest.approx(1.2, rel=0.01) and "data_wait" in sig["stages"]
    assert "machine_drift" in {w["code"] for w in result.warnings}
    assert not result.verdict.failed
