"""`render_report`: results in, `baseline_report.md` and PNG figures out (and, with `html`,
`baseline_report.html`: the same Markdown converted, figures inline). Never measures.

Writing is atomic per file: everything is rendered into a hidden temporary folder inside the
output folder, then each figure and finally the Markdown are moved into place by the one safe
writer (`safewrite.move_into_place`: a rename that never writes through a link and refuses a
device or FIFO at the name), so a reader never sees a half-written file and a failure leaves
the previous report (if any) as it was. Existing report files are only replaced with `force`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline.errors import OutputError, ResultFileError
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.report import figures as fig
from mlbaseline.report import payloads
from mlbaseline.report.data import Telemetry, read_telemetry, telemetry_path
from mlbaseline.report.figures_memory import memory_figure_job
from mlbaseline.report.headline import fired_groups, measured_lines
from mlbaseline.report.inputs import ReportInput
from mlbaseline.report.markdown import ReportContext, render_markdown
from mlbaseline.report.sections_memory import memory_groups
from mlbaseline.report.signals import (
    Prediction,
    Signal,
    amdahl_predictions,
    compute_signals,
    worker_predictions,
)
from mlbaseline.results import Result
from mlbaseline.safewrite import check_target, move_into_place, write_text

REPORT_NAME = "baseline_report.md"
COMPARE_NAME = "compare_report.md"
HTML_SUFFIX = ".html"  # the HTML report sits beside the Markdown, named after it
FIGURES_DIR = "figures"
FIGURE_NAMES = ("throughput", "stages", "latency", "dataloader", "telemetry", "subset")


@dataclass(frozen=True)
class ReportOutput:
    """What a report wrote, and what it found."""

    markdown_path: Path
    figures: list[Path]
    signals: list[Signal] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    html_path: Path | None = None  # written only when asked (`--html`)
    # the headline's "what was measured" lines, markdown stripped (the terminal's first lines)
    measured: list[str] = field(default_factory=list)

    @property
    def fired(self) -> list[Signal]:
        return [s for s in self.signals if s.fired]

    @property
    def danger_lines(self) -> list[str]:
        """The headline's fired signals as plain lines, one per kind (the terminal's): the
        details of each (its figures, its threshold) are in the report's signal table."""
        return [
            f"{title} ({where}): {action}." for title, where, action in fired_groups(self.signals)
        ]


def _normalise(
    results: Sequence[Result | ReportInput], result_dir: Path | None
) -> tuple[list[Result], list[Path | None]]:
    out, sources = [], []
    for item in results:
        if isinstance(item, ReportInput):
            out.append(item.result)
            sources.append(item.path)
        else:
            out.append(item)
            # a plain Result resolves its artifacts against result_dir (as if its JSON were there)
            sources.append(result_dir / f"{item.kind}.json" if result_dir is not None else None)
    return out, sources


def load_telemetry(
    results: Sequence[Result], sources: Sequence[Path | None], explicit: Path | None
) -> tuple[Telemetry | None, str]:
    """The telemetry timeline to show: `explicit`, else the CSV a throughput result references
    (else any result's). Returns (telemetry or None, a note saying where it came from or why
    it is missing)."""
    candidates: list[tuple[Path, str]] = []
    if explicit is not None:
        candidates.append((Path(explicit), "given"))
    order = {"throughput": 0, "run": 1}
    ranked = sorted(zip(results, sources, strict=True), key=lambda rs: order.get(rs[0].kind, 2))
    for r, src in ranked:
        p = telemetry_path(r, src)
        if p is not None:
            candidates.append((p, f"referenced by the {r.kind} result"))
    if not candidates:
        return None, "no telemetry CSV referenced by the results (telemetry off, or not run)"
    path, why = candidates[0]
    try:
        return read_telemetry(path), f"telemetry from {path.name} ({why})"
    except FileNotFoundError:
        return None, f"telemetry CSV {path} ({why}) does not exist"
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return None, f"telemetry CSV {path} ({why}) is unreadable: {exc}"


