"""Issue 28, "a comparison rule that fits memory": memory metrics (meta role "memory") are judged
by `stats.decision.memory_rule` (ratio of medians widened by the measured spread, through the one
decision function) in `mlb compare`, `mlb ab`, the history gate and the report; the stage whose
held memory moved is named; the history finds a memory step change as a change point."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mlbaseline import comparison as cmp
from mlbaseline.cli import app
from mlbaseline.config import CompareConfig, resolve
from mlbaseline.measure.memory_step import StepMemory
from mlbaseline.measure.timers import StepTimes
from mlbaseline.report import comparison as shown
from mlbaseline.results import Metric, Result, load_result, write_result
from mlbaseline.runners.ab import PairLog, ab_result
from mlbaseline.stats import decision

runner = CliRunner()
GROUP = "train.bs16"
MIB = 2.0**20
STAGES = {"data_wait": 0.002, "forward": 0.010, "backward": 0.020, "optimizer": 0.004}
ENV = {"blocking": {"device": "cpu", "cpu_model": "test", "torch": "2.4.0"}, "informational": {}}
FAST = CompareConfig(n_resamples=200)


def _held(activations: float) -> dict[str, float]:
    """Bytes each stage holds at its end: forward keeps the activations, backward frees them
    and keeps the gradients, the optimizer's state was made before the measured steps."""
    return {"data_wait": 0.0, "forward": activations, "backward": 8 * MIB - activations,
            "optimizer": 0.0}  # fmt: skip


def result(
    n: int = 10,
    processes: int = 0,
    activations: float = 64 * MIB,
    spread: float = 0.0,
    seed: int = 0,
    slow: float = 1.0,
) -> Result:
    """A training result: the stage times (the same for every `activations`: time unchanged)
    and the memory metrics of the shared contract, `n` values a side over `processes` fresh
    processes (0: one process, no replicate ids); memory values vary by ±`spread` (relative)."""
    rng = np.random.default_rng(seed)
    times = np.random.default_rng(7)  # the same times on both sides
    r = Result(kind="throughput", environment=json.loads(json.dumps(ENV)))
    rep = [i % processes for i in range(n)] if processes else None
    total = np.zeros(n)
    for stage, base in STAGES.items():
        v = base * slow * times.lognormal(0.0, 0.02, n)
        total += v
        meta = {"group": GROUP, "role": "stage", "stage": stage}
        r.add_metric(Metric(f"{GROUP}.{stage}", "s", False, v, replicate=rep, meta=meta))
    meta = {"group": GROUP, "role": "total", "stages": list(STAGES)}
    r.add_metric(Metric(f"{GROUP}.step", "s", False, total, replicate=rep, meta=meta))

    def jitter() -> np.ndarray:
        return 1.0 + spread * rng.uniform(-1.0, 1.0, n)

    peak = (256 * MIB + activations) * jitter()
    meta = {"group": GROUP, "role": "memory", "memory": "peak"}
    r.add_metric(Metric(f"{GROUP}.mem.peak", "B", False, peak, replicate=rep, meta=meta))
    for stage, held in _held(activations).items():
        meta = {"group": GROUP, "role": "memory", "memory": "held", "stage": stage}
        values = held * jitter()
        r.add_metric(Metric(f"{GROUP}.mem.{stage}", "B", False, values, replicate=rep, meta=meta))
    return r


def _by_name(comp: cmp.Comparison) -> dict[str, cmp.MetricResult]:
    return {m.name: m for m in comp.metrics}


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10])
def test_rule_doubling_regressed_identical_unchanged_at_every_count(n):
    assert decision.memory_rule([100 * MIB] * n, [200 * MIB] * n).verdict == "regressed"
    assert decision.memory_rule([200 * MIB] * n, [100 * MIB] * n).verdict == "improved"
    assert decision.memory_rule([100 * MIB] * n, [100 * MIB] * n).verdict == "unchanged"
    tiny = np.random.default_rng(n)
    old, new = 1e9 * (1 + 1e-3 * tiny.uniform(-1, 1, (2, n)))
    assert decision.memory_rule(old, new).verdict == "unchanged"


