"""The throughput runner's records and its one assembly (issue 25, item 1): the measuring code
appends typed records, `assemble` builds the result from them once, a partial list of records
gives a valid partial result, and a payload its model refuses is caught there."""

from __future__ import annotations

import pytest

from mlbaseline.config import Config
from mlbaseline.measure.clock import PerfClock
from mlbaseline.progress import NullProgress
from mlbaseline.results import parse_result
from mlbaseline.runners.sweep import InferRun, SweepState
from mlbaseline.runners.throughput import Ending, assemble
from mlbaseline.runners.throughput_records import Records, RunFacts, check_payload


def _facts(**extra: object) -> RunFacts:
    cfg = Config()
    base: dict[str, object] = {
        "config": cfg.to_dict(),
        "environment": {"blocking": {"device": "cpu"}, "informational": {}},
        "device": "cpu",
        "mode": "inference",
        "nproc": 1,
        "repeats": 1,
        "determinism": {"seed": 0, "cudnn_deterministic": False, "cudnn_benchmark": False},
        "allocator": {"malloc_tuning": False, "reason": "off"},
        "timer": "perf_counter",
        "torch_threads": 1,
        "stages": ["data_wait", "forward"],
        "residual_limit": 0.05,
    }
    return RunFacts(**{**base, **extra})  # type: ignore[arg-type]


def _sweep(records: Records) -> SweepState:
    # only what recording needs: no dataset is read when a run's records are appended
    return SweepState(Config(), "cpu", records, None, NullProgress(), PerfClock())  # type: ignore[arg-type]


def _infer(batch_size: int, scale: float = 1.0) -> InferRun:
    per_run = [scale * (0.010 + 0.0001 * i) for i in range(12)]
    return InferRun(batch_size, [0.02, 0.015], per_run, 5, 1024, "rss")


def test_a_sweeps_records_assemble_into_a_result_its_loader_reads_back() -> None:
    records = Records(_facts())
    run = _sweep(records)
    run.add_infer(_infer(4))
    run.failed(8, "inference", RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    result = assemble(records, Ending())

    assert result.status == "complete"
    assert set(result.measurements) == {"infer.bs4.batch", "infer.bs4.samples_per_s"}
    ok, oom = result.data["batch_sizes"]["4"], result.data["batch_sizes"]["8"]
    assert ok["status"] == "ok" and ok["stop_reason"] == "blocked_autorange"
    assert ok["inference"]["samples_per_s"]["median"] == pytest.approx(4 / 0.01055, rel=0.01)
    assert oom == {
        "batch_size": 8,
        "status": "oom",
        "stop_reason": "oom",
        "inference": {"status": "oom", "error": oom["inference"]["error"]},
    }
    assert [w["code"] for w in result.warnings] == ["oom"]
    assert [(c.name, c.status) for c in result.verdict.checks] == [("infer.bs8.run", "warn")]
    head = ["device", "mode", "nproc", "repeats", "determinism", "allocator", "timer"]
    assert list(result.data)[: len(head)] == head and "source" not in result.data
    back = parse_result(result.to_json().encode(), "t.json", ["throughput"])
    assert back.data["batch_sizes"]["4"]["inference"] == ok["inference"]


def test_a_partial_list_of_records_is_a_valid_result_marked_by_its_first_fault() -> None:
    """Ctrl-C after the first size: what was measured is kept, the next size says where the
    run stopped, and the first fault wins over any later one (its note kept beside it)."""
    records = Records(_facts())
    run = _sweep(records)
    run.add_infer(_infer(4))
    run.size(8).stop_reason = "interrupted"
    records.fault("interrupted", "Ctrl-C: the result holds what was measured until then")
    records.fault("failed", "a later fault")
    result = assemble(records, Ending())

    assert result.status == "interrupted" and len(result.notes) == 2
    assert result.data["batch_sizes"]["8"] == {
        "batch_size": 8,
        "status": "ok",
        "stop_reason": "interrupted",
    }
    assert result.data["batch_sizes"]["4"]["inference"]["n"] == 12


def test_records_with_no_measured_size_assemble_into_a_failed_result() -> None:
    records = Records(_facts())
    _sweep(records).failed(4, "inference", ValueError("the dataset has 2 samples"))
    result = assemble(records, Ending())
    assert result.status == "failed" and result.notes == ["no batch size could be measured"]
    assert result.data["batch_sizes"]["4"]["status"] == "error"


def test_a_payload_its_model_refuses_is_raised_at_assembly_naming_the_field() -> None:
    """A writer and the typed model that disagree are a bug in mlb: found when the result is
    built, not by the next reader of its file."""
    records = Records(_facts())
    _sweep(records).add_infer(_infer(4))
    records.blocks["dataset"] = {"type": "synthetic", "len": "many"}
    with pytest.raises(RuntimeError, match=r"data: dataset\.len: expected an integer"):
        assemble(records, Ending())
    records.blocks["dataset"] = {"type": "synthetic", "len": 64}
    result = assemble(records, Ending())
    check_payload(result)  # the same payload once the writer is fixed
    assert result.data["dataset"]["len"] == 64


def test_the_library_apis_facts_lead_with_its_name_and_leave_out_what_it_does_not_set() -> None:
    facts = _facts(source="api", name="resnet", determinism=None, allocator=None)
    payload = facts.payload()
    assert list(payload)[:3] == ["source", "name", "device"]
    assert "determinism" not in payload and "allocator" not in payload
