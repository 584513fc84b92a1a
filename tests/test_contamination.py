"""Foreign CPU share and contamination (issue 15 item 5): the account's arithmetic on injected
readers, the warning it writes, its signal on golden files, `mlb compare` naming a contaminated
input, and a real tiny throughput run recording the control kernel outside the step timer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlbaseline import comparison as cmp
from mlbaseline.config import CompareConfig, resolve
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.contamination import CpuAccount, own_tree_s, record, system_busy_s
from mlbaseline.measure.control import ControlKernel
from mlbaseline.measure.loop import StopRule, run_steps
from mlbaseline.report import signals
from mlbaseline.results import Result, load_result

GOLDEN = Path(__file__).resolve().parent / "golden" / "signals"


def account(foreign_per_phase, own_cores=1.0, threshold=0.25):
    """An account on a fake clock whose machine runs `own_cores` of ours plus each phase's
    foreign cores."""
    clock = ManualClock()
    state = {"busy": 0.0, "own": 0.0}
    acc = CpuAccount(threshold, clock, lambda: state["busy"], lambda: state["own"],
                     lambda: (1.5, 1.0, 0.5))  # fmt: skip
    for i, foreign in enumerate(foreign_per_phase):
        with acc.phase(f"phase{i}"):
            clock.advance(2.0)
            state["own"] += 2.0 * own_cores
            state["busy"] += 2.0 * (own_cores + foreign)
    return acc


def test_foreign_cores_are_busy_minus_own_per_wall_second():
    acc = account([0.05, 0.6, 0.1])
    got = [p["foreign_cores"] for p in acc.phases]
    assert got == pytest.approx([0.05, 0.6, 0.1])
    assert acc.phases[1]["own_cores"] == pytest.approx(1.0)
    assert acc.contaminated and acc.worst["phase"] == "phase1"
    assert acc.phases[0]["start"]["load"] == [1.5, 1.0, 0.5]


def test_a_quiet_run_is_not_contaminated_and_own_load_never_counts():
    acc = account([0.0, 0.2], own_cores=2.0)
    assert not acc.contaminated and acc.message() is None
    r = Result(kind="throughput")
    record(r, acc)
    assert r.data["contamination"]["contaminated"] is False and not r.warnings


def test_a_contaminated_run_marks_itself():
    r = Result(kind="throughput")
    record(r, account([0.9]))
    assert r.data["contamination"]["contaminated"]
    (w,) = r.warnings
    assert w["code"] == "contaminated" and w["value"] == pytest.approx(0.9)
    assert "0.90 cores" in w["message"] and "limit 0.25" in w["message"]


def test_the_real_readers_count_this_process():
    """This process's CPU work shows in both counters (ticks are 10 ms: work until one moves,
    a bounded number of times)."""
    own, busy = own_tree_s(), system_busy_s()
    assert own > 0 and busy > 0
    x = np.random.default_rng(0).standard_normal((300, 300))
    for _ in range(200):
        np.linalg.svd(x)
        if own_tree_s() > own:
            break
    assert own_tree_s() > own and system_busy_s() > busy


@pytest.mark.parametrize(("name", "fired"), [("contaminated.json", True), ("clean.json", False)])
def test_contamination_signal_on_golden_files(name, fired):
    (sig,) = signals.contamination_signals([load_result(GOLDEN / name)])
    assert sig.measured and sig.fired is fired and sig.threshold == 0.25
    assert not signals.contamination_signals([load_result(GOLDEN / "one_process.json")])[0].measured


def test_compare_names_a_contaminated_input():
    old, new = load_result(GOLDEN / "clean.json"), load_result(GOLDEN / "contaminated.json")
    c = cmp.compare_results(old, new, CompareConfig(n_resamples=200), allow_mismatch=True)
    (w,) = [w for w in c.warnings if w["code"] == "contaminated_input"]
    assert w["side"] == "NEW" and "0.90 cores" in w["message"]
    both = cmp.compare_results(new, new, CompareConfig(n_resamples=200), same_input=True)
    assert [w["side"] for w in both.warnings if w["code"] == "contaminated_input"] == ["OLD", "NEW"]
    same = cmp.compare_results(
        new, new, CompareConfig(n_resamples=200), same_input=True, old_label="x.json",
        new_label="x.json",
    )  # fmt: skip
    # a file against itself: said once, not twice word for word
    assert len([w for w in same.warnings if w["code"] == "contaminated_input"]) == 1


def test_the_control_kernel_runs_outside_the_step_timer():
    """Each control sample costs 1 s on the fake clock; no step time sees any of it."""
    from tests_fakes import fake_step

    clock = ManualClock()
    kernel = ControlKernel(2, clock, work=lambda: clock.advance(1.0))
    rule = StopRule(min_steps=10, max_steps=10, warmup_min=2, warmup_max=2, window=4)
    loop = run_steps(fake_step(clock), rule, value=lambda r: r.times.total_s, clock=clock,
                     on_step=kernel.on_step)  # fmt: skip
    # measuring starts once warm-up is decided (some measured steps precede the decision)
    measured = len(loop.records) - loop.warmup
    assert kernel.samples and kernel.samples == [1.0] * len(kernel.samples)
    assert len(kernel.samples) <= measured // 2
    assert max(r.times.total_s for r in loop.records) < 0.1
    assert kernel.metric().meta["role"] == "control"


def test_a_real_tiny_run_records_control_and_account(tmp_path):
    from mlbaseline.runners.throughput import run_throughput

    cfg = resolve(None, "demo", {
        "workload.model": "builtin:tiny_mlp", "workload.image_size": 8,
        "workload.dataset_size": 32, "throughput.batch_sizes": [4], "throughput.mode": "train",
        "throughput.min_time_s": 0.0, "throughput.min_steps": 16, "throughput.max_steps": 16,
        "throughput.telemetry": False, "throughput.control_every": 4, "throughput.repeats": 1,
    })  # fmt: skip
    r = run_throughput(cfg)
    control = r.measurements["control.matmul"]
    assert 1 <= len(control.values) <= 16 // 4 and control.meta["every"] == 4
    assert all(v > 0 for v in control.values)
    phases = r.data["contamination"]["phases"]
    assert [p["phase"] for p in phases] == ["train.bs4"] and phases[0]["duration_s"] > 0