def test_rule_ci_is_ratio_widened_by_the_larger_spread():
    ci, p, s, base = decision.memory_ci([100, 110, 105], [200, 200, 200], 0.05, min_bytes=0)
    assert s == pytest.approx(10 / 105) and base == 105  # the old side's (max − min) / median
    assert ci == pytest.approx((200 / 105, 200 / 105 * (1 - s), 200 / 105 * (1 + s)))
    assert p == 0.0  # the whole CI beyond 1.05
    # a spread as wide as the change: the CI reaches the band, no verdict either way
    assert decision.memory_rule([100 * MIB, 160 * MIB], [130 * MIB] * 2).verdict == "inconclusive"
    # a stage that frees memory (held <= 0): its change is measured against the peak
    j = decision.memory_rule([-50 * MIB] * 3, [-55 * MIB] * 3, scale=1000 * MIB)
    assert (j.ratio, j.verdict, j.scaled) == (pytest.approx(0.995), "unchanged", True)
    assert decision.memory_rule([0.0, 0.0], [0.0, 0.0]).verdict == "unchanged"
    # a stage of a few KiB that moves by a few hundred bytes is judged in MiB: unchanged
    small = decision.memory_rule([12_000, 12_600, 11_800], [12_300, 11_900, 12_500])
    assert small.verdict == "unchanged" and small.base == decision.MEMORY_MIN_BYTES
    assert decision.memory_rule([12_000] * 3, [24_000] * 3, min_bytes=0).verdict == "regressed"


def test_memory_verdicts_go_through_the_one_decision_function(monkeypatch):
    calls = []

    def spy(ratio_ci, p_adjusted, higher_is_better, threshold=0.03, alpha=0.05):
        calls.append((ratio_ci, p_adjusted, threshold))
        return "improved"

    monkeypatch.setattr(decision, "decide", spy)
    comp = cmp.compare_results(result(), result(activations=128 * MIB), FAST)
    memory = [m for m in comp.metrics if m.meta.get("role") == "memory"]
    assert memory and {m.verdict for m in memory} == {"improved"}
    assert sum(thr == FAST.memory_threshold for _, _, thr in calls) >= len(memory)


# --------------------------------------------------------------------------- compare


@pytest.mark.parametrize("processes", [0, 4])
def test_doubling_activations_is_regressed_with_forward_named_time_unchanged(processes):
    comp = cmp.compare_results(
        result(processes=processes), result(processes=processes, activations=128 * MIB), FAST
    )
    rows = _by_name(comp)
    assert rows[f"{GROUP}.mem.peak"].verdict == "regressed"
    assert rows[f"{GROUP}.mem.forward"].verdict == "regressed"
    assert rows[f"{GROUP}.mem.forward"].stat.change == pytest.approx(1.0)
    assert rows[f"{GROUP}.mem.data_wait"].verdict == "unchanged"
    if processes:  # one process a side: the times get no verdict, memory still does
        assert rows[f"{GROUP}.step"].verdict == "unchanged"
    assert all(rows[f"{GROUP}.{s}"].verdict != "regressed" for s in STAGES)
    (mem,) = comp.memory
    assert mem["named"] == "forward" and mem["peak_verdict"] == "regressed"
    assert "forward moved most" in mem["sentence"] and "activations" in mem["sentence"]
    doc = comp.to_dict()
    assert doc["failed"] and f"{GROUP}.mem.peak" in doc["failing"]
    assert "memory regressed: train.bs16 peak memory +" in doc["headline"]["text"]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10])
@pytest.mark.parametrize("spread", [0.0, 1e-3])
@pytest.mark.parametrize("processes", [0, 2])
def test_aa_is_unchanged_for_memory_at_every_count(n, spread, processes):
    processes = min(processes, n)
    old = result(n, processes, spread=spread, seed=1)
    new = result(n, processes, spread=spread, seed=2)
    comp = cmp.compare_results(old, new, FAST)
    memory = {m.name: m.verdict for m in comp.metrics if m.meta.get("role") == "memory"}
    assert len(memory) == 5 and set(memory.values()) == {"unchanged"}, memory
    assert comp.memory[0]["named"] is None
    assert "memory regressed" not in comp.to_dict()["headline"]["text"]


def test_memory_takes_no_part_in_the_time_gatekeeping():
    """A memory regression neither opens the stages' gate (the step did not move) nor is
    held back by it; a threshold pattern for the times does not set memory's band."""
    cfg = CompareConfig(n_resamples=200, thresholds={"train.*": 0.5})
    comp = cmp.compare_results(result(processes=4), result(4 * 10, 4, 128 * MIB), cfg)
    rows = _by_name(comp)
    assert rows[f"{GROUP}.mem.peak"].stat.threshold == cfg.memory_threshold
    assert rows[f"{GROUP}.mem.peak"].stat.gated is False
    assert rows[f"{GROUP}.forward"].stat.gated is True  # its total did not move


