"""The history store: one implementation on SQLAlchemy Core for both places a history lives.

- **Embedded** (default): an SQLite file (stdlib `sqlite3` underneath), in WAL mode with a busy
  timeout, every write in `BEGIN IMMEDIATE` so that parallel writers queue instead of failing,
  every read in a plain (deferred) `BEGIN`, so that reads go on while a writer holds the lock.
- **Team**: PostgreSQL through a `postgresql://` URL (driver `psycopg` 3), so CI runners on
  several machines share one history. Migrations take an advisory lock there.

Where: env `MLB_HISTORY` (a path or a URL) > config `history.store` > `mlb-results/history.sqlite`
in the project's root: the nearest folder upward from the cwd that holds `.git` or
`pyproject.toml` (else the cwd), so runs from any sub-folder of one project share one history.
A location with a `scheme://` is a URL: `sqlite:///PATH`, or `postgresql://` (also `postgres://`
and `postgresql+psycopg://`, the driver it uses; the scheme read case-insensitively, as RFC 3986
says). Any other scheme is refused by name, never taken for a local path: a driver-qualified
URL such as `postgresql+psycopg2://u:pw@h/db` once became a folder named after the password.
The location is shown only through `redact.redact_url` (`u:***@`), and driver messages only
through `redact.redact_text` with the password itself masked as well.

A file at the store path that is not an mlb store (not SQLite, corrupt, another program's
database) is refused with a one-line error (exit 2) and never written; a store of a newer
schema version likewise. Statements are SQLAlchemy expressions with bound parameters: no SQL is
built from user input. Nothing here deletes a record except :meth:`Store.remove`.

A damaged record (a metric row of the wrong type, a document that does not decompress or is not
a valid result) costs that record only: reads leave it out and name it in `Store.problems`, so
the others still list, export and check.
"""

from __future__ import annotations

import json
import os
import sqlite3
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from mlbaseline.errors import MlbError
from mlbaseline.history import schema as sc
from mlbaseline.history.record import (
    GitInfo,
    MetricSummary,
    Record,
    RecordError,
    summary_of_row,
)
from mlbaseline.redact import MASK, redact_text, redact_url
from mlbaseline.results import utc_now
from mlbaseline.safewrite import check_in_place

DEFAULT_PATH = Path("mlb-results") / "history.sqlite"
# what marks a project's root folder (where its one default store lives)
PROJECT_MARKERS = (".git", "pyproject.toml")
ENV = "MLB_HISTORY"
BUSY_TIMEOUT_S = 30.0
# execution option that marks a transaction as a write (BEGIN IMMEDIATE on SQLite)
WRITE_OPTION = "mlb_write"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_PG_LOCK = 0x6D6C62  # "mlb": the advisory lock migrations take on PostgreSQL


class StoreError(MlbError):
    """The history store cannot be used: unreadable, foreign, corrupt, newer, locked."""


class StoreMissingError(StoreError):
    """No store exists yet at the location (nothing has been recorded)."""


def project_root(start: Path | None = None) -> Path:
    """The nearest folder upward from `start` (default: the cwd) holding `.git` or
    `pyproject.toml`; `start` itself when none does (a folder outside any project)."""
    try:
        here = (start or Path.cwd()).resolve()
    except OSError as exc:  # the cwd was deleted under the shell: no project to find
        raise StoreError(f"history.store: cannot find the project root ({exc.strerror})") from None
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return here


def resolve_location(configured: str | None = None, start: Path | None = None) -> str:
    """MLB_HISTORY > config `history.store` > the default path in the project's root (see
    :func:`project_root`; `start`: the folder to look up from, default the cwd)."""
    return os.environ.get(ENV) or configured or str(project_root(start) / DEFAULT_PATH)


# the URL schemes a store location may have, lowercase; every other `scheme://` is an error
PG_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
SUPPORTED = "an SQLite path, sqlite:///PATH, postgresql://…"


