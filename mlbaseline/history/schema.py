"""The history store's tables (SQLAlchemy Core, one definition for SQLite and PostgreSQL) and
its versioned migrations.

Schema history (each migration is applied once, in order, and recorded in `mlb_schema`):
- 1: `results` (one row per recorded result file), `metrics` (one row per metric summary),
  `documents` (the result file's exact bytes, zlib-compressed, so a team store is complete
  without the machine that wrote the file).
- 2: indexes for the series queries of `trend`, `check` and `gate`.

A store whose `mlb_schema` records a version above :data:`LATEST` was written by a newer mlb:
it is refused, never downgraded or touched.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateTable

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


# version -> (name, step); a new schema is a new entry at the end, never an edit of an old one
MIGRATIONS: dict[int, tuple[str, Callable[[Connection], None]]] = {
    1: ("results, metrics and documents", _v1),
    2: ("indexes for series queries", _v2),
}
LATEST = max(MIGRATIONS)

__all__ = ["LATEST", "MIGRATIONS", "SCHEMA_TABLE", "documents", "metrics", "results"]
