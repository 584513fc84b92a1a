"""The library API's advisory mode (`Baseline(advisory=True)`): the stop rule ends the
measurement, never the user's loop, and the result says where measuring ended;
`measured_time_s` counts the measured steps only (not the time between them, nor the time
until `save()`); and advice on replicates names only what the result's source has (API,
`mlb attach`, the CLI). Fake clocks everywhere a number is asserted."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import mlbaseline
from mlbaseline.api import Baseline
from mlbaseline.comparison import compare_results
from mlbaseline.comparison.advice import API, ATTACH, CLI, repeats_advice, sides_advice, source_of
from mlbaseline.config import CompareConfig
from mlbaseline.measure.clock import ManualClock
from mlbaseline.measure.gpu import NullProbe
from mlbaseline.measure.loop import StepLoop, StopRule
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


# ------------------------------------------------------------------ advice by source


def test_repeats_advice_names_what_each_source_has():
    cli, attach, api = (repeats_advice(s, 6) for s in (CLI, ATTACH, API))
    assert cli == "measure with --repeats 6 or more"
    assert attach == "measure with mlb attach --repeats 6 or more"
    # the library API's script has no --repeats: attach runs it as it is, or pool N runs
    assert "mlb attach --repeats 6" in api and "pool_results" in api
    assert "measure with --repeats" not in api
    mixed = sides_advice([ATTACH, API], 6, ["a.json", "b.json"])
    assert mixed == f"a.json: {attach}; b.json: {api}"


def _saved(tmp_path, name: str, scale: float = 1.0) -> Result:
    clock = ManualClock()
    bl = baseline(clock, quiet=True)
    for _batch in bl.data(loader(clock)):
        with bl.step(), bl.stage("forward"):
            clock.advance(0.01 * scale)
        if bl.done:
            break
    return load_result(bl.save(tmp_path / name, history=False), ["throughput"])


@pytest.mark.parametrize(
    ("source", "expected", "absent"),
    [
        ("api", "mlb attach --repeats 2", "measure with --repeats"),
        ("attach", "measure with mlb attach --repeats 2 or more", "pool_results"),
        (None, "measure with --repeats 2 or more", "mlb attach"),
    ],
)
def test_compare_advises_by_the_results_source(tmp_path, source, expected, absent):
    old, new = _saved(tmp_path, "a.json"), _saved(tmp_path, "b.json", 1.1)
    for r in (old, new):
        if source is None:
            del r.data["source"]  # as if mlb throughput had measured them
        else:
            r.data["source"] = source
    assert {source_of(old), source_of(new)} == {source or CLI}
    comp = compare_results(old, new, CompareConfig(), old_label="a.json", new_label="b.json")
    warning = next(w for w in comp.warnings if w["code"] == "insufficient_data")
    assert expected in warning["message"] and absent not in warning["message"]
    assert any(expected in (m.reason or "") for m in comp.metrics)


def test_the_report_names_mlb_attach_as_what_made_an_attach_result(tmp_path):
    from mlbaseline.report.headline import _made_by

    r = _saved(tmp_path, "a.json")
    assert _made_by(r).startswith("the library API")
    r.data["source"] = "attach"
    assert _made_by(r) == "`mlb attach`"


def test_every_repeats_advice_goes_through_comparison_advice():
    """`--repeats N` worded anywhere else would be advice that ignores the result's source;
    only the commands that have the option print it about their own results."""
    root = Path(mlbaseline.__file__).parent
    own = {"comparison/advice.py", "cli/throughput.py", "cli/attach.py", "cli/run.py"}
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        if rel not in own and re.search(r"--repeats \{", text):
            found.append(rel)
    assert found == []
