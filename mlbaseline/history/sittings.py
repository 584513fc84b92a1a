"""Noise between sittings, from the history (issue 15, item 2).

A result with fresh-process replicates knows its within- and between-process noise
(`data.noise`, :mod:`mlbaseline.stats.noise`). What it cannot know alone is how much a second
*sitting* (the same command minutes or days later) differs beyond that: the machine's speed
drifts over minutes (bench `drift`, `repro`). The history holds earlier sittings, so a new
result with replicates reads the last comparable ones and adds, per metric, the between-sitting
component and the MDE of a comparison across sittings (`data.noise[metric].sittings`).

Comparable means the same kind, comparability fingerprint (machine class) and resolved config, and
when the code's commit is known, the same commit: a performance change between commits is not
noise (a dirty tree counts as its commit: uncommitted changes between sittings can only make the
figure larger, so verdicts less sensitive, never a false regression). Only sittings with at
least 2 processes count, since a single process's figure already holds the between-process
noise the formula subtracts. The new result is one of the sittings.
Reading is read-only: a missing store is simply no history; a broken one is a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mlbaseline.errors import MlbError
from mlbaseline.history.gate import earlier_complete, load_documents
from mlbaseline.history.record import GitInfo, config_hash, fingerprint_hash
from mlbaseline.history.store import Entry, Query, Store, StoreMissingError, open_store
from mlbaseline.redact import redact_text
from mlbaseline.results import Result
from mlbaseline.stats.noise import MIN_SITTINGS, Components, components, cross_sitting_mde
from mlbaseline.stats.noise import sittings as sitting_components

LAST = 20  # earlier sittings read at most: recent enough to describe today's machine


def _earlier(store: Store, result: Result, git: GitInfo, last: int) -> list[Entry]:
    q = Query(kind=result.kind, fingerprint=fingerprint_hash(result))
    same_config = config_hash(result)
    found = earlier_complete(
        store,
        q,
        result.created_at,
        lambda e: (
            e.config_hash == same_config and (git.commit is None or e.git.commit == git.commit)
        ),
    )
    return found[-last:]


def _figure(values: list[float], replicate: list[int] | None) -> tuple[float, Components] | None:
    """(the reported figure: the pooled median, the metric's components), or None for a
    sitting of one process."""
    if not replicate:
        return None
    comp = components(values, replicate)
    if comp is None:
        return None
    return float(np.median(values)), comp


def sitting_records(
    result: Result, earlier: list[tuple[int, Result]], alpha: float
) -> dict[str, dict[str, Any]]:
    """Per metric of `result`'s `data.noise`: the between-sitting component over `earlier`
    (history id, result) and `result` itself, and the MDE of `result` against one other
    sitting at the alpha its own MDE is stated at (Holm's first step: alpha / k)."""
    noise = result.data.get("noise") or {}
    out: dict[str, dict[str, Any]] = {}
    for name, rec in noise.items():
        own = _figure(result.measurements[name].values, result.measurements[name].replicate)
        if own is None:
            continue
        figs, ids = [], []
        for rid, old in earlier:
            m = old.measurements.get(name)
            got = _figure(m.values, m.replicate) if m is not None else None
            if got is not None:
                figs.append(got)
                ids.append(rid)
        figs.append(own)
        comp = sitting_components(
            [f for f, _ in figs], [c.process_sd for _, c in figs], [c.processes for _, c in figs]
        )
        if comp is None:
            continue
        k = int(rec.get("metrics_judged") or 1)
        mde = cross_sitting_mde(own[1], comp.between_sd, alpha / max(1, k))
        out[name] = {**comp.to_dict(), "history_ids": ids, "mde_across_sittings": mde}
    return out


def attach(
    result: Result,
    location: str,
    git: GitInfo,
    alpha: float,
    last: int = LAST,
) -> int:
    """Add `sittings` to `result.data.noise` from the history at `location`; returns the number
    of metrics that got one. No store, or too few comparable sittings: nothing added. A store
    that cannot be read: a `history_noise` warning, the result unchanged otherwise."""
    noise = result.data.get("noise")
    if not isinstance(noise, Mapping) or not noise:
        return 0
    try:
        store = open_store(location, create=False)
    except StoreMissingError:
        return 0
    except Exception as exc:  # a locked, corrupt or foreign store must not cost the result
        _warn(result, exc)
        return 0
    try:
        entries = _earlier(store, result, git, last)
        if len(entries) + 1 < MIN_SITTINGS:
            return 0
        loaded, _ = load_documents(store, entries)  # a missing document: one sitting fewer
        earlier = [(e.id, r) for e, r in loaded]
    except Exception as exc:
        _warn(result, exc)
        return 0
    finally:
        store.close()
    records = sitting_records(result, earlier, alpha)
    for name, rec in records.items():
        noise[name]["sittings"] = rec
    return len(records)


def _warn(result: Result, exc: Exception) -> None:
    text = exc.message if isinstance(exc, MlbError) else f"{type(exc).__name__}: {exc}"
    text = redact_text(text)  # a driver's text may quote the store's URL
    result.warn(
        "history_noise",
        f"noise between sittings not read from the history ({' '.join(text.split())})",
    )


def worst(result: Result) -> tuple[str, dict[str, Any]] | None:
    """The total metric (role `total`) with the largest between-sitting sd, for one line on
    screen and in the replicate plan's advice."""
    best: tuple[str, dict[str, Any]] | None = None
    for name, rec in (result.data.get("noise") or {}).items():
        sit = rec.get("sittings") if isinstance(rec, Mapping) else None
        m = result.measurements.get(name)
        if not sit or m is None or (m.meta or {}).get("role") != "total":
            continue
        if best is None or sit["between_sd"] > best[1]["between_sd"]:
            best = (name, sit)
    return best


__all__ = ["LAST", "attach", "sitting_records", "worst"]
