"""What the history keeps of one result file: a :class:`Record` built from the file's bytes.

The comparability fingerprint is the SHA-256 of the result's blocking keys as `mlb compare`
reads them (`environment["blocking"]`: device, torch, CUDA, GPU, CPU model on CPU runs, golden
parameters, workload options, subset hash and the workload identity — rebuilt from the config
of a result written before it was a fingerprint key), so two records with the same kind and
fingerprint are a series `mlb compare` would accept, and two workloads never share one. Git
commit / branch / dirty are detected from the working directory (or `MLB_GIT_COMMIT` /
`MLB_GIT_BRANCH`, for CI checkouts on a detached HEAD) and never required.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from mlbaseline.comparison.labels import run_label
from mlbaseline.comparison.matching import comparable_blocking
from mlbaseline.documents.history import parse_record_document
from mlbaseline.errors import MlbError
from mlbaseline.redact import redact_text, redact_tree
from mlbaseline.results import Metric, Result, parse_result, read_result_bytes, utc_now
from mlbaseline.stopping import as_read

# the CI level of each metric's median in the store (what `trend` draws as its band)
CI_LEVEL = 0.95
CI_METHOD = (
    "distribution-free order-statistic CI of the median (scipy.stats.quantile_test), "
    "over the samples of one result"
)


class RecordError(MlbError):
    """One stored record cannot be read (a row of the wrong type, a document that is not a
    valid result); the store and its other records can. The message names the record and the
    field: `history #3: metrics['train.bs64.step'].median: expected a number, got 'abc'`."""


@dataclass(frozen=True)
class GitInfo:
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None


@dataclass(frozen=True)
class MetricSummary:
    name: str
    unit: str
    higher_is_better: bool
    median: float
    ci_low: float | None
    ci_high: float | None
    n: int
    replicates: int
    mde: float | None = None
    role: str | None = None
    group: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "median": self.median,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
            "replicates": self.replicates,
            "mde": self.mde,
            "role": self.role,
            "group": self.group,
        }


@dataclass(frozen=True)
class Record:
    """One result as the store keeps it; `body` is the file's exact bytes (its config and
    environment redacted where they held a URL secret: `stored_body`)."""

    kind: str
    status: str
    fingerprint: str
    created_at: str
    config_hash: str
    subset_hash: str | None
    path: str
    sha256: str
    git: GitInfo = field(default_factory=GitInfo)
    host: str | None = None
    metrics: tuple[MetricSummary, ...] = ()
    body: bytes = b""
    recorded_at: str = field(default_factory=utc_now)
    name: str | None = None  # the run's label (--name / --tag), from its config
    tags: tuple[str, ...] = ()


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{where}: expected a number, got {value!r:.40}")
    return float(value)


def _maybe_number(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"{where}: expected a whole number, got {value!r:.40}")
    return value


def _flag(value: Any, where: str) -> bool:
    # SQLite keeps a Boolean as 0/1, PostgreSQL as a bool
    if value not in (0, 1) or not isinstance(value, bool | int):
        raise RecordError(f"{where}: expected true or false, got {value!r:.40}")
    return bool(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{where}: expected text, got {value!r:.40}")
    return value


def _maybe_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


_NUMBER = {int, float}
_MAYBE_NUMBER = {int, float, type(None)}
_MAYBE_TEXT = {str, type(None)}


def summary_of_row(
    rid: int, name: Any, unit: Any, hib: Any, role: Any, grp: Any, *figures: Any
) -> MetricSummary:
    """A metric row of the store (`schema.metrics`' column order) as a MetricSummary, each
    column's type checked: a damaged row is a RecordError naming the record and the field."""
    med, low, high, n, reps, mde = figures
    # one test of the types a sound row has (a listing reads 50,000+ rows), the field-by-field
    # checks below only to name what is wrong
    if (
        type(name) is str is type(unit)
        and type(n) is int is type(reps)
        and type(med) in _NUMBER
        and {type(low), type(high), type(mde)} <= _MAYBE_NUMBER
        and {type(role), type(grp)} <= _MAYBE_TEXT
        and hib in (0, 1)
        and type(hib) in (bool, int)
    ):
        return MetricSummary(name, unit, bool(hib), float(med), low, high, n, reps, mde, role, grp)
    at = f"history #{rid}: metrics[{name!r}]"
    return MetricSummary(
        name=_text(name, f"history #{rid}: metrics.name"),
        unit=_text(unit, f"{at}.unit"),
        higher_is_better=_flag(hib, f"{at}.higher_is_better"),
        median=_number(med, f"{at}.median"),
        ci_low=_maybe_number(low, f"{at}.ci_low"),
        ci_high=_maybe_number(high, f"{at}.ci_high"),
        n=_count(n, f"{at}.n"),
        replicates=_count(reps, f"{at}.replicates"),
        mde=_maybe_number(mde, f"{at}.mde"),
        role=_maybe_text(role, f"{at}.role"),
        group=_maybe_text(grp, f"{at}.group"),
    )


@contextmanager
def _of_record(result_id: int) -> Iterator[None]:
    """A document's ResultFileError as that record's RecordError (same one line)."""
    try:
        yield
    except MlbError as exc:
        raise RecordError(exc.message) from None


def read_document(body: bytes, result_id: int) -> dict[str, Any]:
    """A stored document, checked by the result model (documents.history), as `mlb history
    show` prints it; a document that fails is that record's RecordError (`history #3: …`)."""
    with _of_record(result_id):
        return parse_record_document(body, f"history #{result_id}")


def read_result(body: bytes, result_id: int) -> Result:
    """A stored document as a Result, for the gate and the noise between sittings: the same
    model's checks (results.parse_result), the same RecordError."""
    with _of_record(result_id):
        return parse_body(body, f"history #{result_id}")


def canonical_hash(obj: Any) -> str:
    """SHA-256 of the canonical JSON of `obj` (sorted keys): equal data, equal hash."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint_hash(result: Result) -> str:
    """The series key: compare's blocking keys (comparable_blocking), so an old record and a new
    one of the same workload hash alike (schema migration 3 recomputes stored ones with this)."""
    return canonical_hash(comparable_blocking(result.environment, result.config))


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def detect_git(cwd: Path | None = None) -> GitInfo:
    """Commit, branch and dirty flag of the checkout at `cwd`; None where unknown (no git, not a
    repository). `MLB_GIT_COMMIT` / `MLB_GIT_BRANCH` win: CI checkouts are often detached."""
    cwd = cwd or Path.cwd()
    commit = os.environ.get("MLB_GIT_COMMIT") or _git(["rev-parse", "HEAD"], cwd)
    branch = os.environ.get("MLB_GIT_BRANCH") or _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    if branch == "HEAD":  # detached: no branch name to give
        branch = None
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd) if commit else None
    return GitInfo(commit, branch, None if status is None else bool(status))


def _median_ci(values: np.ndarray) -> tuple[float | None, float | None]:
    if values.size < 2:
        return None, None
    ci = sps.quantile_test(values, p=0.5).confidence_interval(CI_LEVEL)
    low, high = float(ci.low), float(ci.high)
    # too few samples for the level: an unbounded side is "not known", not infinity
    return (low if math.isfinite(low) else None, high if math.isfinite(high) else None)


def summarize_metric(metric: Metric, noise: Mapping[str, Any] | None) -> MetricSummary | None:
    values = np.asarray([v for v in metric.values if math.isfinite(v)], dtype=float)
    if values.size == 0:
        return None
    low, high = _median_ci(values)
    meta = metric.meta or {}
    mde = (noise or {}).get("mde")
    return MetricSummary(
        name=metric.name,
        unit=metric.unit,
        higher_is_better=metric.higher_is_better,
        median=float(np.median(values)),
        ci_low=low,
        ci_high=high,
        n=int(values.size),
        replicates=len(set(metric.replicate)) if metric.replicate else 1,
        mde=float(mde) if isinstance(mde, (int, float)) and math.isfinite(mde) else None,
        role=meta.get("role") if isinstance(meta.get("role"), str) else None,
        group=meta.get("group") if isinstance(meta.get("group"), str) else None,
    )


UNMEASURED = ("history", "cost")  # config sections outside the config hash


def config_hash(result: Result) -> str:
    """The hash of the resolved config the result ran (its `history` and `cost` sections left
    out: where a result is stored and what the machine costs do not change what was measured)."""
    return canonical_hash({k: v for k, v in (result.config or {}).items() if k not in UNMEASURED})


def stored_body(body: bytes) -> bytes:
    """The bytes the store keeps of a result file: the file's own, unless its config or
    environment holds a URL secret (a file written before results were redacted): then the
    document with those two sections redacted, so a shared store never holds one. The record's
    key stays the file's own SHA-256. The text scan first spares the second parse of a file
    with nothing to mask (nearly all)."""
    text = body.decode("utf-8", errors="replace")
    if redact_text(text) == text:
        return body
    doc = json.loads(body)
    clean = {k: redact_tree(v) if k in ("config", "environment") else v for k, v in doc.items()}
    if clean == doc:
        return body  # the secret-looking text is elsewhere (a note, a payload): kept as written
    return (json.dumps(clean, indent=2, allow_nan=False) + "\n").encode("utf-8")


def record_of(result: Result, body: bytes, path: Path | str, git: GitInfo | None = None) -> Record:
    """The record of `result`, whose file (at `path`) has the bytes `body`."""
    noise = result.data.get("noise") if isinstance(result.data.get("noise"), dict) else {}
    summaries = (summarize_metric(m, noise.get(n)) for n, m in result.measurements.items())
    subset = ((result.environment or {}).get("blocking") or {}).get("subset_sha256")
    label = run_label(result.config)
    return Record(
        kind=result.kind,
        status=as_read(result.status),  # a leftover `running` is recorded as incomplete
        fingerprint=fingerprint_hash(result),
        created_at=result.created_at or utc_now(),
        config_hash=config_hash(result),
        subset_hash=str(subset) if subset else None,
        path=str(Path(path).resolve()),
        sha256=hashlib.sha256(body).hexdigest(),
        git=git if git is not None else detect_git(),
        host=socket.gethostname(),
        metrics=tuple(s for s in summaries if s is not None),
        body=stored_body(body),
        name=label.name or None,
        tags=label.tags,
    )


def record_file(path: Path, git: GitInfo | None = None) -> Record:
    """Read and validate a result file, and build its record. The reading and the checks are
    :func:`mlbaseline.results.load_result`'s own (the same one-line error for the same fault
    as `mlb compare` gives), read once: the same bytes are parsed and hashed."""
    body = read_result_bytes(path)
    return record_of(parse_result(body, str(path)), body, path, git)


def parse_body(body: bytes, where: str) -> Result:
    """A stored document as a Result, with load_result's checks (`where` names it)."""
    return parse_result(body, where)


__all__ = [
    "CI_LEVEL",
    "CI_METHOD",
    "GitInfo",
    "MetricSummary",
    "Record",
    "RecordError",
    "canonical_hash",
    "config_hash",
    "detect_git",
    "fingerprint_hash",
    "parse_body",
    "read_document",
    "read_result",
    "record_file",
    "record_of",
    "stored_body",
    "summarize_metric",
    "summary_of_row",
]
