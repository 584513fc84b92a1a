"""Draw every report figure into docs/figures/ as it looks on the demo (`make figures`).

    .venv/bin/python scripts/make_figures.py [OUT_DIR]

Not a `make demo` run (minutes): the inputs are the demo-like results the tests render,
tests/golden/report/ (real `mlb run` output on tiny settings), plus what a demo folder alone
does not hold, built from them deterministically: a second throughput result (B, the stages
rescaled) for the two-result report and the compare forest, a phased telemetry timeline, a
history of eight runs for the trend; the memory figure is drawn from tests/golden/memory/ (a
real `mlb throughput` with memory metrics, MEMORY_RUN).
tests/test_figures_readback.py imports these builders.
"""

from __future__ import annotations

import copy
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests/golden/report"
MEMORY_GOLDEN = ROOT / "tests/golden/memory/throughput.json"
# how MEMORY_GOLDEN was made (CPU, 2 cores; its numbers are that machine's)
MEMORY_RUN = (
    "mlb throughput --batch-sizes 8,16,32,64 --set workload.model=builtin:tiny_cnn "
    "--set workload.image_size=32 --set throughput.max_time_s=2 --set throughput.min_time_s=0.5 "
    "--set throughput.max_steps=40 --set throughput.num_workers=1 --set throughput.telemetry=false "
    "--repeats 1 --no-history -o tests/golden/memory/throughput.json"
)
OUT = ROOT / "docs/figures"
# B against A: the data wait doubles, the forward pass gets faster
B_FACTORS = {"data_wait": 2.0, "forward": 0.8, "backward": 1.02}

sys.path.insert(0, str(ROOT))

from mlbaseline.report.data import Telemetry, read_telemetry  # noqa: E402
from mlbaseline.report.figures_history import HistoryView, Mark, TrendLine  # noqa: E402
from mlbaseline.report.inputs import ReportInput, collect  # noqa: E402
from mlbaseline.results import Result  # noqa: E402


def golden_throughput() -> ReportInput:
    found = collect([GOLDEN / "throughput.json"])
    return next(i for i in found.items if i.result.kind == "throughput")


def rescaled(result: Result, factors: dict[str, float]) -> Result:
    """A copy whose training stages are scaled by `factors`, steps and rates recomputed from
    them sample by sample (the residual kept), so the copy is as self-consistent as the input."""
    out = copy.deepcopy(result)
    m = out.measurements
    for name in list(m):
        parts = name.split(".")
        if parts[0] != "train" or parts[-1] != "step":
            continue
        prefix = ".".join(parts[:-1])
        stages = [k for k in m if k.startswith(prefix + ".") and k.split(".")[-1] in (
            *factors, "h2d", "loss", "optimizer")]  # fmt: skip
        for k in stages:
            f = factors.get(k.split(".")[-1], 1.0)
            m[k].values = [v * f for v in m[k].values]
        parts_sum = np.sum([np.asarray(m[k].values) for k in stages], axis=0)
        step = parts_sum + np.asarray(m[f"{prefix}.residual"].values)
        m[name].values = [float(v) for v in step]
        batch = int(parts[1].removeprefix("bs"))
        rate = m.get(f"{prefix}.samples_per_s")
        if rate is not None:
            rate.values = [float(batch / v) for v in step]
    return out


def two_results(folder: Path) -> list[ReportInput]:
    """A (the golden throughput result) and B (rescaled), as a/throughput.json and
    b/throughput.json: two files of one name, told apart by their folders."""
    a = golden_throughput()
    b = rescaled(a.result, B_FACTORS)
    return [ReportInput(a.result, folder / "a/throughput.json"),
            ReportInput(b, folder / "b/throughput.json")]  # fmt: skip


def memory_throughput() -> ReportInput:
    """A real `mlb throughput` result with memory metrics (tests/golden/memory/, MEMORY_RUN):
    the golden report's files predate them."""
    found = collect([MEMORY_GOLDEN])
    return next(i for i in found.items if i.result.kind == "throughput")


