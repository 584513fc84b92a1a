"""Runner of `mlb history …` and of the recording step every result-writing command ends with.

Each function opens the store named by the config (env `MLB_HISTORY` > `history.store` >
`mlb-results/history.sqlite`), does one job, closes it, and returns plain data the CLI renders.
Read-only jobs never create a store; only recording, `add` and `rm` write.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbaseline.config import Config
from mlbaseline.errors import MlbError, NotComparableError, UsageError
from mlbaseline.history.gate import check_allow, gate_input, judge
from mlbaseline.history.record import GitInfo, Record, detect_git, record_file, record_of
from mlbaseline.history.series import Series, build_series, check_row, check_series, trend_rows
from mlbaseline.history.store import (
    Entry,
    Query,
    Store,
    StoreMissingError,
    glob_to_like,
    open_store,
    resolve_location,
)
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Result, parse_result, read_result_bytes

_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}(\.\d+)?)?)?)?Z?$")


def location(cfg: Config) -> str:
    return resolve_location(cfg.history.store or None)


@contextmanager
def opened(cfg: Config, create: bool = False) -> Iterator[Store]:
    store = open_store(location(cfg), create=create)
    try:
        yield store
    finally:
        store.close()


# ---------------------------------------------------------------- recording and import


@dataclass(frozen=True)
class Recorded:
    path: Path
    id: int
    new: bool  # False: that exact file was recorded before


def record(paths: Sequence[Path], cfg: Config, git: GitInfo | None = None) -> list[Recorded]:
    """Record result files (validated first, all of them, before the store is touched)."""
    git = git if git is not None else detect_git()
    records = [(Path(p), record_file(Path(p), git)) for p in paths]
    with opened(cfg, create=True) as store:
        return [Recorded(p, *store.add(rec)) for p, rec in records]


def remove(result_id: int, cfg: Config, force: bool) -> Entry:
    if not force:
        raise UsageError(f"mlb history rm {result_id}: deleting a record needs --force")
    with opened(cfg, create=False) as store:
        entry = store.get(result_id)
        if entry is None or not store.remove(result_id):
            raise UsageError(f"history has no record #{result_id}")
        return entry


# ---------------------------------------------------------------- reading


def query(
    *,
    kind: str | None = None,
    metric: str | None = None,
    branch: str | None = None,
    since: str | None = None,
    fingerprint: str | None = None,
    last: int | None = None,
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
    )


def entries(cfg: Config, q: Query) -> list[Entry]:
    """The matching records, oldest first; an absent store has none."""
    try:
        with opened(cfg) as store:
            return store.entries(q)
    except StoreMissingError:
        return []


def show(cfg: Config, result_id: int) -> tuple[Entry, dict[str, Any] | None]:
    """One record and its stored result document."""
    with opened(cfg) as store:
        entry = store.get(result_id)
        if entry is None:
            raise UsageError(f"history has no record #{result_id}")
        body = store.document(result_id)
    return entry, (json.loads(body) if body else None)


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


def series(cfg: Config, q: Query, metrics: Sequence[str] | None) -> list[Series]:
    return build_series(entries(cfg, q), metrics)


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
        if len(groups) > 1:
            label = f"{label} ({s.kind} {s.fingerprint[:6]})"
        view.lines.append(
            TrendLine(
                label,
                [where[p.entry.id] for p in s.points],
                [p.summary.median for p in s.points],
                [p.summary.ci_low for p in s.points],
                [p.summary.ci_high for p in s.points],
            )
        )
    for label, c in zip(labels, checks, strict=True):
        for cp in c["change_points"]:
            text = f"{label} {cp['rel_change']:+.1%}"
            suspected = cp["status"] != "confirmed"
            view.marks.append(Mark(where[cp["run"]["id"]], text, suspected))
            view.changes.append(cp | {"metric": c["metric"]})
    return view


def _title(found: Sequence[Series], groups: int) -> str:
    if not found:
        return "history"
    names = sorted({s.metric for s in found})
    head = names[0] if len(names) == 1 else f"{len(names)} metrics"
    return f"{head} over time ({found[0].kind}{'' if groups == 1 else ', several series'})"


def draw_trend(view: Any, path: Path) -> Path:
    from mlbaseline.report.sections_history import trend_figure

    return trend_figure(view, path)


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
    return trend_view(found, check(cfg, found), location(cfg))


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
    try:
        with opened(cfg) as store:
            branch = branch or _branch_of(store, rec)
            inputs = gate_input(store, rec, last or cfg.history.gate_last, branch, new, allow)
    except StoreMissingError as exc:
        raise NotComparableError(f"nothing comparable in history: {exc.message}") from None
    comparison = judge(new, inputs, cfg.compare, str(new_path), progress, allow)
    result = to_result(comparison, cfg.to_dict())
    result.data["history"] = {
        "baselines": [e.id for e in inputs.baselines],
        "branch": branch,
        "skipped": inputs.skipped,
    }
    return GateRun(result, inputs.baselines, inputs.skipped, branch)


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
    "trend",
]