def _figure_jobs(ctx: ReportContext) -> dict[str, Callable[[Path], Path]]:
    """The figures this data supports, name -> function drawing it into a path."""
    r = ctx.results
    jobs: dict[str, Callable[[Path], Path]] = {}
    # one series per result file, labelled by run name or path (figures.result_series)
    tput = [(x, s) for x, s in zip(r, ctx.sources, strict=True) if x.kind == "throughput"]
    train = fig.result_series([x for x, _ in tput], [s for _, s in tput], "train")
    infer = fig.result_series([x for x, _ in tput], [s for _, s in tput], "infer")
    if any(g.rate for s in train + infer for g in s.groups):
        jobs["throughput"] = lambda p: fig.throughput_figure(train, infer, p, [x for x, _ in tput])
    staged = [fig.Series(s.name, [g for g in s.groups if g.stages and g.total]) for s in train]
    if any(s.groups for s in staged):
        jobs["stages"] = lambda p: fig.stages_figure(
            staged, p, "Training step: stage breakdown", "batch size"
        )
    lats = [(x, s) for x, s in zip(r, ctx.sources, strict=True) if x.kind == "latency"]
    lat = fig.result_series([x for x, _ in lats], [s for _, s in lats], "latency")
    if any(g.total for s in lat for g in s.groups):
        sla = payloads.sla_p99([x for x, _ in lats])
        jobs["latency"] = lambda p: fig.latency_figure(lat, sla, p)
    loader_results = [x for x in r if x.kind == "dataloader"]
    points = payloads.loader_sweep(loader_results)
    if points:
        knee = payloads.loader_knee(loader_results, points)
        loader_sources = [s for x, s in zip(r, ctx.sources, strict=True) if x.kind == "dataloader"]
        sweep = fig.sweep_points(loader_results, loader_sources)  # one series per file
        jobs["dataloader"] = lambda p: fig.dataloader_figure(sweep, knee, p)
    if ctx.telemetry is not None and ctx.telemetry.n:
        tel = ctx.telemetry
        jobs["telemetry"] = lambda p: fig.telemetry_figure(tel, p)
    memory = memory_figure_job(memory_groups(ctx))
    if memory is not None:
        jobs["memory"] = memory
    facts = ctx.subset
    if facts is not None and facts.class_counts:
        jobs["subset"] = lambda p: fig.subset_figure(facts.class_counts, facts.full_counts, p)
    view = ctx.history
    if view is not None and view.lines:
        from mlbaseline.report.sections_history import trend_figure

        jobs["history"] = lambda p: trend_figure(view, p)
    return jobs


def _check_free(targets: Sequence[Path], force: bool) -> None:
    """Before drawing anything: every name free, or (with force) a file or link to replace."""
    for t in targets:
        check_target(t, force)


def _publish(tmp: Path, out_dir: Path, files: Sequence[str], force: bool) -> list[Path]:
    """Move rendered files from tmp into out_dir, one rename each (atomic per file)."""
    placed = []
    for rel in files:
        dst = out_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        placed.append(move_into_place(tmp / rel, dst, force))
    return placed


def _make_tmp(out_dir: Path) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".mlb-report-", dir=out_dir))
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot write ({exc.strerror or exc})") from None


@dataclass(frozen=True)
class HtmlPage:
    """Asks `_write` for the HTML report too; `after(fig_rel)`: raw HTML to place after a
    figure, by its relative path (the interactive history trend)."""

    after: Callable[[dict[str, str]], dict[str, str]] = lambda fig_rel: {}


