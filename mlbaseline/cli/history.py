"""`mlb history …`: the store of every result, its series, change points and the CI gate."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from mlbaseline.cli.app import app
from mlbaseline.cli.common import (
    CommandGroup,
    CommonOptions,
    OptInt,
    OptStr,
    Ui,
    command,
    compact_table,
    dump_json,
    execute,
    opt,
)
from mlbaseline.cli.compare import AllowOpt, FailOnOpt, ThresholdOpt
from mlbaseline.config import Config
from mlbaseline.formatting import interval_percent, p_value, signed_percent, value
from mlbaseline.results import Result
from mlbaseline.safewrite import check_target, write_text

history_app = typer.Typer(
    name="history",
    cls=CommandGroup,
    help=(
        "The baseline history: every result mlb writes is recorded in a store (SQLite file "
        "mlb-results/history.sqlite in the project's root, the nearest folder up with .git or "
        "pyproject.toml; or PostgreSQL through MLB_HISTORY=postgresql://…).\n\n"
        "Example: mlb history check   (change points per stage over the comparable runs)"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(history_app, name="history")

Since = Annotated[OptStr, opt("--since", "Only results created at or after this UTC time.")]
Kind = Annotated[OptStr, opt("--kind", "Only results of this kind (throughput, run, …).")]
Branch = Annotated[OptStr, opt("--branch", "Only results recorded on this git branch.")]
Fingerprint = Annotated[OptStr, opt("--fingerprint", "Only this comparability fingerprint.")]
Last = Annotated[OptInt, opt("--last", "Only the newest N results.", min=1)]


def _doc_out(doc: Any, common: CommonOptions) -> None:
    """--output FILE and/or --json: the command's JSON document."""
    if common.output is not None:
        write_text(common.output, dump_json(doc), force=common.force)
    if common.json_out:
        sys.stdout.write(dump_json(doc))


def _query(o: Any, with_metric: bool = False) -> Any:
    """The record filters every listing command shares (see Kind, Branch, Since, …)."""
    from mlbaseline.runners import history as hist

    names = ("kind", "branch", "since", "fingerprint", "last", "name", "tag")
    # --name / --tag: only `list` has them (None elsewhere)
    filters = {name: getattr(o, name, None) for name in names}
    return hist.query(**filters, metric=o.metric if with_metric else None)


def _warn(message: str) -> None:
    """A damaged record the read left out: one stderr line, also with --quiet or --json (it
    is data missing from what the command prints)."""
    typer.echo(f"warning: {message}", err=True)


def _commit(git: Any) -> str:
    if not git.commit:
        return "–"
    return git.commit[:8] + ("*" if git.dirty else "")


# ---------------------------------------------------------------- list / show


@dataclass(frozen=True)
class ListOptions:
    kind: Kind = None
    metric: Annotated[OptStr, opt("--metric", "Only results with a metric matching this glob.")] = (
        None
    )
    branch: Branch = None
    since: Since = None
    fingerprint: Fingerprint = None
    last: Last = None
    name: Annotated[OptStr, opt("--name", "Only the runs of this name (mlb … --name).")] = None
    tag: Annotated[OptStr, opt("--tag", "Only the runs with this tag (mlb … --tag).")] = None


def _label(e: Any) -> str:
    """'nightly [gpu, main]': the run's name and tags, '–' for none."""
    tags = f"[{', '.join(e.tags)}]" if e.tags else ""
    return escape(" ".join(t for t in (e.name or "", tags) if t) or "–")


@command("list", on=history_app, result=False)
def list_command(common: CommonOptions, o: ListOptions) -> None:
    """The recorded results, oldest first (* after a commit: the checkout was dirty), and
    where the store is (default: mlb-results/history.sqlite in the project's root, the
    nearest folder up with .git or pyproject.toml).

    Example: mlb history list --kind throughput --branch main --since 2026-01-01

    Example: mlb history list --tag nightly
    """
    from mlbaseline.runners import history as hist

    def measure(cfg: Config, ui: Ui) -> None:
        q = _query(o, with_metric=True)
        found = hist.entries(cfg, q, _warn)
        _doc_out([e.to_dict() for e in found], common)
        ui.print(f"store: {escape(hist.shown_location(cfg))}")
        table = compact_table(f"history: {len(found)} results")
        for col in ("id", "created (UTC)", "kind", "status", "branch", "commit", "fingerprint"):
            table.add_column(col, no_wrap=True, justify="right" if col == "id" else "left")
        table.add_column("metrics", justify="right")
        table.add_column("name", overflow="fold")  # a long name wraps, never cut
        for e in found:
            table.add_row(
                f"#{e.id}",
                e.created_at[:16].replace("T", " "),
                e.kind,
                e.status,
                escape(e.git.branch or "–"),
                _commit(e.git),
                e.fingerprint[:8],
                str(len(e.metrics)),
                _label(e),
            )
        ui.print(table)

    execute(common, measure, outputs=(common.output,))


