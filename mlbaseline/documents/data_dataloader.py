"""The `data` payload of a `dataloader` result (written by `runners/dataloader.py`).

`_describe_run` writes the run's description once the source is open; `_finish` always writes
`settings`, `corrupt` and `persistent_workers_effect`, and the knee, pin-memory effect,
recommendation and I/O only when a sweep was planned. An interrupted run therefore has only
part of it, so everything else is optional. Maps keyed by a worker count or a batch size are
written with text keys (JSON) and read back as ints. NaN medians are written as null.
"""

from __future__ import annotations

from typing import Literal

from mlbaseline.documents import data_throughput
from mlbaseline.documents.base import FiniteFloat, Strict
from mlbaseline.documents.data_throughput import Determinism

Ci = list[FiniteFloat | None]


class Generated(Strict):
    """The synthetic image tree `open_source` made (and deleted) for the run."""

    images: int
    image_size: int
    format: str
    classes: int
    bytes: int
    location: str
    deleted: bool = False


class Dataset(data_throughput.Dataset):
    """The source's description (`dataloader_passes.open_source`): the workload's own dataset
    (`workloads.factory`, as in a throughput result), an image folder, or the generated tree;
    with how it is timed."""

    split: Literal["stages", "whole-sample"]
    classes: int | None = None
    generated: Generated | None = None


class Loader(Strict):
    shuffle: bool
    drop_last: bool
    seed: int
    sampler: str
    prefetch_factor: int | None
    worker_init_fn: str


class Rate(Strict):
    median: FiniteFloat | None
    ci: Ci


class Io(Strict):
    """`/proc/<pid>/io` counters of the pass (`measure.io.IoCounters`)."""

    rchar: int
    read_bytes: int


class Setting(Strict):
    """One row of the sweep (`dataloader_passes.pass_row`), or a setting whose loader failed
    (`dataloader._failed_row`: the identity, `status: failed` and the error only)."""

    key: str
    workers: int
    pin_memory: bool
    cache: Literal["cold", "warm"]
    status: Literal["ok", "failed"]
    error: str | None = None
    batches: int | None = None
    warmup_batches: int | None = None
    samples: int | None = None
    failed_samples: int | None = None
    samples_per_s: Rate | None = None
    batches_per_s: Rate | None = None
    stage_median_s: dict[str, FiniteFloat | None] | None = None
    startup_s: FiniteFloat | None = None
    cpu_util: FiniteFloat | None = None
    system_cpu_percent: FiniteFloat | None = None
    io: Io | None = None
    bytes_read_by_dataset: int | None = None
    bytes_per_sample: FiniteFloat | None = None
    distinct_samples: int | None = None
    wall_s: FiniteFloat | None = None
    split_coverage: FiniteFloat | None = None


class CorruptFile(Strict):
    path: str | None
    index: int
    stage: str
    error: str
    times_seen: int


class Corrupt(Strict):
    count: int
    files: list[CorruptFile]


class PersistentEffect(Strict):
    """Epoch start-up with persistent_workers off and on, at one worker count."""

    workers: int
    epochs: int
    off_s: FiniteFloat | None
    on_s: FiniteFloat | None
    saved_s: FiniteFloat | None


class Coverage(Strict):
    samples_touched: int
    samples_total: int
    share: FiniteFloat | None
    classes_touched: int | None
    classes_total: int | None
    sampler: Literal["shuffled", "sequential"]


class RuleOfThumb(Strict):
    formula: str
    cpus: int
    value: int


class Knee(Strict):
    """`dataloader_analysis.knee_summary`; the best figures only when a knee was found."""

    workers: int | None
    tolerance: FiniteFloat
    pin_memory: bool
    rates: dict[int, FiniteFloat | None]
    cpu_util: dict[int, FiniteFloat | None]
    rule_of_thumb: RuleOfThumb
    samples_per_s: FiniteFloat | None = None
    best_workers: int | None = None
    best_samples_per_s: FiniteFloat | None = None


class PinEffect(Strict):
    """`dataloader_analysis.pin_memory_effect`: not applicable on CPU (with the reason), or
    the host→device copy with pin_memory off and on at the knee."""

    applicable: bool
    reason: str | None = None
    workers: int | None = None
    h2d_off_s: FiniteFloat | None = None
    h2d_on_s: FiniteFloat | None = None
    saved_s: FiniteFloat | None = None
    pin_memory_s: FiniteFloat | None = None
    note: str | None = None


class IoRow(Strict):
    rchar: int | None = None
    read_bytes: int | None = None
    bytes_read_by_dataset: int


class WaitShare(Strict):
    share: FiniteFloat
    steps: int
    level: str


class InputBound(Strict):
    """`dataloader_analysis.input_bound_check`'s data, from a throughput result."""

    per_batch_size: dict[int, WaitShare]
    throughput_num_workers: int | None
    message: str
    batch_size: int | None = None
    share: FiniteFloat | None = None
    level: str | None = None


class Data(Strict):
    """`data` of a dataloader result."""

    settings: list[Setting]
    corrupt: Corrupt
    persistent_workers_effect: list[PersistentEffect]
    dataset: Dataset | None = None
    split: Literal["stages", "whole-sample"] | None = None
    batch_size: int | None = None
    device: str | None = None
    usable_cpus: int | None = None
    workers: list[int] | None = None
    pin_memory_settings: list[bool] | None = None
    persistent_workers: bool | None = None
    cold_cache: bool | None = None
    decoder: str | None = None
    loader: Loader | None = None
    determinism: Determinism | None = None
    confidence: FiniteFloat | None = None
    ci_method: str | None = None
    notes: dict[str, str] | None = None
    coverage: Coverage | None = None
    knee: Knee | None = None
    pin_memory_effect: PinEffect | None = None
    recommendation: str | None = None
    io: dict[str, IoRow] | None = None
    input_bound: InputBound | None = None
