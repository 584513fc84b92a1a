"""Runner of `mlb history …` and of the recording step every result-writing command ends with.

Each function opens the store named by the config (env `MLB_HISTORY` > `history.store` >
`mlb-results/history.sqlite` in the project's root: history.store.project_root), does one job,
closes it, and returns plain data the CLI renders.
Read-only jobs never create a store; only recording, `add` and `rm` write. A read that leaves a
damaged record out says so through `warn` (one line per record), so the CLI can show it.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbaseline.config import Config
from mlbaseline.errors import MlbError, NotComparableError, UsageError
from mlbaseline.history.gate import check_allow, gate_input, judge
from mlbaseline.history.record import (
    GitInfo,
    Record,
    RecordError,
    detect_git,
    read_document,
    record_file,
    record_of,
)
from mlbaseline.history.series import Series, build_series, check_row, check_series, trend_rows
from mlbaseline.history.store import (
    Entry,
    Query,
    Store,
    StoreError,
    StoreMissingError,
    display,
    glob_to_like,
    open_store,
    resolve_location,
)
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Result, parse_result, read_result_bytes

_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?Z?$")


Warn = Callable[[str], None]


def location(cfg: Config) -> str:
    """The store's location, to open it; never shown (see shown_location)."""
    return resolve_location(cfg.history.store or None)


def shown_location(cfg: Config) -> str:
    """The store's location as messages, listings and reports show it: no password."""
    return display(location(cfg))


def _unreported(message: str) -> None:
    """For a caller with no one to tell (the report's History section): the damaged record
    is left out there, and `mlb history list` names it."""


@contextmanager
def opened(cfg: Config, create: bool = False, warn: Warn = _unreported) -> Iterator[Store]:
    store = open_store(location(cfg), create=create)
    try:
        yield store
    finally:
        store.close()
        for line in store.problems:
            warn(f"{line}; that record is left out")


# ---------------------------------------------------------------- recording and import


@dataclass(frozen=True)
class Recorded:
    path: Path
    id: int
    new: bool  # False: that exact file was recorded before


def record(paths: Sequence[Path], cfg: Config, git: GitInfo | None = None) -> list[Recorded]:
    """Record result files (validated first, all of them, before the store is touched). Each
    file is its own transaction: when one fails (a full disk, a lock), the error says which
    files are already in the store, so a rerun of `history add` knows what it repeats."""
    git = git if git is not None else detect_git()
    records = [(Path(p), record_file(Path(p), git)) for p in paths]
    done: list[Recorded] = []
    with opened(cfg, create=True) as store:
        for p, rec in records:
            try:
                done.append(Recorded(p, *store.add(rec)))
            except StoreError as exc:
                raise StoreError(exc.message + _kept(done, len(records))) from None
    return done


def _kept(done: Sequence[Recorded], total: int, named: int = 5) -> str:
    """' (2 of 160 files were recorded before this: a.json, b.json)' (the first `named`)."""
    if total < 2:
        return ""
    if not done:
        return f" (none of the {total} files was recorded)"
    names = ", ".join(str(d.path) for d in done[:named])
    more = f", and {len(done) - named} more" if len(done) > named else ""
    return f" ({len(done)} of {total} files were recorded before this: {names}{more})"


def remove(result_id: int, cfg: Config, force: bool) -> tuple[Entry | None, str | None]:
    """Delete one record: (its entry, None), or (None, the problem) for a damaged record,
    which `rm` deletes as well: it is how a store gets rid of one."""
    if not force:
        raise UsageError(f"mlb history rm {result_id}: deleting a record needs --force")
    with opened(cfg, create=False) as store:
        entry = store.get(result_id)
        problem = None if entry is not None else _problem_of(store, result_id)
        store.problems.clear()  # the damaged record is the one being deleted: no warning
        if not store.remove(result_id):
            raise UsageError(f"history has no record #{result_id}")
        return entry, problem


def _problem_of(store: Store, result_id: int) -> str | None:
    """What a read found wrong with record #result_id (it was left out), if anything."""
    return next((p for p in store.problems if p.startswith(f"history #{result_id}:")), None)


# ---------------------------------------------------------------- reading


def query(
    *,
    kind: str | None = None,
    metric: str | None = None,
    branch: str | None = None,
    since: str | None = None,
    fingerprint: str | None = None,
    last: int | None = None,
    name: str | None = None,
    tag: str | None = None,
) -> Query:
    """The filters of the CLI, checked: `since` an ISO date/time, `metric` a glob."""
    if since is not None and not _TIME.match(since):
        raise UsageError(
            f"--since: expected an ISO date or time (2026-01-31[T12:00]), got {since!r}"
        )
    if last is not None and last < 1:
        raise UsageError("--last: expected at least 1")
    return Query(
        kind=kind,
        branch=branch,
        since=since.replace(" ", "T") if since else None,
        fingerprint=fingerprint,
        metric=glob_to_like(metric) if metric else None,
        last=last,
        name=name,
        tag=tag,
    )


