"""Runner of `mlb compare`: load the two result files, then compare them (mlbaseline.comparison)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlbaseline.comparison import COMPARABLE_KINDS, Comparison, compare_results, to_result
from mlbaseline.comparison.labels import run_label
from mlbaseline.config import Config
from mlbaseline.errors import ResultFileError
from mlbaseline.progress import NullProgress, Progress
from mlbaseline.results import Result, load_result


@dataclass(frozen=True)
class CompareRun:
    comparison: Comparison
    result: Result  # kind "compare", ready to write
    old: Result  # the two results compared, as read (validated) once
    new: Result


def same_input(old: Path, new: Path) -> bool:
    """The same file (path, link or hard link) or byte-identical content."""
    try:
        if os.path.samefile(old, new):
            return True
        if old.stat().st_size != new.stat().st_size:
            return False
        return old.read_bytes() == new.read_bytes()
    except OSError:
        return False


def load_pair(old: Path, new: Path) -> tuple[Result, Result]:
    """Both results, each validated; two kinds that differ are bad input (exit 2)."""
    a = load_result(old, kinds=COMPARABLE_KINDS)
    b = load_result(new, kinds=COMPARABLE_KINDS)
    if a.kind != b.kind:
        raise ResultFileError(
            f"{new}: is a '{b.kind}' result but {old} is a '{a.kind}' result; "
            "compare needs two results of the same kind"
        )
    return a, b


def run_compare(
    old: Path,
    new: Path,
    config: Config,
    allow_mismatch: bool = False,
    progress: Progress | None = None,
    allow: Sequence[str] = (),
) -> CompareRun:
    """Compare OLD with NEW under `config.compare`, the blocking keys named in `allow` (--allow)
    listed instead of blocking; raises NotComparableError (exit 3) and
    ResultFileError/ConfigError (exit 2) as the CLI reports them."""
    progress = progress or NullProgress()
    a, b = load_pair(Path(old), Path(new))
    comparison = compare_results(
        a,
        b,
        config.compare,
        old_label=file_label(a, old),
        new_label=file_label(b, new),
        allow_mismatch=allow_mismatch,
        same_input=same_input(Path(old), Path(new)),
        progress=progress,
        allow=allow,
    )
    return CompareRun(comparison, to_result(comparison, config.to_dict()), a, b)


def file_label(result: Result, path: Path | str) -> str:
    """How compare names a file: its run name (--name) and path, 'nightly (a/run.json)', or
    the path alone when the run has no name."""
    name = run_label(result.config).name
    return f"{name} ({path})" if name else str(path)
