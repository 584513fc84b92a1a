"""`pool_results`: the library API's `--repeats`: several runs of a script, one result.

A script measured with `Baseline` (or the Lightning callback) runs in one process, so its
result holds no noise between processes, and `mlb compare` of two such results can give no
verdict ("insufficient data"). `mlb throughput --repeats N` answers that with N fresh
processes; the user's own script has no such option: `mlb attach --repeats N -- python
SCRIPT …` runs it in N fresh processes without a code change (measured by attach's hooks), or
the user runs it N times (each run saving its own file) and pools the files here, keeping the
API's own stages, into one result whose values keep their
replicate (process) ids, the same pooling `mlb ab --processes` uses
(`runners.throughput.replicates_result`). Only single-process results of the library API of
one workload pool: anything else would mix what a comparison must keep apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mlbaseline.comparison.advice import API, source_of
from mlbaseline.errors import UsageError
from mlbaseline.results import Result, load_result, write_result

# the config sections that say what was measured: every pooled file must agree on them
_SAME = ("golden", "workload")


def pool_results(paths: Sequence[str | Path], output: str | Path, force: bool = False) -> Path:
    """Pool two or more library-API results of one workload (each one run of the script)
    into `output` (atomically; an existing file needs `force`). Raises UsageError naming the
    first file that cannot be pooled."""
    from mlbaseline.runners.throughput import replicates_result  # imports torch

    files = [Path(p) for p in paths]
    if len(files) < 2:
        raise UsageError(
            f"pool_results: {len(files)} file(s); pool 2 or more, one per run of the script"
        )
    children = [load_result(f, ["throughput"]) for f in files]
    for f, child in zip(files, children, strict=True):
        _check(f, child, files[0], children[0])
    pooled = replicates_result(children[0].config, children)
    return write_result(pooled, Path(output), force=force)


def _check(path: Path, child: Result, first_path: Path, first: Result) -> None:
    """One file fit to pool with the first: an API result of one process, same workload."""
    if source_of(child) != API:
        raise UsageError(
            f"{path}: not written by the library API (mlb throughput and mlb attach pool "
            "their own processes: --repeats N)"
        )
    if any(m.replicate is not None for m in child.measurements.values()):
        raise UsageError(f"{path}: already pooled (its values carry replicate ids)")
    for section in _SAME:
        if child.config.get(section) != first.config.get(section):
            raise UsageError(
                f"{path}: its {section} config differs from {first_path}'s: not the same "
                "workload, so not replicates of one measurement"
            )


__all__ = ["pool_results"]
