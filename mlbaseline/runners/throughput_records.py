"""What a throughput run returns: typed records (the run-wide facts, one record per batch size,
the metrics, the warnings and faults met on the way), and the one step that turns them into a
`Result` (`Records.to_result`). The measuring code (`runners.throughput`, `runners.sweep`,
`runners.distributed`, the library API) only appends to these records and hands over what
the whole run produced beside them (`Ending`); `runners.throughput.assemble` builds the result
from them once, at the end, also on the interrupted and failed paths, and checks its payload
against `documents.data_throughput.Data` there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from mlbaseline.documents.base import one_line
from mlbaseline.documents.data_throughput import Data
from mlbaseline.measure.contamination import CpuAccount
from mlbaseline.measure.telemetry import TelemetrySampler
from mlbaseline.results import Metric, Result, _jsonable


@dataclass
class Note:
    """One warning met while measuring (a `Result.warnings` entry once assembled)."""

    code: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class SizeRecord:
    """One batch size: status ok / oom / error / interrupted, why it stopped, and the summary
    of each part that ran (`train`, `train_ddp`, `inference`: `documents.PartSummary`)."""

    batch_size: int
    status: str = "ok"
    stop_reason: str | None = None
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    ddp_overlap: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"batch_size": self.batch_size, "status": self.status}
        if self.stop_reason is not None:
            out["stop_reason"] = self.stop_reason
        out.update(self.parts)
        if self.ddp_overlap is not None:
            out["ddp_overlap"] = self.ddp_overlap
        return out


@dataclass
class RunFacts:
    """What is known of a run before its first step: the head of the payload, and the config
    and environment the result is described by (`environment` is the fingerprint, which a
    torchrun adds its node layout to). The library API sets `source` and `name` and takes no
    determinism or allocator settings (None: left out of the payload)."""

    config: dict[str, Any]
    environment: dict[str, Any]
    device: str
    mode: str
    nproc: int
    repeats: int | str
    determinism: dict[str, Any] | None
    allocator: dict[str, Any] | None
    timer: str
    torch_threads: int
    stages: list[str]
    residual_limit: float
    source: str | None = None
    name: str | None = None

    def payload(self) -> dict[str, Any]:
        head = {
            "source": self.source,
            "name": self.name,
            "device": self.device,
            "mode": self.mode,
            "nproc": self.nproc,
            "repeats": self.repeats,
            "determinism": self.determinism,
            "allocator": self.allocator,
            "timer": self.timer,
            "torch_threads": self.torch_threads,
            "stages": list(self.stages),
            "residual_limit": self.residual_limit,
        }
        optional = ("source", "name", "determinism", "allocator")
        return {k: v for k, v in head.items() if v is not None or k not in optional}


@dataclass
class Records:
    """Everything one throughput run returns, appended to while it measures."""

    facts: RunFacts
    metrics: dict[str, Metric] = field(default_factory=dict)
    sizes: dict[str, SizeRecord] = field(default_factory=dict)
    # run-wide blocks learnt on the way (dataset, distributed, replicate_plan, replicate_start)
    blocks: dict[str, Any] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    faults: list[tuple[str, str]] = field(default_factory=list)  # (status, why); first wins
    artifacts: dict[str, str] = field(default_factory=dict)
    traced: list[tuple[int, list[str]]] = field(default_factory=list)  # --trace: (B, stages)

    def size(self, batch_size: int) -> SizeRecord:
        key = str(batch_size)
        if key not in self.sizes:
            self.sizes[key] = SizeRecord(batch_size)
        return self.sizes[key]

    def add_metric(self, metric: Metric) -> None:
        self.metrics[metric.name] = metric

    def note(self, code: str, message: str, **fields: Any) -> None:
        self.notes.append(Note(code, message, fields))

    def fault(self, status: str, why: str) -> None:
        self.faults.append((status, why))

    def to_result(self) -> Result:
        """The result these records describe (before the derived parts: telemetry, checks)."""
        f = self.facts
        data = {
            **f.payload(),
            "batch_sizes": {k: s.to_dict() for k, s in self.sizes.items()},
            **self.blocks,
        }
        result = Result(
            kind="throughput",
            config=f.config,
            environment=f.environment,
            measurements=dict(self.metrics),
            warnings=[{"code": n.code, "message": n.message, **n.fields} for n in self.notes],
            data=data,
            artifacts=dict(self.artifacts),
        )
        for status, why in self.faults:
            result.mark(status, why)
        return result


@dataclass
class Telemetry:
    """The timeline a run recorded into (None: telemetry off), its CSV's name beside the
    result (None: not written here), and whether this run started the sampler."""

    sampler: TelemetrySampler | None = None
    csv_name: str | None = None
    owned: bool = False


@dataclass
class Ending:
    """What a run hands to `assemble` beside its records: the machine's account of it, the
    control kernel's metric, the --trace windows, the telemetry timeline, and (replicates)
    the children's results and the between-sittings check."""

    telemetry: Telemetry = field(default_factory=Telemetry)
    account: CpuAccount | None = None  # None: the library API, whose process is the user's
    control: Metric | None = None
    trace: Any = None
    children: list[Result] | None = None
    sittings: Callable[[Result], None] | None = None


def check_payload(result: Result) -> None:
    """The assembled payload against its typed model, once, as its file will hold it: a
    mismatch is a bug in mlb (a writer and the model disagree), not bad input, so it is
    raised here rather than found by the next reader of the file."""
    doc = json.loads(json.dumps(_jsonable(result.data)))
    try:
        Data.model_validate(doc)
    except ValidationError as exc:
        raise RuntimeError(one_line(exc, "throughput result: data", doc)) from None


__all__ = ["Ending", "Note", "Records", "RunFacts", "SizeRecord", "Telemetry", "check_payload"]