@dataclass(frozen=True)
class ShowOptions:
    result_id: Annotated[int, typer.Argument(help="Record id (from mlb history list).")]


@command("show", on=history_app, result=False)
def show_command(common: CommonOptions, o: ShowOptions) -> None:
    """One record: where it came from and each metric's summary (--json: with the full
    result document as stored).

    Example: mlb history show 12
    """
    from mlbaseline.runners import history as hist

    def measure(cfg: Config, ui: Ui) -> None:
        shown = hist.show(cfg, o.result_id)
        entry, problem = shown.entry, shown.problem
        doc = {**entry.to_dict(), "document": shown.document}
        _doc_out(doc | ({"document_error": problem} if problem else {}), common)
        if problem:
            _warn(f"{problem}; the record's summary is shown without its document")
        ui.print(f"[bold]#{entry.id}[/bold] {entry.kind} ({entry.status}), {entry.created_at}")
        if entry.name or entry.tags:
            ui.print(f"run: {_label(entry)}")
        ui.print(f"git: {escape(entry.git.branch or '–')} {_commit(entry.git)}")
        ui.print(f"fingerprint {entry.fingerprint}; config {entry.config_hash[:12]}")
        ui.print(f"file: {escape(entry.path)} (sha256 {entry.sha256[:12]})")
        table = compact_table("metrics", caption="CI: 95%, order statistics of the median")
        table.add_column("metric", no_wrap=True)
        for col in ("median", "CI", "n", "repl.", "MDE"):
            table.add_column(col, justify="right", no_wrap=True)
        for name, m in entry.metrics.items():
            ci = escape(f"[{value(m.ci_low, m.unit)}, {value(m.ci_high, m.unit)}]")
            mde = signed_percent(m.mde) if m.mde is not None else "–"
            table.add_row(name, value(m.median, m.unit), ci, str(m.n), str(m.replicates), mde)
        ui.print(table)

    execute(common, measure, outputs=(common.output,))


# ---------------------------------------------------------------- trend / check


@dataclass(frozen=True)
class TrendOptions:
    metric: Annotated[
        str,
        typer.Argument(
            help="Metric name or glob: 'train.bs64.*' (a line per stage), 'train.*.step' (a "
            "line per batch size)."
        ),
    ]
    kind: Kind = None
    branch: Branch = None
    since: Since = None
    fingerprint: Fingerprint = None
    last: Last = None


TrendOutput = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="The trend PNG (default: mlb-results/trend.png).", show_default=False
    ),
]


@command("trend", on=history_app, output=TrendOutput, result=False)
def trend_command(common: CommonOptions, o: TrendOptions) -> None:
    """Median and CI of a metric over the comparable runs: a table and a PNG (one line per
    stage or batch size, change points marked).

    Example: mlb history trend 'train.bs64.*' -o trend.png
    """
    from mlbaseline.runners import history as hist

    png = common.output or Path("mlb-results") / "trend.png"

    def measure(cfg: Config, ui: Ui) -> None:
        q = _query(o)
        found = hist.series(cfg, q, [o.metric], _warn)
        if not found:
            from mlbaseline.errors import UsageError

            raise UsageError(f"history has no series of {o.metric!r} (see mlb history list)")
        checks = hist.check(cfg, found)
        rows = hist.trend(found)
        if common.json_out:
            sys.stdout.write(dump_json({"points": rows, "checks": checks}))
        view = hist.trend_view(found, checks, hist.shown_location(cfg))
        check_target(png, common.force)  # before drawing: a link, device or FIFO is refused
        written = hist.draw_trend(view, png, force=common.force)
        table = compact_table(f"{o.metric}: {len(found)} series")
        for col in ("metric", "run", "created (UTC)", "commit", "median", "95% CI", "n"):
            table.add_column(col, no_wrap=True)
        for r in rows:
            ci = escape(f"[{value(r['ci_low'], r['unit'])}, {value(r['ci_high'], r['unit'])}]")
            table.add_row(
                r["metric"],
                f"#{r['id']}",
                r["created_at"][:16].replace("T", " "),
                (r["commit"] or "–")[:8],
                value(r["median"], r["unit"]),
                ci,
                str(r["n"]),
            )
        ui.print(table)
        ui.print(f"[dim]figure written to {', '.join(str(p) for p in written)}[/dim]")

    execute(common, measure, outputs=())


