"""The default replicate count (`throughput.repeats: auto`): stop at the target, the budget or
the cap, and advise a count that passes the same gate."""

from __future__ import annotations

import numpy as np

from mlbaseline import stats
from mlbaseline.runners.replicate_plan import MIN_AUTO, Plan, budget_for, decide, message

PLAN = Plan(min_k=MIN_AUTO, max_k=10, target=0.015, budget_s=100.0)


def _medians(cv: float, k: int, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    x = 1.0 + cv * rng.standard_normal(k)
    # rescale so the sample CV is exactly `cv`: the test then knows the half-width
    x = 1.0 + (x - x.mean()) / x.std(ddof=1) * cv
    return list(x)


def test_stops_at_target_only_after_the_minimum() -> None:
    k = MIN_AUTO
    quiet = {"train.bs16.step": _medians(0.001, k - 1)}
    assert decide(quiet, [5.0] * (k - 1), PLAN).stop is None  # below MIN_AUTO, however quiet
    quiet = {"train.bs16.step": _medians(0.001, k)}
    d = decide(quiet, [5.0] * k, PLAN)
    assert d.stop == "target" and d.half_width is not None and d.half_width <= PLAN.target


def test_runs_on_while_noisy_and_budget_left() -> None:
    noisy = {"train.bs16.step": _medians(0.10, 3)}
    d = decide(noisy, [5.0] * 3, PLAN)
    assert d.stop is None and d.half_width is not None and d.half_width > PLAN.target


def test_budget_stops_before_overrunning_it() -> None:
    noisy = {"train.bs16.step": _medians(0.10, 3)}
    # 3 × 30 s spent; a fourth at ~30 s would end at 120 s > 100 s
    d = decide(noisy, [30.0] * 3, PLAN)
    assert d.stop == "budget"
    assert "time budget 100 s" in message(d, 3, PLAN) and f"~{d.needed}" in message(d, 3, PLAN)


def test_too_few_replicates_for_the_count_say_what_budget_fits_the_minimum() -> None:
    """A budget that stops auto below MIN_AUTO: the advised count is a rough figure, and the
    budget the line names does fit MIN_AUTO replicates under the same budget rule."""
    walls = [23.4, 16.7]  # the demo on a slow VM: 2 replicates in 60 s
    plan = Plan(min_k=MIN_AUTO, max_k=10, target=0.015, budget_s=60.0)
    d = decide({"train.bs16.step": _medians(0.10, 2)}, walls, plan)
    assert d.stop == "budget"
    text = message(d, 2, plan, walls)
    budget = budget_for(MIN_AUTO, walls)
    assert f"a rough figure from 2: about {budget} s" in text and f"fits the {MIN_AUTO}" in text
    bigger = Plan(min_k=MIN_AUTO, max_k=10, target=0.015, budget_s=float(budget))
    mean = float(np.mean(walls))
    for k in range(2, MIN_AUTO):  # each further replicate at the mean wall still fits
        assert decide({"m": _medians(0.10, k)}, [*walls, *[mean] * (k - 2)], bigger).stop is None
    # at or above the minimum the count is the figure itself
    assert "rough" not in message(d, MIN_AUTO, plan, [10.0] * MIN_AUTO)


def test_cap_stops() -> None:
    noisy = {"train.bs16.step": _medians(0.10, 10)}
    assert decide(noisy, [1.0] * 10, PLAN).stop == "max"


def test_the_worst_metric_decides() -> None:
    meds = {"train.bs8.step": _medians(0.001, 4), "train.bs16.step": _medians(0.08, 4)}
    d = decide(meds, [1.0] * 4, PLAN)
    assert d.worst == "train.bs16.step" and d.stop is None


def test_advised_count_passes_its_own_gate() -> None:
    for cv in (0.005, 0.02, 0.05, 0.12, 0.3):
        d = decide({"m": _medians(cv, 3, seed=int(cv * 1000))}, [50.0] * 3, PLAN)
        assert d.stop == "budget" or d.stop == "target"
        k = d.needed
        assert k is not None
        # at the measured spread, k replicates meet the target and k − 1 do not (k ≥ 2)
        assert stats.relative_t_half_width(cv, k, PLAN.confidence) <= PLAN.target + 1e-12
        if k > 2:
            assert stats.relative_t_half_width(cv, k - 1, PLAN.confidence) > PLAN.target


def test_replicates_run_up_to_what_a_comparison_can_judge_even_past_the_budget() -> None:
    """One replicate could never be judged (insufficient data): the second runs even past the
    budget, and only then does the budget stop auto."""
    assert decide({}, [], PLAN).stop is None
    assert decide({"m": [1.0]}, [500.0], PLAN).stop is None  # past the budget: one more
    assert decide({"m": [1.0, 1.1]}, [500.0, 500.0], PLAN).stop == "budget"


def test_repeats_option_is_spelled_and_checked_alike_in_run_and_throughput() -> None:
    from typer.testing import CliRunner

    from mlbaseline.cli import app

    for cmd in ("run", "throughput"):
        out = CliRunner().invoke(app, [cmd, "--repeats", "zero"])
        assert out.exit_code == 2
        assert "Error: --repeats: 'zero' is not a positive integer or auto" in out.output


def test_plan_for_fixed_auto_and_the_cases_auto_cannot_replicate() -> None:
    from mlbaseline.config import resolve
    from mlbaseline.runners.replicate_plan import plan_for

    t = resolve(profile="demo", overrides={"throughput.repeats": "auto"}).throughput
    n, plan, why = plan_for(t)
    assert plan is not None and n == t.max_repeats and why is None
    assert plan_for(t, under_torchrun=True)[:2] == (1, None)
    t2 = resolve(overrides={"throughput.repeats": "auto", "throughput.nproc": 2}).throughput
    assert plan_for(t2)[0] == 1 and "nproc 2" in (plan_for(t2)[2] or "")
    t3 = resolve(overrides={"throughput.repeats": 4}).throughput
    assert plan_for(t3) == (4, None, None)


def _child_result(median: float, seed: int):
    from mlbaseline.results import Metric, Result

    rng = np.random.default_rng(seed)
    values = list(median * (1 + 0.01 * rng.standard_normal(20)))
    r = Result(kind="throughput")
    r.add_metric(Metric("train.bs4.step", "s", False, values, meta={"role": "total"}))
    r.data = {"batch_sizes": {}}
    return r


def test_auto_replicates_stop_at_the_target_and_say_so(monkeypatch) -> None:
    from mlbaseline.config import resolve
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.progress import NullProgress
    from mlbaseline.runners import throughput as tp

    medians = iter([0.100, 0.1004, 0.0998, 0.1001, 0.1, 0.1002, 0.0999])
    calls: list[list[str]] = []

    def fake_child(cmd: list[str]) -> tp.ChildRun:
        calls.append(cmd)
        return tp.ChildRun(_child_result(next(medians), len(calls)), "", 0, False)

    monkeypatch.setattr(tp, "run_child", fake_child)
    over = {"throughput.repeats": "auto", "throughput.telemetry": False}
    result = tp.run_throughput(resolve(overrides=over), NullProgress(), NullProbe())
    plan = result.data["replicate_plan"]
    k = MIN_AUTO
    assert len(calls) == k and plan["stop"] == "target" and plan["replicates"] == k
    assert f"{k} replicates: median known to" in plan["message"]
    assert sorted(set(result.measurements["train.bs4.step"].replicate)) == list(range(k))
    assert not any(w.get("code") == "repro_target" for w in result.warnings)


def test_auto_replicates_that_run_out_of_budget_warn_with_a_reachable_count(monkeypatch) -> None:
    from mlbaseline.config import resolve
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.progress import NullProgress
    from mlbaseline.runners import throughput as tp

    medians = iter([0.10, 0.13, 0.09, 0.12, 0.11, 0.10, 0.14, 0.1, 0.1, 0.1])
    monkeypatch.setattr(
        tp, "run_child", lambda cmd: tp.ChildRun(_child_result(next(medians), 0), "", 0, False)
    )
    over = {"throughput.repeats": "auto", "throughput.telemetry": False}
    over["throughput.max_repeats"] = MIN_AUTO + 1
    result = tp.run_throughput(resolve(overrides=over), NullProgress(), NullProbe())
    plan = result.data["replicate_plan"]
    assert plan["stop"] == "max" and plan["replicates"] == MIN_AUTO + 1
    warning = next(w for w in result.warnings if w.get("code") == "repro_target")
    assert warning["needed"] > MIN_AUTO + 1 and f"~{warning['needed']}" in warning["message"]


def test_bad_input_in_the_first_replicate_is_one_error_exit_2(monkeypatch) -> None:
    import pytest

    from mlbaseline.config import resolve
    from mlbaseline.errors import UsageError
    from mlbaseline.measure.gpu import NullProbe
    from mlbaseline.progress import NullProgress
    from mlbaseline.runners import throughput as tp

    bad = tp.ChildRun(None, "Error: workload.model: cannot import module 'nope'", 2, False)
    monkeypatch.setattr(tp, "run_child", lambda cmd: bad)
    over = {"throughput.repeats": "auto", "throughput.telemetry": False}
    with pytest.raises(UsageError, match=r"^workload\.model: cannot import module 'nope'$"):
        tp.run_throughput(resolve(overrides=over), NullProgress(), NullProbe())
