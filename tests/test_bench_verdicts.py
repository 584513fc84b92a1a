"""Bench section `verdicts` (bench/bench_verdicts.py): the calibration arithmetic and the table
built from stored compare documents. Fake documents only: nothing here runs `mlb` or measures."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_verdicts as bv  # noqa: E402

# ---------------------------------------------------------------- calibration arithmetic


def test_units_for_scales_the_step_by_the_target():
    assert bv.units_for(1.10, 0.100, 0.0005) == 20  # +10 ms of 0.5 ms units
    assert bv.units_for(3.0, 0.100, 0.0005) == 400  # +200 ms
    assert bv.units_for(1.0, 0.100, 0.0005) == 0  # A/A: no extra work
    assert bv.units_for(1.0001, 0.100, 0.0005) == 1  # a slowdown gets at least one unit


def test_refine_units_uses_the_cost_measured_inside_the_step():
    # 20 units made a 100 ms step 112 ms: 0.6 ms each in the step, so +10 ms needs 17
    assert bv.refine_units(1.10, 0.100, 0.112, 20) == 17
    assert bv.refine_units(1.10, 0.100, 0.099, 20) == 20  # no slowdown measured: keep
    assert bv.refine_units(1.10, 0.100, 0.112, 0) == 0


def test_close_enough_is_relative_to_the_slowdown():
    assert bv.close_enough(1.10, 1.105) and not bv.close_enough(1.10, 1.12)
    assert bv.close_enough(3.0, 3.15) and not bv.close_enough(3.0, 3.33)


def test_b_overrides_load_the_slowed_model_and_nothing_for_aa():
    args = bv.b_overrides(35)
    assert args[::2] == ["--set"] * 3
    assert "workload.model=verdicts_models:slowed_resnet18" in args
    assert "workload.model_kwargs.extra=35" in args
    assert bv.b_overrides(0) == []
    assert set(bv.b_overrides(5, "--set-b")[::2]) == {"--set-b"}


def test_schedule_rotates_conditions_and_interleaves_ab_trials():
    s = bv._schedule(2, 1)
    assert [c for k, c, i in s if k == "pair" and i == 0] == ["aa", "slow10", "slow3x"]
    assert [c for k, c, i in s if k == "pair" and i == 1] == ["slow10", "slow3x", "aa"]
    assert [(c, i) for k, c, i in s if k == "ab"] == [("aa", 0), ("slow10", 0), ("slow3x", 0)]


# ---------------------------------------------------------------- fake documents


def compare_doc(verdict, ci=(1.08, 1.12), mde=0.02, named=("forward",), failed=None):
    metrics = [
        {"metric": "train.bs16.forward", "verdict": "regressed", "role": "stage"},
        {
            "metric": "train.bs16.step",
            "verdict": verdict,
            "change": (ci[0] + ci[1]) / 2 - 1,
            "ci_low": ci[0],
            "ci_high": ci[1],
            "mde": mde,
            "role": "total",
            "stage": None,
        },
    ]
    attribution = [{"group": "train.bs16", "named": list(named)}]
    failed = verdict == "regressed" if failed is None else failed
    return {"data": {"metrics": metrics, "attribution": attribution, "failed": failed}}


def throughput_doc(step_s, foreign=0.0, replicates=5, stop="target"):
    values = [step_s] * 3 * replicates
    return {
        "measurements": {
            "train.bs16.step": {"values": values, "replicate": [i // 3 for i in range(len(values))]}
        },
        "data": {
            "contamination": {"threshold_cores": 0.25, "max_foreign_cores": foreign},
            "replicate_plan": {"replicates": replicates, "stop": stop},
        },
    }


def pair(verdict, rc, ci=(1.08, 1.12), foreign=0.0, named=("forward",), ratio=1.1):
    meta = {"compare": {"rc": rc}, "wall_s": 70.0}
    return bv.summarize_pair(
        meta,
        compare_doc(verdict, ci, named=named),
        throughput_doc(0.1, foreign),
        throughput_doc(0.1 * ratio, 0.0, replicates=8, stop="budget"),
    )


def test_summarize_pair_reads_the_step_headline_and_the_load():
    p = pair("regressed", 1, foreign=0.4)
    assert p["verdict"] == "regressed" and p["rc"] == 1
    assert p["ci"] == (1.08, 1.12) and p["mde"] == 0.02
    assert p["named"] == ["forward"]
    assert p["busy"] and p["foreign"] == pytest.approx(0.4)
    assert p["replicates"] == [5, 8] and p["stops"] == ["target", "budget"]
    assert p["ratio"] == pytest.approx(1.1)
    assert not pair("unchanged", 0, foreign=0.1)["busy"]


def test_summarize_pair_survives_missing_documents():
    p = bv.summarize_pair({"compare": {"rc": None}}, None, None, None)
    assert p["verdict"] == "no result" and p["ratio"] is None and p["named"] == []
    assert bv.pair_outcome("slow3x", p) == "failed run"


def test_insufficient_data_is_named_like_the_others():
    assert bv.norm_verdict("insufficient_data") == "insufficient data"


def test_outcomes_against_each_conditions_target():
    assert bv.pair_outcome("slow3x", pair("regressed", 1)) == "caught"
    assert bv.pair_outcome("slow3x", pair("inconclusive", 0)) == "missed"
    assert bv.pair_outcome("slow10", pair("inconclusive", 0)) == "below MDE"
    assert bv.pair_outcome("slow10", pair("insufficient data", 0)) == "below MDE"
    # unchanged while the step's CI excludes 1: the slowdown was there and the tool said no
    miss = bv.pair_outcome("slow10", pair("unchanged", 0, ci=(1.01, 1.02)))
    assert miss == "unchanged though the CI excludes 1" and miss not in bv.PASS
    assert bv.pair_outcome("slow10", pair("unchanged", 0, ci=(0.99, 1.02))) in bv.PASS
    assert bv.pair_outcome("slow10", pair("improved", 0, ci=(0.9, 0.95))) == "missed"
    assert bv.pair_outcome("aa", pair("unchanged", 0, ci=(0.99, 1.01))) == "quiet"
    assert bv.pair_outcome("aa", pair("regressed", 1)) == "false regression"
    assert bv.pair_outcome("aa", pair("regressed", 3)) == "failed run"


def test_targets_need_ten_pairs():
    assert not bv.target_met("slow3x", ["caught"] * 3)  # 3/10 pairs: not met however good
    assert bv.target_met("slow3x", ["caught"] * 10)
    assert not bv.target_met("slow3x", ["caught"] * 9 + ["missed"])
    assert bv.target_met("aa", ["quiet"] * 9 + ["false regression"])
    assert not bv.target_met("aa", ["quiet"] * 8 + ["false regression"] * 2)
    assert bv.target_met("slow10", ["caught"] * 5 + ["below MDE"] * 5)


def test_verdict_row_counts_verdicts_exit_codes_and_says_n_of_10():
    pairs = [pair("regressed", 1), pair("regressed", 1), pair("inconclusive", 0)]
    row = bv.verdict_row("slow10", pairs, 35)
    assert row.value.startswith("3/10 pairs: regressed 2, improved 0, unchanged 0,")
    assert "inconclusive 1, insufficient data 0" in row.value
    assert "exit 0×1, 1×2" in row.value and "caught 2" in row.value and "below MDE 1" in row.value
    assert row.met is False and "extra=35" in row.figure


def test_detail_rows_name_the_stage_mde_wall_and_load():
    pairs = [
        pair("regressed", 1, named=("forward", "backward")),
        pair("regressed", 1, foreign=0.5),
        pair("inconclusive", 0, named=()),
    ]
    stage, mde, wall = bv.detail_rows("slow3x", pairs)
    assert stage.value.startswith("forward (2/3 pairs;") and "backward 1" in stage.value
    assert mde.value.startswith("MDE 2.00%; B/A ×1.100")
    assert wall.value.startswith("70.0 s;") and "busy 1 / idle 2" in wall.value
    assert "5×3, 8×3" in wall.value and "budget 3, target 3" in wall.value


def test_ab_summary_names_regressed_stages_other_than_the_step():
    doc = {
        "data": {
            "verdict": "regressed",
            "pairs_done": 55,
            "stages": [
                {"stage": "forward", "verdict": "regressed", "ratio": 1.3},
                {"stage": "backward", "verdict": "inconclusive", "ratio": 1.0},
                {"stage": "step", "verdict": "regressed", "ratio": 1.1},
            ],
            "contamination": {"threshold_cores": 0.25, "max_foreign_cores": 0.3},
        }
    }
    t = bv.summarize_ab({"run": {"rc": 1, "wall_s": 20.0}}, doc)
    assert t["named"] == ["forward"] and t["ratio"] == 1.1 and t["busy"]
    row = bv.ab_row("slow10", [t, t])
    assert "2 trials: regressed 2" in row.value and "forward 2" in row.value
    assert "55 pairs" in row.figure and "exit 1×2" in row.value


def _write(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")


def test_table_from_reads_only_stored_files(tmp_path):
    run = tmp_path / "run"
    _write(run / "meta.json", {"extra": {"aa": 0, "slow10": 35, "slow3x": 600}, "wall_s": 600})
    cal = {"base_step_s": 0.1, "unit_s": 0.0003, "conditions": {}}
    cal["conditions"]["slow10"] = {"extra": 35, "measured_ratio": 1.1, "first_guess": 35}
    cal["conditions"]["slow10"]["first_ratio"] = 1.1
    _write(run / "calibration.json", cal)
    for cond, verdict, rc in (("aa", "unchanged", 0), ("slow3x", "regressed", 1)):
        d = run / cond / "pair00"
        _write(d / "pair.json", {"compare": {"rc": rc}, "wall_s": 80.0})
        _write(d / "compare.json", compare_doc(verdict, ci=(0.99, 1.01)))
        _write(d / "a.json", throughput_doc(0.1))
        _write(d / "b.json", throughput_doc(0.1))
    rows = bv.table_from(run)
    assert rows[0].figure.startswith("calibration") and "extra=35" in rows[0].value
    verdict_rows = [r for r in rows if "step verdicts" in r.figure]
    assert [r.value.split(";")[0] for r in verdict_rows] == [
        "1/10 pairs: regressed 0, improved 0, unchanged 1, inconclusive 0, insufficient data 0",
        "0/10 pairs: regressed 0, improved 0, unchanged 0, inconclusive 0, insufficient data 0",
        "1/10 pairs: regressed 1, improved 0, unchanged 0, inconclusive 0, insufficient data 0",
    ]
    assert all(r.met is False for r in verdict_rows)
    assert rows[-1].figure.startswith("stored runs") and "10 min" in rows[-1].value
