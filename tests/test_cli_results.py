"""Bad result files given to the CLI: exit 2 and exactly one `Error: ` line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.results import Metric, Result, write_result

runner = CliRunner()


def good(path: Path, kind: str = "throughput") -> Path:
    r = Result(kind=kind)
    r.add_metric(Metric("train.bs8.step", "s", False, [0.10, 0.11, 0.12, 0.10, 0.11]))
    return write_result(r, path)


def assert_one_error_line(res, *needles: str) -> None:
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in res.stderr and res.stdout == ""
    for needle in needles:
        assert needle in lines[0]


def _truncated(p: Path) -> None:
    text = p.read_text()
    p.write_text(text[: len(text) // 2])


def _future(p: Path) -> None:
    doc = json.loads(p.read_text())
    doc["schema_version"] = "2.0"
    p.write_text(json.dumps(doc))


def _bad_samples(p: Path) -> None:
    doc = json.loads(p.read_text())
    doc["measurements"]["train.bs8.step"]["values"] = ["fast", 0.1]
    p.write_text(json.dumps(doc))


def _no_values(p: Path) -> None:
    doc = json.loads(p.read_text())
    del doc["measurements"]["train.bs8.step"]["values"]
    p.write_text(json.dumps(doc))


def _no_unit(p: Path) -> None:
    doc = json.loads(p.read_text())
    del doc["measurements"]["train.bs8.step"]["unit"]
    p.write_text(json.dumps(doc))


CASES = {
    "empty": (lambda p: p.write_text(""), "empty file"),
    "not-json": (lambda p: p.write_text("this is not json\n"), "not valid JSON"),
    "truncated": (_truncated, "truncated?"),
    "top-level-list": (lambda p: p.write_text("[1, 2]"), "not an mlb result file"),
    "no-version": (lambda p: p.write_text('{"kind": "throughput"}'), "no schema_version"),
    "future-major": (_future, "schema version 2.0 is not supported"),
    "bad-samples": (_bad_samples, "measurements.train.bs8.step.values[0]: expected a number"),
    "no-samples": (_no_values, "measurements.train.bs8.step.values: expected a value"),
    "malformed-metric": (_no_unit, "measurements.train.bs8.step.unit: expected a value"),
    "binary": (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "cannot read"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("side", ["old", "new"])
def test_bad_result_file_exits_2_with_one_line(tmp_path, case, side):
    old, new = good(tmp_path / "old.json"), good(tmp_path / "new.json")
    broken = old if side == "old" else new
    spoil, needle = CASES[case]
    spoil(broken)
    res = runner.invoke(app, ["compare", str(old), str(new)])
    assert_one_error_line(res, str(broken), needle)


def test_missing_file(tmp_path):
    old = good(tmp_path / "old.json")
    res = runner.invoke(app, ["compare", str(old), str(tmp_path / "nope.json")])
    assert_one_error_line(res, "nope.json: no such file")


def test_directory_instead_of_file(tmp_path):
    old = good(tmp_path / "old.json")
    res = runner.invoke(app, ["compare", str(old), str(tmp_path)])
    assert_one_error_line(res, "is a directory")


def test_mismatched_kinds(tmp_path):
    old = good(tmp_path / "old.json", kind="throughput")
    new = tmp_path / "new.json"  # a real latency result (its payload is typed)
    new.write_bytes((Path(__file__).parent / "data/schema_1_0/latency.json").read_bytes())
    res = runner.invoke(app, ["compare", str(old), str(new)])
    assert_one_error_line(res, "'latency' result", "'throughput' result", "same kind")


def test_a_compare_result_is_not_an_input(tmp_path):
    old = good(tmp_path / "old.json")
    out = tmp_path / "c.json"
    assert runner.invoke(app, ["compare", str(old), str(old), "-o", str(out)]).exit_code == 0
    res = runner.invoke(app, ["compare", str(out), str(out)])
    assert_one_error_line(res, "is a 'compare' result; expected")


def test_bad_config_value(tmp_path):
    old = good(tmp_path / "old.json")
    res = runner.invoke(app, ["compare", str(old), str(old), "--set", "compare.alpha=2"])
    assert_one_error_line(res, "compare.alpha")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("compare:\n  thresholds: {train.bs8.step: 5}\n")
    res = runner.invoke(app, ["compare", str(old), str(old), "-c", str(cfg)])
    assert_one_error_line(res, "compare.thresholds.train.bs8.step: must be a fraction")
