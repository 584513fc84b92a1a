"""The history store's documents: each record keeps its result file's exact bytes (`Record.body`,
history/record.py), so a stored document is checked exactly like a file on disk, by the same
model, and a damaged one is named by its record (`history #3: measurements.x.values[0]:
expected a finite number, got 'abc'`) instead of breaking `history show/list/export/check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlbaseline.documents import check_kind, load_document, validate
from mlbaseline.documents.versions import upgrade
from mlbaseline.errors import ResultFileError


def parse_record_document(doc: bytes | str | Mapping[str, Any], where: str) -> dict[str, Any]:
    """The checked document of one history record (`where` names it: `history #3`): the body as
    stored (bytes or text), or a document already parsed from it. Returns the document at the
    current schema version; every problem is one `ResultFileError` line."""
    if isinstance(doc, str):
        doc = doc.encode("utf-8")
    if isinstance(doc, bytes):
        return load_document(doc, where)
    if not isinstance(doc, Mapping):
        raise ResultFileError(f"{where}: not an mlb result file (top level is not an object)")
    checked, _ = upgrade(dict(doc), where)
    check_kind(checked, where)
    validate(checked, where)
    return checked


__all__ = ["parse_record_document"]
