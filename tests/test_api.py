"""The library API (`mlbaseline.api.Baseline`) around a user's own loop: stages add up to the
step with the residual shown, a known cost lands in its stage, the warm-up and stop decisions
are the CLI's (one `StepLoop`), CUDA events (faked), Ctrl-C, bad use, and the result file that
`mlb compare` reads. Fake clocks everywhere a number is asserted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mlbaseline import stats
from mlbaseline.api import Baseline
from mlbaseline.errors import OutputExistsError, UsageError
from mlbaseline.measure import loop as loop_mod
from mlbaseline.measure.clock import ManualClock, busy_wait
from mlbaseline.measure.gpu import GpuInfo, NullProbe
from mlbaseline.measure.loop import StepLoop, StopRule, run_steps
from mlbaseline.results import load_result

# a small rule so that a loop settles in a few dozen fake steps
OVER = {
    "throughput.min_time_s": 0.0,
    "throughput.repeats": 1,  # one process: replicates are tested apart
    "throughput.min_steps": 8,
    "throughput.max_steps": 60,
    "throughput.max_time_s": 1e6,
    "throughput.window": 4,
    "throughput.warmup_min": 2,
    "throughput.warmup_max": 20,
}
STAGES = {"h2d": 0.001, "forward": 0.004, "loss": 0.0005, "backward": 0.006, "optimizer": 0.002}
GLUE = 0.0001  # between stages, outside any: the residual (3% of the step: under the 5% check)


def baseline(clock: ManualClock, **kw: object) -> Baseline:
    over = {**OVER, **kw.pop("overrides", {})}  # type: ignore[dict-item]
    return Baseline(
        "unit", 16, "cpu", overrides=over, clock=clock, telemetry=False, probe=NullProbe(), **kw
    )


def fake_loader(clock: ManualClock, wait_s: float) -> Iterator[int]:
    i = 0
    while True:
        clock.advance(wait_s)  # the data wait
        yield i
        i += 1


def train_step(bl: Baseline, clock: ManualClock, costs: dict[str, float]) -> None:
    for name, cost in costs.items():
        with bl.stage(name):
            clock.advance(cost)
        clock.advance(GLUE)


def run_pattern_a(bl: Baseline, clock: ManualClock, costs: dict[str, float]) -> int:
    """The README's loop: `for batch in bl.data(loader): with bl.step(): …; if bl.done: break`."""
    n = 0
    for _batch in bl.data(fake_loader(clock, 0.002)):
        with bl.step():
            train_step(bl, clock, costs)
        n += 1
        if bl.done:
            break
    return n


def test_stages_add_up_to_the_step_with_the_residual_shown(tmp_path):
    clock = ManualClock()
    bl = baseline(clock)
    n = run_pattern_a(bl, clock, STAGES)
    assert bl.done and bl.loop.reason == "stable" and n == len(bl.loop.records)
    path = bl.save(tmp_path / "own.json")
    result = load_result(path, ["throughput"])
    m = result.measurements
    names = ["data_wait", *STAGES]
    assert result.data["stages"] == names and result.data["source"] == "api"
    assert m["train.bs16.step"].meta["stages"] == names
    for i, total in enumerate(m["train.bs16.step"].values):
        parts = sum(m[f"train.bs16.{s}"].values[i] for s in names)
        assert total == pytest.approx(parts + m["train.bs16.residual"].values[i], abs=1e-12)
    assert m["train.bs16.residual"].values == pytest.approx(
        [GLUE * len(STAGES)] * len(m["train.bs16.residual"].values)
    )
    assert m["train.bs16.data_wait"].values[0] == pytest.approx(0.002)
    assert m["train.bs16.forward"].values[0] == pytest.approx(STAGES["forward"])
    train = result.data["batch_sizes"]["16"]["train"]
    shares = sum(train["stage_share"].values()) + train["residual_share"]
    assert shares == pytest.approx(1.0)
    assert train["residual_share"] == pytest.approx(
        GLUE * 5 / (0.002 + sum(STAGES.values()) + GLUE * 5)
    )
    checks = {c.name: c.status for c in result.verdict.checks}
    assert checks == {"train.bs16.stop_rule": "pass", "train.bs16.residual": "pass"}
    assert "telemetry_window_s" not in train and "telemetry" not in result.data  # it was off
    rate = m["train.bs16.samples_per_s"].values[0]
    assert rate == pytest.approx(16 / m["train.bs16.step"].values[0])