def entries(cfg: Config, q: Query, warn: Warn = _unreported) -> list[Entry]:
    """The matching records, oldest first; an absent store has none."""
    try:
        with opened(cfg, warn=warn) as store:
            return store.entries(q)
    except StoreMissingError:
        return []


@dataclass(frozen=True)
class Shown:
    entry: Entry
    document: dict[str, Any] | None  # None: missing, or damaged (then `problem` says how)
    problem: str | None = None


def show(cfg: Config, result_id: int) -> Shown:
    """One record and its stored result document. A damaged summary row is an error naming
    the field; a damaged document still shows the record, with the problem beside it."""
    with opened(cfg) as store:
        entry = store.get(result_id)
        if entry is None:
            problem = _problem_of(store, result_id)
            store.problems.clear()  # the error says it: no warning as well
            if problem:
                raise RecordError(f"{problem} (mlb history rm {result_id} --force deletes it)")
            raise UsageError(f"history has no record #{result_id}")
        try:
            body = store.document(result_id)
            doc = None if body is None else read_document(body, result_id)
        except RecordError as exc:
            store.problems.clear()  # told here, not as a warning as well
            return Shown(entry, None, exc.message)
    return Shown(entry, doc)


EXPORT_FIELDS = (
    "id",
    "kind",
    "status",
    "created_at",
    "git_commit",
    "git_branch",
    "git_dirty",
    "fingerprint",
    "config_hash",
    "subset_hash",
    "path",
    "sha256",
    "run_name",  # the run's --name and --tag (`name` is a metric's)
    "run_tags",
    "metric",
    "unit",
    "median",
    "ci_low",
    "ci_high",
    "n",
    "replicates",
    "mde",
)


def export_rows(found: Sequence[Entry]) -> list[dict[str, Any]]:
    """One row per (record, metric): the long format spreadsheets and pandas read."""
    rows = []
    for e in found:
        base = {
            "id": e.id,
            "kind": e.kind,
            "status": e.status,
            "created_at": e.created_at,
            "git_commit": e.git.commit,
            "git_branch": e.git.branch,
            "git_dirty": e.git.dirty,
            "fingerprint": e.fingerprint,
            "config_hash": e.config_hash,
            "subset_hash": e.subset_hash,
            "path": e.path,
            "sha256": e.sha256,
            "run_name": e.name,
            "run_tags": ",".join(e.tags),  # a tag has no comma (comparison.labels)
        }
        for name, m in e.metrics.items():
            summary = {k: v for k, v in m.to_dict().items() if k in EXPORT_FIELDS}
            rows.append({**base, "metric": name, **summary})
    return rows


