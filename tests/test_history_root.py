"""The default history store lives at the project's root, not in the cwd; `history list` says
where it is; a store of schema 3 gains the run-label columns on upgrade."""

from __future__ import annotations

import json
import re
import sqlite3
import zlib
from pathlib import Path

import pytest
from history_fakes import stamp, synthetic, write
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.history import schema as sc
from mlbaseline.history.record import GitInfo, record_of
from mlbaseline.history.store import (
    DEFAULT_PATH,
    PROJECT_MARKERS,
    Query,
    Store,
    _sqlite_engine,
    open_store,
    project_root,
    resolve_location,
)
from mlbaseline.runners import history as hist

runner = CliRunner()


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A project (`pyproject.toml` at its root) with two sub-folders, and no MLB_HISTORY."""
    root = tmp_path / "proj"
    for sub in ("a/deep", "b"):
        (root / sub).mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    monkeypatch.delenv("MLB_HISTORY", raising=False)
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    monkeypatch.setenv("MLB_GIT_COMMIT", "c0ffee0000")
    return root


def test_the_root_is_the_nearest_folder_up_with_git_or_pyproject(tmp_path: Path, monkeypatch):
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "lib" / "inner"
    (inner / "src").mkdir(parents=True)
    (outer / ".git").mkdir()
    assert project_root(inner / "src") == outer.resolve()
    (inner / "pyproject.toml").write_text("")
    assert project_root(inner / "src") == inner.resolve()  # the nearest one wins
    lone = tmp_path / "lone"
    lone.mkdir()
    # outside any project: the folder itself (or a folder above tmp that is a project)
    root = project_root(lone)
    assert root == lone.resolve() or any((root / m).exists() for m in PROJECT_MARKERS)
    monkeypatch.delenv("MLB_HISTORY", raising=False)
    assert resolve_location(None, lone) == str(root / DEFAULT_PATH)


def test_env_and_config_still_win_over_the_root(project: Path, monkeypatch):
    sub = project / "b"
    assert resolve_location(None, sub) == str(project.resolve() / DEFAULT_PATH)
    assert resolve_location("cfg.sqlite", sub) == "cfg.sqlite"
    monkeypatch.setenv("MLB_HISTORY", "/env/h.sqlite")
    assert resolve_location("cfg.sqlite", sub) == "/env/h.sqlite"


def test_runs_from_two_sub_folders_land_in_one_store(project: Path, monkeypatch):
    # a measuring command records its result itself; `history add` records a file
    monkeypatch.chdir(project / "a/deep")
    res = runner.invoke(app, ["env-check", "-o", "env.json", "--quiet", "--name", "deep"])
    assert res.exit_code in (0, 1), res.output  # 1: a check failed on this machine
    monkeypatch.chdir(project / "b")
    path = write(synthetic(1, created_at=stamp(1)), Path("r1.json"))
    res = runner.invoke(app, ["history", "add", str(path)])
    assert res.exit_code == 0, res.output
    recorded = [(project / "a/deep/env.json").resolve(), path.resolve()]
    store = project.resolve() / DEFAULT_PATH
    assert store.is_file()
    assert not any((project / sub / "mlb-results").exists() for sub in ("a/deep", "b"))
    for sub in ("a/deep", "b", "."):
        monkeypatch.chdir(project / sub)
        res = runner.invoke(app, ["history", "list", "--json"])
        assert res.exit_code == 0, res.output
        assert sorted(Path(e["path"]) for e in json.loads(res.stdout)) == sorted(recorded)
        shown = runner.invoke(app, ["history", "list"], env={"COLUMNS": "200"})
        assert f"store: {store}" in shown.stderr
        assert "history: 2 results" in shown.stderr
        assert re.search(r" deep\s*$", shown.stderr, re.MULTILINE)  # the env-check's --name


def test_history_list_names_an_empty_store_too(project: Path, monkeypatch):
    monkeypatch.chdir(project / "b")
    res = runner.invoke(app, ["history", "list"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert f"store: {project.resolve() / DEFAULT_PATH}" in res.stderr
    assert "history: 0 results" in res.stderr
    assert not (project / DEFAULT_PATH).exists()  # listing creates nothing


def test_the_location_shown_has_no_password(monkeypatch):
    monkeypatch.setenv("MLB_HISTORY", "postgresql://u:s3cret@db.example/h")
    shown = hist.shown_location(resolve(None, None))
    assert "s3cret" not in shown and "u:***@db.example" in shown


# ---------------------------------------------------------------- migration 4


def _v3_store(path: Path) -> Store:
    """A store as mlb before run labels made it: schema 3, no `name` / `tags` columns."""
    store = Store(_sqlite_engine(path), str(path))
    assert store.migrate(upto=3) == 3
    store.close()
    with sqlite3.connect(path) as conn:
        for column in ("name", "tags"):
            conn.execute(f"ALTER TABLE results DROP COLUMN {column}")
    return Store(_sqlite_engine(path), str(path))


def test_upgrade_adds_the_label_columns_filled_from_the_documents(tmp_path: Path):
    path = tmp_path / "h.sqlite"
    store = _v3_store(path)
    named = synthetic(1, created_at=stamp(1))
    named.config["history"] = {"name": "nightly", "tags": ["gpu", "main"]}
    plain = synthetic(2, created_at=stamp(2))
    with store.engine.begin() as conn:
        for i, result in enumerate((named, plain)):
            body = write(result, tmp_path / f"{i}.json").read_bytes()
            row = _row(record_of(result, body, f"{i}.json", GitInfo()))
            rid = conn.execute(sc.results.insert().values(**row).returning(sc.results.c.id))
            rid = rid.scalar_one()
            conn.execute(sc.documents.insert().values(result_id=rid, body=zlib.compress(body)))
    store.close()
    upgraded = open_store(str(path), create=False)
    assert upgraded.version() == sc.LATEST == 4
    found = upgraded.entries(Query())
    assert [(e.name, e.tags) for e in found] == [("nightly", ("gpu", "main")), (None, ())]
    assert [e.id for e in upgraded.entries(Query(tag="gpu"))] == [found[0].id]
    upgraded.close()


def _row(rec) -> dict:
    """The results row of schema 3 (no name / tags)."""
    from mlbaseline.history.store import _result_row

    row = _result_row(rec)
    del row["name"], row["tags"]
    return row


def test_a_deleted_cwd_is_one_error_line(tmp_path: Path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # the shell's folder removed under it: no project root to look up from
    monkeypatch.delenv("MLB_HISTORY", raising=False)
    res = runner.invoke(app, ["history", "list"])
    assert res.exit_code == 2
    assert res.stderr.strip().startswith("Error: history.store: cannot find the project root")
    assert "Traceback" not in res.output
