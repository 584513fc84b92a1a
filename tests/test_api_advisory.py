"""The library API's advisory mode (`Baseline(advisory=True)`): the stop rule ends the
measurement, never the user's loop, and the result says where measuring ended; and
`measured_time_s` counts the measured steps only (not the time between them, nor the time
until `save()`). Fake clocks everywhere a number is asserted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mlbaseline.api import Baseline
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.loop import StepLoop, StopRule
from mlbaseline.results import load_result

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
N = 150  # the user's epoch: far more steps than the rule needs
STAGES = {"forward": 0.004, "backward": 0.006, "optimizer": 0.002}
BETWEEN = 0.5  # the user's loop outside any step (logging, a checkpoint): never measured


def baseline(clock: ManualClock, **kw: object) -> Baseline:
    return Baseline(
        "adv", 16, "cpu", overrides=RULE, clock=clock, telemetry=False, probe=NullProbe(), **kw
    )


def loader(clock: ManualClock, n: int = N) -> Iterator[int]:
    for i in range(n):
        clock.advance(0.002)  # the data wait
        yield i


def users_loop(bl: Baseline, clock: ManualClock) -> int:
    """A loop with the README's `if bl.done: break`, and work between its steps."""
    ran = 0
    for _batch in bl.data(loader(clock)):
        with bl.step():
            for name, cost in STAGES.items():
                with bl.stage(name):
                    clock.advance(cost)
        ran += 1
        clock.advance(BETWEEN)
        if bl.done:
            break
    return ran


def test_advisory_mode_never_cuts_the_loop_and_says_where_measuring_ended(tmp_path, capsys):
    clock = ManualClock()
    bl = baseline(clock, advisory=True)
    ran = users_loop(bl, clock)
    assert ran == N  # the whole epoch ran: `if bl.done: break` never fired
    assert bl.ended and not bl.done and bl.loop.reason == "stable"
    timed = len(bl.loop.records)
    assert 0 < timed < N  # the rule ended the measurement early; the rest ran untimed
    clock.advance(100.0)  # a long wait before save(): not measured time either
    path = bl.save(tmp_path / "adv.json")
    result = load_result(path, ["throughput"])
    assert result.data["stop"] == {"advisory": True, "step": timed}
    train = result.data["batch_sizes"]["16"]["train"]
    assert train["warmup_steps"] + train["measured_steps"] == timed
    assert result.data["batch_sizes"]["16"]["stop_reason"] == "stable"
    line = capsys.readouterr().err
    assert f"advisory: the loop was not stopped, its steps after step {timed}" in line


def test_the_default_mode_still_says_stop_and_records_it(tmp_path):
    clock = ManualClock()
    bl = baseline(clock)
    ran = users_loop(bl, clock)
    assert bl.done and bl.ended and ran == len(bl.loop.records) < N
    result = load_result(bl.save(tmp_path / "cut.json", history=False), ["throughput"])
    assert result.data["stop"] == {"advisory": False, "step": ran}


@pytest.mark.parametrize("advisory", [True, False])
def test_measured_time_is_the_sum_of_the_measured_steps(tmp_path, advisory):
    """11.4 s was reported where the measured steps summed to 3.56 s: the time between steps
    and until save() was counted. Now it is the measured steps' own time."""
    clock = ManualClock()
    bl = baseline(clock, advisory=advisory, quiet=True)
    users_loop(bl, clock)
    clock.advance(60.0)
    result = load_result(bl.save(tmp_path / "t.json", history=False), ["throughput"])
    steps = result.measurements["train.bs16.step"].values
    train = result.data["batch_sizes"]["16"]["train"]
    assert len(steps) == train["measured_steps"] > 0
    assert train["measured_time_s"] == pytest.approx(sum(steps), rel=1e-9)
    each = 0.002 + sum(STAGES.values())
    assert train["measured_time_s"] == pytest.approx(each * len(steps), rel=1e-9)
    assert train["total_time_s"] > train["measured_time_s"] + 60.0  # the run's wall time


def test_step_loop_measured_time_leaves_out_gaps_and_a_dropped_step():
    clock = ManualClock()
    loop: StepLoop[float] = StepLoop(StopRule(min_steps=100, max_steps=1000, warmup_min=2,
                                              warmup_max=2, warmup_window=4), clock)  # fmt: skip
    times = [1.0, 1.0, 0.25, 0.5, 0.25]
    for t in times:
        loop.begin()
        clock.advance(t)
        loop.end(t, t)
        clock.advance(3.0)  # between steps
    loop.begin()  # a step that failed: no end, no time
    clock.advance(7.0)
    loop.drop()
    loop.begin()  # and one begun, not ended when the result is taken
    clock.advance(9.0)
    res = loop.result()
    assert res.warmup == 2  # capped at warmup_max
    assert res.measured_time_s == pytest.approx(sum(times[2:]))
    assert res.total_time_s == pytest.approx(sum(times) + 3.0 * 5 + 7.0 + 9.0)


def test_the_lightning_callback_is_advisory_unless_it_stops_training(tmp_path):
    """A real fit on a tiny module: without stop_training the rule ends the measurement and
    the result says so (advisory, its stop step), and the Trainer runs every step it was
    asked for; with it, fit ends at the rule's step."""
    pl = pytest.importorskip("pytorch_lightning")
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from mlbaseline.api.lightning import MlbCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(8, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    loose = {
        **RULE,
        "throughput.stability_tolerance": 0.9,
        "throughput.warmup_tolerance": 0.9,
        "throughput.min_steps": 4,
        "throughput.window": 3,
        "throughput.warmup_min": 1,
    }
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(256, 8, generator=g), torch.randint(0, 2, (256,), generator=g))
    for stop in (False, True):
        cb = MlbCallback(tmp_path / f"pl{stop}.json", stop_training=stop, overrides=loose,
                         telemetry=False, probe=NullProbe(), quiet=True)  # fmt: skip
        t = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                       enable_progress_bar=False, enable_model_summary=False, callbacks=[cb],
                       max_epochs=3)  # fmt: skip
        t.fit(Tiny(), DataLoader(data, batch_size=8))
        bl = cb.baseline
        assert bl is not None and bl.ended and bl.advisory is not stop
        timed = len(bl.loop.records)
        assert t.global_step == (timed if stop else 3 * 32)
        r = load_result(tmp_path / f"pl{stop}.json", ["throughput"])
        assert r.data["stop"] == {"advisory": not stop, "step": timed}