@dataclass(frozen=True)
class CheckOptions:
    metric: Annotated[
        list[str] | None,
        opt(
            "--metric", "Only metrics matching this glob (repeatable; default: all but residuals)."
        ),
    ] = None
    kind: Kind = None
    branch: Branch = None
    since: Since = None
    fingerprint: Fingerprint = None
    last: Last = None


def _split(metric: str) -> tuple[str, str]:
    """('train.bs64', '.backward'): the group row and the stage row of an 80-column table."""
    group, _, leaf = metric.rpartition(".")
    return (group, f"  .{leaf}") if group else ("", metric)


def _show_checks(checks: list[dict[str, Any]], ui: Ui) -> None:
    found = [c for c in checks if c["change_points"]]
    table = compact_table(
        f"change points: {sum(len(c['change_points']) for c in found)} in {len(checks)} series",
        caption="step: median after / before − 1, 95% bootstrap CI; p: Mann-Whitney U (BH); "
        "suspected*: needs more runs after it to be confirmed",
    )
    for col in ("metric", "run", "commits", "step", "CI", "p", "status"):
        table.add_column(col, no_wrap=True)
    group = None
    for c in found:
        prefix, leaf = _split(c["metric"])
        if prefix != group:
            group = prefix
            table.add_row(f"[bold]{prefix}[/bold]")
        for cp in c["change_points"]:
            commits = [(x or "?")[:7] for x in cp["commit_range"]]
            commits_text = commits[1] if commits[0] == commits[1] else "..".join(commits)
            table.add_row(
                leaf,
                f"#{cp['run']['id']}",
                commits_text,
                signed_percent(cp["rel_change"]),
                escape(interval_percent([cp["ci_low"], cp["ci_high"]])),
                p_value(cp["p_value"]),
                "confirmed" if cp["status"] == "confirmed" else "suspected*",
            )
    ui.print(table)
    _name_runs(checks, ui)


def _name_runs(checks: list[dict[str, Any]], ui: Ui) -> None:
    """One line per run where a level starts: which stages moved there, and how far."""
    runs: dict[int, tuple[dict[str, Any], list[str]]] = {}
    for c in checks:
        for cp in c["change_points"]:
            moved = f"{c['metric']} {signed_percent(cp['rel_change'])} ({cp['direction']})"
            runs.setdefault(cp["run"]["id"], (cp["run"], []))[1].append(moved)
    for run, moved in runs.values():
        when = run["created_at"][:19].replace("T", " ")
        ui.print(f"[bold]run #{run['id']}[/bold] ({when}, {escape(run['path'])}):")
        for line in moved:
            ui.print(f"  {escape(line)}")
    for c in checks:
        for out in c["outliers"]:
            ui.print(
                f"[dim]outlier (one run, not a change): {c['metric']} run #{out['run']['id']} "
                f"(score {out['score']:.1f})[/dim]"
            )
    short = [c for c in checks if c.get("too_short")]
    if short:
        ui.print(f"[dim]{len(short)} series have fewer than 4 runs: not checked[/dim]")


@command("check", on=history_app, result=False)
def check_command(common: CommonOptions, o: CheckOptions) -> None:
    """Change points per stage over the series of comparable results (same kind and
    fingerprint): each with the first run of the new level, the commit range, the step and its
    CI. One-run spikes are outliers; a step in the last runs is "suspected: needs more runs".

    Example: mlb history check --kind run --metric 'train.*'
    """
    from mlbaseline.runners import history as hist

    def measure(cfg: Config, ui: Ui) -> None:
        q = _query(o)
        found = hist.series(cfg, q, o.metric, _warn)
        checks = hist.check(cfg, found)
        _doc_out({"store": hist.shown_location(cfg), "series": checks}, common)
        _show_checks(checks, ui)

    execute(common, measure, outputs=(common.output,))


# ---------------------------------------------------------------- export / add / rm


class Format(StrEnum):
    csv = "csv"
    json = "json"


@dataclass(frozen=True)
class ExportOptions:
    csv: Annotated[bool, typer.Option("--csv", help="CSV, one row per result and metric.")] = False
    as_json: Annotated[
        bool, typer.Option("--as-json", help="JSON, one object per result (also --json).")
    ] = False
    kind: Kind = None
    metric: Annotated[OptStr, opt("--metric", "Only metrics matching this glob.")] = None
    branch: Branch = None
    since: Since = None
    fingerprint: Fingerprint = None
    last: Last = None