def test_a_busy_wait_in_one_stage_is_attributed_to_that_stage():
    """On the fake clock a busy-wait is exact; then the same on the real clock, where only
    lower bounds can be asserted on a shared machine."""
    clock = ManualClock()
    bl = baseline(clock)
    run_pattern_a(bl, clock, {**STAGES, "forward": STAGES["forward"] + 0.05})
    r = bl.result()
    fwd = r.measurements["train.bs16.forward"].values
    assert fwd == pytest.approx([STAGES["forward"] + 0.05] * len(fwd))
    assert r.measurements["train.bs16.backward"].values[0] == pytest.approx(STAGES["backward"])

    real = Baseline("real", 4, "cpu", overrides={**OVER, "throughput.max_steps": 10},
                    telemetry=False, probe=NullProbe())  # fmt: skip
    for _ in real.data(range(100)):
        with real.step():
            with real.stage("forward"):
                busy_wait(0.01)
            with real.stage("backward"):
                pass
        if real.done:
            break
    m = real.result().measurements
    assert min(m["train.bs4.forward"].values) >= 0.01
    assert all(
        f > b
        for f, b in zip(m["train.bs4.forward"].values, m["train.bs4.backward"].values, strict=True)
    )


def scripted_values() -> list[float]:
    """Warm-up that decays, then noise around a level: enough to exercise both decisions."""
    warm = [0.5, 0.3, 0.2, 0.15, 0.12]
    return warm + [0.1 + 0.001 * ((i * 7) % 5) for i in range(200)]


@pytest.mark.parametrize(
    "rule_over", [{}, {"throughput.min_time_s": 2.0}, {"throughput.max_steps": 12}]
)
def test_warmup_and_stop_decisions_are_the_clis(rule_over):
    """Same step times → same warm-up length, stop reason and step count as `run_steps`, the
    CLI's loop; both go through the one `StepLoop`."""
    values = scripted_values()
    clock = ManualClock()
    bl = baseline(clock, overrides=rule_over)
    it = iter(values)
    while not bl.done:
        with bl.step(), bl.stage("forward"):
            clock.advance(next(it))
    cli_clock = ManualClock()
    cli_values = iter(values)

    def step() -> float:
        v = next(cli_values)
        cli_clock.advance(v)
        return v

    cli = run_steps(step, StopRule.from_config(bl.cfg.throughput), float, cli_clock)
    api = bl.loop.result()
    assert (api.warmup, api.stop_reason, len(api.records)) == (
        cli.warmup,
        cli.stop_reason,
        len(cli.records),
    )
    assert api.values == pytest.approx(cli.values)


def test_one_stop_rule_implementation(monkeypatch):
    """`run_steps` and `Baseline` both hand every step to `StepLoop.end`."""
    seen: list[str] = []
    original = StepLoop.end

    def spy(self, record, value):
        seen.append("loop")
        return original(self, record, value)

    monkeypatch.setattr(loop_mod.StepLoop, "end", spy)
    clock = ManualClock()
    res = run_steps(
        lambda: clock.advance(0.1) or 0.1, StopRule(min_steps=4, window=4), float, clock
    )
    assert len(seen) == len(res.records)
    seen.clear()
    bl = baseline(clock)
    assert isinstance(bl.loop, StepLoop)
    for _ in range(3):
        with bl.step():
            clock.advance(0.1)
    assert seen == ["loop"] * 3


def test_gradient_accumulation_sums_the_data_waits_of_one_step():
    clock = ManualClock()
    bl = baseline(clock)
    it = bl.data(fake_loader(clock, 0.001))
    for _ in range(3):
        with bl.step(samples=64):
            for _micro in range(4):
                next(it)
                with bl.stage("forward"):
                    clock.advance(0.002)
    rec = bl.loop.records
    assert len(rec) == 3 and all(r.samples == 64 for r in rec)
    assert rec[0].times.stages["data_wait"] == pytest.approx(0.004)
    assert rec[0].times.stages["forward"] == pytest.approx(0.008)