def url_scheme(location: str) -> str | None:
    """The scheme of a `scheme://…` location as written, else None (a path). A path may hold
    `://` further on (`./a://b`); a scheme is only RFC 3986's `ALPHA *(ALPHA / DIGIT / + - .)`."""
    head, sep, _ = location.partition("://")
    if not sep or not head[:1].isascii() or not head[:1].isalpha():
        return None
    return head if all(c.isascii() and (c.isalnum() or c in "+-.") for c in head) else None


def is_url(location: str) -> bool:
    return url_scheme(location) is not None


def display(location: str) -> str:
    """The location as it may be shown: any password and credential-like value masked."""
    return redact_url(location)


def _password(location: str) -> str | None:
    """The URL's password, to mask wherever a driver quotes it outside a URL."""
    try:
        found = urlsplit(location).password
    except ValueError:
        return None
    return unquote(found) if found else None


def sqlite_path(location: str) -> Path:
    """The file of a store location that is not PostgreSQL: a path, or `sqlite:///PATH`
    (SQLAlchemy's form: `sqlite:///rel/h.sqlite`, `sqlite:////abs/h.sqlite`)."""
    scheme = url_scheme(location)
    if scheme is None:
        return Path(location)
    if scheme.lower() != "sqlite":
        raise StoreError(
            f"history.store: unsupported scheme '{scheme}' in {display(location)} "
            f"(supported: {SUPPORTED})"
        )
    try:
        database = sa.engine.make_url(location).database
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise StoreError(f"history.store: {display(location)}: {redact_text(str(exc))}") from None
    if not database or database == ":memory:":
        raise StoreError(f"history.store: {display(location)}: sqlite:///PATH needs a file path")
    return Path(database)


@dataclass(frozen=True)
class Entry:
    """A stored result: its id and everything recorded but the document."""

    id: int
    kind: str
    status: str
    fingerprint: str
    created_at: str
    recorded_at: str
    git: GitInfo
    config_hash: str
    subset_hash: str | None
    path: str
    sha256: str
    host: str | None
    metrics: dict[str, MetricSummary] = field(default_factory=dict)
    name: str | None = None  # the run's label (--name / --tag)
    tags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "fingerprint": self.fingerprint,
            "created_at": self.created_at,
            "recorded_at": self.recorded_at,
            "git": {"commit": self.git.commit, "branch": self.git.branch, "dirty": self.git.dirty},
            "config_hash": self.config_hash,
            "subset_hash": self.subset_hash,
            "path": self.path,
            "sha256": self.sha256,
            "host": self.host,
            "name": self.name,
            "tags": list(self.tags),
            "metrics": {n: m.to_dict() for n, m in self.metrics.items()},
        }


@dataclass(frozen=True)
class Query:
    """Filters of `mlb history list` / `export` and of the series queries (all optional)."""

    kind: str | None = None
    branch: str | None = None
    since: str | None = None  # ISO time, compared as text (the times are UTC ISO strings)
    fingerprint: str | None = None  # a prefix is enough
    metric: str | None = None  # SQL LIKE pattern (from a glob: * → %, ? → _)
    ids: Sequence[int] | None = None
    sha256: str | None = None  # the file's exact SHA-256 (a unique, indexed column)
    last: int | None = None  # only the newest N (still returned oldest first)
    name: str | None = None  # the run's name, exactly
    tag: str | None = None  # one of the run's tags, exactly


def _check_sqlite_file(path: Path, create: bool) -> None:
    """Refuse what is not an SQLite file before SQLite touches it (it would happily turn an
    empty or missing file into a database, and a foreign file must stay as it was)."""
    if path.is_dir():
        raise StoreError(f"{path}: is a folder, not an mlb history store")
    check_in_place(path)  # SQLite follows links and opens nodes: neither is a store
    if not path.exists():
        if not create:
            raise StoreMissingError(f"{path}: no history store yet (nothing recorded)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{path}: cannot create ({exc.strerror or exc})") from None
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise StoreError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if head and head != _SQLITE_MAGIC:
        raise StoreError(
            f"{path}: not an mlb history store (not an SQLite database); nothing was changed"
        )


