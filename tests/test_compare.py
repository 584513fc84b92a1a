"""mlb compare: calibration of the two-gate verdicts and the attribution, comparability,
replicates, thresholds, rendering, the CLI gate and the Makefile snippet."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from mlbaseline import comparison as cmp
from mlbaseline.cli import app
from mlbaseline.config import CompareConfig
from mlbaseline.errors import ConfigError, NotComparableError
from mlbaseline.report import comparison as shown
from mlbaseline.results import Metric, Result, load_result, write_result
from mlbaseline.runners.compare_files import run_compare

REPO = Path(__file__).resolve().parent.parent
GROUP = "train.bs64"
# stage medians in seconds; backward is 55% of the step, so +10% there moves the step ~+5.5%
STAGES = {
    "data_wait": 0.004,
    "h2d": 0.002,
    "forward": 0.030,
    "loss": 0.002,
    "backward": 0.055,
    "optimizer": 0.007,
}
ENV = {
    "blocking": {
        "device": "cuda",
        "gpu_name": "NVIDIA H100",
        "driver_major": "550",
        "cuda": "12.4",
        "cudnn": "90100",
        "torch": "2.4.0",
        "golden.seed": 42,
    },
    "informational": {"hostname": "a", "env": {"OMP_NUM_THREADS": "4"}},
}


def training_result(
    rng: np.random.Generator,
    n: int = 40,
    slow: str | None = None,
    factor: float = 1.10,
    noise: float = 0.02,
    replicates: int = 8,
    env: dict | None = None,
) -> Result:
    """A throughput result with one training group. Each stage sample has ~`noise` CV (half
    of the variance shared by all stages of a step, as system jitter is); the total is the sum
    of the stages plus a small residual, per sample. Samples are spread over `replicates`
    process-level replicates (0: in-process samples only), 8 by default: in-process samples
    alone never give a regressed/improved verdict (tests/test_compare_honesty.py)."""
    r = Result(kind="throughput", environment=json.loads(json.dumps(env or ENV)))
    shared = rng.lognormal(0.0, noise / np.sqrt(2), n)
    rep = [i % replicates for i in range(n)] if replicates else None
    values = {}
    for stage, base in STAGES.items():
        v = base * shared * rng.lognormal(0.0, noise / np.sqrt(2), n)
        values[stage] = v * factor if stage == slow else v
        meta = {"group": GROUP, "role": "stage", "stage": stage}
        r.add_metric(
            Metric(f"{GROUP}.{stage}", "s", False, values[stage], replicate=rep, meta=meta)
        )
    residual = 0.001 * rng.lognormal(0.0, 0.1, n)
    total = sum(values.values()) + residual
    meta = {"group": GROUP, "role": "total", "stages": list(STAGES)}
    r.add_metric(Metric(f"{GROUP}.step", "s", False, total, replicate=rep, meta=meta))
    meta = {"group": GROUP, "role": "residual"}
    r.add_metric(Metric(f"{GROUP}.residual", "s", False, residual, replicate=rep, meta=meta))
    meta = {"group": GROUP, "role": "rate"}
    r.add_metric(
        Metric(f"{GROUP}.samples_per_s", "items/s", True, 64 / total, replicate=rep, meta=meta)
    )
    return r


def verdicts(c: cmp.Comparison) -> dict[str, str]:
    return {m.name: m.verdict for m in c.metrics}


CAL = CompareConfig(n_resamples=500)


# --------------------------------------------------------------------------- calibration


def test_calibration_aa_pairs_rarely_move():
    rng = np.random.default_rng(20240601)
    moved = 0
    for _ in range(200):
        c = cmp.compare_results(training_result(rng), training_result(rng), CAL)
        assert len(c.metrics) == 8  # 6 stages, step, rate (the residual is attributed only)
        if any(v in ("regressed", "improved") for v in verdicts(c).values()):
            moved += 1
        assert c.attribution[0].named == []
    assert moved <= 10  # at most 5% of 200 pairs


def test_calibration_slow_backward_is_found_and_attributed():
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(200):
        c = cmp.compare_results(training_result(rng), training_result(rng, slow="backward"), CAL)
        v = verdicts(c)
        a = c.attribution[0]
        # no other stage is ever named, whatever the draw
        assert set(a.named) <= {"backward"}, a.sentence
        ok = (
            v[f"{GROUP}.step"] == "regressed"
            and v[f"{GROUP}.backward"] == "regressed"
            # direction-aware: throughput went down, which is a regression too
            and v[f"{GROUP}.samples_per_s"] == "regressed"
            and a.named == ["backward"]
            and "backward explains" in a.sentence
        )
        found += ok
    assert found >= 190  # at least 95% of 200 pairs


def test_attribution_numbers_add_up():
    rng = np.random.default_rng(3)
    c = cmp.compare_results(training_result(rng), training_result(rng, slow="backward"), CAL)
    a = c.attribution[0]
    back = next(r for r in a.stages if r.stage == "backward")
    assert back.named and back.verdict == "regressed"
    assert back.ci[0] < back.delta < back.ci[1]
    assert back.share == pytest.approx(back.delta / a.delta)
    assert back.pct_of_total == pytest.approx(back.delta / a.median_old)
    assert 0.75 < back.share < 1.25
    total = sum(r.delta for r in a.stages) + a.residual.delta + a.unassigned
    assert total == pytest.approx(a.delta)
    assert a.sentence.startswith(f"{GROUP}.step +")
    doc = a.to_dict()
    assert doc["stages"][4]["pct_ci"][0] == pytest.approx(back.ci[0] / a.median_old)


def test_attribution_without_measured_residual_uses_the_closing_term():
    rng = np.random.default_rng(4)
    old, new = training_result(rng), training_result(rng, slow="forward", factor=1.3)
    for r in (old, new):
        del r.measurements[f"{GROUP}.residual"]
    a = cmp.compare_results(old, new, CAL).attribution[0]
    assert a.named == ["forward"]
    assert a.residual.metric is None and a.residual.ci is None
    assert sum(r.delta for r in a.stages) + a.residual.delta == pytest.approx(a.delta)
    assert a.unassigned == 0.0


def test_small_stage_named_by_share_when_its_own_verdict_is_open():
    """data_wait from ~0 to a lot: its ratio is undefined, yet it explains the step."""
    rng = np.random.default_rng(5)
    old, new = training_result(rng), training_result(rng)
    dw = f"{GROUP}.data_wait"
    new.measurements[dw].values = [v + 0.02 for v in new.measurements[dw].values]
    new.measurements[f"{GROUP}.step"].values = [
        v + 0.02 for v in new.measurements[f"{GROUP}.step"].values
    ]
    old.measurements[dw].values = [0.0] * len(old.measurements[dw].values)
    c = cmp.compare_results(old, new, CAL)
    assert {"metric": dw, "code": "zero"}.items() <= next(
        s for s in c.skipped if s["metric"] == dw
    ).items()
    a = c.attribution[0]
    assert a.total_verdict == "regressed" and a.named == ["data_wait"]


def test_improvement_with_an_offsetting_stage():
    rng = np.random.default_rng(6)
    old = training_result(rng)
    new = training_result(rng)
    for stage, factor in (("backward", 0.7), ("forward", 1.2)):
        m = new.measurements[f"{GROUP}.{stage}"]
        extra = [v * (factor - 1) for v in m.values]
        m.values = [v + e for v, e in zip(m.values, extra, strict=True)]
        step = new.measurements[f"{GROUP}.step"]
        step.values = [v + e for v, e in zip(step.values, extra, strict=True)]
    a = cmp.compare_results(old, new, CAL).attribution[0]
    assert a.total_verdict == "improved"
    assert a.named == ["backward"] and a.offsets == ["forward"]
    assert "partly offset by forward" in a.sentence


def latency_metrics(r: Result, rng: np.random.Generator, n: int, slow: str | None) -> None:
    """A latency.c2 group (queue/preprocess/compute/postprocess) and an infer total without
    stages, added to `r` as a `run` result holds them (over 8 replicates)."""
    rep = [i % 8 for i in range(n)]
    g, parts = (
        "latency.c2",
        {"queue": 0.002, "preprocess": 0.003, "compute": 0.02, "postprocess": 0.001},
    )
    values = {}
    for stage, base in parts.items():
        values[stage] = base * rng.lognormal(0, 0.02, n) * (1.2 if stage == slow else 1.0)
        meta = {"group": g, "role": "stage", "stage": stage}
        r.add_metric(Metric(f"{g}.{stage}", "s", False, values[stage], replicate=rep, meta=meta))
    total = sum(values.values())
    meta = {"group": g, "role": "total", "stages": list(parts)}
    r.add_metric(Metric(f"{g}.request", "s", False, total, replicate=rep, meta=meta))
    meta = {"group": "infer.bs64", "role": "total", "stages": []}
    batch = rng.lognormal(-3, 0.02, n)
    r.add_metric(Metric("infer.bs64.batch", "s", False, batch, replicate=rep, meta=meta))


def test_run_results_compare_every_group_by_name():
    rng = np.random.default_rng(22)
    old, new = training_result(rng), training_result(rng)
    old.kind = new.kind = "run"
    latency_metrics(old, rng, 50, None)
    latency_metrics(new, rng, 50, "compute")
    c = cmp.compare_results(old, new, CAL)
    assert c.kind == "run"
    by_group = {a.group: a for a in c.attribution}
    assert set(by_group) == {GROUP, "latency.c2"}  # infer.bs64 has no stages to attribute
    assert by_group["latency.c2"].named == ["compute"]
    assert by_group["latency.c2"].total_verdict == "regressed"
    assert by_group[GROUP].named == [] and "unchanged" in by_group[GROUP].sentence
    assert verdicts(c)["infer.bs64.batch"] == "unchanged"


# --------------------------------------------------------------------------- statistics glue


def test_medians_and_difference_ci_matches_scipy_bootstrap():
    rng = np.random.default_rng(11)
    a, b = rng.normal(1.0, 0.1, 60), rng.normal(1.1, 0.1, 70)
    m_a, m_b, diff, lo, hi = cmp.medians_and_difference_ci(a, b, n_resamples=4000)
    assert (m_a, m_b) == (float(np.median(a)), float(np.median(b)))
    ref = sps.bootstrap(
        (a, b),
        lambda x, y, axis=-1: np.median(y, axis=axis) - np.median(x, axis=axis),
        n_resamples=4000,
        method="percentile",
        rng=np.random.default_rng(1),
    ).confidence_interval
    assert diff == pytest.approx(np.median(b) - np.median(a))
    assert lo < diff < hi
    assert lo == pytest.approx(ref.low, abs=0.012) and hi == pytest.approx(ref.high, abs=0.012)


def test_replicate_medians():
    values = np.array([1.0, 10.0, 2.0, 20.0, 3.0, 30.0])
    assert cmp.replicate_medians(values, [0, 1, 0, 1, 0, 1]).tolist() == [2.0, 20.0]


def test_replicates_are_the_unit_when_both_sides_have_enough():
    rng = np.random.default_rng(8)
    c = cmp.compare_results(
        training_result(rng, n=60, replicates=6), training_result(rng, n=60, replicates=6), CAL
    )
    assert {m.basis for m in c.metrics} == {"replicates"}
    assert {m.stat.n_old for m in c.metrics} == {6}
    assert "in_process_samples" not in {w["code"] for w in c.warnings}
    # 6 vs 6 replicates: smallest p = 2/924, x8 metrics < 0.05, so no Holm-floor warning
    assert "holm_floor" not in {w["code"] for w in c.warnings}


def test_few_replicates_are_judged_at_the_process_level():
    """4 vs 6 replicates: one figure per process, the t-test on their logs (no fall-back to
    in-process samples, whose spread says nothing about the noise between processes)."""
    rng = np.random.default_rng(9)
    c = cmp.compare_results(
        training_result(rng, replicates=4), training_result(rng, replicates=6), CAL
    )
    assert {m.basis for m in c.metrics} == {"replicates"}
    assert {(m.stat.n_old, m.stat.n_new) for m in c.metrics} == {(4, 6)}
    assert {m.stat.test for m in c.metrics} == {"t-log"}
    assert "insufficient_data" not in {w["code"] for w in c.warnings}


def test_five_against_five_can_flag_a_stage_under_eight_metrics():
    """5 vs 5 with 8 metrics: the smallest Mann-Whitney p (2/252) times 8 could never pass
    0.05; the t-test with gatekeeping (step first) flags the stage that moved."""
    rng = np.random.default_rng(10)
    c = cmp.compare_results(
        training_result(rng, n=40, replicates=5, slow="backward", factor=1.0),
        training_result(rng, n=40, replicates=5, slow="backward", factor=1.5),
        CAL,
    )
    assert verdicts(c)[f"{GROUP}.step"] == "regressed"
    assert verdicts(c)[f"{GROUP}.backward"] == "regressed"
    assert "holm_floor" not in {w["code"] for w in c.warnings}


def test_thresholds_per_metric_exact_and_glob():
    cfg = CompareConfig(threshold=0.03, thresholds={"train.bs64.step": 0.1, "train.*.h2d": 0.2})
    assert cmp.threshold_for("train.bs64.step", cfg) == 0.1
    assert cmp.threshold_for("train.bs8.h2d", cfg) == 0.2
    assert cmp.threshold_for("train.bs8.step", cfg) == 0.03
    rng = np.random.default_rng(12)
    cfg = CompareConfig(n_resamples=500, thresholds={"train.bs64.step": 0.10})
    c = cmp.compare_results(training_result(rng), training_result(rng, slow="backward"), cfg)
    step = next(m for m in c.metrics if m.name == f"{GROUP}.step")
    assert step.stat.threshold == 0.10 and step.verdict == "inconclusive"
    assert "inside the ±10.0% band" in step.reason  # a real change below the band: said so
    with pytest.raises(ConfigError, match=r"compare\.thresholds\.x"):
        cmp.compare_results(
            training_result(rng), training_result(rng), CompareConfig(thresholds={"x": 3.0})
        )


def test_inconclusive_reports_mde_and_samples_needed():
    rng = np.random.default_rng(13)
    c = cmp.compare_results(
        training_result(rng, n=8, noise=0.08), training_result(rng, n=8, noise=0.08), CAL
    )
    inc = [m for m in c.metrics if m.verdict == "inconclusive"]
    assert inc
    assert all(m.stat.mde > 0 and m.stat.samples_needed > 8 for m in inc)
    ungated = [m for m in inc if not m.stat.gated]
    assert ungated and "would settle it" in cmp.verdict_text(ungated[0].to_dict())


# --------------------------------------------------------------------------- comparability


def test_blocking_difference_is_not_comparable():
    rng = np.random.default_rng(14)
    env = json.loads(json.dumps(ENV))
    env["blocking"]["gpu_name"] = "NVIDIA A100"
    env["blocking"]["torch"] = "2.5.0"
    with pytest.raises(NotComparableError) as err:
        cmp.compare_results(training_result(rng), training_result(rng, env=env), CAL)
    assert "gpu_name: NVIDIA H100 → NVIDIA A100" in err.value.message
    assert "torch: 2.4.0 → 2.5.0" in err.value.message
    assert err.value.exit_code == 3
    c = cmp.compare_results(
        training_result(rng), training_result(rng, env=env), CAL, allow_mismatch=True
    )
    assert all(m.mismatch for m in c.metrics)
    assert not c.to_dict()["comparable"]
    assert "mismatch_allowed" in {w["code"] for w in c.warnings}
    assert all(r["verdict"].endswith(" †") for r in shown.table_rows(c.to_dict()))


def test_informational_and_config_differences_are_listed():
    rng = np.random.default_rng(15)
    env = json.loads(json.dumps(ENV))
    env["informational"]["hostname"] = "b"
    env["informational"]["env"]["OMP_NUM_THREADS"] = "8"
    env["blocking"]["cudnn_extra"] = "x"  # a key only one side has is a difference too
    old, new = training_result(rng), training_result(rng, env=env)
    new.config = {"workload": {"model": "m2"}}
    blocking, info = cmp.environment_differences(old, new)
    assert blocking == [{"key": "cudnn_extra", "old": "(absent)", "new": "x"}]
    keys = {row["key"] for row in info}
    assert keys == {"hostname", "env.OMP_NUM_THREADS", "config.workload.model"}


def test_unmatched_metrics_are_listed_and_no_common_metric_is_not_comparable():
    rng = np.random.default_rng(16)
    old, new = training_result(rng), training_result(rng)
    new.add_metric(Metric("infer.bs64.batch", "s", False, [0.1, 0.2]))
    del new.measurements[f"{GROUP}.loss"]
    c = cmp.compare_results(old, new, CAL)
    assert c.only_old == [f"{GROUP}.loss"] and c.only_new == ["infer.bs64.batch"]
    assert f"{GROUP}.loss" not in verdicts(c)
    assert c.failing() == []
    c.settings["fail_on"] = "any"
    assert c.failing() == [f"{GROUP}.loss"]  # missing from NEW fails --fail-on any
    other = Result(kind="throughput", environment=ENV)
    other.add_metric(Metric("x", "s", False, [1.0]))
    with pytest.raises(NotComparableError, match="no metric in common"):
        cmp.compare_results(old, other, CAL)


def test_unit_change_is_skipped():
    rng = np.random.default_rng(17)
    old, new = training_result(rng), training_result(rng)
    new.measurements[f"{GROUP}.h2d"].unit = "B"
    c = cmp.compare_results(old, new, CAL)
    assert {"metric": f"{GROUP}.h2d", "code": "unit", "reason": "unit changed (s → B)"} in c.skipped


# --------------------------------------------------------------------------- gate, result, markdown


def test_fail_on_semantics():
    doc = {
        "settings": {"fail_on": "regressed"},
        "metrics": [
            {"metric": "a", "verdict": "regressed"},
            {"metric": "b", "verdict": "inconclusive"},
            {"metric": "c", "verdict": "improved"},
            {"metric": "d", "verdict": "unchanged"},
        ],
        "skipped": [
            {"metric": "r", "code": "residual"},
            {"metric": "u", "code": "unit"},
        ],
        "only_old": ["gone"],
    }
    assert cmp.failing_names(doc) == ["a"]
    doc["settings"]["fail_on"] = "any"
    assert cmp.failing_names(doc) == ["a", "b", "u", "gone"]
    doc["settings"]["fail_on"] = "never"
    assert cmp.failing_names(doc) == []


def test_compare_result_file_and_markdown(tmp_path):
    rng = np.random.default_rng(18)
    c = cmp.compare_results(training_result(rng), training_result(rng, slow="backward"), CAL)
    result = cmp.to_result(c, {"compare": {"alpha": 0.05}})
    assert result.kind == "compare" and result.verdict.failed
    checks = {ch.name: ch for ch in result.verdict.checks}
    assert checks[f"compare.{GROUP}.backward"].status == "fail"
    assert checks[f"compare.{GROUP}.forward"].status == "pass"
    assert checks[f"compare.{GROUP}.residual"].status == "skip"
    back = load_result(write_result(result, tmp_path / "c.json"), kinds=["compare"])
    md = shown.render_markdown(back.data)  # renders a saved comparison as is
    assert md == shown.render_markdown(c)
    assert "| metric | old | new | Δ% | 95% CI | p (adj.) | MDE | verdict |" in md
    assert f"| `{GROUP}.backward` |" in md and "regressed" in md
    assert "backward explains" in md and "**Attribution (train.bs64):**" in md
    assert "FAIL" in md


def test_hundred_thousand_samples_per_metric():
    """Smoke test of the large-sample path (timing is measured in make bench, not here)."""
    rng = np.random.default_rng(19)
    n = 100_000
    c = cmp.compare_results(
        training_result(rng, n=n), training_result(rng, n=n, slow="backward"), CompareConfig()
    )
    assert verdicts(c)[f"{GROUP}.step"] == "regressed"
    assert c.attribution[0].named == ["backward"]


# --------------------------------------------------------------------------- runner and CLI


def write_pair(tmp_path: Path, slow: str | None = None, env: dict | None = None, n: int = 60):
    rng = np.random.default_rng(21)
    old = write_result(training_result(rng, n=n), tmp_path / "old.json")
    new = write_result(training_result(rng, n=n, slow=slow, env=env), tmp_path / "new.json")
    return old, new


runner = CliRunner()


def mlb(*args: str):
    return runner.invoke(app, ["compare", *map(str, args), "--set", "compare.n_resamples=500"])


def test_same_file_is_allowed_with_a_warning(tmp_path):
    old, _ = write_pair(tmp_path)
    copy = tmp_path / "copy.json"
    shutil.copy(old, copy)
    from mlbaseline.config import resolve

    for other in (old, copy):
        run = run_compare(old, other, resolve())
        assert run.comparison.same_input
        assert set(verdicts(run.comparison).values()) == {"unchanged"}
    res = mlb(old, old)
    assert res.exit_code == 0
    assert "comparing a result with itself" in res.stderr


def test_cli_regression_exit_codes_and_fail_on(tmp_path):
    old, new = write_pair(tmp_path, slow="backward")
    res = mlb(old, new)
    assert res.exit_code == 1, res.stderr
    assert "backward explains" in res.stderr
    # under the headline, what the two files measured (read once by the comparison)
    screen = " ".join(res.stderr.split())  # rich wraps the headline
    assert "processes) measured: " in screen and "batch sizes 64, on cuda" in screen
    assert res.stdout == ""
    assert mlb(old, new, "--fail-on", "never").exit_code == 0
    assert mlb(old, new, "--fail-on", "any").exit_code == 1
    assert mlb(old, new, "--threshold", "0.5").exit_code == 0  # +5.5% is inside ±50%
    same_old, same_new = write_pair(tmp_path / "aa")
    assert mlb(same_old, same_new).exit_code == 0
    bad = mlb(old, new, "--fail-on", "sometimes")
    assert bad.exit_code == 2


def test_cli_fail_on_any_fails_on_inconclusive(tmp_path):
    old, new = write_pair(tmp_path, n=6)
    res = mlb(old, new, "--json")
    doc = json.loads(res.stdout)["data"]
    assert doc["counts"]["inconclusive"] > 0 and doc["counts"]["regressed"] == 0
    assert res.exit_code == 0
    assert mlb(old, new, "--fail-on", "any").exit_code == 1


def test_cli_json_output_and_markdown(tmp_path):
    old, new = write_pair(tmp_path, slow="backward")
    md, out = tmp_path / "c.md", tmp_path / "c.json"
    res = mlb(old, new, "--json", "--markdown", md, "-o", out)
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["kind"] == "compare" and doc["verdict"]["status"] == "fail"
    data = doc["data"]
    assert data["failed"] and data["fail_on"] == "regressed"
    assert f"{GROUP}.backward" in data["failing"]
    assert data["attribution"][0]["named"] == ["backward"]
    assert json.loads(out.read_text())["data"] == data
    text = md.read_text()
    assert text == shown.render_markdown(data)
    assert text.startswith(f"## mlb compare: `{old}` → `{new}` (throughput)")
    # outputs are never overwritten without --force, and that is checked before comparing
    again = mlb(old, new, "--markdown", md)
    assert again.exit_code == 2 and again.stderr.startswith("Error: ") and "--force" in again.stderr


def test_cli_blocking_mismatch_exits_3_and_allow_mismatch_marks(tmp_path):
    env = json.loads(json.dumps(ENV))
    env["blocking"]["driver_major"] = "535"
    env["blocking"]["golden.seed"] = 7
    old, new = write_pair(tmp_path, env=env)
    res = mlb(old, new)
    assert res.exit_code == 3
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "driver_major: 550 → 535" in lines[0] and "golden.seed: 42 → 7" in lines[0]
    res = mlb(old, new, "--allow-mismatch", "--json")
    assert res.exit_code == 0
    data = json.loads(res.stdout)["data"]
    assert data["allow_mismatch"] and not data["comparable"]
    assert all(m["mismatch"] for m in data["metrics"])
    checks = json.loads(res.stdout)["verdict"]["checks"]
    assert all(
        c["message"].startswith("[not comparable] ") for c in checks if c["value"] is not None
    )
    assert "not comparable, compared anyway" in res.stderr


def test_help_has_an_example():
    res = runner.invoke(app, ["compare", "--help"])
    assert res.exit_code == 0
    assert "Example: mlb compare" in res.stdout and "--fail-on" in res.stdout


# --------------------------------------------------------------------------- the CI gate snippet


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_ci_gate_makefile(tmp_path):
    mlb_bin = Path(sys.executable).parent / "mlb"
    old, new = write_pair(tmp_path / "slow", slow="backward")
    aa_old, aa_new = write_pair(tmp_path / "same")

    def gate(baseline: Path, candidate: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "make", "-s", "-f", str(REPO / "examples/ci-gate.mk"), "perf-gate",
                f"MLB={mlb_bin}", f"BASELINE={baseline}", f"CANDIDATE={candidate}",
                f"COMPARE_MD={tmp_path / 'compare.md'}",
            ],
            capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
        )  # fmt: skip

    ok = gate(aa_old, aa_new)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "perf-gate: no regression" in ok.stdout
    bad = gate(old, new)
    assert bad.returncode != 0
    assert "perf-gate: REGRESSION" in bad.stdout
    assert "backward explains" in (tmp_path / "compare.md").read_text()
