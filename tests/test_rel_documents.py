"""Every result file mlb reads is validated once against its kind's model (mlbaseline/documents):
a wrong type anywhere is `Error: FILE: path.to.field: expected …, got …`, exit 2, one line.

The property-based harness: for each kind, a real document (tests/data/schema_1_0, written by
mlb) has one field at a time replaced by a value of a JSON type its model does not allow at
that path (the allowed types are read from the model's JSON schema, so a corruption that would
leave a valid document is never made): every leaf and inner node in process through the loader,
and a hypothesis sample through `mlb compare DOC DOC` and `mlb report DOC` (CliRunner, in
process: torch loads once). Paths where every JSON type is valid (free-form user data) are
listed in FREE_FORM, each with its reason, and no other path may be free-form.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.documents import model_for
from mlbaseline.documents.base import SCHEMA_VERSION
from mlbaseline.documents.manifest import Manifest
from mlbaseline.errors import ResultFileError
from mlbaseline.results import load_result, parse_result
from mlbaseline.subset.manifest import MANIFEST_NAME, load_manifest

TESTS = Path(__file__).parent
V1_0 = TESTS / "data" / "schema_1_0"
KINDS = ("env-check", "throughput", "latency", "dataloader", "subset", "compare", "run", "ab")
runner = CliRunner()

# Paths (regex over the dotted path) whose model allows every JSON type, and why.
FREE_FORM = {
    # the user's keyword arguments for their own factories: whatever their code takes
    r"config(\.[ab])?\.workload\.\w+_kwargs\..+": "user factory keyword arguments",
    # the same, copied into the fingerprint's blocking keys (the workload identity)
    r"environment\.blocking\.workload\.\w+_kwargs\..+": "user factory keyword arguments",
}

Path_ = tuple[str | int, ...]


def doc_of(kind: str) -> dict[str, Any]:
    """The committed 1.0 document of `kind`, labelled as the current version (the upgrade only
    renames it, and the loader then validates the bytes as they are: the fast path)."""
    return {**json.loads((V1_0 / f"{kind}.json").read_text()), "schema_version": SCHEMA_VERSION}


def dotted(path: Path_) -> str:
    """The path as the loader's error names it: `a.b[0].c`."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def paths(node: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every inner node and leaf under `node`; of a long list, the first and last item."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i in sorted({0, len(node) - 1}) if node else ():
            yield (*prefix, i)
            yield from paths(node[i], (*prefix, i))


# ---------------------------------------------------------------- what the model allows


