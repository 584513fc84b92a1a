"""Advice that names only what the result's source offers: the one place it is worded.

A result of `mlb throughput` / `mlb run` was measured by a command that has `--repeats`; one
of `mlb attach` (`data.source == "attach"`) too, as `mlb attach --repeats`. One written by the
library API (`Baseline.save`, the Lightning callback: `data.source == "api"`) was measured
inside the user's own script, which has no such option: its fresh-process replicates come from
running the script under `mlb attach --repeats N` (no code change), or from N runs pooled with
`mlbaseline.api.pool_results`. Telling that user "use --repeats 6" names a flag they cannot
pass, so every piece of advice about fresh-process replicates goes through
:func:`repeats_advice` with the source of the result it is about (the comparison's judge, the
report's headline and signals).
"""

from __future__ import annotations

from collections.abc import Iterable

from mlbaseline.results import Result

API = "api"  # data.source of a result written by the library API or the Lightning callback
ATTACH = "attach"  # data.source of a result of `mlb attach`: it has --repeats of its own
CLI = "cli"  # everything else: a command with --repeats measured it

# what an API user runs instead of --repeats: their script N times, then one pooled file a side
API_POOL = "mlbaseline.api.pool_results"


def source_of(result: Result) -> str:
    """`API` for a result the library API wrote, `ATTACH` for one of `mlb attach`, else
    `CLI`."""
    source = result.data.get("source")
    return source if source in (API, ATTACH) else CLI


def repeats_advice(source: str, n: int) -> str:
    """How to measure `n` or more fresh processes, in the terms the source has: a clause
    that completes "…; " or "(…)" (lower case, no final stop)."""
    if source == API:
        return (
            f"run the script under mlb attach --repeats {n} -- python SCRIPT … (fresh "
            f"processes, pooled), or run it {n} or more times (each run a fresh process saving "
            f"its own file), pool each side's files into one with {API_POOL}(files, "
            "'pooled.json') and compare the pooled files"
        )
    if source == ATTACH:
        return f"measure with mlb attach --repeats {n} or more"
    return f"measure with --repeats {n} or more"


def sides_advice(sources: Iterable[str], n: int, labels: Iterable[str] = ()) -> str:
    """`repeats_advice` for the sides of a comparison: one clause when they share a source,
    else one per side, named by its label (an API result beside a CLI one)."""
    per_side, names = list(sources), list(labels)
    if len(set(per_side)) <= 1:
        return repeats_advice(per_side[0] if per_side else CLI, n)
    names += [f"side {i + 1}" for i in range(len(names), len(per_side))]
    pairs = zip(names, per_side, strict=True)
    return "; ".join(f"{name}: {repeats_advice(source, n)}" for name, source in pairs)


__all__ = ["API", "API_POOL", "ATTACH", "CLI", "repeats_advice", "sides_advice", "source_of"]