def _sqlite_engine(path: Path) -> Engine:
    # the pool keeps the connection open for the life of the Store: closing the last one
    # checkpoints the WAL into the database, which is not something to do after every insert
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy's "begin" below decides, not pysqlite
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        # in WAL mode NORMAL loses no committed record when a process dies, only (at worst)
        # the last ones on a power cut; FULL would fsync every commit
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # a write takes the write lock up front: two writers queue on the busy timeout instead
        # of one failing with "database is locked" when it upgrades a read lock. A read begins
        # deferred, so in WAL mode it reads the last commit while a writer holds the lock.
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _pg_engine(url: str) -> Engine:
    """The engine of a `postgresql://` location (any PG_SCHEMES spelling, driver psycopg 3).
    The port is checked first: SQLAlchemy's own check is an int() that raises a traceback."""
    shown = display(url)
    try:
        _ = urlsplit(url).port  # read, only for urllib's check of it
    except ValueError as exc:  # 'abc', 99999, '[::1': urllib names the fault, not the password
        what = "bad port" if "port" in str(exc).lower() else "not a valid URL"
        raise StoreError(f"history.store: {shown}: {what} ({exc})") from None
    rest = url.partition("://")[2]
    try:
        u = sa.engine.make_url(f"postgresql+psycopg://{rest}")
        return sa.create_engine(u, pool_pre_ping=True)
    except (sa.exc.ArgumentError, ValueError, ImportError) as exc:
        text = _clean(_first_line(exc), _password(url))
        raise StoreError(f"history.store: {shown}: not a usable PostgreSQL URL ({text})") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _clean(text: str, secret: str | None) -> str:
    """A driver's message as it may be shown: URLs redacted, the password nowhere (libpq and
    SQLAlchemy may quote a connection string or its parts)."""
    if secret:
        text = text.replace(secret, MASK)
    return redact_text(text)


