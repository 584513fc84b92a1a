"""Noise between sittings (issue 15, item 2): the component from the history's earlier sittings,
what it adds to a result, and how it makes `mlb compare` honest across sittings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mlbaseline import comparison as cmp
from mlbaseline.comparison.noise import SOURCE_FLOOR, SOURCE_SITTINGS, level_of, result_noise
from mlbaseline.config import CompareConfig, Config
from mlbaseline.history import sittings as hs
from mlbaseline.history.record import GitInfo
from mlbaseline.report import comparison as shown
from mlbaseline.results import Metric, Result, write_result
from mlbaseline.runners import history as runner
from mlbaseline.stats import noise

ENV = {"blocking": {"device": "cpu", "cpu_model": "X"}, "informational": {}}
STEP = "train.bs16.step"
GIT = GitInfo(commit="c0ffee", branch="main", dirty=False)


def sitting(
    rng: np.random.Generator,
    level: float,
    processes: int = 5,
    between: float = 0.01,
    within: float = 0.03,
    n_per: int = 20,
    at: str = "2026-12-01T10:00:00Z",
) -> Result:
    """One sitting: `processes` fresh processes around `level` (its sitting's machine speed),
    each with its own lognormal level (`between`) and `within` step noise; data.noise as a
    throughput result computes it."""
    r = Result(kind="throughput", environment=json.loads(json.dumps(ENV)), created_at=at)
    lv = level * rng.lognormal(0.0, between, processes)
    values = np.concatenate([0.2 * x * rng.lognormal(0.0, within, n_per) for x in lv])
    rep = np.repeat(np.arange(processes), n_per).tolist()
    meta = {"group": "train.bs16", "role": "total", "stages": []}
    r.add_metric(Metric(STEP, "s", False, values.tolist(), replicate=rep, meta=meta))
    r.data["noise"] = result_noise(r, CompareConfig())
    return r


# --------------------------------------------------------------------------- the component


def test_sittings_recovers_the_between_sitting_sd():
    """Over 200 seeds of 8 sittings (true between-sitting sd 2%, process sd 1%, 5 processes),
    the estimate's median lies within 20% of 2%; with no sitting effect, the share is mostly 0."""
    est, share0 = [], []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        for true, into in ((0.02, est), (0.0, share0)):
            levels = rng.lognormal(0.0, true, 8) if true else np.ones(8)
            res = [sitting(rng, float(lv)) for lv in levels]
            comp = [noise.components(r.measurements[STEP].values, r.measurements[STEP].replicate)
                    for r in res]  # fmt: skip
            got = noise.sittings(
                [float(np.median(r.measurements[STEP].values)) for r in res],
                [c.process_sd for c in comp],
                [c.processes for c in comp],
            )
            assert got is not None and got.sittings == 8 and got.dof == 7
            into.append(got.between_sd if true else got.between_share)
    assert abs(float(np.median(est)) / 0.02 - 1) < 0.2
    assert float(np.median(share0)) < 0.25


def test_sittings_needs_three_and_skips_bad_figures():
    assert noise.sittings([1.0, 1.1], [0.01, 0.01], [5, 5]) is None
    assert noise.sittings([1.0, 1.1, float("nan"), -1.0], [0.01] * 4, [5] * 4) is None
    got = noise.sittings([1.0, 1.05, 0.95], [0.0, 0.0, 0.0], [5, 5, 5])
    assert got is not None
    # no process noise: everything the figures show lies between sittings
    assert got.between_sd == pytest.approx(got.figure_sd) and got.between_share == 1.0


def test_cross_sitting_mde_adds_the_sitting_term():
    comp = noise.Components(5, 100, 0.03, 0.01, 0.1, 0.012, 4)
    alone = noise.relative_mde(0.012, 5, 0.012, 5, 0.05 / 8)
    assert noise.cross_sitting_mde(comp, 0.0, 0.05 / 8) == pytest.approx(alone)
    with_sit = noise.cross_sitting_mde(comp, 0.02, 0.05 / 8)
    # the process terms of both sides plus twice the sitting variance, at the processes' dof
    extra = 2 * 0.02**2
    expect = noise.relative_mde(0.012, 5, 0.012, 5, 0.05 / 8, extra_var=extra)
    assert with_sit == pytest.approx(expect) and with_sit > alone
    assert with_sit > 3 * alone


# --------------------------------------------------------------------------- from the history


@pytest.fixture
def store(tmp_path, monkeypatch) -> str:
    loc = str(tmp_path / "h" / "history.sqlite")
    monkeypatch.setenv("MLB_HISTORY", loc)
    return loc


def _record(tmp_path: Path, results: list[Result], git: GitInfo = GIT) -> None:
    paths = []
    for i, r in enumerate(results):
        p = tmp_path / f"r{i}_{git.commit}.json"
        write_result(r, p)
        paths.append(p)
    runner.record(paths, Config(), git=git)


def _history(
    tmp_path: Path, rng: np.random.Generator, levels: list[float], git=GIT, config=None
) -> None:
    at = [f"2026-12-01T10:{i:02d}:00Z" for i in range(len(levels))]
    results = [sitting(rng, lv, at=t) for lv, t in zip(levels, at, strict=True)]
    for r in results:
        r.config = dict(config or {})
    _record(tmp_path, results, git)


def test_attach_adds_the_sittings_of_the_same_commit(tmp_path, store):
    rng = np.random.default_rng(1)
    _history(tmp_path, rng, [1.0, 1.04, 0.97, 1.03])
    _history(tmp_path, rng, [1.5, 0.6, 1.2], GitInfo("other", "main", False))  # not noise
    (tmp_path / "cfg").mkdir()
    _history(tmp_path / "cfg", rng, [1.9, 0.5, 1.3], config={"workload": {"model": "m:other"}})
    new = sitting(rng, 1.0, at="2026-12-02T09:00:00Z")
    assert hs.attach(new, store, GIT, 0.05) == 1
    sit = new.data["noise"][STEP]["sittings"]
    assert sit["sittings"] == 5 and len(sit["history_ids"]) == 4
    # the 4% level moves, not the other commit's or the other config's 50%
    assert 0.01 < sit["between_sd"] < 0.06
    assert sit["mde_across_sittings"] > new.data["noise"][STEP]["mde"]
    assert not new.warnings


def test_attach_without_enough_history_or_store_adds_nothing(tmp_path, store):
    rng = np.random.default_rng(2)
    new = sitting(rng, 1.0, at="2026-12-02T09:00:00Z")
    assert hs.attach(new, store, GIT, 0.05) == 0  # no store: nothing, and none created
    assert not Path(store).exists()
    _history(tmp_path, rng, [1.0])
    assert hs.attach(new, store, GIT, 0.05) == 0  # 2 sittings with the new one: too few
    later = sitting(rng, 1.0, at="2026-11-01T09:00:00Z")  # older than every record
    (tmp_path / "more").mkdir()
    _history(tmp_path / "more", rng, [1.0, 1.1])
    assert hs.attach(later, store, GIT, 0.05) == 0
    assert "sittings" not in new.data["noise"][STEP] and not new.warnings


def test_a_broken_store_is_a_warning_not_a_failure(tmp_path, store):
    Path(store).parent.mkdir(parents=True)
    Path(store).write_bytes(b"this is not a database" * 100)
    new = sitting(np.random.default_rng(3), 1.0)
    assert hs.attach(new, store, GIT, 0.05) == 0
    assert [w["code"] for w in new.warnings] == ["history_noise"]
    assert "sittings" not in new.data["noise"][STEP]


def test_between_sittings_warns_when_replicates_cannot_reach_the_target(
    tmp_path, store, monkeypatch
):
    """The sittings differ by more than the repro target: the result says more replicates
    cannot narrow that and names mlb ab."""
    from mlbaseline.history import record
    from mlbaseline.runners.throughput import _between_sittings

    monkeypatch.setattr(record, "detect_git", lambda cwd=None: GIT)

    rng = np.random.default_rng(4)
    _history(tmp_path, rng, [1.0, 1.08, 0.93, 1.05, 0.95])
    new = sitting(rng, 1.0, at="2026-12-02T09:00:00Z")
    cfg = Config()
    _between_sittings(new, cfg, None)
    (w,) = [w for w in new.warnings if w["code"] == "sitting_noise"]
    assert w["value"] > cfg.throughput.repro_target and "mlb ab" in w["message"]


# --------------------------------------------------------------------------- in mlb compare


def _with_sitting_sd(r: Result, sd: float) -> Result:
    r.data["noise"][STEP]["sittings"] = {"between_sd": sd, "sittings": 6}
    return r


def test_level_threshold_and_mde_follow_the_sitting_noise():
    rng = np.random.default_rng(5)
    a, b = sitting(rng, 1.0), sitting(rng, 1.0)
    ma, mb = a.measurements[STEP], b.measurements[STEP]
    plain = level_of(ma, mb, "replicates", 0.03)
    lv = level_of(ma, mb, "replicates", 0.03, sitting=0.02)
    assert lv.sitting_bar == pytest.approx(1.959964 * math.sqrt(2) * 0.02, rel=1e-5)
    assert lv.threshold == lv.sitting_bar and lv.source == SOURCE_SITTINGS
    assert plain.threshold == 0.03 and plain.source == SOURCE_FLOOR
    assert lv.to_dict(0.95)["between_sitting_noise"] == 0.02
    assert level_of(ma, mb, "replicates", 0.03, sitting=0.001).threshold == 0.03


def test_compare_across_noisy_sittings_is_not_a_regression():
    """Two sittings 4% apart with tight replicates: without the history's sitting noise that is
    'regressed'; with a measured 2% between-sitting sd the bar is 5.5%, so it is not, and the
    output names the source of the threshold."""
    rng = np.random.default_rng(6)
    cfg = CompareConfig(n_resamples=400)
    old = sitting(rng, 1.0, processes=8, between=0.003)
    new = sitting(rng, 1.04, processes=8, between=0.003)
    blind = cmp.compare_results(old, new, cfg)
    assert {m.name: m.verdict for m in blind.metrics}[STEP] == "regressed"
    honest = cmp.compare_results(_with_sitting_sd(old, 0.02), _with_sitting_sd(new, 0.015), cfg)
    row = {m.name: m.to_dict() for m in honest.metrics}[STEP]
    assert row["verdict"] != "regressed"
    assert row["threshold_source"] == SOURCE_SITTINGS
    assert SOURCE_SITTINGS in shown.threshold_text(honest.to_dict())
    # the MDE a comparison states grows with the sitting noise (its CI must clear the bar)
    blind_row = {m.name: m.to_dict() for m in blind.metrics}[STEP]
    assert row["mde"] > blind_row["mde"] > row["threshold"] - 0.03
    # a change well beyond the sitting bar is still seen
    big = sitting(rng, 1.12, processes=8, between=0.003)
    seen = cmp.compare_results(old, _with_sitting_sd(big, 0.02), cfg)
    assert {m.name: m.verdict for m in seen.metrics}[STEP] == "regressed"


# ------------------------------------------------------------------- on screen, in the report


def test_screen_and_report_show_the_sittings():
    from mlbaseline.cli.throughput import noise_lines
    from mlbaseline.report.data import all_groups
    from mlbaseline.report.sections_performance import noise_table
    from mlbaseline.results import load_result

    golden = Path(__file__).resolve().parent / "golden" / "signals"
    r = load_result(golden / "replicated_noisy.json")
    gs = [g for g in all_groups([r], "train") if g.stages]
    row = [x for x in noise_table([r], gs) if x.startswith("| 8 |")]
    assert row and row[-1].endswith("| – | – |")  # no history yet: said, not left out
    r.data["noise"]["train.bs8.step"]["sittings"] = {  # as history.sittings records it
        "sittings": 7,
        "figure_sd": 0.03,
        "process_part_sd": 0.02,
        "between_sd": 0.021,
        "between_share": 0.5,
        "dof": 6,
        "history_ids": [1, 2, 3, 4, 5, 6],
        "mde_across_sittings": 0.083,
    }
    _, line = noise_lines(r)
    assert "7 sittings" in line and "2.1%" in line and "8%" in line
    assert "2.1% (7)" in [x for x in noise_table([r], gs) if x.startswith("| 8 |")][-1]
