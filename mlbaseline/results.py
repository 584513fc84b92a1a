"""Result files: schema, versioning, atomic read and write. No torch here.

Schema history (the loader map below upgrades older minors; an unknown major is an error):
- 1.0: first version.

Raw values are the truth; `summary` is derived and recomputed on load, so a result can never
disagree with its own samples.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlbaseline import TOOL_NAME, __version__
from mlbaseline.errors import OutputError, OutputExistsError, ResultFileError
from mlbaseline.redact import redact_tree

SCHEMA_VERSION = "1.0"
KINDS = ("env-check", "throughput", "latency", "dataloader", "subset", "compare", "run", "ab")
STATUSES = ("complete", "interrupted", "failed", "running")
CHECK_STATUSES = ("pass", "warn", "fail", "skip")

# minor-version upgraders: "1.x" -> function(doc) -> doc of the next version
_UPGRADES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}


@dataclass
class Metric:
    """Raw samples of one metric, in SI units, with the discarded warm-up kept separately."""

    name: str
    unit: str
    higher_is_better: bool
    values: list[float]
    warmup: list[float] = field(default_factory=list)
    replicate: list[int] | None = None  # replicate (fresh process) id per value
    rank: list[int] | None = None  # distributed rank per value
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.values = [float(v) for v in self.values]
        self.warmup = [float(v) for v in self.warmup]
        for label, seq in (("replicate", self.replicate), ("rank", self.rank)):
            if seq is not None and len(seq) != len(self.values):
                raise ValueError(f"{self.name}: {label} ids must match values in length")


@dataclass
class Check:
    """One verdict check: what was measured, against which threshold, and what to do."""

    name: str
    status: str  # pass / warn / fail / skip
    value: Any = None
    threshold: Any = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "fail"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)

    @property
    def status(self) -> str:
        if any(c.status == "fail" for c in self.checks):
            return "fail"
        if any(c.status == "warn" for c in self.checks):
            return "warn"
        return "pass"

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "checks": [c.to_dict() for c in self.checks]}


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Result:
    """One command run. `data` holds kind-specific payload (plans, per-request records, …)."""

    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(
        default_factory=lambda: {"blocking": {}, "informational": {}}
    )
    measurements: dict[str, Metric] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    verdict: Verdict = field(default_factory=Verdict)
    status: str = "complete"
    data: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> path relative to the JSON
    notes: list[str] = field(default_factory=list)
    created_at: str = field(default_factory=utc_now)
    schema_version: str = SCHEMA_VERSION
    tool: dict[str, str] = field(
        default_factory=lambda: {"name": TOOL_NAME, "version": __version__}
    )

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown result kind {self.kind!r}")
        # the one place a resolved config becomes a result's: no URL secret reaches the file,
        # the history or a report (also when an older file that held one is read back)
        self.config = redact_tree(self.config)

    def add_metric(self, metric: Metric) -> Metric:
        self.measurements[metric.name] = metric
        return metric

    def warn(self, code: str, message: str, **extra: Any) -> None:
        self.warnings.append({"code": code, "message": message, **extra})

    def mark(self, status: str, note: str | None = None) -> None:
        """Mark the result interrupted/failed; the first fault wins, notes accumulate."""
        if status not in STATUSES:
            raise ValueError(status)
        if self.status == "complete":
            self.status = status
        if note:
            self.notes.append(note)

    def summary(self) -> dict[str, Any]:
        """Derived statistics per metric, recomputed from the raw values."""
        from mlbaseline import stats

        out: dict[str, Any] = {}
        for name, metric in self.measurements.items():
            finite = [v for v in metric.values if math.isfinite(v)]
            out[name] = stats.summarize(finite).to_dict() if finite else {"n": 0}
        return {"metrics": out, "percentile_method": stats.PERCENTILE_METHOD}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "tool": self.tool,
            "created_at": self.created_at,
            "status": self.status,
            "config": self.config,
            "environment": self.environment,
            "measurements": {k: asdict(m) for k, m in self.measurements.items()},
            "summary": self.summary(),
            "warnings": self.warnings,
            "verdict": self.verdict.to_dict(),
            "data": self.data,
            "artifacts": self.artifacts,
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(_jsonable(self.to_dict()), indent=2, allow_nan=False) + "\n"


def _jsonable(obj: Any) -> Any:
    """NaN/inf are not JSON: write them as null so every file stays strictly valid."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _jsonable(obj.item())
    return obj


# ---------------------------------------------------------------- writing


def atomic_write_text(path: Path, text: str, force: bool = False) -> Path:
    """Write via a temp file in the same folder + rename, so no reader sees half a file and a
    failure (disk full, permission denied) leaves nothing behind. Refuses to overwrite unless
    `force`."""
    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: already exists (use --force to overwrite)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
        if force:
            os.replace(tmp, path)
        else:
            _place_new(tmp, path)
    except OutputExistsError:
        _remove_quietly(tmp)
        raise
    except OSError as exc:
        _remove_quietly(tmp)
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    return path