def test_machine_drift_holds_back_the_times_never_the_memory():
    """Every stage ×1.3 alike is the signature of machine drift: the times' verdicts are held
    back; a slower machine does not hold more bytes, so memory's verdict stands."""
    new = result(processes=4, activations=128 * MIB, slow=1.3)
    comp = cmp.compare_results(result(processes=4), new, FAST)
    rows = _by_name(comp)
    assert comp.drift["signatures"] and rows[f"{GROUP}.forward"].verdict == "inconclusive"
    assert rows[f"{GROUP}.mem.forward"].verdict == "regressed"
    assert rows[f"{GROUP}.mem.forward"].reason is None


def test_common_mode_drift_adjusts_the_times_never_the_memory():
    """The control kernel moved ×1.5 with every stage: the times are judged drift-adjusted,
    memory on its measured bytes (its ratio stays 2, no raw figures beside it)."""
    old, new = result(processes=4), result(processes=4, activations=128 * MIB, slow=1.5)
    for r, k in ((old, 1.0), (new, 1.5)):
        ctl = 1e-3 * k * np.random.default_rng(3).lognormal(0.0, 0.002, 10)
        meta = {"group": "control", "role": "control", "kernel": "matmul", "threads": 1}
        r.add_metric(Metric("control.matmul", "s", False, ctl, replicate=[i % 4 for i in
                            range(10)], meta=meta))  # fmt: skip
    comp = cmp.compare_results(old, new, FAST)
    rows = _by_name(comp)
    assert comp.drift["adjusted"] and rows[f"{GROUP}.step"].raw is not None
    assert rows[f"{GROUP}.mem.forward"].stat.ratio == pytest.approx(2.0)
    assert rows[f"{GROUP}.mem.forward"].raw is None
    assert rows[f"{GROUP}.mem.forward"].verdict == "regressed"


def test_cli_compare_fails_on_a_memory_regression(tmp_path: Path):
    old = write_result(result(processes=4), tmp_path / "old.json")
    new = write_result(result(processes=4, activations=128 * MIB), tmp_path / "new.json")
    out = tmp_path / "cmp.json"
    res = runner.invoke(
        app, ["compare", str(old), str(new), "-o", str(out), "--set", "compare.n_resamples=200"]
    )
    assert res.exit_code == 1, res.output
    assert "memory regressed" in res.output and "forward moved most" in res.output
    assert "forward ◀" in res.stderr  # the stages' held memory, the one named marked
    assert all(len(line) <= 80 for line in res.stderr.splitlines()), res.stderr
    saved = load_result(out)  # the document's schema accepts the memory rows and groups
    assert saved.data["memory"][0]["named"] == "forward"
    md = shown.render_markdown(saved.data)
    assert "**Memory (train.bs16):**" in md and "| forward ◀ |" in md
    same = runner.invoke(
        app, ["compare", str(old), str(old), "--json", "--set", "compare.n_resamples=200"]
    )
    assert same.exit_code == 0, same.output
    doc = json.loads(same.stdout)["data"]
    assert {m["verdict"] for m in doc["metrics"] if m["role"] == "memory"} == {"unchanged"}


# --------------------------------------------------------------------------- history


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "h.sqlite"
    monkeypatch.setenv("MLB_HISTORY", str(path))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    return path


def _history(tmp_path: Path, n: int, doubled_from: int | None) -> list[Path]:
    files = []
    for i in range(n):
        act = 128 * MIB if doubled_from is not None and i >= doubled_from else 64 * MIB
        r = result(processes=2, activations=act, spread=1e-4, seed=i)
        r.created_at = f"2026-01-01T00:{i:02d}:00.000000Z"
        files.append(write_result(r, tmp_path / f"{i}.json"))
    return files