def test_per_step_groups_micro_batches_into_one_step_without_a_step_block():
    clock = ManualClock()
    bl = baseline(clock)
    for _epoch in range(2):  # 7 batches an epoch: 3 whole steps, the 7th batch's is dropped
        for _b in bl.data(range(7), per_step=2):
            with bl.stage("forward"):
                clock.advance(0.002)
    rec = bl.loop.records
    assert len(rec) == 6 and len(bl.loop.starts) == 6
    assert all(r.times.stages["forward"] == pytest.approx(0.004) for r in rec)
    with pytest.raises(UsageError, match="per_step"):
        next(bl.data(range(3), per_step=0))


def test_grad_accum_is_the_clis_one_step_per_optimizer_step(tmp_path):
    """`grad_accum=N`: bl.data() groups N batches into a step of N × B samples, recorded as
    `mlb throughput` records workload.grad_accum (a comparability key), amp too."""
    from mlbaseline.errors import ConfigError

    clock = ManualClock()
    bl = baseline(clock, grad_accum=3, amp="bfloat16")
    for _b in bl.data(fake_loader(clock, 0.001)):
        if bl.done:
            break
        with bl.stage("forward"):
            clock.advance(0.002)
    assert bl.loop.records[0].samples == 48
    assert bl.loop.records[0].times.stages["forward"] == pytest.approx(0.006)
    r = load_result(bl.save(tmp_path / "acc.json"))
    train = r.data["batch_sizes"]["16"]["train"]
    assert train["grad_accum"] == 3 and train["samples_per_step"] == 48
    assert r.config["workload"]["grad_accum"] == 3 and r.config["workload"]["amp"] == "bfloat16"
    assert r.measurements["train.bs16.samples_per_s"].values[0] == pytest.approx(48 / 0.009)
    # a step block that draws one batch is one batch, whatever grad_accum says
    blk = baseline(clock, grad_accum=3)
    for _b in blk.data(range(2)):
        with blk.step():
            clock.advance(0.01)
    with blk.step():
        clock.advance(0.01)
    assert [r.samples for r in blk.loop.records] == [16, 16, 48]
    with pytest.raises(ConfigError, match=r"workload\.amp"):
        baseline(clock, amp="float8")


def test_without_a_step_block_a_step_runs_from_one_next_to_the_next():
    clock = ManualClock()
    bl = baseline(clock)
    for _batch in bl.data(fake_loader(clock, 0.001)):
        if bl.done:
            break
        with bl.stage("forward"):
            clock.advance(0.003)
    assert bl.loop.reason == "stable"
    t = bl.loop.records[0].times
    assert t.total_s == pytest.approx(0.004) and t.stages["data_wait"] == pytest.approx(0.001)


def test_an_epoch_end_drops_the_step_it_began():
    clock = ManualClock()
    bl = baseline(clock)
    for _ in range(2):  # two epochs of three batches
        for _b in bl.data(range(3)):
            with bl.step():
                clock.advance(0.01)
    assert len(bl.loop.records) == 6 and len(bl.loop.starts) == 6


def test_ctrl_c_keeps_the_steps_so_far_and_marks_the_result(tmp_path):
    clock = ManualClock()
    bl = baseline(clock)
    with pytest.raises(KeyboardInterrupt):
        for i, _b in enumerate(bl.data(fake_loader(clock, 0.001))):
            with bl.step():
                clock.advance(0.01)
                if i == 6:
                    raise KeyboardInterrupt
    assert bl.done and bl.loop.reason == "interrupted" and len(bl.loop.records) == 6
    r = load_result(bl.save(tmp_path / "r.json"))
    assert r.status == "interrupted"
    assert r.data["batch_sizes"]["16"]["stop_reason"] == "interrupted"


def test_a_failed_step_is_not_a_measurement():
    clock = ManualClock()
    bl = baseline(clock)
    with pytest.raises(MemoryError), bl.step():
        raise MemoryError("out of memory")
    with bl.step():
        clock.advance(0.01)
    assert len(bl.loop.records) == 1 and len(bl.loop.starts) == 1


def test_after_the_stop_rule_the_loop_runs_on_untimed():
    clock = ManualClock()
    bl = baseline(clock)
    run_pattern_a(bl, clock, STAGES)
    n = len(bl.loop.records)
    seen = 0
    for _b in bl.data(range(5)):
        with bl.step(), bl.stage("forward"):
            seen += 1
    assert seen == 5 and len(bl.loop.records) == n


