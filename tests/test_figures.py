"""Report figures: one style (pixel size), the stage figure plots the stage table's medians, the
telemetry timeline has one labelled band per phase; and the demo profile backs what it reports."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from PIL import Image
from test_report import GOLDEN, train_result

from mlbaseline import config, stats
from mlbaseline.formatting import percent as pct
from mlbaseline.report import figures
from mlbaseline.report.data import Group, Telemetry, groups, read_telemetry, stage_shares
from mlbaseline.report.inputs import collect
from mlbaseline.report.markdown import stage_table
from mlbaseline.report.render import FIGURE_NAMES, render_report


def _size(path) -> tuple[int, int]:
    with Image.open(path) as im:
        im.verify()
        return im.size


@pytest.fixture(scope="module")
def golden_figures(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    found = collect([GOLDEN])
    return render_report(found.items, out, manifest=found.manifest).figures


# ---------------------------------------------------------------- one style: pixel size


def test_every_report_figure_is_1600_by_900(golden_figures):
    assert sorted(p.stem for p in golden_figures) == sorted(FIGURE_NAMES)
    for path in golden_figures:
        assert _size(path) == figures.FIGURE_PX == (1600, 900), path.name


def test_forest_figure_has_the_style_size_and_grows_only_for_many_rows(tmp_path):
    few = [figures.ForestRow("a", 1.0, 0.9, 1.1, "unchanged", 0.03)]
    assert _size(figures.forest_figure(few, tmp_path / "few.png")) == figures.FIGURE_PX
    many = [figures.ForestRow(f"m{i}", 1.0, 0.9, 1.1, "unchanged", 0.03) for i in range(40)]
    size = _size(figures.forest_figure(many, tmp_path / "many.png"))
    assert size == figures.figure_px(40) and size[0] == 1600 and size[1] > 900


def test_telemetry_figure_with_many_cores_keeps_the_size_and_draws_their_mean(tmp_path):
    t = np.arange(50) * 0.1
    tel = Telemetry(None, t, cpu_cores={f"cpu{i}": np.full(50, 50.0) for i in range(48)})
    assert _size(figures.telemetry_figure(tel, tmp_path / "t.png")) == figures.FIGURE_PX
    fig = figures.draw_telemetry(tel)
    try:
        lines = [ln.get_gid() for ln in fig.axes[0].get_lines() if ln.get_gid()]
    finally:
        figures.plt.close(fig)
    assert lines == ["line|cpu mean"]  # not 48 lines


def test_style_fonts_are_readable_and_do_not_leak():
    import matplotlib as mpl

    before = mpl.rcParams["font.size"]
    fig = figures.styled(lambda: figures.new_figure()[0])()
    try:
        assert fig.get_size_inches() * fig.dpi == pytest.approx(figures.FIGURE_PX)
    finally:
        figures.plt.close(fig)
    assert figures.STYLE["font.size"] >= 12 and mpl.rcParams["font.size"] == before


# ---------------------------------------------------------------- stages: the table's shares


def _table_shares(gs: list[Group]) -> dict[tuple[str, str], str]:
    """(group label, column) -> the "(12.3%)" share text of the Markdown stage table."""
    lines = [ln for ln in stage_table(gs, "batch size", lambda g: g.label) if ln.startswith("|")]
    split = lambda ln: [c.strip() for c in ln.strip("|").split("|")]  # noqa: E731
    headers = split(lines[0])
    out = {}
    for ln in lines[2:]:
        cells = split(ln)
        for h, c in zip(headers[1:], cells[1:], strict=True):
            m = re.search(r"\(([^)]+%)\)", c)
            if m:
                out[(cells[0], h.replace(" ", "_"))] = m.group(1)
    return out


def _skewed_groups() -> list[Group]:
    """Two training groups whose stage means and medians differ (right-skewed stage times)."""
    gs = []
    for b, seed in ((8, 1), (16, 2)):
        r = train_result(n=60, b=b)
        g = groups(r)[f"train.bs{b}"]
        rng = np.random.default_rng(seed)
        fwd = g.stages["forward"]
        fwd.values[:] = list(np.asarray(fwd.values) * rng.lognormal(0, 0.8, len(fwd.values)))
        gs.append(g)
    return gs


def test_stage_stacks_are_the_stage_tables_shares_of_the_median_step():
    gs = [groups(train_result(n=60, b=b, data_wait=0.2))[f"train.bs{b}"] for b in (8, 16)]
    stacks = figures.stage_stacks([figures.Series("", gs)])
    cells = _table_shares(gs)
    assert len(cells) >= 2 * 3
    for st in stacks:
        assert sum(st.shares.values()) == pytest.approx(1.0)
        for stage, share in st.shares.items():
            if stage != "residual":
                assert pct(share) == cells[(st.label, stage)], (st.label, stage)
    st8 = stacks[0]
    step = gs[0].total.values
    assert st8.step == float(np.median(step)) and (st8.low, st8.high) == stats.median_ci(step)


def test_overlapping_stages_are_scaled_to_fit_the_step_without_a_residual():
    gs = _skewed_groups()  # forward inflated, the step not: the stages add up past the step
    st = figures.stage_stacks([figures.Series("", gs)])[0]
    raw = stage_shares(gs[0])
    assert sum(v for k, v in raw.items() if k != "residual") > 1.0
    assert sum(st.shares.values()) == pytest.approx(1.0) and st.shares["residual"] == 0.0


def test_golden_stage_stacks_match_the_golden_report_table():
    found = collect([GOLDEN])
    r = next(i.result for i in found.items if i.result.kind == "throughput")
    gs = [g for g in groups(r).values() if g.family == "train" and g.stages and g.total]
    cells = _table_shares(gs)
    for st in figures.stage_stacks([figures.Series("", gs)]):
        for stage in (s for s in st.shares if s != "residual"):
            assert pct(st.shares[stage]) == cells[(st.label, stage)]


# ---------------------------------------------------------------- telemetry: phase bands


def _phased(labels: list[tuple[str, int]]) -> Telemetry:
    phases = [name for name, k in labels for _ in range(k)]
    n = len(phases)
    return Telemetry(
        None,
        np.arange(n) * 0.1,
        cpu_cores={"cpu0": np.full(n, 40.0), "cpu1": np.full(n, 60.0)},
        memory={"rss_bytes": np.linspace(1e8, 2e8, n)},
        phases=phases,
    )


def _bands(tel: Telemetry) -> list[str]:
    fig = figures.draw_telemetry(tel)
    try:
        return [
            a.get_gid().split("|", 1)[1]
            for ax in fig.axes
            for a in ax.patches
            if (a.get_gid() or "").startswith("phase|")
        ]
    finally:
        figures.plt.close(fig)


def test_timeline_has_one_labelled_band_per_phase():
    tel = _phased([("env-check", 5), ("dataloader", 30), ("throughput", 60), ("latency", 1)])
    spans = figures.phase_spans(tel)
    assert [s.label for s in spans] == ["env-check", "dataloader", "throughput", "latency"]
    assert _bands(tel) == [s.label for s in spans]
    dl = spans[1]
    assert (dl.start, dl.end) == pytest.approx((0.5, 3.4))
    assert spans[-1].end > spans[-1].start  # a one-sample phase is still visible
    fig = figures.draw_telemetry(tel)
    try:
        texts = {t.get_text() for ax in fig.axes for t in ax.texts}
    finally:
        figures.plt.close(fig)
    assert {s.label for s in spans} <= texts


def test_timeline_without_a_phase_column_has_no_band(tmp_path):
    tel = read_telemetry(GOLDEN / "telemetry.csv")
    assert not tel.phases and figures.phase_spans(tel) == [] and _bands(tel) == []
    blank = _phased([("", 10)])
    assert figures.phase_spans(blank) == [] and _bands(blank) == []


def test_timeline_from_a_run_csv_has_its_phases(tmp_path):
    lines = ["t_s,cpu0_pct,rss_bytes,phase,error"]
    for i, ph in enumerate(["env-check"] * 3 + ["dataloader"] * 10 + ["throughput"] * 20):
        lines.append(f"{0.1 * (i + 1):.1f},50,{1e8 + i},{ph},")
    (tmp_path / "tel.csv").write_text("\n".join(lines) + "\n")
    tel = read_telemetry(tmp_path / "tel.csv")
    assert _bands(tel) == ["env-check", "dataloader", "throughput"]
    assert _size(figures.telemetry_figure(tel, tmp_path / "t.png")) == figures.FIGURE_PX


# ---------------------------------------------------------------- the demo profile's own numbers


def _kept(requests: int, trim: float) -> int:
    k = int(requests * trim + 1e-9)  # measure.latency.trim_by_send_order
    return requests - 2 * k


def test_demo_latency_requests_back_every_reported_percentile():
    """A default must not fire its own "too few samples" signal: after the send-order trim the
    demo keeps at least the floor of every percentile the latency result and the signals use."""
    cfg = config.resolve(profile="demo")
    kept = _kept(cfg.latency.requests, cfg.latency.trim_fraction)
    for q, floor in stats.PERCENTILE_FLOORS.items():
        assert kept >= floor, f"demo keeps {kept} requests per level, p{q:g} needs {floor}"
    assert stats.percentile_floor_warnings(kept, "latency.request") == []


@pytest.mark.parametrize("name", config.available_profiles())
def test_every_builtin_profile_backs_its_percentiles(name):
    cfg = config.resolve(profile=name)
    assert _kept(cfg.latency.requests, cfg.latency.trim_fraction) >= max(
        stats.PERCENTILE_FLOORS.values()
    )


def test_kept_count_matches_the_trim():
    from mlbaseline.measure.latency import trim_by_send_order

    class R:
        def __init__(self, i: int) -> None:
            self.index = i

    for n in (300, 733, 734, 800, 1000):
        t = trim_by_send_order([R(i) for i in range(n)], 0.05)
        assert len(t.kept) == _kept(n, 0.05)
    assert math.isclose(_kept(1000, 0.05), 900)


def test_demo_leaves_a_core_free_of_compute():
    """torch's default thread count takes every core: on the CPU demo the cpu_saturated signal
    would fire by the profile's own construction (and the sampler would have no core)."""
    cfg = config.resolve(profile="demo")
    assert cfg.workload.device == "cpu" and cfg.workload.threads == 1
