"""The subset manifest: which source files the subset holds, with their sizes and SHA-256.

The manifest is deterministic — no timestamps, no absolute paths, no link mode — so the same
input, seed and tool version always give a byte-identical manifest, and its SHA-256 identifies
the subset: `compare` refuses two baselines whose `subset_sha256` differ. Paths in it are
relative and `/`-separated; the reader refuses absolute paths and `..` components, so a crafted
manifest cannot point outside the dataset or the subset folder.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mlbaseline import TOOL_NAME, __version__
from mlbaseline.documents.manifest import validate_manifest
from mlbaseline.errors import DatasetError, ResultFileError
from mlbaseline.safewrite import write_text

MANIFEST_NAME = "subset_manifest.json"
MANIFEST_KIND = "mlb-subset-manifest"
MANIFEST_VERSION = 1
_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True)
class ManifestEntry:
    source: str  # path relative to the source root
    output: str  # path relative to the subset folder
    cls: str
    label: int
    bytes: int
    sha256: str
    corrupt: bool = False  # kept with --keep-corrupt although it did not decode

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.source,
            "output": self.output,
            "class": self.cls,
            "label": self.label,
            "bytes": self.bytes,
            "sha256": self.sha256,
        }
        if self.corrupt:
            out["corrupt"] = True
        return out


@dataclass
class Manifest:
    strategy: str
    seed: int
    n: int
    classes: list[str]
    counts: dict[str, dict[str, int]]
    entries: list[ManifestEntry]
    excluded_corrupt: list[dict[str, str]] = field(default_factory=list)
    tool: dict[str, str] = field(
        default_factory=lambda: {"name": TOOL_NAME, "version": __version__}
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": MANIFEST_KIND,
            "manifest_version": MANIFEST_VERSION,
            "tool": self.tool,
            "strategy": self.strategy,
            "seed": self.seed,
            "n": self.n,
            "classes": self.classes,
            "counts": self.counts,
            "entries": [e.to_dict() for e in self.entries],
            "excluded_corrupt": self.excluded_corrupt,
        }

    def to_text(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def sha256(self) -> str:
        return hashlib.sha256(self.to_text().encode("utf-8")).hexdigest()


def write_manifest(manifest: Manifest, path: Path) -> str:
    """Write atomically; returns the SHA-256 of the bytes written."""
    text = manifest.to_text()
    write_text(Path(path), text, force=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def safe_relpath(value: Any, where: str) -> str:
    """A relative, `/`-separated path with no `..`; anything else is a DatasetError."""
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: path must be a non-empty string")
    if "\\" in value or "\x00" in value:
        raise DatasetError(f"{where}: {value!r}: backslashes and NUL bytes are not allowed")
    pure = PurePosixPath(value)
    if pure.is_absolute() or _DRIVE.match(value):
        raise DatasetError(f"{where}: {value!r}: absolute paths are not allowed")
    if ".." in pure.parts:
        raise DatasetError(f"{where}: {value!r}: '..' is not allowed")
    return value


def _entry(raw: Any, i: int, where: str) -> ManifestEntry:
    at = f"{where}: entries[{i}]"
    if not isinstance(raw, dict):
        raise ResultFileError(f"{at}: not an object")
    try:
        entry = ManifestEntry(
            source=safe_relpath(raw["path"], f"{at}.path"),
            output=safe_relpath(raw["output"], f"{at}.output"),
            cls=str(raw["class"]),
            label=int(raw["label"]),
            bytes=int(raw["bytes"]),
            sha256=str(raw["sha256"]),
            corrupt=bool(raw.get("corrupt", False)),
        )
    except KeyError as exc:
        raise ResultFileError(f"{at}: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise ResultFileError(f"{at}: malformed") from None
    if "/" in entry.cls or entry.cls in ("", ".", ".."):
        raise DatasetError(f"{at}.class: {entry.cls!r} is not a single folder name")
    if not re.fullmatch(r"[0-9a-f]{64}", entry.sha256):
        raise ResultFileError(f"{at}.sha256: not a SHA-256 hex digest")
    return entry


def load_manifest(path: Path) -> Manifest:
    """Read and validate a manifest; every problem is one line (exit 2)."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultFileError(f"{path}: no such manifest") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{path}: not valid JSON (line {exc.lineno})") from None
    if not isinstance(doc, dict) or doc.get("kind") != MANIFEST_KIND:
        raise ResultFileError(f"{path}: not an mlb subset manifest")
    if doc.get("manifest_version") != MANIFEST_VERSION:
        raise ResultFileError(
            f"{path}: manifest version {doc.get('manifest_version')!r} is not supported "
            f"(reads {MANIFEST_VERSION})"
        )
    validate_manifest(doc, str(path))  # every field's type (documents.manifest), one line
    entries_raw = doc["entries"]
    try:
        return Manifest(
            strategy=str(doc["strategy"]),
            seed=int(doc["seed"]),
            n=int(doc["n"]),
            classes=[str(c) for c in doc["classes"]],
            counts=dict(doc.get("counts") or {}),
            entries=[_entry(e, i, str(path)) for i, e in enumerate(entries_raw)],
            excluded_corrupt=list(doc.get("excluded_corrupt") or []),
            tool=dict(doc.get("tool") or {}),
        )
    except KeyError as exc:
        raise ResultFileError(f"{path}: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise ResultFileError(f"{path}: malformed manifest") from None