def _write(
    out_dir: Path,
    name: str,
    jobs: Mapping[str, Callable[[Path], Path]],
    markdown: Callable[[dict[str, str]], str],
    force: bool,
    progress: Progress,
    page: HtmlPage | None = None,
) -> tuple[Path, list[Path], Path | None]:
    """Draw the figures and the Markdown (and the HTML page, from that Markdown and the drawn
    figures) into a temp folder, then publish them."""
    md_path = out_dir / name
    html_name = Path(name).with_suffix(HTML_SUFFIX).name if page is not None else None
    fig_rel = {k: f"{FIGURES_DIR}/{k}.png" for k in jobs}
    pages = [name] if html_name is None else [html_name, name]
    _check_free([*(out_dir / p for p in pages), *(out_dir / v for v in fig_rel.values())], force)
    tmp = _make_tmp(out_dir)
    try:
        with progress.task("drawing figures", total=len(jobs) + 1) as task:
            for key, job in jobs.items():
                job(tmp / fig_rel[key])
                task.advance()
            text = markdown(fig_rel)
            write_text(tmp / name, text)
            if page is not None and html_name is not None:
                from mlbaseline.report.html import markdown_to_html

                write_text(tmp / html_name, markdown_to_html(text, tmp, page.after(fig_rel)))
            task.advance()
        figs = _publish(tmp, out_dir, list(fig_rel.values()), force)
        # the Markdown last: it is complete only with its figures (the HTML needs none)
        _publish(tmp, out_dir, pages, force)
    except OSError as exc:
        raise OutputError(f"{out_dir}: cannot write the report ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return md_path, figs, None if html_name is None else out_dir / html_name


def _manifest(
    manifest: Path | Mapping[str, Any] | None,
) -> tuple[Mapping[str, Any] | None, Path | None]:
    """(manifest document, the subset folder it sits in) from a path or a loaded document."""
    if manifest is None or isinstance(manifest, Mapping):
        return manifest, None
    path = Path(manifest)
    from mlbaseline.subset.manifest import load_manifest

    load_manifest(path)  # refuses '..' and absolute entries before any of them is opened
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise ResultFileError(f"{path}: not a readable subset manifest") from None
    if not isinstance(doc, Mapping):
        raise ResultFileError(f"{path}: not a subset manifest")
    return doc, path.parent


def _referenced_manifest(items: Sequence[tuple[Result, Path | None]]) -> Path | None:
    """The manifest a subset result references (`artifacts["manifest"]`), if it exists."""
    for r, src in items:
        rel = r.artifacts.get("manifest") if r.kind == "subset" else None
        if rel and src is not None:
            path = Path(rel) if Path(rel).is_absolute() else src.parent / rel
            if path.is_file():
                return path
    return None


def build_context(
    results: Sequence[Result | ReportInput],
    *,
    telemetry_csv: Path | None = None,
    result_dir: Path | None = None,
    manifest: Path | Mapping[str, Any] | None = None,
) -> ReportContext:
    """Everything the report shows, computed (signals, predictions) but not yet drawn."""
    every, every_src = _normalise(results, result_dir)
    # a run result only groups its phases; its telemetry artifact still counts
    telemetry, note = load_telemetry(every, every_src, telemetry_csv)
    keep = [
        (r, s) for r, s in zip(every, every_src, strict=True) if r.kind not in ("run", "compare")
    ]
    res = [r for r, _ in keep]
    sources = [s for _, s in keep]
    if manifest is None:
        manifest = _referenced_manifest(keep)
    ctx = ReportContext(
        results=res,
        sources=sources,
        telemetry=telemetry,
        telemetry_note=note,
    )
    ctx.runs = [r for r in every if r.kind == "run"]
    ctx.subset = payloads.subset_facts([r for r in res if r.kind == "subset"], *_manifest(manifest))
    ctx.signals = compute_signals(res, telemetry)
    points = payloads.loader_sweep([r for r in res if r.kind == "dataloader"])
    cpu = {p.workers: p.cpu_pct for p in points if not p.variant and p.cpu_pct is not None}
    ctx.predictions = amdahl_predictions(res) + worker_predictions(res, cpu)
    return ctx


def render_report(
    results: Sequence[Result | ReportInput],
    out_dir: Path,
    *,
    telemetry_csv: Path | None = None,
    result_dir: Path | None = None,
    manifest: Path | Mapping[str, Any] | None = None,
    force: bool = False,
    progress: Progress | None = None,
    history: Any = None,
    html: bool = False,
) -> ReportOutput:
    """Write `out_dir/baseline_report.md` and `out_dir/figures/*.png` for these results.

    `results`: loaded results, or `ReportInput`s that carry the JSON path their artifacts are
    relative to. Plain results resolve `artifacts["telemetry"]` against `result_dir`;
    `telemetry_csv` overrides both. `run` results only group phases and are not rendered
    themselves. `history`: the series they belong to (report.sections_history.HistoryView,
    from the history store; the report never reads the store itself). `html`: also write
    `baseline_report.html` (self-contained, figures inline). Raises OutputExistsError when a
    report file exists and not `force`.
    """
    progress = progress or NullProgress()
    ctx = build_context(
        results, telemetry_csv=telemetry_csv, result_dir=result_dir, manifest=manifest
    )
    ctx.history = history
    jobs = _figure_jobs(ctx)

    def markdown(fig_rel: dict[str, str]) -> str:
        ctx.figures = fig_rel
        return render_markdown(ctx)

    def after(fig_rel: dict[str, str]) -> dict[str, str]:
        if "history" not in fig_rel:
            return {}
        from mlbaseline.report.html import trend_svg

        return {fig_rel["history"]: trend_svg(history)}

    page = HtmlPage(after) if html else None
    md, figs, page_path = _write(Path(out_dir), REPORT_NAME, jobs, markdown, force, progress, page)
    plain = [ln.lstrip("- ").replace("**", "").replace("`", "") for ln in measured_lines(ctx)]
    measured = [line for line in plain if line]
    return ReportOutput(md, figs, ctx.signals, ctx.predictions, page_path, measured)


# ---------------------------------------------------------------- compare


FOREST_MAX_ROWS = 40


def forest_rows(doc: Mapping[str, Any]) -> tuple[list[fig.ForestRow], int]:
    """Forest-plot rows from a comparison document (compare's `Comparison.to_dict()`), and how
    many judged metrics were left out: beyond FOREST_MAX_ROWS only totals, rates and metrics
    that regressed or improved are drawn (the table in the report keeps every metric)."""
    metrics = [m for m in doc.get("metrics") or [] if isinstance(m, Mapping)]
    if len(metrics) > FOREST_MAX_ROWS:
        metrics = [
            m
            for m in metrics
            if m.get("role") in ("total", "rate") or m.get("verdict") in ("regressed", "improved")
        ]
    rows = []
    for m in metrics:
        try:
            rows.append(
                fig.ForestRow(
                    metric=str(m["metric"]),
                    ratio=float(m["ratio"]),
                    low=float(m["ci_low"]),
                    high=float(m["ci_high"]),
                    verdict=str(m["verdict"]),
                    threshold=float(m.get("threshold", 0.03)),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return rows, len(doc.get("metrics") or []) - len(rows)


def render_compare_report(
    doc: Mapping[str, Any],
    out_dir: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    html: bool = False,
) -> ReportOutput:
    """Write `out_dir/compare_report.md` (compare's verdict table and attribution, via
    `mlbaseline.report.comparison.render_markdown`) and a forest plot of every judged metric
    (with `html`, `compare_report.html` too)."""
    from mlbaseline.report.comparison import render_markdown as compare_markdown

    progress = progress or NullProgress()
    rows, left_out = forest_rows(doc)
    jobs: dict[str, Callable[[Path], Path]] = {}
    if rows:
        jobs["compare_forest"] = lambda p: fig.forest_figure(rows, p)

    def markdown(fig_rel: dict[str, str]) -> str:
        lines = ["# mlb comparison report", "", compare_markdown(doc).rstrip(), ""]
        lines += ["## Ratio of medians per metric", ""]
        if "compare_forest" in fig_rel:
            lines += [f"![ratio of medians new/old with 95% CI]({fig_rel['compare_forest']})", ""]
            if left_out:
                lines += [
                    f"_{left_out} stage and other metrics are left out of the chart (totals, "
                    "rates and every regressed or improved metric are drawn); the table above "
                    "has them all._",
                    "",
                ]
        else:
            lines += ["_Not measured: no metric was judged._", ""]
        return "\n".join(lines)

    page = HtmlPage() if html else None
    md, figs, page_path = _write(Path(out_dir), COMPARE_NAME, jobs, markdown, force, progress, page)
    return ReportOutput(md, figs, html_path=page_path)
