"""Labels that tell several result files apart in one report: by run name, else by path.

No matplotlib here: the report's tables use them as well as its figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePath

from mlbaseline.comparison.labels import run_label
from mlbaseline.results import Result


def _run_name(result: Result) -> str | None:
    """The name the user gave the run (`--name`: config `history.name`, comparison.labels)."""
    return run_label(result.config).name or None


def series_labels(results: Sequence[Result], sources: Sequence[Path | None]) -> list[str]:
    """One label per result, for legends and axes when a report shows several: its run name,
    else the shortest tail of its path that tells the files apart (`a/throughput.json` and
    `b/throughput.json` are "a/throughput.json" and "b/throughput.json"), else "result N".
    A single result gets "" (nothing to tell apart)."""
    if len(results) < 2:
        return [""] * len(results)
    names = [_run_name(r) for r in results]
    parts = [PurePath(s).parts if s is not None else () for s in sources]
    depth = 1
    while depth <= max((len(p) for p in parts), default=0):
        tails = ["/".join(p[-depth:]) for p in parts]
        if len(set(tails)) == len(tails) and all(tails):
            break
        depth += 1
    else:
        tails = [""] * len(parts)
    out = [n or t or f"result {i + 1}" for i, (n, t) in enumerate(zip(names, tails, strict=True))]
    # a repeated run name (or a name equal to another's path) still needs telling apart
    return [o if out.count(o) == 1 else f"{o} ({i + 1})" for i, o in enumerate(out)]


__all__ = ["series_labels"]