def test_bad_use_is_one_line_errors(tmp_path):
    clock = ManualClock()
    bl = baseline(clock)
    with pytest.raises(UsageError, match="outside a step"):
        bl.stage("forward")
    with pytest.raises(UsageError, match="do not nest"), bl.step(), bl.step():
        pass
    with bl.step():
        clock.advance(0.01)
    with pytest.raises(UsageError, match="no measured step"):
        bl.save(tmp_path / "none.json")
    assert not (tmp_path / "none.json").exists()
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(OutputExistsError):
        baseline(clock).save(tmp_path / "x.json")


def test_a_loop_that_ends_before_the_rule_says_so(tmp_path):
    clock = ManualClock()
    bl = baseline(clock)
    for _b in bl.data(range(6)):
        with bl.step():
            clock.advance(0.01)
    r = load_result(bl.save(tmp_path / "short.json"))
    assert r.data["batch_sizes"]["16"]["stop_reason"] == "loop_ended"
    checks = {c.name: c for c in r.verdict.checks}
    assert checks["train.bs16.stop_rule"].status == "warn"


def test_config_object_and_overrides_and_the_model_name(tmp_path):
    from mlbaseline.config import resolve

    cfg = resolve(overrides={"golden.seed": 7})
    bl = Baseline("named", 8, "cpu", config=cfg, overrides={"throughput.min_steps": 3},
                  telemetry=False, probe=NullProbe())  # fmt: skip
    assert bl.cfg.golden.seed == 7 and bl.cfg.throughput.min_steps == 3
    assert bl.cfg.golden.batch_size == 8 and bl.cfg.throughput.batch_sizes == [8]
    assert bl.cfg.workload.model == "api:named" and bl.cfg.throughput.mode == "train"
    # no device, no config: auto (not the demo profile's cpu), so a GPU loop gets CUDA events
    auto = Baseline("auto", 8, telemetry=False, probe=NullProbe())
    assert auto.cfg.workload.device == "auto"
    assert auto.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert Baseline("c", 8, config=cfg, telemetry=False, probe=NullProbe()).device == "cpu"


class FakeEvent:
    """torch.cuda.Event on a fake clock: elapsed_time in milliseconds, as CUDA gives it."""

    clock: ManualClock

    def __init__(self, enable_timing: bool = False) -> None:
        self.t = None

    def record(self, stream: object = None) -> None:
        self.t = self.clock.now_ns()

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) / 1e6


class ClosingProbe(NullProbe):
    """A probe with one GPU that it forgets once closed (as NVML does)."""

    closed = False

    def available(self) -> tuple[bool, str]:
        return (not self.closed, "")

    def devices(self) -> list[GpuInfo]:
        return [] if self.closed else [GpuInfo(0, "Fake GPU", "GPU-0", 2**34, 0, 40.0)]

    def driver_version(self) -> str | None:
        return None if self.closed else "550.1"

    def close(self) -> None:
        self.closed = True


def test_on_cuda_stages_are_timed_by_cuda_events(monkeypatch, tmp_path):
    clock = ManualClock()
    FakeEvent.clock = clock
    syncs: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 12345)
    probe = ClosingProbe()
    monkeypatch.setattr("mlbaseline.api.baseline.default_probe", lambda: probe)
    bl = Baseline("gpu", 16, "cuda", overrides=OVER, clock=clock, telemetry=False)
    assert bl.timer.kind == "cuda"
    n = run_pattern_a(bl, clock, STAGES)
    # one synchronize at each edge of every step (+1 from the memory meter's reset)
    assert len(syncs) == 2 * n + 1
    r = load_result(bl.save(tmp_path / "gpu.json"))
    assert r.data["timer"] == "cuda" and r.environment["blocking"]["device"] == "cuda"
    assert r.measurements["train.bs16.backward"].values[0] == pytest.approx(STAGES["backward"])
    assert r.data["batch_sizes"]["16"]["train"]["peak_memory_bytes"] == 12345
    # the fingerprint was taken before mlb closed the probe it opened
    assert r.environment["blocking"]["gpu_name"] == "Fake GPU" and probe.closed