def _seconds(value: float) -> str:
    """A wait as people write it: `30`, `120`, `1.5`, `0.2`, `0.05` (never a rounded `0`)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


@contextmanager
def _translated(where: str, action: str, secret: str | None = None) -> Iterator[None]:
    """Driver errors become one-line StoreErrors (exit 2), never a traceback: SQLAlchemy's
    (psycopg's and sqlite3's underneath), and sqlite3's own from a raw DBAPI connection (the
    WAL pragma), which SQLAlchemy does not wrap. `action` (reading, writing, opening) names
    what waited when the store stayed locked; `secret` (the URL's password) is masked in the
    driver's text, which is redacted as well."""
    try:
        yield
    except MlbError:
        raise
    except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:
        text = _clean(_first_line(getattr(exc, "orig", None) or exc), secret)
        if "locked" in text or "busy" in text:
            # the holder may be a reader as well as a writer (a rollback-journal store, a
            # checkpoint), and another tool as well as mlb: say only what is known
            raise StoreError(
                f"{where}: gave up {action} after waiting {_seconds(BUSY_TIMEOUT_S)} s: "
                "the store is locked by another process"
            ) from None
        raise StoreError(f"{where}: {text}") from None
    except (sa.exc.DatabaseError, sqlite3.DatabaseError) as exc:
        text = _clean(_first_line(getattr(exc, "orig", None) or exc), secret)
        raise StoreError(
            f"{where}: not a usable mlb history store ({text}); nothing was changed"
        ) from None
    except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
        raise StoreError(f"{where}: {_clean(_first_line(exc), secret)}") from None


class Store:
    """An open history store (use :func:`open_store`)."""

    def __init__(self, engine: Engine, location: str) -> None:
        self.engine = engine
        self.location = location
        self.shown = display(location)  # what messages and listings say: no password
        self.dialect = engine.dialect.name
        self._secret = _password(location)
        # one line per damaged record a read left out ("history #3: …"), for the caller to warn
        self.problems: list[str] = []

    def _guard(self, action: str) -> AbstractContextManager[None]:
        return _translated(self.shown, action, self._secret)

    def _problem(self, exc: RecordError) -> None:
        if exc.message not in self.problems:
            self.problems.append(exc.message)

    def _writing(self) -> AbstractContextManager[Connection]:
        """A transaction that writes: `BEGIN IMMEDIATE` on SQLite (see `_sqlite_engine`)."""
        return self.engine.execution_options(**{WRITE_OPTION: True}).begin()

    # ------------------------------------------------------------ schema

    def version(self) -> int | None:
        """The applied schema version; None for an empty database. Raises for a foreign one."""
        with self._guard("reading"), self.engine.connect() as conn:
            return self._version(conn)

    def _version(self, conn: Connection) -> int | None:
        tables = set(sa.inspect(conn).get_table_names())
        if sc.SCHEMA_TABLE not in tables:
            if tables:
                raise StoreError(
                    f"{self.shown}: a database that is not an mlb history store "
                    f"(tables: {', '.join(sorted(tables)[:5])}); nothing was changed"
                )
            return None
        found = conn.execute(sa.select(sa.func.max(sc.schema_versions.c.version))).scalar()
        return int(found) if found is not None else None

    def migrate(self, upto: int = sc.LATEST) -> int:
        """Apply the migrations not yet applied (up to `upto`), in one transaction; refuse a
        store from a newer mlb. Returns the version now in force."""
        where = self.shown
        with self._guard("writing"), self._writing() as conn:
            if self.dialect == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
            current = self._version(conn)
            if current is not None and current > sc.LATEST:
                raise StoreError(
                    f"{where}: history store schema version {current} is newer than this mlb "
                    f"reads (up to {sc.LATEST}); upgrade mlb to use it (nothing was changed)"
                )
            if current is None:
                sc.schema_versions.create(conn, checkfirst=True)
            for version in range(int(current or 0) + 1, upto + 1):
                name, step = sc.MIGRATIONS[version]
                step(conn)
                conn.execute(
                    sc.schema_versions.insert().values(
                        version=version, name=name, applied_at=utc_now()
                    )
                )
            return max(int(current or 0), upto)

    # ------------------------------------------------------------ writing

    def add(self, rec: Record) -> tuple[int, bool]:
        """Store `rec`; (its id, True) — or (the id already stored, False) for a file whose
        SHA-256 is already recorded (recording is idempotent)."""
        with self._guard("writing"), self._writing() as conn:
            found = conn.execute(
                sa.select(sc.results.c.id).where(sc.results.c.sha256 == rec.sha256)
            ).scalar()
            if found is not None:
                return int(found), False
            new_id = conn.execute(
                sc.results.insert().values(**_result_row(rec)).returning(sc.results.c.id)
            ).scalar_one()
            if rec.metrics:
                conn.execute(sc.metrics.insert(), [_metric_row(new_id, m) for m in rec.metrics])
            conn.execute(
                sc.documents.insert().values(result_id=new_id, body=zlib.compress(rec.body, 6))
            )
            return int(new_id), True

    def remove(self, result_id: int) -> bool:
        """Delete one record with its metrics and document; False when there is no such id."""
        with self._guard("writing"), self._writing() as conn:
            for table in (sc.metrics, sc.documents):
                conn.execute(table.delete().where(table.c.result_id == result_id))
            gone = conn.execute(sc.results.delete().where(sc.results.c.id == result_id))
            return bool(gone.rowcount)

    # ------------------------------------------------------------ reading

    def document(self, result_id: int) -> bytes | None:
        """The stored file's bytes; None when missing. A body that does not decompress is that
        record's fault (RecordError), not the store's."""
        with self._guard("reading"), self.engine.connect() as conn:
            body = conn.execute(
                sa.select(sc.documents.c.body).where(sc.documents.c.result_id == result_id)
            ).scalar()
        if body is None:
            return None
        try:
            return zlib.decompress(body)
        except (zlib.error, TypeError) as exc:
            raise RecordError(
                f"history #{result_id}: document: does not decompress ({exc})"
            ) from None

    def get(self, result_id: int) -> Entry | None:
        found = self.entries(Query(ids=[result_id]))
        return found[0] if found else None

    def by_sha256(self, sha256: str) -> Entry | None:
        """The record of the file with this SHA-256, without its metrics (the column is
        unique, so SQL finds it by index)."""
        found = self.entries(Query(sha256=sha256), with_metrics=False)
        return found[0] if found else None

    def count(self) -> int:
        with self._guard("reading"), self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(sc.results)).scalar())

    def entries(self, q: Query = Query(), with_metrics: bool = True) -> list[Entry]:
        """The records matching `q`, oldest first (by the result's own time, then id)."""
        r = sc.results.c
        stmt = sa.select(sc.results)
        if q.kind:
            stmt = stmt.where(r.kind == q.kind)
        if q.branch:
            stmt = stmt.where(r.git_branch == q.branch)
        if q.since:
            stmt = stmt.where(r.created_at >= q.since)
        if q.fingerprint:
            stmt = stmt.where(r.fingerprint.startswith(q.fingerprint, autoescape=True))
        if q.ids is not None:
            stmt = stmt.where(r.id.in_(list(q.ids)))
        if q.sha256:
            stmt = stmt.where(r.sha256 == q.sha256)
        if q.name:
            stmt = stmt.where(r.name == q.name)
        if q.tag:
            # the JSON list holds the tag as `"tag"` (a tag has no comma: comparison.labels)
            stmt = stmt.where(r.tags.contains(json.dumps(q.tag), autoescape=True))
        if q.metric:
            has = sa.select(sc.metrics.c.result_id).where(
                sc.metrics.c.name.like(q.metric, escape="\\")
            )
            stmt = stmt.where(r.id.in_(has))
        stmt = stmt.order_by(r.created_at.desc(), r.id.desc())
        if q.last:
            stmt = stmt.limit(q.last)
        with self._guard("reading"), self.engine.connect() as conn:
            rows = list(conn.execute(stmt).mappings())[::-1]
            metrics = self._metrics(conn, stmt, q.metric) if rows and with_metrics else {}
        out = []
        for row in rows:
            try:
                found = metrics.get(row["id"], {})
                if isinstance(found, RecordError):
                    raise found
                out.append(_entry(row, found))
            except RecordError as exc:  # that record only: the others are still listed
                self._problem(exc)
        return out

    def _metrics(
        self, conn: Connection, chosen: sa.Select[Any], like: str | None
    ) -> dict[int, dict[str, MetricSummary] | RecordError]:
        """The metric summaries of the records `chosen` selects, in one query (the record
        query as a subquery: no IN list grows with the history); a record with a damaged row
        maps to its RecordError instead."""
        ids = sa.select(chosen.subquery().c.id)
        m = sc.metrics.c
        stmt = sa.select(sc.metrics).where(m.result_id.in_(ids))
        if like:
            stmt = stmt.where(m.name.like(like, escape="\\"))
        out: dict[int, dict[str, MetricSummary] | RecordError] = {}
        # plain tuples in the table's column order: 10,000 records are 50,000+ rows here
        for row in conn.execute(stmt):
            found = out.setdefault(row[0], {})
            if isinstance(found, dict):
                try:
                    found[row[1]] = summary_of_row(*row)
                except RecordError as exc:
                    out[row[0]] = exc
        return out

    def close(self) -> None:
        with self._guard("closing"):
            self.engine.dispose()


