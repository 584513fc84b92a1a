"""Issue 25, item 3 (RELIABILITY.md 5.2): a password or token in a URL reaches no sink — the
result file, the history's rows and documents, `history list`/`check` output, stderr warnings,
`Error:` lines, the Markdown report — in any form but its redacted one (`u:***@`, `key=***`).
On a real PostgreSQL server: tests/test_history_pg.py (one server for the session)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from history_fakes import stamp, synthetic, write
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve
from mlbaseline.measure.latency_services import HttpService
from mlbaseline.runners.children import write_child_config

runner = CliRunner()
FAST = ["--set", "compare.n_resamples=500"]
SECRET = "S3cr3tPw"
# port 1 on loopback: refused at once, so a store there fails without waiting on a network
PG_REFUSED = f"postgresql://u:{SECRET}@127.0.0.1:1/db"
TOKEN_URL = f"http://127.0.0.1:9/p?api_key={SECRET}&x-api-key={SECRET}&page=2"


def mlb(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "h.sqlite"
    monkeypatch.setenv("MLB_HISTORY", str(path))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    return path


def _pair(tmp_path: Path) -> tuple[Path, Path]:
    return tuple(  # type: ignore[return-value]
        write(synthetic(i, created_at=stamp(i)), tmp_path / f"{i}.json") for i in (1, 2)
    )


def _nowhere(*texts: str | bytes) -> None:
    for text in texts:
        data = text.encode() if isinstance(text, str) else text
        assert SECRET.encode() not in data


def _store_bytes(path: Path) -> bytes:
    """The SQLite file with its WAL (a commit may still sit there)."""
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_result_file_and_history_keep_only_the_redacted_store_url(tmp_path, store):
    a, b = _pair(tmp_path)
    # MLB_HISTORY (the SQLite file) wins over history.store, so the PG URL is only config here
    sets = ["--set", f"history.store={PG_REFUSED}", "--set", f"latency.url={TOKEN_URL}"]
    res = mlb("compare", a, b, "-o", tmp_path / "c.json", *sets, *FAST)
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "c.json").read_text())["config"]
    assert config["history"]["store"] == "postgresql://u:***@127.0.0.1:1/db"
    assert config["latency"]["url"] == "http://127.0.0.1:9/p?api_key=***&x-api-key=***&page=2"
    listed = mlb("history", "list", "--json")
    shown = mlb("history", "show", "1", "--json")
    assert listed.exit_code == shown.exit_code == 0, listed.output + shown.output
    assert json.loads(shown.stdout)["document"]["config"]["history"]["store"].startswith("postgr")
    _nowhere((tmp_path / "c.json").read_bytes(), _store_bytes(store), res.output)
    _nowhere(listed.stdout, listed.stderr, shown.stdout, shown.stderr)


def _old_file_with_a_secret(tmp_path: Path) -> Path:
    """A file written before the redaction: the secret in its config as it was stored."""
    path = write(synthetic(1, created_at=stamp(1)), tmp_path / "old.json")
    doc = json.loads(path.read_text())
    doc["config"]["history"] = {"store": PG_REFUSED}
    doc["config"]["latency"] = {"url": TOKEN_URL}
    path.write_text(json.dumps(doc))
    return path


def test_an_older_file_with_a_secret_is_stored_redacted(tmp_path, store):
    path = _old_file_with_a_secret(tmp_path)
    assert mlb("history", "add", path).exit_code == 0
    again = mlb("history", "add", path, "--json")  # still the file's own SHA-256 as its key
    assert again.exit_code == 0 and json.loads(again.stdout)[0]["new"] is False
    shown = mlb("history", "show", "1", "--json")
    config = json.loads(shown.stdout)["document"]["config"]
    assert config["history"]["store"] == "postgresql://u:***@127.0.0.1:1/db"
    _nowhere(_store_bytes(store), shown.stdout, shown.stderr)


def test_show_config_prints_the_urls_redacted(tmp_path):
    sets = ["--set", f"history.store={PG_REFUSED}", "--set", f"latency.url={TOKEN_URL}"]
    res = mlb("throughput", "--show-config", *sets)
    assert res.exit_code == 0, res.output
    assert "store: postgresql://u:***@127.0.0.1:1/db" in res.stdout
    _nowhere(res.stdout, res.stderr)


def test_an_environment_url_is_written_redacted(tmp_path):
    # the fingerprint's blocking keys copy workload options, a signed dataset URL among them
    result = synthetic(1)
    result.environment["blocking"]["workload.dataset_kwargs"] = {"url": TOKEN_URL}
    path = write(result, tmp_path / "r.json")
    blocking = json.loads(path.read_text())["environment"]["blocking"]
    assert blocking["workload.dataset_kwargs"]["url"].startswith("http://127.0.0.1:9/p?api_key=***")
    _nowhere(path.read_bytes())


def test_a_child_config_file_holds_no_store_url(tmp_path):
    cfg = resolve(None, None)
    cfg = dataclasses.replace(cfg, history=dataclasses.replace(cfg.history, store=PG_REFUSED))
    for changes_only in (False, True):
        path = write_child_config(cfg, tmp_path, f"c{changes_only}.yaml", changes_only=changes_only)
        assert "history" not in yaml.safe_load(path.read_text())
        _nowhere(path.read_bytes())


def test_the_http_service_records_its_url_without_the_token():
    described = HttpService(TOKEN_URL).describe()
    assert described["url"] == "http://127.0.0.1:9/p?api_key=***&x-api-key=***&page=2"


def test_a_report_of_a_file_that_held_a_secret_shows_none(tmp_path):
    path = _old_file_with_a_secret(tmp_path)
    res = mlb("report", path, "-o", tmp_path / "rep", "--no-history", "--json")
    assert res.exit_code == 0, res.output
    written = [p.read_bytes() for p in (tmp_path / "rep").rglob("*") if p.is_file()]
    assert written
    _nowhere(res.stdout, res.stderr, *written)


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [
        pytest.param(
            ["latency", "--url", f"http://user:{SECRET}@127.0.0.1:8x/p"],
            None,
            "'http://user:***@127.0.0.1:8x/p' is not a valid URL",
            id="latency-url-bad-port",
        ),
        pytest.param(
            ["history", "list"],
            f"postgresql+psycopg2://u:{SECRET}@127.0.0.1:1/db",
            "unsupported scheme 'postgresql+psycopg2' in postgresql+psycopg2://u:***@",
            id="store-unsupported-scheme",
        ),
        pytest.param(
            ["history", "list"],
            f"postgresql://u:{SECRET}@127.0.0.1:abc/db",
            "postgresql://u:***@127.0.0.1:abc/db: bad port",
            id="store-bad-port",
        ),
        pytest.param(
            ["history", "list"],
            PG_REFUSED,
            "postgresql://u:***@127.0.0.1:1/db: connection failed",
            id="store-driver-error",
        ),
    ],
)
def test_error_lines_never_echo_a_password(tmp_path, monkeypatch, args, env, shown):
    monkeypatch.chdir(tmp_path)
    if env is not None:
        monkeypatch.setenv("MLB_HISTORY", env)
    res = mlb(*args)
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("Error: ") and shown in line, line
    _nowhere(res.stdout, res.stderr)
    assert list(tmp_path.iterdir()) == []  # and no store folder named after the password


def test_the_not_recorded_warning_never_echoes_a_password(tmp_path, monkeypatch):
    monkeypatch.setenv("MLB_HISTORY", PG_REFUSED)
    a, b = _pair(tmp_path)
    res = mlb("compare", a, b, "-o", tmp_path / "c.json", *FAST)
    assert res.exit_code == 0, res.output  # the store's fault costs a warning, not the result
    assert "warning: not recorded in the history (postgresql://u:***@127.0.0.1:1/db" in res.stderr
    _nowhere(res.stderr, res.stdout, (tmp_path / "c.json").read_bytes())
