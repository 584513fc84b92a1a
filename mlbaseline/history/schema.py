"""The history store's tables (SQLAlchemy Core, one definition for SQLite and PostgreSQL) and
its versioned migrations.

Schema history (each migration is applied once, in order, and recorded in `mlb_schema`):
- 1: `results` (one row per recorded result file), `metrics` (one row per metric summary),
  `documents` (the result file's exact bytes, zlib-compressed, so a team store is complete
  without the machine that wrote the file).
- 2: indexes for the series queries of `trend`, `check` and `gate`.
- 3: every record's fingerprint recomputed from its stored document with today's rule
  (`record.fingerprint_hash`): the workload identity (dataset, image size, classes, batch
  sizes, …) joined the blocking keys, taken from the config of a result written before, so an
  old record and a new one of one workload stay one series and two workloads are split.
- 4: `results.name` and `results.tags` (JSON list): the run's name and tags (`--name`,
  `--tag`), filled in for the records before from their stored documents' config.

A store whose `mlb_schema` records a version above :data:`LATEST` was written by a newer mlb:
it is refused, never downgraded or touched.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateTable

from mlbaseline.comparison.labels import run_label
from mlbaseline.history.record import fingerprint_hash, parse_body

metadata = sa.MetaData()

SCHEMA_TABLE = "mlb_schema"

schema_versions = sa.Table(
    SCHEMA_TABLE,
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("applied_at", sa.String(40), nullable=False),
)

results = sa.Table(
    "results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),  # sha256 of the blocking keys
    sa.Column("created_at", sa.String(40), nullable=False),  # the result's own UTC time
    sa.Column("recorded_at", sa.String(40), nullable=False),
    sa.Column("git_commit", sa.String(64)),
    sa.Column("git_branch", sa.String(255)),
    sa.Column("git_dirty", sa.Boolean),
    sa.Column("config_hash", sa.String(64), nullable=False),
    sa.Column("subset_hash", sa.String(64)),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("host", sa.String(255)),
    # version 4: the run's label (Text: a name has no length limit the store should impose)
    sa.Column("name", sa.Text),
    sa.Column("tags", sa.Text),  # a JSON list, searched by `"tag"` (a tag has no comma)
)

metrics = sa.Table(
    "metrics",
    metadata,
    sa.Column(
        "result_id", sa.Integer, sa.ForeignKey("results.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("unit", sa.String(40), nullable=False),
    sa.Column("higher_is_better", sa.Boolean, nullable=False),
    sa.Column("role", sa.String(40)),
    sa.Column("grp", sa.String(255)),
    sa.Column("median", sa.Float, nullable=False),
    sa.Column("ci_low", sa.Float),
    sa.Column("ci_high", sa.Float),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("replicates", sa.Integer, nullable=False),
    sa.Column("mde", sa.Float),
)

documents = sa.Table(
    "documents",
    metadata,
    sa.Column(
        "result_id", sa.Integer, sa.ForeignKey("results.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("body", sa.LargeBinary, nullable=False),
)

_INDEXES = (
    sa.Index("ix_results_series", results.c.kind, results.c.fingerprint, results.c.created_at),
    sa.Index("ix_results_branch", results.c.git_branch, results.c.created_at),
    sa.Index("ix_metrics_name", metrics.c.name),
)


def _v1(conn: Connection) -> None:
    # CREATE TABLE only: the indexes (bound to these tables) belong to version 2
    for table in (results, metrics, documents):
        conn.execute(CreateTable(table))


def _v2(conn: Connection) -> None:
    for index in _INDEXES:
        index.create(conn)


def _v3(conn: Connection) -> None:
    # one document at a time (a team store holds thousands); the rule is the live one, so a
    # later change of the fingerprint rule needs a migration of its own, as this one is
    ids = conn.execute(sa.select(results.c.id, results.c.fingerprint)).all()
    for rid, old in ids:
        body = conn.execute(
            sa.select(documents.c.body).where(documents.c.result_id == rid)
        ).scalar()
        if body is None:
            continue
        try:
            new = fingerprint_hash(parse_body(zlib.decompress(body), f"history #{rid}"))
        except Exception:  # one unreadable document keeps its fingerprint, never stops the upgrade
            continue
        if new != old:
            conn.execute(results.update().where(results.c.id == rid).values(fingerprint=new))


def _v4(conn: Connection) -> None:
    # version 1 creates `results` from today's definition, which has the columns already
    have = {c["name"] for c in sa.inspect(conn).get_columns("results")}
    for column in ("name", "tags"):
        if column not in have:
            conn.execute(sa.text(f"ALTER TABLE results ADD COLUMN {column} TEXT"))
    for rid, body in conn.execute(sa.select(documents.c.result_id, documents.c.body)).all():
        try:
            label = run_label(json.loads(zlib.decompress(body)).get("config"))
        except Exception:  # an unreadable document has no label; the upgrade goes on
            continue
        if label:
            values = {"name": label.name or None, "tags": tags_text(label.tags)}
            conn.execute(results.update().where(results.c.id == rid).values(**values))


def tags_text(tags: tuple[str, ...] | list[str]) -> str | None:
    """The `tags` column of a record: its tags as a JSON list, None for none."""
    return json.dumps(list(tags)) if tags else None


# version -> (name, step); a new schema is a new entry at the end, never an edit of an old one
MIGRATIONS: dict[int, tuple[str, Callable[[Connection], None]]] = {
    1: ("results, metrics and documents", _v1),
    2: ("indexes for series queries", _v2),
    3: ("fingerprints with the workload identity", _v3),
    4: ("run names and tags", _v4),
}
LATEST = max(MIGRATIONS)

__all__ = [
    "LATEST",
    "MIGRATIONS",
    "SCHEMA_TABLE",
    "documents",
    "metrics",
    "results",
    "tags_text",
]