def test_history_check_finds_a_memory_step_as_a_change_point(tmp_path, store):
    assert (
        runner.invoke(app, ["history", "add", *map(str, _history(tmp_path, 12, 7))]).exit_code == 0
    )
    res = runner.invoke(app, ["history", "check", "--json"])
    assert res.exit_code == 0, res.output
    doc = {s["metric"]: s for s in json.loads(res.stdout)["series"]}
    for name in (f"{GROUP}.mem.peak", f"{GROUP}.mem.forward"):
        (cp,) = doc[name]["change_points"]
        assert cp["run"]["id"] == 8 and cp["status"] == "confirmed", cp
        assert cp["direction"] == "regression" and cp["ci_low"] > 0.05
    assert doc[f"{GROUP}.step"]["change_points"] == []  # time did not move
    assert all(doc[n]["outliers"] == [] for n in doc if ".mem." in n)  # a few pages: no spike


def test_history_check_leaves_memory_steps_inside_the_band_out(tmp_path, store):
    assert (
        runner.invoke(app, ["history", "add", *map(str, _history(tmp_path, 12, None))]).exit_code
        == 0
    )
    res = runner.invoke(app, ["history", "check", "--json"])
    doc = json.loads(res.stdout)["series"]
    memory = [s for s in doc if ".mem." in s["metric"]]
    assert len(memory) == 5 and all(s["change_points"] == [] for s in memory), memory


def test_history_check_reports_a_one_run_memory_spike_as_an_outlier(tmp_path, store):
    files = _history(tmp_path, 12, None)
    spike = result(processes=2, activations=192 * MIB, spread=1e-4, seed=99)
    spike.created_at = "2026-01-01T00:05:30.000000Z"  # between runs 5 and 6
    files.append(write_result(spike, tmp_path / "spike.json"))
    assert runner.invoke(app, ["history", "add", *map(str, files)]).exit_code == 0
    res = runner.invoke(app, ["history", "check", "--json", "--metric", f"{GROUP}.mem.forward"])
    (row,) = json.loads(res.stdout)["series"]
    assert row["change_points"] == [] and len(row["outliers"]) == 1, row
    assert row["outliers"][0]["run"]["path"] == str((tmp_path / "spike.json").resolve())


def test_history_gate_judges_memory_by_the_same_rule(tmp_path, store):
    files = _history(tmp_path, 6, 5)
    assert runner.invoke(app, ["history", "add", *map(str, files[:5])]).exit_code == 0
    res = runner.invoke(app, ["history", "gate", str(files[5]), "--json", "--set",
                              "compare.n_resamples=200"])  # fmt: skip
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)["data"]
    rows = {m["metric"]: m for m in doc["metrics"]}
    assert rows[f"{GROUP}.mem.peak"]["verdict"] == "regressed"
    assert rows[f"{GROUP}.mem.peak"]["test"] == "memory"
    assert rows[f"{GROUP}.step"]["verdict"] == "unchanged"
    assert doc["memory"][0]["named"] == "forward"
    assert "memory regressed" in doc["headline"]["text"]
    same = runner.invoke(app, ["history", "gate", str(files[4]), "--json", "--set",
                               "compare.n_resamples=200"])  # fmt: skip
    assert same.exit_code == 0, same.output


# --------------------------------------------------------------------------- mlb ab


