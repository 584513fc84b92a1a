"""The history store on a real PostgreSQL server, started by the suite itself.

pytest-postgresql's executor runs initdb / pg_ctl on a temporary folder and a free loopback
port (tests/pg/server.py, through pg_ctl_unprivileged.py, which drops root to the `postgres`
user). Where no server can be started the tests skip and say why; with MLB_REQUIRE_PG=1
(.ci/run sets it) that skip is a failure instead.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from history_fakes import stamp, synthetic, write
from pg.server import create_database, drop_database, running_server
from test_history_store import _record, _writer

from mlbaseline.history import schema as sc
from mlbaseline.history.store import StoreError, open_store

REQUIRED = os.environ.get("MLB_REQUIRE_PG") == "1"
_names = itertools.count()


def _unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"MLB_REQUIRE_PG=1, but {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """'postgresql://user@host:port' of the suite's own server (see tests/pg/server.py)."""
    try:
        server = running_server()
        url = server.__enter__()
    except Exception as exc:  # no binaries, no postgres user, port trouble: say which
        _unavailable(f"no PostgreSQL server could be started ({type(exc).__name__}: {exc})")
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the suite's server for one test."""
    name = f"mlb_history_{os.getpid()}_{next(_names)}"
    url = create_database(pg_server, name)
    try:
        yield url
    finally:
        drop_database(pg_server, name)


def test_the_same_store_on_postgresql(pg_url):
    store = open_store(pg_url)
    assert store.dialect == "postgresql" and store.version() == sc.LATEST
    rid, new = store.add(_record(0))
    assert new and store.add(_record(0)) == (rid, False)
    entry = store.get(rid)
    assert entry is not None and entry.metrics["train.bs64.step"].n == 30
    assert store.document(rid) == _record(0).body
    assert store.remove(rid) and store.count() == 0
    store.close()


def test_postgresql_newer_schema_and_foreign_database_are_refused(pg_url):
    store = open_store(pg_url)
    with store.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO mlb_schema VALUES (99, 'future', 'x')"))
    with pytest.raises(StoreError, match="newer than this mlb"):
        open_store(pg_url)
    with store.engine.begin() as conn:
        for table in ("documents", "metrics", "results", "mlb_schema"):
            conn.execute(sa.text(f"DROP TABLE {table}"))
        conn.execute(sa.text("CREATE TABLE invoices (id integer)"))
    store.close()
    with pytest.raises(StoreError, match="not an mlb history store"):
        open_store(pg_url)


def test_eight_writers_on_postgresql_lose_nothing(pg_url):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(pg_url, w, 50)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 8  # the schema race included
    store = open_store(pg_url, create=False)
    assert store.count() == 400
    store.close()


def test_cli_gate_and_check_on_a_team_store(pg_url, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mlbaseline.cli import app

    monkeypatch.setenv("MLB_HISTORY", pg_url)
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    files = [write(synthetic(i, created_at=stamp(i)), tmp_path / f"{i}.json") for i in range(6)]
    slow = write(synthetic(9, slower={"backward": 1.2}, created_at=stamp(9)), tmp_path / "s.json")
    run = CliRunner().invoke
    assert run(app, ["history", "add", *map(str, files)]).exit_code == 0
    res = run(app, ["history", "gate", str(slow), "--set", "compare.n_resamples=500"])
    assert res.exit_code == 1, res.output
    assert run(app, ["history", "add", str(slow)]).exit_code == 0
    res = run(app, ["history", "check", "--json", "--metric", "train.bs64.backward"])
    assert res.exit_code == 0
    (series,) = json.loads(res.stdout)["series"]
    assert series["n"] == 7 and series["metric"] == "train.bs64.backward"


def test_a_postgresql_store_with_a_password_is_shown_redacted(pg_url, tmp_path, monkeypatch):
    """Issue 25 (RELIABILITY.md 5.2): the suite's server trusts loopback, so a password in the
    URL is accepted and unused; no command shows it."""
    from typer.testing import CliRunner

    from mlbaseline.cli import app

    secret = "S3cr3tPw"
    url = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{secret}@", 1)
    assert secret in url
    monkeypatch.setenv("MLB_HISTORY", url)
    files = [write(synthetic(i, created_at=stamp(i)), tmp_path / f"{i}.json") for i in range(2)]
    run = CliRunner().invoke
    added = run(app, ["history", "add", *map(str, files)])
    listed = run(app, ["history", "list"])
    checked = run(app, ["history", "check", "--json"])
    for res in (added, listed, checked):
        assert res.exit_code == 0, res.output
        assert secret not in res.stdout + res.stderr
    assert "postgres:***@" in " ".join(listed.stderr.split())
    assert json.loads(checked.stdout)["store"] == url.replace(secret, "***")
