"""The `repro` bench's evidence rows (bench/repro_model.py): the Kalibera & Jones cost model and
the ledger's pooled comparison. Arithmetic only: nothing here measures."""

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import repro_model as rm  # noqa: E402

X = {"c_s": 0.18, "c_p": 4.8, "n": 18.0, "w": 0.0136, "b": 0.016, "budget": 60.0}


def test_best_steps_is_the_minimum_of_the_model():
    grid = np.linspace(1, 60, 5901)
    brute = grid[np.argmin([rm.split(X, n)[1] for n in grid])]
    assert abs(rm.best_steps(X) - brute) < 0.02
    assert rm.best_steps({**X, "b": 0.0}) == math.inf  # no process noise: one long process


def test_spread_probability_matches_the_range_of_five_normals():
    assert rm.spread_probability(0.0) == 1.0
    # the mean range of 5 standard normals is 2.326: at that sd the median range is near 3%
    p = rm.spread_probability(math.log1p(0.03) / 2.326)
    assert 0.45 < p < 0.6
    assert rm.spread_probability(0.005) > 0.99 > 0.2 > rm.spread_probability(0.03)


def test_cost_model_row_says_when_no_budget_can_reach_the_target():
    run = {"median": 0.18, "walls": [8.0] * 6, "steps": 18, "budget": 60.0}
    run["noise"] = {"within_sd": 0.0136, "between_sd": 0.016}
    reachable = rm.cost_model_row([run], 0.005).value
    assert "needs ≥" in reachable and "n* = 5.5 steps" in reachable
    assert "no budget reaches" in rm.cost_model_row([run], 0.02).value
    assert "no noise components" in rm.cost_model_row([{"median": 0.1}], None).value


def _entry(mlb, ref, defaults=rm.DEFAULTS, machine="m1"):
    return {
        "when": "t",
        "machine": machine,
        "mlb_defaults": defaults,
        "medians_ms": {"mlb": mlb, "pyperf": ref},
    }


def test_pooled_row_is_met_only_when_mlb_is_no_noisier():
    quiet, loud = [100, 101, 100.5, 99.5, 100], [100, 104, 97, 102, 99]
    assert rm.pooled_row([_entry(quiet, loud), _entry(quiet, loud)], "pyperf", "m1").met is True
    worse = rm.pooled_row([_entry(loud, quiet), _entry(loud, quiet)], "pyperf", "m1")
    assert worse.met is False and "one-sided p = 0.0" in worse.value
    # runs with other mlb defaults are not pooled; one run is not a comparison
    other = rm.pooled_row(
        [_entry(loud, quiet), _entry(quiet, loud, defaults="old")], "pyperf", "m1"
    )
    assert other.met is None and "1 run(s)" in other.value


def test_pooled_rows_keep_machine_classes_apart():
    quiet, loud = [100, 101, 100.5, 99.5, 100], [100, 104, 97, 102, 99]
    entries = [_entry(quiet, loud), _entry(quiet, loud), _entry(loud, quiet, machine="m2")]
    assert rm.machines(entries) == ["m1", "m2"]
    assert rm.pooled_row(entries, "pyperf", "m1").met is True  # m2's loud run is not in it
    on_m2 = rm.pooled_row(entries, "pyperf", "m2")
    assert on_m2.met is None and "on m2" in on_m2.figure and "1 run(s)" in on_m2.value


def test_append_run_keeps_earlier_entries(tmp_path):
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps([_entry([1.0], [1.0])]), encoding="utf-8")
    res = {"mlb": [{"median": 0.1, "wall": 50.0}], "pyperf": [{"median": 0.2, "wall": 90.0}]}
    rm.append_run(res, path)
    entries = rm.load_ledger(path)
    assert len(entries) == 2 and entries[1]["medians_ms"] == {"mlb": [100.0], "pyperf": [200.0]}
    assert entries[1]["mlb_defaults"] == rm.DEFAULTS and not (tmp_path / "ledger.tmp").exists()
    assert entries[1]["machine"] == rm.machine_class()
