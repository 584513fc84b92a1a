"""The report's memory and energy (issue 28, item 5): the memory table per stage and batch size,
the figure of peak memory per batch size with the device's capacity line (read back from the
Figure), the headline's peak-memory and energy rows (present only when measured), and the HTML
report carrying the memory figure inline. Results are the golden demo throughput with memory
and energy metrics of known values added, as MEM-MEASURE and ENERGY-COST name them."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from PIL import Image

from mlbaseline.formatting import with_ci
from mlbaseline.report.figures_memory import (
    PeakSeries,
    draw_memory,
    memory_figure_job,
    peak_series,
)
from mlbaseline.report.figures_style import FIGURE_PX, plt
from mlbaseline.report.headline import HEADLINE
from mlbaseline.report.inputs import ReportInput
from mlbaseline.report.markdown import render_markdown
from mlbaseline.report.render import build_context, render_report
from mlbaseline.report.sections_memory import (
    MEMORY_HEADING,
    Capacity,
    capacity_of,
    memory_groups,
    result_memory,
)
from mlbaseline.results import Metric, Result, load_result

TESTS = Path(__file__).resolve().parent
GOLDEN = TESTS / "golden" / "report"
MiB, GiB = 1 << 20, 1 << 30
STAGES = ("data_wait", "h2d", "forward", "loss", "backward", "optimizer")


def _mem(name: str, values: list[float], group: str, what: str, stage: str = "") -> Metric:
    meta = {"role": "memory", "group": group, "memory": what, **({"stage": stage} if stage else {})}
    return Metric(name, "B", False, values, meta=meta)


def with_memory(result: Result, scale: float = 1.0, cuda: bool = False) -> Result:
    """The golden throughput with memory metrics: at batch B a peak of B·10 MiB (·scale; three
    steps: 0.98, 1, 1.02 of it), forward holding B MiB and backward B/2 MiB (added before
    data_wait, so the table must order them by the step), workers 30 MiB, an inference peak of
    B·2 MiB; on `cuda`, reserved bytes and an H100 on cuda:1."""
    out = copy.deepcopy(result)
    for b in (8, 16):
        g = f"train.bs{b}"
        peak = b * 10 * MiB * scale
        ms = [_mem(f"{g}.mem.peak", [peak * 0.98, peak, peak * 1.02], g, "peak"),
              _mem(f"{g}.mem.backward", [b * MiB / 2] * 3, g, "held", "backward"),
              _mem(f"{g}.mem.forward", [b * MiB * scale] * 3, g, "held", "forward"),
              _mem(f"{g}.mem.data_wait", [0.0] * 3, g, "held", "data_wait"),
              _mem(f"{g}.mem.workers_peak", [30 * MiB] * 2, g, "workers_peak")]  # fmt: skip
        if cuda:
            ms.insert(1, _mem(f"{g}.mem.reserved", [peak * 1.5] * 3, g, "reserved"))
        ms.append(_mem(f"infer.bs{b}.mem.peak", [b * 2 * MiB] * 3, f"infer.bs{b}", "peak"))
        out.measurements.update({m.name: m for m in ms})
    if cuda:
        out.data["device"] = "cuda:1"
        out.environment["blocking"]["device"] = "cuda:1"
        out.environment["informational"]["gpus"] = [
            {"index": 0, "name": "NVIDIA A10", "memory_total": 24 * GiB},
            {"index": 1, "name": "NVIDIA H100", "memory_total": 80 * GiB},
        ]
    return out


def with_energy(result: Result) -> Result:
    out = copy.deepcopy(result)
    for b in (8, 16):
        g = f"train.bs{b}"
        for what, per in (("step", 1.0), ("sample", 1.0 / b)):
            name = f"{g}.energy_per_{what}"
            values = [v * b * per for v in (1.9, 2.0, 2.1, 2.0, 2.0)]
            out.measurements[name] = Metric(name, "J", False, values,
                                            meta={"role": "energy", "group": g})  # fmt: skip
    return out


@pytest.fixture(scope="module")
def golden() -> Result:
    return load_result(GOLDEN / "throughput.json")


def _markdown(*results: Result, paths: tuple[str, ...] = ()) -> str:
    items = [ReportInput(r, Path(p) if p else None)
             for r, p in zip(results, paths or ("",) * len(results), strict=True)]  # fmt: skip
    return render_markdown(build_context(items))


def _section(md: str, heading: str) -> str:
    return md.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def _table(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows if not set(r) <= set("|-: ")]


# ---------------------------------------------------------------- the table


def test_memory_table_rows_are_groups_and_columns_peak_held_per_stage_workers(golden):
    table = _table(_section(_markdown(with_memory(golden)), MEMORY_HEADING))
    assert table[0] == ["", "peak RSS", "held after data wait", "held after forward (activations)",
                        "held after backward", "workers' peak"]  # fmt: skip
    rows = {r[0]: r[1:] for r in table[1:]}
    assert list(rows) == ["training, batch 8", "inference, batch 8",
                          "training, batch 16", "inference, batch 16"]  # fmt: skip
    assert rows["training, batch 8"] == ["80.00 MiB", "0 B", "8.00 MiB", "4.00 MiB", "30.00 MiB"]
    assert rows["training, batch 16"][0] == "160.00 MiB"  # the median of the three steps
    assert rows["inference, batch 16"] == ["32.00 MiB", "–", "–", "–", "–"]


def test_cuda_adds_reserved_and_names_the_allocated_peak_and_the_gpu(golden):
    section = _section(_markdown(with_memory(golden, cuda=True)), MEMORY_HEADING)
    table = _table(section)
    assert table[0][:3] == ["", "peak allocated", "peak reserved (CUDA)"]
    assert table[1][1:3] == ["80.00 MiB", "120.00 MiB"]
    assert "max_memory_allocated" in section and "RSS" not in section
    assert "GPU total memory (NVIDIA H100), 80.00 GiB" in section  # cuda:1, not the A10


def test_two_files_are_two_rows_each_labelled(golden):
    md = _markdown(with_memory(golden), with_memory(golden, scale=2.0),
                   paths=("a/throughput.json", "b/throughput.json"))  # fmt: skip
    rows = {r[0]: r[1:] for r in _table(_section(md, MEMORY_HEADING))[1:]}
    assert rows["training, batch 8 (a/throughput.json)"][0] == "80.00 MiB"
    assert rows["training, batch 8 (b/throughput.json)"][0] == "160.00 MiB"


def test_the_throughput_tables_memory_column_is_the_measured_peak(golden):
    md = _markdown(with_memory(golden))
    training = {r[0]: r[4] for r in _table(_section(md, "## Training throughput"))[1:]}
    assert training == {"8": "80.00 MiB peak (RSS)", "16": "160.00 MiB peak (RSS)"}
    inference = {r[0]: r[3] for r in _table(_section(md, "## Inference throughput"))[1:]}
    assert inference == {"8": "16.00 MiB peak (RSS)", "16": "32.00 MiB peak (RSS)"}
    cuda = _markdown(with_memory(golden, cuda=True))
    assert "| 80.00 MiB peak (CUDA allocated) |" in _section(cuda, "## Training throughput")
    old = _section(_markdown(golden), "## Training throughput")  # before memory was a metric
    assert "RSS growth" in old and "peak (RSS)" not in old


def test_a_run_folder_labels_nothing_and_shows_latency_memory(golden):
    latency = load_result(GOLDEN / "latency.json")
    m = _mem("latency.mem.peak", [700 * MiB], "latency", "peak")
    latency.measurements[m.name] = m
    md = _markdown(with_memory(golden), latency, paths=("r/throughput.json", "r/latency.json"))
    rows = {r[0]: r[1:] for r in _table(_section(md, MEMORY_HEADING))[1:]}
    assert next(iter(rows)) == "training, batch 8" and rows["latency"][0] == "700.00 MiB"


def test_a_result_without_memory_metrics_says_not_measured(golden):
    section = _section(_markdown(golden), MEMORY_HEADING)
    assert "_Not measured: no memory metrics in these results" in section
    assert "**Energy:** not measured (no energy metrics in these results)." in section


# ---------------------------------------------------------------- capacity


def test_capacity_is_the_gpu_total_the_host_ram_or_a_lower_cgroup_limit(golden):
    h100 = Capacity(80 * GiB, "GPU total memory (NVIDIA H100)")
    assert capacity_of(with_memory(golden, cuda=True)) == h100
    ram = golden.environment["informational"]["ram_total_bytes"]
    assert capacity_of(golden) == Capacity(float(ram), "host RAM")
    limited = copy.deepcopy(golden)
    limited.environment["informational"]["cgroup_memory_limit_bytes"] = 4 * GiB
    assert capacity_of(limited) == Capacity(4 * GiB, "cgroup memory limit")
    no_gpu_record = with_memory(golden, cuda=True)
    no_gpu_record.environment["informational"]["gpus"] = []
    assert capacity_of(no_gpu_record) is None  # never the host's RAM for a GPU


# ---------------------------------------------------------------- the figure


@pytest.fixture
def close():
    drawn: list = []
    yield drawn.append
    for f in drawn:
        plt.close(f)


def _lines(fig) -> dict[str, object]:
    return {ln.get_gid(): ln for ln in fig.axes[0].get_lines() if ln.get_gid()}


def test_figure_draws_each_peak_median_and_the_capacity_line(golden, close):
    r = with_memory(golden)
    series = peak_series(result_memory(r))
    cap = Capacity(1 * GiB, "host RAM")
    fig = draw_memory(series, [cap], "Peak memory per batch size on cpu")
    close(fig)
    ax, lines = fig.axes[0], _lines(fig)
    assert list(lines) == ["|training step", "|inference batch", "capacity|host RAM"]
    assert list(lines["|training step"].get_ydata()) == [80 * MiB, 160 * MiB]
    assert list(lines["|training step"].get_xdata()) == [0, 1]
    assert list(lines["|inference batch"].get_ydata()) == [16 * MiB, 32 * MiB]
    assert set(lines["capacity|host RAM"].get_ydata()) == {GiB}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["training step", "inference batch", "host RAM, 1.00 GiB"]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[1] > GiB  # the line is in view
    assert ax.get_xlabel() == "batch size" and "peak memory" in ax.get_ylabel()
    labels = [ax.yaxis.get_major_formatter()(v, 0) for v in (512 * MiB, GiB)]
    assert labels == ["512 MiB", "1 GiB"]  # bytes read in binary units


def test_figure_whiskers_span_the_smallest_to_largest_peak(golden, close):
    fig = draw_memory(peak_series(result_memory(with_memory(golden))), [], "t")
    close(fig)
    bars = next(c for c in fig.axes[0].containers if c.get_label() == "training step")
    segments = bars.lines[2][0].get_segments()
    assert [tuple(s[:, 1]) for s in segments] == [(80 * MiB * 0.98, 80 * MiB * 1.02),
                                                  (160 * MiB * 0.98, 160 * MiB * 1.02)]  # fmt: skip


def test_a_capacity_far_above_the_peaks_turns_the_axis_logarithmic(golden, close):
    series = [PeakSeries("", "training step", {8: (10 * MiB, 10 * MiB, 10 * MiB)})]
    fig = draw_memory(series, [Capacity(80 * GiB, "GPU total memory (NVIDIA H100)")], "t")
    close(fig)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    low, high = ax.get_ylim()
    assert low < 10 * MiB and high > 80 * GiB  # both the peak and the line are drawn in view


def test_report_job_titles_the_device_and_draws_a_16_9_png(golden, tmp_path):
    r = with_memory(golden, cuda=True)
    job = memory_figure_job(result_memory(r))
    assert job is not None and memory_figure_job(result_memory(golden)) is None
    with Image.open(job(tmp_path / "m.png")) as im:
        assert im.size == FIGURE_PX


# ---------------------------------------------------------------- the headline


def test_headline_has_peak_memory_and_energy_rows_only_when_measured(golden):
    plain = _section(_markdown(golden), HEADLINE)
    assert "peak memory" not in plain and "energy" not in plain
    head = _section(_markdown(with_energy(with_memory(golden, cuda=True))), HEADLINE)
    rows = {r[0]: r[1] for r in _table(head) if len(r) == 2}
    assert rows["peak memory, training step, batch 16"] == (
        "160.00 MiB peak allocated, 0.2% of the GPU total memory (NVIDIA H100)"
    )
    cell = rows["energy, training step, batch 8"]
    ci = r"\[[\d.]+, [\d.]+\]"
    assert re.fullmatch(rf"16\.0 {ci} J per step; 2\.00 {ci} J per sample", cell), cell


def test_energy_not_measured_is_no_headline_row_but_its_reason_is_in_the_section(golden):
    r = with_memory(golden)
    r.data["energy"] = {"measured": False, "reason": "RAPL not readable (permission denied)"}
    md = _markdown(r)
    assert "energy" not in _section(md, HEADLINE).lower()
    section = _section(md, MEMORY_HEADING)
    assert "**Energy:** not measured (RAPL not readable (permission denied))." in section


def test_flagged_windows_and_a_batch_size_without_a_figure_are_said(golden):
    r = with_energy(golden)
    del r.measurements["train.bs8.energy_per_step"], r.measurements["train.bs8.energy_per_sample"]
    ok = {"start_s": 0.0, "seconds": 1.2, "steps": 10, "samples": 160, "joules": 320.0, "flag": ""}
    short = {**ok, "seconds": 0.01, "joules": None, "flag": "short_window"}
    r.data["energy"] = {"measured": True, "source": "nvml-counter", "batch_sizes": {
        "8": {"windows": [short], "reason": "no window gave a figure (short_window)"},
        "16": {"windows": [ok] * 5 + [short, short]}}}  # fmt: skip
    md = _markdown(r)
    section = _section(md, MEMORY_HEADING)
    rows = {row[0]: row[1:] for row in _table(section)[1:]}
    assert rows["training, batch 16"][2] == "5 (2 more flagged: 2 short_window)"
    assert "training, batch 8" not in rows and "never 0 J" in section
    assert "Not measured: training, batch 8: no window gave a figure (short_window)." in section
    head = _section(md, HEADLINE)
    assert "energy, training step, batch 16" in head and "batch 8" not in head.split("energy")[-1]


def test_energy_table_in_the_section(golden):
    section = _section(_markdown(with_energy(golden)), MEMORY_HEADING)
    rows = {r[0]: r[1:] for r in _table(section)[1:]}
    assert rows["training, batch 16"][0].startswith("32.0 [")
    assert rows["training, batch 16"][2] == "5"  # windows


# ---------------------------------------------------------------- cost


def test_cost_rows_when_a_price_is_set_with_the_ci_of_samples_per_s_swapped(golden):
    assert "cost" not in _section(_markdown(golden), HEADLINE)
    assert "**Cost:** not shown: no price set (`cost.per_hour`)" in _markdown(golden)
    r = copy.deepcopy(golden)
    r.config["cost"] = {"per_hour": 3600.0, "currency": "EUR"}  # 1 EUR a second
    md = _markdown(r)
    rate = r.data["batch_sizes"]["8"]["train"]["samples_per_s"]
    per_1k = with_ci(1e3 / rate["median"], 1e3 / rate["ci_high"], 1e3 / rate["ci_low"])
    epoch = with_ci(256 / rate["median"], 256 / rate["ci_high"], 256 / rate["ci_low"])
    rows = {row[0]: row[1] for row in _table(_section(md, HEADLINE)) if len(row) == 2}
    assert rows["cost at 3,600 EUR/h, training step, batch 8"] == (
        f"{per_1k} EUR per 1k samples; {epoch} EUR per epoch (256 samples)"
    )
    assert not any("inference" in k for k in rows)  # the section has those
    section = _section(md, MEMORY_HEADING)
    assert "**Cost** at 3,600 EUR/h (cost.per_hour):" in section
    table = {row[0]: row[1:] for row in _table(section.split("**Cost**", 1)[1])[1:]}
    assert table["training, batch 8"] == [f"{per_1k} EUR", f"{epoch} EUR"]
    assert table["inference, batch 8"][1] == "–"  # an epoch is a training figure


# ---------------------------------------------------------------- the written report


def test_html_report_has_the_memory_figure_inline(golden, tmp_path):
    out = render_report([ReportInput(with_memory(golden), tmp_path / "throughput.json")],
                        tmp_path / "report", html=True)  # fmt: skip
    assert "memory" in [p.stem for p in out.figures]
    md = out.markdown_path.read_text(encoding="utf-8")
    assert "![peak memory per batch size with the device's capacity](figures/memory.png)" in md
    page = out.html_path.read_text(encoding="utf-8")
    memory = page.split("Memory and energy</h2>", 1)[1].split("<h2", 1)[0]
    assert re.search(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', memory)
    assert "figures/memory.png" not in page


def test_a_real_throughput_result_fills_the_table_and_the_activations_scale_with_the_batch():
    """A real CPU `mlb throughput` (tests/golden/memory/, make_figures' MEMORY_RUN)."""
    real = load_result(TESTS / "golden" / "memory" / "throughput.json")
    gs = result_memory(real)
    train = {g.batch_size: g for g in gs if g.family == "train"}
    assert sorted(train) == [8, 16, 32, 64]
    for b in (8, 16, 32):  # tiny_cnn's activations are linear in the batch
        ratio = train[2 * b].median("held.forward") / train[b].median("held.forward")
        assert 1.8 < ratio < 2.2, (b, ratio)
    assert all(g.median("workers_peak") for g in train.values())
    section = _section(_markdown(real), MEMORY_HEADING)
    assert len(_table(section)) == 1 + 8 and "workers' peak" in section
    assert "host RAM" in section


def test_memory_groups_follow_the_report_context(golden):
    ctx = build_context([ReportInput(with_memory(golden), None)])
    names = [g.name for g in memory_groups(ctx)]
    assert names == ["training, batch 8", "inference, batch 8",
                     "training, batch 16", "inference, batch 16"]  # fmt: skip
