"""`mlb history …` and the recording step: commands, exit codes, the gate, the report hook."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from history_fakes import stamp, synthetic, write
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.config import resolve

runner = CliRunner()
FAST = ["--set", "compare.n_resamples=500"]


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "h.sqlite"
    monkeypatch.setenv("MLB_HISTORY", str(path))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    monkeypatch.setenv("MLB_GIT_COMMIT", "c0ffee0000")
    return path


def mlb(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _series(tmp_path: Path, n: int, slow_from: int | None = None, factor: float = 1.15) -> list:
    files = []
    for i in range(n):
        slower = {"backward": factor} if slow_from is not None and i >= slow_from else None
        files.append(
            write(synthetic(i, slower=slower, created_at=stamp(i)), tmp_path / f"{i}.json")
        )
    return files


def flat(text: str) -> str:
    """Rich wraps stderr at 80 columns: compare words, not lines."""
    return " ".join(text.split())


def _listed() -> list[dict]:
    res = mlb("history", "list", "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


# ---------------------------------------------------------------- recording


def test_every_written_result_is_recorded_unless_opted_out(tmp_path, store):
    a, b = _series(tmp_path, 2)
    res = mlb("compare", a, b, "-o", tmp_path / "c.json", *FAST)
    assert res.exit_code == 0, res.output
    (rec,) = _listed()
    assert rec["kind"] == "compare" and rec["git"] == {
        "commit": "c0ffee0000",
        "branch": "main",
        "dirty": None if rec["git"]["dirty"] is None else rec["git"]["dirty"],
    }
    assert mlb("compare", a, b, "-o", tmp_path / "d.json", "--no-history", *FAST).exit_code == 0
    off = ["--set", "history.record=false"]
    assert mlb("compare", a, b, "-o", tmp_path / "e.json", *off, *FAST).exit_code == 0
    assert len(_listed()) == 1


def test_a_broken_store_costs_a_warning_never_the_result(tmp_path, store):
    store.write_text("not a database\n")
    a, b = _series(tmp_path, 2)
    res = mlb("compare", a, b, "-o", tmp_path / "c.json", *FAST)
    assert res.exit_code == 0, res.output
    assert "warning: not recorded in the history" in res.stderr
    assert json.loads((tmp_path / "c.json").read_text())["kind"] == "compare"
    assert store.read_text() == "not a database\n"
    res = mlb("history", "list")
    assert res.exit_code == 2
    assert res.stderr.startswith("Error: ") and len(res.stderr.strip().splitlines()) == 1
    assert "not an mlb history store" in res.stderr


# ---------------------------------------------------------------- add / list / show / export / rm


def test_add_list_show_export_rm(tmp_path, store):
    files = _series(tmp_path, 3)
    res = mlb("history", "add", *files)
    assert res.exit_code == 0, res.output
    assert "recorded as #3" in flat(res.stderr)
    assert "already recorded as #1" in flat(mlb("history", "add", files[0]).stderr)
    assert [r["id"] for r in _listed()] == [1, 2, 3]
    res = mlb("history", "list", "--json", "--since", stamp(1), "--metric", "train.*.step")
    assert [r["id"] for r in json.loads(res.stdout)] == [2, 3]
    assert mlb("history", "list", "--since", "yesterday").exit_code == 2
    shown = json.loads(mlb("history", "show", "2", "--json").stdout)
    assert shown["document"]["kind"] == "throughput" and shown["path"] == str(files[1].resolve())
    assert mlb("history", "show", "99").exit_code == 2
    csv_text = mlb("history", "export", "--csv").stdout
    lines = csv_text.splitlines()
    assert lines[0].startswith("id,kind,status") and len(lines) == 1 + 3 * 6  # 6 metrics each
    exported = json.loads(mlb("history", "export", "--json").stdout)
    assert [e["id"] for e in exported] == [1, 2, 3]
    res = mlb("history", "rm", "2")
    assert res.exit_code == 2 and "--force" in res.stderr
    assert mlb("history", "rm", "2", "--force").exit_code == 0
    assert [r["id"] for r in _listed()] == [1, 3] and files[1].exists()


def test_add_refuses_a_file_that_is_not_a_result(tmp_path, store):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    res = mlb("history", "add", bad)
    assert res.exit_code == 2 and res.stderr.startswith("Error: ")
    assert not store.exists()  # validated before the store was created


def _unreadable(p: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the suite may run as root, which chmod cannot lock out: refuse this one file's read
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self == p:
            raise PermissionError(13, "Permission denied", str(p))
        return real(self)

    p.write_text("{}")
    monkeypatch.setattr(Path, "read_bytes", read_bytes)


BAD_FILES = {
    "missing": lambda p, mp: None,
    "folder": lambda p, mp: p.mkdir(),
    "unreadable": _unreadable,
    "empty": lambda p, mp: p.write_text(""),
    "not-json": lambda p, mp: p.write_text("<html>not json</html>\n"),
    "not-utf8": lambda p, mp: p.write_bytes(b"\xff\xfe\x00garbage"),
    "no-schema": lambda p, mp: p.write_text('{"kind": "throughput"}'),
    "future-schema": lambda p, mp: p.write_text('{"schema_version": "9.0", "kind": "x"}'),
    "top-level-list": lambda p, mp: p.write_text("[1, 2]"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_add_and_compare_give_one_message_for_one_fault(tmp_path, store, monkeypatch, case):
    """`history add` reads a result file with load_result's own reader: the same fault is
    the same one-line error there, through `mlb compare`, and from the library calls."""
    from mlbaseline.errors import ResultFileError
    from mlbaseline.history.record import record_file
    from mlbaseline.results import load_result

    (good,) = _series(tmp_path, 1)
    bad = tmp_path / "bad.json"
    BAD_FILES[case](bad, monkeypatch)
    errors = []
    for call in (load_result, record_file):
        with pytest.raises(ResultFileError) as err:
            call(bad)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and errors[0].startswith(f"{bad}: ")
    added, compared = mlb("history", "add", bad), mlb("compare", good, bad, *FAST)
    assert added.exit_code == compared.exit_code == 2
    assert flat(added.stderr) == flat(compared.stderr) == f"Error: {errors[0]}"
    assert not store.exists()  # refused before the store was created


def test_listing_an_empty_history(store):
    res = mlb("history", "list", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout) == [] and not store.exists()


# ---------------------------------------------------------------- check / trend


def test_check_names_the_run_and_the_stage(tmp_path, store):
    files = _series(tmp_path, 12, slow_from=7)
    assert mlb("history", "add", *files).exit_code == 0
    res = mlb("history", "check", "--json")
    assert res.exit_code == 0, res.output
    doc = {s["metric"]: s for s in json.loads(res.stdout)["series"]}
    (cp,) = doc["train.bs64.backward"]["change_points"]
    assert cp["run"]["id"] == 8 and cp["run"]["path"] == str(files[7].resolve())
    assert cp["direction"] == "regression" and cp["status"] == "confirmed"
    assert cp["ci_low"] > 0.05 and cp["commit_range"] == ["c0ffee0000", "c0ffee0000"]
    assert doc["train.bs64.forward"]["change_points"] == []
    assert "train.bs64.residual" not in doc
    text = flat(mlb("history", "check").stderr)
    assert "run #8" in text and "train.bs64.backward +" in text and "(regression)" in text


def test_check_shows_a_tail_step_as_suspected(tmp_path, store):
    files = _series(tmp_path, 12, slow_from=11, factor=1.3)
    assert mlb("history", "add", *files).exit_code == 0
    res = mlb("history", "check", "--metric", "train.bs64.backward")
    assert res.exit_code == 0
    text = flat(res.stderr)
    assert "suspected*" in text and "suspected*: needs more runs" in text


def test_trend_writes_a_table_and_a_png(tmp_path, store):
    assert mlb("history", "add", *_series(tmp_path, 6, slow_from=3)).exit_code == 0
    png = tmp_path / "t.png"
    res = mlb("history", "trend", "train.bs64.*", "-o", png)
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "train.bs64.backward" in res.stderr and "#6" in res.stderr
    assert mlb("history", "trend", "train.bs64.*", "-o", png).exit_code == 2  # no --force
    assert mlb("history", "trend", "nothing.*", "-o", tmp_path / "u.png").exit_code == 2


# ---------------------------------------------------------------- the gate


def _baselines(tmp_path: Path, n: int = 6, branch: str = "main", env: dict | None = None):
    files = []
    for i in range(n):
        r = synthetic(i, created_at=stamp(i), env=env)
        files.append(write(r, tmp_path / f"b{branch}{i}.json"))
    return files


def test_gate_exit_codes(tmp_path, store, monkeypatch):
    assert mlb("history", "add", *_baselines(tmp_path)).exit_code == 0
    same = write(synthetic(50, created_at=stamp(60)), tmp_path / "same.json")
    slow = write(
        synthetic(51, slower={"backward": 1.2}, created_at=stamp(61)), tmp_path / "slow.json"
    )
    res = mlb("history", "gate", same, *FAST)
    assert res.exit_code == 0, res.output
    res = mlb("history", "gate", slow, "-o", tmp_path / "g.json", *FAST)
    assert res.exit_code == 1, res.output
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["data"]["history"]["baselines"] == [2, 3, 4, 5, 6]  # the last 5 (gate_last)
    judged = {m["metric"]: m["verdict"] for m in doc["data"]["metrics"]}
    assert judged["train.bs64.backward"] == "regressed"
    assert judged["train.bs64.forward"] != "regressed"
    assert (
        len(
            json.loads(mlb("history", "gate", same, "--last", "2", "--json", *FAST).stdout)["data"][
                "history"
            ]["baselines"]
        )
        == 2
    )
    other = write(synthetic(52, created_at=stamp(62), env={"device": "cuda"}), tmp_path / "o.json")
    res = mlb("history", "gate", other, *FAST)
    assert res.exit_code == 3 and "nothing comparable in history" in res.stderr
    res = mlb("history", "gate", same, "--branch", "release", *FAST)
    assert res.exit_code == 3 and "branch release" in res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("[1,")
    assert mlb("history", "gate", bad).exit_code == 2


def test_gate_without_any_store_is_not_comparable(tmp_path, store):
    new = write(synthetic(1, created_at=stamp(1)), tmp_path / "n.json")
    res = mlb("history", "gate", new)
    assert res.exit_code == 3 and "nothing comparable in history" in res.stderr


def test_gate_never_uses_the_new_file_itself(tmp_path, store):
    assert mlb("history", "add", *_baselines(tmp_path, 2)).exit_code == 0
    new = write(synthetic(9, created_at=stamp(9)), tmp_path / "n.json")
    assert mlb("history", "add", new).exit_code == 0  # recorded when mlb wrote it
    doc = json.loads(mlb("history", "gate", new, "--json", *FAST).stdout)
    assert doc["data"]["history"]["baselines"] == [1, 2]


def test_gate_reads_new_once_and_finds_its_recorded_branch(tmp_path, store, monkeypatch):
    assert mlb("history", "add", *_baselines(tmp_path, 2)).exit_code == 0
    new = write(synthetic(9, created_at=stamp(9)), tmp_path / "n.json")
    monkeypatch.setenv("MLB_GIT_BRANCH", "topic")
    assert mlb("history", "add", new).exit_code == 0  # recorded on branch topic
    topic = [write(synthetic(i, created_at=stamp(i)), tmp_path / f"t{i}.json") for i in (3, 4)]
    assert mlb("history", "add", *topic).exit_code == 0
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")  # the checkout moved on since
    reads: list[str] = []
    read_bytes, read_text = Path.read_bytes, Path.read_text

    def counted(original):
        def read(self, *args, **kwargs):
            if self.name == "n.json":
                reads.append(original.__name__)
            return original(self, *args, **kwargs)

        return read

    monkeypatch.setattr(Path, "read_bytes", counted(read_bytes))
    monkeypatch.setattr(Path, "read_text", counted(read_text))
    res = mlb("history", "gate", new, "--json", *FAST)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert reads == ["read_bytes"]
    assert doc["data"]["history"]["branch"] == "topic"
    assert doc["data"]["history"]["baselines"] == [4, 5]


def test_check_rows_have_one_shape_short_or_not(tmp_path, store):
    from mlbaseline.history.store import Query
    from mlbaseline.runners.history import check, series

    assert mlb("history", "add", *_series(tmp_path, 5)).exit_code == 0
    cfg = resolve(None, None, {})
    found = series(cfg, Query(), ["train.bs64.step"])
    (long,), (short,) = check(cfg, found, 4), check(cfg, found, 6)
    assert set(short) == set(long) | {"too_short"} and short["too_short"] is True
    assert short["method"] is None and short["change_points"] == short["outliers"] == []
    assert {k: short[k] for k in ("unit", "higher_is_better", "n")} == {
        k: long[k] for k in ("unit", "higher_is_better", "n")
    }


def test_report_view_of_a_locked_store_is_none_not_a_crash(tmp_path, store, monkeypatch):
    import sqlite3

    import mlbaseline.history.store as st
    from mlbaseline.runners.history import report_view

    assert mlb("history", "add", *_series(tmp_path, 3)).exit_code == 0
    with sqlite3.connect(store, isolation_level=None) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    monkeypatch.setattr(st, "BUSY_TIMEOUT_S", 0.05)
    reader = sqlite3.connect(store, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT * FROM results").fetchall()
        assert report_view([synthetic(1, created_at=stamp(1))], resolve(None, None, {})) is None
    finally:
        reader.close()


def test_a_locked_store_is_one_error_line_naming_what_waited(tmp_path, store, monkeypatch):
    """Another process holds the write lock: `history list` still reads (WAL), and
    `history add` gives up with one line saying it waited to write, and how long."""
    import sqlite3

    import mlbaseline.history.store as st

    assert mlb("history", "add", *_series(tmp_path, 1)).exit_code == 0
    monkeypatch.setattr(st, "BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(store, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        listed = mlb("history", "list")
        added = mlb("history", "add", write(synthetic(5, created_at=stamp(5)), tmp_path / "5.json"))
    finally:
        holder.close()
    assert listed.exit_code == 0, listed.stderr
    assert added.exit_code == 2 and flat(added.stderr) == (
        f"Error: {store}: gave up writing after waiting 0.2 s: "
        "the store is locked by another process"
    )


# ---------------------------------------------------------------- the report hook


def test_report_view_and_section(tmp_path, store):
    from mlbaseline.report.context import ReportContext
    from mlbaseline.report.render import render_report
    from mlbaseline.report.sections_history import section_history, trend_figure
    from mlbaseline.runners.history import report_view

    files = _series(tmp_path, 8, slow_from=4)
    assert mlb("history", "add", *files).exit_code == 0
    cfg = resolve(None, None, {})
    result = synthetic(3, created_at=stamp(3))
    view = report_view([result], cfg)
    assert view is not None and [line.label for line in view.lines] == ["train.bs64.step"]
    assert view.runs == [f"#{i}" for i in range(1, 9)] and view.marks
    png = trend_figure(view, tmp_path / "h.png")
    ctx = ReportContext(results=[result], sources=[None])
    ctx.history = view  # type: ignore[attr-defined]
    ctx.figures = {"history": "figures/history.png"}
    text = "\n".join(section_history(ctx))
    assert "## History" in text and "figures/history.png" in text and "#5" in text
    assert png.stat().st_size > 0
    out = render_report([result], tmp_path / "rep", history=view)
    md = out.markdown_path.read_text()
    assert "](figures/history.png)" in md.split("## History", 1)[1]
    assert (tmp_path / "rep" / "figures" / "history.png").is_file()
    other = synthetic(3, env={"device": "cuda"})
    assert report_view([other], cfg) is None
    empty = ReportContext(results=[other], sources=[None])
    assert "_Not measured" in "\n".join(section_history(empty))


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_ci_gate_makefile_against_history(tmp_path, store):
    """examples/ci-gate.mk's perf-gate-history, as docs/REFERENCE.md shows (one fresh process)."""
    assert mlb("history", "add", *_baselines(tmp_path)).exit_code == 0
    slow = write(
        synthetic(51, slower={"backward": 1.2}, created_at=stamp(61)), tmp_path / "slow.json"
    )
    repo = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [
            "make", "-s", "-f", str(repo / "examples/ci-gate.mk"), "perf-gate-history",
            f"MLB={Path(sys.executable).parent / 'mlb'}", f"CANDIDATE={slow}",
            "COMPARE_FLAGS=--quiet --set compare.n_resamples=500",
        ],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode != 0
    assert "perf-gate-history: REGRESSION against the history" in res.stdout
