"""The typed `data` payloads of env-check, latency, dataloader and subset results
(mlbaseline/documents/data_*.py; throughput, run, ab and compare: test_rel_payloads.py).

A real file of each kind (tests/data/schema_1_0, written by mlb) validates; the shapes a run
writes when it stops early or takes another path validate too (a model that refuses a file
the tool writes is the worse bug); and one wrong type in each section is refused at its path.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.documents.base import one_line

TESTS = Path(__file__).parent
DOCS = TESTS / "data" / "schema_1_0"
REPORT = TESTS / "golden" / "report"  # the report's golden inputs, written by make_golden.py
KINDS = ("env-check", "latency", "dataloader", "subset")


def payload(kind: str) -> dict[str, Any]:
    """The `data` of the committed real file of `kind` (a fresh copy: tests edit it)."""
    return json.loads((DOCS / f"{kind}.json").read_text())["data"]


def model(kind: str) -> type[BaseModel]:
    module = importlib.import_module(f"mlbaseline.documents.data_{kind.replace('-', '_')}")
    return module.Data


def validate(kind: str, data: dict[str, Any]) -> BaseModel:
    """Validate from the JSON text, as the loader does (`model_validate_json`)."""
    return model(kind).model_validate_json(json.dumps(data))


def put(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set `a.b[0].c` in `doc`; a value of `...` deletes the key."""
    keys: list[str | int] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        keys.append(name)
        keys += [int(i) for i in rest.rstrip("]").split("][")] if rest else []
    node: Any = doc
    for key in keys[:-1]:
        node = node[key]
    if value is ...:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value


@pytest.mark.parametrize(
    "path",
    [
        *(pytest.param(DOCS / f"{kind}.json", id=kind) for kind in KINDS),
        *(
            pytest.param(REPORT / name, id=f"report-{name}")
            for name in ("env_check.json", "latency.json", "dataloader.json", "subset.json")
        ),
    ],
)
def test_the_real_files_validate(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert validate(doc["kind"], doc["data"]) is not None


# ---------------------------------------------------------------- shapes the writers produce


def _latency_level_without_samples(data: dict[str, Any]) -> None:
    """A level whose every request failed: no statistics, an SLA with no p99."""
    level = data["levels"]["c2"]
    for key in ("stats", "stages", "histogram"):
        del level[key]
    level["sla"] = {"p99_s": None, "threshold_s": 0.15, "met": False}
    log = level["requests"]
    log["ok"] = [False] * len(log["ok"])
    log["error"] = ["connection"] * len(log["ok"])
    log["detail"] = ["ConnectionRefusedError"] * len(log["ok"])
    log["status"] = [503] * len(log["ok"])


def _latency_endpoint(data: dict[str, Any]) -> None:
    data["mode"] = "endpoint"
    del data["determinism"]  # only a model service seeds anything
    data["service"] = {
        "type": "http",
        "device": "http",
        "url": "http://127.0.0.1:8080/predict?api_key=REDACTED",
        "method": "POST",
        "content_type": None,
        "body_bytes": 0,
        "body_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "timeout_s": 2,
        "max_response_bytes": 67108864,
        "redirects": "not followed; recorded as failed requests",
    }


def _latency_user_service(data: dict[str, Any]) -> None:
    # `Service` is a protocol a user implements: its own description keys are kept
    data["service"] = {"type": "grpc", "device": "remote", "replicas": 3, "zone": "eu"}


def _latency_interrupted_before_a_level(data: dict[str, Any]) -> None:
    data["levels"] = {}
    del data["service"]


def _env_check_with_a_gpu(data: dict[str, Any]) -> None:
    data["driver"] = "550.54.15"
    data["gpus"] = [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-0",
            "memory_total_bytes": 85899345920,
            "memory_used_bytes": 536870912,
            "temperature_c": 34,
            "throttle_reasons": ["gpu_idle"],
            "persistence_mode": True,
            "mig_mode": False,
            "ecc_enabled": True,
            "compute_processes": 0,
        }
    ]
    data["host"]["governors"] = {"0": "performance", "1": "performance"}
    data["host"]["turbo"] = [True, "/sys/devices/system/cpu/intel_pstate/no_turbo"]


def _dataloader_interrupted_in_setup(data: dict[str, Any]) -> None:
    """Ctrl-C before the sweep was planned: `_finish` writes only these three."""
    for key in list(data):
        if key not in ("settings", "corrupt", "persistent_workers_effect"):
            del data[key]
    data["settings"] = []


