"""The CI gate against history: a new result against the last K comparable baselines.

The K baselines (same kind, same comparability fingerprint, same branch, recorded before the
new result and not the new file itself) are pooled into one baseline whose replicate ids are
the sittings, then judged by :func:`mlbaseline.comparison.compare_results` — the judge of `mlb
compare`, not a second one. Pooled that way, the spread *between* the K sittings is the
measured between-process noise the comparison's threshold and its in-process rule use (see
:mod:`mlbaseline.comparison.noise`), so a change has to stand out of the history's own noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlbaseline.comparison import Comparison, compare_results
from mlbaseline.config import CompareConfig
from mlbaseline.errors import NotComparableError
from mlbaseline.history.record import Record, parse_body
from mlbaseline.history.store import Entry, Query, Store, display
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
    """The stored result of each entry, and why any was left out (its document missing)."""
    loaded, skipped = [], []
    for e in entries:
        body = store.document(e.id)
        if body is None:
            skipped.append(f"#{e.id}: its document is missing from the store")
            continue
        loaded.append((e, parse_body(body, f"history #{e.id}")))
    return loaded, skipped


def baselines_for(
    store: Store, new: Record, last: int, branch: str | None
) -> tuple[list[Entry], str]:
    """The last `last` comparable records before `new` (on `branch` when given), oldest
    first, and the words that describe what was looked for."""
    q = Query(kind=new.kind, fingerprint=new.fingerprint, branch=branch)
    found = earlier_complete(store, q, new.created_at, lambda e: e.sha256 != new.sha256)
    where = f"kind {new.kind}, fingerprint {new.fingerprint[:12]}"
    where += f", branch {branch}" if branch else ", any branch (none detected)"
    return found[-last:], where


def gate_input(store: Store, new: Record, last: int, branch: str | None) -> GateInput:
    """The pooled baseline for `new`; NotComparableError (exit 3) when history has none."""
    entries, where = baselines_for(store, new, last, branch)
    loaded, skipped = load_documents(store, entries)
    if not loaded:
        raise NotComparableError(
            f"nothing comparable in history ({display(store.location)}) for {new.path}: no "
            f"earlier complete result with {where}; record baselines first (every mlb run "
            "records its result; mlb history add FILE... imports old ones)"
        )
    return GateInput([e for e, _ in loaded], _pool([r for _, r in loaded]), skipped)


def judge(
    new: Result, gate: GateInput, cfg: CompareConfig, new_label: str, progress: Progress
) -> Comparison:
    ids = ", ".join(f"#{e.id}" for e in gate.baselines)
    return compare_results(
        gate.pooled,
        new,
        cfg,
        old_label=f"history ({len(gate.baselines)} baselines: {ids})",
        new_label=new_label,
        progress=progress,
    )


__all__ = ["GateInput", "baselines_for", "gate_input", "judge"]
