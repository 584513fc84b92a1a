"""Issue 24, item 5: every place that judges — `mlb compare`, `mlb history gate`, `mlb ab` (paired)
and the report's comparison (`mlb report --compare`) — reaches its verdicts through one function,
`stats.decision.decide`. A spy stands in for it: each path must call it for its headline metric,
and what the spy answers must be the verdict that path reports."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import sim_default_path as sim
from history_fakes import stamp, synthetic, write
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.measure.timers import StepTimes
from mlbaseline.runners import ab
from mlbaseline.stats import decision

runner = CliRunner()
FAST = ["--set", "compare.n_resamples=200"]


@pytest.fixture
def spy(monkeypatch):
    """Replace the one decision function with one that records its calls and answers
    "improved" for everything: a path that decides by another route would not show it."""
    calls: list[tuple] = []

    def fake(ratio_ci, p_adjusted, higher_is_better, threshold=0.03, alpha=0.05):
        calls.append((ratio_ci, p_adjusted))
        return "improved"

    monkeypatch.setattr(decision, "decide", fake)
    return calls


@pytest.fixture
def files(tmp_path, monkeypatch) -> dict[str, Path]:
    monkeypatch.setenv("MLB_HISTORY", str(tmp_path / "h.sqlite"))
    out = {}
    for i in range(4):  # four sittings in the history, then a new one
        out[f"b{i}"] = write(synthetic(i, created_at=stamp(i)), tmp_path / f"b{i}.json")
    rng = np.random.default_rng(4)  # replicated results (4 processes a side) for compare
    out["old4"] = write(sim.fixed(rng, 4), tmp_path / "old4.json")
    out["new4"] = write(sim.fixed(rng, 4, {"backward": 1.5}), tmp_path / "new4.json")
    out["new"] = write(
        synthetic(9, slower={"backward": 1.5}, created_at=stamp(9)), tmp_path / "n.json"
    )
    return out


def _verdicts(doc: dict) -> set[str]:
    return {m["verdict"] for m in doc["metrics"]}


def test_compare_decides_through_the_one_function(spy, files):
    res = runner.invoke(app, ["compare", str(files["old4"]), str(files["new4"]), "--json", *FAST])
    doc = json.loads(res.stdout)["data"]
    assert spy and _verdicts(doc) == {"improved"}, res.output
    assert doc["headline"]["verdict"] == "improved"


def test_history_gate_decides_through_the_one_function(spy, files):
    assert (
        runner.invoke(
            app, ["history", "add", *map(str, [files[f"b{i}"] for i in range(4)])]
        ).exit_code
        == 0
    )
    res = runner.invoke(app, ["history", "gate", str(files["new"]), "--json", *FAST])
    doc = json.loads(res.stdout)["data"]
    assert spy and _verdicts(doc) == {"improved"}, doc["metrics"]
    # the same headline line the compare prints opens the gate's output
    res = runner.invoke(app, ["history", "gate", str(files["new"]), *FAST])
    first = res.stderr.splitlines()[1]  # after the line naming the baselines
    assert first.startswith(doc["headline"]["text"][:40]), res.stderr


def test_report_compare_decides_through_the_one_function(spy, files, tmp_path):
    out = tmp_path / "rep"
    res = runner.invoke(
        app, ["report", "--compare", str(files["old4"]), str(files["new4"]), "-o", str(out), *FAST]
    )
    assert res.exit_code == 0, res.output
    md = next(out.glob("*.md")).read_text()
    assert spy and "improved" in md


def test_ab_decides_through_the_one_function(spy):
    rng = np.random.default_rng(1)
    log = ab.PairLog()
    for i in range(20):
        for arm, f in (("a", 1.0), ("b", 1.3)):
            stages = {
                s: 0.001 * f * float(rng.lognormal(0, 0.01)) for s in ab.COMPARED if s != "step"
            }
            log.times[arm].append(StepTimes(sum(stages.values()), stages))
        log.done.append("AB" if i % 2 == 0 else "BA")
    judged, overall = ab.judge(log, resolve(), 0.01, 42)
    assert spy and {s.verdict for s in judged} == {"improved"} and overall == "improved"
