"""mlb report: sections and figures from the golden results, every danger signal fired and quiet,
labelled predictions, `--compare`, atomic output and the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.errors import OutputError, OutputExistsError, ResultFileError
from mlbaseline.report import figures, signals
from mlbaseline.report.data import Telemetry, groups, read_telemetry
from mlbaseline.report.inputs import ReportInput, collect
from mlbaseline.report.markdown import NOT_MEASURED, SECTIONS, TITLE
from mlbaseline.report.render import FIGURE_NAMES, REPORT_NAME, render_report
from mlbaseline.results import Check, Metric, Result, write_result

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden/report"
SIGNALS = REPO / "tests/golden/signals"  # results that fire signals (make_signals.py)
ENV = {
    "blocking": {"device": "cpu", "torch": "2.14.1", "cpu_model": "Test CPU"},
    "informational": {},
}
runner = CliRunner()


# ---------------------------------------------------------------- builders


def _group(
    result: Result,
    prefix: str,
    total: str,
    stages: dict[str, np.ndarray],
    residual: np.ndarray,
) -> np.ndarray:
    """Add an aligned total / stage / residual group; returns the totals."""
    tot = sum(stages.values()) + residual
    meta = {"group": prefix}
    result.add_metric(
        Metric(
            f"{prefix}.{total}",
            "s",
            False,
            list(tot),
            meta={**meta, "role": "total", "stages": list(stages)},
        )
    )
    for name, values in stages.items():
        result.add_metric(
            Metric(
                f"{prefix}.{name}",
                "s",
                False,
                list(values),
                meta={**meta, "role": "stage", "stage": name},
            )
        )
    result.add_metric(
        Metric(f"{prefix}.residual", "s", False, list(residual), meta={**meta, "role": "residual"})
    )
    return tot


def train_result(
    data_wait: float = 0.05, residual: float = 0.01, noise: float = 0.005, n: int = 40, b: int = 16
) -> Result:
    """One training group whose data wait and residual are the given shares of the step."""
    rng = np.random.default_rng(0)
    step = 0.1
    jitter = lambda: 1 + noise * rng.standard_normal(n)  # noqa: E731
    rest = (1 - data_wait - residual) * step
    stages = {
        "data_wait": data_wait * step * jitter(),
        "forward": 0.4 * rest * jitter(),
        "backward": 0.6 * rest * jitter(),
    }
    r = Result(kind="throughput", environment=ENV)
    tot = _group(r, f"train.bs{b}", "step", stages, residual * step * jitter())
    r.add_metric(
        Metric(
            f"train.bs{b}.samples_per_s",
            "items/s",
            True,
            list(b / tot),
            meta={"group": f"train.bs{b}", "role": "rate"},
        )
    )
    return r


def replicated(result: Result, k: int) -> Result:
    """The same samples, labelled as k fresh-process replicates of equal size."""
    for m in result.measurements.values():
        m.replicate = [i * k // len(m.values) for i in range(len(m.values))]
    return result


def test_cv_signal_never_judges_one_process_by_its_in_process_spread():
    # a noisy step in one process: the between-process spread is unknown, so not measured
    found = _of(signals.compute_signals([train_result(noise=0.30)], None), "cv")
    assert found and not any(s.fired for s in found)
    assert all(not s.measured and "--repeats" in s.message for s in found)


@pytest.mark.parametrize("cv", [0.005, 0.02, 0.05, 0.1, 0.2, 0.4])
def test_cv_signal_advice_passes_its_own_gate(cv):
    k = signals.replicates_for(cv)
    # k replicates at this between-process CV meet the ±3% gate; k − 1 would not
    from scipy import stats as sps

    assert sps.t.ppf(0.975, k - 1) * cv / np.sqrt(k) <= signals.CV_LIMIT
    if k > 2:
        assert sps.t.ppf(0.975, k - 2) * cv / np.sqrt(k - 1) > signals.CV_LIMIT


def accounted(foreign_cores: float) -> Result:
    """A throughput result whose CPU account (fake readers) saw this much foreign load."""
    from mlbaseline.measure.clock import ManualClock
    from mlbaseline.measure.contamination import CpuAccount, record

    clock = ManualClock()
    busy = lambda: clock.now_ns() / 1e9 * (1 + foreign_cores)  # noqa: E731
    acc = CpuAccount(0.25, clock, busy, lambda: clock.now_ns() / 1e9, lambda: (1.0,) * 3)
    with acc.phase("train.bs16"):
        clock.advance(3.0)
    r = train_result()
    record(r, acc)
    return r


def latency_result(values: np.ndarray) -> Result:
    r = Result(kind="latency", environment=ENV, config={"latency": {"sla_p99_s": 0.15}})
    n = values.size
    stages = {"queue": values * 0.05, "compute": values * 0.9}
    _group(r, "latency.c2", "request", stages, values * 0.05 - 0.0 * np.ones(n))
    return r


def telemetry(n: int = 100, **series: np.ndarray) -> Telemetry:
    """A Telemetry built in memory: gpu=, temp=, throttle=[...], cpu=(cores x n)."""
    tel = Telemetry(path=None, t=np.arange(n) * 0.1)
    if "gpu" in series:
        tel.gpu_active["gpu0"] = series["gpu"]
    if "temp" in series:
        tel.gpu_temp["gpu0"] = series["temp"]
    if "throttle" in series:
        tel.gpu_throttle["gpu0"] = list(series["throttle"])
    if "cpu" in series:
        tel.cpu_cores = {f"cpu{i}": row for i, row in enumerate(series["cpu"])}
    return tel


def _sawtooth(n: int = 100) -> np.ndarray:
    return np.array([90.0 if (i // 5) % 2 == 0 else 10.0 for i in range(n)])


Case = Callable[[], tuple[list[Result], Telemetry | None]]
rng = np.random.default_rng(1)
# signal name -> (data built to trigger it, data on which it must stay quiet)
SIGNAL_CASES: dict[str, tuple[Case, Case]] = {
    "data_wait": (
        lambda: ([train_result(data_wait=0.30)], None),
        lambda: ([train_result(data_wait=0.05)], None),
    ),
    "gpu_sawtooth": (
        lambda: ([], telemetry(gpu=_sawtooth())),
        lambda: ([], telemetry(gpu=np.full(100, 92.0))),
    ),
    "gpu_low": (
        lambda: ([], telemetry(gpu=np.full(100, 20.0))),
        lambda: ([], telemetry(gpu=np.full(100, 92.0))),
    ),
    "tail_ratio": (
        lambda: ([latency_result(np.r_[np.full(95, 0.010), np.full(5, 0.050)])], None),
        lambda: ([latency_result(0.010 * np.exp(0.1 * rng.standard_normal(200)))], None),
    ),
    "cv": (
        lambda: ([replicated(train_result(noise=0.10), 8)], None),
        lambda: ([replicated(train_result(noise=0.002), 8)], None),
    ),
    "thermal": (
        lambda: ([], telemetry(gpu=np.full(100, 90.0), temp=np.linspace(60, 82, 100))),
        lambda: (
            [],
            telemetry(gpu=np.full(100, 90.0), temp=np.full(100, 55.0), throttle=["gpu_idle"] * 100),
        ),
    ),
    "cpu_saturated": (
        lambda: ([], telemetry(cpu=np.full((4, 100), 99.0))),
        lambda: ([], telemetry(cpu=np.vstack([np.full(100, 99.0), np.full((3, 100), 40.0)]))),
    ),
    "residual": (
        lambda: ([train_result(residual=0.10)], None),
        lambda: ([train_result(residual=0.01)], None),
    ),
    "percentile_floor": (
        lambda: ([latency_result(np.full(100, 0.01) + 1e-4 * np.arange(100))], None),
        lambda: ([latency_result(np.full(700, 0.01) + 1e-6 * np.arange(700))], None),
    ),
    "contaminated": (
        lambda: ([accounted(0.9)], None),
        lambda: ([accounted(0.05)], None),
    ),
}


def _of(found: list[signals.Signal], name: str) -> list[signals.Signal]:
    return [s for s in found if s.name == name]


# ---------------------------------------------------------------- signals


def test_every_signal_has_a_case():
    assert set(SIGNAL_CASES) == set(signals.SIGNAL_TITLES)


@pytest.mark.parametrize("name", sorted(SIGNAL_CASES))
def test_signal_fires_on_data_built_to_trigger_it(name):
    results, tel = SIGNAL_CASES[name][0]()
    found = _of(signals.compute_signals(results, tel), name)
    assert any(s.fired for s in found), found
    fired = next(s for s in found if s.fired)
    assert fired.measured and fired.value is not None and fired.threshold is not None
    assert fired.message and fired.state == "FIRED"


@pytest.mark.parametrize("name", sorted(SIGNAL_CASES))
def test_signal_stays_quiet_otherwise(name):
    results, tel = SIGNAL_CASES[name][1]()
    found = _of(signals.compute_signals(results, tel), name)
    assert found and all(s.measured and not s.fired for s in found), found
    assert all(s.value is not None for s in found)


def test_thermal_fires_on_a_slowdown_throttle_reason_alone():
    tel = telemetry(gpu=np.full(100, 90.0), temp=np.full(100, 50.0), throttle=["hw_thermal"] * 100)
    (sig,) = signals.thermal_signals([], tel)
    assert sig.fired and "hw_thermal" in sig.message


def test_thermal_limit_comes_from_the_config():
    r = Result(kind="throughput", config={"env_check": {"gpu_max_temp_c": 85.0}})
    tel = telemetry(gpu=np.full(100, 90.0), temp=np.full(100, 80.0))
    (sig,) = signals.thermal_signals([r], tel)
    assert not sig.fired and sig.threshold == 85.0


def test_without_data_every_signal_is_not_measured():
    found = signals.compute_signals([], None)
    assert {s.name for s in found} == set(signals.SIGNAL_TITLES)
    assert all(
        not s.measured and not s.fired and s.message.startswith("not measured") for s in found
    )


def test_dips_count_low_runs_between_high_runs():
    assert signals.count_dips(_sawtooth(100)) == 9  # 10 low blocks, the last has no high after it
    assert signals.count_dips(np.array([90, 50, 20, 50, 90, 20])) == 1  # middle values ignored
    assert signals.count_dips(np.full(50, 10.0)) == 0
    assert signals.dominant_period(_sawtooth(100)) == 10


def test_cv_uses_replicate_medians_when_there_are_replicates():
    r = train_result(noise=0.10)
    step = r.measurements["train.bs16.step"]
    step.values = [0.1] * 20 + [0.1] * 20  # per-step noise gone, two identical replicates
    step.replicate = [0] * 20 + [1] * 20
    (sig,) = [s for s in signals.cv_signals([r]) if s.subject == "train.bs16.step"]
    assert not sig.fired and "2 replicate medians" in sig.message


# ---------------------------------------------------------------- predictions


def test_amdahl_prediction_is_half_the_measured_share():
    r = train_result(data_wait=0.30, noise=0.0)
    preds = {p.subject: p for p in signals.amdahl_predictions([r])}
    p = preds["train.bs16.data_wait"]
    assert p.value == pytest.approx(-0.15, abs=1e-6)
    assert p.text.startswith("Prediction:") and "halving data wait" in p.text and "~15.0%" in p.text


def test_worker_prediction_from_the_measured_sweep():
    r = Result(kind="dataloader")
    for w, rate in ((0, 100.0), (4, 200.0), (8, 250.0)):
        r.add_metric(
            Metric(
                f"dataloader.w{w}.samples_per_s",
                "items/s",
                True,
                [rate] * 8,
                meta={"group": f"dataloader.w{w}", "role": "rate"},
            )
        )
    preds = signals.worker_predictions([r], {0: 20.0, 4: 60.0, 8: 95.0})
    texts = [p.text for p in preds]
    assert (
        texts[0]
        == "Prediction: 0 → 4 workers: data time -50%, CPU use +40 points (% of usable CPUs)"
    )
    assert texts[1].startswith("Prediction: 4 → 8 workers: data time -20%, CPU use +35")
    assert preds[1].value == pytest.approx(200 / 250 - 1)
    assert "CPU not measured" in signals.worker_predictions([r])[0].text


# ---------------------------------------------------------------- the golden report


def test_golden_files_are_small_and_complete():
    kinds = {json.loads(p.read_text())["kind"] for p in GOLDEN.glob("*.json")}
    assert {"env-check", "subset", "dataloader", "throughput", "latency", "run"} <= kinds
    for p in [*GOLDEN.glob("*.json"), *GOLDEN.glob("*.csv"), *GOLDEN.glob("subset/*")]:
        assert p.stat().st_size < 200_000, p


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden-report")
    found = collect([GOLDEN])
    rendered = render_report(found.items, out, manifest=found.manifest)
    return rendered, rendered.markdown_path.read_text(encoding="utf-8")


def test_golden_report_has_every_section_in_order(golden):
    _, md = golden
    assert md.startswith(TITLE)
    positions = [md.index(f"\n{h}\n") for h in SECTIONS]
    assert positions == sorted(positions)


def _section(md: str, heading: str) -> str:
    return md.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize(
    "heading",
    [
        "## Hardware and software",
        "## Golden parameters",
        "## Environment checks",
        "## Data subset",
        "## Training throughput",
        "## Training stage breakdown",
        "## Inference throughput",
        "## Latency",
        "## Data loading",
        "## Telemetry",
        "## Change-impact predictions",
    ],
)
def test_golden_sections_have_data(golden, heading):
    assert NOT_MEASURED not in _section(golden[1], heading)


def test_golden_figures_exist_open_and_are_referenced(golden):
    out, md = golden
    assert sorted(p.stem for p in out.figures) == sorted(FIGURE_NAMES)
    for path in out.figures:
        with Image.open(path) as im:
            im.verify()
        assert f"(figures/{path.name})" in md
    leftovers = [p for p in out.markdown_path.parent.iterdir() if p.name.startswith(".")]
    assert not leftovers  # the temp folder is gone


def test_golden_report_content(golden):
    out, md = golden
    assert "kernel-active" in md and "utilization of Tensor Cores" not in md
    assert "| seed | 42 |" in _section(md, "## Golden parameters")
    assert "**knee**" in _section(md, "## Data loading")
    assert "SLA p99 ≤ 150 ms" in _section(md, "## Latency")
    assert "samples/s [95% CI]" in _section(md, "## Training throughput")
    for name in signals.SIGNAL_TITLES:
        assert signals.SIGNAL_TITLES[name] in _section(md, "## Danger signals")
    preds = _section(md, "## Change-impact predictions")
    assert "**predictions**" in preds
    bullets = [line for line in preds.splitlines() if line.startswith("- ")]
    assert bullets and all(line.startswith("- Prediction:") for line in bullets)
    assert any("workers: data time" in line for line in bullets)
    assert {s.name for s in out.signals} == set(signals.SIGNAL_TITLES)


def test_env_check_table_folds_identical_gpu_skips(tmp_path):
    """No GPU: eleven GPU checks skip with the same NVML message; the table says it once."""
    why = (
        "no GPU checks: no NVIDIA driver (NVMLError_LibraryNotFound: NVML Shared Library Not Found)"
    )
    kinds = ["present", "temperature", "memory_used", "processes", "memory_total", "throttle"]
    kinds += ["persistence", "mig", "ecc", "clocks", "power"]
    env = Result(kind="env-check", environment=ENV, config={"golden": {"seed": 42}})
    env.verdict.checks += [Check(f"gpu.{k}", "skip", message=why) for k in kinds]
    env.verdict.checks += [
        Check("cpu.idle", "pass", 0.99, 0.9, "99% idle"),
        Check("cpu.turbo", "skip", message="turbo state not exposed here"),
    ]
    md = render_report([env], tmp_path).markdown_path.read_text()
    rows = [
        line for line in _section(md, "## Environment checks").splitlines() if line.startswith("| ")
    ]
    assert len(rows) == len(set(rows)), "two identical rows in the environment table"
    assert sum(why in row for row in rows) == 1
    assert any(row.startswith(f"| GPU checks ({len(kinds)}) | skip |") for row in rows)
    assert any(row.startswith("| cpu.idle | pass | 99% | ≥ 90% |") for row in rows)
    assert any(row.startswith("| cpu.turbo | skip |") for row in rows)


def test_absent_data_says_not_measured(tmp_path):
    env = Result(kind="env-check", environment=ENV, config={"golden": {"seed": 42}})
    out = render_report([env], tmp_path)
    md = out.markdown_path.read_text()
    for heading in (
        "## Data subset",
        "## Training throughput",
        "## Latency",
        "## Data loading",
        "## Telemetry",
    ):
        assert NOT_MEASURED in _section(md, heading), heading
    assert out.figures == []


def test_run_phases_are_followed_and_read_once(tmp_path):
    tp = train_result()
    write_result(tp, tmp_path / "throughput.json")
    run = Result(
        kind="run",
        data={
            "phases": [
                {"phase": "throughput", "kind": "throughput", "file": "throughput.json"},
                {"phase": "report", "kind": "report", "file": "baseline_report.md"},
                {"phase": "latency", "file": None, "status": "failed"},
            ]
        },
    )
    write_result(run, tmp_path / "baseline.json")
    found = collect([tmp_path / "baseline.json", tmp_path])
    assert sorted(i.result.kind for i in found.items) == ["run", "throughput"]


def test_a_missing_phase_file_is_an_error(tmp_path):
    run = Result(kind="run", data={"phases": ["gone.json"]})
    write_result(run, tmp_path / "baseline.json")
    with pytest.raises(ResultFileError, match=r"gone\.json"):
        collect([tmp_path / "baseline.json"])


def test_existing_report_needs_force_and_failures_leave_nothing(tmp_path, monkeypatch):
    r = train_result()
    render_report([r], tmp_path)
    with pytest.raises(OutputExistsError):
        render_report([r], tmp_path)
    before = (tmp_path / REPORT_NAME).read_text()

    def broken(*_args, **_kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(figures, "stages_figure", broken)
    with pytest.raises(OutputError, match="No space left"):
        render_report([train_result(data_wait=0.3)], tmp_path, force=True)
    assert (tmp_path / REPORT_NAME).read_text() == before  # the old report is untouched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_telemetry_is_read_from_the_artifact_path(tmp_path):
    r = train_result()
    r.artifacts["telemetry"] = "tel.csv"
    lines = [
        "t_s,cpu_pct,cpu0_pct,cpu1_pct,rss_bytes,gpu0_kernel_active_pct,gpu0_memory_used_bytes,"
        "gpu0_temperature_c,gpu0_throttle,error"
    ]
    for i in range(60):
        gpu = 90 if (i // 5) % 2 == 0 else 5
        lines.append(f"{0.1 * i:.1f},50,99,98,{1e8 + i},{gpu},{2e9},{70 + i * 0.1:.1f},,")
    lines.append("6.0,,,,,,,,,cpu: read failed")
    (tmp_path / "tel.csv").write_text("\n".join(lines) + "\n")
    write_result(r, tmp_path / "tp.json")
    tel = read_telemetry(tmp_path / "tel.csv")
    assert tel.has_gpu and set(tel.cpu_cores) == {"cpu0", "cpu1"} and tel.n == 61
    out = render_report([ReportInput(r, tmp_path / "tp.json")], tmp_path / "out")
    fired = {s.name for s in out.fired}
    assert {"gpu_sawtooth", "thermal", "cpu_saturated"} <= fired
    with Image.open(tmp_path / "out/figures/telemetry.png") as im:
        im.verify()


def test_report_modules_import_no_torch():
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import mlbaseline.report.markdown, mlbaseline.report.signals, mlbaseline.report.render\n"
        "from mlbaseline.report.inputs import collect\n"
        "from mlbaseline.report.render import build_context\n"
        "from mlbaseline.report.markdown import render_markdown\n"
        f"found = collect([Path({str(GOLDEN)!r})])\n"
        "render_markdown(build_context(found.items, manifest=found.manifest))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- CLI


def test_cli_writes_the_report_and_refuses_a_non_empty_folder(tmp_path):
    out = tmp_path / "rep"
    res = runner.invoke(app, ["report", str(GOLDEN), "-o", str(out), "--quiet", "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert Path(doc["report"]).is_file() and len(doc["figures"]) == len(FIGURE_NAMES)
    assert {s["name"] for s in doc["signals"]} == set(signals.SIGNAL_TITLES)
    res = runner.invoke(app, ["report", str(GOLDEN), "-o", str(out)])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        f"Error: {out}: folder is not empty (use --force to write into it)"
    ]
    res = runner.invoke(
        app, ["report", str(GOLDEN / "throughput.json"), "-o", str(out), "--force", "-q"]
    )
    assert res.exit_code == 0, res.stderr


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda d: [], "no input"),
        (lambda d: [str(d / "missing.json")], "no such file"),
        (lambda d: [str(d / "bad.json")], "not valid JSON"),
        (lambda d: [str(d / "empty")], "no mlb result files found"),
        (lambda d: [str(d / "bad.json"), "--compare", "a", "b"], "not both"),
        (lambda d: [str(GOLDEN), "--telemetry", str(d / "nope.csv")], "no such file"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path, make_args, message):
    (tmp_path / "bad.json").write_text('{"schema_version": "1.0", "kind": ')
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["report", *make_args(tmp_path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], lines
    assert not (tmp_path / "out").exists()


def _pair(tmp_path: Path, slow_forward: float, new_env: dict | None = None) -> tuple[Path, Path]:
    old, new = train_result(noise=0.01), train_result(noise=0.01)
    fwd = new.measurements["train.bs16.forward"]
    step = new.measurements["train.bs16.step"]
    extra = [v * slow_forward for v in fwd.values]
    fwd.values = [a + b for a, b in zip(fwd.values, extra, strict=True)]
    step.values = [a + b for a, b in zip(step.values, extra, strict=True)]
    if new_env is not None:
        new.environment = new_env
    write_result(old, tmp_path / "old.json")
    write_result(new, tmp_path / "new.json")
    return tmp_path / "old.json", tmp_path / "new.json"


def test_cli_compare_renders_verdicts_attribution_and_a_forest_plot(tmp_path):
    pytest.importorskip("mlbaseline.comparison")
    old, new = _pair(tmp_path, slow_forward=0.5)
    out = tmp_path / "cmp"
    res = runner.invoke(app, ["report", "--compare", str(old), str(new), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.stderr
    md = (out / "compare_report.md").read_text()
    assert "mlb compare" in md and "Attribution (train.bs16)" in md and "regressed" in md
    assert "forward" in md.split("Attribution (train.bs16)", 1)[1]
    assert "![ratio of medians" in md
    with Image.open(out / "figures/compare_forest.png") as im:
        im.verify()


def test_cli_compare_not_comparable_exits_3(tmp_path):
    pytest.importorskip("mlbaseline.comparison")
    other = {"blocking": {**ENV["blocking"], "cpu_model": "Another CPU"}, "informational": {}}
    old, new = _pair(tmp_path, slow_forward=0.0, new_env=other)
    res = runner.invoke(app, ["report", "--compare", str(old), str(new), "-o", str(tmp_path / "c")])
    assert res.exit_code == 3
    assert res.stderr.startswith("Error:") and "cpu_model" in res.stderr


def test_groups_follow_meta_roles():
    r = train_result()
    g = groups(r)["train.bs16"]
    assert g.total.name == "train.bs16.step" and list(g.stages) == [
        "data_wait",
        "forward",
        "backward",
    ]
    assert g.residual.name == "train.bs16.residual" and g.rate.name == "train.bs16.samples_per_s"
    assert g.batch_size == 16 and g.label == "16"


def test_forest_plot_keeps_totals_and_movers_when_there_are_many_metrics(tmp_path):
    from mlbaseline.report.render import FOREST_MAX_ROWS, forest_rows

    def m(i: int, role: str, verdict: str = "unchanged") -> dict:
        return {
            "metric": f"m{i}",
            "ratio": 1.0,
            "ci_low": 0.99,
            "ci_high": 1.01,
            "verdict": verdict,
            "threshold": 0.03,
            "role": role,
        }

    few = {"metrics": [m(i, "stage") for i in range(5)]}
    assert len(forest_rows(few)[0]) == 5 and forest_rows(few)[1] == 0
    many = [m(i, "stage") for i in range(FOREST_MAX_ROWS)] + [
        m(100, "total"),
        m(101, "stage", "regressed"),
    ]
    rows, left_out = forest_rows({"metrics": many})
    assert [r.metric for r in rows] == ["m100", "m101"] and left_out == FOREST_MAX_ROWS
    wide = [
        figures.ForestRow("a", 1.0, 0.1, 9.0, "inconclusive", 0.03),
        figures.ForestRow("b", 1.2, 1.1, 1.3, "regressed", 0.03),
    ]
    with Image.open(figures.forest_figure(wide, tmp_path / "f.png")) as im:
        im.verify()


def test_gpu_signals_ignore_the_idle_phases_of_a_run_timeline():
    busy = np.r_[np.zeros(40), np.full(40, 92.0), np.zeros(20)]  # dataloader, training, after
    found = signals.gpu_signals(telemetry(gpu=busy))
    assert found and not any(s.fired for s in found)
    assert "while kernels ran" in found[0].message


def test_gpu_signals_judge_the_recorded_training_windows():
    r = train_result()
    r.data = {
        "batch_sizes": {
            "16": {"batch_size": 16, "status": "ok", "train": {"telemetry_window_s": [5.0, 9.9]}}
        }
    }
    series = np.r_[_sawtooth(50), np.full(50, 92.0)]  # t = 0–4.9 s sawtooth, 5–9.9 s steady
    assert signals.training_windows([r]) == [(5.0, 9.9)]
    assert not any(
        s.fired for s in _of(signals.compute_signals([r], telemetry(gpu=series)), "gpu_sawtooth")
    )
    r.data["batch_sizes"]["16"]["train"]["telemetry_window_s"] = [0.0, 4.9]
    assert any(
        s.fired for s in _of(signals.compute_signals([r], telemetry(gpu=series)), "gpu_sawtooth")
    )


def test_formatting_keeps_the_report_and_comparison_texts():
    from mlbaseline import formatting as f

    assert (f.number(1234.5), f.number(0.01234), f.number(None), f.number(0)) == (
        "1,234",
        "0.0123",
        "–",
        "0",
    )
    assert (f.milliseconds(0.01234), f.milliseconds(0.01234, style="general")) == ("12.3", "12.3")
    assert (f.percent(0.1234), f.percent(0.99, 0, missing="?"), f.percent(None)) == (
        "12.3%",
        "99%",
        "–",
    )
    assert (f.signed_percent(0.06), f.signed_percent(-1e-5), f.share_percent(-0.001)) == (
        "+6.0%",
        "+0.0%",
        "0%",
    )
    assert f.interval_percent([0.049, 0.071]) == "[4.9, 7.1]"
    assert f.interval_percent([None, 0.1]) == "[n/a]"
    assert (f.size(2.5e6), f.size(2.5e6, ".1f", missing="-"), f.size(512)) == (
        "2.38 MiB",
        "2.4 MiB",
        "512 B",
    )
    assert (f.value(0.0123, "s"), f.value(2.5e6, "B"), f.value(-0.002, "s", signed=True)) == (
        "12.3 ms",
        "2.38 MiB",
        "-2 ms",
    )
    assert (f.value(1234.5, "items/s", signed=True), f.value(None, "s")) == ("+1234/s", "n/a")
    assert (f.p_value(0.0004), f.p_value(0.0123), f.gigabytes(16e9)) == (
        "<0.001",
        "0.012",
        "16.0 GB",
    )
    assert f.with_ci(12.345, 11.9, 12.8) == "12.3 [11.9, 12.8]"
    assert f.markdown_table(["a", "b"], [[1, "x|y"]], "lr") == [
        "| a | b |",
        "|---|---:|",
        "| 1 | x\\|y |",
    ]
    assert f.markdown_table(["a"], [])[1] == "|---|"


def test_golden_report_has_no_two_identical_table_rows(golden):
    # a row repeated verbatim says nothing new (e.g. eleven identical "skip … NVML" rows)
    _, md = golden
    tables: list[list[str]] = [[]]
    for line in md.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            tables[-1].append(line)
        elif tables[-1]:
            tables.append([])
    for rows in tables:
        assert len(rows) == len(set(rows)), [r for r in rows if rows.count(r) > 1]


def test_environment_table_shows_the_measuring_process_settings(tmp_path):
    """Determinism flags and threads are set by the process that measured: the report takes
    them from the throughput result, not from the env-check (which ran before any phase)."""
    before = {"cudnn_deterministic": False, "cudnn_benchmark": True, "torch_threads": 2}
    measured = {"cudnn_deterministic": True, "cudnn_benchmark": False, "torch_threads": 1}
    env = Result(
        kind="env-check",
        environment={**ENV, "informational": before},
        config={"golden": {"seed": 42}},
    )
    tp = Result(kind="throughput", environment={**ENV, "informational": measured})
    md = render_report([env, tp], tmp_path).markdown_path.read_text()
    row = next(x for x in md.splitlines() if x.startswith("| determinism |"))
    assert "cudnn.deterministic=True" in row and "as the throughput phase ran" in row
    threads = next(x for x in md.splitlines() if x.startswith("| threads |"))
    assert "torch 1," in threads
    md = render_report([env], tmp_path / "only-env").markdown_path.read_text()
    assert "cudnn.deterministic=False" in md  # no throughput: the env-check's is all there is


def test_cv_advice_for_the_dataloader_is_one_it_can_follow():
    """mlb dataloader has no --repeats: its one-process advice must not offer one."""
    r = Result(kind="dataloader")
    r.add_metric(
        Metric(
            "dataloader.w0.batch",
            "s",
            False,
            [0.01, 0.011, 0.012, 0.0105],
            meta={"group": "dataloader.w0", "role": "batch"},
        )
    )
    found = [s for s in signals.cv_signals([r]) if s.subject == "dataloader.w0.batch"]
    assert found and "--repeats" not in found[0].message
    assert "run it again" in found[0].message


def test_the_terminal_says_what_was_measured_before_anything_else(tmp_path):
    """The first lines on the terminal are the headline's "what was measured" (model, data,
    batch sizes, device), before the file paths and any danger signal."""
    res = runner.invoke(app, ["report", str(GOLDEN), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.stderr
    first = " ".join(res.stderr.split()).split("report written to")[0]
    assert first.startswith("Measured: "), res.stderr[:400]
    assert "batch sizes" in first and "Made by: " in first and "danger signal" not in first


def test_the_terminal_gives_each_fired_signal_as_the_headline_does(tmp_path):
    """One line per fired signal kind, the headline's words (title, where with its value,
    what to do), not the per-subject details of the report's signal table."""
    res = runner.invoke(
        app, ["report", str(SIGNALS / "replicated_noisy.json"), "-o", str(tmp_path)]
    )
    assert res.exit_code == 0, res.stderr
    said = " ".join(res.stderr.split()).split("danger signal: ")[1:]
    md = (tmp_path / "baseline_report.md").read_text()
    bullets = [
        line[2:].replace("**", "")
        for line in md.split("**Danger signals that fired", 1)[1].split("\n\n")[1].splitlines()
    ]
    assert said and [s.strip() for s in said] == bullets
    assert signals.NOT_REPRODUCIBLE_MEANS in said[0]
    assert "of the variance between processes" not in res.stderr  # the table's detail
