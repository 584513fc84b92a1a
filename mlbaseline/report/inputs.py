"""What `mlb report` reads: result files, folders of them, and `run` results that list phases.

A folder contributes every `*.json` in it (not recursive). A result of kind `run` contributes
the phase results its `data["phases"]` lists (file names relative to the run JSON, or entries
with a `file`/`path`/`result` key); files reached twice are read once. A subset manifest
(`kind: mlb-subset-manifest`) is kept as the manifest; any other non-result
JSON in a folder is skipped and named in the notes. A named file that is not a readable result
is an error (one line, exit 2), as is finding no result at all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbaseline.errors import ResultFileError
from mlbaseline.results import Result, load_result

MANIFEST_KIND = "mlb-subset-manifest"  # as mlbaseline.subset.manifest writes it


@dataclass(frozen=True)
class ReportInput:
    """One loaded result and the file it came from (artifacts are relative to that file)."""

    result: Result
    path: Path | None = None


@dataclass
class Inputs:
    items: list[ReportInput] = field(default_factory=list)
    manifest: Path | None = None  # a subset manifest file among the inputs
    notes: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[Result]:
        return [i.result for i in self.items]


def _peek(path: Path) -> Any:
    """The parsed JSON of a folder entry, or None when it is not JSON at all."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None


def _is_manifest(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == MANIFEST_KIND


def phase_paths(run: Result, source: Path | None) -> list[Path]:
    """The phase result files a `run` result lists, resolved against its own folder."""
    phases = run.data.get("phases") or []
    if isinstance(phases, dict):
        phases = list(phases.values())
    out = []
    for entry in phases:
        rel = entry
        if isinstance(entry, dict):
            rel = entry.get("file") or entry.get("path") or entry.get("result")
        if isinstance(entry, dict) and entry.get("kind") == "report":
            continue  # the report itself, not a result
        if not isinstance(rel, str) or not rel.endswith(".json"):
            continue  # a failed phase has no file
        p = Path(rel)
        out.append(p if p.is_absolute() or source is None else source.parent / p)
    return out


def collect(paths: Sequence[Path]) -> Inputs:
    """Load every result named by `paths` (files or folders); see the module docstring."""
    inputs = Inputs()
    seen: set[Path] = set()
    queue: list[tuple[Path, bool]] = []  # (file, named explicitly)
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(p.glob("*.json"))
            queue += [(f, False) for f in files if f.is_file()]
        else:
            queue.append((p, True))
    while queue:
        path, named = queue.pop(0)
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        if not named:
            doc = _peek(path)
            if _is_manifest(doc):
                inputs.manifest = inputs.manifest or path
                continue
            if not (isinstance(doc, dict) and "schema_version" in doc) and doc is not None:
                inputs.notes.append(f"{path.name}: not an mlb result, skipped")
                continue
        elif _is_manifest(_peek(path)):
            inputs.manifest = path
            continue
        result = load_result(path)
        inputs.items.append(ReportInput(result, path))
        if result.kind == "run":
            for phase in phase_paths(result, path):
                if not phase.exists():
                    raise ResultFileError(f"{path}: phase result {phase} does not exist")
                queue.append((phase, True))
    if (
        not any(i.result.kind != "run" or i.result.measurements for i in inputs.items)
        and not inputs.manifest
    ):
        where = ", ".join(str(p) for p in paths) or "(nothing given)"
        raise ResultFileError(f"{where}: no mlb result files found")
    return inputs
