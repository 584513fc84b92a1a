"""Issue 25, item 8 (RELIABILITY.md 5.7): the history store's faults are one `Error:` line or
one warning per damaged record, never a traceback, never a local file for a URL it does not
support, and `history add` says what it recorded before it failed."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import pytest
from history_fakes import stamp, synthetic, write
from sqlalchemy import event
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.history import store as store_mod

runner = CliRunner()
FAST = ["--set", "compare.n_resamples=500"]


def mlb(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "h.sqlite"
    monkeypatch.setenv("MLB_HISTORY", str(path))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    return path


def _files(folder: Path, n: int, samples: int = 30) -> list[Path]:
    folder.mkdir(exist_ok=True)
    return [
        write(synthetic(i, n=samples, created_at=stamp(i)), folder / f"r{i}.json") for i in range(n)
    ]


def _warnings(res) -> list[str]:
    """The warning lines of stderr (the human output goes there too)."""
    return [line for line in res.stderr.splitlines() if line.startswith("warning:")]


def _one_error(res) -> str:
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "Traceback" not in res.output, res.output
    return line


# ---------------------------------------------------------------- where the store is


@pytest.mark.parametrize(
    ("location", "scheme"),
    [
        pytest.param(
            "postgresql+psycopg2://u:pw@127.0.0.1:1/db", "postgresql+psycopg2", id="psycopg2"
        ),
        pytest.param("mysql://u:pw@127.0.0.1/db", "mysql", id="mysql"),
        pytest.param("sqlite+pysqlite:///h.sqlite", "sqlite+pysqlite", id="sqlite-driver"),
        pytest.param("file:///tmp/h.sqlite", "file", id="file"),
    ],
)
def test_an_unsupported_scheme_is_an_error_never_a_path(tmp_path, monkeypatch, location, scheme):
    files = _files(tmp_path / "in", 1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLB_HISTORY", location)
    line = _one_error(mlb("history", "add", *files))
    assert f"history.store: unsupported scheme '{scheme}'" in line
    assert "(supported: an SQLite path, sqlite:///PATH, postgresql://…)" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no store made anywhere


def test_a_scheme_in_capitals_is_the_same_scheme(tmp_path, monkeypatch):
    # RFC 3986: schemes are case-insensitive; PostgreSQL:// is PostgreSQL, not a folder
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLB_HISTORY", "PostgreSQL://u:pw@127.0.0.1:1/db")
    line = _one_error(mlb("history", "add", *_files(tmp_path / "in", 1)))
    assert "PostgreSQL://u:***@127.0.0.1:1/db: connection failed" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_a_sqlite_url_is_that_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLB_HISTORY", "sqlite:///sub/h.sqlite")
    assert mlb("history", "add", *_files(tmp_path / "in", 2)).exit_code == 0
    assert (tmp_path / "sub" / "h.sqlite").is_file()
    assert len(json.loads(mlb("history", "list", "--json").stdout)) == 2


@pytest.mark.parametrize(
    ("where", "shown"),
    [
        pytest.param("127.0.0.1:abc", "postgresql://u:***@127.0.0.1:abc/db: bad port", id="text"),
        pytest.param(
            "127.0.0.1:99999", "postgresql://u:***@127.0.0.1:99999/db: bad port", id="out-of-range"
        ),
        pytest.param("[::1", "postgresql://***/db: not a valid URL", id="broken-ipv6"),
    ],
)
def test_a_bad_port_is_one_error_line(tmp_path, monkeypatch, where, shown):
    monkeypatch.setenv("MLB_HISTORY", f"postgresql://u:pw@{where}/db")
    line = _one_error(mlb("history", "list"))
    assert f"history.store: {shown} (" in line


def test_a_driver_error_is_one_line(tmp_path, monkeypatch):
    # port 1 on loopback refuses at once: psycopg's OperationalError, wrapped
    monkeypatch.setenv("MLB_HISTORY", "postgresql://u:pw@127.0.0.1:1/db")
    line = _one_error(mlb("history", "list"))
    assert line.startswith("Error: postgresql://u:***@127.0.0.1:1/db: connection failed")


# ---------------------------------------------------------------- history add, part way


def test_history_add_says_what_was_recorded_before_a_failure(tmp_path, store, monkeypatch):
    """A full disk part way (SQLite's own SQLITE_FULL, through max_page_count): the error
    names the files already in the store, and they are there."""
    files = _files(tmp_path / "in", 6, samples=300)  # ~5 pages of compressed document each
    assert mlb("history", "add", files[0]).exit_code == 0
    with sqlite3.connect(store) as conn:
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
    engine_of = store_mod._sqlite_engine

    def full_soon(path: Path):
        engine = engine_of(path)
        event.listen(
            engine, "connect", lambda c, _r: c.execute(f"PRAGMA max_page_count = {pages + 14}")
        )
        return engine

    monkeypatch.setattr(store_mod, "_sqlite_engine", full_soon)
    line = _one_error(mlb("history", "add", *files[1:]))
    monkeypatch.setattr(store_mod, "_sqlite_engine", engine_of)
    assert "database or disk is full" in line
    kept = len(json.loads(mlb("history", "list", "--json").stdout)) - 1
    assert 0 < kept < 5
    names = ", ".join(str(f) for f in files[1 : 1 + kept])
    assert f"({kept} of 5 files were recorded before this: {names})" in line


# ---------------------------------------------------------------- damaged records


def _damage_row(path: Path, rid: int, how: str) -> None:
    statements = {
        "median-text": "UPDATE metrics SET median = 'abc' WHERE result_id = ?",
        "n-text": "UPDATE metrics SET n = 'many' WHERE result_id = ?",
        "kind-blob": "UPDATE results SET kind = X'07' WHERE id = ?",  # TEXT affinity keeps a blob
    }
    with sqlite3.connect(path) as conn:
        conn.execute(statements[how], (rid,))


@pytest.mark.parametrize(
    ("how", "field"),
    [
        pytest.param("median-text", "].median: expected a number, got 'abc'", id="median-text"),
        pytest.param("n-text", "].n: expected a whole number, got 'many'", id="n-text"),
        pytest.param("kind-blob", "results.kind: expected text, got b'\\x07'", id="kind-blob"),
    ],
)
def test_a_damaged_row_costs_that_record_only(tmp_path, store, how, field):
    assert mlb("history", "add", *_files(tmp_path / "in", 5)).exit_code == 0
    _damage_row(store, 3, how)
    listed = mlb("history", "list", "--json")
    exported = mlb("history", "export", "--csv")
    checked = mlb("history", "check", "--json")
    for res in (listed, exported, checked):
        assert res.exit_code == 0, res.output
        (warning,) = _warnings(res)
        assert warning.startswith("warning: history #3: ") and field in warning, warning
        assert warning.endswith("; that record is left out")
    assert [e["id"] for e in json.loads(listed.stdout)] == [1, 2, 4, 5]
    assert {row.split(",")[0] for row in exported.stdout.splitlines()[1:]} == {"1", "2", "4", "5"}
    assert [s["n"] for s in json.loads(checked.stdout)["series"]][:1] == [4]
    new = write(synthetic(9, created_at=stamp(9)), tmp_path / "new.json")
    gate = mlb("history", "gate", new, "--json", *FAST)
    assert gate.exit_code == 0, gate.output
    history = json.loads(gate.stdout)["data"]["history"]
    # the gate reads documents, not metric rows: the damage costs it record 3 at most
    assert set(history["baselines"]) - {3} == {1, 2, 4, 5}
    assert mlb("history", "show", "2").exit_code == 0
    line = _one_error(mlb("history", "show", "3"))
    assert field in line and "mlb history rm 3 --force deletes it" in line
    assert mlb("history", "rm", "3", "--force").exit_code == 0
    assert _warnings(mlb("history", "list")) == []


def test_the_gate_names_a_damaged_baseline_it_left_out(tmp_path, store):
    assert mlb("history", "add", *_files(tmp_path / "in", 5)).exit_code == 0
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE results SET status = X'07' WHERE id = 3")
    new = write(synthetic(9, created_at=stamp(9)), tmp_path / "new.json")
    gate = mlb("history", "gate", new, "--json", *FAST)
    assert gate.exit_code == 0, gate.output
    history = json.loads(gate.stdout)["data"]["history"]
    assert history["baselines"] == [1, 2, 4, 5]
    assert history["skipped"] == [
        "history #3: results.status: expected text, got b'\\x07'; that record is left out"
    ]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        pytest.param(b"\x00\x11\x22", "history #3: document: does not decompress", id="not-zlib"),
        pytest.param(zlib.compress(b"not json {"), "history #3:", id="not-json"),
        pytest.param(
            zlib.compress(b'{"schema_version": "1.0", "kind": "throughput", "measurements": 5}'),
            "history #3:",
            id="wrong-nested-type",
        ),
    ],
)
def test_a_damaged_document_costs_that_record_only(tmp_path, store, body, problem):
    assert mlb("history", "add", *_files(tmp_path / "in", 5)).exit_code == 0
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE documents SET body = ? WHERE result_id = 3", (body,))
    bad = mlb("history", "show", "3", "--json")
    assert bad.exit_code == 0, bad.output  # the record's summary is valid data: shown, marked
    shown = json.loads(bad.stdout)
    assert shown["document"] is None and shown["document_error"].startswith(problem)
    (warning,) = _warnings(bad)
    assert warning.startswith(f"warning: {problem}") and "without its document" in warning
    good = mlb("history", "show", "2", "--json")
    assert good.exit_code == 0 and json.loads(good.stdout)["document"]["kind"] == "throughput"
    new = write(synthetic(9, created_at=stamp(9)), tmp_path / "new.json")
    gate = mlb("history", "gate", new, "--json", *FAST)
    assert gate.exit_code == 0, gate.output
    history = json.loads(gate.stdout)["data"]["history"]
    assert history["baselines"] == [1, 2, 4, 5] and history["skipped"][0].startswith("#3: ")
