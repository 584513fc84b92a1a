import json
import os
from pathlib import Path

import pytest

from mlbaseline import results as res
from mlbaseline import safewrite
from mlbaseline.errors import OutputError, OutputExistsError, ResultFileError

GOLDEN = Path(__file__).parent / "golden"


def sample() -> res.Result:
    r = res.Result(kind="throughput", config={"golden": {"seed": 42}})
    r.add_metric(res.Metric("train.bs8.step", "s", False, [0.1, 0.11, 0.12], warmup=[0.5]))
    r.verdict.checks.append(res.Check("stability", "pass", 0.01, 0.03, "ok"))
    return r


def test_roundtrip(tmp_path):
    p = res.write_result(sample(), tmp_path / "r.json")
    back = res.load_result(p)
    assert back.kind == "throughput"
    m = back.measurements["train.bs8.step"]
    assert m.values == [0.1, 0.11, 0.12] and m.warmup == [0.5] and m.unit == "s"
    doc = json.loads(p.read_text())
    assert doc["schema_version"] == "1.1"
    assert doc["summary"]["metrics"]["train.bs8.step"]["median"] == pytest.approx(0.11)
    assert doc["verdict"]["status"] == "pass"


def test_no_overwrite_without_force(tmp_path):
    p = res.write_result(sample(), tmp_path / "r.json")
    with pytest.raises(OutputExistsError):
        res.write_result(sample(), p)
    res.write_result(sample(), p, force=True)


@pytest.mark.parametrize("errno_", [28, 13])  # ENOSPC (disk full), EACCES (permission)
def test_failed_write_leaves_nothing(tmp_path, monkeypatch, errno_):
    def boom(*_a, **_k):
        raise OSError(errno_, os.strerror(errno_))

    monkeypatch.setattr(safewrite.os, "fsync", boom)
    with pytest.raises(OutputError, match=os.strerror(errno_)):
        res.write_result(sample(), tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


def test_nan_is_written_as_valid_json(tmp_path):
    r = sample()
    r.data["x"] = float("nan")
    p = res.write_result(r, tmp_path / "r.json")
    assert json.loads(p.read_text())["data"]["x"] is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ('{"schema_version": "1.0", "kind": "thr', "not valid JSON"),
        ("[1, 2]", "top level is not an object"),
        ('{"kind": "throughput"}', "no schema_version"),
        ('{"schema_version": "2.0", "kind": "throughput"}', "schema version 2.0 is not supported"),
        ('{"schema_version": "1.0", "kind": "banana"}', "unknown result kind"),
        (
            '{"schema_version": "1.0", "kind": "latency", "measurements": '
            '{"m": {"unit": "s", "higher_is_better": false, "values": [1, null]}}}',
            "measurements.m.values[1]: expected a number, got None",
        ),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(ResultFileError) as info:
        res.load_result(p)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_wrong_kind(tmp_path):
    p = res.write_result(sample(), tmp_path / "r.json")
    with pytest.raises(ResultFileError, match="is a 'throughput' result; expected latency"):
        res.load_result(p, kinds=["latency"])


def test_golden_files_keep_loading():
    files = sorted(GOLDEN.glob("*.json"))
    assert files, "golden result files are missing"
    for path in files:
        r = res.load_result(path)
        assert r.measurements, path
        for m in r.measurements.values():
            assert m.values and m.unit