def compare_doc() -> dict:
    """The comparison document `mlb compare a/throughput.json b/throughput.json` writes."""
    from mlbaseline.comparison import compare_results
    from mlbaseline.config import resolve

    a = golden_throughput().result
    comparison = compare_results(a, rescaled(a, B_FACTORS), resolve().compare,
                                 old_label="a/throughput.json",
                                 new_label="b/throughput.json")  # fmt: skip
    return comparison.to_dict()


def phased_telemetry() -> Telemetry:
    """The golden timeline with the phases of an `mlb run` (its `phase` column) and one gap."""
    tel = read_telemetry(GOLDEN / "telemetry.csv")
    n = tel.n
    cuts = [0, n // 10, n // 3, (3 * n) // 4, n]
    names = ["env-check", "dataloader", "throughput", "latency"]
    tel.phases = [names[k] for k in range(4) for _ in range(cuts[k + 1] - cuts[k])]
    gap = slice(n // 2, n // 2 + max(2, n // 40))  # the sampler missed a few reads
    for v in [*tel.cpu_cores.values(), *tel.memory.values()]:
        v[gap] = np.nan
    return tel


def trend_view() -> HistoryView:
    """Eight comparable runs of `train.bs16.*`: the step and two stages (seconds) and the
    samples/s (items/s), of kind throughput, a confirmed change point at run 5."""
    rng = np.random.default_rng(7)
    runs = [f"#{i}" for i in range(11, 19)]
    view = HistoryView("train.bs16.* over time (throughput)", "s", runs, store="mlb-results")

    def line(label: str, unit: str, level: list[float]) -> TrendLine:
        med = [v * (1 + 0.01 * rng.standard_normal()) for v in level]
        return TrendLine(label, list(range(8)), med, [v * 0.98 for v in med],
                         [v * 1.02 for v in med], unit=unit, kind="throughput")  # fmt: skip

    step = [0.020] * 5 + [0.024] * 3
    view.lines += [
        line("step", "s", step),
        line("data_wait", "s", [0.002] * 5 + [0.006] * 3),
        line("forward", "s", [0.006] * 8),
        line("samples_per_s", "items/s", [16 / s for s in step]),
    ]
    view.marks.append(Mark(5, "step +20.0%", kind="throughput"))
    return view


def draw_all(out: Path) -> list[Path]:
    """Every figure into `out` (created), replacing what is there."""
    from mlbaseline.report import figures as fig
    from mlbaseline.report.figures_history import trend_figure
    from mlbaseline.report.figures_memory import memory_figure_job
    from mlbaseline.report.render import forest_rows, render_report
    from mlbaseline.report.sections_memory import result_memory

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        found = collect([GOLDEN])
        demo = render_report(found.items, t / "demo", manifest=found.manifest)
        pairs = [(p, p.name) for p in demo.figures if p.stem != "telemetry"]  # phased below
        two = render_report(two_results(t), t / "two")
        pairs += [(p, f"two_results_{p.name}") for p in two.figures if p.stem != "telemetry"]
        pairs.append((fig.telemetry_figure(phased_telemetry(), t / "tel.png"), "telemetry.png"))
        rows, _ = forest_rows(compare_doc())
        pairs.append((fig.forest_figure(rows, t / "forest.png"), "compare_forest.png"))
        pairs.append((trend_figure(trend_view(), t / "trend.png"), "history_trend.png"))
        memory = memory_figure_job(result_memory(memory_throughput().result))
        if memory is not None:
            pairs.append((memory(t / "memory.png"), "memory.png"))
        written = []
        for src, name in pairs:
            shutil.copyfile(src, out / name)  # docs, not a report: plain copies
            written.append(out / name)
    return written


if __name__ == "__main__":
    for path in draw_all(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