def _arm_times(n: int, activations: float, seed: int) -> list[StepTimes]:
    """Steps whose times are the same for both arms and whose memory has the activations."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        stages = {s: t * float(np.exp(rng.normal(0, 0.01))) for s, t in STAGES.items()}
        held = {s: int(v) for s, v in _held(activations).items() if v >= 0}
        peak = int(256 * MIB + activations)
        out.append(StepTimes(sum(stages.values()), stages, memory=StepMemory(held, peak)))
    return out


@pytest.mark.parametrize("pairs", [1, 2, 12])
def test_ab_judges_memory_by_the_rule_and_names_forward(pairs):
    cfg = resolve(profile="demo")
    log = PairLog()
    log.times = {"a": _arm_times(pairs, 64 * MIB, 1), "b": _arm_times(pairs, 128 * MIB, 2)}
    log.done = ["AB"] * pairs
    result = ab_result(cfg, cfg, log, 0.01, 0)
    mem = result.data["memory"]
    rows = {r["metric"]: r["verdict"] for r in mem["metrics"]}
    assert rows["mem.peak"] == rows["mem.forward"] == "regressed"
    assert rows["mem.data_wait"] == "unchanged" and mem["named"] == "forward"
    assert "forward moved most" in mem["sentence"] and "activations" in mem["sentence"]
    assert result.data["verdict"] == "regressed" and result.verdict.failed
    assert {s["verdict"] for s in result.data["stages"]} != {"regressed"}
    assert result.measurements["ab.b.mem.forward"].values == [128 * MIB] * pairs
    # A/A: memory unchanged at every count
    log.times["b"] = _arm_times(pairs, 64 * MIB, 3)
    same = ab_result(cfg, cfg, log, 0.01, 0).data["memory"]
    assert same["verdict"] == "unchanged" and same["named"] is None


def test_ab_memory_verdicts_go_through_the_one_decision_function(monkeypatch):
    calls = []

    def spy(ratio_ci, p_adjusted, higher_is_better, threshold=0.03, alpha=0.05):
        calls.append(threshold)
        return "improved"

    monkeypatch.setattr(decision, "decide", spy)
    cfg = resolve(profile="demo")
    log = PairLog()
    log.times = {"a": _arm_times(3, 64 * MIB, 1), "b": _arm_times(3, 128 * MIB, 2)}
    log.done = ["AB"] * 3
    mem = ab_result(cfg, cfg, log, 0.01, 0).data["memory"]
    assert {r["verdict"] for r in mem["metrics"]} == {"improved"}
    assert calls.count(cfg.compare.memory_threshold) == len(mem["metrics"])


TINY = [
    "--profile", "demo",
    "--set", "workload.model=builtin:tiny_mlp",
    "--set", "workload.image_size=8",
    "--set", "workload.dataset_size=512",
    "--set", "throughput.batch_sizes=[256]",
    "--set", "throughput.warmup_min=1",
    "--set", "compare.n_resamples=200",
    "--set", "workload.model_kwargs={hidden: 256}",
]  # fmt: skip


def test_cli_ab_a_wider_layer_doubles_the_activations(tmp_path, store):
    """Real steps of a tiny MLP: B's hidden layer twice as wide holds twice the activations
    after forward (its weights are small beside them at batch 256): regressed, forward named."""
    out = tmp_path / "ab.json"
    b = ["--set-b", "workload.model_kwargs={hidden: 512}"]
    res = runner.invoke(app, ["ab", *TINY, *b, "--pairs", "4", "-o", str(out), "--json"])
    assert res.exit_code == 1, res.output  # the memory regression fails the run
    data = json.loads(res.stdout)["data"]
    mem = {r["metric"]: r for r in data["memory"]["metrics"]}
    assert mem["mem.forward"]["verdict"] == "regressed", mem["mem.forward"]
    assert 1.8 < mem["mem.forward"]["median_new"] / mem["mem.forward"]["median_old"] < 2.2
    assert data["memory"]["named"] == "forward" and data["verdict"] == "regressed"
    assert load_result(out, kinds=["ab"]).data["memory"]["named"] == "forward"
    assert "memory B vs A" in res.stderr and "forward ◀" in res.stderr
    assert all(len(line) <= 80 for line in res.stderr.splitlines()), res.stderr


def test_report_compare_shows_the_memory_rows_and_the_stage(tmp_path, store):
    old = write_result(result(processes=4), tmp_path / "old.json")
    new = write_result(result(processes=4, activations=128 * MIB), tmp_path / "new.json")
    out = tmp_path / "rep"
    args = ["report", "--compare", str(old), str(new), "-o", str(out), "-q"]
    res = runner.invoke(app, [*args, "--set", "compare.n_resamples=200"])
    assert res.exit_code in (0, 1), res.output
    md = (out / "compare_report.md").read_text()
    assert "memory regressed: train.bs16 peak memory +" in md
    assert "| `train.bs16.mem.forward` | 64 MiB | 128 MiB |" in md
    assert "**Memory (train.bs16):**" in md and "| forward ◀ |" in md


def test_ab_processes_summarise_each_turns_memory():
    """`mlb ab --processes`: each fresh process's memory medians are its turn's memory, so
    the arms are judged by the same rule as in one process."""
    from mlbaseline.runners.ab_process import process_times

    times = process_times(result(activations=128 * MIB), 16)
    assert times.memory is not None and times.memory.held["forward"] == 128 * MIB
    assert times.memory.peak == 384 * MIB and times.memory.reserved is None
    bare = result()
    for name in [n for n in bare.measurements if ".mem." in n]:
        del bare.measurements[name]
    assert process_times(bare, 16).memory is None
