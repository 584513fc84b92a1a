"""A throwaway PostgreSQL server for the tests and the bench: pytest-postgresql's executor (the
one its `postgresql_proc` fixture wraps) on a folder of its own under /tmp and a free loopback
port, through `pg_ctl_unprivileged.py` (PostgreSQL refuses to run as root).

The folder is not under pytest's basetemp: every pytest session resets that root to mode 0700,
which would cut an unprivileged server off from its data while a parallel session starts.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import port_for
from mirakuru.exceptions import AlreadyRunning
from pytest_postgresql.executors import PostgreSQLExecutor

PG_CTL = Path(__file__).with_name("pg_ctl_unprivileged.py")


@contextmanager
def running_server() -> Iterator[str]:
    """'postgresql://postgres@127.0.0.1:PORT' while the server runs; raises when it cannot
    start (no binaries, no `postgres` user, port trouble)."""
    base = Path(tempfile.mkdtemp(prefix="mlb-pg-"))
    for attempt in range(3):
        executor = PostgreSQLExecutor(
            executable=str(PG_CTL),
            host="127.0.0.1",
            port=port_for.select_random(),
            datadir=str(base / "data"),
            unixsocketdir=str(base),
            logfile=str(base / "postgresql.log"),
            startparams="-w",
            dbname="postgres",
            timeout=60,
        )
        try:
            executor.start()
            break
        except AlreadyRunning:
            # the random port was taken meanwhile (a shared machine): another one
            if attempt == 2:
                shutil.rmtree(base, ignore_errors=True)
                raise
        except BaseException:
            shutil.rmtree(base, ignore_errors=True)
            raise
    try:
        yield f"postgresql://{executor.user}@127.0.0.1:{executor.port}"
    finally:
        executor.stop()
        shutil.rmtree(base, ignore_errors=True)


def _admin(server: str):
    import sqlalchemy as sa

    url = f"{server.replace('postgresql://', 'postgresql+psycopg://')}/postgres"
    return sa.create_engine(url, isolation_level="AUTOCOMMIT")


def create_database(server: str, name: str) -> str:
    """A fresh database `name` (made by the caller, never user input) on `server`; its URL."""
    drop_database(server, name)
    _run(server, f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def drop_database(server: str, name: str) -> None:
    _run(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run(server: str, statement: str) -> None:
    import sqlalchemy as sa

    admin = _admin(server)
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(statement))
    finally:
        admin.dispose()