def _place_new(tmp: str, path: Path) -> None:
    """Move `tmp` to `path` only if `path` does not exist yet, atomically: a hard link fails
    when the target exists, so of two writers racing for one new file exactly one wins (an
    exists-check followed by a rename would let the second silently overwrite the first)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise OutputExistsError(f"{path}: already exists (use --force to overwrite)") from None
    except OSError as exc:
        if exc.errno not in _NO_HARDLINKS:
            raise
        # a file system without hard links: the check is then only as good as this
        if path.exists():
            raise OutputExistsError(f"{path}: already exists (use --force to overwrite)") from None
        os.replace(tmp, path)
        return
    _remove_quietly(tmp)


_NO_HARDLINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_quietly(path: str | Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def write_result(result: Result, path: Path, force: bool = False) -> Path:
    return atomic_write_text(Path(path), result.to_json(), force=force)


# ---------------------------------------------------------------- reading


def _check_version(doc: dict[str, Any], where: str) -> dict[str, Any]:
    version = doc.get("schema_version")
    if not isinstance(version, str) or "." not in version:
        raise ResultFileError(f"{where}: not an mlb result file (no schema_version)")
    major, _, _ = version.partition(".")
    if major != SCHEMA_VERSION.split(".")[0]:
        raise ResultFileError(
            f"{where}: schema version {version} is not supported by this mlb "
            f"(reads {SCHEMA_VERSION.split('.')[0]}.x)"
        )
    while doc["schema_version"] in _UPGRADES:
        doc = _UPGRADES[doc["schema_version"]](doc)
    return doc


def _numbers(seq: Any) -> bool:
    return isinstance(seq, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in seq
    )


def _ids(seq: Any) -> bool:
    return seq is None or (isinstance(seq, list) and all(isinstance(v, int) for v in seq))


def _metric_from(name: str, raw: Any, where: str) -> Metric:
    if not isinstance(raw, dict):
        raise ResultFileError(f"{where}: measurements.{name} is not an object")
    values, warmup = raw.get("values"), raw.get("warmup") or []
    if not isinstance(values, list) or not values:
        raise ResultFileError(f"{where}: measurements.{name} has no samples")
    if not _numbers(values) or not _numbers(warmup):
        raise ResultFileError(f"{where}: measurements.{name} has non-numeric or NaN samples")
    unit, hib, meta = raw.get("unit"), raw.get("higher_is_better"), raw.get("meta") or {}
    if not isinstance(unit, str) or not isinstance(hib, bool) or not isinstance(meta, dict):
        raise ResultFileError(f"{where}: measurements.{name} is malformed (unit/direction/meta)")
    if not _ids(raw.get("replicate")) or not _ids(raw.get("rank")):
        raise ResultFileError(f"{where}: measurements.{name} has malformed replicate/rank ids")
    try:
        return Metric(name, unit, hib, values, warmup, raw.get("replicate"), raw.get("rank"), meta)
    except ValueError as exc:
        raise ResultFileError(f"{where}: {exc}") from None


def result_from_dict(doc: Any, where: str = "result") -> Result:
    if not isinstance(doc, dict):
        raise ResultFileError(f"{where}: not an mlb result file (top level is not an object)")
    doc = _check_version(doc, where)
    kind = doc.get("kind")
    if kind not in KINDS:
        raise ResultFileError(f"{where}: unknown result kind {kind!r}")
    status = doc.get("status", "complete")
    if status not in STATUSES:
        raise ResultFileError(f"{where}: unknown status {status!r}")
    raw_measurements = _field(doc, "measurements", dict, where)
    checks_raw = _field(_field(doc, "verdict", dict, where), "checks", list, where, "verdict.")
    try:
        checks = [
            Check(
                name=str(c["name"]),
                status=str(c["status"]),
                value=c.get("value"),
                threshold=c.get("threshold"),
                message=str(c.get("message", "")),
            )
            for c in checks_raw
        ]
    except (KeyError, TypeError, AttributeError):
        raise ResultFileError(f"{where}: verdict.checks is malformed") from None
    environment = _field(doc, "environment", dict, where) or {"blocking": {}, "informational": {}}
    return Result(
        kind=kind,
        config=_field(doc, "config", dict, where),
        environment=environment,
        measurements={k: _metric_from(k, v, where) for k, v in raw_measurements.items()},
        warnings=_field(doc, "warnings", list, where),
        verdict=Verdict(checks),
        status=status,
        data=_field(doc, "data", dict, where),
        artifacts=_field(doc, "artifacts", dict, where),
        notes=[str(n) for n in _field(doc, "notes", list, where)],
        created_at=str(doc.get("created_at", "")),
        schema_version=SCHEMA_VERSION,
        tool=_field(doc, "tool", dict, where),
    )


def _field(doc: dict[str, Any], key: str, tp: type, where: str, prefix: str = "") -> Any:
    """doc[key] if it has type `tp`, an empty `tp` if absent/null, else a one-line error."""
    value = doc.get(key)
    if value is None:
        return tp()
    if not isinstance(value, tp):
        raise ResultFileError(f"{where}: {prefix}{key} should be a {tp.__name__}")
    return value


def load_result(path: Path, kinds: Iterable[str] | None = None) -> Result:
    """Load and validate one result file; every problem is a one-line ResultFileError."""
    return parse_result(read_result_bytes(path), str(path), kinds)


def read_result_bytes(path: Path) -> bytes:
    """The bytes of a result file (for a caller that also hashes them: read once)."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ResultFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ResultFileError(f"{path}: is a directory, not a result file") from None
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read ({exc.__class__.__name__})") from None


def parse_result(body: bytes, path: str, kinds: Iterable[str] | None = None) -> Result:
    """Validate the bytes of the result file at `path` (:func:`load_result`'s checks)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultFileError(f"{path}: cannot read ({exc.__class__.__name__})") from None
    if not text.strip():
        raise ResultFileError(f"{path}: empty file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}; truncated?)"
        ) from None
    except RecursionError:
        raise ResultFileError(f"{path}: not valid JSON (nested too deeply)") from None
    result = result_from_dict(doc, str(path))
    allowed = tuple(kinds) if kinds is not None else None
    if allowed and result.kind not in allowed:
        raise ResultFileError(
            f"{path}: is a '{result.kind}' result; expected {' or '.join(allowed)}"
        )
    return result