def _dataloader_failed_setting_and_a_corrupt_file(data: dict[str, Any]) -> None:
    data["settings"].append(
        {
            "key": "dataloader.w2",
            "workers": 2,
            "pin_memory": False,
            "cache": "warm",
            "status": "failed",
            "error": "RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed.",
        }
    )
    data["corrupt"] = {
        "count": 1,
        "files": [
            {"path": "a/x.jpg", "index": 3, "stage": "decode", "error": "bad", "times_seen": 2}
        ],
    }
    data["persistent_workers_effect"] = [
        {"workers": 2, "epochs": 3, "off_s": 0.06, "on_s": 0.004, "saved_s": 0.056}
    ]


def _dataloader_factory_dataset_with_throughput(data: dict[str, Any]) -> None:
    data["dataset"] = {"type": "synthetic-text", "len": 64, "overlong": 2, "max_length": 128}
    data["dataset"]["split"] = "whole-sample"
    data["split"] = "whole-sample"
    data["pin_memory_effect"] = {"applicable": True, "workers": 0, "note": "not both"}
    data["input_bound"] = {
        "per_batch_size": {"16": {"share": 0.4, "steps": 20, "level": "high"}},
        "throughput_num_workers": 0,
        "message": "training at batch 16 (num_workers=0): input-bound",
        "batch_size": 16,
        "share": 0.4,
        "level": "high",
    }


def _subset_dry_run(data: dict[str, Any]) -> None:
    keep = ("source", "output", "n", "strategy", "base_seed", "link", "dry_run", "timings_s")
    for key in list(data):
        if key not in (*keep, "index", "plan"):
            del data[key]
    data.update(output=None, dry_run=True)
    for row in data["plan"]:
        del row["selected"], row["corrupt_excluded"]


def _subset_nan_kl_and_tensors(data: dict[str, Any]) -> None:
    # a KL of NaN/inf is written as null; a class with < 2 images has no per-class KL
    data["kl"]["mean"] = None
    data["kl"]["class_proportion"] = None
    data["kl"]["per_class"] = dict.fromkeys(data["kl"]["per_class"])
    data["tries"][0]["kl_mean"] = None
    data["tensors"] = {"path": "baseline_subset.pt", "skipped_corrupt": ["a/x.jpg"]}
    data["corrupt"] = [{"path": "a/x.jpg", "error": "cannot identify image file"}]
    data["planned_before_corrupt"] = [1, 2, 3]


SHAPES = [
    pytest.param("latency", _latency_level_without_samples, id="latency-all-failed"),
    pytest.param("latency", _latency_endpoint, id="latency-endpoint"),
    pytest.param("latency", _latency_user_service, id="latency-user-service"),
    pytest.param("latency", _latency_interrupted_before_a_level, id="latency-interrupted"),
    pytest.param("env-check", _env_check_with_a_gpu, id="env-check-gpu"),
    pytest.param("dataloader", _dataloader_interrupted_in_setup, id="dataloader-interrupted"),
    pytest.param(
        "dataloader", _dataloader_failed_setting_and_a_corrupt_file, id="dataloader-failed-row"
    ),
    pytest.param(
        "dataloader", _dataloader_factory_dataset_with_throughput, id="dataloader-factory"
    ),
    pytest.param("subset", _subset_dry_run, id="subset-dry-run"),
    pytest.param("subset", _subset_nan_kl_and_tensors, id="subset-nan-kl"),
]


@pytest.mark.parametrize(("kind", "shape"), SHAPES)
def test_every_shape_a_writer_produces_validates(kind: str, shape: Any) -> None:
    data = payload(kind)
    shape(data)
    assert validate(kind, data) is not None


# ---------------------------------------------------------------- one wrong type per section

