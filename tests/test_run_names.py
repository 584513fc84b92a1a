"""`--name` / `--tag`: on every measuring command, kept in the result's config
(`history.name` / `history.tags`), recorded and filterable in the history, shown by
`history list`, the report's headline and `mlb compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main
from history_fakes import stamp, synthetic, write
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.cli.common import MEASURING
from mlbaseline.comparison.labels import RunLabel, check_label, names_of, run_label
from mlbaseline.errors import ConfigError
from mlbaseline.history.record import config_hash, fingerprint_hash
from mlbaseline.report.inputs import collect
from mlbaseline.report.markdown import render_markdown
from mlbaseline.report.render import build_context
from mlbaseline.results import load_result

runner = CliRunner()
GOLDEN = Path(__file__).resolve().parent / "golden" / "report"
FAST = ["--set", "compare.n_resamples=500"]


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "h.sqlite"
    monkeypatch.setenv("MLB_HISTORY", str(path))
    monkeypatch.setenv("MLB_GIT_BRANCH", "main")
    monkeypatch.setenv("MLB_GIT_COMMIT", "c0ffee0000")
    return path


def mlb(*args: object):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "80"})


def _named(seed: int, path: Path, name: str | None, tags: list[str] | None = None) -> Path:
    result = synthetic(seed, created_at=stamp(seed))
    if name is not None or tags:
        result.config["history"] = {"name": name or "", "tags": tags or []}
    return write(result, path)


def _options(command: str) -> set[str]:
    group = typer.main.get_command(app)
    found = group.commands[command]  # type: ignore[attr-defined]
    return {opt for p in found.params for opt in p.opts}


# ---------------------------------------------------------------- the options


@pytest.mark.parametrize("command", MEASURING)
def test_every_measuring_command_takes_name_and_tag(command: str):
    assert {"--name", "--tag"} <= _options(command)


@pytest.mark.parametrize("command", ["compare", "report"])
def test_commands_that_measure_nothing_do_not(command: str):
    assert not {"--name", "--tag"} & _options(command)


def test_name_and_tags_reach_the_resolved_config():
    res = mlb("latency", "--name", "try 2", "--tag", "gpu", "--tag", "gpu", "--tag", "x",
              "--show-config")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "name: try 2" in res.stdout and "tags:\n  - gpu\n  - x\n" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tag", "a,b"], "Error: --tag: expected a word without commas, got 'a,b'"),
        (["--tag", ""], "Error: --tag: expected a word without commas, got ''"),
        (["--name", "  "], "Error: --name: expected one non-empty line of text, got '  '"),
    ],
)
def test_a_bad_label_is_one_error_line(args: list[str], message: str):
    res = mlb("throughput", *args, "--show-config")
    assert res.exit_code == 2
    assert res.stderr.strip() == message and "Traceback" not in res.output


def test_the_label_is_not_what_was_measured():
    """Two runs named differently stay one series and one config."""
    a, b = synthetic(1), synthetic(1)
    b.config["history"] = {"name": "other", "tags": ["t"]}
    assert config_hash(a) == config_hash(b) and fingerprint_hash(a) == fingerprint_hash(b)


def test_labels_read_from_plain_and_ab_configs():
    assert run_label({"history": {"name": "n", "tags": ["a"]}}) == RunLabel("n", ("a",))
    assert run_label({"a": {"history": {"name": "ab"}}, "b": {}}).name == "ab"
    assert not run_label({}) and not run_label(None)
    assert RunLabel("n", ("a", "b")).text() == "n [a, b]"
    assert names_of([{"history": {"name": "x`y"}}, {}, {"history": {"name": "x`y"}}]) == "x'y"
    assert check_label("ok", ["a", "b"]) == []


# ---------------------------------------------------------------- history


def test_history_records_lists_and_filters_by_name_and_tag(tmp_path, store):
    files = [
        _named(0, tmp_path / "0.json", "nightly", ["gpu"]),
        _named(1, tmp_path / "1.json", None),
        _named(2, tmp_path / "2.json", "try-2", ["gpu", "main"]),
    ]
    assert mlb("history", "add", *files).exit_code == 0
    listed = json.loads(mlb("history", "list", "--json").stdout)
    assert [(e["name"], e["tags"]) for e in listed] == [
        ("nightly", ["gpu"]),
        (None, []),
        ("try-2", ["gpu", "main"]),
    ]
    table = mlb("history", "list")
    assert "nightly" in table.stderr and "try-2" in table.stderr and "[gpu, main]" in table.stderr
    by_tag = json.loads(mlb("history", "list", "--tag", "gpu", "--json").stdout)
    assert [e["name"] for e in by_tag] == ["nightly", "try-2"]
    by_name = json.loads(mlb("history", "list", "--name", "try-2", "--json").stdout)
    assert [e["id"] for e in by_name] == [3]
    # a tag matches whole: `gp` and `%` find nothing
    for tag in ("gp", "%", '"'):
        assert json.loads(mlb("history", "list", "--tag", tag, "--json").stdout) == []
    exported = mlb("history", "export", "--csv").stdout.splitlines()
    header = exported[0].split(",")
    assert {"run_name", "run_tags"} <= set(header)
    assert any('try-2,"gpu,main"' in line for line in exported[1:])


# ---------------------------------------------------------------- report and compare


def _golden_named(tmp_path: Path, name: str) -> Path:
    doc = json.loads((GOLDEN / "throughput.json").read_text())
    doc["config"]["history"] = {**doc["config"].get("history", {}), "name": name, "tags": ["t"]}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_report_headline_names_the_run_and_labels_rows_by_name(tmp_path):
    paths = [_golden_named(tmp_path, "before"), _golden_named(tmp_path, "after")]
    assert run_label(load_result(paths[0]).config).name == "before"
    found = collect(paths)
    text = render_markdown(build_context(found.items, manifest=found.manifest))
    head = text.split("## ", 2)[1]  # the first section: At a glance
    assert "- **Run:** `before [t], after [t]`" in head
    assert "(before)" in head and "(after)" in head


def test_compare_labels_old_and_new_by_name(tmp_path, store):
    old = _named(0, tmp_path / "old.json", "main-nightly")
    new = _named(1, tmp_path / "new.json", None)
    res = mlb("compare", old, new, "--json", "--no-history", *FAST)
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(res.stdout)
    assert doc["data"]["old"]["label"] == f"main-nightly ({old})"
    assert doc["data"]["new"]["label"] == str(new)
    assert "main-nightly" in " ".join(res.stderr.split())


# ---------------------------------------------------------------- the library API


def test_the_api_takes_a_run_name_and_tags():
    from mlbaseline.api import Baseline

    bl = Baseline(run_name="loop-1", tags=["api"], telemetry=False, quiet=True, device="cpu")
    try:
        assert (bl.cfg.history.name, bl.cfg.history.tags) == ("loop-1", ["api"])
    finally:
        bl.close()
    with pytest.raises(ConfigError, match="tags: expected a word without commas"):
        Baseline(tags=["a,b"], telemetry=False, device="cpu")


def test_a_measuring_command_stores_the_name_in_its_file_and_the_history(tmp_path, store):
    out = tmp_path / "env.json"
    res = mlb("env-check", "--name", "box-1", "--tag", "ci", "-o", out, "--quiet")
    assert res.exit_code in (0, 1), res.output  # 1: a check failed on this machine
    assert run_label(load_result(out).config) == RunLabel("box-1", ("ci",))
    listed = json.loads(mlb("history", "list", "--tag", "ci", "--json").stdout)
    assert [(e["kind"], e["name"]) for e in listed] == [("env-check", "box-1")]


def test_ab_labels_both_arms(tmp_path):
    from test_ab import TINY

    out = tmp_path / "ab.json"
    args = ["ab", *TINY, "--pairs", "2", "--name", "pair-1", "--tag", "ab", "-o", out]
    res = mlb(*args, "--quiet", "--no-history")
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(out.read_text())
    for arm in ("a", "b"):
        assert doc["config"][arm]["history"]["name"] == "pair-1"
    assert run_label(load_result(out, kinds=["ab"]).config) == RunLabel("pair-1", ("ab",))
