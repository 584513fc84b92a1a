"""The CI gate against history: a new result against the last K comparable baselines.

The K baselines (same kind, same comparability fingerprint, same branch, recorded before the
new result and not the new file itself) are pooled into one baseline whose replicate ids are
the sittings, then judged by :func:`mlbaseline.comparison.compare_results` — the judge of `mlb
compare`, not a second one. Pooled that way, the spread *between* the K sittings is the
measured between-process noise the comparison's threshold and its in-process rule use (see
:mod:`mlbaseline.comparison.noise`), so a change has to stand out of the history's own noise.
Memory metrics are gated by the same judge's memory rule (:mod:`mlbaseline.comparison.memory`):
the spread of the K sittings' medians widens its CI, and a regression fails the gate like a
time's, with the stage whose held memory moved named.

The fingerprint holds the workload identity, so the K baselines are always one workload. With
`--allow KEY` the series is that of the newest earlier record equal to NEW on every blocking key
but the allowed ones (NEW's own series when it has one): still one workload, never two pooled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlbaseline.comparison import Comparison, compare_results
from mlbaseline.comparison.matching import (
    comparable_blocking,
    environment_differences,
    split_allowed,
)
from mlbaseline.config import CompareConfig
from mlbaseline.errors import NotComparableError
from mlbaseline.history.record import Record, RecordError, read_result
from mlbaseline.history.store import Entry, Query, Store
from mlbaseline.progress import Progress
from mlbaseline.results import Metric, Result


@dataclass(frozen=True)
class GateInput:
    baselines: list[Entry]
    pooled: Result
    skipped: list[str]  # baselines left out, and why


def _pool(results: list[Result]) -> Result:
    """One result holding every baseline's samples, the sitting index as replicate id; meta,
    environment and config from the newest (the fingerprint makes the blocking keys equal)."""
    newest = results[-1]
    pooled = Result(
        kind=newest.kind,
        config=newest.config,
        environment=newest.environment,
        created_at=newest.created_at,
    )
    for sitting, r in enumerate(results):
        for name, m in r.measurements.items():
            into = pooled.measurements.get(name)
            if into is None:
                into = pooled.add_metric(Metric(name, m.unit, m.higher_is_better, [], [], []))
            if into.unit != m.unit or into.higher_is_better != m.higher_is_better:
                continue  # a metric that changed its meaning is not pooled across the change
            into.values.extend(m.values)
            assert into.replicate is not None
            into.replicate.extend([sitting] * len(m.values))
            into.meta = dict(m.meta or {})
    return pooled


def earlier_complete(
    store: Store, q: Query, created_at: str, keep: Callable[[Entry], bool] = lambda e: True
) -> list[Entry]:
    """Complete records matching `q`, created before `created_at` and kept by `keep`, oldest
    first: the candidates of the gate and of the noise between sittings (history.sittings)."""
    return [
        e
        for e in store.entries(q, with_metrics=False)
        if e.status == "complete" and e.created_at < created_at and keep(e)
    ]


def load_documents(
    store: Store, entries: list[Entry]
) -> tuple[list[tuple[Entry, Result]], list[str]]:
    """The stored result of each entry, and why any was left out (its document missing, or
    damaged: one bad record costs that baseline only)."""
    loaded, skipped = [], []
    for e in entries:
        try:
            body = store.document(e.id)
            if body is None:
                skipped.append(f"#{e.id}: its document is missing from the store")
                continue
            loaded.append((e, read_result(body, e.id)))
        except RecordError as exc:
            skipped.append(f"#{e.id}: {exc.message.removeprefix(f'history #{e.id}: ')}")
    return loaded, skipped


def check_allow(new: Result, allow: Sequence[str]) -> None:
    """--allow KEY names a blocking key (known, or one of NEW's own), else ConfigError (exit 2)
    before the history is searched: a typo is bad input, not 'nothing comparable'."""
    own = comparable_blocking(new.environment, new.config)
    split_allowed([{"key": k, "old": None, "new": v} for k, v in own.items()], allow)


def allowed_series(
    store: Store, new: Record, result: Result, branch: str | None, allow: Sequence[str]
) -> str:
    """The fingerprint of the series NEW is gated against: its own, or with --allow KEY that of
    the newest earlier record whose blocking keys differ from NEW's in allowed keys only, or
    not at all (NEW's own series). One document is read per fingerprint, newest first."""
    if not allow:
        return new.fingerprint
    q = Query(kind=new.kind, branch=branch)
    seen: set[str] = set()
    for e in reversed(earlier_complete(store, q, new.created_at, lambda e: e.sha256 != new.sha256)):
        if e.fingerprint == new.fingerprint:
            return e.fingerprint
        if e.fingerprint in seen:
            continue
        seen.add(e.fingerprint)
        loaded, _ = load_documents(store, [e])
        if loaded and not split_allowed(environment_differences(loaded[0][1], result)[0], allow)[0]:
            return e.fingerprint
    return new.fingerprint


def baselines_for(
    store: Store, new: Record, last: int, branch: str | None, fingerprint: str | None = None
) -> tuple[list[Entry], str]:
    """The last `last` comparable records before `new` (on `branch` when given; of the series
    `fingerprint`, default NEW's own), oldest first, and the words that describe what was
    looked for."""
    fingerprint = fingerprint or new.fingerprint
    q = Query(kind=new.kind, fingerprint=fingerprint, branch=branch)
    found = earlier_complete(store, q, new.created_at, lambda e: e.sha256 != new.sha256)
    where = f"kind {new.kind}, fingerprint {fingerprint[:12]}"
    where += f", branch {branch}" if branch else ", any branch (none detected)"
    return found[-last:], where


def gate_input(
    store: Store,
    new: Record,
    last: int,
    branch: str | None,
    result: Result | None = None,
    allow: Sequence[str] = (),
) -> GateInput:
    """The pooled baseline for `new` (`result`: its parsed document, needed with `allow`);
    NotComparableError (exit 3) when history has none."""
    series = allowed_series(store, new, result, branch, allow) if result is not None else None
    entries, where = baselines_for(store, new, last, branch, series)
    loaded, skipped = load_documents(store, entries)
    if not loaded:
        raise NotComparableError(
            f"nothing comparable in history ({store.shown}) for {new.path}: no "
            f"earlier complete result with {where}; record baselines first (every mlb run "
            "records its result; mlb history add FILE... imports old ones)"
        )
    return GateInput([e for e, _ in loaded], _pool([r for _, r in loaded]), skipped)


def judge(
    new: Result,
    gate: GateInput,
    cfg: CompareConfig,
    new_label: str,
    progress: Progress,
    allow: Sequence[str] = (),
) -> Comparison:
    ids = ", ".join(f"#{e.id}" for e in gate.baselines)
    return compare_results(
        gate.pooled,
        new,
        cfg,
        old_label=f"history ({len(gate.baselines)} baselines: {ids})",
        new_label=new_label,
        progress=progress,
        allow=allow,
    )


__all__ = ["GateInput", "allowed_series", "baselines_for", "check_allow", "gate_input", "judge"]
