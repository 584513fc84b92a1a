"""Every report figure read back from the matplotlib Figure it draws (axis labels, units, scales,
titles, the artists of each series) and from its PNG (size, with PIL): stages stacked to the
step, telemetry as line charts with gaps, throughput titled by model and device, dataloader on
medians with CIs, a forest axis that holds every CI, one unit per trend axis and one kind per
trend figure, and two result files drawn as two series. The inputs are the demo-like results
of scripts/make_figures.py (the `make figures` target), so the docs PNGs are these figures."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlbaseline.report import figures, payloads
from mlbaseline.report.data import Telemetry, all_groups
from mlbaseline.report.figures_compare import ForestRow, draw_forest, forest_limits
from mlbaseline.report.figures_history import (
    HistoryView,
    TrendLine,
    by_kind,
    draw_trend,
    trend_figures,
)
from mlbaseline.report.inputs import collect
from mlbaseline.report.render import render_report
from mlbaseline.report.sections_performance import noise_table
from mlbaseline.results import load_result

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_figures", ROOT / "scripts/make_figures.py")
assert _spec is not None and _spec.loader is not None
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as im:
        im.verify()
        return im.size


@pytest.fixture
def close():
    """Figures drawn by a test, closed after it."""
    drawn: list = []
    yield drawn.append
    for f in drawn:
        figures.plt.close(f)


def _series(tmp_path: Path) -> tuple[list, list[figures.Series], list[figures.Series]]:
    items = demo.two_results(tmp_path)
    results = [i.result for i in items]
    paths = [i.path for i in items]
    train = figures.result_series(results, paths, "train")
    infer = figures.result_series(results, paths, "infer")
    return results, train, infer


# ---------------------------------------------------------------- throughput


def test_throughput_names_model_and_device_and_draws_one_series_per_file(tmp_path, close):
    results, train, infer = _series(tmp_path)
    assert [s.name for s in train] == ["a/throughput.json", "b/throughput.json"]
    fig = figures.draw_throughput(train, infer, results)
    close(fig)
    ax = fig.axes[0]
    assert ax.get_title() == "Throughput per batch size: builtin:tiny_cnn on cpu"
    assert ax.get_xlabel() == "batch size" and "samples/s" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f"{f}: {part}" for part in ("training", "inference")
                      for f in ("a/throughput.json", "b/throughput.json")]  # fmt: skip
    bars = [p.get_gid() for p in ax.patches if p.get_gid()]
    for name in ("a/throughput.json", "b/throughput.json"):  # 2 batch sizes × 2 parts each
        assert sorted(g for g in bars if g.startswith(name + "|")) == [
            f"{name}|{part}|{b}" for part in ("inference", "training") for b in (16, 8)
        ]
    png = figures.throughput_figure(train, infer, tmp_path / "t.png", results)
    assert _png_size(png) == figures.FIGURE_PX


# ---------------------------------------------------------------- stages


def test_stages_are_stacked_shares_that_sum_to_the_step_one_stack_per_file(tmp_path, close):
    _, train, _ = _series(tmp_path)
    fig = figures.draw_stages(train, "Training step", "batch size")
    close(fig)
    ax = fig.axes[0]
    stacks = figures.stage_stacks(train)
    labels = [st.label for st in stacks]
    assert labels == ["8\na/throughput.json", "8\nb/throughput.json",
                      "16\na/throughput.json", "16\nb/throughput.json"]  # fmt: skip
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    heights: dict[str, float] = {}
    for p in ax.patches:
        label, _, stage = (p.get_gid() or "").rpartition("|")
        if label:
            assert stage != "total"  # no total bar beside the stages
            heights[label] = heights.get(label, 0.0) + p.get_height()
    for st in stacks:
        assert heights[st.label] == pytest.approx(st.step * 1e3)
        assert st.shares["residual"] >= 0 and "residual" in list(st.shares)[-1:]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "residual" and "data wait" in legend
    assert ax.get_ylabel() == "ms per step (median of the step)"
    assert _png_size(figures.stages_figure(train, tmp_path / "s.png", "t", "b")) == (1600, 900)


# ---------------------------------------------------------------- telemetry


def _gpu_telemetry() -> Telemetry:
    n = 40
    t = np.arange(n) * 0.5
    cpu = np.full(n, 60.0)
    cpu[10:13] = np.nan  # three missing samples
    return Telemetry(
        None,
        t,
        gpu_active={"gpu0": np.full(n, 90.0)},
        gpu_memory={"gpu0": np.full(n, 3 * 2**30)},
        cpu_cores={"cpu0": cpu, "cpu1": np.full(n, 20.0)},
        memory={"rss_bytes": np.linspace(200, 300, n) * 2**20},
        phases=["dataloader"] * 10 + ["throughput"] * 30,
    )


def test_telemetry_is_line_charts_per_series_with_gaps_and_labelled_bands(tmp_path, close):
    tel = _gpu_telemetry()
    fig = figures.draw_telemetry(tel)
    close(fig)
    axes = fig.axes
    assert [ax.get_ylabel() for ax in axes] == [
        "CPU %", "memory (MiB)", "GPU kernel-active %", "GPU memory (GiB)"]  # fmt: skip
    assert not any(ax.images for ax in axes)  # no heat map
    lines = {ln.get_gid(): ln for ax in axes for ln in ax.get_lines() if ln.get_gid()}
    assert set(lines) == {"line|cpu0", "line|cpu1", "line|rss_bytes", "line|gpu0",
                          "line|gpu0 memory"}  # fmt: skip
    cpu0 = np.asarray(lines["line|cpu0"].get_ydata(), dtype=float)
    assert np.isnan(cpu0[10:13]).all() and np.isfinite(cpu0[:10]).all()  # NaN: a break
    rss = np.asarray(lines["line|rss_bytes"].get_ydata(), dtype=float)
    assert rss[0] == pytest.approx(200) and rss[-1] == pytest.approx(300)  # in MiB
    gpu_mem = np.asarray(lines["line|gpu0 memory"].get_ydata(), dtype=float)
    assert gpu_mem == pytest.approx(3.0)
    bands = [p for p in axes[0].patches if (p.get_gid() or "").startswith("phase|")]
    assert [b.get_gid() for b in bands] == ["phase|dataloader", "phase|throughput"]
    assert all(len(ax.patches) == 2 for ax in axes)  # every panel carries the phases
    texts = {t.get_text(): t.get_position()[0] for t in axes[0].texts}
    for span in figures.phase_spans(tel):  # each label centred on its own band
        assert texts[span.label] == pytest.approx((span.start + span.end) / 2)
    assert _png_size(figures.telemetry_figure(tel, tmp_path / "t.png")) == figures.FIGURE_PX


def test_telemetry_without_a_gpu_has_no_gpu_panel(close):
    fig = figures.draw_telemetry(demo.phased_telemetry())
    close(fig)
    assert [ax.get_ylabel() for ax in fig.axes] == ["CPU %", "memory (GiB)"]


# ---------------------------------------------------------------- dataloader


def test_dataloader_panels_are_medians_with_confidence_intervals(close):
    found = collect([demo.GOLDEN / "dataloader.json"])
    results = [i.result for i in found.items]
    loader = payloads.loader_sweep(results)
    points = figures.sweep_points(results, [i.path for i in found.items])
    assert [p.label for p in points] == [p.label for p in loader]
    assert [p.knee for p in points] == [p.is_knee for p in loader] and any(p.knee for p in points)
    fig = figures.draw_dataloader(points, 2)
    close(fig)
    rate, split = fig.axes
    for ax in (rate, split):
        assert "median" in ax.get_ylabel() and "95% CI" in ax.get_ylabel()
        assert "mean" not in ax.get_ylabel()
    # one bar and one whisker per setting and stage
    stages = {s for p in points for s in p.split}
    assert len(split.patches) == len(points) * len(stages) and stages == {
        "read", "decode", "transform"}  # fmt: skip
    from matplotlib.container import BarContainer

    bars = [c for c in split.containers if isinstance(c, BarContainer)]
    assert len(bars) == 3 and all(c.errorbar is not None for c in bars)
    g = {g.prefix: g for g in all_groups(results, "dataloader")}
    p0 = points[0]
    raw = np.asarray(g[next(iter(g))].stages["read"].values) * 1e3
    assert p0.split["read"][0] == pytest.approx(float(np.median(raw)))


# ---------------------------------------------------------------- compare forest


def test_forest_axis_is_log_and_holds_every_ci_with_values_printed(tmp_path, close):
    rows = [
        ForestRow("step", 1.02, 0.99, 1.05, "unchanged", 0.03),
        ForestRow("data_wait", 3.4, 2.9, 4.1, "regressed", 0.03),
        ForestRow("forward", 0.31, 0.26, 0.37, "improved", 0.03),
        ForestRow("loss", 1.0, math.nan, 1.6, "inconclusive", 0.03),
    ]
    fig = draw_forest(rows)
    close(fig)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    lo, hi = ax.get_xlim()
    assert (lo, hi) == pytest.approx(forest_limits(rows))
    assert lo < 0.26 and hi > 4.1  # no CI clipped at 0.5–2
    texts = [t.get_text() for t in ax.texts]
    assert "×3.40 [2.90, 4.10]" in texts and "×0.310 [0.260, 0.370]" in texts
    assert len(texts) == len(rows)
    gids = {ln.get_gid() for ln in ax.get_lines()}
    assert {f"ci|{r.metric}" for r in rows} <= gids
    assert "regressed" in ax.get_title() and "improved" in ax.get_title()
    tick_values = [float(t) for t in ax.get_xticks()]
    assert len(tick_values) >= 3 and min(tick_values) >= lo and max(tick_values) <= hi


# ---------------------------------------------------------------- history trend


def _mixed_view() -> HistoryView:
    runs = ["#1", "#2", "#3"]
    view = HistoryView("train.bs16.* over time", "s", runs)
    view.lines += [
        TrendLine("step", [0, 1, 2], [0.02, 0.021, 0.02], [0.019] * 3, [0.022] * 3,
                  unit="s", kind="throughput"),
        TrendLine("samples_per_s", [0, 1, 2], [800.0, 790.0, 805.0], [None] * 3, [None] * 3,
                  unit="items/s", kind="throughput"),
        TrendLine("step", [0, 2], [0.03, 0.031], [None] * 2, [None] * 2, unit="s", kind="run"),
    ]  # fmt: skip
    return view


def test_trend_has_one_unit_per_axis_and_scales_seconds_only_to_ms(close):
    view = by_kind(_mixed_view())[0]
    assert [ln.kind for ln in view.lines] == ["throughput", "throughput"]
    fig = draw_trend(view)
    close(fig)
    ms_ax, rate_ax = fig.axes
    assert ms_ax.get_ylabel() == "median (ms), band: 95% CI"
    assert rate_ax.get_ylabel() == "median (items/s), band: 95% CI"
    (step,) = ms_ax.get_lines()
    (rate,) = rate_ax.get_lines()
    assert step.get_gid() == "trend|s|step" and list(step.get_ydata()) == pytest.approx(
        [20.0, 21.0, 20.0])  # fmt: skip
    assert list(rate.get_ydata()) == pytest.approx([800.0, 790.0, 805.0])  # not ×1e3 or ×1e6
    assert [t.get_text() for t in ms_ax.get_legend().get_texts()] == ["step"]  # by metric
    assert [t.get_text() for t in rate_ax.get_legend().get_texts()] == ["samples_per_s"]


def test_trend_draws_one_figure_per_kind(tmp_path):
    paths = trend_figures(_mixed_view(), tmp_path / "trend.png")
    assert [p.name for p in paths] == ["trend.png", "trend-run.png"]
    assert all(_png_size(p) == (1600, 900) for p in paths)
    views = by_kind(_mixed_view())
    assert [v.title for v in views] == ["train.bs16.* over time (throughput)",
                                        "train.bs16.* over time (run)"]  # fmt: skip


# ---------------------------------------------------------------- two files in one report


def test_two_files_report_draws_two_series_and_keeps_each_files_mde_row(tmp_path, monkeypatch):
    seen: dict[str, list[str]] = {}
    real_tput, real_stages = figures.throughput_figure, figures.stages_figure

    def tput(train, infer, path, results=()):
        seen["throughput"] = [s.name for s in train + infer]
        return real_tput(train, infer, path, results)

    def stages(series, path, title, xlabel):
        seen["stages"] = [st.label for st in figures.stage_stacks(series)]
        return real_stages(series, path, title, xlabel)

    monkeypatch.setattr(figures, "throughput_figure", tput)
    monkeypatch.setattr(figures, "stages_figure", stages)
    out = render_report(demo.two_results(tmp_path), tmp_path / "report")
    assert {"stages.png", "throughput.png"} <= {p.name for p in out.figures}
    files = ["a/throughput.json", "b/throughput.json"]
    assert seen["throughput"] == files * 2  # training, then inference, of each file
    assert len(set(seen["stages"])) == 4 and all(
        any(f in label for f in files) for label in seen["stages"])  # fmt: skip
    md = out.markdown_path.read_text(encoding="utf-8")
    for f in files:  # the training, stage and inference tables name the file of each row
        assert md.count(f"| 8 ({f}) |") == 3 and md.count(f"| 16 ({f}) |") == 3, f
    golden = ROOT / "tests/golden/signals"
    a, b = (load_result(golden / f) for f in ("replicated_noisy.json", "replicated_quiet.json"))
    gs = [g for g in all_groups([a], "train") if g.stages]
    rows = [ln for ln in noise_table([a, b], gs, ["A.json", "B.json"]) if ln.startswith("| 8")]
    assert [r.split("|")[1].strip() for r in rows] == ["8 (A.json)", "8 (B.json)"]
    assert rows[0].split("|")[3:] != rows[1].split("|")[3:]  # B's row did not replace A's


def test_two_dataloader_files_are_two_series(close):
    found = collect([demo.GOLDEN / "dataloader.json"])
    r = found.items[0].result
    points = figures.sweep_points([r, r], [Path("a/dataloader.json"), Path("b/dataloader.json")])
    one = payloads.loader_sweep([r])
    assert len(points) == 2 * len(one) and len({p.label for p in points}) == len(points)
    assert points[0].label == f"{one[0].label}\na/dataloader.json"
    fig = figures.draw_dataloader(points, 2)
    close(fig)
    rate = fig.axes[0]
    assert len(rate.patches) == len(points) and "each file's knee" in rate.get_title()


def test_series_labels_tell_files_of_one_name_apart():
    from mlbaseline.report.labels import series_labels
    from mlbaseline.results import Result

    rs = [Result(kind="throughput"), Result(kind="throughput")]
    assert series_labels(rs[:1], [Path("x/throughput.json")]) == [""]
    assert series_labels(rs, [Path("r/a/throughput.json"), Path("r/b/throughput.json")]) == [
        "a/throughput.json", "b/throughput.json"]  # fmt: skip
    assert series_labels(rs, [Path("a.json"), Path("b.json")]) == ["a.json", "b.json"]
    assert series_labels(rs, [None, None]) == ["result 1", "result 2"]
    named = Result(kind="throughput", config={"history": {"name": "nightly"}})
    assert series_labels([named, rs[1]], [Path("a.json"), Path("b.json")]) == ["nightly", "b.json"]


# ---------------------------------------------------------------- docs/figures (make figures)


def test_make_figures_draws_every_figure_at_the_report_size(tmp_path):
    written = demo.draw_all(tmp_path)
    assert sorted(p.name for p in written) == sorted(
        ["throughput.png", "stages.png", "latency.png", "dataloader.png", "subset.png",
         "two_results_throughput.png", "two_results_stages.png", "telemetry.png",
         "compare_forest.png", "history_trend.png", "memory.png"])  # fmt: skip
    for p in written:
        width, height = _png_size(p)
        assert width == 1600 and height >= 900, p.name


# ---------------------------------------------------------------- mlb history trend, end to end


def test_history_trend_command_draws_one_png_per_kind_one_axis_per_unit(tmp_path, monkeypatch):
    from history_fakes import stamp, synthetic, write
    from typer.testing import CliRunner

    from mlbaseline.cli import app
    from mlbaseline.report import figures_history
    from mlbaseline.results import Metric

    monkeypatch.setenv("MLB_HISTORY", str(tmp_path / "h.sqlite"))
    files = []
    for i in range(6):
        r = synthetic(i, created_at=stamp(i), kind="throughput" if i < 3 else "run")
        step = r.measurements["train.bs64.step"].values
        meta = {"group": "train.bs64", "role": "rate"}
        r.add_metric(
            Metric("train.bs64.samples_per_s", "items/s", True, [64 / v for v in step], meta=meta)
        )
        files.append(write(r, tmp_path / f"{i}.json"))
    cli = CliRunner()
    assert cli.invoke(app, ["history", "add", *map(str, files)]).exit_code == 0
    drawn: list[HistoryView] = []
    real = figures_history.draw_trend
    monkeypatch.setattr(figures_history, "draw_trend", lambda v: drawn.append(v) or real(v))
    png = tmp_path / "trend.png"
    res = cli.invoke(app, ["history", "trend", "train.bs64.*", "-o", str(png)])
    assert res.exit_code == 0, res.output
    assert _png_size(png) == (1600, 900)
    other = list(tmp_path.glob("trend-*.png"))
    assert len(other) == 1 and _png_size(other[0]) == (1600, 900)
    assert sorted({ln.kind for v in drawn for ln in v.lines}) == ["run", "throughput"]
    for v in drawn:
        assert len({ln.kind for ln in v.lines}) == 1  # one kind per figure
        assert {ln.unit for ln in v.lines} == {"s", "items/s"}  # each on its own axis
