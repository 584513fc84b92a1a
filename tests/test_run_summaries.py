"""End-of-run summaries and source-aware advice (issue 27, item 6): the library API and the
Lightning callback print one line when the result is written (path, steps, why they stopped,
the step median with its CI) and the callback names the LightningModule's class; `mlb
throughput` names the largest share of the step on screen; advice about fresh processes names
only what the result's source has (`--repeats` for the CLI, `pool_results` for the API), and
pooling API runs gives the comparison its verdict. Fake clocks wherever a number is asserted."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from mlbaseline import formatting as fmt
from mlbaseline.api import Baseline, pool_results
from mlbaseline.api.baseline import STOP_WORDS
from mlbaseline.cli.common import Ui
from mlbaseline.cli.throughput import print_summary, share_lines
from mlbaseline.comparison import compare_results
from mlbaseline.comparison.advice import API, CLI, repeats_advice, sides_advice
from mlbaseline.config import CompareConfig
from mlbaseline.errors import UsageError
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.progress import NullProgress
from mlbaseline.results import Result, load_result

RULE = {
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,
    "throughput.min_steps": 8,
    "throughput.max_steps": 60,
    "throughput.max_time_s": 1e6,
    "throughput.window": 4,
    "throughput.warmup_min": 2,
    "throughput.warmup_max": 20,
}
COSTS = {"forward": 0.004, "backward": 0.006, "optimizer": 0.002}  # 12 ms of compute


def baseline(clock: ManualClock, **kw: object) -> Baseline:
    return Baseline("unit", 16, "cpu", overrides=RULE, clock=clock, telemetry=False,
                    probe=NullProbe(), **kw)  # type: ignore[arg-type]  # fmt: skip


def loader(clock: ManualClock, wait_s: float) -> Iterator[int]:
    i = 0
    while True:
        clock.advance(wait_s)
        yield i
        i += 1


def run(bl: Baseline, clock: ManualClock, wait_s: float, steps: int | None = None,
        scale: float = 1.0) -> None:  # fmt: skip
    """The README's loop; `steps`: the user's loop ends there, whether or not the rule is met."""
    for n, _ in enumerate(bl.data(loader(clock, wait_s))):
        with bl.step():
            for name, cost in COSTS.items():
                with bl.stage(name):
                    clock.advance(cost * scale)
        if bl.done or (steps is not None and n + 1 >= steps):
            break


def saved(tmp_path: Path, name: str, wait_s: float = 0.001, scale: float = 1.0) -> Path:
    clock = ManualClock()
    bl = baseline(clock, quiet=True)
    run(bl, clock, wait_s, scale=scale)
    path = bl.save(tmp_path / name, history=False)
    assert path is not None
    return path


# ------------------------------------------------------------------ the API's summary line


def test_the_api_prints_one_summary_line_with_path_steps_reason_and_ci(tmp_path, capsys):
    clock = ManualClock()
    bl = baseline(clock)
    run(bl, clock, 0.001)
    path = bl.save(tmp_path / "own.json", history=False)
    out, err = capsys.readouterr()
    assert out == ""  # the user's stdout stays theirs
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == bl.summary
    line = lines[0]
    train = load_result(path).data["batch_sizes"]["16"]["train"]
    step = train["time_s"]
    assert str(path) in line
    assert f"{train['measured_steps']} steps measured after {train['warmup_steps']} warm-up" in line
    assert f"stopped: {STOP_WORDS['stable']}" in line
    ci = fmt.with_ci(step["median"], step["ci_low"], step["ci_high"], fmt.milliseconds)
    assert f"step median {ci} ms (95% CI)" in line
    assert "13" in ci  # 12 ms of stages plus the 1 ms data wait


def test_a_loop_that_ends_first_says_so_and_quiet_prints_nothing(tmp_path, capsys):
    clock = ManualClock()
    bl = baseline(clock, quiet=True)
    run(bl, clock, 0.001, steps=12)  # min_steps 8 after the warm-up cannot be met in 12
    bl.save(tmp_path / "short.json", history=False)
    assert capsys.readouterr().err == ""
    assert bl.summary is not None and STOP_WORDS["loop_ended"] in bl.summary


def test_the_api_records_the_model_it_is_given(tmp_path):
    bl = baseline(ManualClock(), model="lightning:pkg.Net")
    assert bl.cfg.workload.model == "lightning:pkg.Net"
    assert baseline(ManualClock()).cfg.workload.model == "api:unit"


# ------------------------------------------------------------------ Lightning


def test_lightning_records_the_module_class_and_prints_why_it_stopped(tmp_path, capsys):
    pytest.importorskip("pytorch_lightning")
    from test_lightning import RULE as PL_RULE
    from test_lightning import Tiny, loader, trainer

    from mlbaseline.api.lightning import MlbCallback

    def fit(name: str, max_steps: int, **kw: object) -> str:
        kw.setdefault("overrides", PL_RULE)
        cb = MlbCallback(tmp_path / name, telemetry=False, probe=NullProbe(), **kw)  # type: ignore[arg-type]
        trainer(cb, max_steps=max_steps).fit(Tiny(), loader())
        return capsys.readouterr().err

    err = fit("pl.json", 200, stop_training=True)
    r = load_result(tmp_path / "pl.json")
    assert r.config["workload"]["model"] == f"lightning:{Tiny.__module__}.Tiny"
    lines = [x for x in err.splitlines() if x.startswith("mlb: wrote")]
    reason = r.data["batch_sizes"]["8"]["stop_reason"]
    assert len(lines) == 1 and str(tmp_path / "pl.json") in lines[0]
    assert STOP_WORDS[reason] in lines[0] and "training stopped here" in lines[0]
    assert re.search(r"step median [\d.]+ \[[\d.]+, [\d.]+\] ms \(95% CI\)", lines[0])

    # a fit that ends before the rule: the line says so (min_steps 50 in 12 steps)
    err = fit("short.json", 12, overrides={**PL_RULE, "throughput.min_steps": 50})
    lines = [x for x in err.splitlines() if x.startswith("mlb: wrote")]
    assert len(lines) == 1 and STOP_WORDS["loop_ended"] in lines[0]
    assert fit("quiet.json", 12, quiet=True).count("mlb: wrote") == 0
    # the rule met without stop_training: written there, and the line says training goes on
    err = fit("on.json", 200)
    lines = [x for x in err.splitlines() if x.startswith("mlb: wrote")]
    assert len(lines) == 1 and "training goes on, unmeasured" in lines[0]


# ------------------------------------------------------------------ mlb throughput's share line


def _screen(result: Result) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=80, color_system=None)
    print_summary(Ui(console=console, progress=NullProgress(), quiet=False), result)
    return " ".join(buf.getvalue().split())  # rich wraps at 80 columns


def test_throughput_names_an_input_bound_step_on_screen(tmp_path):
    # a 12 ms data wait beside 12 ms of compute: half of the step waits for the input
    result = load_result(saved(tmp_path, "slow-input.json", wait_s=0.012))
    share = result.data["batch_sizes"]["16"]["train"]["stage_share"]["data_wait"]
    lines = share_lines(result)
    assert len(lines) == 1
    assert lines[0].startswith(f"bs16 train: data wait is {fmt.percent(share)} of the step")
    assert "throughput.num_workers, now 0" in lines[0] and "mlb dataloader" in lines[0]
    assert f"data wait is {fmt.percent(share)} of the step" in _screen(result)


def test_no_share_line_below_a_fifth_of_the_step(tmp_path):
    result = load_result(saved(tmp_path, "r.json"))
    entry = result.data["batch_sizes"]["16"]["train"]
    entry["stage_share"] = {"data_wait": 0.19, "forward": 0.19, "backward": 0.19,
                            "optimizer": 0.19}  # fmt: skip
    entry["residual_share"] = 0.24
    assert share_lines(result)[0].startswith("bs16 train: residual is 24.0% of the step")
    entry["residual_share"] = 0.05
    assert share_lines(result) == []
    assert "of the step:" not in _screen(result)


# ------------------------------------------------------------------ advice by source


def test_advice_names_only_what_the_source_has():
    assert repeats_advice(CLI, 6) == "measure with --repeats 6 or more"
    api = repeats_advice(API, 6)
    assert "measure with --repeats" not in api and "mlb attach --repeats 6" in api
    assert "6 or more times" in api and "pool_results" in api
    assert sides_advice([API, API], 6) == api
    mixed = sides_advice([CLI, API], 6, ["a.json", "b.json"])
    assert mixed == f"a.json: {repeats_advice(CLI, 6)}; b.json: {api}"


def _insufficient(old: Result, new: Result) -> tuple[str, list[str]]:
    comp = compare_results(old, new, CompareConfig(), old_label="a.json", new_label="b.json")
    warning = next(w for w in comp.warnings if w["code"] == "insufficient_data")
    return warning["message"], [m.reason or "" for m in comp.metrics]


def test_compare_advice_for_api_results_names_only_what_exists(tmp_path):
    old = load_result(saved(tmp_path, "a.json"))
    new = load_result(saved(tmp_path, "b.json", scale=1.1))
    message, reasons = _insufficient(old, new)
    assert "measure with --repeats" not in message and "pool_results" in message
    assert "mlb attach --repeats 2" in message  # the script's replicates, no code change
    assert all("measure with --repeats" not in r for r in reasons)
    assert any("pool_results" in r for r in reasons)
    for r in (old, new):  # the same files as if the CLI had measured them: --repeats it is
        del r.data["source"]
    message, reasons = _insufficient(old, new)
    assert "measure with --repeats 2 or more" in message and "pool_results" not in message
    assert any("--repeats 2 or more" in r for r in reasons)


def test_pooled_api_runs_get_a_verdict(tmp_path):
    olds = [saved(tmp_path, f"a{i}.json", scale=1 + i / 100) for i in range(3)]
    news = [saved(tmp_path, f"b{i}.json", scale=1.3 + i / 100) for i in range(3)]
    old = load_result(pool_results(olds, tmp_path / "a.json"))
    new = load_result(pool_results(news, tmp_path / "b.json"))
    assert old.data["source"] == API and old.data["repeats"] == 3
    assert sorted(set(old.measurements["train.bs16.step"].replicate or [])) == [0, 1, 2]
    comp = compare_results(old, new, CompareConfig())
    step = next(m for m in comp.metrics if m.name == "train.bs16.step")
    assert step.verdict == "regressed"
    assert not any(w["code"] == "insufficient_data" for w in comp.warnings)


def test_pool_refuses_what_is_not_one_workload_of_the_api(tmp_path):
    a, b = saved(tmp_path, "a.json"), saved(tmp_path, "b.json")
    with pytest.raises(UsageError, match="pool 2 or more"):
        pool_results([a], tmp_path / "p.json")
    pooled = pool_results([a, b], tmp_path / "p.json")
    with pytest.raises(UsageError, match="already pooled"):
        pool_results([pooled, a], tmp_path / "q.json")
    clock = ManualClock()
    other = Baseline("other", 8, "cpu", overrides=RULE, clock=clock, telemetry=False,
                     probe=NullProbe(), quiet=True)  # fmt: skip
    run(other, clock, 0.001)
    c = other.save(tmp_path / "c.json", history=False)
    assert c is not None
    with pytest.raises(UsageError, match="config differs"):
        pool_results([a, c], tmp_path / "q.json")


# ------------------------------------------------------------------ the workload, named on screen


def test_the_throughput_screen_first_names_what_was_measured(tmp_path):
    result = load_result(saved(tmp_path, "r.json"))
    screen = _screen(result)
    assert screen.startswith("measured: ")
    # the library API's loop drew its own data: its config's dataset is not claimed
    assert "the script's own data" in screen.split("┃")[0] and "batch sizes 16" in screen


def test_compare_names_the_workload_once_or_each_sides(tmp_path):
    from mlbaseline.cli.compare import measured_line

    old = load_result(saved(tmp_path, "a.json"))
    new = load_result(saved(tmp_path, "b.json"))
    same = measured_line(old, new)
    assert same.startswith("measured: ") and "; new " not in same
    new.config["workload"]["model"] = "torchvision:resnet50"
    differs = measured_line(old, new)
    assert differs.startswith("measured: old ") and "; new torchvision:resnet50 on" in differs
