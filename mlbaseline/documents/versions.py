"""Schema versions of result documents and the upgraders between minors (pyperf's rule: a
reader refuses an unknown major, and maps every older minor of its own major forward).

History:
- 1.0: first version. Documents were dict bags; the loader checked only top-level types.
- 1.1 (issue 25): every document is validated against a typed model per kind (documents/);
  `status` may be `running` (mlb run's baseline.json while the run is under way; a reader
  treats a leftover one as incomplete); the resolved config in a result has every URL's
  secrets redacted (redact.py); `warnings` entries, metric `meta`, the fingerprint and each
  kind's `data` have declared types. A 1.0 file has the same shape: its upgrade renames the
  version only (its secrets, if any, are redacted when it becomes a `Result`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlbaseline.documents.base import SCHEMA_MAJOR, SCHEMA_VERSION
from mlbaseline.errors import ResultFileError

Doc = dict[str, Any]


def _upgrade_1_0(doc: Doc) -> Doc:
    return {**doc, "schema_version": "1.1"}


# minor-version upgraders: "1.x" -> function(doc) -> the doc of the next version
UPGRADES: dict[str, Callable[[Doc], Doc]] = {"1.0": _upgrade_1_0}
# the upgraders that change nothing but the version: the file's own bytes still validate
RELABEL_ONLY = frozenset({"1.0"})


def upgrade(doc: Any, where: str) -> tuple[Doc, bool]:
    """(`doc` at the current version, whether an upgrader changed its shape, more than the
    version). Not an object, no version, or an unknown major: one line."""
    if not isinstance(doc, dict):
        raise ResultFileError(f"{where}: not an mlb result file (top level is not an object)")
    version = doc.get("schema_version")
    if not isinstance(version, str) or "." not in version:
        raise ResultFileError(f"{where}: not an mlb result file (no schema_version)")
    if version.partition(".")[0] != SCHEMA_MAJOR:
        raise ResultFileError(
            f"{where}: schema version {version:.20} is not supported by this mlb "
            f"(reads {SCHEMA_MAJOR}.x)"
        )
    reshaped = False
    while (version := doc["schema_version"]) in UPGRADES:
        doc = UPGRADES[version](doc)
        reshaped = reshaped or version not in RELABEL_ONLY
    return doc, reshaped


__all__ = ["RELABEL_ONLY", "SCHEMA_VERSION", "UPGRADES", "upgrade"]
