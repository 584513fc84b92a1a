"""The typed `data` payloads of throughput, run, ab and compare (mlbaseline/documents/data_*.py):
every shape mlb writes validates, and a wrong type in any section is refused with the path of
the field, in one line (documents.base.one_line)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from mlbaseline.documents import base, data_ab, data_compare, data_run, data_throughput

TESTS = Path(__file__).parent
V10 = TESTS / "data" / "schema_1_0"
SIGNALS = TESTS / "golden" / "signals"
MODELS: dict[str, ModuleType] = {
    "throughput": data_throughput,
    "run": data_run,
    "ab": data_ab,
    "compare": data_compare,
}


def _data(path: Path) -> tuple[str, dict[str, Any]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc["kind"], doc["data"]


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(V10 / "throughput.json", id="throughput"),
        pytest.param(SIGNALS / "replicated_quiet.json", id="throughput-replicates"),
        pytest.param(SIGNALS / "contaminated.json", id="throughput-contaminated"),
        pytest.param(TESTS / "golden" / "throughput_v1_0.json", id="throughput-empty-1.0"),
        pytest.param(TESTS / "golden" / "report" / "throughput.json", id="throughput-report"),
        pytest.param(V10 / "run.json", id="run"),
        pytest.param(TESTS / "golden" / "report" / "baseline.json", id="run-report"),
        pytest.param(V10 / "ab.json", id="ab"),
        pytest.param(V10 / "compare.json", id="compare"),
    ],
)
def test_written_payload_validates(path):
    kind, data = _data(path)
    MODELS[kind].Data.model_validate_json(json.dumps(data))


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    """Put `value` at a dotted path (list indices as numbers) of `doc`."""
    *head, last = path.split(".")
    node: Any = doc
    for part in head:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(last) if isinstance(node, list) else last] = value


# (file, dotted path, wrong value, the path the error names); one per section of each kind
WRONG = [
    pytest.param(V10 / "throughput.json", "device", 3, "device", id="throughput-device"),
    pytest.param(
        V10 / "throughput.json",
        "batch_sizes.4.train.samples_per_s.median",
        "fast",
        "batch_sizes.4.train.samples_per_s.median",
        id="throughput-batch-summary",
    ),
    pytest.param(
        V10 / "throughput.json",
        "batch_sizes.4.inference.blocks",
        "many",
        "batch_sizes.4.inference.blocks",
        id="throughput-inference",
    ),
    pytest.param(
        V10 / "throughput.json",
        "telemetry.overhead.samples",
        [1],
        "telemetry.overhead.samples",
        id="throughput-telemetry",
    ),
    pytest.param(
        V10 / "throughput.json",
        "contamination.phases",
        {"throughput": 1},
        "contamination.phases",
        id="throughput-contamination",
    ),
    pytest.param(
        V10 / "throughput.json", "dataset.len", 1.5, "dataset.len", id="throughput-dataset"
    ),
    pytest.param(
        SIGNALS / "replicated_quiet.json",
        "noise.train.bs8.step.mde",
        "0.1",
        "noise.train.bs8.step.mde",
        id="throughput-noise",
    ),
    pytest.param(
        SIGNALS / "replicated_quiet.json",
        "replicates.0.status",
        None,
        "replicates[0].status",
        id="throughput-replicates",
    ),
    pytest.param(V10 / "run.json", "phases.0.status", 1, "phases[0]", id="run-phases"),
    pytest.param(
        V10 / "run.json", "input_bound.share", "high", "input_bound.share", id="run-input-bound"
    ),
    pytest.param(
        V10 / "run.json", "telemetry.samples", None, "telemetry.samples", id="run-telemetry"
    ),
    pytest.param(V10 / "ab.json", "stages.0.ratio", "1.0", "stages[0].ratio", id="ab-stages"),
    pytest.param(V10 / "ab.json", "pairs.0.pair", True, "pairs[0].pair", id="ab-pairs"),
    pytest.param(V10 / "ab.json", "drift", [], "drift", id="ab-drift"),
    pytest.param(
        V10 / "compare.json",
        "metrics.0.p_value",
        "0.01",
        "metrics[0].p_value",
        id="compare-metrics",
    ),
    pytest.param(
        V10 / "compare.json", "settings.alpha", True, "settings.alpha", id="compare-settings"
    ),
    pytest.param(
        V10 / "compare.json",
        "attribution.0.stages",
        {},
        "attribution[0].stages",
        id="compare-attribution",
    ),
    pytest.param(V10 / "compare.json", "headline.text", 5, "headline.text", id="compare-headline"),
]


@pytest.mark.parametrize(("path", "field", "value", "named"), WRONG)
def test_wrong_type_is_refused_with_its_path(path, field, value, named):
    kind, data = _data(path)
    if field.startswith("noise."):  # a metric name holds dots: set it by hand
        data["noise"]["train.bs8.step"]["mde"] = value
    else:
        _set(data, field, value)
    bad = copy.deepcopy(data)
    with pytest.raises(ValidationError) as info:
        MODELS[kind].Data.model_validate_json(json.dumps(bad))
    line = base.one_line(info.value, "FILE", bad)
    assert line.startswith(f"FILE: {named}") and "expected" in line and "\n" not in line