def _result_row(rec: Record) -> dict[str, Any]:
    return {
        "kind": rec.kind,
        "status": rec.status,
        "fingerprint": rec.fingerprint,
        "created_at": rec.created_at,
        "recorded_at": rec.recorded_at,
        "git_commit": rec.git.commit,
        "git_branch": rec.git.branch,
        "git_dirty": rec.git.dirty,
        "config_hash": rec.config_hash,
        "subset_hash": rec.subset_hash,
        "path": rec.path,
        "sha256": rec.sha256,
        "host": rec.host,
        "name": rec.name,
        "tags": sc.tags_text(rec.tags),
    }


def _metric_row(result_id: int, m: MetricSummary) -> dict[str, Any]:
    return {
        "result_id": result_id,
        "name": m.name,
        "unit": m.unit,
        "higher_is_better": m.higher_is_better,
        "role": m.role,
        "grp": m.group,
        "median": m.median,
        "ci_low": m.ci_low,
        "ci_high": m.ci_high,
        "n": m.n,
        "replicates": m.replicates,
        "mde": m.mde,
    }


_TEXT = (
    "kind", "status", "fingerprint", "created_at", "recorded_at", "config_hash", "path", "sha256",
)  # fmt: skip
_OPTIONAL_TEXT = ("git_commit", "git_branch", "subset_hash", "host", "name", "tags")


