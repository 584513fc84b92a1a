"""The subset manifest (`subset_manifest.json`, written by `mlb subset`): its typed model, so a
manifest is validated like a result file, `FILE: entries[3].label: expected an integer, got '0'`.

The paths' own rules (relative, `/`-separated, no `..`; a class is one folder name) are the
manifest reader's (subset/manifest.py `safe_relpath`), checked after the types.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, ValidationError

from mlbaseline.documents.base import Strict, Tool, one_line
from mlbaseline.errors import ResultFileError


class Entry(Strict):
    """One file of the subset: its source path, its name in the subset, class and hash."""

    path: str  # relative to the source root
    output: str  # relative to the subset folder
    class_: str = Field(alias="class")
    label: int
    bytes: int
    sha256: str  # a hex digest: the reader checks its form, with its own message
    corrupt: bool = False  # kept with --keep-corrupt although it did not decode


class Excluded(Strict):
    """A file that did not decode and was replaced (runners/subset.py)."""

    path: str
    error: str


class Count(Strict):
    available: int
    selected: int


class Manifest(Strict):
    kind: Literal["mlb-subset-manifest"]  # subset.manifest.MANIFEST_KIND
    manifest_version: int
    tool: Tool | None = None
    strategy: str
    seed: int
    n: int
    classes: list[str]
    counts: dict[str, Count]
    entries: list[Entry]
    excluded_corrupt: list[Excluded] = Field(default_factory=list)


def validate_manifest(doc: dict[str, Any], where: str) -> None:
    """Validate a parsed manifest (small: validated from its JSON text, as result files are)."""
    try:
        Manifest.model_validate_json(json.dumps(doc))
    except ValidationError as exc:
        raise ResultFileError(one_line(exc, where, doc)) from None


__all__ = ["Manifest", "validate_manifest"]