def export_text(found: Sequence[Entry], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([e.to_dict() for e in found], indent=2) + "\n"
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=EXPORT_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(export_rows(found))
    return out.getvalue()


# ---------------------------------------------------------------- series


def series(
    cfg: Config, q: Query, metrics: Sequence[str] | None, warn: Warn = _unreported
) -> list[Series]:
    return build_series(entries(cfg, q, warn), metrics)


def check(cfg: Config, found: Sequence[Series], min_points: int = 4) -> list[dict[str, Any]]:
    """Change points per series (series shorter than `min_points` are listed as too short)."""
    out = []
    for s in found:
        if len(s.points) < min_points:
            out.append(check_row(s, None))
            continue
        out.append(
            check_series(
                s,
                alpha=cfg.compare.alpha,
                min_segment=cfg.history.min_segment,
                confidence=cfg.compare.confidence,
                memory_threshold=cfg.compare.memory_threshold,
            )
        )
    return out


def trend(found: Sequence[Series]) -> list[dict[str, Any]]:
    return [row for s in found for row in trend_rows(s)]


def _short(names: Sequence[str]) -> list[str]:
    """Labels without the prefix all names share ('train.bs64.forward' → 'forward')."""
    if len(names) < 2:
        return list(names)
    parts = [n.split(".") for n in names]
    k = 0
    while all(len(p) > k + 1 and p[k] == parts[0][k] for p in parts):
        k += 1
    return [".".join(p[k:]) for p in parts]


def trend_view(found: Sequence[Series], checks: Sequence[dict[str, Any]], store: str) -> Any:
    """The trend figure's data (report.sections_history.HistoryView): every run of the series
    on one axis, one line per series, change points where they start."""
    from mlbaseline.report.sections_history import HistoryView, Mark, TrendLine

    runs = sorted({(p.entry.created_at, p.entry.id) for s in found for p in s.points})
    where = {rid: i for i, (_, rid) in enumerate(runs)}
    labels = _short([s.metric for s in found])
    groups = {(s.kind, s.fingerprint) for s in found}
    view = HistoryView(
        title=_title(found, len(groups)),
        unit=found[0].unit if found else "",
        runs=[f"#{rid}" for _, rid in runs],
        store=store,
    )
    for label, s in zip(labels, found, strict=True):
        view.lines.append(
            TrendLine(
                label,
                [where[p.entry.id] for p in s.points],
                [p.summary.median for p in s.points],
                [p.summary.ci_low for p in s.points],
                [p.summary.ci_high for p in s.points],
                unit=s.unit,  # one axis per unit, one figure per kind (figures_history)
                kind=s.kind,
                series=s.fingerprint[:6] if sum(k == s.kind for k, _ in groups) > 1 else "",
            )
        )
    for label, c, s in zip(labels, checks, found, strict=True):
        for cp in c["change_points"]:
            text = f"{label} {cp['rel_change']:+.1%}"
            suspected = cp["status"] != "confirmed"
            view.marks.append(Mark(where[cp["run"]["id"]], text, suspected, kind=s.kind))
            view.changes.append(cp | {"metric": c["metric"]})
    return view


def _title(found: Sequence[Series], groups: int) -> str:
    if not found:
        return "history"
    names = sorted({s.metric for s in found})
    head = names[0] if len(names) == 1 else f"{len(names)} metrics"
    return f"{head} over time ({found[0].kind}{'' if groups == 1 else ', several series'})"


def draw_trend(view: Any, path: Path, force: bool = False) -> list[Path]:
    """The trend PNGs: `path` for the first result kind, `STEM-KIND.png` for each other one."""
    from mlbaseline.report.figures_history import trend_figures

    return trend_figures(view, path, force)


def report_view(results: Sequence[Result], cfg: Config) -> Any:
    """The report's History section: the training step per batch size (else every judged
    metric) of the series the reported results belong to, with change points; None when the
    store has no series of two runs or more for them."""
    from mlbaseline.history.record import fingerprint_hash

    order = ("run", "throughput", "latency", "dataloader")  # a run's record holds every phase
    chosen = sorted((r for r in results if r.kind in order), key=lambda r: order.index(r.kind))
    if not chosen:
        return None
    r = chosen[0]
    q = Query(kind=r.kind, fingerprint=fingerprint_hash(r))
    try:
        found = series(cfg, q, ["train.*.step"]) or series(cfg, q, ["*.total", "*.request"])
    except MlbError:
        return None  # a store that cannot be read is not the report's failure
    found = [s for s in found if len(s.points) >= 2]
    if not found:
        return None
    return trend_view(found, check(cfg, found), shown_location(cfg))


# ---------------------------------------------------------------- the gate


@dataclass(frozen=True)
class GateRun:
    result: Result  # kind "compare", ready to write
    baselines: list[Entry]
    skipped: list[str]
    branch: str | None


def gate(
    new_path: Path,
    cfg: Config,
    *,
    last: int | None = None,
    branch: str | None = None,
    progress: Progress | None = None,
    allow: Sequence[str] = (),
) -> GateRun:
    """NEW against the last K comparable baselines of its branch (see history.gate); with
    `allow` (--allow KEY), against the series that differs from NEW in those keys only."""
    from mlbaseline.comparison import COMPARABLE_KINDS, to_result

    progress = progress or NullProgress()
    body = read_result_bytes(new_path)  # read once: parsed here, hashed for the record
    new = parse_result(body, str(new_path), kinds=COMPARABLE_KINDS)
    rec = record_of(new, body, new_path, GitInfo())
    check_allow(new, allow)
    damaged: list[str] = []  # records a read left out: named with the skipped baselines
    try:
        with opened(cfg, warn=damaged.append) as store:
            branch = branch or _branch_of(store, rec)
            inputs = gate_input(store, rec, last or cfg.history.gate_last, branch, new, allow)
    except StoreMissingError as exc:
        raise NotComparableError(f"nothing comparable in history: {exc.message}") from None
    comparison = judge(new, inputs, cfg.compare, str(new_path), progress, allow)
    result = to_result(comparison, cfg.to_dict())
    skipped = [*damaged, *inputs.skipped]
    result.data["history"] = {
        "baselines": [e.id for e in inputs.baselines],
        "branch": branch,
        "skipped": skipped,
    }
    return GateRun(result, inputs.baselines, skipped, branch)


def _branch_of(store: Store, rec: Record) -> str | None:
    """The branch NEW was recorded on (when mlb wrote it here), else the checkout's now."""
    recorded = store.by_sha256(rec.sha256)
    if recorded is not None and recorded.git.branch:
        return recorded.git.branch
    return detect_git().branch


__all__ = [
    "EXPORT_FIELDS",
    "GateRun",
    "Recorded",
    "Shown",
    "Warn",
    "check",
    "entries",
    "export_rows",
    "export_text",
    "gate",
    "location",
    "opened",
    "query",
    "record",
    "remove",
    "series",
    "show",
    "shown_location",
    "trend",
]