WRONG = [
    pytest.param("env-check", "host.window_s", "0.5", id="env-host-number-as-text"),
    pytest.param("env-check", "host.cpu_before.cpu.busy", 1.5, id="env-host-ticks-float"),
    pytest.param("env-check", "host.meminfo", [1], id="env-host-meminfo-list"),
    pytest.param("env-check", "host.loadavg", [1, 2], id="env-host-loadavg-short"),
    pytest.param("env-check", "software.cuda_available", "no", id="env-software-bool-as-text"),
    pytest.param("env-check", "software", None, id="env-software-null"),
    pytest.param("env-check", "driver", 550, id="env-driver-number"),
    pytest.param("env-check", "gpus", {"0": {}}, id="env-gpus-mapping"),
    pytest.param("latency", "confidence", True, id="lat-bool-as-number"),
    pytest.param("latency", "quantiles", "50,90", id="lat-quantiles-text"),
    pytest.param("latency", "trim.fraction", None, id="lat-trim-null"),
    pytest.param("latency", "levels.c2.stats.p99.value", "nan", id="lat-p99-text-nan"),
    pytest.param("latency", "levels.c2.stats.p99.ci", 0.1, id="lat-ci-number"),
    pytest.param("latency", "levels.c2.stages.compute.median", [], id="lat-stage-list"),
    pytest.param("latency", "levels.c2.requests.latency_s[0]", "1", id="lat-request-text"),
    pytest.param("latency", "levels.c2.requests.phase[0]", "later", id="lat-phase-unknown"),
    pytest.param("latency", "levels.c2.sla.met", 1, id="lat-sla-met-number"),
    pytest.param("latency", "levels.c2.errors.by_kind", [], id="lat-errors-list"),
    pytest.param("latency", "levels.c2.histogram.counts[0]", 1.5, id="lat-count-float"),
    pytest.param("latency", "service.input_shape", "1x3", id="lat-service-text"),
    pytest.param("latency", "determinism.seed", "42", id="lat-seed-text"),
    pytest.param("latency", "levels.c2.unknown", 1, id="lat-level-unknown-key"),
    pytest.param("dataloader", "settings[0].samples_per_s.median", "7", id="dl-rate-text"),
    pytest.param("dataloader", "settings[0].io.rchar", 1.5, id="dl-io-float"),
    pytest.param("dataloader", "settings[0].cache", "lukewarm", id="dl-cache-unknown"),
    pytest.param("dataloader", "settings", {}, id="dl-settings-mapping"),
    pytest.param("dataloader", "corrupt.files", None, id="dl-corrupt-null"),
    pytest.param("dataloader", "knee.rates", [1.0], id="dl-knee-list"),
    pytest.param("dataloader", "knee.rates.0", "fast", id="dl-knee-rate-text"),
    pytest.param("dataloader", "dataset.generated.bytes", "11 kB", id="dl-generated-text"),
    pytest.param("dataloader", "loader.shuffle", "yes", id="dl-loader-text"),
    pytest.param("dataloader", "coverage.share", 10**400, id="dl-share-huge-int"),
    pytest.param("dataloader", "pin_memory_effect.applicable", None, id="dl-pin-null"),
    pytest.param("dataloader", "io", "none", id="dl-io-text"),
    pytest.param("subset", "n", 12.5, id="sub-n-float"),
    pytest.param("subset", "timings_s.index", "fast", id="sub-timing-text"),
    pytest.param("subset", "index.ignored_by_suffix", [], id="sub-index-list"),
    pytest.param("subset", "plan[0].quota", "4", id="sub-plan-text"),
    pytest.param("subset", "plan[0].class", 3, id="sub-plan-class-number"),
    pytest.param("subset", "kl.per_feature.mean_r", "x", id="sub-kl-text"),
    pytest.param("subset", "kl.threshold", None, id="sub-kl-threshold-null"),
    pytest.param("subset", "tries[0].passed", "true", id="sub-try-text"),
    pytest.param("subset", "counts.per_class", 3, id="sub-counts-number"),
    pytest.param("subset", "strategy", "random", id="sub-strategy-unknown"),
    pytest.param("subset", "source", ..., id="sub-source-missing"),
]


@pytest.mark.parametrize(("kind", "path", "value"), WRONG)
def test_a_wrong_type_is_refused_at_its_path(kind: str, path: str, value: Any) -> None:
    data = payload(kind)
    put(data, path, value)
    with pytest.raises(ValidationError) as info:
        validate(kind, data)
    assert one_line(info.value, "F.json", data).startswith(f"F.json: {path}: expected ")


# ---------------------------------------------------------------- through the commands

CLI_CASES = [
    pytest.param("env-check", "host.loadavg", "high", id="env-check"),
    pytest.param("latency", "levels.c2.stats.p99.value", "nan", id="latency"),
    pytest.param("dataloader", "knee.rates", [1], id="dataloader"),
    pytest.param("subset", "kl.per_class", "x", id="subset"),
]


@pytest.mark.parametrize(("kind", "path", "value"), CLI_CASES)
def test_report_and_compare_refuse_it_in_one_line(
    kind: str, path: str, value: Any, tmp_path: Path
) -> None:
    """`mlb report` and `mlb compare` (in-process) on a file with one wrong nested type:
    exit 2, one `Error:` line naming the file and the field, and no report folder left."""
    doc = json.loads((DOCS / f"{kind}.json").read_text())
    put(doc["data"], path, value)
    bad = tmp_path / f"{kind}.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "report"
    for args in (["report", str(bad), "-o", str(out)], ["compare", str(bad), str(bad)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, res.output
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in res.output, res.output
        assert lines[0].startswith(f"Error: {bad}: data.{path}: expected "), lines
    assert not out.exists()
