"""The history store on SQLite: records, queries, migrations, concurrency, corruption."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from history_fakes import stamp, synthetic, write

from mlbaseline.history import schema as sc
from mlbaseline.history.record import GitInfo, MetricSummary, Record, RecordError, record_file
from mlbaseline.history.store import (
    Query,
    StoreError,
    StoreMissingError,
    glob_to_like,
    open_store,
    resolve_location,
)


def _record(i: int, worker: int = 0) -> Record:
    body = f'{{"worker": {worker}, "i": {i}}}'.encode()
    metric = MetricSummary("train.bs64.step", "s", False, 0.01 + i * 1e-6, 0.0099, 0.0101, 30, 1)
    return Record(
        kind="throughput",
        status="complete",
        fingerprint="f" * 64,
        created_at=stamp(i),
        config_hash="c" * 64,
        subset_hash=None,
        path=f"/results/{worker}/{i}.json",
        sha256=hashlib.sha256(body).hexdigest(),
        git=GitInfo("abc", "main", False),
        metrics=(metric,),
        body=body,
    )


def test_a_record_keeps_what_the_issue_lists(tmp_path):
    path = write(synthetic(1, created_at=stamp(3)), tmp_path / "r.json")
    rec = record_file(path, GitInfo("0123abcd", "main", True))
    store = open_store(str(tmp_path / "h.sqlite"))
    rid, new = store.add(rec)
    assert new and store.add(rec) == (rid, False)  # the same file twice: one record
    entry = store.get(rid)
    assert entry is not None
    assert (entry.kind, entry.created_at, entry.git) == ("throughput", stamp(3), rec.git)
    assert entry.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert entry.path == str(path.resolve()) and len(entry.fingerprint) == 64
    step = entry.metrics["train.bs64.step"]
    assert step.n == 30 and step.replicates == 1 and step.role == "total"
    assert step.ci_low is not None and step.ci_low <= step.median <= step.ci_high
    assert store.document(rid) == path.read_bytes()  # the exact bytes, for a team store


def test_queries_filter_and_patterns_are_bound_not_formatted(tmp_path):
    store = open_store(str(tmp_path / "h.sqlite"))
    for i in range(5):
        store.add(_record(i))
    assert [e.created_at for e in store.entries(Query(last=2))] == [stamp(3), stamp(4)]
    assert len(store.entries(Query(since=stamp(2)))) == 3
    assert len(store.entries(Query(metric=glob_to_like("train.*.step")))) == 5
    assert store.entries(Query(metric=glob_to_like("train_bs64*"))) == []  # _ is literal
    hostile = "x'; DROP TABLE results; --"
    assert store.entries(Query(branch=hostile, kind=hostile, fingerprint=hostile)) == []
    assert store.count() == 5


def test_remove_is_the_only_deletion(tmp_path):
    store = open_store(str(tmp_path / "h.sqlite"))
    rid, _ = store.add(_record(0))
    assert store.remove(rid) and not store.remove(rid)
    assert store.get(rid) is None and store.document(rid) is None


def test_location_env_beats_config_beats_default(monkeypatch):
    monkeypatch.setenv("MLB_HISTORY", "/env/h.sqlite")
    assert resolve_location("/cfg/h.sqlite") == "/env/h.sqlite"
    monkeypatch.delenv("MLB_HISTORY")
    assert resolve_location("/cfg/h.sqlite") == "/cfg/h.sqlite"
    # the default: in the project's root (this checkout), not in the cwd
    root = Path(__file__).resolve().parent.parent
    assert resolve_location(None) == str(root / "mlb-results" / "history.sqlite")


def test_reading_never_creates_a_store(tmp_path):
    with pytest.raises(StoreMissingError):
        open_store(str(tmp_path / "none.sqlite"), create=False)
    assert not (tmp_path / "none.sqlite").exists()


# ---------------------------------------------------------------- migrations and versions


def test_migrations_upgrade_an_old_store_and_keep_its_records(tmp_path):
    path = tmp_path / "h.sqlite"
    store = open_store(str(path), create=False) if path.exists() else None
    assert store is None
    old = _bare_store(path)
    assert old.migrate(upto=1) == 1
    rid, _ = old.add(_record(0))
    assert not sa.inspect(old.engine).get_indexes("metrics")  # version 1 has none
    old.close()
    store = open_store(str(path), create=False)  # opening upgrades it
    assert store.version() == sc.LATEST == 4
    assert {ix["name"] for ix in sa.inspect(store.engine).get_indexes("metrics")} == {
        "ix_metrics_name"
    }
    assert store.get(rid) is not None
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT version, name FROM mlb_schema ORDER BY version").fetchall()
    assert [v for v, _ in rows] == [1, 2, 3, 4]


def _bare_store(path: Path):
    from mlbaseline.history.store import Store, _sqlite_engine

    return Store(_sqlite_engine(path), str(path))


def test_a_newer_schema_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "h.sqlite"
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO mlb_schema VALUES (99, 'from the future', 'x')")
    before = path.read_bytes()
    for create in (True, False):
        with pytest.raises(StoreError, match="schema version 99 is newer than this mlb"):
            open_store(str(path), create=create)
    assert path.read_bytes() == before


# ---------------------------------------------------------------- foreign and corrupt files


@pytest.mark.parametrize(
    "content",
    [b"just some text, not a database\n", b"SQLite format 3\x00" + b"\xff" * 4096],
    ids=["text", "corrupt-sqlite"],
)
def test_a_foreign_or_corrupt_file_is_refused_and_not_overwritten(tmp_path, content):
    path = tmp_path / "h.sqlite"
    path.write_bytes(content)
    for create in (True, False):
        with pytest.raises(StoreError, match=r"not (an|a usable) mlb history store"):
            open_store(str(path), create=create)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.sqlite"]  # no -wal/-shm left


def test_another_programs_database_is_refused(tmp_path):
    path = tmp_path / "h.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"not an mlb history store.*invoices"):
        open_store(str(path))
    assert path.read_bytes() == before


# ---------------------------------------------------------------- concurrency and kills


def _writer(path: str, worker: int, n: int) -> None:
    store = open_store(path)
    for i in range(n):
        store.add(_record(i, worker))
    store.close()


def test_eight_writers_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "h.sqlite")  # not created yet: the writers race for the schema too
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, 50)) for w in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 8
    store = open_store(path, create=False)
    assert store.count() == 400
    paths = {e.path for e in store.entries(with_metrics=False)}
    assert paths == {f"/results/{w}/{i}.json" for w in range(8) for i in range(50)}
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT count(*) FROM metrics").fetchone() == (400,)


def _killed_writer(path: str, conn_out: object) -> None:
    store = open_store(path)
    store.add(_record(0, 1))
    with store.engine.begin() as conn:  # a second record, left half-written
        conn.execute(sc.results.insert().values(**_row(_record(1, 1))))
        conn_out.send("in transaction")  # type: ignore[attr-defined]
        conn_out.recv()  # type: ignore[attr-defined]  # blocks until killed


def _row(rec: Record) -> dict:
    from mlbaseline.history.store import _result_row

    return _result_row(rec)


def test_a_writer_killed_mid_transaction_leaves_the_store_consistent(tmp_path):
    path = str(tmp_path / "h.sqlite")
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_killed_writer, args=(path, child))
    proc.start()
    assert parent.recv() == "in transaction"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    store = open_store(path)
    assert [e.path for e in store.entries()] == ["/results/1/0.json"]  # the half one is gone
    _, new = store.add(_record(2, 1))  # and the lock died with the writer
    assert new and store.count() == 2
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# ---------------------------------------------------------------- driver errors at the boundary


def _rollback_journal_store(path: Path) -> None:
    store = open_store(str(path))
    store.add(_record(1))
    store.close()
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")


def test_a_store_locked_by_a_reader_is_a_store_error_not_a_driver_error(tmp_path, monkeypatch):
    """A store in rollback-journal mode (another tool set it) with a reader holding its lock:
    the WAL pragma runs on a raw sqlite3 connection, whose errors SQLAlchemy does not wrap."""
    import mlbaseline.history.store as st

    monkeypatch.setattr(st, "BUSY_TIMEOUT_S", 0.05)
    path = tmp_path / "h.sqlite"
    _rollback_journal_store(path)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT * FROM results").fetchall()
        for create in (True, False):
            with pytest.raises(StoreError, match=r"gave up opening after waiting 0\.05 s: the"):
                open_store(str(path), create=create)
    finally:
        reader.close()


def test_a_locked_store_names_what_waited_and_for_how_long(tmp_path, monkeypatch):
    """Another connection holds the write lock: a write gives up after the busy timeout, and
    the message says what waited and for how long — a sub-second timeout as itself, not
    rounded to `0 s`, and no claim that the holder is a writer. A read does not wait: in WAL
    mode it reads the last commit while the writer holds the lock."""
    import mlbaseline.history.store as st

    monkeypatch.setattr(st, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "h.sqlite"
    store = open_store(str(path))
    store.add(_record(1))
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("DELETE FROM metrics")  # uncommitted: no reader may see it
        assert [e.id for e in store.entries()] == [1] and store.count() == 1
        assert store.entries()[0].metrics
        with pytest.raises(StoreError) as err:
            store.add(_record(2))
        tail = "after waiting 0.2 s: the store is locked by another process"
        assert str(err.value) == f"{path}: gave up writing {tail}"
    finally:
        holder.close()
    assert store.count() == 1  # the lock gone, the store is as it was
    store.close()


def test_a_read_that_waits_on_an_exclusive_lock_says_reading(tmp_path, monkeypatch):
    """A rollback-journal store (another tool set it; the WAL pragma kept from running here)
    whose file another process holds exclusively: the read gives up and says 'reading'."""
    import mlbaseline.history.store as st

    path = tmp_path / "h.sqlite"
    _rollback_journal_store(path)
    monkeypatch.setattr(st, "_wal", lambda _store: None)
    monkeypatch.setattr(st, "BUSY_TIMEOUT_S", 0.2)
    store = open_store(str(path), create=False)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError) as err:
            store.entries()
        assert str(err.value) == (
            f"{path}: gave up reading after waiting 0.2 s: the store is locked by another process"
        )
    finally:
        holder.close()
    assert store.count() == 1
    store.close()


def test_reads_begin_deferred_and_writes_immediate(tmp_path):
    """What SQLite is sent: a read's transaction takes no write lock, a write's takes it first."""
    from sqlalchemy import event

    store = open_store(str(tmp_path / "h.sqlite"))
    begun: list[str] = []

    def _spy(_conn, _cursor, statement, *_rest):
        if statement.startswith("BEGIN"):
            begun.append(statement)

    event.listen(store.engine, "before_cursor_execute", _spy)
    store.entries()
    store.count()
    assert begun == ["BEGIN", "BEGIN"]
    begun.clear()
    rid, _ = store.add(_record(1))
    store.remove(rid)
    assert begun == ["BEGIN IMMEDIATE", "BEGIN IMMEDIATE"]
    store.close()


@pytest.mark.parametrize(
    ("value", "shown"), [(30.0, "30"), (120.0, "120"), (1.5, "1.5"), (0.2, "0.2"), (0.05, "0.05")]
)
def test_busy_timeouts_are_shown_with_a_sensible_precision(value, shown):
    from mlbaseline.history.store import _seconds

    assert _seconds(value) == shown


def test_a_corrupt_stored_document_is_that_records_error(tmp_path):
    # one record's fault, not the store's (tests/test_rel_store.py: the others still list)
    path = tmp_path / "h.sqlite"
    store = open_store(str(path))
    (rid, _) = store.add(_record(1))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE documents SET body = x'00112233'")
    with pytest.raises(RecordError, match=rf"history #{rid}: document: does not decompress"):
        store.document(rid)
    store.close()


def test_by_sha256_selects_one_record_by_its_unique_index(tmp_path):
    store = open_store(str(tmp_path / "h.sqlite"))
    recs = [_record(i) for i in range(3)]
    for rec in recs:
        store.add(rec)
    found = store.by_sha256(recs[1].sha256)
    assert found is not None and found.id == 2 and found.git.branch == "main"
    assert found.metrics == {}  # the branch is what the gate needs, not the summaries
    assert store.by_sha256("0" * 64) is None
    stmt = sa.select(sc.results).where(sc.results.c.sha256 == recs[1].sha256)
    with store.engine.connect() as conn:
        sql = str(stmt.compile(conn, compile_kwargs={"literal_binds": True}))
        plan = " ".join(str(r) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
    assert "USING INDEX" in plan, plan
    store.close()