@command("export", on=history_app, result=False)
def export_command(common: CommonOptions, o: ExportOptions) -> None:
    """The records as CSV (one row per result and metric) or JSON, to --output or stdout.

    Example: mlb history export --csv -o history.csv
    """
    from mlbaseline.errors import UsageError
    from mlbaseline.runners import history as hist

    def measure(cfg: Config, ui: Ui) -> None:
        if o.csv and (o.as_json or common.json_out):
            raise UsageError("export: choose one of --csv and --json")
        fmt = "json" if (o.as_json or common.json_out) else "csv"
        q = _query(o, with_metric=True)
        text = hist.export_text(hist.entries(cfg, q, _warn), fmt)
        if common.output is not None:
            write_text(common.output, text, force=common.force)
            ui.print(f"[dim]{fmt} written to {common.output}[/dim]")
        else:
            sys.stdout.write(text)

    execute(common, measure)


@dataclass(frozen=True)
class AddOptions:
    files: Annotated[list[Path], typer.Argument(help="Result JSON files to import.")]


@command("add", on=history_app, result=False)
def add_command(common: CommonOptions, o: AddOptions) -> None:
    """Import existing result files (a file already recorded keeps its id).

    Example: mlb history add mlb-results/*/baseline.json
    """
    from mlbaseline.runners import history as hist

    def measure(cfg: Config, ui: Ui) -> None:
        done = hist.record(o.files, cfg)
        _doc_out([{"path": str(d.path), "id": d.id, "new": d.new} for d in done], common)
        for d in done:
            what = "recorded" if d.new else "already recorded"
            ui.print(f"{escape(str(d.path))}: {what} as #{d.id}")

    execute(common, measure, outputs=(common.output,))


@dataclass(frozen=True)
class RmOptions:
    result_id: Annotated[int, typer.Argument(help="Record id to delete.")]


# --force here confirms the deletion; it never lets --output overwrite
RmForce = Annotated[bool, typer.Option("--force", help="Delete: the confirmation rm needs.")]


@command("rm", on=history_app, result=False, shared={"force": RmForce})
def rm_command(common: CommonOptions, o: RmOptions) -> None:
    """Delete one record (needs --force; the result file itself is left alone). The only way
    mlb ever deletes a record.

    Example: mlb history rm 12 --force
    """
    from mlbaseline.runners import history as hist

    def measure(cfg: Config, ui: Ui) -> None:
        entry, problem = hist.remove(o.result_id, cfg, common.force)
        if entry is None:  # a damaged record: deleted on the id alone
            _doc_out({"id": o.result_id, "damaged": problem}, common)
            ui.print(f"deleted #{o.result_id} (damaged: {escape(str(problem))})")
            return
        _doc_out(entry.to_dict(), common)
        ui.print(f"deleted #{entry.id} ({entry.kind}, {entry.created_at}); {entry.path} is kept")

    # --force here confirms the deletion; it never lets --output overwrite
    execute(common, measure, outputs=(common.output,))


# ---------------------------------------------------------------- gate


@dataclass(frozen=True)
class GateOptions:
    new: Annotated[Path, typer.Argument(help="The new result JSON.", show_default=False)]
    last: Annotated[
        OptInt,
        opt("--last", "Compare against the last K baselines (default history.gate_last).", min=1),
    ] = None
    branch: Annotated[
        OptStr, opt("--branch", "Baselines of this branch (default: NEW's, else the checkout's).")
    ] = None
    threshold: ThresholdOpt = None
    fail_on: FailOnOpt = None  # spelled and checked as in mlb compare
    allow: AllowOpt = None


@command("gate", on=history_app)
def gate_command(common: CommonOptions, o: GateOptions) -> None:
    """Judge NEW against the last K comparable baselines of its branch (pooled, the spread
    between them measured as noise) with mlb compare's judge.

    The baselines are always one workload (the fingerprint holds the workload identity); with
    --allow KEY, the newest series that differs from NEW in the allowed keys only.

    Exit codes as mlb compare: 0 passed, 1 regression, 2 bad input, 3 not comparable or nothing
    comparable in history.

    Example: mlb history gate mlb-results/new/baseline.json --last 5 -o gate.json
    """
    from mlbaseline.cli.compare import _show
    from mlbaseline.runners import history as hist

    fail_on = o.fail_on.value if o.fail_on else None
    overrides = {"compare.threshold": o.threshold, "compare.fail_on": fail_on}

    def measure(cfg: Config, ui: Ui) -> Result:
        run = hist.gate(
            o.new, cfg, last=o.last, branch=o.branch, progress=ui.progress, allow=o.allow or ()
        )
        ids = ", ".join(f"#{e.id}" for e in run.baselines)
        ui.print(f"[dim]baselines ({escape(run.branch or 'any branch')}): {ids}[/dim]")
        for why in run.skipped:
            ui.print(f"[yellow]left out:[/yellow] {escape(why)}")
        return run.result

    def render(result: Result, ui: Ui) -> None:
        _show(result.data, ui)

    execute(common, measure, overrides, render=render)