def _tags(text: str | None, rid: int) -> tuple[str, ...]:
    try:
        tags = json.loads(text) if text else []
    except ValueError:
        tags = None
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise RecordError(f"history #{rid}: results.tags: expected a JSON list of text")
    return tuple(tags)


def _entry(row: Any, metrics: dict[str, MetricSummary]) -> Entry:
    """A results row as an Entry; RecordError naming the field when a column holds the wrong
    type (SQLite stores whatever a hand edit or another tool put there)."""
    rid = row["id"]
    for key in (*_TEXT, *_OPTIONAL_TEXT):
        got = row[key]
        if not isinstance(got, str) and not (got is None and key in _OPTIONAL_TEXT):
            raise RecordError(f"history #{rid}: results.{key}: expected text, got {got!r:.40}")
    dirty = row["git_dirty"]
    return Entry(
        id=int(rid),
        kind=row["kind"],
        status=row["status"],
        fingerprint=row["fingerprint"],
        created_at=row["created_at"],
        recorded_at=row["recorded_at"],
        git=GitInfo(row["git_commit"], row["git_branch"], None if dirty is None else bool(dirty)),
        config_hash=row["config_hash"],
        subset_hash=row["subset_hash"],
        path=row["path"],
        sha256=row["sha256"],
        host=row["host"],
        metrics=metrics,
        name=row["name"],
        tags=_tags(row["tags"], rid),
    )


def _wal(store: Store) -> None:
    """WAL mode (persistent in the file): readers never block the writer, and a killed writer
    leaves a WAL that the next open rolls back. Set outside any transaction, as SQLite wants."""
    with store._guard("opening"):
        raw = store.engine.raw_connection()
        try:
            raw.cursor().execute("PRAGMA journal_mode = WAL")
        finally:
            raw.close()


def open_store(location: str, *, create: bool = True) -> Store:
    """Open (and with `create`, create or upgrade) the store at `location`: a path or a
    `postgresql://` URL. Without `create`, a missing SQLite file is StoreMissingError and an
    un-migrated store is refused rather than changed. A URL of a scheme the store does not
    support is a StoreError naming the supported ones, never a path."""
    scheme = url_scheme(location)
    if scheme is not None and scheme.lower() in PG_SCHEMES:
        store = Store(_pg_engine(location), location)
    else:
        path = sqlite_path(location)
        _check_sqlite_file(path, create)
        store = Store(_sqlite_engine(path), str(path))
        store.version()  # a foreign or corrupt database is refused before anything is written
        _wal(store)
    if create:
        store.migrate()
        return store
    version = store.version()
    if version is None:
        raise StoreMissingError(f"{display(location)}: no history store yet (nothing recorded)")
    if version != sc.LATEST:
        store.migrate()  # upgrades an older store; refuses a newer one
    return store


def glob_to_like(pattern: str) -> str:
    """A shell glob as an SQL LIKE pattern: * → %, ? → _, with LIKE's own marks escaped."""
    out = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return out.replace("*", "%").replace("?", "_")


__all__ = [
    "DEFAULT_PATH",
    "ENV",
    "PG_SCHEMES",
    "SUPPORTED",
    "Entry",
    "Query",
    "Store",
    "StoreError",
    "StoreMissingError",
    "display",
    "glob_to_like",
    "is_url",
    "open_store",
    "project_root",
    "resolve_location",
    "sqlite_path",
    "url_scheme",
]
