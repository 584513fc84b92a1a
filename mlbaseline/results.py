"""Results in memory (`Result`, `Metric`, `Verdict`), their JSON form, and the reading of result
files. No torch here.

The schema of a result file, its versions and the upgraders of older minors are in
`mlbaseline.documents` (one pydantic model per kind; `documents/versions.py` has the history);
reading validates the whole document once through it, and this module builds the `Result`.

Raw values are the truth; `summary` is derived and recomputed on load, so a result can never
disagree with its own samples.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlbaseline import TOOL_NAME, __version__
from mlbaseline.documents import check_kind, load_document, validate
from mlbaseline.documents.base import CHECK_STATUSES, KINDS, SCHEMA_VERSION, STATUSES
from mlbaseline.documents.versions import UPGRADES, upgrade
from mlbaseline.errors import ResultFileError
from mlbaseline.redact import redact_tree
from mlbaseline.safewrite import write_text

__all__ = [
    "CHECK_STATUSES",
    "KINDS",
    "SCHEMA_VERSION",
    "STATUSES",
    "UPGRADES",
    "Check",
    "Metric",
    "Result",
    "Verdict",
    "atomic_write_text",
    "load_result",
    "parse_result",
    "read_result_bytes",
    "result_from_dict",
    "utc_now",
    "write_result",
]


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
            # its blocking keys copy workload options from the config (dataset_kwargs may
            # hold a signed URL): written redacted like the config
            "environment": redact_tree(self.environment),
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

# the one safe writer lives in mlbaseline.safewrite; this is its older name, kept for callers
atomic_write_text = write_text


def write_result(result: Result, path: Path, force: bool = False) -> Path:
    return write_text(Path(path), result.to_json(), force=force)


# ---------------------------------------------------------------- reading


def _result_of(doc: dict[str, Any]) -> Result:
    """The Result of a document its model has accepted (documents.validate): no check left to
    make here, only defaults for the sections an older writer left out or wrote as null."""
    metrics = {
        name: Metric(
            name,
            raw["unit"],
            raw["higher_is_better"],
            raw["values"],
            raw.get("warmup") or [],
            raw.get("replicate"),
            raw.get("rank"),
            raw.get("meta") or {},
        )
        for name, raw in (doc.get("measurements") or {}).items()
    }
    checks = [
        Check(c["name"], c["status"], c.get("value"), c.get("threshold"), c.get("message", ""))
        for c in (doc.get("verdict") or {}).get("checks") or []
    ]
    return Result(
        kind=doc["kind"],
        config=doc.get("config") or {},
        environment=doc.get("environment") or {"blocking": {}, "informational": {}},
        measurements=metrics,
        warnings=doc.get("warnings") or [],
        verdict=Verdict(checks),
        status=doc.get("status") or "complete",
        data=doc.get("data") or {},
        artifacts=doc.get("artifacts") or {},
        notes=doc.get("notes") or [],
        created_at=doc.get("created_at") or "",
        schema_version=SCHEMA_VERSION,
        tool=doc.get("tool") or {},
    )


def result_from_dict(doc: Any, where: str = "result") -> Result:
    """A Result from a parsed document (a child process's `--json` output), with the checks
    of a file: version, kind and the whole document against its model."""
    doc, _ = upgrade(doc, where)
    check_kind(doc, where)
    validate(doc, where)
    return _result_of(doc)


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
    return _result_of(load_document(body, str(path), kinds))