def test_telemetry_runs_while_measuring_and_lands_beside_the_result(tmp_path):
    clock = ManualClock()
    bl = Baseline("tele", 16, "cpu", overrides={**OVER, "golden.telemetry_interval_s": 0.05},
                  clock=clock, probe=NullProbe())  # fmt: skip
    assert bl.sampler is not None and bl.sampler.running
    bl.sampler.sample_once()  # a row without waiting for the thread
    run_pattern_a(bl, clock, STAGES)
    assert not bl.sampler.running  # stopped when the rule was met
    r = load_result(bl.save(tmp_path / "t.json"))
    assert r.artifacts["telemetry"] == "t.telemetry.csv"
    assert (tmp_path / "t.telemetry.csv").read_text().startswith("t_s,")
    assert r.data["telemetry"]["owned"] is True
    assert len(r.data["batch_sizes"]["16"]["train"]["telemetry_window_s"]) == 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(0.5, 2.0), min_size=1, max_size=60),
    st.integers(1, 4),
    st.integers(1, 10),
    st.floats(0.0, 0.2),
)
def test_the_stop_rules_window_test_is_numpys(values, n_windows, window, tolerance):
    """`stats.windows_stable` runs after every step of the user's loop, so it is plain Python;
    it must decide as the NumPy formulation it replaced (window medians within ±tolerance of
    their mean)."""
    need = n_windows * window
    expected = False
    if len(values) >= need:
        meds = np.median(np.asarray(values[-need:]).reshape(n_windows, window), axis=1)
        center = float(np.mean(meds))
        expected = bool(np.all(np.abs(meds - center) <= tolerance * abs(center)))
    assert stats.windows_stable(values, n_windows, window, tolerance) == expected


def test_what_the_loop_declares_is_a_comparability_key(tmp_path):
    """An API result with `amp="bfloat16"` and one without are not comparable (exit 3), as two
    `mlb throughput` results with different workload.amp are."""
    from typer.testing import CliRunner

    from mlbaseline.cli import app

    paths = []
    for amp in ("off", "bfloat16"):
        clock = ManualClock()
        bl = baseline(clock, amp=amp)
        while not bl.done:
            with bl.step(), bl.stage("forward"):
                clock.advance(0.01)
        paths.append(str(bl.save(tmp_path / f"{amp}.json")))
    res = CliRunner().invoke(app, ["compare", *paths, "--quiet"])
    assert res.exit_code == 3
    assert "workload.amp: off → bfloat16" in res.stderr


def test_saved_results_are_recorded_in_the_history(tmp_path, monkeypatch):
    """Like every result mlb writes: `mlb history` lists it (history=False: not recorded)."""
    from mlbaseline.runners import history

    monkeypatch.setenv("MLB_HISTORY", str(tmp_path / "h.sqlite"))
    clock = ManualClock()
    for name, record in (("kept.json", None), ("not.json", False)):
        bl = baseline(clock)
        run_pattern_a(bl, clock, STAGES)
        bl.save(tmp_path / name, history=record)
    entries = history.entries(bl.cfg, history.query())
    assert [Path(e.path).name for e in entries] == ["kept.json"]
    assert entries[0].kind == "throughput" and "train.bs16.step" in entries[0].metrics


def test_one_none_rule_on_both_config_paths(tmp_path):
    """A Config object and a YAML path merge the overrides the same way: None is unset (the
    config's value stays), any other value wins."""
    from mlbaseline.config import resolve

    path = tmp_path / "cfg.yaml"
    path.write_text("workload:\n  grad_accum: 4\ngolden:\n  seed: 7\n")
    for config in (resolve(path), path):
        quiet = {"telemetry": False, "probe": NullProbe()}
        kept = Baseline("n", 8, "cpu", config=config, grad_accum=None,
                        overrides={"golden.seed": None}, **quiet)  # fmt: skip
        assert (kept.grad_accum, kept.cfg.golden.seed) == (4, 7)
        won = Baseline("n", 8, "cpu", config=config, grad_accum=2,
                       overrides={"golden.seed": 3}, **quiet)  # fmt: skip
        assert (won.grad_accum, won.cfg.golden.seed) == (2, 3)
        assert won.cfg.workload.model == "api:n" and won.cfg.throughput.batch_sizes == [8]