def _branches(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a schema node stands for ($ref resolved, anyOf/oneOf/allOf flattened)."""
    if "$ref" in schema:
        return _branches(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [b for sub in schema[key] for b in _branches(sub, defs)]
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _branches(schema["allOf"][0], defs)
    return [schema]


def _child(branch: dict[str, Any], step: str | int) -> dict[str, Any] | None:
    if isinstance(step, str) and "properties" in branch and step in branch["properties"]:
        return branch["properties"][step]
    if isinstance(step, str) and branch.get("type", "object") == "object":
        extra = branch.get("additionalProperties", "properties" not in branch)
        return {} if extra is True else (extra or None)
    if isinstance(step, int) and branch.get("type", "array") == "array":
        prefix = branch.get("prefixItems") or []
        return prefix[step] if step < len(prefix) else branch.get("items", {})
    return None


ALL_TYPES = {"string", "number", "integer", "boolean", "null", "array", "object"}


def allowed_types(kind: str, path: Path_) -> set[str]:
    """The JSON types the model of `kind` accepts at `path`."""
    schema = _schema(kind)
    defs = schema.get("$defs", {})
    nodes = [schema]
    for step in path:
        nodes = [c for n in nodes for b in _branches(n, defs) if (c := _child(b, step)) is not None]
    types: set[str] = set()
    for node in nodes:
        for branch in _branches(node, defs):
            given_ = branch.get("type")
            if given_ is None and "const" not in branch and "enum" not in branch:
                return ALL_TYPES  # an unconstrained node: any JSON value
            for t in [given_] if isinstance(given_, str) else given_ or []:
                types |= {t, "integer"} if t == "number" else {t}
            for value in [branch.get("const")] if "const" in branch else branch.get("enum", []):
                types.add(_json_type(value))
    return types


_SCHEMAS: dict[str, dict[str, Any]] = {}


def _schema(kind: str) -> dict[str, Any]:
    """The JSON schema of a result kind's model, or of the subset manifest's (`manifest`)."""
    if kind not in _SCHEMAS:
        model = Manifest if kind == "manifest" else model_for(kind)
        _SCHEMAS[kind] = model.model_json_schema(mode="validation")
    return _SCHEMAS[kind]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


# by the original value's type, the wrong values to try, in order: a string for a number, a
# number for a string, a list for a mapping, a mapping for a list, null for a required field
WRONG: dict[str, list[Any]] = {
    "integer": ["x", 1.5, [], None, {}],
    "number": ["x", [], None, True, {}],
    "string": [7, [], None, {}],
    "boolean": ["yes", 1, None, []],
    "object": [[], "x", None, 3],
    "array": [{}, "x", None, 3],
    "null": [[1], {"x": 1}, "x", 5],
}


def wrong_value(kind: str, doc: dict[str, Any], path: Path_) -> Any:
    """A value of a JSON type the model refuses at `path`, or ... where every type is valid."""
    allowed = allowed_types(kind, path)
    original = _json_type(_get(doc, path))
    for candidate in WRONG[original]:
        if _json_type(candidate) not in allowed:
            return candidate
    return ...


def _get(doc: Any, path: Path_) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def corrupted(doc: dict[str, Any], path: Path_, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    _get(out, path[:-1])[path[-1]] = value
    return out


def expected_fragment(path: Path_) -> str:
    """What the one line must name: the path (the version and kind checks come before the model,
    in their own words)."""
    if path == ("schema_version",):
        return "schema_version"
    if path == ("kind",):
        return "result kind"
    return dotted(path) + ":"


# ---------------------------------------------------------------- in process: every node


@pytest.mark.parametrize("kind", [pytest.param(k, id=k) for k in KINDS])
def test_every_wrong_type_is_refused_at_its_path(kind):
    """Every inner node and leaf of a real document, one at a time: the loader refuses the
    wrong type with one line naming the file and the path; only FREE_FORM paths take any type."""
    doc = doc_of(kind)
    target = f"{kind}.json"
    free = []
    for path in list(paths(doc)):
        value = wrong_value(kind, doc, path)
        if value is ...:
            free.append(dotted(path))
            continue
        parent, original = _get(doc, path[:-1]), _get(doc, path)
        parent[path[-1]] = value  # in place, and back (a deep copy per path is the slow part)
        body = json.dumps(doc).encode()
        parent[path[-1]] = original
        with pytest.raises(ResultFileError) as info:
            parse_result(body, target)
        message = str(info.value)
        assert message.startswith(f"{target}: "), message
        assert expected_fragment(path) in message and "\n" not in message, (path, message)
    unexplained = [p for p in free if not any(re.fullmatch(rx, p) for rx in FREE_FORM)]
    assert unexplained == [], "free-form paths without a reason in FREE_FORM"


# ---------------------------------------------------------------- through the CLI: a sample


def _assert_refused(res: Any, target: Path, path: Path_) -> None:
    assert res.exit_code == 2, (dotted(path), res.exit_code, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"Error: {target}: "), res.stderr
    assert expected_fragment(path) in lines[0], (dotted(path), lines[0])
    assert "Traceback" not in res.stderr + res.stdout


def _cli_case(kind: str) -> Any:
    doc = doc_of(kind)
    cases = [(p, v) for p in paths(doc) if (v := wrong_value(kind, doc, p)) is not ...]
    return doc, st.sampled_from(cases)


def _cli_property(kind: str, examples: int) -> Any:
    doc, cases = _cli_case(kind)

    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(case=cases)
    def check(tmp_path: Path, case: tuple[Path_, Any]) -> None:
        path, value = case
        target = tmp_path / f"{kind}.json"
        target.write_text(json.dumps(corrupted(doc, path, value)))
        if kind != "compare":  # a compare result is no input of compare (its own error)
            _assert_refused(runner.invoke(app, ["compare", str(target), str(target)]), target, path)
        out = tmp_path / "report"
        res = runner.invoke(app, ["report", str(target), "-o", str(out)])
        _assert_refused(res, target, path)
        assert not out.exists(), "a refused input left an output folder behind"

    return check


@pytest.mark.parametrize("kind", [pytest.param(k, id=k) for k in KINDS])
def test_cli_refuses_a_wrong_type_anywhere(kind, tmp_path_factory):
    """Hypothesis picks one path of the real document and a wrong-typed value: `mlb compare DOC
    DOC` and `mlb report DOC` exit 2 with one `Error:` line naming the file and the path."""
    _cli_property(kind, examples=12)(tmp_path=tmp_path_factory.mktemp(kind))


# ---------------------------------------------------------------- the subset manifest


def test_every_wrong_type_in_a_manifest_is_refused_at_its_path(tmp_path):
    """The subset manifest (a real one, tests/data/schema_1_0) is read through its model too:
    every node, one at a time, is refused with one line naming the file and the path."""
    doc = json.loads((V1_0 / MANIFEST_NAME).read_text())
    target = tmp_path / MANIFEST_NAME
    for path in list(paths(doc)):
        value = wrong_value("manifest", doc, path)
        assert value is not ..., dotted(path)  # no free-form place in a manifest
        target.write_text(json.dumps(corrupted(doc, path, value)))
        with pytest.raises(ResultFileError) as info:
            load_manifest(target)
        message = str(info.value)
        assert message.startswith(f"{target}: ") and "\n" not in message, message
        fragment = "not an mlb subset manifest" if path == ("kind",) else None
        fragment = "manifest version" if path == ("manifest_version",) else fragment
        assert (fragment or dotted(path) + ":") in message, (path, message)


def test_report_refuses_a_manifest_with_a_wrong_type(tmp_path):
    """`mlb report` of a subset folder whose manifest has a wrong type: exit 2, one line."""
    folder = tmp_path / "subset"
    folder.mkdir()
    (folder / "subset_result.json").write_bytes((V1_0 / "subset.json").read_bytes())
    doc = json.loads((V1_0 / MANIFEST_NAME).read_text())
    doc["entries"][0]["label"] = "0"
    (folder / MANIFEST_NAME).write_text(json.dumps(doc))
    res = runner.invoke(app, ["report", str(folder), "-o", str(tmp_path / "out")])
    assert res.exit_code == 2, res.stderr
    expected = f"Error: {folder / MANIFEST_NAME}: entries[0].label: expected an integer, got '0'"
    assert res.stderr.strip() == expected, res.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the issue's own cases


def _throughput(tmp_path: Path, edit: Any) -> Path:
    doc = doc_of("throughput")
    edit(doc)
    target = tmp_path / "bad.json"
    target.write_text(json.dumps(doc))
    return target


def _step(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["measurements"]["train.bs4.step"]


_ISSUE = [
    (
        lambda d: d["environment"].update(blocking="cpu"),
        "environment.blocking: expected an object, got 'cpu'",
        "environment-blocking-string",
    ),
    (
        lambda d: d["config"]["golden"].update(seed="42"),
        "config.golden.seed: expected an integer, got '42'",
        "config-seed-string",
    ),
    (
        lambda d: d["config"]["compare"].update(alpha="0.05"),
        "config.compare.alpha: expected a number, got '0.05'",
        "config-alpha-string",
    ),
    (
        lambda d: d["config"].update(workload="tiny"),
        "config.workload: expected an object, got 'tiny'",
        "config-section-string",
    ),
    (
        lambda d: d.update(warnings="slow machine"),
        "warnings: expected a list, got 'slow machine'",
        "warnings-string",
    ),
    (
        lambda d: d.update(warnings=["slow machine"]),
        "warnings[0]: expected an object, got 'slow machine'",
        "warnings-entry-string",
    ),
    (
        lambda d: _step(d)["values"].__setitem__(1, 1e308),
        "measurements.train.bs4.step.values[1]: expected at most 1e+100, got 1e+308",
        "sample-1e308",
    ),
    (
        lambda d: _step(d)["values"].__setitem__(1, 10**400),
        "measurements.train.bs4.step.values[1]: expected a finite number, got 1000000",
        "sample-400-digits",
    ),
    (
        lambda d: _step(d)["warmup"].__setitem__(0, True),
        "measurements.train.bs4.step.warmup[0]: expected a number, got True",
        "sample-bool",
    ),
    (
        lambda d: d["data"].update(batch_sizes="4"),
        "data.batch_sizes: expected",
        "data-wrong-type",
    ),
]


ISSUE_CASES = [
    pytest.param(command, edit, message, id=f"{command}-{name}")
    for command in ("compare", "report")
    for edit, message, name in _ISSUE
]


@pytest.mark.parametrize(("command", "edit", "message"), ISSUE_CASES)
def test_issue_cases_are_one_error_line(tmp_path, command, edit, message):
    target = _throughput(tmp_path, edit)
    out = tmp_path / "out"
    args = [str(target), str(target)] if command == "compare" else [str(target), "-o", str(out)]
    res = runner.invoke(app, [command, *args])
    assert res.exit_code == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {target}: {message}"), res.stderr
    assert not out.exists()  # report: no empty output folder left behind


def test_sample_at_the_bound_is_valid(tmp_path):
    """±1e100 is the documented bound (docs/DOCUMENTS.md): a sample at it loads."""
    target = _throughput(tmp_path, lambda d: _step(d)["values"].__setitem__(1, 1e100))
    assert load_result(target).measurements["train.bs4.step"].values[1] == 1e100


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize(
    "path",
    [pytest.param(V1_0 / f"{k}.json", id=k) for k in KINDS]
    + [pytest.param(TESTS / "golden" / "throughput_v1_0.json", id="golden-throughput")],
)
def test_a_1_0_file_reads_as_the_current_version(path, tmp_path):
    """Each committed 1.0 file loads through the upgrader and writes back as a valid 1.1."""
    assert json.loads(path.read_text())["schema_version"] == "1.0"
    result = load_result(path)
    assert result.schema_version == SCHEMA_VERSION == "1.1"
    again = tmp_path / "again.json"
    again.write_text(result.to_json())
    back = load_result(again)
    assert back.measurements.keys() == result.measurements.keys() and back.kind == result.kind


def test_an_unknown_major_is_refused(tmp_path):
    target = _throughput(tmp_path, lambda d: d.update(schema_version="2.0"))
    with pytest.raises(ResultFileError, match=r"schema version 2\.0 is not supported"):
        load_result(target)


def test_a_newer_minor_with_unknown_keys_is_refused(tmp_path):
    """A key this version does not know is refused, never half-read (docs/DOCUMENTS.md)."""
    target = _throughput(tmp_path, lambda d: d.update(schema_version="1.9", provenance={}))
    with pytest.raises(ResultFileError, match=r"bad\.json: provenance: expected no such key"):
        load_result(target)


@pytest.mark.parametrize(
    ("depth", "message"),
    [
        pytest.param(400, "not valid JSON (recursion limit exceeded", id="nested-400"),
        pytest.param(100_000, "not valid JSON (nested too deeply)", id="nested-100000"),
    ],
)
def test_deep_nesting_in_a_free_form_field_is_one_line(tmp_path, depth, message):
    """User keyword arguments nested beyond what a parser takes: one line, no RecursionError."""
    deep = "[" * depth + "]" * depth
    target = tmp_path / "deep.json"
    target.write_text(
        f'{{"schema_version": "{SCHEMA_VERSION}", "kind": "throughput", "tool": '
        f'{{"name": "mlb", "version": "0"}}, "config": {{"workload": {{"model_kwargs": '
        f'{{"deep": {deep}}}}}}}}}'
    )
    with pytest.raises(ResultFileError) as info:
        load_result(target)
    assert str(info.value).startswith(f"{target}: {message}"), str(info.value)
